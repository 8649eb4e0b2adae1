"""Stable page numbers (COMMENTS_PAGE_NUMBERING=stable): archive pages counted from the oldest
comment, so a new comment changes the landing page and the top of the archive only (issue 18).

The measure (`test_pages_changed_by_posts_and_a_delete`) runs once per numbering and per index
backend against DynamoDB Local: fetch every page of a product, post through the real form, sync the
index from the table's stream, fetch everything again, and count the URLs whose response changed.
"""
import re
from collections import deque
from datetime import datetime, timezone

import pytest
from django.core.management import call_command
from django.test import Client

from comments.pager import archive_numbers, archive_pager_links
from comments.store import Comment, parse_sk, put_comments
from comments.table.client import dynamodb
from comments.table.keys import table_name
from shop.models import Product
from stack.dynamodb_local import free_port
from tests import factories
from tests.pages import json_ld, parse
from tests.config import index_config

pytestmark = pytest.mark.django_db(databases="__all__")  # "__all__": the PostgreSQL index runs too
ONE_BACKEND = pytest.mark.parametrize("index_backend", ["relational-sqlite"], indirect=True)
P = 20


@pytest.fixture
def stable(settings):
    settings.COMMENTS_PAGE_NUMBERING = "stable"


def snapshot(client, urls):
    """What a cache or a crawler would see of each URL: status, redirect target, validators, body."""
    seen = {}
    for url in urls:
        response = client.get(url)
        assert response.status_code in (200, 301, 302, 404), (url, response.status_code)
        seen[url] = (response.status_code, response.get("Location"), response.get("ETag"),
                     response.get("Last-Modified"), response.get("Cache-Control"), response.content)
    return seen


def changed(before, after):
    return {url for url in before if before[url] != after[url]}


def label(path, url):
    return "landing" if url == path else int(url.rsplit("=", 1)[1])


@pytest.mark.parametrize("numbering", ["newest", "stable"])
def test_pages_changed_by_posts_and_a_delete(comments_table, index_backend, numbering, settings, cold_reads):
    """299 comments (15 pages of 20), then three posts through the form (300, 301, 302: across a
    page boundary) and a delete in the middle (on archive page 8 of stable numbering)."""
    settings.COMMENTS_PAGE_NUMBERING = numbering
    settings.COMMENTS_POSTS_PER_MINUTE = 0
    sku = "MEASURE-1"
    product = factories.product(sku, "Measured mugs")
    comments = factories.seed(sku, 299, seed=21)
    call_command("rebuild_index", group=[sku], verbosity=0)
    path = product.get_absolute_url()
    urls = [path] + [f"{path}?page={n}" for n in range(1, 19)]  # past the last page too (404s)
    reader, poster = Client(), Client(headers={"Origin": "http://testserver"})
    before = snapshot(reader, urls)
    per_post = []
    for i in range(3):
        response = poster.post(f"{path}comments/", {"author": "Ann", "rating": "4", "body": f"Post {i}"})
        assert response.status_code == 303
        call_command("sync_index", once=True, verbosity=0)
        after = snapshot(reader, urls)
        per_post.append(sorted(changed(before, after), key=urls.index))
        before = after
    # A delete in the middle: the 151st comment from the oldest (archive page 8).
    gone = comments[-151]
    dynamodb().delete_item(TableName=table_name(), Key={"PK": {"S": gone.pk}, "SK": {"S": gone.sk}})
    call_command("sync_index", once=True, verbosity=0)
    after_delete = sorted(changed(before, snapshot(reader, urls)), key=urls.index)

    labels = [[label(path, url) for url in urls_] for urls_ in per_post]
    if numbering == "stable":
        # 299 -> 300: page 16 (empty) starts redirecting to the landing page, as page 15 does;
        # 300 -> 301: page 15 is full and no longer the landing list: served from now on;
        # 301 -> 302: the landing page only (page 16 fills, still redirecting).
        assert labels == [["landing", 16], ["landing", 15], ["landing"]]
        assert all(len(urls_) <= 2 for urls_ in per_post)
        # The delete shifts archive pages 8..15 (from its own page to the newest) and the count.
        assert [label(path, url) for url in after_delete] == ["landing", *range(8, 16)]
    else:
        # Every page, every time (page 16 comes into being with the 301st comment).
        assert labels == [["landing", *range(2, 16)], ["landing", *range(2, 17)], ["landing", *range(2, 17)]]
        assert [label(path, url) for url in after_delete] == ["landing", *range(2, 17)]


# --- One product in stable numbering: what each URL serves ---------------------------------------

