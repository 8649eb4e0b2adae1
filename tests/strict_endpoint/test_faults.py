"""Each fault kind at rate 1.0 reaches botocore as the error AWS would send (and at rate 0 never);
partial batches really leave their unprocessed items undone."""
from __future__ import annotations

import boto3
import pytest

from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

from stack.strict_endpoint.faults import ANSWERED
from tests.strict_endpoint.helpers import error_code


def _item(pk: str) -> dict:
    return {"PK": {"S": pk}, "SK": {"S": "s"}, "body": {"S": "hello"}}


@pytest.mark.parametrize("kind", sorted(ANSWERED))
def test_each_answered_fault_reaches_botocore_as_its_error(strict, ddb, table, kind):
    strict.set_faults([{"kind": kind, "rate": 1.0, "operations": ["GetItem"]}])
    with pytest.raises(ClientError) as excinfo:
        ddb.get_item(TableName=table, Key={"PK": {"S": "a"}, "SK": {"S": "s"}})
    assert error_code(excinfo) == kind
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == ANSWERED[kind][0]
    ddb.put_item(TableName=table, Item=_item("a"))  # another operation: untouched
    assert strict.requests()[-2]["fault"] == kind


def test_a_fault_at_rate_zero_never_fires(strict, ddb, table, uid):
    strict.set_faults([{"kind": "InternalServerError", "rate": 0.0}, {"kind": "ConnectionReset", "rate": 0.0}])
    for number in range(30):
        ddb.put_item(TableName=table, Item=_item(f"{uid}-{number}"))
    assert not [entry for entry in strict.requests() if entry["fault"] or entry["status"] != 200]


def test_faults_are_repeatable_for_a_seed(strict, ddb, table):
    def outcomes(seed):
        strict.set_faults([{"kind": "ThrottlingException", "rate": 0.5}], seed=seed)
        seen = []
        for _ in range(24):
            try:
                ddb.get_item(TableName=table, Key={"PK": {"S": "a"}, "SK": {"S": "s"}})
                seen.append("ok")
            except ClientError as exc:
                seen.append(exc.response["Error"]["Code"])
        return seen

    first = outcomes(7)
    assert 4 < first.count("ok") < 20
    assert outcomes(7) == first
    assert outcomes(8) != first


def test_unprocessed_items_really_stay_unwritten(strict, ddb, table, dynamodb_local, uid):
    strict.set_faults([{"kind": "UnprocessedItems", "rate": 1.0, "fraction": 0.3}])
    requests = [{"PutRequest": {"Item": _item(f"{uid}-{n}")}} for n in range(10)]
    answer = ddb.batch_write_item(RequestItems={table: requests})
    unprocessed = answer["UnprocessedItems"][table]
    assert len(unprocessed) == 3
    behind = boto3.client("dynamodb", endpoint_url=dynamodb_local.endpoint_url, region_name="us-east-1",
                          aws_access_key_id="local", aws_secret_access_key="local")
    stored = {item["PK"]["S"] for item in behind.scan(TableName=table)["Items"] if item["PK"]["S"].startswith(uid)}
    assert stored == {f"{uid}-{n}" for n in range(10)} - {r["PutRequest"]["Item"]["PK"]["S"] for r in unprocessed}
    assert strict.meter()["total"]["write"] == 7  # one unit per item written; no GSI key, no GSI write


def test_unprocessed_keys_are_returned_unread(strict, ddb, table, uid):
    for number in range(6):
        ddb.put_item(TableName=table, Item=_item(f"{uid}-{number}"))
    strict.set_faults([{"kind": "UnprocessedItems", "rate": 1.0, "fraction": 0.5}])
    keys = [{"PK": {"S": f"{uid}-{n}"}, "SK": {"S": "s"}} for n in range(6)]
    answer = ddb.batch_get_item(RequestItems={table: {"Keys": keys, "ConsistentRead": True}})
    read = {item["PK"]["S"] for item in answer["Responses"][table]}
    held = {key["PK"]["S"] for key in answer["UnprocessedKeys"][table]["Keys"]}
    assert len(read) == len(held) == 3 and read | held == {f"{uid}-{n}" for n in range(6)}
    assert answer["UnprocessedKeys"][table]["ConsistentRead"] is True


