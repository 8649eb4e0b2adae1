"""Keeping the index in step with the table by consuming its DynamoDB Stream.

Rules: every shard of the stream; a child shard only after its parent is finished or gone (so each
item's changes apply in order); a checkpoint per shard; a batch is applied and then checkpointed,
inside one database transaction when the index lives in a database, so a crash at any point loses
nothing and re-applying a batch is harmless (every op is idempotent). A shard is read only under
its lease (leases.py), so two consumers can run for failover. What a record means for the index is
the source's business (settings.PAGINATION_INDEX_SOURCE).
"""
from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.utils import timezone

from aws.retries import Backoff
from pagination_index import get_source
from pagination_index.backends.base import BaseIndex, IndexUnavailable
from pagination_index.fences import apply_fenced
from pagination_index.lag import LagSampler, lag_seconds
from pagination_index.leases import (
    LeaseLost,
    lease_acquire,
    lease_hold,
    lease_release,
    leases_renew,
    leases_take,
    new_owner_id,
)
from pagination_index.models import ShardCheckpoint, StaleGroup
from pagination_index.sources import BaseSource
from pagination_index.stale import stale_groups_mark

logger = logging.getLogger(__name__)

RETRYABLE_CODES = frozenset({
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "LimitExceededException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
})
RETRYABLE_ERRORS = (EndpointConnectionError, ConnectionClosedError, ConnectTimeoutError, ReadTimeoutError)
# With --once, an index or database outage is waited out this many times before the run fails;
# following, it is waited out for as long as it lasts.
ONCE_OUTAGE_RETRIES = 5


class Stopped(Exception):
    """The stop event was set while waiting to retry."""


def apply_records(index: BaseIndex, records: list[dict], source: BaseSource | None = None) -> int:
    """Apply stream records to the index; returns how many ops that made. Shared with Lambda."""
    ops = (source or get_source()).records_ops(records)
    if ops:
        apply_fenced(index, ops, using=checkpoint_database(index))  # groups being rebuilt: journaled
    return len(ops)


def checkpoint_database(index: BaseIndex) -> str:
    """Checkpoints (and leases, and stale marks) live in the index's own database when it has one,
    so one transaction covers a batch and its checkpoint; any other index is written first and
    checkpointed after, in the default database."""
    return index.database_alias or DEFAULT_DB_ALIAS


def record_created_at(record: dict) -> datetime | None:
    """ApproximateCreationDateTime: a datetime from boto3, epoch seconds in a Lambda event."""
    created = record["dynamodb"].get("ApproximateCreationDateTime")
    if isinstance(created, (int, float)):
        return datetime.fromtimestamp(created, tz=dt_timezone.utc)
    return created if isinstance(created, datetime) else None


def _stream_table(stream_arn: str) -> str:
    """The table part of a stream ARN (arn:...:table/<name>)."""
    return stream_arn.split("/stream/", 1)[0]


def _error_code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


@dataclass
class PollResult:
    records: int = 0
    ops: int = 0
    finished_shards: list[str] = field(default_factory=list)
    trimmed: list[str] = field(default_factory=list)  # what was lost, one line per loss
    leased_elsewhere: set[str] = field(default_factory=set)  # shards another consumer holds
    listing_due: bool = False  # shards finished whose children the next poll's full listing brings


@dataclass
class Turn:
    """One shard's turn within a poll: its checkpoint, where reading goes on, what it has spent."""

    checkpoint: ShardCheckpoint
    iterator: str | None
    calls: int = 0
    empties: int = 0
    lost: bool = False  # a loss was reported in this turn already
    delivered: bool = False  # records came in this turn


