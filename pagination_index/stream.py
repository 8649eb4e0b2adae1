"""Keeping the index in step with the table by consuming its DynamoDB Stream.

Rules (DESIGN.md, "Keeping the index in step"): every shard of the stream; a child shard only after
its parent is finished or gone; a checkpoint per shard; a batch is applied and then checkpointed,
inside one database transaction, so a crash at any point loses nothing and re-applying a batch is
harmless.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import datetime

from botocore.exceptions import ClientError
from django.db import DEFAULT_DB_ALIAS, transaction

from pagination_index import aws
from pagination_index.backends.base import BaseIndex
from pagination_index.lag import LagSampler, record_lag
from pagination_index.models import ShardCheckpoint
from pagination_index.source import records_ops

logger = logging.getLogger(__name__)


class StreamTrimmed(Exception):
    """Records this consumer had not applied are gone from the stream (past its 24 h retention)."""


def apply_records(index: BaseIndex, records: list[dict]) -> int:
    """Apply stream records to the index; returns how many ops that made. Shared with Lambda."""
    ops = records_ops(records)
    if ops:
        index.apply(ops)
    return len(ops)


def _error_code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


@dataclass
class PollResult:
    records: int = 0
    ops: int = 0
    finished_shards: list[str] = field(default_factory=list)


class StreamConsumer:
    def __init__(self, *, index: BaseIndex, stream_arn: str, batch_size: int = 1000,
                 stop_event: threading.Event | None = None):
        self.index = index
        # Checkpoints live beside a relational index (same database, same transaction); any other
        # index is written first and checkpointed after, in the default database.
        self.database = getattr(index, "using", DEFAULT_DB_ALIAS)
        self.stream_arn = stream_arn
        self.batch_size = batch_size
        self.stop_event = stop_event or threading.Event()
        self.client = aws.dynamodbstreams()
        self._iterators: dict[str, str] = {}
        self.lag = LagSampler()

    # --- shards -------------------------------------------------------------------------------
    def describe_shards(self) -> list[dict]:
        shards: list[dict] = []
        kwargs = {"StreamArn": self.stream_arn}
        while True:
            description = self.client.describe_stream(**kwargs)["StreamDescription"]
            shards.extend(description.get("Shards", []))
            last = description.get("LastEvaluatedShardId")
            if not last:
                return shards
            kwargs["ExclusiveStartShardId"] = last

    def checkpoints(self) -> dict[str, ShardCheckpoint]:
        checkpoints = ShardCheckpoint.objects.using(self.database).filter(stream_arn=self.stream_arn)
        return {cp.shard_id: cp for cp in checkpoints}

    def _checkpoint(self, shard: dict) -> ShardCheckpoint:
        checkpoint, _ = ShardCheckpoint.objects.using(self.database).get_or_create(
            stream_arn=self.stream_arn,
            shard_id=shard["ShardId"],
            defaults={"parent_shard_id": shard.get("ParentShardId", "")},
        )
        return checkpoint

    def _iterator(self, checkpoint: ShardCheckpoint) -> str:
        kwargs = {"StreamArn": self.stream_arn, "ShardId": checkpoint.shard_id}
        if checkpoint.sequence_number:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=checkpoint.sequence_number)
        else:
            kwargs["ShardIteratorType"] = "TRIM_HORIZON"
        try:
            return self.client.get_shard_iterator(**kwargs)["ShardIterator"]
        except ClientError as exc:
            if _error_code(exc) == "TrimmedDataAccessException":
                raise StreamTrimmed(
                    f"shard {checkpoint.shard_id}: records after {checkpoint.sequence_number} were trimmed "
                    "from the stream before they were applied; run `manage.py rebuild_index`"
                ) from exc
            raise

    # --- reading ------------------------------------------------------------------------------
    def poll(self) -> PollResult:
        """One pass: read every readable shard up to its current end."""
        result = PollResult()
        shards = self.describe_shards()
        known = {shard["ShardId"] for shard in shards}
        done = {shard_id for shard_id, cp in self.checkpoints().items() if cp.finished}
        pending = [shard for shard in shards if shard["ShardId"] not in done]
        while pending and not self.stop_event.is_set():
            ready = [
                shard for shard in pending
                if shard.get("ParentShardId") in (None, "") or shard["ParentShardId"] not in known
                or shard["ParentShardId"] in done
            ]
            if not ready:
                break
            for shard in ready:
                if self.stop_event.is_set():
                    break
                if self._read_shard(shard, result):
                    done.add(shard["ShardId"])
                    result.finished_shards.append(shard["ShardId"])
            pending = [shard for shard in pending if shard not in ready]
        return result

    def _read_shard(self, shard: dict, result: PollResult) -> bool:
        """Read one shard to its current end; True when the shard is closed and fully applied."""
        checkpoint = self._checkpoint(shard)
        shard_id = shard["ShardId"]
        iterator = self._iterators.pop(shard_id, None) or self._iterator(checkpoint)
        while not self.stop_event.is_set():
            try:
                response = self.client.get_records(ShardIterator=iterator, Limit=self.batch_size)
            except ClientError as exc:
                if _error_code(exc) == "ExpiredIteratorException":
                    iterator = self._iterator(checkpoint)
                    continue
                raise
            records = response.get("Records", [])
            next_iterator = response.get("NextShardIterator")
            if records or next_iterator is None:
                result.records += len(records)
                result.ops += self._commit(checkpoint, records, finished=next_iterator is None)
            if next_iterator is None:
                return True
            if not records:
                self._iterators[shard_id] = next_iterator
                return False
            iterator = next_iterator
        return False

    def _commit(self, checkpoint: ShardCheckpoint, records: list[dict], *, finished: bool) -> int:
        """Apply a batch and move the checkpoint past it, in one transaction where the store allows."""
        with transaction.atomic(using=self.database):
            ops = apply_records(self.index, records)
            if records:
                checkpoint.sequence_number = records[-1]["dynamodb"]["SequenceNumber"]
                created = records[-1]["dynamodb"].get("ApproximateCreationDateTime")
                if isinstance(created, datetime):
                    checkpoint.last_record_at = created
            checkpoint.finished = finished
            checkpoint.save()
        lag = record_lag(records[-1]["dynamodb"].get("ApproximateCreationDateTime")) if records else None
        self.lag.note(lag)
        logger.info("sync batch", extra={"fields": {
            "records": len(records), "ops": ops, "shard": checkpoint.shard_id, "finished": finished,
            "lag_seconds": None if lag is None else round(lag, 3),
        }})
        return ops

    def run(self, *, once: bool, poll_seconds: float = 1.0, on_poll=None) -> PollResult:
        """Drain to the current end (once) or follow until stop_event is set."""
        total = PollResult()
        while not self.stop_event.is_set():
            result = self.poll()
            total.records += result.records
            total.ops += result.ops
            total.finished_shards += result.finished_shards
            if not result.records:
                self.lag.note(0.0)  # caught up: nothing is waiting
            self.lag.flush(force=once and not result.records)
            if on_poll:
                on_poll(result)
            if once:
                if not result.records and not result.finished_shards:
                    break
                continue
            if not result.records:
                self.stop_event.wait(poll_seconds)
        return total
