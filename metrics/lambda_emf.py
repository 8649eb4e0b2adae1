"""The stream Lambda's metrics in CloudWatch's embedded metric format (aws-lambda-powertools'
Metrics): one JSON log line per invocation, which CloudWatch turns into metrics in the namespace
POWERTOOLS_METRICS_NAMESPACE (template: CornerShop, dimension service=sync-index). StreamApplyLag is
what the template's ConsumerLagAlarm watches."""
from __future__ import annotations

import os
import time

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from pagination_index.stream import record_created_at


def report_batch(records: list[dict], failed: int) -> None:
    """After each invocation of the stream handler (pagination_index.signals.lambda_batch_done): the
    records applied, the records left for Lambda to retry (batchItemFailures) and the newest applied
    record's age. The handler logs a failure here, never raises it: the batch is applied already."""
    emf = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "CornerShop"),
                  service=os.environ.get("POWERTOOLS_SERVICE_NAME", "sync-index"))
    applied = records[: len(records) - failed]
    emf.add_metric(name="RecordsApplied", unit=MetricUnit.Count, value=len(applied))
    emf.add_metric(name="RecordsFailed", unit=MetricUnit.Count, value=failed)
    created = record_created_at(applied[-1]) if applied else None
    if created is not None:
        emf.add_metric(name="StreamApplyLag", unit=MetricUnit.Seconds, value=max(0.0, time.time() - created.timestamp()))
    emf.flush_metrics()


def report_given_up() -> None:
    """A record the handler could not apply and gave up on (its groups marked stale): RecordsGivenUp,
    which an alarm can watch (any, ever, is a group to rebuild)."""
    emf = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "CornerShop"),
                  service=os.environ.get("POWERTOOLS_SERVICE_NAME", "sync-index"))
    emf.add_metric(name="RecordsGivenUp", unit=MetricUnit.Count, value=1)
    emf.flush_metrics()