SKU = "STABLE-1"
TOTAL = 245  # archive pages 1..12 served (full, not the landing list); page 13 fills (redirects)


@pytest.fixture(scope="module")
def stable_comments(module_table):
    return factories.seed(SKU, TOTAL, seed=13, ties=[(99, 102), (204, 206)])


@pytest.fixture
def stable_product(stable, stable_comments, index_backend):
    product = factories.product(SKU, "Stable spoons")
    call_command("rebuild_index", group=[SKU], verbosity=0)
    return product


def archive_slice(comments, number):
    """Archive page `number`: ranked (number-1)*P .. number*P-1 from the oldest, newest first."""
    count = len(comments)
    return comments[max(0, count - number * P):count - (number - 1) * P]


def pks(page):
    return [pk for pk, _ in page["comments"]]


def head_links(html):
    return {link["rel"]: link["href"] for link in parse(html)["links"] if link["tag"] == "link" and link.get("rel")}


def test_every_archive_page_holds_its_slice_from_the_oldest(client, stable_product, stable_comments):
    for number in range(1, 13):
        response = client.get(f"/products/{SKU}/?page={number}")
        assert response.status_code == 200, number
        assert response.context_data["page_obj"].served_by == "index"  # 245 comments: beyond the fast window
        assert pks(parse(response.content.decode())) == [c.pk for c in archive_slice(stable_comments, number)]


def test_walking_from_the_landing_page_reads_every_comment(client, stable_product, stable_comments):
    """Landing (newest 20), then rel=next down the archive: pages 12, 11, ..., 1. The landing page
    shares its older comments with page 12; every other comment is on exactly one page."""
    url, seen, visited = f"/products/{SKU}/", [], []
    while url:
        response = client.get(url)
        assert response.status_code == 200, url
        page = parse(response.content.decode())
        visited.append(url)
        seen.append(pks(page))
        url = page["next"]
    assert visited == [f"/products/{SKU}/"] + [f"/products/{SKU}/?page={n}" for n in range(12, 0, -1)]
    assert seen[0] == [c.pk for c in stable_comments[:20]]
    archive = [pk for page in seen[1:] for pk in page]
    assert archive == [c.pk for c in stable_comments[5:]]  # 245 = 12 * 20 + 5: the newest 5 are on the landing page only


@ONE_BACKEND
def test_heads_titles_and_the_figures_each_page_shows(client, stable_product, stable_comments):
    landing = client.get(f"/products/{SKU}/").content.decode()
    assert head_links(landing) == {"canonical": f"http://testserver/products/{SKU}/",
                                   "next": f"http://testserver/products/{SKU}/?page=12",
                                   "stylesheet": "/static/css/shop.css", "icon": "/static/favicon.ico"}
    assert "<title>Stable spoons · Corner Shop</title>" in landing
    assert "The newest 20 of 245" in landing and 'class="rating-stats"' in landing
    assert json_ld(landing)["aggregateRating"]["ratingCount"] == 245
    assert parse(landing)["status"] is None  # no "page N of M": ?page=1 is the oldest page here

    html = client.get(f"/products/{SKU}/?page=12").content.decode()
    assert "<title>Stable spoons – comments 221-240 · Corner Shop</title>" in html
    assert head_links(html) == {"canonical": f"http://testserver/products/{SKU}/?page=12",
                                "prev": f"http://testserver/products/{SKU}/?page=13",
                                "next": f"http://testserver/products/{SKU}/?page=11",
                                "stylesheet": "/static/css/shop.css", "icon": "/static/favicon.ico"}
    data = json_ld(html)
    assert "aggregateRating" not in data and len(data["review"]) == 20
    assert data["offers"]["price"] == "9.99"  # still a valid Product
    # Nothing a post changes: no total, no rating bars, no "page N of M".
    assert "245" not in html.replace("Author 245", "") and 'class="rating-stats"' not in html
    assert parse(html)["status"] is None and "Archive page 12" in html
    oldest = client.get(f"/products/{SKU}/?page=1").content.decode()
    assert "next" not in head_links(oldest) and head_links(oldest)["prev"].endswith("?page=2")