class StreamConsumer:
    # How AWS's documented limits shape reading ("DynamoDB Streams: Reading and processing a stream",
    # DescribeStream and GetRecords in the API reference): DescribeStream is limited to 10 calls a
    # second per stream, so the shard map is cached, refreshed in full every 30-60 s and grown by
    # asking only for a finished shard's children (ShardFilter CHILD_SHARDS); GetRecords is limited
    # to 5 calls a second per shard, so one shard is read at most every `pacing` seconds.
    map_refresh_seconds = (30.0, 60.0)
    pacing = 0.2
    # GetRecords calls one shard may make per poll before the others get their turn.
    shard_budget = 10
    # An open shard may answer empty pages before its records: read on through this many in a row
    # (one, for a shard whose last turn already ended on empty pages).
    empty_reads = 5
    # Finished shards per poll whose children are asked for alone (ShardFilter CHILD_SHARDS); past
    # that, the next poll lists the stream in full.
    child_calls_per_poll = 2
    finished_checkpoint_keep = timedelta(hours=48)

    def __init__(self, *, index: BaseIndex, stream_arn: str, batch_size: int = 1000,
                 stop_event: threading.Event | None = None, owner: str | None = None,
                 lease_seconds: float = 30.0, backoff: Backoff | None = None,
                 source: BaseSource | None = None, workers: int = 4):
        self.index = index
        self.source = source or get_source()
        self.database = checkpoint_database(index)
        self.stream_arn = stream_arn
        self.batch_size = batch_size
        self.stop_event = stop_event or threading.Event()
        self.owner = owner or new_owner_id()
        self.lease_seconds = lease_seconds
        self.backoff = backoff or Backoff()
        self.workers = max(1, workers)
        self.client = self.source.stream_client()
        # shard id -> (iterator, the checkpoint it continues from)
        self._iterators: dict[str, tuple[str, str]] = {}
        self._map: dict[str, dict] | None = None  # shard id -> shard, in listing order
        self._map_due = 0.0
        self._idle: set[str] = set()  # shards whose last turn ended on empty pages
        self._last_read: dict[str, float] = {}
        self._checked_start = False
        self.describe_calls = 0
        self.lag = LagSampler()

    # --- calls ------------------------------------------------------------------------------------
    def _call(self, method, **kwargs):
        """One DynamoDB Streams call, retried with backoff on throttling and network errors."""
        attempt = 0
        while True:
            try:
                return method(**kwargs)
            except ClientError as exc:
                if _error_code(exc) not in RETRYABLE_CODES:
                    raise
                error = exc
            except RETRYABLE_ERRORS as exc:
                error = exc
            delay = self.backoff.delay(attempt)
            attempt += 1
            logger.warning("%s failed (%s); retry %d in %.2fs", method.__name__, error, attempt, delay)
            if self.stop_event.wait(delay):
                raise Stopped

    # --- shards -------------------------------------------------------------------------------
    def describe_shards(self, **filters) -> list[dict]:
        shards: list[dict] = []
        kwargs = {"StreamArn": self.stream_arn, **filters}
        while True:
            self.describe_calls += 1
            description = self._call(self.client.describe_stream, **kwargs)["StreamDescription"]
            shards.extend(description.get("Shards", []))
            last = description.get("LastEvaluatedShardId")
            if not last:
                return shards
            kwargs["ExclusiveStartShardId"] = last

    def _shard_map(self, checkpoints: dict[str, ShardCheckpoint], result: PollResult) -> dict[str, dict]:
        """The cached shard map; listed afresh when due, which also settles shards missing from it
        and prunes old finished checkpoints."""
        if self._map is None or time.monotonic() >= self._map_due:
            self._map = {shard["ShardId"]: shard for shard in self.describe_shards()}
            self._map_due = time.monotonic() + random.uniform(*self.map_refresh_seconds)
            self._vanished(checkpoints, result)
            self._prune()
        return self._map

    def _children(self, shard_id: str) -> list[dict]:
        """A finished shard's children (one DescribeStream call, not a listing); new ones join the map."""
        children = [shard for shard in self.describe_shards(ShardFilter={"Type": "CHILD_SHARDS", "ShardId": shard_id})
                    if shard.get("ParentShardId") == shard_id]
        for child in children:
            self._map.setdefault(child["ShardId"], child)
        return children

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

    def _shard_iterator(self, checkpoint: ShardCheckpoint) -> str:
        """An iterator just after the checkpoint (network only: workers call it)."""
        kwargs = {"StreamArn": self.stream_arn, "ShardId": checkpoint.shard_id}
        if checkpoint.sequence_number:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=checkpoint.sequence_number)
        else:
            kwargs["ShardIteratorType"] = "TRIM_HORIZON"
        return self._call(self.client.get_shard_iterator, **kwargs)["ShardIterator"]

    def _iterator(self, checkpoint: ShardCheckpoint, result: PollResult) -> str:
        try:
            return self._shard_iterator(checkpoint)
        except ClientError as exc:
            if _error_code(exc) != "TrimmedDataAccessException":
                raise
        self._trimmed(checkpoint, result, f"records after {checkpoint.sequence_number or 'the start'} were trimmed")
        return self._iterator(checkpoint, result)

    def _lost(self, result: PollResult, reason: str) -> None:
        """Records were lost: everything is stale until a full rebuild (one write: the "*" mark)."""
        stale_groups_mark(groups=[StaleGroup.ALL], reason=reason, using=self.database)
        result.trimmed.append(f"{reason}; every group needs `rebuild_index`")

    def _trimmed(self, checkpoint: ShardCheckpoint, result: PollResult, what: str) -> None:
        """Records were lost: mark the index stale, then go on from the oldest record left."""
        self._lost(result, f"stream {self.stream_arn} shard {checkpoint.shard_id}: {what} before they were applied")
        ShardCheckpoint.objects.using(self.database).filter(pk=checkpoint.pk).update(sequence_number="")
        checkpoint.sequence_number = ""

    def _vanished(self, checkpoints: dict[str, ShardCheckpoint], result: PollResult) -> None:
        """An unfinished shard missing from a listing is lost only when the stream says so: it is
        gone (AWS removes a shard only after the retention period) or trimmed past our checkpoint.
        Otherwise the listing missed it, and it is read as before."""
        for shard_id, checkpoint in checkpoints.items():
            if checkpoint.finished or shard_id in self._map:
                continue
            try:
                self._shard_iterator(checkpoint)
            except ClientError as exc:
                if _error_code(exc) not in ("ResourceNotFoundException", "TrimmedDataAccessException"):
                    raise
                self._trimmed(checkpoint, result, "the shard expired from the stream with records")
                ShardCheckpoint.objects.using(self.database).filter(pk=checkpoint.pk).update(
                    finished=True, lease_owner="", updated_at=timezone.now())
                checkpoint.finished = True
                continue
            self._map[shard_id] = {"ShardId": shard_id, "ParentShardId": checkpoint.parent_shard_id or None}

    def _prune(self) -> None:
        """Finished checkpoints older than the stream keeps any shard are of no more use."""
        ShardCheckpoint.objects.using(self.database).filter(
            finished=True, updated_at__lt=timezone.now() - self.finished_checkpoint_keep).delete()

    # --- the stream itself ------------------------------------------------------------------------
    def _follow_stream(self, result: PollResult) -> None:
        """Follow the table's LatestStreamArn: a re-created table or a re-enabled stream has a new
        stream, and whatever the old one held unread, and whatever was written between, is lost."""
        try:
            latest = self.source.stream_arn()
        except Exception as exc:  # no stream or table unreachable: keep reading what we have
            logger.warning("could not read the table's stream ARN (%s); staying on %s", exc, self.stream_arn)
            return
        if not self._checked_start:
            self._checked_start = True
            if latest == self.stream_arn and not self.checkpoints():
                table = _stream_table(latest)
                others = (ShardCheckpoint.objects.using(self.database).filter(stream_arn__startswith=f"{table}/stream/")
                          .exclude(stream_arn=latest).values_list("stream_arn", flat=True).distinct())
                if others:
                    self._lost(result, f"the table's stream is {latest}, new since the index last read "
                               f"{', '.join(sorted(others))}: changes between the two were never applied")
        if latest != self.stream_arn:
            self._lost(result, f"the table's stream changed from {self.stream_arn} to {latest}: records the old "
                       "stream held unread and changes between the two were never applied")
            lease_release(stream_arn=self.stream_arn, owner=self.owner, using=self.database)
            self.stream_arn = latest
            self._map, self._iterators, self._idle, self._last_read = None, {}, set(), {}

    def note_position(self, checkpoint: ShardCheckpoint, shard: dict) -> None:
        """Give a shard never read a checkpoint at its current end, without applying anything
        (rebuild_index: what is in the table now need not be replayed from the stream)."""
        ending = shard.get("SequenceNumberRange", {}).get("EndingSequenceNumber")
        if ending:  # closed: all of it is older than the rebuild's read
            checkpoint.sequence_number, checkpoint.finished = ending, True
        else:
            iterator = self._iterator(checkpoint, PollResult())
            while iterator:
                response = self._call(self.client.get_records, ShardIterator=iterator, Limit=1000)
                records = response.get("Records", [])
                if records:
                    checkpoint.sequence_number = records[-1]["dynamodb"]["SequenceNumber"]
                iterator = response.get("NextShardIterator") if records else None
        ShardCheckpoint.objects.using(self.database).filter(pk=checkpoint.pk).update(
            sequence_number=checkpoint.sequence_number, finished=checkpoint.finished
        )

    # --- reading ------------------------------------------------------------------------------
    def poll(self) -> PollResult:
        """One pass: every shard we can lease gets turns (up to its budget each) until each is at its
        current end, finished, or out of budget. Network calls run on `workers` threads; applying and
        checkpointing stay on this one (one database connection, batches of a shard in order)."""
        result = PollResult()
        try:
            self._poll(result)
        except Stopped:
            pass
        return result

    def _poll(self, result: PollResult) -> None:
        self._follow_stream(result)
        checkpoints = self.checkpoints()
        shard_map = self._shard_map(checkpoints, result)
        done = {shard_id for shard_id, cp in checkpoints.items() if cp.finished}
        pending = [shard for shard in shard_map.values() if shard["ShardId"] not in done]
        listed = set(shard_map)
        queued = listed | done  # shards this poll has met: a child already listed is not queued twice

        def ready(shard):
            parent = shard.get("ParentShardId")
            return not parent or parent not in shard_map or parent in done

        running: dict = {}
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sync-read") as pool:
            try:
                while not self.stop_event.is_set():
                    for shard in [s for s in pending if ready(s)]:
                        if len(running) >= self.workers:
                            break
                        pending.remove(shard)
                        turn = self._start_turn(shard, done, result)
                        if turn is not None:
                            running[pool.submit(self._fetch, turn)] = turn
                    if not running:
                        break
                    completed, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in completed:
                        turn = running.pop(future)
                        if self._take(turn, future, result):
                            running[pool.submit(self._fetch, turn)] = turn
                        elif turn.checkpoint.finished:
                            done.add(turn.checkpoint.shard_id)
                            result.finished_shards.append(turn.checkpoint.shard_id)
                            if len(result.finished_shards) > self.child_calls_per_poll:
                                # Many shards closed at once (a roll-over): one full listing next poll
                                # costs a call per 100 shards, not one per shard.
                                self._map_due, result.listing_due = 0.0, True
                                continue
                            children = self._children(turn.checkpoint.shard_id)
                            if not children:  # none listed (yet, or trimmed away): list afresh next poll
                                self._map_due, result.listing_due = 0.0, True
                            if turn.checkpoint.shard_id in listed:  # one generation per poll: bounded work
                                pending += [c for c in children if c["ShardId"] not in queued]
                                queued.update(c["ShardId"] for c in children)
            finally:
                for future in running:
                    future.cancel()

    def _start_turn(self, shard: dict, done: set[str], result: PollResult) -> Turn | None:
        checkpoint = self._checkpoint(shard)
        if checkpoint.finished:  # another consumer finished it meanwhile
            done.add(shard["ShardId"])
            return None
        if not lease_acquire(checkpoint=checkpoint, owner=self.owner, seconds=self.lease_seconds):
            self._iterators.pop(shard["ShardId"], None)
            result.leased_elsewhere.add(shard["ShardId"])
            return None
        iterator, continues_from = self._iterators.pop(shard["ShardId"], (None, None))
        if continues_from != checkpoint.sequence_number:  # someone else moved it: start afresh
            iterator = None
        return Turn(checkpoint, iterator)

    def _fetch(self, turn: Turn) -> dict:
        """One GetRecords call of a turn (on a worker thread): paced, with an iterator got first if
        the turn has none."""
        shard_id = turn.checkpoint.shard_id
        wait_for = self._last_read.get(shard_id, float("-inf")) + self.pacing - time.monotonic()
        if wait_for > 0 and self.stop_event.wait(wait_for):
            raise Stopped
        if turn.iterator is None:
            turn.iterator = self._shard_iterator(turn.checkpoint)
        try:
            return self._call(self.client.get_records, ShardIterator=turn.iterator, Limit=self.batch_size)
        finally:
            self._last_read[shard_id] = time.monotonic()

    def _take(self, turn: Turn, future, result: PollResult) -> bool:
        """Apply one fetched page of a turn; True when the turn goes on reading."""
        checkpoint = turn.checkpoint
        shard_id = checkpoint.shard_id
        turn.calls += 1
        try:
            response = future.result()
        except Stopped:
            return False
        except ClientError as exc:
            code = _error_code(exc)
            if code == "ExpiredIteratorException":
                turn.iterator = None
                return turn.calls < self.shard_budget
            if code == "TrimmedDataAccessException":
                self._trimmed(checkpoint, result, "records the iterator pointed to were trimmed")
                turn.iterator, turn.lost = None, True
                return turn.calls < self.shard_budget
            if code == "ResourceNotFoundException":  # the shard is gone: AWS removes one only past the retention
                if not turn.lost:
                    self._trimmed(checkpoint, result, "the shard expired from the stream with records")
                ShardCheckpoint.objects.using(self.database).filter(pk=checkpoint.pk).update(
                    finished=True, lease_owner="", lease_expires_at=None, updated_at=timezone.now())
                checkpoint.finished = True
                return False
            raise
        records = response.get("Records", [])
        next_iterator = response.get("NextShardIterator")
        try:
            if records or next_iterator is None:
                result.records += len(records)
                result.ops += self._commit(checkpoint, records, finished=next_iterator is None)
            if next_iterator is None:
                self._idle.discard(shard_id)
                return False
            turn.iterator = next_iterator
            if records:
                turn.empties, turn.delivered = 0, True
                self._idle.discard(shard_id)
            else:
                turn.empties += 1
            # Empty pages are read through only before a shard's first records in the turn: after
            # records, an empty page most likely means the end, and the next poll comes soon.
            out_of_empties = not records and (turn.empties >= self.empty_reads or shard_id in self._idle
                                              or turn.delivered)
            if out_of_empties or turn.calls >= self.shard_budget:
                if out_of_empties:
                    self._idle.add(shard_id)
                    lease_hold(checkpoint=checkpoint, owner=self.owner, seconds=self.lease_seconds)
                self._iterators[shard_id] = (next_iterator, checkpoint.sequence_number)
                return False
            return True
        except LeaseLost as exc:
            logger.warning("%s", exc)
            self._iterators.pop(shard_id, None)
            return False

    def _commit(self, checkpoint: ShardCheckpoint, records: list[dict], *, finished: bool) -> int:
        """Apply a batch and move the checkpoint past it, under our lease, in one transaction
        (the index writes join it when the index lives in the same database)."""
        with transaction.atomic(using=self.database):
            lease_hold(checkpoint=checkpoint, owner=self.owner, seconds=self.lease_seconds)
            ops = apply_records(self.index, records, self.source)
            now = timezone.now()
            if records:
                checkpoint.sequence_number = records[-1]["dynamodb"]["SequenceNumber"]
                checkpoint.applied_at = now
                created = record_created_at(records[-1])
                if created:
                    checkpoint.last_record_at = created
                    checkpoint.lag_seconds = lag_seconds(created, now)
            checkpoint.finished = finished
            if finished:
                checkpoint.lease_owner, checkpoint.lease_expires_at = "", None
            ShardCheckpoint.objects.using(self.database).filter(pk=checkpoint.pk).update(
                sequence_number=checkpoint.sequence_number, applied_at=checkpoint.applied_at,
                last_record_at=checkpoint.last_record_at, lag_seconds=checkpoint.lag_seconds,
                finished=finished, updated_at=now,
                **({"lease_owner": "", "lease_expires_at": None} if finished else {}),
            )
        lag = checkpoint.lag_seconds if records else None
        self.lag.note(lag)
        logger.info("sync batch", extra={"fields": {
            "records": len(records), "ops": ops, "shard": checkpoint.shard_id, "finished": finished,
            "lag_seconds": None if lag is None else round(lag, 3),
        }})
        return ops

    def run(self, *, once: bool, poll_seconds: float = 1.0, on_poll=None) -> PollResult:
        """Drain to the current end (once) or follow until stop_event is set; leases are given up
        on the way out so a standby consumer takes over without waiting for them to expire."""
        total = PollResult()
        failures = 0
        try:
            while not self.stop_event.is_set():
                try:
                    result = self.poll()
                    maintained = self.index.maintain()  # deferred work (DynamoDB re-mark, files commits), bounded
                    if not result.records:
                        self.lag.note(0.0)  # caught up: nothing is waiting
                    self.lag.flush(force=once and not result.records)
                except (IndexUnavailable, DatabaseError) as exc:
                    failures += 1
                    if once and failures > ONCE_OUTAGE_RETRIES:
                        raise
                    self._wait_out_outage(exc, failures)
                    continue
                failures = 0
                total.records += result.records
                total.ops += result.ops
                total.finished_shards += result.finished_shards
                total.trimmed += result.trimmed
                total.leased_elsewhere = result.leased_elsewhere
                if on_poll:
                    on_poll(result)
                if once:
                    # A poll that applied nothing and left no listing to make is at the end (shards
                    # that roll over empty do not keep it going).
                    if not result.records and not maintained and not result.listing_due:
                        break
                    continue
                # A poll reads every shard to its current end, so now we are caught up: wait, rather
                # than spin on a trickle of writes (AWS allows 5 GetRecords/s per shard).
                self.stop_event.wait(poll_seconds)
        finally:
            try:
                lease_release(stream_arn=self.stream_arn, owner=self.owner, using=self.database)
            except DatabaseError:  # still down: the leases expire by themselves
                logger.warning("could not release leases on the way out", exc_info=True)
        return total

    def _wait_out_outage(self, exc: Exception, failures: int) -> None:
        """The index or the checkpoint database is down: nothing was checkpointed past what was
        applied, so wait and poll again from the checkpoints (re-applying a batch is harmless)."""
        connections[self.database].close()  # a connection broken by the outage is not reused
        self._iterators.clear()
        delay = self.backoff.delay(failures)
        logger.warning("index or checkpoint database unavailable (%s); polling again in %.2fs", exc, delay)
        self.stop_event.wait(delay)


