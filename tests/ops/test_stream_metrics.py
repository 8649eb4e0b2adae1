"""sync_index's per-shard lag gauges follow the shards it holds (issue 42): a shard that closed or
went to another consumer loses its gauge, so max() over them is the lag of shards being read."""
from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from metrics.stream import observe_poll
from pagination_index.models import ShardCheckpoint

LAG = "pagination_index_stream_apply_lag_seconds"


@pytest.mark.django_db
def test_a_shard_no_longer_held_loses_its_lag_gauge():
    consumer = SimpleNamespace(database="default", stream_arn="arn:test:stream/1", owner="me")
    later = timezone.now() + timedelta(minutes=5)
    for shard, lag in (("shard-a", 3.0), ("shard-b", 900.0)):
        ShardCheckpoint.objects.create(stream_arn=consumer.stream_arn, shard_id=shard, lease_owner="me",
                                       lease_expires_at=later, lag_seconds=lag)
    observe_poll(SimpleNamespace(records=0), consumer)
    assert REGISTRY.get_sample_value(LAG, {"shard": "shard-b"}) == 900.0
    ShardCheckpoint.objects.filter(shard_id="shard-b").update(lease_owner="another consumer")  # or closed
    observe_poll(SimpleNamespace(records=0), consumer)
    assert REGISTRY.get_sample_value(LAG, {"shard": "shard-b"}) is None
    assert REGISTRY.get_sample_value(LAG, {"shard": "shard-a"}) == 3.0
    ShardCheckpoint.objects.all().delete()
    observe_poll(SimpleNamespace(records=0), consumer)
    assert REGISTRY.get_sample_value(LAG, {"shard": "shard-a"}) is None