@ONE_BACKEND
def test_redirects_and_404s(client, stable_product):
    page13 = client.get(f"/products/{SKU}/?page=13")  # filling: its 5 comments are on the landing page
    assert page13.status_code == 302 and page13["Location"] == f"/products/{SKU}/"
    assert page13["Cache-Control"] == "public, max-age=60"
    for value in ("14", "0", "01", "abc", "9" * 40):
        assert client.get(f"/products/{SKU}/", {"page": value}).status_code == 404, value
    # ?page=1 is the oldest archive page, not an alias of the landing page.
    assert client.get(f"/products/{SKU}/?page=1").status_code == 200
    # Filters keep newest-first numbering (noindex views): ?page=1 of a filter is its bare URL.
    filtered = client.get(f"/products/{SKU}/?rating=3&page=1")
    assert filtered.status_code == 301 and filtered["Location"] == f"/products/{SKU}/?rating=3"
    assert b'content="noindex,follow"' in client.get(f"/products/{SKU}/?rating=3&page=2").content


def test_a_page_equal_to_the_landing_list_redirects(client, stable, module_table):
    product = factories.product("STABLE-40")
    factories.seed("STABLE-40", 40, seed=3)  # two full pages; page 2 holds exactly the landing list
    page2 = client.get(product.get_absolute_url() + "?page=2")
    assert page2.status_code == 302 and page2["Location"] == product.get_absolute_url()
    assert client.get(product.get_absolute_url() + "?page=3").status_code == 302  # the next to fill
    assert client.get(product.get_absolute_url() + "?page=4").status_code == 404
    page1 = client.get(product.get_absolute_url() + "?page=1")
    assert page1.status_code == 200 and page1.context_data["page_obj"].served_by == "fast"  # all in one window
    assert head_links(client.get(product.get_absolute_url()).content.decode())["next"].endswith("?page=1")


@ONE_BACKEND
def test_cache_headers(client, stable_product, settings):
    settings.COMMENTS_ARCHIVE_MAX_AGE = 172800
    archive = client.get(f"/products/{SKU}/?page=5")
    assert archive["Cache-Control"] == "public, max-age=172800"
    assert archive["ETag"].startswith('"')
    assert client.get(f"/products/{SKU}/")["Cache-Control"] == "public, max-age=60"
    again = client.get(f"/products/{SKU}/?page=5", headers={"If-None-Match": archive["ETag"]})
    assert again.status_code == 304 and again["Cache-Control"] == "public, max-age=172800"


def test_full_archive_pages_keep_their_etag_across_posts(client, stable, comments_table, index_backend):
    """Posts straight into the table (no form, no throttle): 25 of them, filling a page and opening
    the next; every archive page that was served keeps its ETag, Last-Modified and bytes."""
    product = factories.product("STABLE-ETAG")
    comments = factories.seed("STABLE-ETAG", 230, seed=8)
    call_command("rebuild_index", group=["STABLE-ETAG"], verbosity=0)
    urls = [product.get_absolute_url() + f"?page={n}" for n in range(1, 12)]
    before = snapshot(client, urls)
    put_comments([Comment(pk=f"late{i:02d}", sk=f"2031-01-01T00:00:{i:02d}.000000Z", sku="STABLE-ETAG",
                          author="Late", body="Later", rating=5) for i in range(25)])
    call_command("sync_index", once=True, verbosity=0)
    after = snapshot(client, urls + [product.get_absolute_url() + "?page=12"])
    assert changed(before, after) == set()
    assert after[urls[-1]][0] == 200 and after[product.get_absolute_url() + "?page=12"][0] == 200  # filled
    assert parse_sk(comments[0].sk)  # the seed is older than the posts


# --- Sitemap ---------------------------------------------------------------------------------------

@ONE_BACKEND
def test_sitemap_lists_served_archive_pages_and_their_own_lastmod(client, stable, comments_table, index_backend):
    product = factories.product("MAP-S")
    factories.seed("MAP-S", 130, seed=5)  # archive pages 1..6 served, page 7 filling
    Product.objects.filter(pk=product.pk).update(updated_at=datetime(2019, 1, 1, tzinfo=timezone.utc))
    call_command("rebuild_index", group=["MAP-S"], verbosity=0)

    def entries(url):
        return dict(re.findall(r"<loc>(.*?)</loc>\s*<lastmod>(.*?)</lastmod>", client.get(url).content.decode()))

    pages = entries("/sitemap-comment-pages.xml")
    assert list(pages) == [f"http://testserver/products/MAP-S/?page={n}" for n in range(1, 7)]
    for url, lastmod in pages.items():  # each page's lastmod: its own newest comment
        newest = parse(client.get(url.replace("http://testserver", "")).content.decode())["comments"][0][1]
        assert lastmod == parse_sk(newest).isoformat(), url
    landing = entries("/sitemap-products.xml")["http://testserver/products/MAP-S/"]

    put_comments([Comment(pk=f"new{i:02d}", sk=f"2031-02-0{1 + i // 10}T00:00:{i:02d}.000000Z", sku="MAP-S",
                          author="A", body="B", rating=4) for i in range(11)])  # 141: page 7 fills and is served
    call_command("rebuild_index", group=["MAP-S"], verbosity=0)
    after = entries("/sitemap-comment-pages.xml")
    assert {url: after[url] for url in pages} == pages  # no old page moves
    assert after["http://testserver/products/MAP-S/?page=7"] == "2031-02-01T00:00:09+00:00"  # its newest
    assert entries("/sitemap-products.xml")["http://testserver/products/MAP-S/"] == "2031-02-02T00:00:10+00:00"
    assert landing < "2031"