@contextmanager
def stream_paused(*, index: BaseIndex, stream_arn: str, lease_seconds: float):
    """Hold every shard's lease (rebuild_index): consumers apply nothing meanwhile and resume from
    checkpoints noted before the table is read, so every write made during the rebuild is replayed
    onto the rebuilt groups (ops are idempotent and keep per-item order). Yields the checkpoints."""
    consumer = StreamConsumer(index=index, stream_arn=stream_arn, owner=new_owner_id("rebuild"),
                              lease_seconds=lease_seconds)
    shards = {shard["ShardId"]: shard for shard in consumer.describe_shards()}
    checkpoints = leases_take(stream_arn=stream_arn, shards=list(shards.values()), owner=consumer.owner,
                              seconds=lease_seconds, using=consumer.database)
    for checkpoint in checkpoints:
        if checkpoint.shard_id in shards and not checkpoint.sequence_number and not checkpoint.finished:
            consumer.note_position(checkpoint, shards[checkpoint.shard_id])
    done = threading.Event()

    def keep_leases():
        try:
            while not done.wait(lease_seconds / 3):
                leases_renew(stream_arn=stream_arn, owner=consumer.owner, seconds=lease_seconds,
                             using=consumer.database)
        finally:
            connections[consumer.database].close()

    keeper = threading.Thread(target=keep_leases, name="rebuild-leases", daemon=True)
    keeper.start()
    try:
        yield checkpoints
    finally:
        done.set()
        keeper.join()
        lease_release(stream_arn=stream_arn, owner=consumer.owner, using=consumer.database)
