"""What the pagination index reports (pagination_index.signals), turned into the shop's metrics."""
from __future__ import annotations

import threading

from django.conf import settings

import metrics
from metrics import stream

_serving = threading.Lock()
_served_ports: set[int] = set()


def index_loaded(sender, *, index, **kwargs) -> None:
    metrics.instrument_index(index)


def aws_client_created(sender, *, client, **kwargs) -> None:
    if sender in ("dynamodb", "dynamodbstreams"):
        metrics.instrument_client(client)


def aws_call_answered(sender, *, error_code, retries, **kwargs) -> None:
    metrics.dynamodb_call(sender, error_code, retries)


def consumer_started(sender, *, consumer, **kwargs) -> None:
    """sync_index: its own scrape endpoint on SYNC_INDEX_METRICS_PORT (once per process)."""
    port = settings.SYNC_INDEX_METRICS_PORT
    with _serving:
        if port and port not in _served_ports:
            stream.serve(port)
            _served_ports.add(port)


def stream_polled(sender, *, consumer, result, **kwargs) -> None:
    lag = stream.observe_poll(result, consumer)
    if settings.SYNC_INDEX_CLOUDWATCH_NAMESPACE:
        from metrics import cloudwatch

        cloudwatch.heartbeat(settings.SYNC_INDEX_CLOUDWATCH_NAMESPACE).poll(result.records, lag)


def lambda_batch_done(sender, *, records, failed, **kwargs) -> None:
    from metrics.lambda_emf import report_batch

    report_batch(records, failed)


def record_given_up(sender, *, record, groups, error, **kwargs) -> None:
    """A stream record the consumer could not apply (its groups are marked stale): counted, and on
    CloudWatch as the EMF metric RecordsGivenUp (the Lambda always, sync_index with
    SYNC_INDEX_CLOUDWATCH_NAMESPACE): RecordsGivenUpAlarm watches it."""
    metrics.RECORDS_GIVEN_UP.labels(sender).inc()
    if sender == "lambda":
        from metrics.lambda_emf import report_given_up

        report_given_up()
    elif settings.SYNC_INDEX_CLOUDWATCH_NAMESPACE:
        from metrics import cloudwatch

        cloudwatch.given_up(settings.SYNC_INDEX_CLOUDWATCH_NAMESPACE)