# --- The pager's click graph ------------------------------------------------------------------------

def clicks_from_landing(newest: int) -> dict:
    """Breadth-first search over stable pages' links (None: the landing page; newest + 1 redirects
    to it)."""
    clicks, queue = {None: 0}, deque([None])
    while queue:
        number = queue.popleft()
        for target in archive_numbers(number, newest):
            target = None if target > newest else target
            if target not in clicks:
                clicks[target] = clicks[number] + 1
                queue.append(target)
    return clicks


@pytest.mark.parametrize("newest, depth", [(1, 1), (12, 2), (599, 7), (5_000, 9), (100_000, 13)])
def test_every_archive_page_is_reachable_from_the_landing_page(newest, depth):
    clicks = clicks_from_landing(newest)
    assert len(clicks) == newest + 1  # every archive page and the landing page
    assert max(clicks.values()) == depth


def test_archive_pager_links_only_pages_that_outlive_it():
    """Page k links older pages, its newer neighbour and the landing page: nothing that a post
    creates, so its pager is the same after every post."""
    for number in (1, 2, 37, 599):
        links = {link.href for group in archive_pager_links("/p/", number, 0) for link in group}
        assert links == {"/p/"} | {f"/p/?page={n}" for n in archive_numbers(number, 0) | {number}}
        assert max(archive_numbers(number, 0)) == number + 1
    landing = archive_pager_links("/p/", None, 599)
    assert landing[0][0].label == "Newest" and landing[0][0].current
    assert [link.number for link in landing[1]] == [599, 598, 597, 595]  # newest first


# --- What a crawler sees --------------------------------------------------------------------------

@ONE_BACKEND
def test_a_crawler_meets_no_broken_link_no_duplicate_list_and_the_sitemap_s_pages(client, stable_product,
                                                                                  stable_comments):
    """From /, following <a href> only: every link answers 200, or 302 to the landing page (the
    archive page that is filling up); every 200 is canonical to itself and shows a list of its own;
    every comment is on some page; the sitemap lists exactly the 200s."""
    from tests.crawler import crawl, path_and_query
    from tests.test_crawl import main_content

    factories.product("STABLE-NONE")
    results = crawl(client)
    landing = f"http://testserver/products/{SKU}/"
    redirects = {url: r["status"] for url, r in results.items() if r["status"] != 200}
    assert redirects == {f"{landing}?page=13": 302}
    assert client.get(f"/products/{SKU}/?page=13")["Location"] == f"/products/{SKU}/"
    ok = {url: r for url, r in results.items() if r["status"] == 200}
    for url, r in ok.items():
        assert r["page"]["canonical"] == url, url
    fingerprints = [main_content(r["html"]) for r in ok.values()]
    assert len(set(fingerprints)) == len(fingerprints)
    archive = [pk for url, r in ok.items() if "?page=" in url for pk, _ in r["page"]["comments"]]
    assert sorted(archive) == sorted(c.pk for c in stable_comments[5:])  # each once; the newest 5 on the landing page
    assert {pk for pk, _ in ok[landing]["page"]["comments"]} >= {c.pk for c in stable_comments[:5]}

    listed = set()
    for section in re.findall(r"<loc>(.*?)</loc>", client.get("/sitemap.xml").content.decode()):
        listed.update(re.findall(r"<loc>(.*?)</loc>", client.get(path_and_query(section)).content.decode()))
    assert listed == set(ok)


