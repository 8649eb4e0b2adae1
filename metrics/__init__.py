"""Prometheus metrics of the shop (prometheus_client): the web processes' requests, index calls,
DynamoDB calls and caches, and sync_index's stream consumption (docs/deploy-aws.md, "Metrics").

Under gunicorn, PROMETHEUS_MULTIPROC_DIR (set by gunicorn.conf.py) makes every worker write its
values to files there, and /metrics (metrics.views) adds up all workers' files; sync_index serves its
own registry on SYNC_INDEX_METRICS_PORT. The stream Lambda reports through CloudWatch instead
(metrics.lambda_emf). The pagination index reports through its signals (pagination_index.signals),
connected in metrics.apps.
"""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from pagination_index.aws.errors import is_throttle

# Pages take milliseconds; a slow DynamoDB or index shows in the upper buckets before timeouts do.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

REQUEST_SECONDS = Histogram("shop_request_seconds", "Time to answer a request, by view (URL name) and status.",
                            ["view", "status"], buckets=LATENCY_BUCKETS)
INDEX_CALL_SECONDS = Histogram("pagination_index_call_seconds", "Time of a pagination index call.",
                               ["backend", "method"], buckets=LATENCY_BUCKETS)
DYNAMODB_CALLS = Counter("shop_dynamodb_calls_total", "DynamoDB and DynamoDB Streams calls, by operation and outcome "
                         "(ok, throttled, error).", ["operation", "outcome"])
DYNAMODB_RETRIES = Counter("shop_dynamodb_retries_total", "Attempts botocore retried, by operation.", ["operation"])
CACHE_LOOKUPS = Counter("shop_cache_lookups_total", "Cache lookups by cache and result (hit, miss).",
                        ["cache", "result"])
CACHE_UNAVAILABLE = Counter("shop_cache_unavailable_total", "Times Django's cache could not reach its Redis and "
                            "answered as an empty cache for a fail-fast window (shop.cache).")

# sync_index's own (served by it, never by the web processes).
STREAM_RECORDS = Counter("pagination_index_stream_records_total", "Stream records applied to the index.")
RECORDS_GIVEN_UP = Counter("pagination_index_records_given_up_total",
                           "Stream records that could not be applied (their groups marked stale), by consumer.", ["via"])
STREAM_APPLY_LAG = Gauge("pagination_index_stream_apply_lag_seconds", "Age of the newest record applied, per shard, "
                         "when it was applied.", ["shard"], multiprocess_mode="max")
STREAM_LEASES = Gauge("pagination_index_stream_leases_held", "Shard leases this consumer holds.",
                      multiprocess_mode="livesum")
# The heartbeat: when sync_index last finished a poll (a stalled or dead consumer stops moving it;
# deploy/prometheus/alerts.yml's SyncIndexStalled).
STREAM_LAST_POLL = Gauge("pagination_index_stream_last_poll_timestamp_seconds",
                         "Unix time at which sync_index last finished a poll of the stream.", multiprocess_mode="max")
STALE_GROUPS = Gauge("pagination_index_stale_groups", "Groups marked stale (to rebuild).", multiprocess_mode="max")


def observe_request(request, response, seconds: float) -> None:
    match = getattr(request, "resolver_match", None)
    view = (match.view_name if match else "") or "unmatched"
    REQUEST_SECONDS.labels(view, str(response.status_code)).observe(seconds)


def cache_lookup(cache: str, hit: bool) -> None:
    CACHE_LOOKUPS.labels(cache, "hit" if hit else "miss").inc()


def dynamodb_call(operation: str, error_code: str | None = None, retries: int = 0) -> None:
    outcome = "ok" if not error_code else "throttled" if is_throttle(error_code) else "error"
    DYNAMODB_CALLS.labels(operation, outcome).inc()
    if retries:
        DYNAMODB_RETRIES.labels(operation).inc(retries)


def instrument_client(client):
    """Count a boto3 client's calls, throttles and retries (botocore's after-call event: the retries
    botocore made are in the answer's ResponseMetadata.RetryAttempts)."""
    def after_call(parsed, model, **_):
        dynamodb_call(model.name, (parsed.get("Error") or {}).get("Code"),
                      (parsed.get("ResponseMetadata") or {}).get("RetryAttempts", 0))

    client.meta.events.register("after-call", after_call)
    return client


INDEX_METHODS = ("at", "count", "count_many", "count_newer", "count_newer_many", "range", "apply", "add_many",
                 "remove_many", "replace")


def instrument_index(index):
    """Time the index's calls by backend and method: the backend's own error funnel times each call it
    has an observer for (BaseIndex.call_observers), here the histogram's."""
    name = type(index).__name__
    index.call_observers = {method: INDEX_CALL_SECONDS.labels(name, method).observe for method in INDEX_METHODS}
    return index
