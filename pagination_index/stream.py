"""Keeping the index in step with the table by consuming its DynamoDB Stream.

Rules: every shard of the stream; a child shard only after its parent is finished or gone (so each
item's changes apply in order); a checkpoint per shard; a batch is applied and then checkpointed,
inside one database transaction when the index lives in a database, so a crash at any point loses
nothing and re-applying a batch is harmless (every op is idempotent). A shard is read only under
its lease (leases.py), so two consumers can run for failover. What a record means for the index is
the business of the sources declared on the table (pagination_index/sources.py).
"""
from __future__ import annotations

import base64
import heapq
import itertools
import logging
import random
import threading
import time
import zlib
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from typing import Iterable

from botocore.exceptions import BotoCoreError, ClientError
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.utils import timezone

from pagination_index import signals
from pagination_index.aws.errors import is_transient
from pagination_index.aws.retries import Backoff
from pagination_index.backends.base import BaseIndex, IndexUnavailable
from pagination_index.fences import apply_fenced
from pagination_index.lag import LagSampler, lag_seconds
from pagination_index.leases import (
    LeaseLost,
    bound_sessions,
    lease_hold,
    lease_release,
    leases_acquire,
    leases_hold,
    leases_renew,
    leases_take,
    new_owner_id,
)
from pagination_index.models import ShardCheckpoint, StaleGroup
from pagination_index.sources import BaseSource, SourceUnavailable, records_ops, table_of_stream
from pagination_index.stale import stale_groups_mark

logger = logging.getLogger(__name__)
# With --once, an index or database outage is waited out this many times before the run fails;
# following, it is waited out for as long as it lasts.
ONCE_OUTAGE_RETRIES = 5


def apply_records(index: BaseIndex, records: list[dict], sources: Iterable[BaseSource]) -> int:
    """Apply stream records of one table to the index, for every source declared on the table;
    returns how many ops that made. Shared with Lambda."""
    ops = records_ops(sources, records)
    if ops:
        apply_fenced(index, ops, using=checkpoint_database(index))  # groups being rebuilt: journaled
    return len(ops)


# What a record that can never be applied raises: a sort key or member the index refuses, an index
# write DynamoDB refuses as invalid (InvalidIndexWrite, a ValueError). Retrying cannot help, and
# waiting it out as an outage would stop the consumer at that record until the stream trims it.
UNAPPLIABLE = (ValueError,)


def apply_or_give_up(index: BaseIndex, records: list[dict], sources: Iterable[BaseSource], *, using: str,
                     via: str, stream_arn: str = "", shard_of: dict[int, str] | None = None) -> int:
    """apply_records; when the batch holds a record that cannot be applied (UNAPPLIABLE), the records
    one by one, giving up on each such record (give_up: its groups marked stale and the record kept in
    the dead-letter table, durably) and applying the others. An outage still raises. Returns the ops
    made. `shard_of`: the shard each record was read from, by id() of the record."""
    try:
        return apply_records(index, records, sources)
    except UNAPPLIABLE as exc:
        logger.warning("a batch of %d records could not be applied (%s); applying them one by one", len(records), exc)
    ops = 0
    for record in records:
        try:
            ops += apply_records(index, [record], sources)
        except UNAPPLIABLE as exc:
            give_up(record, exc, sources, using=using, via=via, stream_arn=stream_arn,
                    shard_id=(shard_of or {}).get(id(record), ""))
    return ops


