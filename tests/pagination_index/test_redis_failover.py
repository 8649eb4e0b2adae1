"""A checkpointed batch survives a Redis failover (issue 43): the consumer WAITs for replicas before
it moves a checkpoint. A primary, a replica and three Sentinels of the test's own; the replica is
paused while 200 comments are written and consumed, then the primary is killed and the Sentinels
promote the replica, which never got those writes (its replication link cut by nft: root, as CI runs)."""
from __future__ import annotations

import shutil
import time

import pytest
from django.core.management import call_command

from pagination_index import get_index
from pagination_index.aws.retries import Backoff
from pagination_index.backends.base import IndexUnavailable
from pagination_index.stream import StreamConsumer
from tests import factories
from tests.config import index_config
from tests.pagination_index.streams import assert_index_equals_table, checkpoints, stream_arn


def use_sentinel_index(settings, sentinels, *, replicas: int, timeout: float = 0.3) -> None:
    options = dict(settings.PAGINATION_INDEX_REDIS, LOCATION=sentinels.url(1))
    sync = {**settings.PAGINATION_INDEX.get("SYNC", {}), "WAIT_REPLICAS": replicas, "WAIT_TIMEOUT_SECONDS": timeout}
    settings.PAGINATION_INDEX = index_config(BACKEND=settings.PAGINATION_INDEX_BACKENDS["redis"], OPTIONS=options,
                                             SYNC=sync)


def test_a_write_the_replicas_did_not_acknowledge_fails(settings, redis_sentinels):
    use_sentinel_index(settings, redis_sentinels, replicas=1)
    index = get_index()
    index.add_many("SKU-1", [("a" * 32, "2026-11-28T06:00:00.000000Z")])  # the replica is up: WAIT says 1
    replica = redis_sentinels.data_ports[1]
    redis_sentinels.pause(replica)
    try:
        with pytest.raises(IndexUnavailable, match="0 of 1 replicas"):
            index.add_many("SKU-1", [("b" * 32, "2026-11-28T06:00:01.000000Z")])
        with pytest.raises(IndexUnavailable, match="0 of 1 replicas"):
            index.replace("SKU-2", [("c" * 32, "2026-11-28T06:00:02.000000Z")])
    finally:
        redis_sentinels.resume(replica)
    index.add_many("SKU-1", [("b" * 32, "2026-11-28T06:00:01.000000Z")])
    assert index.count("SKU-1") == 2


@pytest.fixture
def nft():
    from tests.conftest import service_missing

    if not shutil.which("nft"):
        service_missing("nft is not installed (Debian: apt-get install nftables)")


def consume_once(**kwargs) -> None:
    """sync_index --once, which gives up after ONCE_OUTAGE_RETRIES outages (a WAIT that times out)."""
    consumer = StreamConsumer(index=get_index(), stream_arn=stream_arn(), **kwargs)
    try:
        consumer.run(once=True)
    except IndexUnavailable:
        pass


@pytest.mark.parametrize("replicas", [1, 0], ids=["wait-for-the-replica", "no-wait-loses-entries"])
@pytest.mark.django_db(transaction=True)  # an outage closes the consumer's connection
def test_a_failover_to_a_replica_that_missed_a_batch_loses_no_checkpointed_entry(
        settings, comments_table, redis_sentinels, nft, replicas):
    use_sentinel_index(settings, redis_sentinels, replicas=replicas)
    primary, replica = redis_sentinels.data_ports
    factories.seed("A", 20, seed=1)
    consume_once()
    before = checkpoints().get().sequence_number
    assert get_index().count("A") == 20

    with redis_sentinels.cut_replication(replica):
        factories.seed("A", 200, seed=2)
        consume_once(backoff=Backoff(base=0.05, cap=0.2))
        assert get_index().count("A") == 220  # on the primary
        redis_sentinels.kill(primary)  # ...which dies before the replica gets them
        # The cut lasts until the promotion: the dead primary's kernel keeps retransmitting what its
        # socket held, which a healed link would still deliver to the replica.
        assert redis_sentinels.wait_for_failover(primary) == replica
    get_index().close()
    # The old primary comes back empty (no persistence) and the Sentinels make it the new primary's
    # replica: until then a batch has no replica to wait for and the stream waits.
    redis_sentinels.start_data(primary)
    redis_sentinels.wait_until_settled(replica)

    moved = checkpoints().get().sequence_number != before
    if replicas:
        assert not moved  # WAIT saw no replica: the batch stays to be applied again
    deadline = time.monotonic() + 30
    while True:  # the first calls after the promotion may still meet the old connections
        try:
            call_command("sync_index", once=True, verbosity=0)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    if replicas:
        assert_index_equals_table("A")
        assert get_index().count("A") == 220
    else:  # what the wait prevents: the checkpoint moved past entries the new primary never had
        assert moved and get_index().count("A") == 20


def test_on_a_cluster_the_written_shards_primary_waits(settings, redis_cluster, redis_cluster_index_options):
    """Each product's transaction WAITs on its slot's primary (3 primaries, one replica each)."""
    redis_cluster.wait_until_ok()
    redis_cluster.wait_for_replicas_online()
    for replicas, fails in ((1, False), (2, True)):
        sync = {**settings.PAGINATION_INDEX.get("SYNC", {}), "WAIT_REPLICAS": replicas, "WAIT_TIMEOUT_SECONDS": 0.2}
        settings.PAGINATION_INDEX = index_config(BACKEND=settings.PAGINATION_INDEX_BACKENDS["redis"],
                                                 OPTIONS=redis_cluster_index_options, SYNC=sync)
        index = get_index()
        batch = {f"SKU-{n}": [(f"{n:032x}", "2026-11-28T06:00:00.000000Z")] for n in range(12)}  # on every primary
        if fails:
            with pytest.raises(IndexUnavailable, match="1 of 2 replicas"):
                index.apply_net(batch, {})
        else:
            index.apply_net(batch, {})
            assert index.count_many(batch) == {group: 1 for group in batch}
