"""The emulated stream (stack/strict_endpoint/streams.py): DynamoDB Local's real records served through
shards that split, roll over, page, throttle, expire and trim as AWS documents."""
from __future__ import annotations

import time
import uuid

import pytest
from botocore.exceptions import ClientError

from stack.strict_endpoint import StrictEndpoint
from tests.strict_endpoint.helpers import client, create_table, error_code

STREAMS = {"class": "stack.strict_endpoint.streams.EmulatedStreams", "options": {"seed": 7, "pump_seconds": 0}}


@pytest.fixture(scope="module")
def endpoint(dynamodb_local, tmp_path_factory):
    folder = tmp_path_factory.mktemp("strict-streams")
    with StrictEndpoint(dynamodb_local.endpoint_url, config={"creating_seconds": 0, "streams": STREAMS},
                        state_dir=folder, log_path=folder / "endpoint.log") as running:
        yield running


@pytest.fixture
def table(endpoint):
    endpoint.configure_hook("streams", shards=1, rollover_seconds=4 * 3600, empty_page_rate=0,
                            retention_seconds=86400, iterator_seconds=900, describe_per_second=10,
                            get_records_per_second=5, readers_per_shard=2)
    ddb = client(endpoint)
    name = f"streams-{uuid.uuid4().hex[:10]}"
    create_table(ddb, name)
    yield name
    ddb.delete_table(TableName=name)


def arn_of(endpoint, name):
    return client(endpoint).describe_table(TableName=name)["Table"]["LatestStreamArn"]


def all_shards(streams, arn, **kwargs):
    shards, params = [], {"StreamArn": arn, **kwargs}
    while True:
        description = streams.describe_stream(**params)["StreamDescription"]
        shards += description["Shards"]
        if "LastEvaluatedShardId" not in description:
            return shards
        params["ExclusiveStartShardId"] = description["LastEvaluatedShardId"]


def read_shard(streams, arn, shard_id, kind="TRIM_HORIZON"):
    """Every record of a shard, pacing GetRecords under the per-shard limit."""
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard_id, ShardIteratorType=kind)["ShardIterator"]
    records = []
    while iterator:
        page = streams.get_records(ShardIterator=iterator)
        records += page["Records"]
        iterator = page.get("NextShardIterator")
        if not page["Records"]:
            return records, iterator
        time.sleep(0.21)
    return records, None


def put(ddb, name, pk, sk, **attributes):
    ddb.put_item(TableName=name, Item={"PK": {"S": pk}, "SK": {"S": sk}, **{k: {"S": v} for k, v in attributes.items()}})


def test_records_follow_their_key_through_splits_in_order(endpoint, table):
    ddb, streams = client(endpoint), client(endpoint, "dynamodbstreams")
    arn = arn_of(endpoint, table)
    for round_ in range(3):
        for key in range(12):
            put(ddb, table, f"k{key}", "s", v=str(round_))
        endpoint.configure_hook("streams", shards=[2, 4, 8][round_])
        all_shards(streams, arn)  # let it take the records in and split
    shards = all_shards(streams, arn)
    by_id = {shard["ShardId"]: shard for shard in shards}
    open_ = [shard for shard in shards if "EndingSequenceNumber" not in shard["SequenceNumberRange"]]
    assert len(open_) == 8
    assert all(shard.get("ParentShardId") in by_id for shard in shards if shard is not shards[0])
    seen: dict[str, list[str]] = {}
    lineage: dict[str, set[str]] = {}
    for shard in shards:  # shard-id order is creation order: parents before children
        records, _ = read_shard(streams, arn, shard["ShardId"])
        for record in records:
            key = record["dynamodb"]["Keys"]["PK"]["S"]
            seen.setdefault(key, []).append(record["dynamodb"]["NewImage"]["v"]["S"])
            lineage.setdefault(key, set()).add(shard["ShardId"])
    assert seen == {f"k{key}": ["0", "1", "2"] for key in range(12)}
    for key, shard_ids in lineage.items():  # each key's shards are one line of descent
        ordered = sorted(shard_ids)
        for parent, child in zip(ordered, ordered[1:]):
            ancestors, node = set(), by_id[child].get("ParentShardId")
            while node:
                ancestors.add(node)
                node = by_id.get(node, {}).get("ParentShardId")
            assert parent in ancestors, key


def test_shards_roll_over_and_page_past_100_with_child_filter(endpoint, table):
    streams = client(endpoint, "dynamodbstreams")
    arn = arn_of(endpoint, table)
    first = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    assert len(first) == 1
    endpoint.configure_hook("streams", rollover_seconds=0.5)
    time.sleep(0.6)
    shards = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
    assert shards[0]["SequenceNumberRange"].get("EndingSequenceNumber")
    assert shards[1]["ParentShardId"] == first[0]["ShardId"]
    children = streams.describe_stream(StreamArn=arn, ShardFilter={"Type": "CHILD_SHARDS", "ShardId": first[0]["ShardId"]})
    assert [s["ShardId"] for s in children["StreamDescription"]["Shards"]] == [shards[1]["ShardId"]]
    endpoint.configure_hook("streams", rollover_seconds=3600, shards=120)
    page = streams.describe_stream(StreamArn=arn)["StreamDescription"]
    assert len(page["Shards"]) == 100 and page["LastEvaluatedShardId"] == page["Shards"][-1]["ShardId"]
    everything = all_shards(streams, arn)
    assert len({s["ShardId"] for s in everything}) == len(everything) > 120