def give_up(record: dict, exc: Exception, sources: Iterable[BaseSource], *, using: str, via: str,
            stream_arn: str = "", shard_id: str = "") -> list[str]:
    """A record that cannot be applied is never dropped unnoticed: its groups (every group, "*", when
    the record cannot even be read) are marked stale in the checkpoint database (StaleGroup rows:
    verify_index fails and the pagination_index_stale_groups gauge counts them until `rebuild_index`
    rebuilds them), the record itself goes to the dead-letter table (GivenUpRecord, which
    `repair_index_failures --given-up` reads), it is logged as an error, and signals.record_given_up
    is sent (metrics)."""
    from pagination_index import signals
    from pagination_index.models import GivenUpRecord, StaleGroup
    from pagination_index.stale import stale_groups_mark

    try:
        groups = sorted({op.group for op in records_ops(sources, [record])}) or [StaleGroup.ALL]
    except Exception:  # unreadable: which groups it concerned is unknown
        groups = [StaleGroup.ALL]
    sequence = (record.get("dynamodb") or {}).get("SequenceNumber", "?")
    reason = (f"stream record {sequence} ({record.get('eventName', '?')}) could not be applied ({exc}); "
              f"given up on by {via}")[:2000]
    with transaction.atomic(using=using):
        stale_groups_mark(groups=groups, reason=reason, using=using)
        # Keyed on the record's sequence number: the same record given up on again (its batch
        # replayed after a crash before the checkpoint) stays one row, with the latest error.
        GivenUpRecord.objects.using(using).update_or_create(
            stream_arn=stream_arn or record.get("eventSourceARN", ""), sequence_number=sequence, via=via,
            defaults={"shard_id": shard_id, "event_name": record.get("eventName", ""), "record": jsonable(record),
                      "groups": groups, "error": f"{type(exc).__name__}: {exc}"[:10000],
                      "given_up_at": timezone.now(), "repaired_at": None})
    signals.record_given_up.send(via, record=record, groups=groups, error=exc)
    return groups


def jsonable(value):
    """A stream record as JSON can hold it: GetRecords' datetimes as ISO 8601, binary attributes
    (bytes) base64-encoded as the Lambda event and the DynamoDB JSON wire format carry them."""
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(item) for item in value]
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime):
        return value.isoformat()
    return value


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


def sources_of_table(table: str) -> list[BaseSource]:
    from pagination_index import sources

    return sources.for_table(table)


def _error_code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "")


def save_checkpoints(checkpoints: list[ShardCheckpoint], fields: list[str], *, using: str) -> None:
    """Write `fields` of each checkpoint: one UPDATE by primary key, run for all of them with
    executemany (psycopg pipelines it). Django's bulk_update builds a CASE per field over every row,
    and at 120 shards that cost the consumer more CPU than the index writes it checkpoints (py-spy)."""
    connection = connections[using]
    quote = connection.ops.quote_name
    meta = ShardCheckpoint._meta
    columns = [meta.get_field(name) for name in fields]
    sql = (f"UPDATE {quote(meta.db_table)} SET {', '.join(f'{quote(column.column)} = %s' for column in columns)}"
           f" WHERE {quote(meta.pk.column)} = %s")
    rows = [[column.get_db_prep_save(getattr(checkpoint, column.attname), connection) for column in columns]
            + [checkpoint.pk] for checkpoint in checkpoints]
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


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
    position: str | None = None  # the last sequence number fetched (applied at the next commit)
    lease_lost: bool = False
    paused: str = ""  # why the turn stopped with the shard still open: "caught up" or "budget"


@dataclass
class Batch:
    """One GetRecords page of a shard, fetched and waiting to be applied and checkpointed."""

    checkpoint: ShardCheckpoint
    records: list[dict]
    finished: bool  # the shard's last page: it is closed and read to its end
    turn: Turn | None = None
    fetched_at: float = 0.0
    ops: int = 0  # set once committed


