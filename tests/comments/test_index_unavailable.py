"""A failing index is an answer, not a crash: with Redis unreachable, pages 1..10 still render (they
come straight from DynamoDB), deeper pages are a 503 with Retry-After, the catalogue shows its counts
as "—", and service comes back by itself when Redis does. Redis is really unreachable here: a closed
port, or a redis-server of the test's own that it stops and starts again."""

import pytest
from django.core.management import call_command

from pagination_index import IndexUnavailable, get_index
from stack.dynamodb_local import free_port
from tests import factories
from tests.pages import parse
from tests.config import index_config

SKU = "DOWN-1"
TOTAL = 260  # 13 pages: 10 fast ones, 3 from the index

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def down_comments(module_table):
    return factories.seed(SKU, TOTAL, seed=21)


@pytest.fixture
def product(down_comments):
    return factories.product(SKU, "Sometimes unreachable")


@pytest.fixture
def use_redis_at(settings):
    """Point the index (a RedisIndex) at the Redis on `port`."""

    def point(port: int) -> None:
        settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"],
                                     "OPTIONS": dict(settings.PAGINATION_INDEX_REDIS, LOCATION=f"redis://127.0.0.1:{port}/1")})

    return point


def assert_degraded(client, product):
    """What a shopper sees while the index is unreachable."""
    first = client.get(product.get_absolute_url())
    assert first.status_code == 200
    assert first.context_data["page_obj"].count_is_estimate
    assert len(parse(first.content.decode())["comments"]) == 20
    assert client.get(product.get_absolute_url() + "?page=10").status_code == 200
    deep = client.get(product.get_absolute_url() + "?page=11")
    assert deep.status_code == 503
    assert deep["Retry-After"] == "30"
    assert b"Temporarily unavailable" in deep.content
    catalogue = client.get("/")
    assert catalogue.status_code == 200
    assert "—" in catalogue.content.decode()


def test_closed_port(client, product, use_redis_at):
    use_redis_at(free_port())
    with pytest.raises(IndexUnavailable):
        get_index().count(SKU)
    with pytest.raises(IndexUnavailable):
        get_index().add_many(SKU, [("a", "2021-01-01T00:00:00.000000Z")])
    assert_degraded(client, product)


def test_stopped_server_then_recovery(client, product, down_comments, use_redis_at, redis_server):
    use_redis_at(redis_server.port)
    call_command("rebuild_index", group=[SKU], verbosity=0)
    expected = parse(client.get(product.get_absolute_url() + "?page=12").content.decode())["comments"]
    assert expected == [(c.pk, c.sk) for c in down_comments[220:240]]

    redis_server.stop()
    assert_degraded(client, product)

    redis_server.start()  # same port, same dump file: the index is back as it was
    page = client.get(product.get_absolute_url() + "?page=12")
    assert page.status_code == 200
    assert parse(page.content.decode())["comments"] == expected
    assert not client.get(product.get_absolute_url()).context_data["page_obj"].count_is_estimate
    assert "260" in client.get("/").content.decode()


def test_a_product_the_index_has_not_built_yet_is_503_past_its_window_never_404(client, product, settings):
    """As while the index moves to another backend (docs/library/upgrading.md): the table holds the
    product's 260 comments, the new index none. The first pages come from the table; a deeper page is
    a 503 with Retry-After, so a crawler keeps the URL, never a 404 that would drop it."""
    settings.PAGINATION_INDEX = index_config(OPTIONS={"DATABASE": "default"})  # an index of its own, empty
    get_index().replace(SKU, [])
    first = client.get(product.get_absolute_url())
    assert first.status_code == 200 and len(parse(first.content.decode())["comments"]) == 20
    assert first.context_data["page_obj"].count_is_estimate
    assert client.get(product.get_absolute_url() + "?page=10").status_code == 200
    deep = client.get(product.get_absolute_url() + "?page=12")
    assert deep.status_code == 503 and deep["Retry-After"] == "30"
    call_command("rebuild_index", group=[SKU], verbosity=0)
    assert client.get(product.get_absolute_url() + "?page=12").status_code == 200
    assert client.get(product.get_absolute_url() + "?page=14").status_code == 404  # past the end, now known
