"""sync_index's metrics, served on its own port (SYNC_INDEX_METRICS_PORT): records applied, apply lag
per shard, leases held, stale groups; refreshed after every poll from the consumer's checkpoints."""
from __future__ import annotations

from django.utils import timezone
from prometheus_client import start_http_server

from metrics import STALE_GROUPS, STREAM_APPLY_LAG, STREAM_LEASES, STREAM_RECORDS

# The shards this process has set a lag gauge for: a shard it no longer holds (closed, split, leased
# by another consumer) loses its gauge, or max() over the gauges would keep reporting its last lag.
_lagging_shards: set[str] = set()


def serve(port: int, address: str = "0.0.0.0") -> None:
    """Prometheus' scrape endpoint in a daemon thread of this process."""
    start_http_server(port, addr=address)


def observe_poll(result, consumer) -> None:
    from pagination_index.models import ShardCheckpoint
    from pagination_index.stale import stale_groups

    STREAM_RECORDS.inc(result.records)
    held = ShardCheckpoint.objects.using(consumer.database).filter(
        stream_arn=consumer.stream_arn, lease_owner=consumer.owner, lease_expires_at__gt=timezone.now())
    STREAM_LEASES.set(held.count())
    lags = dict(held.exclude(lag_seconds=None).values_list("shard_id", "lag_seconds"))
    for shard_id in _lagging_shards - lags.keys():
        STREAM_APPLY_LAG.remove(shard_id)
    for shard_id, lag in lags.items():
        STREAM_APPLY_LAG.labels(shard_id).set(lag)
    _lagging_shards.clear()
    _lagging_shards.update(lags)
    STALE_GROUPS.set(len(stale_groups(using=consumer.database)))
