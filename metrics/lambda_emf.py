"""The stream Lambda's metrics in CloudWatch's embedded metric format (aws-lambda-powertools'
Metrics): one JSON log line per invocation, which CloudWatch turns into metrics in the namespace
POWERTOOLS_METRICS_NAMESPACE (template: CornerShop, dimension service=sync-index). StreamApplyLag is
what the template's ConsumerLagAlarm watches."""
from __future__ import annotations

import functools
import logging
import os
import time

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from metrics import record_created

logger = logging.getLogger(__name__)


def report_batch_metrics(handler):
    """Wrap a DynamoDB Streams handler: after each invocation, the records applied, the records left
    for Lambda to retry (batchItemFailures) and the newest applied record's age. A metrics failure is
    logged, never raised: the batch is applied already."""
    @functools.wraps(handler)
    def reported(event, context):
        answer = handler(event, context)
        try:
            report_batch(event.get("Records") or [], len(answer.get("batchItemFailures") or []))
        except Exception:
            logger.exception("the batch's metrics could not be written")
        return answer

    return reported


def report_batch(records: list[dict], failed: int) -> None:
    emf = Metrics(namespace=os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "CornerShop"),
                  service=os.environ.get("POWERTOOLS_SERVICE_NAME", "sync-index"))
    applied = records[: len(records) - failed]
    emf.add_metric(name="RecordsApplied", unit=MetricUnit.Count, value=len(applied))
    emf.add_metric(name="RecordsFailed", unit=MetricUnit.Count, value=failed)
    if applied:
        emf.add_metric(name="StreamApplyLag", unit=MetricUnit.Seconds,
                       value=max(0.0, time.time() - record_created(applied[-1])))
    emf.flush_metrics()