def limited(call, calls: int, tries: int = 5) -> ClientError:
    """The error `calls` quick calls in a row end with. AWS's limits are per second: when a loaded
    machine took a second or more for them, the burst proves nothing and is made again (a burst made
    within a second that nothing refuses fails the test)."""
    for _ in range(tries):
        started = time.monotonic()
        try:
            for _ in range(calls):
                call()
        except ClientError as exc:
            return exc
        assert time.monotonic() - started >= 1.0, f"{calls} calls within a second, none refused"
        time.sleep(1.0)
    pytest.fail(f"{tries} bursts of {calls} calls each took a second or more: the machine is too slow to tell")


def test_limits_of_describe_get_records_and_readers(endpoint, table):
    ddb, streams = client(endpoint), client(endpoint, "dynamodbstreams")
    arn = arn_of(endpoint, table)
    put(ddb, table, "a", "s")
    refused = limited(lambda: streams.describe_stream(StreamArn=arn), 11)  # AWS: 10 a second
    assert refused.response["Error"]["Code"] == "LimitExceededException"
    time.sleep(1.0)
    shard_id = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterators = [streams.get_shard_iterator(StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")
                 ["ShardIterator"] for _ in range(3)]
    streams.get_records(ShardIterator=iterators[0])
    streams.get_records(ShardIterator=iterators[1])
    with pytest.raises(ClientError) as excinfo:
        streams.get_records(ShardIterator=iterators[2])  # a third reader
    assert error_code(excinfo) == "LimitExceededException"
    time.sleep(1.0)
    refused = limited(lambda: streams.get_records(ShardIterator=iterators[0]), 6)  # AWS: 5 a second a shard
    assert refused.response["Error"]["Code"] == "LimitExceededException"


def test_empty_pages_expiring_iterators_and_trims(endpoint, table):
    ddb, streams = client(endpoint), client(endpoint, "dynamodbstreams")
    arn = arn_of(endpoint, table)
    put(ddb, table, "a", "s")
    shard_id = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    endpoint.configure_hook("streams", empty_page_rate=1)
    start = streams.get_shard_iterator(StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    page = streams.get_records(ShardIterator=start)
    assert page["Records"] == [] and page["NextShardIterator"]
    endpoint.configure_hook("streams", empty_page_rate=0)
    page = streams.get_records(ShardIterator=page["NextShardIterator"])
    assert [r["dynamodb"]["Keys"]["PK"]["S"] for r in page["Records"]] == ["a"]
    endpoint.configure_hook("streams", iterator_seconds=0.3)
    time.sleep(0.4)
    with pytest.raises(ClientError) as excinfo:
        streams.get_records(ShardIterator=page["NextShardIterator"])
    assert error_code(excinfo) == "ExpiredIteratorException"
    endpoint.configure_hook("streams", iterator_seconds=900, retention_seconds=0.5, rollover_seconds=0.3)
    time.sleep(0.6)
    with pytest.raises(ClientError) as excinfo:  # the record after `start` is gone
        streams.get_shard_iterator(StreamArn=arn, ShardId=shard_id, ShardIteratorType="AFTER_SEQUENCE_NUMBER",
                                   SequenceNumber=str(int(page["Records"][0]["dynamodb"]["SequenceNumber"]) - 1))
    assert error_code(excinfo) in ("TrimmedDataAccessException", "ResourceNotFoundException")
    time.sleep(0.6)
    remaining = [s["ShardId"] for s in all_shards(streams, arn)]
    assert shard_id not in remaining  # closed and wholly trimmed: gone from the stream


def test_a_recreated_table_has_a_new_stream_and_the_old_one_is_disabled(endpoint, table):
    ddb, streams = client(endpoint), client(endpoint, "dynamodbstreams")
    old = arn_of(endpoint, table)
    put(ddb, table, "a", "s")
    streams.describe_stream(StreamArn=old)
    ddb.delete_table(TableName=table)
    time.sleep(0.1)
    create_table(ddb, table)
    new = arn_of(endpoint, table)
    assert new != old
    time.sleep(0.1)
    description = streams.describe_stream(StreamArn=old)["StreamDescription"]
    assert description["StreamStatus"] == "DISABLED"
    assert all("EndingSequenceNumber" in s["SequenceNumberRange"] for s in description["Shards"])
    assert [r["dynamodb"]["Keys"]["PK"]["S"] for r in read_shard(streams, old, description["Shards"][0]["ShardId"])[0]] == ["a"]