class StreamConsumer:
    # How AWS's documented limits shape reading ("DynamoDB Streams: Reading and processing a stream",
    # DescribeStream and GetRecords in the API reference): DescribeStream is limited to 10 calls a
    # second per stream, so the shard map is cached, refreshed in full every 30-60 s and grown by
    # asking only for a finished shard's children (ShardFilter CHILD_SHARDS); GetRecords is limited
    # to 5 calls a second per shard, so one shard is read at most every `pacing` seconds.
    map_refresh_seconds = (30.0, 60.0)
    # A full listing spends at most one call per this many seconds however many pages it takes: with
    # the child look-ups of shards that close, a consumer stays under one DescribeStream call per 10 s.
    listing_call_seconds = 15.0
    pacing = 0.2
    # GetRecords calls one shard may make per poll before the others get their turn.
    shard_budget = 10
    # Following, a poll goes on this long: a shard whose turn ended at its current end is read again
    # every poll interval meanwhile, so a record waits for its own shard's next read, not for a
    # pass over every shard (at 120 shards a pass takes seconds). When the readers cannot read every
    # shard that often, revisits wait in the order they fell due, so every shard's interval stretches
    # alike (a shard left out until the next poll was the tail of the apply lag). Then the poll ends,
    # and the next one starts with fresh checkpoints, leases and listing.
    poll_span = 5.0
    # An open shard may answer empty pages before its records: read on through this many in a row
    # (one, for a shard whose last turn already ended on empty pages).
    empty_reads = 5
    # Finished shards per poll whose children are asked for alone (ShardFilter CHILD_SHARDS); past
    # that, the next poll lists the stream in full.
    child_calls_per_poll = 2
    # Pages fetched within this long of each other (from any shards) are applied and checkpointed in
    # one transaction: one apply per group and a few statements, however many shards fed it.
    commit_seconds = 0.1
    finished_checkpoint_keep = timedelta(hours=48)

    def __init__(self, *, index: BaseIndex, stream_arn: str, batch_size: int = 1000,
                 stop_event: threading.Event | None = None, owner: str | None = None,
                 lease_seconds: float = 30.0, backoff: Backoff | None = None,
                 sources: list[BaseSource] | None = None, workers: int = 4):
        self.index = index
        # Every source declared on the stream's table: one record may make ops for each.
        self.sources = sources if sources is not None else sources_of_table(table_of_stream(stream_arn))
        if not self.sources:
            raise ValueError(f"no source is declared on the table of {stream_arn}")
        self.source = self.sources[0]  # the table's stream ARN and stream client
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
        self._turn_numbers = itertools.count()  # ties in the pacing heap
        self._checked_start = False
        self._uncommitted: list[Batch] = []  # pages fetched in this poll, not applied yet
        self.describe_calls = 0
        self.lag = LagSampler()

    # --- calls ------------------------------------------------------------------------------------
    def _call(self, method, **kwargs):
        """One DynamoDB Streams call. botocore retries it (the BACKGROUND client's adaptive mode); a
        throttle or network failure that outlasts those attempts is the stream being unavailable,
        which run() waits out from the checkpoints like an index outage."""
        try:
            return method(**kwargs)
        except BotoCoreError as exc:
            raise SourceUnavailable(f"{method.__name__}: {exc}") from exc
        except ClientError as exc:
            if is_transient(exc):
                raise SourceUnavailable(f"{method.__name__}: {exc}") from exc
            raise

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
            calls = self.describe_calls
            self._map = {shard["ShardId"]: shard for shard in self.describe_shards()}
            # A listing pages through every shard the stream still keeps (closed ones too, for the
            # 24 hours of retention: about seven generations at AWS's four-hour roll-over), so the
            # refresh spends at most one call per `listing_call_seconds` however long it grows.
            pages = self.describe_calls - calls
            self._map_due = time.monotonic() + max(random.uniform(*self.map_refresh_seconds),
                                                   pages * self.listing_call_seconds)
            self._vanished(checkpoints, result)
            self._prune()
        return self._map

    def _children(self, shard_id: str) -> list[dict]:
        """A finished shard's children: from the map when a listing already brought them, else one
        DescribeStream call (not a listing); new ones join the map."""
        known = [shard for shard in self._map.values() if shard.get("ParentShardId") == shard_id]
        if known:
            return known
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

    def _shard_iterator(self, checkpoint: ShardCheckpoint, after: str | None = None) -> str:
        """An iterator just after the checkpoint, or after a later record already fetched (network
        only: workers call it)."""
        kwargs = {"StreamArn": self.stream_arn, "ShardId": checkpoint.shard_id}
        after = after or checkpoint.sequence_number
        if after:
            kwargs.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=after)
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
    def poll(self, revisit: float | None = None) -> PollResult:
        """One pass: every shard we can lease gets turns (up to its budget each) until each is at its
        current end, finished, or out of budget; with `revisit`, such shards are read again every
        `revisit` seconds for `poll_span` seconds. Network calls run on `workers` threads; applying
        and checkpointing stay on this one (one database connection, a shard's pages in order)."""
        result = PollResult()
        self._poll(result, revisit)
        return result

    def _poll(self, result: PollResult, revisit: float | None = None) -> None:
        span_until = time.monotonic() + (self.poll_span if revisit else 0.0)
        self._follow_stream(result)
        checkpoints = self.checkpoints()
        shard_map = self._shard_map(checkpoints, result)
        checkpoints = self._lease_shards(shard_map, checkpoints)
        done = {shard_id for shard_id, cp in checkpoints.items() if cp.finished}
        pending = [shard for shard in shard_map.values() if shard["ShardId"] not in done]
        listed = set(shard_map)
        queued = listed | done  # shards this poll has met: a child already listed is not queued twice

        def ready(shard):
            parent = shard.get("ParentShardId")
            return not parent or parent not in shard_map or parent in done

        def finish(shard_id: str) -> None:
            done.add(shard_id)
            result.finished_shards.append(shard_id)
            if len(result.finished_shards) > self.child_calls_per_poll:
                # Many shards closed at once (a roll-over): one full listing next poll costs a call
                # per 100 shards, not one per shard.
                self._map_due, result.listing_due = 0.0, True
                return
            children = self._children(shard_id)
            if not children:  # none listed (yet, or trimmed away): list afresh next poll
                self._map_due, result.listing_due = 0.0, True
            if shard_id in listed:  # one generation per poll: bounded work
                fresh = [c for c in children if c["ShardId"] not in queued]
                checkpoints.update(self._lease_shards({c["ShardId"]: c for c in fresh}, checkpoints))
                pending.extend(fresh)
                queued.update(c["ShardId"] for c in fresh)

        self._finish = finish
        running: dict = {}
        # Turns waiting for their shard's pacing, (due, n, turn): a worker never sleeps on a shard's
        # pacing while another shard has records to fetch.
        paced: list[tuple[float, int, Turn]] = []
        renew_at = time.monotonic() + self.lease_seconds / 3
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="sync-read") as pool:
            try:
                while not self.stop_event.is_set():
                    now = time.monotonic()
                    if now >= renew_at:  # a long poll keeps the leases it took at its start
                        leases_renew(stream_arn=self.stream_arn, owner=self.owner, seconds=self.lease_seconds,
                                     using=self.database)
                        renew_at = now + self.lease_seconds / 3
                    # Shards not read yet in this poll first: a busy shard's next page, or a caught-up
                    # shard's revisit, never keeps another shard from its first read.
                    for shard in [s for s in pending if ready(s)]:
                        if len(running) >= self.workers:
                            break
                        pending.remove(shard)
                        turn = self._start_turn(shard, checkpoints, done, result)
                        if turn is not None:
                            self._schedule(turn, paced, running, pool)
                    while paced and paced[0][0] <= now and len(running) < self.workers:
                        turn = heapq.heappop(paced)[2]
                        running[pool.submit(self._fetch, turn)] = turn
                    if not running and self._uncommitted:
                        self._flush(result)
                        continue
                    if not running and not paced:
                        break
                    if not running:
                        if self.stop_event.wait(max(min(paced[0][0], renew_at) - time.monotonic(), 0.0)):
                            break
                        continue
                    # Wake for what can happen next: a fetch completing, a paced turn falling due
                    # (only while a worker is free to take it: with every worker busy that wake-up
                    # came at once, again and again, and the spin held the GIL the readers need),
                    # the lease renewal, or the fetched pages' commit.
                    wake = renew_at
                    if paced and len(running) < self.workers:
                        wake = min(wake, paced[0][0])
                    if self._uncommitted:
                        wake = min(wake, self._uncommitted[0].fetched_at + self.commit_seconds)
                    completed, _ = wait(running, timeout=max(wake - time.monotonic(), 0.0),
                                        return_when=FIRST_COMPLETED)
                    for future in completed:
                        turn = running.pop(future)
                        if self._take(turn, future, result):
                            self._schedule(turn, paced, running, pool)
                        elif turn.checkpoint.finished:  # gone from the stream (settled in _take)
                            finish(turn.checkpoint.shard_id)
                        elif (turn.paused and not turn.lease_lost and not result.listing_due
                              and time.monotonic() < span_until):
                            # A new turn of the same shard, read again after `revisit` if it was at its end.
                            wait_for = revisit if turn.paused == "caught up" else 0.0
                            turn.calls, turn.empties, turn.delivered, turn.paused = 0, 0, False, ""
                            self._schedule(turn, paced, running, pool, not_before=time.monotonic() + wait_for)
                    uncommitted = self._uncommitted
                    if uncommitted and (sum(len(batch.records) for batch in uncommitted) >= self.batch_size
                                        or time.monotonic() - uncommitted[0].fetched_at >= self.commit_seconds):
                        self._flush(result)
                if self._uncommitted and not self.stop_event.is_set():
                    self._flush(result)
            finally:
                self._uncommitted = []  # fetched, not applied: the checkpoints say where to read again
                for future in running:
                    future.cancel()

    def _flush(self, result: PollResult) -> None:
        """Apply and checkpoint the fetched pages; shards read to their end are then finished."""
        batches, self._uncommitted = self._uncommitted, []
        for batch in self._commit_batches(batches):
            result.records += len(batch.records)
            result.ops += batch.ops
            if batch.finished:
                self._finish(batch.checkpoint.shard_id)

    def _schedule(self, turn: Turn, paced: list, running: dict, pool, not_before: float = float("-inf")) -> None:
        """Fetch a turn's next page now, or once its shard's pacing allows (AWS: 5 GetRecords a
        second per shard)."""
        due = max(self._last_read.get(turn.checkpoint.shard_id, float("-inf")) + self.pacing, not_before)
        if due <= time.monotonic() and len(running) < self.workers:
            running[pool.submit(self._fetch, turn)] = turn
        else:
            heapq.heappush(paced, (due, next(self._turn_numbers), turn))

    def _lease_shards(self, shards: dict[str, dict], checkpoints: dict[str, ShardCheckpoint]) -> dict[str, ShardCheckpoint]:
        """Checkpoints for new shards, and the leases of every unfinished shard that is free,
        expired or ours, taken or renewed: a few statements a poll, not several per shard. Returns
        the stream's checkpoints as they are now."""
        missing = [shard for shard_id, shard in shards.items() if shard_id not in checkpoints]
        if missing:
            ShardCheckpoint.objects.using(self.database).bulk_create(
                [ShardCheckpoint(stream_arn=self.stream_arn, shard_id=shard["ShardId"],
                                 parent_shard_id=shard.get("ParentShardId") or "") for shard in missing],
                ignore_conflicts=True)
        leases_acquire(stream_arn=self.stream_arn, shard_ids=list(shards), owner=self.owner,
                       seconds=self.lease_seconds, using=self.database)
        return {**checkpoints, **{shard_id: cp for shard_id, cp in self.checkpoints().items() if shard_id in shards}}

    def _start_turn(self, shard: dict, checkpoints: dict[str, ShardCheckpoint], done: set[str],
                    result: PollResult) -> Turn | None:
        shard_id = shard["ShardId"]
        checkpoint = checkpoints[shard_id]
        if checkpoint.finished:  # another consumer finished it meanwhile
            done.add(shard_id)
            return None
        if checkpoint.lease_owner != self.owner:
            self._iterators.pop(shard_id, None)
            result.leased_elsewhere.add(shard_id)
            return None
        iterator, continues_from = self._iterators.pop(shard_id, (None, None))
        if continues_from != checkpoint.sequence_number:  # someone else moved it: start afresh
            iterator = None
        return Turn(checkpoint, iterator)

    def _fetch(self, turn: Turn) -> dict:
        """One GetRecords call of a turn (on a worker thread), with an iterator got first if the
        turn has none."""
        if turn.iterator is None:
            turn.iterator = self._shard_iterator(turn.checkpoint, after=turn.position)
        try:
            return self._call(self.client.get_records, ShardIterator=turn.iterator, Limit=self.batch_size)
        finally:
            self._last_read[turn.checkpoint.shard_id] = time.monotonic()

    def _take(self, turn: Turn, future, result: PollResult) -> bool:
        """Apply one fetched page of a turn; True when the turn goes on reading."""
        checkpoint = turn.checkpoint
        shard_id = checkpoint.shard_id
        turn.calls += 1
        try:
            response = future.result()
        except ClientError as exc:
            code = _error_code(exc)
            if code == "ExpiredIteratorException":
                turn.iterator = None
                return turn.calls < self.shard_budget
            if code in ("TrimmedDataAccessException", "ResourceNotFoundException") and self._uncommitted:
                self._flush(result)  # what was read comes first
            if code == "TrimmedDataAccessException":
                self._trimmed(checkpoint, result, "records the iterator pointed to were trimmed")
                turn.iterator, turn.lost, turn.position = None, True, None
                return turn.calls < self.shard_budget
            if code == "ResourceNotFoundException":  # the shard is gone: AWS removes one only past the retention
                if not turn.lost:
                    self._trimmed(checkpoint, result, "the shard expired from the stream with records")
                ShardCheckpoint.objects.using(self.database).filter(pk=checkpoint.pk).update(
                    finished=True, lease_owner="", lease_expires_at=None, updated_at=timezone.now())
                checkpoint.finished = True
                return False
            raise
        if turn.lease_lost:  # a commit found the shard taken over: nothing more from it
            return False
        records = response.get("Records", [])
        next_iterator = response.get("NextShardIterator")
        if records or next_iterator is None:
            self._uncommitted.append(Batch(checkpoint, records, finished=next_iterator is None, turn=turn,
                                           fetched_at=time.monotonic()))
            if records:
                turn.position = records[-1]["dynamodb"]["SequenceNumber"]
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
            turn.paused = "caught up" if out_of_empties else "budget"
            if out_of_empties:
                self._idle.add(shard_id)
            # Where the iterator goes on from once this turn's pages are committed.
            self._iterators[shard_id] = (next_iterator, turn.position or checkpoint.sequence_number)
            return False
        return True

    def _commit(self, checkpoint: ShardCheckpoint, records: list[dict], *, finished: bool) -> int:
        """Apply one shard's batch and move its checkpoint past it (see _commit_batches); the ops made."""
        committed = self._commit_batches([Batch(checkpoint, records, finished)])
        if not committed:
            raise LeaseLost(f"shard {checkpoint.shard_id}: lease lost to another consumer")
        return committed[0].ops

    def _commit_batches(self, batches: list[Batch]) -> list[Batch]:
        """Apply pages of any shards and move their checkpoints past them, under our leases, in one
        transaction (the index writes join it when the index lives in the same database). A shard
        whose lease was lost meanwhile applies nothing; returns the batches committed, each with
        `ops` set (the ops of the whole apply are counted on the first)."""
        if not batches:
            return []
        with transaction.atomic(using=self.database):
            held = self._hold(list({batch.checkpoint.shard_id: batch.checkpoint for batch in batches}.values()))
            kept = [batch for batch in batches if batch.checkpoint.shard_id in held]
            for batch in batches:
                if batch.checkpoint.shard_id not in held and batch.turn is not None:
                    batch.turn.lease_lost = True
                    self._iterators.pop(batch.checkpoint.shard_id, None)
            # A shard's pages in the order read; an item's records are all in one shard (and a child
            # shard's pages come after its parent's), so each item's changes apply in order.
            records = [record for batch in kept for record in batch.records]
            # Fencing tokens: an index outside this database refuses them once a newer lease applied.
            epochs = {self.fence_name(batch.checkpoint.shard_id): batch.checkpoint.lease_epoch for batch in kept}
            with self.index.fenced(epochs):
                shard_of = {id(record): batch.checkpoint.shard_id for batch in kept for record in batch.records}
                ops = apply_or_give_up(self.index, records, self.sources, using=self.database, via="sync_index",
                                       stream_arn=self.stream_arn, shard_of=shard_of) if records else 0
            now = timezone.now()
            last: dict[str, Batch] = {}
            records_of: dict[str, int] = {}  # records committed per shard
            for batch in kept:
                records_of[batch.checkpoint.shard_id] = records_of.get(batch.checkpoint.shard_id, 0) + len(batch.records)
                checkpoint = batch.checkpoint
                if batch.records:
                    checkpoint.sequence_number = batch.records[-1]["dynamodb"]["SequenceNumber"]
                    checkpoint.applied_at = now
                    created = record_created_at(batch.records[-1])
                    if created:
                        checkpoint.last_record_at = created
                        checkpoint.lag_seconds = lag_seconds(created, now)
                checkpoint.finished = checkpoint.finished or batch.finished
                checkpoint.updated_at = now
                if checkpoint.finished:
                    checkpoint.lease_owner, checkpoint.lease_expires_at = "", None
                    # Never read again: its pacing entry goes (a stream rolls each shard over about
                    # every 4 hours, so a long-lived consumer would keep ids by the thousand).
                    self._last_read.pop(checkpoint.shard_id, None)
                last[checkpoint.shard_id] = batch
            fields = ["sequence_number", "applied_at", "last_record_at", "lag_seconds", "finished", "updated_at"]
            for finished in (False, True):  # a finished shard's lease goes with it; others keep theirs
                changed = [batch.checkpoint for batch in last.values() if batch.checkpoint.finished == finished]
                if changed:
                    save_checkpoints(changed, fields + (["lease_owner", "lease_expires_at"] if finished else []),
                                     using=self.database)
        for n, batch in enumerate(kept):
            batch.ops = ops if n == 0 else 0
        for shard_id, batch in last.items():
            lag = batch.checkpoint.lag_seconds if records_of[shard_id] else None
            self.lag.note(lag)
            logger.info("sync batch", extra={"fields": {
                "records": records_of[shard_id], "ops": ops,
                "shards": len(last), "shard": shard_id, "finished": batch.checkpoint.finished,
                "epoch": batch.checkpoint.lease_epoch, "sequence_number": batch.checkpoint.sequence_number,
                "lag_seconds": None if lag is None else round(lag, 3),
            }})
        return kept

    def fence_name(self, shard_id: str) -> str:
        """A shard as the index's fences name it: shard ids are unique within a stream only."""
        return f"{zlib.crc32(self.stream_arn.encode()):08x}:{shard_id}"

    def _hold(self, checkpoints: list[ShardCheckpoint]) -> set[str]:
        """Renew our leases of these shards (locking their rows until the transaction ends); the
        shard ids still ours. One statement when all are, as they nearly always are."""
        renewed = leases_hold(checkpoints=checkpoints, owner=self.owner, seconds=self.lease_seconds, using=self.database)
        if renewed == len(checkpoints):
            return {checkpoint.shard_id for checkpoint in checkpoints}
        held = set()
        for checkpoint in checkpoints:
            try:
                lease_hold(checkpoint=checkpoint, owner=self.owner, seconds=self.lease_seconds)
                held.add(checkpoint.shard_id)
            except LeaseLost as exc:
                logger.warning("%s", exc)
        return held

    def run(self, *, once: bool, poll_seconds: float = 1.0, on_poll=None) -> PollResult:
        """Drain to the current end (once) or follow until stop_event is set; leases are given up
        on the way out so a standby consumer takes over without waiting for them to expire."""
        # A partitioned consumer's row locks go within about a lease. Only here, in the consumer's own
        # loop: rebuild_index holds leases through this class too, and its long transactions must not
        # inherit the consumer's timeouts.
        with bound_sessions(self.database, self.lease_seconds):
            return self._run(once=once, poll_seconds=poll_seconds, on_poll=on_poll)

    def _run(self, *, once: bool, poll_seconds: float, on_poll) -> PollResult:
        total = PollResult()
        failures = 0
        try:
            while not self.stop_event.is_set():
                try:
                    started = time.monotonic()
                    result = self.poll(revisit=None if once else poll_seconds)
                    logger.debug("sync poll", extra={"fields": {
                        "seconds": round(time.monotonic() - started, 3), "records": result.records,
                        "finished_shards": len(result.finished_shards), "describe_calls": self.describe_calls,
                        "leased_elsewhere": len(result.leased_elsewhere)}})
                    maintained = self.index.maintain()  # deferred work (DynamoDB re-mark, files commits), bounded
                    if not result.records:
                        self.lag.note(0.0)  # caught up: nothing is waiting
                    self.lag.flush(force=once and not result.records)
                except (IndexUnavailable, SourceUnavailable, DatabaseError) as exc:
                    failures += 1
                    if not isinstance(exc, DatabaseError):
                        self._hand_over(exc)
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
                signals.stream_polled.send(type(self), consumer=self, result=result)
                if on_poll:
                    on_poll(result)
                if once:
                    # A poll that applied nothing and left no listing to make is at the end (shards
                    # that roll over empty do not keep it going).
                    if not result.records and not maintained and not result.listing_due:
                        break
                    continue
                # A poll reads every shard to its current end (and, for its span, again every
                # poll_seconds), so now we are caught up: wait out what is left of the interval
                # rather than spin on a trickle of writes (AWS allows 5 GetRecords/s per shard).
                self.stop_event.wait(max(poll_seconds - (time.monotonic() - started), 0.0))
        finally:
            try:
                lease_release(stream_arn=self.stream_arn, owner=self.owner, using=self.database)
            except DatabaseError:  # still down: the leases expire by themselves
                logger.warning("could not release leases on the way out", exc_info=True)
        return total

    def _hand_over(self, exc: Exception) -> None:
        """The index or the stream failed this consumer, but the checkpoint database answers: give the
        leases up, so a consumer on another host, which may well reach them (a partition, not an
        outage), takes the shards over from their checkpoints instead of waiting for this one to heal.
        Without it, each retry's poll renewed the leases it could not use. Nothing past the
        checkpoints was applied, and this consumer takes free shards again at its next poll."""
        try:
            released = lease_release(stream_arn=self.stream_arn, owner=self.owner, using=self.database)
        except DatabaseError:  # down too: the leases expire by themselves
            connections[self.database].close()
            return
        if released:
            logger.warning("gave up %d shard lease(s) while the index or stream is unavailable (%s)", released, exc)

    def _wait_out_outage(self, exc: Exception, failures: int) -> None:
        """The index, the stream or the checkpoint database is down: nothing was checkpointed past
        what was applied, so wait and poll again from the checkpoints (re-applying a batch is harmless)."""
        if not isinstance(exc, SourceUnavailable):
            connections[self.database].close()  # a connection broken by the outage is not reused
        self._iterators.clear()
        delay = self.backoff.delay(failures)
        logger.warning("index, stream or checkpoint database unavailable (%s); polling again in %.2fs", exc, delay)
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
