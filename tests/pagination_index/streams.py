"""Helpers for stream tests: table writes, the table's truth, AWS-style faults on the real client,
and Lambda events built from records read off DynamoDB Local's stream."""
from __future__ import annotations

import calendar
from types import SimpleNamespace

from comments.store import item_from_comment
from comments.table.client import dynamodb, dynamodbstreams
from comments.table.keys import table_name
from pagination_index import get_index
from tests.config import source_of
from pagination_index.models import ShardCheckpoint
from pagination_index.stream import checkpoint_database


def table_order(sku):
    """The table's truth for one product: its GSI entries in index order."""
    return sorted(source_of(sku).group_entries(sku), key=lambda e: (e[1], e[0]), reverse=True)


def assert_index_equals_table(*skus):
    index = get_index()
    for sku in skus:
        expected = table_order(sku)
        assert index.count(sku) == len(expected), sku
        assert index.range(sku, 0, len(expected) + 10) == expected, sku


def checkpoints():
    """The consumer's checkpoints, wherever the configured index keeps them."""
    return ShardCheckpoint.objects.using(checkpoint_database(get_index()))


def put(comment):
    dynamodb().put_item(TableName=table_name(), Item=item_from_comment(comment))


def delete(comment):
    dynamodb().delete_item(TableName=table_name(), Key={"PK": {"S": comment.pk}, "SK": {"S": comment.sk}})


def move(comment, sku):
    dynamodb().update_item(
        TableName=table_name(), Key={"PK": {"S": comment.pk}, "SK": {"S": comment.sk}},
        UpdateExpression="SET PK2 = :g, PK2R = :r",  # a move keeps the rating group in step too
        ExpressionAttributeValues={":g": {"S": sku}, ":r": {"S": f"{sku}/{comment.rating}"}})


def stream_arn():
    return dynamodb().describe_table(TableName=table_name())["Table"]["LatestStreamArn"]


class Faults:
    """Make the real DynamoDB Streams client fail its next calls as AWS does, via botocore's
    before-call event: an error code gives a 400 ClientError, an exception instance is raised, None
    lets a call through."""

    def __init__(self):
        self.client = dynamodbstreams()
        self.service = self.client.meta.service_model.service_id.hyphenize()
        self.queued: dict[str, list] = {}
        self.injected = 0

    def fail(self, operation: str, *errors) -> None:
        if operation not in self.queued:
            self.client.meta.events.register(f"before-call.{self.service}.{operation}", self._hook(operation),
                                             unique_id=f"faults-{operation}")
        self.queued.setdefault(operation, []).extend(errors)

    def _hook(self, operation):
        def hook(**kwargs):
            if not self.queued[operation]:
                return None
            error = self.queued[operation].pop(0)
            if error is None:  # let this call through
                return None
            self.injected += 1
            if isinstance(error, Exception):
                raise error
            return SimpleNamespace(status_code=400, headers={}), {"Error": {"Code": error, "Message": "injected"}}
        return hook

    def close(self):
        for operation in self.queued:
            self.client.meta.events.unregister(f"before-call.{self.service}.{operation}", unique_id=f"faults-{operation}")


def read_stream_records(arn) -> list[dict]:
    """Every record currently in the stream, shard by shard, parents first (as boto3 returns them)."""
    client = dynamodbstreams()
    shards = client.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    records = []
    for shard in shards:
        iterator = client.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                             ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while iterator:
            response = client.get_records(ShardIterator=iterator, Limit=1000)
            records.extend(response["Records"])
            iterator = response.get("NextShardIterator") if response["Records"] else None
    return records


def lambda_event(records: list[dict], arn: str) -> dict:
    """Records as Lambda delivers them: camel-case envelope, epoch-second timestamps."""
    converted = []
    for record in records:
        change = dict(record["dynamodb"])
        created = change.get("ApproximateCreationDateTime")
        if created is not None:
            change["ApproximateCreationDateTime"] = calendar.timegm(created.utctimetuple())
        converted.append({
            "eventID": record["eventID"], "eventName": record["eventName"], "eventVersion": "1.1",
            "eventSource": "aws:dynamodb", "awsRegion": "us-east-1", "dynamodb": change, "eventSourceARN": arn,
        })
    return {"Records": converted}
