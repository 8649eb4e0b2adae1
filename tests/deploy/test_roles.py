"""Each component runs with its own role's key against the strict endpoint, which enforces the deploy
template's policies: what the component does is allowed, and an action or a resource outside its role
is AccessDeniedException. The calls made are the ones the role grants (tests/deploy/aws_actions.py)."""
from __future__ import annotations

import uuid

import pytest
from botocore.exceptions import ClientError
from django.core.management import call_command
from django.test import Client, override_settings

from comments.table.client import dynamodb, dynamodbstreams
from comments.table.schema import delete_tables
from moderation import services
from tests import factories
from tests.deploy.aws_actions import ungranted, unused_grants
from tests.deploy.roles import as_component, install_roles
from tests.config import index_config, table_settings

pytestmark = pytest.mark.django_db
SKU = "ROLES-1"


def denied(call) -> str:
    with pytest.raises(ClientError) as excinfo:
        call()
    assert excinfo.value.response["Error"]["Code"] == "AccessDeniedException"
    return excinfo.value.response["Error"]["Message"]


@pytest.mark.parametrize("backend", ["relational", "dynamodb", "files"])
def test_each_component_does_its_work_with_its_role_and_nothing_more(backend, strict_dynamodb_settings, strict_endpoint,
                                                                    aws_actions, settings, request):
    table = f"comments-{uuid.uuid4().hex[:12]}"
    parameters = {"CommentsTableName": table, "IndexBackend": backend}
    if backend == "dynamodb":  # the index in a table of its own, which the template makes and its roles name
        parameters["IndexTableName"] = f"{table}-pidx"
        settings.PAGINATION_INDEX = index_config(BACKEND=settings.PAGINATION_INDEX_BACKENDS["dynamodb"], OPTIONS=dict(
            settings.PAGINATION_INDEX_DYNAMODB, TABLE=parameters["IndexTableName"]))
    if backend == "files":  # on S3 (moto's server, which checks no policy: the plugin checks the calls)
        options = dict(request.getfixturevalue("files_s3_options"), COMMIT_ENTRIES=1)  # sync_index publishes
        parameters["IndexS3Prefix"] = options["S3_PREFIX"]
        settings.PAGINATION_INDEX = index_config(BACKEND=settings.PAGINATION_INDEX_BACKENDS["files"], OPTIONS=options)
    keys = install_roles(strict_endpoint, parameters)
    with table_settings(table):
        try:
            with as_component(keys, "operator"):
                call_command("create_tables", verbosity=0)
                denied(lambda: dynamodb().delete_table(TableName=table))  # deletion is nobody's role
            comments = factories.seed(SKU, 230, seed=5)  # the test's own set-up, with the default key
            factories.product(SKU)
            with as_component(keys, "operator"):
                call_command("rebuild_index", group=[SKU], verbosity=0)
                call_command("verify_index", verbosity=0)
                call_command("erase_comments", ids=[comments[5].pk], verbosity=0)
                denied(lambda: dynamodb().put_item(TableName=table, Item={"PK": {"S": "x"}, "SK": {"S": "y"}}))

            with as_component(keys, "web"):
                browser = Client(headers={"Origin": "http://testserver"})
                for path in (f"/products/{SKU}/", f"/products/{SKU}/?page=12", "/readyz"):
                    assert browser.get(path).status_code == 200, path
                posted = browser.post(f"/products/{SKU}/comments/", {"author": "Ann", "rating": "4", "body": "Hi."})
                assert posted.status_code == 303
                assert browser.get(posted["Location"]).status_code == 200
                page = browser.get(f"/products/{SKU}/?page=12").content.decode()
                assert f'id="comment-{comments[221].pk}"' in page
                # The staff screen's moderation (moderation.services): hide, show again, delete.
                assert services.comment_hide(comment_id=comments[3].pk, actor=None, reason="roles")
                assert services.comment_unhide(comment_id=comments[3].pk, actor=None, reason="roles")
                assert services.comment_delete(comment_id=comments[4].pk, actor=None, reason="roles")
                denied(lambda: dynamodb().scan(TableName=table, Limit=1))
                denied(lambda: dynamodb().batch_write_item(RequestItems={table: [
                    {"PutRequest": {"Item": {"PK": {"S": "x"}, "SK": {"S": "y"}}}}]}))
                denied(lambda: dynamodb().update_table(TableName=table, DeletionProtectionEnabled=False))
                denied(lambda: dynamodb().query(TableName="another-table", KeyConditionExpression="PK = :p",
                                                ExpressionAttributeValues={":p": {"S": "x"}}))
                denied(lambda: dynamodbstreams().list_streams(TableName=table))

            with as_component(keys, "stream"):
                call_command("sync_index", once=True, verbosity=0)
                denied(lambda: dynamodb().put_item(TableName=table, Item={"PK": {"S": "x"}, "SK": {"S": "y"}}))
                denied(lambda: dynamodb().query(TableName=table, KeyConditionExpression="PK = :p",
                                                ExpressionAttributeValues={":p": {"S": "x"}}))
            if backend == "files":  # a second commit of the group deletes the generation two back
                factories.seed(SKU, 1, seed=6)
                with as_component(keys, "stream"):
                    call_command("sync_index", once=True, verbosity=0)
        finally:
            delete_tables()  # with the default key: turning protection off and deleting are no role's
            if backend == "dynamodb":
                dynamodb().delete_table(TableName=parameters["IndexTableName"])

    calls = aws_actions()
    assert ungranted(calls) == []
    assert {call["component"] for call in calls} == {"operator", "web", "stream"}
    called = {(call["component"], call["action"]) for call in calls}
    assert {("web", "dynamodb:Query"), ("web", "dynamodb:PutItem"), ("stream", "dynamodb:GetRecords"),
            ("operator", "dynamodb:CreateTable"), ("operator", "dynamodb:UpdateContinuousBackups")} <= called
    # With the relational index, what the tour leaves unused is what other tests (or AWS) call.
    leftover = unused_grants(calls, backends=(backend,))
    # The DynamoDB index's BatchWriteItem: maintain() rewriting a group whose pages shifted too far.
    assert leftover.get("stream", set()) <= ({"dynamodb:BatchWriteItem"} if backend == "dynamodb" else set()), leftover

