"""A DynamoDB Streams event-source mapping run the way AWS Lambda runs one, for tests and benchmarks.

What it does, as AWS documents it ("Using AWS Lambda with Amazon DynamoDB", "Configuring partial batch
response", the CreateEventSourceMapping reference):
- one poller per shard, all shards in parallel, and one invocation per shard at a time
  (ParallelizationFactor 1); a child shard is polled once its parent is finished;
- records are gathered into a batch until `batch_size` or until `batching_window` seconds have passed
  (MaximumBatchingWindowInSeconds), each shard polled at most 4 times a second;
- the event is AWS's: {"Records": [{"eventID", "eventName", "eventVersion", "eventSource",
  "awsRegion", "dynamodb": {..., "ApproximateCreationDateTime": <epoch seconds>}, "eventSourceARN"}]};
- with ReportBatchItemFailures the answer {"batchItemFailures": [{"itemIdentifier": seq}]} makes Lambda
  retry from the lowest sequence number named; a raised error fails the whole batch;
- BisectBatchOnFunctionError splits a failing batch in two and retries each half (splits do not count
  against the retry quota); MaximumRetryAttempts and MaximumRecordAgeInSeconds bound the retries;
- records given up are not delivered anywhere: the on-failure destination gets one message naming the
  batch (DDBStreamBatchInfo: shardId, startSequenceNumber, endSequenceNumber, batchSize, streamArn,
  approximate arrival times), and the mapping moves on.

The destination here is a folder (one JSON file per message, as an SQS queue would hold them); the
`repair_index_failures` command reads such messages and repairs what they name.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

logger = logging.getLogger(__name__)

RETRYABLE = {"LimitExceededException", "ProvisionedThroughputExceededException", "ThrottlingException",
             "InternalServerError", "ServiceUnavailable"}


@dataclass
class MappingStats:
    invocations: int = 0
    records: int = 0  # records delivered in successful invocations (a retried record counts again)
    retries: int = 0
    bisections: int = 0
    discarded_batches: int = 0


class EventSourceMapping:
    def __init__(self, *, client, stream_arn: str, handler, batch_size: int = 100, batching_window: float = 0.0,
                 max_retries: int = 3, max_record_age: float | None = None, bisect_on_error: bool = True,
                 report_batch_item_failures: bool = True, on_failure: Path | None = None,
                 starting_position: str = "TRIM_HORIZON", poll_interval: float = 0.25,
                 shard_refresh_seconds: float = 10.0, region: str = "us-east-1", on_poller_exit=None):
        self.client, self.stream_arn, self.handler = client, stream_arn, handler
        self.batch_size, self.batching_window = batch_size, batching_window
        self.max_retries, self.max_record_age = max_retries, max_record_age
        self.bisect_on_error, self.report_batch_item_failures = bisect_on_error, report_batch_item_failures
        self.on_failure = Path(on_failure) if on_failure else None
        self.starting_position, self.poll_interval = starting_position, poll_interval
        self.shard_refresh_seconds, self.region = shard_refresh_seconds, region
        # Called on a shard's poller thread as it ends, e.g. django.db.connections.close_all: a poller
        # is an execution environment of its own, and its connections go with it.
        self.on_poller_exit = on_poller_exit
        self.stop_event = threading.Event()
        self.stats = MappingStats()
        self.finished: set[str] = set()
        self._pollers: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._position: dict[str, str] = {}  # shard -> last sequence number delivered (Lambda's checkpoint)
        self.errors: list[BaseException] = []

    # --- running ----------------------------------------------------------------------------------
    def start(self) -> "EventSourceMapping":
        self._supervisor = threading.Thread(target=self._supervise, name="esm-supervisor", daemon=True)
        self._supervisor.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self._supervisor.join()
        for poller in list(self._pollers.values()):
            poller.join()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def drain(self, timeout: float = 60.0, quiet: float = 1.5, records: int = 0) -> None:
        """Wait until no invocation has delivered records for `quiet` seconds (the stream is consumed),
        and the handler has taken at least `records` records: on a loaded machine, pollers backing off
        from empty pages can be quiet that long with records still due."""
        deadline = time.monotonic() + timeout
        last, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            if self.errors:
                raise self.errors[0]
            seen = self.stats.records + self.stats.discarded_batches
            if seen != last:
                last, since = seen, time.monotonic()
            elif time.monotonic() - since >= quiet and self.stats.records >= records:
                return
            time.sleep(0.1)
        raise TimeoutError(f"the event-source mapping did not catch up in time ({self.stats.records} of at least "
                           f"{records} records taken)")

    def _supervise(self) -> None:
        while not self.stop_event.is_set():
            try:
                shards = self._describe()
            except Exception as exc:  # the mapping retries; AWS shows it as the mapping's LastProcessingResult
                logger.warning("DescribeStream failed: %s", exc)
                self.stop_event.wait(1.0)
                continue
            known = {shard["ShardId"] for shard in shards}
            for shard in shards:
                shard_id, parent = shard["ShardId"], shard.get("ParentShardId")
                if shard_id in self._pollers or shard_id in self.finished:
                    continue
                if parent and parent in known and parent not in self.finished:
                    continue
                poller = threading.Thread(target=self._poll_shard, args=(shard_id,), name=f"esm-{shard_id[-8:]}",
                                          daemon=True)
                self._pollers[shard_id] = poller
                poller.start()
            # Soon after a shard finishes (its children are due), else every shard_refresh_seconds.
            deadline = time.monotonic() + self.shard_refresh_seconds
            finished = len(self.finished)
            while time.monotonic() < deadline and len(self.finished) == finished:
                if self.stop_event.wait(0.1):
                    return

    def _describe(self) -> list[dict]:
        shards, params = [], {"StreamArn": self.stream_arn}
        while True:
            description = self._call(self.client.describe_stream, **params)["StreamDescription"]
            shards += description.get("Shards", [])
            if not description.get("LastEvaluatedShardId"):
                return shards
            params["ExclusiveStartShardId"] = description["LastEvaluatedShardId"]

    def _call(self, method, **params):
        attempt = 0
        while True:
            try:
                return method(**params)
            except Exception as exc:
                code = getattr(exc, "response", {}).get("Error", {}).get("Code")
                if code not in RETRYABLE or self.stop_event.is_set():
                    raise
                attempt += 1
                self.stop_event.wait(min(2.0, 0.1 * 2**attempt))

    # --- one shard ----------------------------------------------------------------------------
    def _poll_shard(self, shard_id: str) -> None:
        try:
            self._read_shard(shard_id)
        except Exception as exc:
            if not self.stop_event.is_set():
                logger.exception("poller of %s failed", shard_id)
                self.errors.append(exc)
        finally:
            if self.on_poller_exit is not None:
                self.on_poller_exit()

    def _read_shard(self, shard_id: str) -> None:
        iterator = self._call(self.client.get_shard_iterator, StreamArn=self.stream_arn, ShardId=shard_id,
                              ShardIteratorType=self.starting_position)["ShardIterator"]
        buffered: list[dict] = []
        window_started = None
        while not self.stop_event.is_set():
            started = time.monotonic()
            if iterator and len(buffered) < self.batch_size:
                try:
                    page = self._call(self.client.get_records, ShardIterator=iterator,
                                      Limit=self.batch_size - len(buffered))
                except Exception as exc:
                    if getattr(exc, "response", {}).get("Error", {}).get("Code") != "ExpiredIteratorException":
                        raise
                    last = buffered[-1]["dynamodb"]["SequenceNumber"] if buffered else self._position.get(shard_id)
                    iterator = self._iterator_after(shard_id, last)
                    continue
                buffered += page.get("Records", [])
                iterator = page.get("NextShardIterator")
                if buffered and window_started is None:
                    window_started = time.monotonic()
            window_over = window_started is not None and time.monotonic() - window_started >= self.batching_window
            if buffered and (len(buffered) >= self.batch_size or window_over or not iterator):
                self._deliver(shard_id, buffered)
                self._position[shard_id] = buffered[-1]["dynamodb"]["SequenceNumber"]
                buffered, window_started = [], None
            if not iterator and not buffered:
                with self._lock:
                    self.finished.add(shard_id)
                return
            if iterator:
                self.stop_event.wait(max(0.0, self.poll_interval - (time.monotonic() - started)))

    def _iterator_after(self, shard_id: str, sequence: str | None) -> str:
        params = {"StreamArn": self.stream_arn, "ShardId": shard_id}
        if sequence:
            params.update(ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=sequence)
        else:
            params["ShardIteratorType"] = self.starting_position
        return self._call(self.client.get_shard_iterator, **params)["ShardIterator"]

    # --- invocations --------------------------------------------------------------------------
    def _deliver(self, shard_id: str, records: list[dict]) -> None:
        """Invoke until the batch is through, split, retried out or too old (then to on_failure)."""
        work = [(records, 0)]  # (batch, retries spent on it)
        while work and not self.stop_event.is_set():
            batch, retries = work.pop(0)
            if self.max_record_age is not None and self._age(batch[0]) > self.max_record_age:
                self._give_up(shard_id, batch, f"records older than {self.max_record_age:g} s")
                continue
            failed_from = self._invoke(batch)
            if failed_from is None:
                continue
            if failed_from > 0:  # partial: checkpoint before the first failure, retry from it
                work.insert(0, (batch[failed_from:], retries + 1))
            elif self.bisect_on_error and len(batch) > 1:
                self.stats.bisections += 1
                middle = len(batch) // 2
                work[:0] = [(batch[:middle], retries), (batch[middle:], retries)]
                continue
            else:
                work.insert(0, (batch, retries + 1))
            if work[0][1] > self.max_retries:
                self._give_up(shard_id, work.pop(0)[0], f"{self.max_retries} retries failed")
            else:
                self.stats.retries += 1

    def _invoke(self, batch: list[dict]) -> int | None:
        """One invocation: None when it succeeded, else the position of the first record to retry
        (0 for the whole batch)."""
        event = {"Records": [self._event_record(record) for record in batch]}
        self.stats.invocations += 1
        try:
            answer = self.handler(event, LambdaContext())
        except Exception:
            logger.info("invocation of %d records failed", len(batch), exc_info=True)
            return 0
        failures = (answer or {}).get("batchItemFailures") if self.report_batch_item_failures else None
        if not failures:
            self.stats.records += len(batch)
            return None
        named = {failure.get("itemIdentifier") for failure in failures}
        positions = [i for i, record in enumerate(batch) if record["dynamodb"]["SequenceNumber"] in named]
        if not positions:  # an identifier not in the batch: AWS fails the whole batch
            return 0
        self.stats.records += positions[0]
        return positions[0]

    def _give_up(self, shard_id: str, batch: list[dict], why: str) -> None:
        self.stats.discarded_batches += 1
        logger.warning("giving up %d records of %s: %s", len(batch), shard_id, why)
        if self.on_failure is None:
            return
        message = {
            "requestContext": {"requestId": str(uuid.uuid4()), "condition": why,
                               "approximateInvokeCount": 1 + self.max_retries},
            "timestamp": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "DDBStreamBatchInfo": {
                "shardId": shard_id, "streamArn": self.stream_arn, "batchSize": len(batch),
                "startSequenceNumber": batch[0]["dynamodb"]["SequenceNumber"],
                "endSequenceNumber": batch[-1]["dynamodb"]["SequenceNumber"],
                "approximateArrivalOfFirstRecord": _iso(self._created(batch[0])),
                "approximateArrivalOfLastRecord": _iso(self._created(batch[-1])),
            },
        }
        self.on_failure.mkdir(parents=True, exist_ok=True)
        path = self.on_failure / f"{time.time_ns()}-{message['requestContext']['requestId']}.json"
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(message))
        temporary.rename(path)

    def _event_record(self, record: dict) -> dict:
        change = dict(record["dynamodb"])
        change["ApproximateCreationDateTime"] = self._created(record)
        return {"eventID": record["eventID"], "eventName": record["eventName"], "eventVersion": "1.1",
                "eventSource": "aws:dynamodb", "awsRegion": self.region, "dynamodb": change,
                "eventSourceARN": self.stream_arn}

    @staticmethod
    def _created(record: dict) -> float:
        created = record["dynamodb"].get("ApproximateCreationDateTime")
        if isinstance(created, datetime):
            return created.timestamp()
        return float(created or time.time())

    def _age(self, record: dict) -> float:
        return time.time() - self._created(record)


class LambdaContext:
    """The few attributes of Lambda's context object a handler may read."""

    function_name = "pagination-index-stream"
    memory_limit_in_mb = 512
    aws_request_id = ""

    def __init__(self):
        self.aws_request_id = str(uuid.uuid4())
        self._deadline = time.monotonic() + 60

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="milliseconds")