def test_a_one_item_batch_that_cannot_be_done_is_throttled_whole(strict, ddb, table):
    strict.set_faults([{"kind": "UnprocessedItems", "rate": 1.0}])
    with pytest.raises(ClientError) as excinfo:
        ddb.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": _item("solo")}}]})
    assert error_code(excinfo) == "ProvisionedThroughputExceededException"


@pytest.mark.parametrize("reason, code", [("Conflict", "TransactionConflict"), ("ThrottlingError", "ThrottlingError"),
                                          ("ValidationError", "ValidationError")])
def test_transactions_are_cancelled_with_reasons(strict, ddb, table, reason, code, uid):
    strict.set_faults([{"kind": "TransactionCanceled", "rate": 1.0, "reason": reason}])
    with pytest.raises(ClientError) as excinfo:
        ddb.transact_write_items(TransactItems=[{"Put": {"TableName": table, "Item": _item(f"{uid}-{n}")}}
                                                for n in range(3)])
    assert error_code(excinfo) == "TransactionCanceledException"
    reasons = [r["Code"] for r in excinfo.value.response["CancellationReasons"]]
    assert sorted(reasons) == sorted([code, "None", "None"])
    strict.set_faults([])
    assert not any("Item" in ddb.get_item(TableName=table, Key={"PK": {"S": f"{uid}-{n}"}, "SK": {"S": "s"}})
                   for n in range(3))  # nothing written


def test_a_connection_reset_before_forwarding_writes_nothing(strict, ddb, table, uid):
    strict.set_faults([{"kind": "ConnectionReset", "rate": 1.0, "operations": ["PutItem"]}])
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        ddb.put_item(TableName=table, Item=_item(uid))
    strict.set_faults([])
    assert "Item" not in ddb.get_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}})


def test_a_connection_reset_after_forwarding_loses_only_the_answer(strict, ddb, table, uid):
    strict.set_faults([{"kind": "ConnectionReset", "rate": 1.0, "operations": ["PutItem"], "after_forward": True}])
    with pytest.raises((ConnectionClosedError, EndpointConnectionError)):
        ddb.put_item(TableName=table, Item=_item(uid))
    strict.set_faults([])
    assert "Item" in ddb.get_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}})


def test_latency_is_added_to_every_answer(strict, ddb, table):
    strict.set_faults([], latency={"base_ms": 40, "jitter_ms": 10})
    for _ in range(3):
        ddb.describe_table(TableName=table)
    assert all(entry["duration_ms"] >= 40 for entry in strict.requests())


def test_a_bad_fault_is_refused_with_its_reason(strict):
    from stack.strict_endpoint import StrictEndpointError

    with pytest.raises(StrictEndpointError, match="unknown fault kind"):
        strict.set_faults([{"kind": "Gremlins"}])


def test_an_unreachable_dynamodb_local_is_a_503(tmp_path):
    from stack.dynamodb_local import free_port
    from stack.strict_endpoint import StrictEndpoint
    from tests.strict_endpoint.helpers import client

    with StrictEndpoint(f"http://127.0.0.1:{free_port()}", log_path=tmp_path / "endpoint.log") as endpoint:
        with pytest.raises(ClientError) as excinfo:
            client(endpoint).list_tables()
        with pytest.raises(ClientError) as unmetered:  # the metering's own reads fail first: the same answer
            client(endpoint).put_item(TableName="t", Item=_item("a"))
    assert error_code(excinfo) == error_code(unmetered) == "ServiceUnavailable"
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert "Traceback" not in (tmp_path / "endpoint.log").read_text()
