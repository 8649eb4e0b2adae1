"""A consumer that reaches the checkpoint database but not the index (its host cut from Redis, issue
43) gives its shard leases up, so a consumer that reaches both takes the shards over from their
checkpoints while the cut lasts. It used to renew them on every retry, and the stream waited for the
partition to heal. The cut consumer's Redis is a port nothing listens on: every call is refused, as
across a partition that answers with resets."""
from __future__ import annotations

import threading
import time

from pagination_index import get_index
from pagination_index.backends.redis import RedisIndex
from pagination_index.models import ShardCheckpoint
from pagination_index.stream import StreamConsumer
from stack.dynamodb_local import free_port
from tests import factories
from tests.config import index_config
from tests.pagination_index.streams import assert_index_equals_table, stream_arn

LEASE = 60.0  # far longer than the test: the shards can only move if the cut consumer gives them up


def follow(consumer: StreamConsumer) -> threading.Thread:
    thread = threading.Thread(target=consumer.run, kwargs={"once": False, "poll_seconds": 0.2}, daemon=True)
    thread.start()
    return thread


def test_a_consumer_cut_from_the_index_hands_its_shards_over(settings, comments_table, transactional_db,
                                                            redis_index_options):
    settings.PAGINATION_INDEX = index_config(BACKEND=settings.PAGINATION_INDEX_BACKENDS["redis"],
                                             OPTIONS=redis_index_options)
    factories.seed("A", 12, seed=4)
    cut_off = RedisIndex({**redis_index_options, "LOCATION": f"redis://127.0.0.1:{free_port()}/1"})
    cut = StreamConsumer(index=cut_off, stream_arn=stream_arn(), lease_seconds=LEASE, owner="cut")
    standby = StreamConsumer(index=get_index(), stream_arn=stream_arn(), lease_seconds=LEASE, owner="standby")
    threads = [follow(cut)]
    try:
        deadline = time.monotonic() + 30  # the cut consumer leases the shard first, and fails on it
        while not ShardCheckpoint.objects.filter(lease_epoch__gt=0).exists():
            assert time.monotonic() < deadline, "the cut consumer never leased the shard"
            time.sleep(0.05)
        threads.append(follow(standby))
        deadline = time.monotonic() + 30
        while get_index().count("A") < 12:
            assert time.monotonic() < deadline, (
                "the shard stayed with the consumer that cannot write: "
                f"{list(ShardCheckpoint.objects.values_list('lease_owner', 'sequence_number'))}")
            time.sleep(0.1)
    finally:
        for consumer in (cut, standby):
            consumer.stop_event.set()
        for thread in threads:
            thread.join(30)
        cut_off.close()
    assert_index_equals_table("A")
    assert set(ShardCheckpoint.objects.values_list("lease_owner", flat=True)) == {""}  # both released on the way out
    assert ShardCheckpoint.objects.exclude(sequence_number="").exists()  # the standby's checkpoint

