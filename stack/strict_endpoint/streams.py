"""A DynamoDB stream as AWS runs it, re-serving DynamoDB Local's real records (the `streams` hook).

DynamoDB Local's stream never rolls a shard over, never splits one, never trims and never answers an
empty page from an open shard. This service reads DynamoDB Local's records (unchanged but for their
sequence numbers) and serves them through a shard topology of its own, shaped by AWS's documentation
("DynamoDB Streams: Reading and processing a stream", the DynamoDB Streams API reference):

- each shard owns a range of partition-key hashes; a record goes to the open shard whose range holds
  its key's hash, so an item's records stay on one line of descent and a consumer that reads a child
  only after its parent sees them in order;
- every `rollover_seconds` (AWS: about four hours) each open shard closes and gets one child with its
  range; raising `shards` splits the widest open shards into two children each (ParentShardId);
- DescribeStream lists shards in shard-id order, `Limit` at most 100 a page, continued with
  `ExclusiveStartShardId`; `ShardFilter` {"Type": "CHILD_SHARDS", "ShardId": id} lists a shard's
  children;
- an open shard answers an empty page with a next iterator at `empty_page_rate`;
- more than 10 DescribeStream calls a second on a stream, more than 5 GetRecords a second on a shard or
  a third reader of a shard (an iterator chain used in the last second) get LimitExceededException;
- iterators expire after `iterator_seconds` (AWS: 15 minutes);
- records are trimmed `retention_seconds` after they arrived (AWS: 24 hours): reading before the trim
  horizon is TrimmedDataAccessException; a closed shard disappears once all of it is trimmed;
- the stream ARN is DynamoDB Local's, which is new when the table is re-created or its stream
  re-enabled; a stream whose table is gone stays readable, DISABLED, its shards closed.

Options (start-up config {"streams": {"class": "stack.strict_endpoint.streams.EmulatedStreams",
"options": {...}}}, or PATCH /streams on the admin API while it runs): see DEFAULTS.
"""
from __future__ import annotations

import asyncio
import bisect
import copy
import hashlib
import logging
import random
import time
from collections import deque
from dataclasses import dataclass, field

from stack.strict_endpoint.upstream import UpstreamError

logger = logging.getLogger("stack.strict_endpoint.streams")
DEFAULTS = {
    "shards": 1,  # open shards the stream grows to (it never shrinks: AWS merges no DynamoDB shards)
    "rollover_seconds": 4 * 3600.0,
    "empty_page_rate": 0.0,
    "retention_seconds": 24 * 3600.0,
    "iterator_seconds": 15 * 60.0,
    "describe_per_second": 10,
    "get_records_per_second": 5,  # per shard
    "readers_per_shard": 2,
    "pump_seconds": 0.05,  # DynamoDB Local's stream is read at most this often
    "seed": None,
}
NAMESPACE = "com.amazonaws.dynamodb.v20120810"
HASH_SPACE = 1 << 64
FIRST_SEQUENCE = 10**20  # AWS's sequence numbers are 21-digit decimal strings


class StreamError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message

    def answer(self) -> tuple[int, dict]:
        return 400, {"__type": f"{NAMESPACE}#{self.code}", "message": self.message}


@dataclass
class Shard:
    shard_id: str
    parent_id: str | None
    low: int  # hash range [low, high)
    high: int
    created_at: float
    starting: int  # sequence number
    ending: int | None = None  # set when closed
    closed_at: float | None = None
    sequences: list[int] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    trimmed_through: int = 0  # every record with a sequence number <= this is gone
    reads: deque = field(default_factory=deque)  # GetRecords times, last second
    readers: dict = field(default_factory=dict)  # iterator chain -> last use

    def description(self) -> dict:
        numbers = {"StartingSequenceNumber": str(self.starting)}
        if self.ending is not None:
            numbers["EndingSequenceNumber"] = str(self.ending)
        shard = {"ShardId": self.shard_id, "SequenceNumberRange": numbers}
        if self.parent_id:
            shard["ParentShardId"] = self.parent_id
        return shard


