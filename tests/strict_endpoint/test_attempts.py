"""The attempts log: botocore's retries of one call share its invocation id and number their
attempts; a caller's X-Request-Tag groups every call of one page request."""
from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.strict_endpoint.helpers import client, with_request_id


def test_retries_are_grouped_by_invocation_and_request_id(strict, table, uid):
    strict.set_faults([{"kind": "ThrottlingException", "rate": 1.0, "operations": ["Query"]}])
    ddb = with_request_id(client(strict, attempts=3), f"page-{uid}")
    with pytest.raises(ClientError):
        ddb.query(TableName=table, KeyConditionExpression="PK = :p", ExpressionAttributeValues={":p": {"S": uid}})
    ddb.get_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}})
    summary = strict.attempts_summary()
    page = summary["by_request_id"][f"page-{uid}"]
    assert page["attempts"] == 4 and page["invocations"] == 2
    assert page["operations"] == ["Query"] * 3 + ["GetItem"]
    assert page["errors"] == ["ThrottlingException"] * 3 + [None]
    [query] = [group for group in summary["by_invocation"].values() if group["operations"][0] == "Query"]
    assert query["attempts"] == 3 and len(query["gaps_ms"]) == 2 and all(gap >= 0 for gap in query["gaps_ms"])
    assert summary["max_attempts_per_invocation"] == 3 and summary["max_attempts_per_request_id"] == 4
    attempts = [(e["attempt"], e["max_attempts"]) for e in strict.requests() if e["operation"] == "Query"]
    assert attempts == [(1, 3), (2, 3), (3, 3)]
    assert summary["key_ids"] == [strict.access_key_id]
