"""Numbered pages end to end: Django views, DynamoDB Local, and the pagination index.

Tests that read the index run once per backend (the `index_backend` fixture); the comments table is
seeded once per module and shared by every run.
"""
import pytest
from django.core.management import call_command

from tests import factories
from tests.pages import parse, walk

SKU = "WALK-1"
TOTAL = 1_050  # 53 pages of 20
# Runs of equal SKs (newest-first ranks) placed across page boundaries: the fast/index seam at
# 199/200, inside an index page, ending exactly at a boundary, starting right after one, and a long
# run crossing two boundaries. DynamoDB Local orders equal SKs by its own hash, not by PK.
TIES = [(196, 203), (238, 241), (256, 259), (260, 262), (505, 545)]

pytestmark = pytest.mark.django_db(databases="__all__")  # "__all__": the PostgreSQL index runs too
# For tests about input handling, one backend is enough.
ONE_BACKEND = pytest.mark.parametrize("index_backend", ["relational-sqlite"], indirect=True)


@pytest.fixture(scope="module")
def walk_comments(module_table):
    return factories.seed(SKU, TOTAL, seed=11, ties=TIES)


@pytest.fixture
def walk_product(walk_comments, index_backend):
    product = factories.product(SKU, "Walking boots")
    call_command("rebuild_index", group=[SKU], verbosity=0)
    return product


def pks(page):
    return [pk for pk, _ in page["comments"]]


def test_walking_the_pages_visits_every_comment_once_in_order(client, walk_product, walk_comments):
    visited = walk(client, walk_product.get_absolute_url())
    assert len(visited) == 53
    seen = [pk for _, page in visited for pk in pks(page)]
    assert seen == [c.pk for c in walk_comments]
    assert [page["status"] for _, page in visited] == [(n, 53) for n in range(1, 54)]


def test_every_page_fetched_directly_equals_its_slice(client, walk_product, walk_comments):
    expected = [c.pk for c in walk_comments]
    for number in range(1, 54):
        url = walk_product.get_absolute_url() + (f"?page={number}" if number > 1 else "")
        response = client.get(url)
        assert response.status_code == 200
        assert pks(parse(response.content.decode())) == expected[(number - 1) * 20 : number * 20], number


def test_seam_between_fast_and_index_paths(client, walk_product, walk_comments):
    page10 = client.get(walk_product.get_absolute_url() + "?page=10")
    page11 = client.get(walk_product.get_absolute_url() + "?page=11")
    assert page10.context_data["page_obj"].served_by == "fast"
    assert page11.context_data["page_obj"].served_by == "index"
    both = pks(parse(page10.content.decode())) + pks(parse(page11.content.decode()))
    assert both == [c.pk for c in walk_comments[180:220]]
    assert len(set(both)) == 40


def test_data_sk_is_the_items_sort_key(client, walk_product, walk_comments):
    page = parse(client.get(walk_product.get_absolute_url() + "?page=27").content.decode())
    assert page["comments"] == [(c.pk, c.sk) for c in walk_comments[520:540]]


def test_page_html_contract(client, walk_product):
    response = client.get(walk_product.get_absolute_url() + "?page=12")
    html = response.content.decode()
    page = parse(html)
    assert page["canonical"] == f"http://testserver/products/{SKU}/?page=12"
    assert '<nav class="pagination"' in html
    assert page["status"] == (12, 53)
    assert "&lt;b&gt;not bold&lt;/b&gt;" in html and "<b>not bold</b>" not in html
    pager = set(page["pager"])
    assert {f"/products/{SKU}/", f"/products/{SKU}/?page=11", f"/products/{SKU}/?page=13",
            f"/products/{SKU}/?page=53"} <= pager
    first = parse(client.get(walk_product.get_absolute_url()).content.decode())
    assert first["canonical"] == f"http://testserver/products/{SKU}/"


@ONE_BACKEND
def test_page_one_redirects_to_the_bare_url(client, walk_product):
    response = client.get(walk_product.get_absolute_url() + "?page=1")
    assert response.status_code == 301
    assert response["Location"] == f"/products/{SKU}/"


@ONE_BACKEND
@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", "2e3", "", "9" * 40, "54", "02", " 2", "+2", "2.0", "0x10"])
def test_bad_page_values_are_404(client, walk_product, value):
    response = client.get(walk_product.get_absolute_url(), {"page": value})
    assert response.status_code == 404
    assert b"Page not found" in response.content


@ONE_BACKEND
def test_repeated_page_parameter_is_404(client, walk_product):
    assert client.get(walk_product.get_absolute_url() + "?page=2&page=3").status_code == 404


def test_unknown_product_is_404(client):
    assert client.get("/products/NO-SUCH-SKU/").status_code == 404


def test_product_without_comments(client, module_table):
    product = factories.product("EMPTY-1")
    response = client.get(product.get_absolute_url())
    assert response.status_code == 200
    assert b"No comments yet" in response.content
    assert parse(response.content.decode())["status"] == (1, 1)
    assert client.get(product.get_absolute_url() + "?page=2").status_code == 404


def test_short_product_has_exact_page_count_without_the_index(client, module_table):
    product = factories.product("SHORT-1")
    factories.seed("SHORT-1", 45, seed=3)
    response = client.get(product.get_absolute_url() + "?page=3")
    assert response.status_code == 200
    assert parse(response.content.decode())["status"] == (3, 3)
    assert len(parse(response.content.decode())["comments"]) == 5


def test_catalogue_lists_products_with_counts(client, walk_product):
    factories.product("EMPTY-2", "An empty thing")
    html = client.get("/").content.decode()
    assert f'href="/products/{SKU}/"' in html
    assert "1,050" in html and "An empty thing" in html


def test_unicode_sku_pages(client, module_table, index_backend):
    sku = "THÉ-茶-🫖"
    product = factories.product(sku, "Tea")
    comments = factories.seed(sku, 230, seed=5)
    call_command("rebuild_index", group=[sku], verbosity=0)
    visited = walk(client, product.get_absolute_url())
    assert [pk for _, page in visited for pk in pks(page)] == [c.pk for c in comments]


@pytest.mark.parametrize("number", [1, 2, 12, 27, 52, 53])
def test_rendered_pager_links_exactly_the_pager_function(client, walk_product, number):
    from comments.pager import page_href, pager_numbers

    path = walk_product.get_absolute_url()
    page = parse(client.get(page_href(path, number)).content.decode())
    neighbours = {page_href(path, n) for n in (number - 1, number + 1) if 1 <= n <= 53}
    assert set(page["pager"]) == {page_href(path, n) for n in pager_numbers(number, 53)}
    assert neighbours <= set(page["pager"])
