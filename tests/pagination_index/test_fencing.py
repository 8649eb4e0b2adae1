"""Fencing tokens (issue 43): a consumer that lost a shard's lease while paused, between renewing it and
writing its batch, cannot write that batch over the newer consumer's. Leases carry an epoch, raised
whenever another owner takes them; the Redis index keeps, per product, the newest epoch applied from
each shard, and refuses an older one atomically with the write."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from pagination_index import get_index
from pagination_index.backends.base import IndexUnavailable
from pagination_index.backends.redis import RedisIndex
from pagination_index.models import ShardCheckpoint
from pagination_index.stream import StreamConsumer
from tests import factories
from tests.config import index_config
from tests.pagination_index.streams import assert_index_equals_table, delete, stream_arn

ENTRY = ("a" * 32, "2026-11-28T06:00:00.000000Z")


def test_an_older_epoch_is_refused(redis_index_options):
    index = RedisIndex(redis_index_options)
    try:
        with index.fenced({"shard-1": 2, "shard-2": 1}):
            index.add_many("SKU-1/5", [ENTRY])
        with index.fenced({"shard-1": 1}), pytest.raises(IndexUnavailable, match="epoch 1 is older than 2"):
            index.remove_many("SKU-1", [ENTRY[0]])  # the product's fence covers its rating groups
        with index.fenced({"shard-1": 2}):  # the same epoch again: a batch re-applied by its owner
            index.add_many("SKU-1", [ENTRY])
        with index.fenced({"shard-1": 1}):  # another product was never written from shard-1
            index.add_many("SKU-2", [ENTRY])
        index.remove_many("SKU-1", [ENTRY[0]])  # unfenced writes (rebuilds, repairs) pass
        assert index.count("SKU-1") == 0 and index.count("SKU-1/5") == 1 and index.count("SKU-2") == 1
    finally:
        index.close()


def test_taking_a_lease_raises_its_epoch(comments_table, db):
    factories.seed("A", 5, seed=1)
    first = StreamConsumer(index=get_index(), stream_arn=stream_arn(), lease_seconds=60)
    first.poll()
    assert ShardCheckpoint.objects.get().lease_epoch == 1
    first.poll()  # renewals keep it
    assert ShardCheckpoint.objects.get().lease_epoch == 1
    ShardCheckpoint.objects.update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    StreamConsumer(index=get_index(), stream_arn=stream_arn(), lease_seconds=60).poll()
    assert ShardCheckpoint.objects.get().lease_epoch == 2


@pytest.mark.django_db
def test_a_consumer_paused_past_its_lease_cannot_write_an_old_batch(settings, comments_table, redis_index_options):
    settings.PAGINATION_INDEX = index_config(BACKEND=settings.PAGINATION_INDEX_BACKENDS["redis"],
                                             OPTIONS=redis_index_options)
    comments = factories.seed("A", 10, seed=2)
    first = StreamConsumer(index=get_index(), stream_arn=stream_arn(), lease_seconds=60)
    batches = []
    commit = first._commit_batches
    first._commit_batches = lambda pending: batches.extend(pending) or []  # read, then "paused" before writing
    first.poll()
    assert batches and get_index().count("A") == 0

    ShardCheckpoint.objects.update(lease_expires_at=timezone.now() - timedelta(seconds=1))  # its lease lapses
    second = StreamConsumer(index=get_index(), stream_arn=stream_arn(), lease_seconds=60)
    second.poll()  # takes the shard over and applies the same 10 inserts
    for comment in comments[:4]:
        delete(comment)
    second.poll()  # ...and the newer deletes
    assert get_index().count("A") == 6

    # The first wakes up inside its transaction, as if its lease renewal had gone through just
    # before the pause, and writes its old batch (the 10 inserts) with its old epoch.
    first._hold = lambda checkpoints: {checkpoint.shard_id for checkpoint in checkpoints}
    with pytest.raises(IndexUnavailable, match="older than"):
        commit(batches)
    assert_index_equals_table("A")  # the 4 deleted comments did not come back
