"""Rating filters end to end on DynamoDB Local: numbered pages, cursors and the offset API over the
union of rating groups, for every one of the 31 rating combinations (issue 9)."""
from __future__ import annotations

import itertools
import random
from urllib.parse import urlencode

import pytest
from django.core.management import call_command

from comments import cursors
from comments.selectors import product_comment_cursor_page, product_comment_page, product_comment_slice
from comments.caching import product_caches_forget
from comments.selectors import comments_query
from pagination_index.sequence import Position, Window
from tests import factories
from tests.pages import parse, walk
from tests.config import put_shared_window, set_cache_seconds, set_pages, shared_window

SKU = "FILTER-1"
TOTAL = 2_100
# Runs of equal SKs (newest-first ranks of the whole product): each spans several ratings, so ties
# cross partitions, and the long ones cross page boundaries inside every partition and at the fast
# window's edge (rank 200 of a partition is deeper than rank 200 of the product).
TIES = [(15, 25), (196, 230), (390, 400), (600, 660), (1000, 1150), (1500, 1503), (2050, 2099)]
WEIGHTS = [9, 8, 13, 25, 45]  # like the demo data: mostly 5 and 4 stars
COMBINATIONS = [combo for size in range(1, 6) for combo in itertools.combinations(range(1, 6), size)]
PER_PAGE = 20
# The 31-combination walks use bigger pages and a smaller fast window to keep the suite quick: the
# ties still cross many page boundaries and most pages still come from the index.
WALK_PER_PAGE = 50
WALK_FAST_PAGES = 2


@pytest.fixture(scope="module")
def filter_comments(module_table):
    return factories.seed(SKU, TOTAL, seed=21, ties=TIES, rating_weights=WEIGHTS)


@pytest.fixture
def filter_product(db, filter_comments):
    product = factories.product(SKU, "Filtered kettle")
    call_command("rebuild_index", group=[SKU], verbosity=0)
    return product


def matching(comments, ratings):
    return [c.pk for c in comments if not ratings or c.rating in ratings]


def query(ratings=(), **params):
    return "?" + urlencode([("rating", r) for r in ratings] + list(params.items()))


def pks(page):
    return [pk for pk, _ in page["comments"]]


def test_there_are_31_combinations_and_the_data_has_ties_inside_each_rating(filter_comments):
    assert len(COMBINATIONS) == 31
    for rating in range(1, 6):
        sks = [c.sk for c in filter_comments if c.rating == rating]
        assert len(sks) - len(set(sks)) >= 20, rating


