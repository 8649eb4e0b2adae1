"""sync_index's metrics, served on its own port (SYNC_INDEX_METRICS_PORT): records applied, apply lag
per shard, leases held, stale groups; refreshed after every poll from the consumer's checkpoints."""
from __future__ import annotations

from django.utils import timezone
from prometheus_client import start_http_server

from metrics import STALE_GROUPS, STREAM_APPLY_LAG, STREAM_LAST_POLL, STREAM_LEASES, STREAM_RECORDS

def serve(port: int, address: str = "0.0.0.0") -> None:
    """Prometheus' scrape endpoint in a daemon thread of this process."""
    start_http_server(port, addr=address)


# The shards whose lag gauge this process set: a shard it no longer holds (finished, trimmed, leased
# elsewhere) loses its gauge, or max(...) would go on reporting a shard long gone.
_lag_shards: set[str] = set()


def observe_poll(result, consumer) -> float | None:
    """Refresh the gauges after one poll; returns the largest apply lag of the shards held (None when
    none has one), for the CloudWatch heartbeat."""
    from pagination_index.models import ShardCheckpoint
    from pagination_index.stale import stale_groups

    STREAM_RECORDS.inc(result.records)
    STREAM_LAST_POLL.set_to_current_time()
    held = ShardCheckpoint.objects.using(consumer.database).filter(
        stream_arn=consumer.stream_arn, lease_owner=consumer.owner, lease_expires_at__gt=timezone.now())
    STREAM_LEASES.set(held.count())
    lags = dict(held.exclude(lag_seconds=None).values_list("shard_id", "lag_seconds"))
    for shard_id, lag in lags.items():
        STREAM_APPLY_LAG.labels(shard_id).set(lag)
    for gone in _lag_shards - set(lags):
        STREAM_APPLY_LAG.remove(gone)
    _lag_shards.clear()
    _lag_shards.update(lags)
    STALE_GROUPS.set(len(stale_groups(using=consumer.database)))
    return max(lags.values(), default=None)
