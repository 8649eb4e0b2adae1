"""One funnel for "a dependency is down": the index or DynamoDB failing under any view is a 503
with the one Retry-After setting, JSON under /api/, the 503 page elsewhere; never a 500. The
failures are real: a closed port for Redis or DynamoDB."""
import time

import pytest
from django.test import override_settings

from pagination_index.backends.redis import RedisIndex
from stack.dynamodb_local import free_port
from tests import factories
from tests.config import aws_settings, index_config

SKU = "FUNNEL-1"
pytestmark = pytest.mark.django_db


@pytest.fixture
def product(comments_table):
    factories.seed(SKU, 230, seed=31)  # 12 pages: the last two need the index
    return factories.product(SKU, "Funnel")


@pytest.fixture
def index_down(settings):
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"], "OPTIONS": dict(
        settings.PAGINATION_INDEX_REDIS, LOCATION=f"redis://127.0.0.1:{free_port()}/1")})


def test_index_down_is_json_503_under_the_api_and_the_page_elsewhere(client, product, index_down, settings):
    settings.RETRY_AFTER_SECONDS = 17
    api = client.get(f"/api/products/{SKU}/comments?offset=300")
    assert api.status_code == 503 and api["Retry-After"] == "17"
    assert api.json() == {"error": {"status": 503, "message": "The comment index is unavailable; try again shortly."}}
    page = client.get(product.get_absolute_url() + "?page=12")
    assert page.status_code == 503 and page["Retry-After"] == "17"
    assert b"the comment index" in page.content and page["Content-Type"].startswith("text/html")
    sitemap = client.get("/sitemap.xml")
    assert sitemap.status_code == 503 and sitemap["Retry-After"] == "17"


def test_dynamodb_down_is_a_503_naming_the_store(client, product, settings):
    with aws_settings(ENDPOINT_URL=f"http://127.0.0.1:{free_port()}"):
        page = client.get(product.get_absolute_url())
        api = client.get(f"/api/products/{SKU}/comments")
    assert page.status_code == 503 and page["Retry-After"] == str(settings.RETRY_AFTER_SECONDS)
    assert b"the comment store" in page.content
    assert api.status_code == 503 and api.json()["error"]["message"].startswith("The comment store is unavailable")


class CountingRedisIndex(RedisIndex):
    """The Redis backend, counting the calls that reach it."""

    calls = 0

    def count_many(self, groups):
        CountingRedisIndex.calls += 1
        return super().count_many(groups)


def test_after_an_index_failure_pages_fail_fast_without_calling_it(client, product, settings):
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": f"{__name__}.CountingRedisIndex", "OPTIONS": dict(
        settings.PAGINATION_INDEX_REDIS, LOCATION=f"redis://127.0.0.1:{free_port()}/1")})
    settings.PAGINATION_INDEX = index_config(FAIL_FAST_SECONDS=0.5)
    CountingRedisIndex.calls = 0
    assert client.get(product.get_absolute_url() + "?page=12").status_code == 503
    reached = CountingRedisIndex.calls
    assert reached >= 1
    assert client.get(product.get_absolute_url() + "?page=12").status_code == 503
    assert CountingRedisIndex.calls == reached  # failed fast: the store was not asked again
    time.sleep(0.6)
    assert client.get(product.get_absolute_url() + "?page=12").status_code == 503
    assert CountingRedisIndex.calls > reached  # the window passed: asked again