class Stream:
    """One emulated stream (one DynamoDB Local stream ARN)."""

    def __init__(self, arn: str, description: dict, service: "EmulatedStreams", now: float):
        self.arn, self.service = arn, service
        self.description = {k: v for k, v in description.items() if k not in ("Shards", "LastEvaluatedShardId")}
        self.hash_key = next(k["AttributeName"] for k in description.get("KeySchema", []) if k["KeyType"] == "HASH")
        self.disabled = False
        self.shards: dict[str, Shard] = {}
        self.upstream_positions: dict[str, str | None] = {}  # DynamoDB Local shard -> last sequence read
        self.upstream_iterators: dict[str, str] = {}
        self.describes: deque = deque()
        self.last_pump = float("-inf")
        self.lock = asyncio.Lock()
        self._new_shard(None, 0, HASH_SPACE, now)

    # --- topology ---------------------------------------------------------------------------------
    def open_shards(self) -> list[Shard]:
        return [shard for shard in self.shards.values() if shard.ending is None]

    def _new_shard(self, parent: Shard | None, low: int, high: int, now: float) -> Shard:
        # The number part grows with every shard, so shard-id order is creation order (parents first).
        self.service.shard_clock = max(int(now * 1000), self.service.shard_clock + 1)
        shard_id = f"shardId-{self.service.shard_clock:020d}-{self.service.rng.getrandbits(32):08x}"
        shard = Shard(shard_id, parent.shard_id if parent else None, low, high, now, self.service.next_sequence())
        shard.trimmed_through = shard.starting - 1
        self.shards[shard_id] = shard
        return shard

    def _close(self, shard: Shard, now: float) -> None:
        shard.ending = shard.sequences[-1] if shard.sequences else shard.starting
        shard.closed_at = now

    def evolve(self, now: float) -> None:
        """Roll over old shards, split to the configured count, trim past the retention."""
        options = self.service.options
        if not self.disabled:
            for shard in self.open_shards():
                if now - shard.created_at >= float(options["rollover_seconds"]):
                    self._close(shard, now)
                    self._new_shard(shard, shard.low, shard.high, now)
            target = int(options["shards"])
            while len(self.open_shards()) < target:
                widest = max(self.open_shards(), key=lambda s: (s.high - s.low, s.shard_id))
                if widest.high - widest.low < 2:
                    break
                self._close(widest, now)
                middle = (widest.low + widest.high) // 2
                self._new_shard(widest, widest.low, middle, now)
                self._new_shard(widest, middle, widest.high, now)
        horizon = now - float(options["retention_seconds"])
        for shard in list(self.shards.values()):
            cut = bisect.bisect_left(shard.arrivals, horizon)
            if cut:
                shard.trimmed_through = shard.sequences[cut - 1]
                del shard.sequences[:cut], shard.records[:cut], shard.arrivals[:cut]
            if shard.closed_at is not None and shard.closed_at < horizon and not shard.sequences:
                del self.shards[shard.shard_id]

    def route(self, record: dict) -> Shard:
        value = record["dynamodb"]["Keys"][self.hash_key]
        digest = hashlib.blake2b(repr(sorted(value.items())).encode(), digest_size=8).digest()
        point = int.from_bytes(digest, "big")
        return next(s for s in self.open_shards() if s.low <= point < s.high)

    def add(self, record: dict, now: float) -> None:
        shard = self.route(record)
        sequence = self.service.next_sequence()
        record = copy.deepcopy(record)
        record["dynamodb"]["SequenceNumber"] = str(sequence)
        record["eventID"] = hashlib.md5(f"{self.arn}{sequence}".encode()).hexdigest()
        shard.sequences.append(sequence)
        shard.records.append(record)
        shard.arrivals.append(now)

    def disable(self, now: float) -> None:
        self.disabled = True
        for shard in self.open_shards():
            self._close(shard, now)

    # --- DynamoDB Local's records -------------------------------------------------------------
    async def pump(self, upstream) -> None:
        """Take in what DynamoDB Local's stream has that we have not (at most every pump_seconds)."""
        async with self.lock:
            now = time.time()
            if self.disabled or now - self.last_pump < float(self.service.options["pump_seconds"]):
                self.evolve(now)
                return
            self.last_pump = now
            try:
                status, shards = await _upstream_shards(upstream, self.arn)
            except UpstreamError as exc:
                if exc.code != "ResourceNotFoundException":
                    raise
                self.disable(now)
                return
            self.evolve(now)
            for shard in shards:
                shard_id = shard["ShardId"]
                while True:
                    iterator = self.upstream_iterators.get(shard_id) or await self._upstream_iterator(upstream, shard_id)
                    try:
                        page = await upstream.call("GetRecords", {"ShardIterator": iterator, "Limit": 1000},
                                                   service="streams")
                    except UpstreamError as exc:
                        if exc.code != "ExpiredIteratorException":
                            raise
                        self.upstream_iterators.pop(shard_id, None)
                        continue
                    for record in page.get("Records", []):
                        self.add(record, now)
                        self.upstream_positions[shard_id] = record["dynamodb"]["SequenceNumber"]
                    following = page.get("NextShardIterator")
                    if following:
                        self.upstream_iterators[shard_id] = following
                    else:
                        self.upstream_iterators.pop(shard_id, None)
                    if not page.get("Records") or not following:
                        break
            if status in ("DISABLING", "DISABLED"):
                self.disable(now)

    async def _upstream_iterator(self, upstream, shard_id: str) -> str:
        position = self.upstream_positions.get(shard_id)
        params = {"StreamArn": self.arn, "ShardId": shard_id, "ShardIteratorType": "TRIM_HORIZON"}
        if position:
            params.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=position)
        return (await upstream.call("GetShardIterator", params, service="streams"))["ShardIterator"]