@ONE_BACKEND
def test_reads_per_page_landing_one_query_archive_one_lookup_and_one_query(client, stable_product, monkeypatch):
    """The landing page keeps the fast path (the newest 200 from one Query, the counts from the
    index); a deep archive page costs one index lookup between two counts, and one Query."""
    from comments.table.client import dynamodb_reads
    from pagination_index import get_index

    calls = []
    backend, reads = get_index(), dynamodb_reads()
    for target, name, label in [(backend, name, name) for name in (
            "at", "range", "count", "count_many", "count_newer", "count_newer_many")] + [(reads, "query", "Query")]:
        original = getattr(target, name)
        monkeypatch.setattr(target, name, lambda *a, _label=label, _original=original, **k: (
            calls.append(_label), _original(*a, **k))[1])

    assert client.get(f"/products/{SKU}/").status_code == 200
    landing, calls[:] = list(calls), []
    assert client.get(f"/products/{SKU}/?page=5").status_code == 200
    archive = list(calls)
    assert landing.count("Query") == 1 and not {"at", "range"} & set(landing)
    # The lookup is the boundary's entry with its neighbours (one range() of 3: ties), as for a
    # deep newest-first page; page 5 (newest-first ranks 145..164) has no tie at its edges.
    # The count is read again after the lookup and its Query (a comment indexed in between would shift
    # the page).
    assert archive == ["count", "range", "Query", "count"]


@ONE_BACKEND
@pytest.mark.parametrize("arrivals, max_age", [(1, 86400), (3, 60)])
def test_a_comment_indexed_between_the_count_and_the_lookup_does_not_shift_an_archive_page(
        client, stable, comments_table, index_backend, monkeypatch, arrivals, max_age):
    """sync_index indexes new comments while a reader is between an archive page's count and its
    boundary lookup: here at that exact moment, from inside the lookup (the backend's range(),
    wrapped to store a comment and index it first, as the stream would). One arrival: the page is
    looked up again and holds its slice from the oldest, cached for a day. A new comment on every
    attempt: the page is served with the landing page's short max-age."""
    from pagination_index import get_index

    sku = "STABLE-RACE"
    product = factories.product(sku)
    comments = factories.seed(sku, 230, seed=5)  # beyond the fast window: the index serves archive pages
    call_command("rebuild_index", group=[sku], verbosity=0)
    backend, lookup, posted = get_index(), get_index().range, []

    def range_after_a_post(group, start, stop):
        if len(posted) < arrivals:
            new = Comment(pk=f"race{len(posted):02d}", sk=f"2031-01-01T00:00:{len(posted):02d}.000000Z", sku=sku,
                          author="Racer", body="Posted during the lookup", rating=5)
            put_comments([new])
            backend.add_many(sku, [(new.pk, new.sk)])
            posted.append(new)
        return lookup(group, start, stop)

    monkeypatch.setattr(backend, "range", range_after_a_post)
    response = client.get(product.get_absolute_url() + "?page=3")
    monkeypatch.undo()
    assert response.status_code == 200 and len(posted) == arrivals
    assert response["Cache-Control"] == f"public, max-age={max_age}"
    if arrivals == 1:
        assert pks(parse(response.content.decode())) == [c.pk for c in archive_slice(comments, 3)]
        assert response.context_data["page_obj"].settled
        # The same page read again, undisturbed: the same bytes and validators.
        again = client.get(product.get_absolute_url() + "?page=3")
        assert (again.content, again["ETag"]) == (response.content, response["ETag"])
    else:
        assert not response.context_data["page_obj"].settled


@pytest.mark.django_db
def test_index_down_landing_serves_archive_is_503_unless_the_window_holds_everything(client, stable, settings,
                                                                                     stable_comments):
    """With the index unreachable (Redis on a closed port): the landing page renders from DynamoDB;
    an archive page needs the count, so it is a 503 with Retry-After, unless the product's comments
    all fit the fast window, which then gives the count too."""
    port = free_port()  # free a moment ago: nothing listens there
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"],
                                 "OPTIONS": dict(settings.PAGINATION_INDEX_REDIS, LOCATION=f"redis://127.0.0.1:{port}/1")})
    factories.product(SKU, "Stable spoons")
    small = factories.product("STABLE-SMALL")
    factories.seed("STABLE-SMALL", 45, seed=2)
    assert client.get(f"/products/{SKU}/").status_code == 200
    down = client.get(f"/products/{SKU}/?page=3")
    assert down.status_code == 503 and down["Retry-After"]
    assert client.get(small.get_absolute_url() + "?page=2").status_code == 200  # 45: pages 1, 2 served


def test_a_misspelt_numbering_is_a_system_check_error(settings):
    from comments.apps import check_page_numbering

    settings.COMMENTS_PAGE_NUMBERING = "stabel"
    assert [error.id for error in check_page_numbering()] == ["comments.E001"]
    settings.COMMENTS_PAGE_NUMBERING = "stable"
    assert check_page_numbering() == []
