"""AWS Lambda handler for a DynamoDB Streams event source mapping: the same record-applying code as
sync_index, with Lambda keeping the checkpoints.

Set DJANGO_SETTINGS_MODULE in the function's environment (the project's settings, which declare the
sources), and deploy with FunctionResponseTypes=["ReportBatchItemFailures"]: the handler answers
{"batchItemFailures": [{"itemIdentifier": <SequenceNumber>}, ...]} naming the first record it could
not apply and every record after it, so Lambda checkpoints just before that record and retries from
it; per-item order holds because nothing after a failure is applied. A record that can never be
applied (stream.UNAPPLIABLE) is not left to Lambda's retries and on-failure destination: its groups
are marked stale in the database (stream.give_up) and the batch goes on.
"""
from __future__ import annotations

import logging
import os

logger = logging.getLogger(__name__)


def _setup_django() -> None:
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured("Set DJANGO_SETTINGS_MODULE in the Lambda function's environment to the "
                                   "project's settings module (the one that declares PAGINATION_INDEX).")
    from django.apps import apps

    if not apps.ready:
        import django

        django.setup()


def handler(event: dict, context) -> dict:
    _setup_django()
    from pagination_index import signals

    records = event.get("Records") or []
    answer = _apply(records)
    try:
        signals.lambda_batch_done.send(sender=None, records=records, failed=len(answer["batchItemFailures"]))
    except Exception:  # the batch is applied: a receiver's failure (metrics) must not make Lambda retry it
        logger.exception("a lambda_batch_done receiver failed")
    return answer


def _apply(records: list[dict]) -> dict:
    from django.db import close_old_connections, transaction

    from pagination_index import get_index, sources
    from pagination_index.sources import table_of_stream
    from pagination_index.stream import UNAPPLIABLE, apply_records, checkpoint_database, give_up

    index = get_index()
    table = table_of_stream(records[0].get("eventSourceARN", "")) if records else ""
    declared = sources.for_table(table)
    if records and not declared:
        raise RuntimeError(f"no source in PAGINATION_INDEX['SOURCES'] is declared on table {table!r}")
    close_old_connections()  # connections outlive an invocation, as they outlive a request
    try:
        try:
            with transaction.atomic():
                apply_records(index, records, declared)
            _maintain(index)
            return {"batchItemFailures": []}
        except Exception:
            logger.exception("batch of %d records failed; applying them one by one", len(records))
        for position, record in enumerate(records):
            try:
                with transaction.atomic():
                    apply_records(index, [record], declared)
            except UNAPPLIABLE as exc:
                # Never applicable: retried, it would only block the shard until Lambda discards it
                # (MaximumRetryAttempts, MaximumRecordAgeInSeconds) or the stream trims it. Its groups
                # are marked stale in the database instead, and the batch goes on.
                logger.exception("record %s cannot be applied; its groups are marked stale", _sequence_number(record))
                give_up(record, exc, declared, using=checkpoint_database(index), via="lambda")
            except Exception:
                logger.exception("record %s could not be applied", _sequence_number(record))
                return {"batchItemFailures": [{"itemIdentifier": _sequence_number(r)} for r in records[position:]]}
        return {"batchItemFailures": []}
    finally:
        close_old_connections()


def _maintain(index) -> None:
    """The backend's deferred work (the DynamoDB index's re-mark), bounded per call; its failure does
    not fail the batch, which is applied: the next invocation or sync_index finishes it. Never a
    whole-group rewrite here (its time and memory grow with the group, past a Lambda's limits): a
    group that needs one is listed for repair, which sync_index or `verify_index --repair` runs."""
    try:
        index.maintain(rewrites=False)
    except Exception:
        logger.exception("index maintenance failed; left to the next invocation")


def _sequence_number(record: dict) -> str:
    return (record.get("dynamodb") or {}).get("SequenceNumber", "")
