"""Unknown query parameters (M2): a 301 to the canonical URL before the view does any work, so the
caches only ever see one URL per page. DynamoDB's reads are counted at the strict endpoint, the
cache's entries in Redis (the production cache), a deep page's index read in the relational index's
queries."""
import pytest
from django.core.management import call_command

from tests import factories

SKU = "CANON-1"
DEEP = f"/products/{SKU}/?page=12"  # past the fast window: the index and one Query

pytestmark = pytest.mark.usefixtures("strict_dynamodb_settings")


@pytest.fixture
def deep_product(db, comments_table):
    factories.product(SKU, "Canonical kettle")
    factories.seed(SKU, 260, seed=3)
    call_command("rebuild_index", group=[SKU], verbosity=0)


def junk(i: int) -> str:
    """120 ways of asking for page 12 that differ only in parameters the page does not read."""
    return [f"{DEEP}&x={i}", f"{DEEP}&utm_source=mail&utm_campaign={i}", f"/products/{SKU}/?fbclid={i}&page=12",
            f"{DEEP}&page_size={i}", f"{DEEP}&&", f"{DEEP}&rating%5B%5D={i}"][i % 6]


def test_junk_parameters_cost_no_read_and_no_cache_entry(client, deep_product, strict_endpoint, redis_cache,
                                                         django_assert_max_num_queries):
    assert client.get(DEEP).status_code == 200
    strict_endpoint.clear_requests()
    entries = set(redis_cache.keys("*"))
    with django_assert_max_num_queries(0):  # the relational index is never asked either
        for i in range(120):
            response = client.get(junk(i))
            assert (response.status_code, response["Location"]) == (301, DEEP), junk(i)
    assert strict_endpoint.requests() == []  # no DynamoDB request at all
    assert set(redis_cache.keys("*")) - entries == set()
    assert client.get(DEEP).status_code == 200  # where the redirects lead


def test_known_parameters_are_put_in_the_order_the_pages_links_write_them(client, deep_product):
    moved = client.get(f"/products/{SKU}/?page=2&rating=5&rating=4&x=1")
    assert (moved.status_code, moved["Location"]) == (301, f"/products/{SKU}/?rating=5&rating=4&page=2")
    assert client.get(moved["Location"]).status_code == 404  # the view's own answer to an unsorted filter
    assert client.get(f"/products/{SKU}/?rating=4&rating=5&page=2").status_code == 200  # canonical: no redirect
    assert client.get(f"/?page=2&x=1")["Location"] == "/?page=2"
    assert client.get(f"/products/{SKU}/?utm_source=x")["Location"] == f"/products/{SKU}/"
    for path in ("/healthz?x=1", "/readyz?x=1", "/robots.txt?x=1", "/sitemap.xml?x=1"):
        assert client.get(path).status_code == 301, path
    # Only reads are redirected: a form's POST keeps its URL.
    assert client.post(f"/products/{SKU}/comments/?x=1", {"body": ""}).status_code != 301
