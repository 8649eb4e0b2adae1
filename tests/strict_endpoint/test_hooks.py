"""The streams and GSI-view seams: configured by dotted path at start-up, called by the endpoint."""
from __future__ import annotations

import uuid

from stack.strict_endpoint import StrictEndpoint
from tests.strict_endpoint.helpers import client, create_table, sized_item


def test_streams_and_gsi_view_hooks_are_called(dynamodb_local, tmp_path):
    config = {"creating_seconds": 0,
              "streams": {"class": "tests.strict_endpoint.hook_doubles.EchoStreams", "options": {"label": "L1"}},
              "gsi_view": {"class": "tests.strict_endpoint.hook_doubles.HidingGsiView", "options": {}}}
    with StrictEndpoint(dynamodb_local.endpoint_url, config=config, log_path=tmp_path / "endpoint.log") as endpoint:
        ddb, streams = client(endpoint), client(endpoint, "dynamodbstreams")
        name = f"strict-{uuid.uuid4().hex[:10]}"
        create_table(ddb, name, indexes={"byG": ("G", "SK", "ALL")})
        assert ddb.describe_table(TableName=name)["Table"]["LatestStreamArn"].endswith("/stream/L1")
        assert streams.list_streams()["Streams"][0]["StreamLabel"] == "L1"
        for sk in ("s1", "s2", "s3"):
            extra = {"hide": "yes"} if sk == "s2" else {}
            ddb.put_item(TableName=name, Item=sized_item("p", 60, sk=sk, G="g", **extra))
        found = ddb.query(TableName=name, IndexName="byG", KeyConditionExpression="G = :g",
                          ExpressionAttributeValues={":g": {"S": "g"}})
        assert [item["SK"]["S"] for item in found["Items"]] == ["s1", "s3"]
        ddb.delete_table(TableName=name)
    assert endpoint.process is None
