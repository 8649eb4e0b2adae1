"""Product pages while Sentinels fail the Redis index over (issue 43): a primary, a replica and three
Sentinels of the test's own; the primary is killed while deep pages are requested, and every answer is
a 200 or the 503 page with Retry-After (never a 500) until the promoted replica serves them again."""
import time

import pytest
from django.core.management import call_command

from tests import factories
from tests.config import index_config
from tests.pages import parse

TOTAL = 240  # 12 pages: pages 11 and 12 come from the index

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def test_deep_pages_during_a_failover_are_200_or_503(client, settings, comments_table, redis_sentinels):
    settings.PAGINATION_INDEX = index_config(BACKEND=settings.PAGINATION_INDEX_BACKENDS["redis"],
                                             OPTIONS=dict(settings.PAGINATION_INDEX_REDIS, LOCATION=redis_sentinels.url(1)))
    comments = factories.seed("SENTINEL-1", TOTAL, seed=1)
    product = factories.product("SENTINEL-1")
    call_command("rebuild_index", group=["SENTINEL-1"], verbosity=0)
    expected = [c.pk for c in comments[220:240]]
    url = product.get_absolute_url() + "?page=12"
    assert [pk for pk, _ in parse(client.get(url).content.decode())["comments"]] == expected

    primary, replica = redis_sentinels.data_ports
    assert redis_sentinels.node(primary).wait(1, 5000) == 1  # the replica has the index before the kill
    redis_sentinels.kill(primary)
    statuses = []
    deadline = time.monotonic() + 60
    promoted = False
    while time.monotonic() < deadline:  # bounded: a failover takes down-after (1 s) plus an election
        response = client.get(url)
        statuses.append(response.status_code)
        assert response.status_code in (200, 503), response.status_code
        if response.status_code == 503:
            assert response["Retry-After"]
        promoted = promoted or redis_sentinels.primary_port() == replica
        if promoted and response.status_code == 200:
            assert [pk for pk, _ in parse(response.content.decode())["comments"]] == expected
            break
        time.sleep(0.1)
    assert promoted and statuses[-1] == 200
    assert 503 in statuses  # the page really met the outage (the primary was gone for seconds)
