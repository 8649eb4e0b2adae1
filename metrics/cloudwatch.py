"""sync_index's heartbeat for CloudWatch (SYNC_INDEX_CLOUDWATCH_NAMESPACE): every HEARTBEAT_SECONDS, one
line in CloudWatch's embedded metric format (EMF) on stdout with the polls made, the records applied
and the largest apply lag of the shards this consumer holds, dimension service=sync-index.

EMF rather than PutMetricData: on ECS the awslogs driver already ships stdout to CloudWatch Logs, which
extracts the metrics from such lines with no header or API call of ours (CloudWatch User Guide,
"Embedded metric format"); so the heartbeat needs no IAM grant, no monitoring endpoint reachable from
the private subnets, and no network call in the consumer's loop that could block or fail it. It is also
what the stream Lambda already does (metrics/lambda_emf.py), with the same namespace, dimension and
metric names, so one StreamApplyLag alarm serves either consumer.

A poll that never ends (an outage waited out, a hung call) sends no stream_polled signal, so no line:
the SyncIndexPolls alarm treats missing data as breaching (deploy/aws/alarms.yaml).
"""
from __future__ import annotations

import json
import sys
import threading
import time

HEARTBEAT_SECONDS = 30.0
SERVICE = "sync-index"


class Heartbeat:
    def __init__(self, namespace: str, *, seconds: float = HEARTBEAT_SECONDS, out=None, clock=time.time):
        self.namespace, self.seconds, self.clock = namespace, seconds, clock
        self.out = out
        self._lock = threading.Lock()
        self._polls = self._records = 0
        self._lag: float | None = None
        self._since = clock()

    def poll(self, records: int, lag: float | None) -> None:
        """One poll done: count it, and write the line when HEARTBEAT_SECONDS have passed."""
        with self._lock:
            self._polls += 1
            self._records += records
            if lag is not None:
                self._lag = lag if self._lag is None else max(self._lag, lag)
            now = self.clock()
            if now - self._since < self.seconds:
                return
            line = self.line(now)
            self._polls = self._records = 0
            self._lag, self._since = None, now
        out = self.out or sys.stdout
        out.write(line + "\n")
        out.flush()

    def line(self, now: float) -> str:
        metrics = [{"Name": "SyncIndexPolls", "Unit": "Count"}, {"Name": "RecordsApplied", "Unit": "Count"}]
        values = {"SyncIndexPolls": self._polls, "RecordsApplied": self._records}
        if self._lag is not None:
            metrics.append({"Name": "StreamApplyLag", "Unit": "Seconds"})
            values["StreamApplyLag"] = round(self._lag, 3)
        return json.dumps({
            "_aws": {"Timestamp": int(now * 1000), "CloudWatchMetrics": [
                {"Namespace": self.namespace, "Dimensions": [["service"]], "Metrics": metrics}]},
            "service": SERVICE, **values,
        })


def given_up(namespace: str, out=None, clock=time.time) -> None:
    """A record sync_index gave up on (its groups marked stale): one EMF line at once, RecordsGivenUp
    1, the metric the Lambda publishes for its own (metrics/lambda_emf.py), so one RecordsGivenUpAlarm
    watches either consumer. Rare, so not batched with the heartbeat."""
    out = out or sys.stdout
    out.write(json.dumps({
        "_aws": {"Timestamp": int(clock() * 1000), "CloudWatchMetrics": [
            {"Namespace": namespace, "Dimensions": [["service"]],
             "Metrics": [{"Name": "RecordsGivenUp", "Unit": "Count"}]}]},
        "service": SERVICE, "RecordsGivenUp": 1,
    }) + "\n")
    out.flush()


_heartbeat: Heartbeat | None = None
_made = threading.Lock()


def heartbeat(namespace: str) -> Heartbeat:
    """The process's heartbeat (one per process: sync_index runs one consumer)."""
    global _heartbeat
    with _made:
        if _heartbeat is None or _heartbeat.namespace != namespace:
            _heartbeat = Heartbeat(namespace)
        return _heartbeat
