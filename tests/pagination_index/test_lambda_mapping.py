"""pagination_index.aws_lambda.handler run by an event-source mapping as AWS runs it (stack/lambda_driver.py):
shards in parallel on a stream that splits, partial batch responses, bisection, retries given up to the
on-failure destination, and repair_index_failures reading that destination (a folder, or an SQS queue on
moto's server)."""
from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.db import connections

from comments.table.client import dynamodbstreams
from pagination_index import aws
from pagination_index.aws_lambda import handler
from pagination_index.models import StaleGroup
from stack.lambda_driver import EventSourceMapping
from tests import factories
from tests.pagination_index.streams import assert_index_equals_table, delete, stream_arn
from tests.config import index_config
from tests.services import S3Server

pytestmark = [pytest.mark.usefixtures("aws_stream_settings", "comments_table")]


@pytest.fixture
def redis_index(settings, redis_index_options):
    """An index the handler's parallel invocations can share (each invocation is a thread here)."""
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"], "OPTIONS": redis_index_options})


def mapping(**kwargs) -> EventSourceMapping:
    kwargs.setdefault("handler", handler)
    return EventSourceMapping(client=dynamodbstreams(), stream_arn=stream_arn(), batch_size=25, batching_window=0.2,
                              shard_refresh_seconds=1.0, on_poller_exit=connections.close_all, **kwargs)


def group_of(record) -> str:
    image = record["dynamodb"].get("NewImage") or record["dynamodb"].get("OldImage")
    return image["PK2"]["S"]


def test_shards_in_parallel_reach_the_index(aws_stream_settings, redis_index, transactional_db):
    aws_stream_settings.configure_hook("streams", shards=8, empty_page_rate=0.3)
    comments = [c for sku in "ABCD" for c in factories.seed(sku, 30, seed=ord(sku))]
    for comment in comments[::7]:  # written before the mapping runs: its calls are the stream role's
        delete(comment)
    with mapping() as running:
        running.drain(records=120 + len(comments[::7]))
    assert_index_equals_table(*"ABCD")
    assert running.stats.records == 120 + len(comments[::7])
    assert running.stats.discarded_batches == 0


def test_failures_are_retried_bisected_given_up_and_repaired(aws_stream_settings, redis_index, transactional_db,
                                                            tmp_path):
    aws_stream_settings.configure_hook("streams", shards=2)
    factories.seed("A", 20, seed=1)
    factories.seed("BAD", 3, seed=2)
    calls = []

    def failing(event, context):  # raises for any batch holding a BAD record: bisection isolates them
        calls.append(len(event["Records"]))
        if any(group_of(record) == "BAD" for record in event["Records"]):
            raise RuntimeError("cannot apply BAD")
        return handler(event, context)

    destination = tmp_path / "on-failure"
    with mapping(handler=failing, max_retries=1, on_failure=destination) as running:
        running.drain()
    assert running.stats.bisections > 0
    assert running.stats.discarded_batches == 3  # each BAD record alone, after its retry
    assert running.stats.records == 20
    assert len(list(destination.glob("*.json"))) == 3
    out = io.StringIO()
    call_command("repair_index_failures", str(destination), rebuild=True, stdout=out, stderr=io.StringIO())
    assert "BAD" in out.getvalue()
    assert not list(destination.glob("*.json")) and len(list((destination / "done").glob("*.json"))) == 3
    assert not list(StaleGroup.objects.values_list("group", "reason"))  # the rebuild cleared what it marked
    assert_index_equals_table("A", "BAD")


@pytest.fixture
def sqs(tmp_path, monkeypatch):
    """moto's server (S3Server runs every service moto has) as the SQS endpoint the library's clients
    find through boto3's configuration (AWS_ENDPOINT_URL_SQS), as an operator's would find AWS."""
    server = S3Server(tmp_path).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", server.url)
    aws.reset()
    try:
        yield aws.client("sqs", aws.BACKGROUND)
    finally:
        aws.reset()
        server.kill()


def test_repair_reads_the_on_failure_queue(aws_stream_settings, redis_index, transactional_db, tmp_path, sqs):
    """Issue 42: the mapping's on-failure destination is an SQS queue (deploy/aws/data.yaml), and
    `repair_index_failures --queue` reads it: each message is handled as a file of the folder is and
    deleted only once its groups are rebuilt; a message it cannot handle stays in the queue."""
    factories.seed("A", 20, seed=1)
    factories.seed("BAD", 3, seed=2)

    def failing(event, context):
        if any(group_of(record) == "BAD" for record in event["Records"]):
            raise RuntimeError("cannot apply BAD")
        return handler(event, context)

    folder = tmp_path / "on-failure"  # the driver writes files; they go to the queue as Lambda sends them
    with mapping(handler=failing, max_retries=0, on_failure=folder) as running:
        running.drain()
    # Named as deploy/aws/data.yaml's queue resolves in tests (tests/deploy/aws_actions.py checks the
    # command's calls against the operator role's grant on it).
    queue = sqs.create_queue(QueueName="StreamFailureQueue")["QueueUrl"]
    sqs.send_message(QueueUrl=queue, MessageBody="not an on-failure message")
    with pytest.raises(CommandError, match="not an on-failure message"):
        call_command("repair_index_failures", queue=queue, wait_seconds=0, stdout=io.StringIO(), stderr=io.StringIO())
    for path in sorted(folder.glob("*.json")):
        sqs.send_message(QueueUrl=queue, MessageBody=path.read_text())
    out = io.StringIO()
    call_command("repair_index_failures", queue=queue, rebuild=True, wait_seconds=0, stdout=out, stderr=io.StringIO())
    assert "3 queue message(s)" in out.getvalue() and "BAD" in out.getvalue()
    counts = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == "0"  # the three handled are deleted
    assert counts["ApproximateNumberOfMessagesNotVisible"] == "1"  # the one refused is kept
    assert not StaleGroup.objects.exists()
    assert_index_equals_table("A", "BAD")


def test_a_partial_batch_response_retries_from_the_first_failure(aws_stream_settings, redis_index, transactional_db):
    factories.seed("A", 10, seed=3)
    failed_once = set()

    def partial(event, context):  # every record fails once, on its first delivery
        records = event["Records"]
        for position, record in enumerate(records):
            sequence = record["dynamodb"]["SequenceNumber"]
            if sequence not in failed_once:
                failed_once.add(sequence)
                handler({"Records": records[:position]}, context)
                return {"batchItemFailures": [{"itemIdentifier": r["dynamodb"]["SequenceNumber"]}
                                              for r in records[position:]]}
        return handler(event, context)

    with mapping(handler=partial, max_retries=20) as running:
        running.drain()
    assert running.stats.retries > 0 and running.stats.discarded_batches == 0
    assert_index_equals_table("A")
