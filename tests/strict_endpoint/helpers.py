"""Clients of the strict endpoint for its own tests: botocore as the site uses it, one attempt each
(so an injected fault reaches the test as the error it is), unless `attempts` says otherwise."""
from __future__ import annotations

import boto3
import botocore.session
from botocore.config import Config


def client(endpoint, service: str = "dynamodb", *, key: str | None = None, secret: str | None = None,
           token: str | None = None, attempts: int = 1, session=None, **config):
    """A boto3 client of `endpoint` that trusts its CA; the endpoint's default credentials unless
    `key`/`secret` (and `token`) are given or `session` (a botocore session) supplies its own."""
    kwargs = {"endpoint_url": endpoint.url, "region_name": endpoint.region, "verify": endpoint.ca_bundle,
              "config": Config(retries={"total_max_attempts": attempts, "mode": "standard"}, **config)}
    if session is None:
        kwargs.update(aws_access_key_id=key or endpoint.access_key_id,
                      aws_secret_access_key=secret or endpoint.secret_access_key, aws_session_token=token)
        return boto3.session.Session().client(service, **kwargs)
    return boto3.session.Session(botocore_session=session).client(service, **kwargs)


def error_code(excinfo) -> str:
    return excinfo.value.response["Error"]["Code"]


def fresh_botocore_session() -> botocore.session.Session:
    return botocore.session.Session()


def create_table(ddb, name: str, *, indexes: dict[str, tuple[str, str | None, str]] = (), wait: bool = True):
    """A PAY_PER_REQUEST table `name` keyed PK/SK (strings) with GSIs {index: (hash, range or None,
    projection type)}; waits (polling DescribeTable) until it is ACTIVE."""
    import time

    names = {"PK", "SK"} | {k for hash_key, range_key, _ in dict(indexes).values() for k in (hash_key, range_key) if k}
    definition = {
        "TableName": name, "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        "AttributeDefinitions": [{"AttributeName": n, "AttributeType": "S"} for n in sorted(names)],
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
    }
    if indexes:
        definition["GlobalSecondaryIndexes"] = [{
            "IndexName": index,
            "KeySchema": [{"AttributeName": hash_key, "KeyType": "HASH"}]
            + ([{"AttributeName": range_key, "KeyType": "RANGE"}] if range_key else []),
            "Projection": {"ProjectionType": projection},
        } for index, (hash_key, range_key, projection) in dict(indexes).items()]
    answer = ddb.create_table(**definition)
    while wait and ddb.describe_table(TableName=name)["Table"]["TableStatus"] != "ACTIVE":
        time.sleep(0.1)
    return answer


def sized_item(pk: str, size: int, sk: str = "s", **attributes) -> dict:
    """An item of exactly `size` bytes by AWS's rules: PK, SK, the string `attributes`, and a `pad`
    string filling the rest."""
    from stack.strict_endpoint.metering import item_size

    item = {"PK": {"S": pk}, "SK": {"S": sk}, **{k: {"S": v} for k, v in attributes.items()}, "pad": {"S": ""}}
    missing = size - item_size(item)
    assert missing >= 0, f"{size} bytes is too small for {item}"
    item["pad"] = {"S": "x" * missing}
    assert item_size(item) == size
    return item


def with_request_id(ddb, request_id: str):
    """Send X-Request-Tag on every request of `ddb` (added after signing, as a proxy would)."""
    def add(request, **kwargs):
        request.headers["X-Request-Tag"] = request_id

    ddb.meta.events.register("before-send.dynamodb.*", add)
    return ddb