def numbered_pages(expected, ratings):
    """Every numbered page of a filter, fetched directly, each checked against its slice."""
    pages = -(-len(expected) // WALK_PER_PAGE)
    numbered = []
    for number in range(1, pages + 1):
        page = product_comment_page(sku=SKU, number=number, ratings=ratings)
        assert page.paginator.num_pages == pages
        assert page.served_by == ("fast" if number <= WALK_FAST_PAGES else "index")
        assert [c.pk for c in page.object_list] == expected[(number - 1) * WALK_PER_PAGE : number * WALK_PER_PAGE], number
        numbered.append(page)
    assert [c.pk for page in numbered for c in page.object_list] == expected
    return numbered


@pytest.mark.parametrize("ratings", COMBINATIONS, ids=lambda combo: "".join(map(str, combo)))
def test_numbered_pages_and_cursor_walk_visit_each_matching_comment_once_in_order(filter_product, filter_comments,
                                                                                  ratings, settings):
    set_pages(settings, WALK_PER_PAGE, WALK_FAST_PAGES)
    expected = matching(filter_comments, ratings)
    numbered = numbered_pages(expected, ratings)
    assert numbered[-1].has_more() is False
    # The cursor walk: page 1, then "Load more" (through the encoded cursor) to the end.
    seen = [c.pk for c in numbered[0].object_list]
    page = numbered[0]
    while page.has_more():
        position = cursors.decode(cursors.encode(SKU, ratings, page.resume), SKU, ratings)
        page = product_comment_cursor_page(sku=SKU, position=position, ratings=ratings)
        assert page.served_by == "cursor"
        seen += [c.pk for c in page.object_list]
    assert seen == expected


@pytest.mark.parametrize("ratings", [(3,), (1, 5), (2, 3, 4)])
def test_http_walk_of_filtered_pages_equals_the_pages_fetched_directly(client, filter_product, filter_comments,
                                                                       ratings):
    expected = matching(filter_comments, ratings)
    pages = -(-len(expected) // PER_PAGE)
    visited = walk(client, filter_product.get_absolute_url() + query(ratings))
    assert [pks(page) for _, page in visited] == [expected[i : i + PER_PAGE] for i in range(0, len(expected), PER_PAGE)]
    assert [page["status"] for _, page in visited] == [(n, pages) for n in range(1, pages + 1)]
    for number in (2, 11, pages // 2 + 1, pages):
        direct = parse(client.get(filter_product.get_absolute_url() + query(ratings, page=number)).content.decode())
        assert pks(direct) == pks(visited[number - 1][1]), number


def test_http_cursor_walk_equals_the_page_walk(client, filter_product, filter_comments):
    ratings = (2, 5)
    expected = matching(filter_comments, ratings)
    url = filter_product.get_absolute_url() + query(ratings)
    seen = []
    while url:
        response = client.get(url)
        assert response.status_code == 200
        html = response.content.decode()
        assert '<meta name="robots" content="noindex,follow">' in html
        seen += pks(parse(html))
        more = [link["href"] for link in parse(html)["links"] if "more" in (link.get("class") or "")]
        url = more[0] if more else None
    assert seen == expected


def test_api_at_random_offsets_equals_slicing_the_ordered_list(client, filter_product, filter_comments):
    rng = random.Random(5)
    for ratings in [(), (4,), (1, 3), (2, 4, 5), (1, 2, 3, 4, 5)]:
        expected = matching(filter_comments, ratings)
        for _ in range(8):
            offset = rng.choice([0, 1, 199, 200, 201, rng.randrange(len(expected))])
            limit = rng.choice([1, 7, 20, 100])
            response = client.get(f"/api/products/{SKU}/comments" + query(ratings, offset=offset, limit=limit))
            assert response.status_code == 200, response.content
            assert response["Content-Type"] == "application/json"
            body = response.json()
            assert [c["id"] for c in body["comments"]] == expected[offset : offset + limit], (ratings, offset, limit)
            assert body["total"] == len(expected)
            assert (body["next"] is None) == (offset + limit >= len(expected))
            assert (body["previous"] is None) == (offset == 0)


def test_api_next_links_and_cursors_walk_the_whole_filter(client, filter_product, filter_comments):
    ratings = (1, 4)
    expected = matching(filter_comments, ratings)
    for link in ("next", "next_cursor"):
        url, seen = f"/api/products/{SKU}/comments" + query(ratings, limit=100), []
        while url:
            body = client.get(url).json()
            seen += [c["id"] for c in body["comments"]]
            url = body[link]
        assert seen == expected, link


def test_api_unfiltered_deep_offset_and_previous(client, filter_product, filter_comments):
    expected = [c.pk for c in filter_comments]
    body = client.get(f"/api/products/{SKU}/comments?offset=1990&limit=30").json()
    assert [c["id"] for c in body["comments"]] == expected[1990:2020]
    assert body["previous"].endswith("offset=1960&limit=30")
    assert body["next"].endswith("offset=2020&limit=30")


@pytest.mark.parametrize("params", [
    "rating=0", "rating=6", "rating=a", "rating=3.0", "rating=", "rating=%203",
    "rating=3&rating=3", "rating=5&rating=3", "rating=1&rating=2&rating=2",
])
def test_bad_rating_filters_are_404_pages_and_400_api_errors(client, filter_product, params):
    assert client.get(filter_product.get_absolute_url() + "?" + params).status_code == 404
    response = client.get(f"/api/products/{SKU}/comments?" + params)
    assert response.status_code == 400 and "error" in response.json()


def test_filtered_page_one_redirects_and_past_the_end_is_404(client, filter_product, filter_comments):
    response = client.get(filter_product.get_absolute_url() + "?rating=2&rating=3&page=1")
    assert response.status_code == 301
    assert response["Location"] == f"/products/{SKU}/?rating=2&rating=3"
    pages = -(-len(matching(filter_comments, (2, 3))) // PER_PAGE)
    assert client.get(filter_product.get_absolute_url() + query((2, 3), page=pages)).status_code == 200
    assert client.get(filter_product.get_absolute_url() + query((2, 3), page=pages + 1)).status_code == 404


def test_filtered_pages_are_noindex_and_unfiltered_pages_are_not(client, filter_product):
    filtered = client.get(filter_product.get_absolute_url() + "?rating=4&page=3").content.decode()
    assert '<meta name="robots" content="noindex,follow">' in filtered
    assert parse(filtered)["canonical"] == f"http://testserver/products/{SKU}/?rating=4&page=3"
    assert "?rating=4&amp;page=4" in filtered  # pager links keep the filter
    assert 'class="more"' in filtered  # "Load more" (a cursor) on filtered pages
    plain = client.get(filter_product.get_absolute_url() + "?page=3").content.decode()
    assert "noindex" not in plain
    assert 'class="more"' not in plain  # unfiltered pages link only numbered pages (robots.txt)


def _stale_cursor(ratings):
    return cursors._signer(SKU).sign_object([0, "".join(map(str, ratings)), 20, [0] * len(ratings)], compress=True)


def _bad_cursors(ratings):
    good = cursors.encode(SKU, ratings, Position(20, {f"{SKU}/{r}": None for r in ratings}))
    other_product = cursors._signer("OTHER").sign_object([1, "".join(map(str, ratings)), 20, [0]], compress=True)
    return {
        "truncated": good[:-3], "cut in half": good[: len(good) // 2], "forged": "x" + good[1:],
        "garbage": "not-a-cursor", "empty": "", "stale format": _stale_cursor(ratings),
        "other product": other_product, "huge": "a" * 5000,
        "other filter": cursors.encode(SKU, (1,), Position(20, {f"{SKU}/1": None})),
    }, good


def test_bad_cursors_are_400_pages_and_api_errors(client, filter_product):
    bad, good = _bad_cursors((5,))
    base = filter_product.get_absolute_url()
    assert client.get(base + query((5,), cursor=good)).status_code == 200
    assert client.get(f"/api/products/{SKU}/comments" + query((5,), cursor=good)).status_code == 200
    for name, cursor in bad.items():
        page = client.get(base + query((5,), cursor=cursor))
        assert page.status_code == 400, name
        assert b"Bad request" in page.content
        api = client.get(f"/api/products/{SKU}/comments" + query((5,), cursor=cursor))
        assert api.status_code == 400, name
        assert api.json()["error"]["status"] == 400
    # The page's parameters in the order its links write them (a 301 puts them so), then its answer.
    assert client.get(base + query((5,), cursor=good, page=2), follow=True).status_code == 400


@pytest.mark.parametrize("params, status", [
    ("limit=0", 400), ("limit=101", 400), ("limit=abc", 400), ("limit=-1", 400), ("offset=-5", 400),
    ("offset=1e3", 400), ("offset=01", 400), ("offset=1&offset=2", 400), ("offset=99999", 404),
    ("offset=0&cursor=abc", 400), ("sort=asc", 400), ("offset=" + "9" * 40, 400),
])
def test_api_bad_parameters_are_json_errors(client, filter_product, params, status):
    response = client.get(f"/api/products/{SKU}/comments?" + params)
    assert response.status_code == status, response.content
    assert response.json()["error"]["status"] == status


def test_api_unknown_product_and_endpoint_and_method_are_json(client, db, module_table):
    for url, status in [("/api/products/NOPE/comments", 404), ("/api/nothing", 404)]:
        response = client.get(url)
        assert response.status_code == status and response.json()["error"]["status"] == status
    response = client.post("/api/products/NOPE/comments")
    assert response.status_code == 405 and response.json()["error"]["status"] == 405


def test_rating_statistics_come_from_the_group_counts(client, filter_product, filter_comments):
    html = client.get(filter_product.get_absolute_url()).content.decode()
    counts = {rating: sum(1 for c in filter_comments if c.rating == rating) for rating in range(1, 6)}
    for rating, count in counts.items():
        assert f'data-rating="{rating}" data-count="{count}"' in html
    average = sum(r * n for r, n in counts.items()) / TOTAL
    assert f"Average {average:.1f} out of 5" in html


def test_filtered_fast_pages_share_the_per_rating_windows(filter_product, filter_comments, settings):
    set_cache_seconds(settings, 60)
    product_caches_forget(SKU)
    page = product_comment_page(sku=SKU, number=3, ratings=(1, 2))
    assert page.served_by == "fast"
    assert [c.pk for c in page.object_list] == matching(filter_comments, (1, 2))[40:60]
    cached = shared_window(f"{SKU}/2")
    assert cached is not None and shared_window(f"{SKU}/5") is None
    # Another filter with rating 2 reads the same window: poison it and see the poison served.
    put_shared_window(f"{SKU}/2", Window(cached.items[:1], True))
    page = product_comment_page(sku=SKU, number=1, ratings=(2,))
    assert [c.pk for c in page.object_list] == [cached.items[0]["PK"]["S"]]
    product_caches_forget(SKU)  # the product's generation: its rating groups' windows go with it
    assert shared_window(f"{SKU}/2") is None
    assert product_comment_page(sku=SKU, number=11, ratings=(1, 2)).served_by == "index"


def test_api_offsets_within_the_fast_window_do_not_need_the_index(filter_product, filter_comments):
    found = product_comment_slice(sku=SKU, offset=150, limit=50, ratings=(5,))
    assert found.served_by == "fast"
    assert [c.pk for c in found.comments] == matching(filter_comments, (5,))[150:200]


@pytest.fixture
def backend_product(filter_comments, index_backend):
    product = factories.product(SKU, "Filtered kettle")
    call_command("rebuild_index", group=[SKU], verbosity=0)
    return product


@pytest.mark.django_db(databases="__all__")
@pytest.mark.parametrize("index_backend", ["relational-postgres", "redis", "files"], indirect=True)
@pytest.mark.parametrize("ratings", [(1, 4), (2, 3, 5)], ids=["14", "235"])
def test_filtered_pages_and_api_on_the_other_backends(client, backend_product, filter_comments, ratings, settings):
    """The 31-combination walk runs on SQLite; here two combinations on PostgreSQL, Redis and files,
    whose count_newer() is their own code."""
    set_pages(settings, WALK_PER_PAGE, WALK_FAST_PAGES)
    expected = matching(filter_comments, ratings)
    numbered_pages(expected, ratings)
    for offset in (0, 333, len(expected) // 2 + 7, len(expected) - 5):
        body = client.get(f"/api/products/{SKU}/comments" + query(ratings, offset=offset, limit=40)).json()
        assert [c["id"] for c in body["comments"]] == expected[offset : offset + 40], offset


def test_counts_and_newest_entries_are_as_fresh_as_the_fast_windows(filter_product, filter_comments, settings):
    """Pages, the rating bars and the deeper pages reuse each group's count and newest entry (which
    dates a page) for the sources' CACHE_SECONDS, a union's too; a post (product_caches_forget) or 0
    seconds reads the index again. A page's own boundary and comments are always read afresh."""
    from pagination_index import index

    groups, union = [SKU, f"{SKU}/5"], [f"{SKU}/4", f"{SKU}/5"]
    set_cache_seconds(settings, 60)
    product_caches_forget(SKU)
    first = {SKU: comments_query(SKU).count(), f"{SKU}/5": comments_query(SKU, [5]).count()}
    assert first == index.count_many(groups)
    deep = product_comment_page(sku=SKU, number=11)
    assert (deep.served_by, deep.paginator.count) == ("index", first[SKU])
    both = product_comment_page(sku=SKU, number=11, ratings=(4, 5))
    extra = ("zz-extra", "2099-01-01T00:00:00.000000Z")
    index.add_many(SKU, [extra])
    index.add_many(f"{SKU}/5", [extra])
    try:
        again = product_comment_page(sku=SKU, number=11)
        assert (again.paginator.count, again.newest_sk) == (first[SKU], deep.newest_sk)  # remembered
        assert again.object_list[0].pk != deep.object_list[0].pk  # its comments are read afresh: shifted by one
        union_again = product_comment_page(sku=SKU, number=11, ratings=(4, 5))
        assert (union_again.paginator.count, union_again.newest_sk) == (both.paginator.count, both.newest_sk)
        product_caches_forget(SKU)
        again = product_comment_page(sku=SKU, number=11)
        assert (again.paginator.count, again.newest_sk) == (first[SKU] + 1, extra[1])
        union_again = product_comment_page(sku=SKU, number=11, ratings=(4, 5))
        assert (union_again.paginator.count, union_again.newest_sk) == (sum(index.count_many(union).values()), extra[1])
        set_cache_seconds(settings, 0)
        index.remove_many(SKU, [extra[0]])
        assert comments_query(SKU).count() == first[SKU]
        assert product_comment_page(sku=SKU, number=11).newest_sk == deep.newest_sk
    finally:
        index.remove_many(SKU, [extra[0]])
        index.remove_many(f"{SKU}/5", [extra[0]])
        product_caches_forget(SKU)


def test_cursors_are_signed_with_a_key_of_their_own_and_survive_its_rotation(client, filter_product, settings):
    """M8: whoever reads SECRET_KEY (every process has it, the stream Lambda included) cannot forge a
    cursor; a rotated COMMENTS_CURSOR_KEY, with the old one kept as a fallback, still opens cursors
    already out in people's tabs."""
    from django.core import signing

    _, good = _bad_cursors((5,))
    page = filter_product.get_absolute_url() + query((5,), cursor=good)
    payload = [1, "5", 20, [0]]
    with_secret_key = signing.Signer(key=settings.SECRET_KEY, salt=f"{cursors.SALT}:{SKU}").sign_object(
        payload, compress=True)
    assert client.get(filter_product.get_absolute_url() + query((5,), cursor=with_secret_key)).status_code == 400
    settings.SECRET_KEY = "a-new-secret-key-changes-nothing-for-cursors-0123456789"
    assert client.get(page).status_code == 200
    old = settings.COMMENTS_CURSOR_KEY
    settings.COMMENTS_CURSOR_KEY = "rotated-cursor-key-for-this-test-only-0123456789"
    assert client.get(page).status_code == 400  # signed with a key no longer known
    settings.COMMENTS_CURSOR_KEY_FALLBACKS = [old]
    assert client.get(page).status_code == 200
    fresh = cursors.encode(SKU, (5,), Position(20, {f"{SKU}/5": None}))
    assert fresh != good  # new cursors are signed with the new key


def test_a_union_resumes_from_any_position_the_index_gives(filter_product, filter_comments):
    """position_at(offset) then after(): the slice at that offset, from the top (0: nothing asked of
    the index; it raised for a union of groups) to the last item."""
    ratings = (4, 5)
    expected = matching(filter_comments, ratings)
    items = comments_query(SKU, ratings, fast=False)
    assert items.position_at(0) == Position(0, {f"{SKU}/4": None, f"{SKU}/5": None})
    for offset in (0, 1, 199, 200, 777, len(expected) - 1):
        found = items.after(items.position_at(offset), PER_PAGE)
        assert [c.pk for c in found] == expected[offset:offset + PER_PAGE], offset
