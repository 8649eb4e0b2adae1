"""IAM identity policies as AWS evaluates them: an Allow is needed, an explicit Deny wins; actions
and resources (table, index, stream ARNs) with wildcards; every table a batch or transaction touches;
the same for temporary credentials issued to a principal."""
from __future__ import annotations

import botocore.session
import pytest
from botocore.exceptions import ClientError

from stack.strict_endpoint.operations import requested_actions
from tests.strict_endpoint.helpers import client, error_code, sized_item

ARN = "arn:aws:dynamodb:us-east-1:123456789012:table"


def policy(*statements) -> dict:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def denied(call) -> str:
    with pytest.raises(ClientError) as excinfo:
        call()
    assert error_code(excinfo) == "AccessDeniedException"
    return excinfo.value.response["Error"]["Message"]


def test_actions_and_resources_are_checked(strict, table, uid):
    key, secret = strict.add_credentials("web")
    web = client(strict, key=key, secret=secret)
    strict.set_policies("web", [policy(
        {"Effect": "Allow", "Action": ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"],
         "Resource": [f"{ARN}/{table}", f"{ARN}/{table}/index/*"]})])
    web.put_item(TableName=table, Item=sized_item(uid, 50, G="g"))
    web.get_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}})
    web.query(TableName=table, IndexName="byG", KeyConditionExpression="G = :g", ExpressionAttributeValues={":g": {"S": "g"}})
    message = denied(lambda: web.delete_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}}))
    assert message == (f"User: arn:aws:iam::123456789012:user/web is not authorized to perform: dynamodb:DeleteItem on "
                       f"resource: {ARN}/{table} because no identity-based policy allows the dynamodb:DeleteItem action")
    denied(lambda: web.get_item(TableName="another-table", Key={"PK": {"S": uid}, "SK": {"S": "s"}}))
    denied(lambda: web.scan(TableName=table))
    client(strict).scan(TableName=table, Limit=1)  # the default principal has no policy: allowed


def test_an_explicit_deny_wins_and_not_action_works(strict, table, uid):
    key, secret = strict.add_credentials("reader")
    reader = client(strict, key=key, secret=secret)
    strict.set_policies("reader", [
        policy({"Effect": "Allow", "Action": "dynamodb:*", "Resource": "*"}),
        policy({"Effect": "Deny", "NotAction": ["dynamodb:Get*", "dynamodb:Query", "dynamodb:Describe*"],
                "Resource": f"{ARN}/{table}*"})])
    reader.describe_table(TableName=table)
    reader.get_item(TableName=table, Key={"PK": {"S": uid}, "SK": {"S": "s"}})
    message = denied(lambda: reader.put_item(TableName=table, Item=sized_item(uid, 50)))
    assert message.endswith("with an explicit deny in an identity-based policy")
    reader.list_tables()  # not on the table: allowed


def test_every_table_of_a_batch_or_transaction_is_checked(strict, table, uid):
    key, secret = strict.add_credentials("writer")
    writer = client(strict, key=key, secret=secret)
    strict.set_policies("writer", [policy(
        {"Effect": "Allow", "Action": ["dynamodb:BatchWriteItem", "dynamodb:PutItem"], "Resource": f"{ARN}/{table}"})])
    writer.batch_write_item(RequestItems={table: [{"PutRequest": {"Item": sized_item(uid, 50)}}]})
    denied(lambda: writer.batch_write_item(RequestItems={
        table: [{"PutRequest": {"Item": sized_item(uid, 50)}}], "other": [{"PutRequest": {"Item": sized_item(uid, 50)}}]}))
    writer.transact_write_items(TransactItems=[{"Put": {"TableName": table, "Item": sized_item(uid, 50)}}])
    message = denied(lambda: writer.transact_write_items(TransactItems=[
        {"Put": {"TableName": table, "Item": sized_item(f"{uid}-2", 50)}},
        {"ConditionCheck": {"TableName": table, "Key": {"PK": {"S": uid}, "SK": {"S": "s"}},
                            "ConditionExpression": "attribute_exists(PK)"}}]))
    assert "dynamodb:ConditionCheckItem" in message


def test_stream_actions_are_checked_on_the_stream_arn(strict, table):
    key, secret = strict.add_credentials("consumer")
    streams = client(strict, "dynamodbstreams", key=key, secret=secret)
    strict.set_policies("consumer", [policy(
        {"Effect": "Allow", "Action": ["dynamodb:DescribeStream", "dynamodb:GetShardIterator", "dynamodb:ListStreams"],
         "Resource": [f"{ARN}/{table}/stream/*"]},
        {"Effect": "Allow", "Action": "dynamodb:ListStreams", "Resource": "*"})])
    [stream] = [s for s in streams.list_streams(TableName=table)["Streams"]]
    shard = streams.describe_stream(StreamArn=stream["StreamArn"])["StreamDescription"]["Shards"][0]
    iterator = streams.get_shard_iterator(StreamArn=stream["StreamArn"], ShardId=shard["ShardId"],
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    message = denied(lambda: streams.get_records(ShardIterator=iterator))
    assert f"dynamodb:GetRecords on resource: {ARN}/{table}/stream/" in message


def test_temporary_credentials_carry_their_principals_policies(strict, table, monkeypatch):
    url = strict.temporary_credentials("lambda-role", lifetime=60)
    strict.set_policies("lambda-role", [policy({"Effect": "Allow", "Action": "dynamodb:DescribeTable",
                                                "Resource": f"{ARN}/{table}"})])
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url)
    role = client(strict, session=botocore.session.Session())
    role.describe_table(TableName=table)
    message = denied(lambda: role.scan(TableName=table))
    assert message.startswith("User: arn:aws:sts::123456789012:assumed-role/lambda-role/lambda-role is not authorized")


def test_a_policy_with_a_condition_is_refused_not_ignored(strict):
    from stack.strict_endpoint import StrictEndpointError

    with pytest.raises(StrictEndpointError, match="Conditions are not evaluated"):
        strict.set_policies("web", [policy({"Effect": "Allow", "Action": "dynamodb:*", "Resource": "*",
                                            "Condition": {"Bool": {"aws:SecureTransport": "true"}}})])


def test_every_operation_of_both_services_has_an_action():
    """Every operation botocore knows for DynamoDB and DynamoDB Streams maps to a dynamodb: action."""
    session = botocore.session.Session()
    statement = 'SELECT * FROM "t"'
    params = {"TableName": "t", "Statement": statement, "Statements": [{"Statement": statement}],
              "TransactStatements": [{"Statement": statement}], "RequestItems": {"t": {}},
              "TransactItems": [{"Get": {"TableName": "t"}}]}
    for service, name in (("dynamodb", "dynamodb"), ("streams", "dynamodbstreams")):
        for operation in session.get_service_model(name).operation_names:
            if operation == "TransactWriteItems":
                params = {**params, "TransactItems": [{"Put": {"TableName": "t"}}]}
            pairs = requested_actions(service, operation, params, region="us-east-1", account="1")
            assert pairs and all(action.startswith("dynamodb:") for action, _ in pairs), operation
    assert requested_actions("dynamodb", "Query", {"TableName": "t", "IndexName": "i"}, region="r", account="a") == [
        ("dynamodb:Query", "arn:aws:dynamodb:r:a:table/t/index/i")]
    assert requested_actions("dynamodb", "TransactGetItems", {"TransactItems": [{"Get": {"TableName": "t", "Key": {}}}]},
                             region="r", account="a") == [("dynamodb:GetItem", "arn:aws:dynamodb:r:a:table/t")]
