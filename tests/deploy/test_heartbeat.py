"""The stream heartbeat, end to end: the item EventBridge Scheduler writes (deploy/aws/data.yaml's
StreamHeartbeat, its Input as the template declares it) flows through the stream and the consumer
without touching the index; sync_index's EMF lines (metrics/cloudwatch.py) and the stream Lambda's
(metrics/lambda_emf.py) carry the metrics, namespace and dimensions the alarms watch
(deploy/aws/alarms.yaml); and the per-shard lag gauges follow the shards this consumer holds."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import override_settings

from comments.table.client import dynamodb
from comments.table.keys import table_name
from deploy.aws.template import DIRECTORY, Resolver, load
from metrics import STREAM_APPLY_LAG, cloudwatch
from tests import factories

SKU = "BEAT-1"


def scheduled_put_item() -> dict:
    """The PutItem the schedule sends, as the template declares it, for the table in the settings."""
    template = load()
    target = Resolver(template, parameters={"CommentsTableName": table_name()}).value(
        template["Resources"]["StreamHeartbeat"]["Properties"]["Target"])
    assert target["Arn"] == "arn:aws:scheduler:::aws-sdk:dynamodb:putItem"
    return json.loads(target["Input"].replace("<aws.scheduler.scheduled-time>", "2026-11-28T06:00:00Z"))


def emf(line: str) -> tuple[dict, dict]:
    """(the CloudWatch metric directive, the values) of one EMF line."""
    document = json.loads(line)
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    return directive, document


def alarm_metric(logical_id: str) -> dict:
    properties = load(DIRECTORY / "alarms.yaml")["Resources"][logical_id]["Properties"]
    return {"Namespace": properties["Namespace"], "MetricName": properties["MetricName"],
            "Dimensions": {d["Name"]: d["Value"] for d in properties["Dimensions"]}}


def assert_published_as_the_alarm_watches(line: str, logical_id: str) -> None:
    directive, values = emf(line)
    watched = alarm_metric(logical_id)
    assert directive["Namespace"] == watched["Namespace"]
    assert watched["MetricName"] in {metric["Name"] for metric in directive["Metrics"]}, directive
    assert sorted(set(watched["Dimensions"])) in [sorted(names) for names in directive["Dimensions"]]
    for name, value in watched["Dimensions"].items():
        assert values[name] == value
    value = values[watched["MetricName"]]  # a number, or an array of them (EMF allows both)
    assert all(isinstance(number, (int, float)) for number in (value if isinstance(value, list) else [value]))


@pytest.mark.django_db
def test_the_heartbeat_item_flows_through_the_consumer_and_leaves_the_index_alone(comments_table):
    factories.product(SKU)
    comments = factories.seed(SKU, 25, seed=3)
    call_command("sync_index", once=True, verbosity=0)
    request = scheduled_put_item()
    assert request["TableName"] == table_name()
    # The role lets the scheduler write this item and no other (dynamodb:LeadingKeys).
    role = load()["Resources"]["HeartbeatRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"][0]
    assert role["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"] == [request["Item"]["PK"]["S"]]
    dynamodb().put_item(**request)
    request["Item"]["at"]["S"] = "2026-11-28T06:01:00Z"
    dynamodb().put_item(**request)  # the next minute's: a MODIFY
    out = io.StringIO()
    beat = cloudwatch.Heartbeat("CornerShop", seconds=0, out=out)
    with override_settings(SYNC_INDEX_CLOUDWATCH_NAMESPACE="CornerShop"):
        cloudwatch._heartbeat = beat
        try:
            call_command("sync_index", once=True, verbosity=0)
        finally:
            cloudwatch._heartbeat = None
    lines = out.getvalue().splitlines()
    assert lines, "sync_index wrote no heartbeat"
    assert sum(emf(line)[1]["SyncIndexPolls"] for line in lines) >= 1
    assert sum(emf(line)[1]["RecordsApplied"] for line in lines) == 2  # the two heartbeat records
    for line in lines:
        assert_published_as_the_alarm_watches(line, "SyncIndexHeartbeatAlarm")
    assert any("StreamApplyLag" in emf(line)[1] for line in lines)
    assert_published_as_the_alarm_watches(next(line for line in lines if "StreamApplyLag" in line), "ConsumerLagAlarm")
    call_command("verify_index", verbosity=0)  # the index holds the comments, and nothing else
    from pagination_index import get_index

    assert get_index().count(SKU) == len(comments)


def test_a_heartbeat_line_counts_the_polls_since_the_last_one():
    now = [1000.0]
    out = io.StringIO()
    beat = cloudwatch.Heartbeat("CornerShop", seconds=30, out=out, clock=lambda: now[0])
    beat.poll(3, 2.0)
    now[0] += 10
    beat.poll(0, None)
    assert out.getvalue() == ""  # not yet: one line per 30 s
    now[0] += 25
    beat.poll(1, 7.5)
    directive, values = emf(out.getvalue())
    assert (values["SyncIndexPolls"], values["RecordsApplied"], values["StreamApplyLag"]) == (3, 4, 7.5)
    assert values["_aws"]["Timestamp"] == 1035000
    now[0] += 31
    beat.poll(0, None)  # no lag known in this window: no StreamApplyLag value (missing, not 0)
    directive, values = emf(out.getvalue().splitlines()[-1])
    assert values["SyncIndexPolls"] == 1 and "StreamApplyLag" not in values
    assert "StreamApplyLag" not in {metric["Name"] for metric in directive["Metrics"]}


def test_the_lambdas_emf_line_is_what_the_lag_alarm_watches(monkeypatch, capsys):
    """metrics/lambda_emf.py, with the environment data.yaml gives the function."""
    from metrics.lambda_emf import report_batch

    variables = load()["Resources"]["SyncIndexFunction"]["Properties"]["Environment"]["Variables"]
    for name in ("POWERTOOLS_METRICS_NAMESPACE", "POWERTOOLS_SERVICE_NAME"):
        monkeypatch.setenv(name, variables[name])
    record = {"dynamodb": {"ApproximateCreationDateTime": 1_700_000_000, "SequenceNumber": "1"}}
    report_batch([record], 0)
    line = next(line for line in capsys.readouterr().out.splitlines() if "StreamApplyLag" in line)
    assert_published_as_the_alarm_watches(line, "ConsumerLagAlarm")


@pytest.mark.django_db
def test_the_lag_gauge_of_a_shard_no_longer_held_is_removed():
    """metrics/stream.py: a shard this consumer stops holding (finished, trimmed, leased elsewhere)
    loses its gauge, or max(pagination_index_stream_apply_lag_seconds) would report it for ever."""
    from datetime import timedelta
    from types import SimpleNamespace

    from django.utils import timezone

    from metrics import stream
    from pagination_index.models import ShardCheckpoint

    arn = "arn:aws:dynamodb:eu-west-1:123456789012:table/beat/stream/2026-11-28T00:00:00.000"
    later = timezone.now() + timedelta(minutes=5)
    for shard, lag in (("shard-a", 3.0), ("shard-b", 9.0)):
        ShardCheckpoint.objects.create(stream_arn=arn, shard_id=shard, lease_owner="me", lease_expires_at=later,
                                       lag_seconds=lag)
    consumer = SimpleNamespace(database="default", stream_arn=arn, owner="me")

    def shards() -> set[str]:
        return {sample.labels["shard"] for metric in STREAM_APPLY_LAG.collect() for sample in metric.samples}

    assert stream.observe_poll(SimpleNamespace(records=0), consumer) == 9.0
    assert {"shard-a", "shard-b"} <= shards()
    ShardCheckpoint.objects.filter(shard_id="shard-b").update(lease_owner="another")
    assert stream.observe_poll(SimpleNamespace(records=0), consumer) == 3.0
    assert "shard-b" not in shards() and "shard-a" in shards()


def test_a_record_given_up_is_published_as_the_alarm_watches_by_either_consumer(capsys, settings):
    """RecordsGivenUpAlarm watches one metric for both consumers: sync_index writes it (with
    SYNC_INDEX_CLOUDWATCH_NAMESPACE) and the Lambda handler writes it, each through the
    record_given_up signal the metrics app connects."""
    from pagination_index import signals

    settings.SYNC_INDEX_CLOUDWATCH_NAMESPACE = "CornerShop"
    for sender in ("sync_index", "lambda"):
        capsys.readouterr()
        signals.record_given_up.send(sender, record={}, groups=["A"], error=ValueError("too large"))
        lines = [line for line in capsys.readouterr().out.splitlines() if "RecordsGivenUp" in line]
        assert len(lines) == 1, sender
        assert emf(lines[0])[1]["RecordsGivenUp"] in (1, [1.0], 1.0, [1])
        assert_published_as_the_alarm_watches(lines[0], "RecordsGivenUpAlarm")
    settings.SYNC_INDEX_CLOUDWATCH_NAMESPACE = ""
    signals.record_given_up.send("sync_index", record={}, groups=["A"], error=ValueError("too large"))
    assert "RecordsGivenUp" not in capsys.readouterr().out  # not on CloudWatch: the Prometheus counter only
