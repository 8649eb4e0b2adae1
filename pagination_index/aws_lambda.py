"""AWS Lambda handler for a DynamoDB Streams event source mapping: the same record-applying code as
sync_index, with Lambda keeping the checkpoints.

Deploy with FunctionResponseTypes=["ReportBatchItemFailures"] (README, "Lambda"): the handler answers
{"batchItemFailures": [{"itemIdentifier": <SequenceNumber>}, ...]} naming the first record it could
not apply and every record after it, so Lambda checkpoints just before that record and retries from
it; per-item order holds because nothing after a failure is applied.
"""
from __future__ import annotations

import logging
import os

from metrics.lambda_emf import report_batch_metrics

logger = logging.getLogger(__name__)


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.apps import apps

    if not apps.ready:
        import django

        django.setup()


@report_batch_metrics
def handler(event: dict, context) -> dict:
    _setup_django()
    from django.db import close_old_connections, transaction

    from pagination_index import get_index
    from pagination_index.stream import apply_records

    records = event.get("Records") or []
    index = get_index()
    close_old_connections()  # connections outlive an invocation, as they outlive a request
    try:
        try:
            with transaction.atomic():
                apply_records(index, records)
            _maintain(index)
            return {"batchItemFailures": []}
        except Exception:
            logger.exception("batch of %d records failed; applying them one by one", len(records))
        for position, record in enumerate(records):
            try:
                with transaction.atomic():
                    apply_records(index, [record])
            except Exception:
                logger.exception("record %s could not be applied", _sequence_number(record))
                return {"batchItemFailures": [{"itemIdentifier": _sequence_number(r)} for r in records[position:]]}
        return {"batchItemFailures": []}
    finally:
        close_old_connections()


def _maintain(index) -> None:
    """The backend's deferred work (the DynamoDB index's re-mark), bounded per call; its failure does
    not fail the batch, which is applied: the next invocation or sync_index finishes it."""
    try:
        index.maintain()
    except Exception:
        logger.exception("index maintenance failed; left to the next invocation")


def _sequence_number(record: dict) -> str:
    return (record.get("dynamodb") or {}).get("SequenceNumber", "")
