"""The read path's shortcuts give exactly what the long way gives: item reads parsed from the wire
JSON (comments/table/client.py) and comment dates formatted from the SK's text (comments/store.py)."""
from __future__ import annotations

from datetime import datetime, timezone

import boto3
import pytest
from django.conf import settings
from django.utils import dateformat

from comments.store import Comment, format_sk, parse_sk, put_comments
from comments.table.client import dynamodb
from tests.factories import make_comments


def plain_client():
    """A client with botocore's own response parsing, for comparison."""
    config = settings.DYNAMODB
    return boto3.session.Session().client("dynamodb", endpoint_url=config["ENDPOINT_URL"], region_name=config["REGION"],
                                          aws_access_key_id="local", aws_secret_access_key="local")


def without_metadata(response: dict) -> dict:
    return {key: value for key, value in response.items() if key != "ResponseMetadata"}


def test_item_reads_parse_as_botocore_parses_them(comments_table):
    put_comments(make_comments("READ-1", 30))
    fast, plain = dynamodb(), plain_client()
    query = {"TableName": comments_table, "IndexName": settings.DYNAMODB["GSI"], "Limit": 7,
             "KeyConditionExpression": "PK2 = :g", "ExpressionAttributeValues": {":g": {"S": "READ-1"}},
             "ScanIndexForward": False, "ReturnConsumedCapacity": "TOTAL"}
    first = fast.query(**query)
    assert first["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert len(first["Items"]) == 7 and "LastEvaluatedKey" in first
    assert without_metadata(first) == without_metadata(plain.query(**query))
    query["ExclusiveStartKey"] = first["LastEvaluatedKey"]
    assert without_metadata(fast.query(**query)) == without_metadata(plain.query(**query))

    scan = {"TableName": comments_table, "Limit": 11}
    assert without_metadata(fast.scan(**scan)) == without_metadata(plain.scan(**scan))
    item = first["Items"][0]
    key = {"Key": {"PK": item["PK"], "SK": item["SK"]}, "TableName": comments_table, "ConsistentRead": True}
    assert without_metadata(fast.get_item(**key)) == without_metadata(plain.get_item(**key)) == {"Item": item}
    missing = {**key, "Key": {"PK": {"S": "nobody"}, "SK": item["SK"]}}
    assert without_metadata(fast.get_item(**missing)) == {}


def test_binary_attributes_still_come_back_as_bytes(comments_table):
    """B and BS are base64 on the wire: such bodies take botocore's model walk."""
    fast = dynamodb()
    fast.put_item(TableName=comments_table, Item={"PK": {"S": "bin"}, "SK": {"S": format_sk(datetime.now(timezone.utc))},
                                                  "blob": {"B": b"\x00\xffraw"}, "blobs": {"BS": [b"a", b"b"]}})
    item = fast.scan(TableName=comments_table)["Items"][0]
    assert item["blob"] == {"B": b"\x00\xffraw"}
    assert sorted(item["blobs"]["BS"]) == [b"a", b"b"]


def test_errors_are_still_client_errors(comments_table):
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as caught:
        dynamodb().query(TableName=comments_table, KeyConditionExpression="nonsense = :x",
                             ExpressionAttributeValues={":x": {"S": "y"}})
    assert caught.value.response["Error"]["Code"] == "ValidationException"


@pytest.mark.parametrize("sk", ["2019-01-01T00:00:00.000000Z", "2024-03-05T13:04:05.123456Z",
                                "2026-12-31T23:59:59.999999Z", "2021-10-09T07:08:09.000500Z"])
def test_comment_dates_read_as_the_date_filter_writes_them(sk):
    comment = Comment(pk="c", sk=sk, sku="S", author="a", body="b", rating=3)
    created = parse_sk(sk)
    assert comment.created_day == dateformat.format(created, "j F Y")
    assert comment.created_title == dateformat.format(created, "j F Y, H:i:s")
    assert comment.created_html == created.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize("month", range(1, 13))
def test_every_month_is_named_as_the_date_filter_names_it(month):
    sk = f"2025-{month:02d}-17T08:00:00.000000Z"
    comment = Comment(pk="c", sk=sk, sku="S", author="a", body="b", rating=3)
    assert comment.created_day == dateformat.format(parse_sk(sk), "j F Y")


@pytest.mark.parametrize(("rating", "stars"), [(0, "☆☆☆☆☆"), (1, "★☆☆☆☆"), (4, "★★★★☆"), (5, "★★★★★"), (9, "★★★★★")])
def test_stars(rating, stars):
    assert Comment(pk="c", sk="2024-01-01T00:00:00.000000Z", sku="S", author="a", body="b", rating=rating).stars == stars


def test_ordinary_pages_skip_the_model_walk(comments_table, monkeypatch):
    """Only a body with a binary value goes through botocore's walk; "B..." text does not."""
    from botocore import parsers

    walked = []
    original = parsers.JSONParser._handle_json_body
    monkeypatch.setattr(parsers.JSONParser, "_handle_json_body",
                        lambda self, raw, shape: (shape.name == "QueryOutput" and walked.append(shape.name))
                        or original(self, raw, shape))
    comment = Comment(pk="c1", sk=format_sk(datetime.now(timezone.utc)), sku="READ-2", author="Bob",
                      body='Quoted: "B": {"BS": 1} and "Bold"', rating=4)
    put_comments([comment])
    fast, plain = dynamodb(), plain_client()
    query = {"TableName": comments_table, "IndexName": settings.DYNAMODB["GSI"],
             "KeyConditionExpression": "PK2 = :g", "ExpressionAttributeValues": {":g": {"S": "READ-2"}}}
    assert without_metadata(fast.query(**query)) == without_metadata(plain.query(**query))
    assert walked == ["QueryOutput"]  # the plain client's, not ours
    fast.put_item(TableName=comments_table, Item={"PK": {"S": "bin"}, "SK": {"S": comment.sk}, "PK2": {"S": "READ-2"},
                                                  "blob": {"B": b"\x01"}})
    assert {item["PK"]["S"] for item in fast.query(**query)["Items"]} == {"c1", "bin"}
    assert walked == ["QueryOutput", "QueryOutput"]
