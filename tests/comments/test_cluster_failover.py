"""A Redis Cluster loses a primary: pages whose product lives on another primary keep answering, pages
whose product's slot was on the lost one are the 503 page with Retry-After (never a 500), and all of
them come back once a replica is promoted. The cluster is the run's own (tests/services.py): a
primary is really killed, and its replica promoted with CLUSTER FAILOVER TAKEOVER."""
import time

import pytest
from django.core.management import call_command

from pagination_index.backends.redis import RedisIndex
from tests import factories
from tests.pages import parse
from tests.config import index_config

TOTAL = 240  # 12 pages: pages 11 and 12 come from the index
CANDIDATES = [f"FAILOVER-{n}" for n in range(40)]

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture
def cluster_index(settings, redis_cluster, redis_cluster_index_options):
    redis_cluster.wait_until_ok()
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"],
                                 "OPTIONS": redis_cluster_index_options})
    return RedisIndex(redis_cluster_index_options)


@pytest.fixture
def two_products(module_table, cluster_index, redis_cluster):
    """Two products whose index keys live on different primaries: (lost, kept)."""
    owners = {}
    for sku in CANDIDATES:
        owners.setdefault(redis_cluster.primary_port_of(cluster_index.key(sku)), sku)
    lost, kept = list(owners.values())[:2]
    comments = {sku: factories.seed(sku, TOTAL, seed=n) for n, sku in enumerate((lost, kept))}
    products = {sku: factories.product(sku) for sku in (lost, kept)}
    call_command("rebuild_index", group=[lost, kept], verbosity=0)
    return [(products[sku], comments[sku]) for sku in (lost, kept)]


def page(client, product, number):
    return client.get(product.get_absolute_url() + f"?page={number}")


def wait_for_page(client, product, number, seconds=15):
    deadline = time.monotonic() + seconds
    while True:
        response = page(client, product, number)
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def test_a_lost_primary_is_a_503_for_its_products_only_until_a_replica_takes_over(
        client, two_products, cluster_index, redis_cluster):
    (lost, lost_comments), (kept, kept_comments) = two_products
    expected = {product.sku: [c.pk for c in comments[220:240]] for product, comments in two_products}
    for product, _ in two_products:
        assert [pk for pk, _ in parse(page(client, product, 12).content.decode())["comments"]] == expected[product.sku]

    primary = redis_cluster.primary_port_of(cluster_index.key(lost.sku))
    replica = redis_cluster.replica_port_of(primary)
    assert redis_cluster.node(primary).wait(1, 5000) == 1  # the replica has every write before the kill
    redis_cluster.kill(primary)
    try:
        for moment in ("at once", "after the others mark it failed"):
            down = page(client, lost, 12)
            assert down.status_code == 503, moment
            assert down["Retry-After"] == "30"
            assert b"Temporarily unavailable" in down.content
            assert page(client, lost, 10).status_code == 200  # pages 1..10 come straight from DynamoDB
            up = page(client, kept, 12)
            assert up.status_code == 200, moment
            assert [pk for pk, _ in parse(up.content.decode())["comments"]] == expected[kept.sku]
            time.sleep(1.5)  # cluster-node-timeout is 1 s: the lost primary is now marked failed

        redis_cluster.node(replica).cluster("failover", "takeover")
        redis_cluster.wait_until_ok()
        assert redis_cluster.primary_port_of(cluster_index.key(lost.sku)) == replica
        for product, _ in two_products:
            back = wait_for_page(client, product, 12)
            assert back.status_code == 200
            assert [pk for pk, _ in parse(back.content.decode())["comments"]] == expected[product.sku]
    finally:
        redis_cluster.start_node(primary)  # it rejoins as the new primary's replica
        redis_cluster.wait_until_ok()