class EmulatedStreams:
    """The `streams` hook (hooks.StreamsService)."""

    def __init__(self, *, upstream, options: dict):
        self.upstream = upstream
        self.options = dict(DEFAULTS)
        self.rng = random.Random()
        self.configure(options)
        self.streams: dict[str, Stream] = {}
        self.sequence = FIRST_SEQUENCE
        self.chains = 0
        self.shard_clock = 0
        self.known: set[str] = set()  # stream ARNs taken in continuously
        self._pumping: asyncio.Task | None = None

    def configure(self, options: dict) -> dict:
        unknown = set(options) - set(DEFAULTS)
        if unknown:
            raise ValueError(f"unknown stream option(s): {', '.join(sorted(unknown))}")
        merged = {**self.options, **options}
        for name, value in merged.items():
            if name != "seed" and (not isinstance(value, (int, float)) or value < 0):
                raise ValueError(f"stream option {name} must be a number >= 0")
        if not 0 <= merged["empty_page_rate"] <= 1:
            raise ValueError("empty_page_rate must be between 0 and 1")
        if merged["shards"] < 1:
            raise ValueError("shards must be at least 1")
        self.options = merged
        if "seed" in options:
            self.rng = random.Random(options["seed"])
        return dict(self.options)

    def next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    def status(self) -> dict:
        """What the admin API shows: per stream, its shards (open, closed) and records held."""
        return {arn: {"disabled": stream.disabled, "open_shards": len(stream.open_shards()),
                      "shards": len(stream.shards),
                      "records": sum(len(s.sequences) for s in stream.shards.values())}
                for arn, stream in self.streams.items()}

    def table_description(self, description: dict) -> None:
        """LatestStreamArn stays DynamoDB Local's (a re-created table gets a new one there too); the
        stream is taken in from now on, so its records arrive (and age) as they are written, whether
        anyone reads them or not."""
        arn = description.get("LatestStreamArn")
        if arn and arn not in self.known:
            self.known.add(arn)
            if self._pumping is None or self._pumping.done():
                self._pumping = asyncio.get_running_loop().create_task(self._pump_forever())

    async def _pump_forever(self) -> None:
        while self.known:
            for arn in list(self.known):
                try:
                    stream = await self._stream(arn)
                except UpstreamError:  # the table went before its stream was ever read
                    self.known.discard(arn)
                    continue
                except Exception:
                    logger.exception("taking in %s failed", arn)
                    continue
                if stream.disabled:
                    self.known.discard(arn)
            await asyncio.sleep(max(float(self.options["pump_seconds"]), 0.1))

    async def handle(self, operation: str, params: dict) -> tuple[int, dict]:
        try:
            if operation == "ListStreams":
                return 200, await self.upstream.call(operation, params, service="streams")
            method = {"DescribeStream": self.describe_stream, "GetShardIterator": self.get_shard_iterator,
                      "GetRecords": self.get_records}.get(operation)
            if method is None:
                raise StreamError("UnknownOperationException", f"{operation} is not a DynamoDB Streams operation")
            return 200, await method(params)
        except StreamError as exc:
            return exc.answer()
        except UpstreamError as exc:
            return exc.status, exc.body

    async def _stream(self, arn: str) -> Stream:
        stream = self.streams.get(arn)
        if stream is None:
            description = (await self.upstream.call("DescribeStream", {"StreamArn": arn}, service="streams"))
            stream = self.streams.setdefault(arn, Stream(arn, description["StreamDescription"], self, time.time()))
        await stream.pump(self.upstream)
        return stream

    async def describe_stream(self, params: dict) -> dict:
        stream = await self._stream(params.get("StreamArn", ""))
        now = time.time()
        _limit(stream.describes, now, int(self.options["describe_per_second"]),
               "Too many DescribeStream requests on this stream; the limit is "
               f"{self.options['describe_per_second']} per second")
        limit = int(params.get("Limit", 100))
        if not 1 <= limit <= 100:
            raise StreamError("ValidationException", "Limit must be between 1 and 100")
        shards = sorted(stream.shards.values(), key=lambda s: s.shard_id)
        shard_filter = params.get("ShardFilter")
        if shard_filter:
            if shard_filter.get("Type") != "CHILD_SHARDS" or not shard_filter.get("ShardId"):
                raise StreamError("ValidationException", "ShardFilter must be {Type: CHILD_SHARDS, ShardId}")
            shards = [s for s in shards if s.parent_id == shard_filter["ShardId"]]
        start = params.get("ExclusiveStartShardId")
        if start:
            shards = [s for s in shards if s.shard_id > start]
        page = shards[:limit]
        description = {**stream.description, "StreamStatus": "DISABLED" if stream.disabled else "ENABLED",
                       "Shards": [s.description() for s in page]}
        if len(shards) > limit:
            description["LastEvaluatedShardId"] = page[-1].shard_id
        return {"StreamDescription": description}

    async def get_shard_iterator(self, params: dict) -> dict:
        stream = await self._stream(params.get("StreamArn", ""))
        shard = stream.shards.get(params.get("ShardId", ""))
        if shard is None:
            raise StreamError("ResourceNotFoundException", f"Requested resource not found: Shard does not exist "
                              f"({params.get('ShardId')})")
        kind = params.get("ShardIteratorType")
        if kind == "TRIM_HORIZON":
            after = shard.trimmed_through
        elif kind == "LATEST":
            after = shard.sequences[-1] if shard.sequences else shard.trimmed_through
        elif kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            try:
                number = int(params.get("SequenceNumber", ""))
            except ValueError:
                raise StreamError("ValidationException", "Invalid SequenceNumber") from None
            after = number - 1 if kind == "AT_SEQUENCE_NUMBER" else number
            if number < shard.starting or (shard.ending is not None and number > shard.ending):
                raise StreamError("ValidationException", f"Invalid SequenceNumber {number} for shard {shard.shard_id}")
            if after < shard.trimmed_through:
                raise StreamError("TrimmedDataAccessException", "The operation attempted to read past the oldest "
                                  "stream record in a shard.")
        else:
            raise StreamError("ValidationException", f"Invalid ShardIteratorType {kind!r}")
        self.chains += 1
        return {"ShardIterator": self._iterator(stream, shard, after, self.chains)}

    def _iterator(self, stream: Stream, shard: Shard, after: int, chain: int) -> str:
        # Starts with the stream ARN, as DynamoDB Local's do, so the endpoint's IAM check finds the table.
        return f"{stream.arn}|{shard.shard_id}|{after}|{time.time():.3f}|{chain}"

    async def get_records(self, params: dict) -> dict:
        iterator = params.get("ShardIterator", "")
        try:
            arn, shard_id, after, issued, chain = iterator.split("|")
            after, issued, chain = int(after), float(issued), int(chain)
        except ValueError:
            raise StreamError("ValidationException", "Invalid ShardIterator") from None
        stream = await self._stream(arn)
        now = time.time()
        if now - issued > float(self.options["iterator_seconds"]):
            raise StreamError("ExpiredIteratorException", f"Iterator expired. The iterator was created at time "
                              f"{time.ctime(issued)} while right now it is {time.ctime(now)} which is further in "
                              f"the future than the tolerated delay of {self.options['iterator_seconds']} seconds.")
        shard = stream.shards.get(shard_id)
        if shard is None:
            raise StreamError("TrimmedDataAccessException", "The shard was trimmed from the stream.")
        readers = {c: at for c, at in shard.readers.items() if now - at < 1.0}
        readers[chain] = now
        shard.readers = readers
        if len(readers) > int(self.options["readers_per_shard"]):
            del readers[chain]
            raise StreamError("LimitExceededException", f"Too many readers of shard {shard_id}")
        _limit(shard.reads, now, int(self.options["get_records_per_second"]),
               f"Too many GetRecords requests on shard {shard_id}")
        if after < shard.trimmed_through:
            raise StreamError("TrimmedDataAccessException", "The operation attempted to read past the oldest "
                              "stream record in a shard.")
        limit = int(params.get("Limit", 1000))
        if not 1 <= limit <= 1000:
            raise StreamError("ValidationException", "Limit must be between 1 and 1000")
        start = bisect.bisect_right(shard.sequences, after)
        if shard.ending is None and self.rng.random() < float(self.options["empty_page_rate"]):
            return {"Records": [], "NextShardIterator": self._iterator(stream, shard, after, chain)}
        records = shard.records[start:start + limit]
        answer = {"Records": records}
        drained = start + len(records) >= len(shard.sequences)
        if shard.ending is None or not drained:
            last = shard.sequences[start + len(records) - 1] if records else after
            answer["NextShardIterator"] = self._iterator(stream, shard, last, chain)
        return answer


def _limit(calls: deque, now: float, per_second: int, message: str) -> None:
    while calls and now - calls[0] >= 1.0:
        calls.popleft()
    if len(calls) >= per_second:
        raise StreamError("LimitExceededException", message)
    calls.append(now)


async def _upstream_shards(upstream, arn: str) -> tuple[str, list[dict]]:
    """DynamoDB Local's stream: (status, every shard)."""
    shards, params = [], {"StreamArn": arn}
    while True:
        description = (await upstream.call("DescribeStream", params, service="streams"))["StreamDescription"]
        shards.extend(description.get("Shards", []))
        if not description.get("LastEvaluatedShardId"):
            return description.get("StreamStatus", "ENABLED"), shards
        params["ExclusiveStartShardId"] = description["LastEvaluatedShardId"]
