"""The read path's shortcuts give exactly what the long way gives: item reads parsed from the wire
JSON (comments/table/client.py) and comment dates formatted from the SK's text (comments/store.py)."""
from __future__ import annotations

import json
import socket
import threading
from datetime import datetime, timezone
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.exceptions import ClientError
from django.conf import settings
from django.utils import dateformat

from comments.store import Comment, format_sk, parse_sk, put_comments
from comments.table.client import dynamodb, dynamodb_reads
from pagination_index import aws
from tests.factories import make_comments
from tests.config import aws_settings, endpoint_url, index_config


def botocore_sends(reads) -> list:
    """The requests the botocore client beside a DirectReads sends from now on (none, on the direct path)."""
    sent = []
    reads.client.meta.events.register("before-send.dynamodb.Query", lambda request, **kwargs: sent.append(request))
    return sent


def plain_client():
    """A client with botocore's own response parsing, for comparison."""
    return boto3.session.Session().client("dynamodb", endpoint_url=endpoint_url(), region_name=aws.EMULATOR_REGION,
                                          aws_access_key_id="local", aws_secret_access_key="local")


def without_metadata(response: dict) -> dict:
    return {key: value for key, value in response.items() if key != "ResponseMetadata"}


def test_item_reads_parse_as_botocore_parses_them(comments_table):
    put_comments(make_comments("READ-1", 30))
    fast, plain = dynamodb(), plain_client()
    query = {"TableName": comments_table, "IndexName": "byProduct", "Limit": 7,
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
    query = {"TableName": comments_table, "IndexName": "byProduct",
             "KeyConditionExpression": "PK2 = :g", "ExpressionAttributeValues": {":g": {"S": "READ-2"}}}
    assert without_metadata(fast.query(**query)) == without_metadata(plain.query(**query))
    assert walked == ["QueryOutput"]  # the plain client's, not ours
    fast.put_item(TableName=comments_table, Item={"PK": {"S": "bin"}, "SK": {"S": comment.sk}, "PK2": {"S": "READ-2"},
                                                  "blob": {"B": b"\x01"}})
    assert {item["PK"]["S"] for item in fast.query(**query)["Items"]} == {"c1", "bin"}
    assert walked == ["QueryOutput", "QueryOutput"]


# --- The page path's direct Query (comments/table/direct.py) ---------------------------------------
def test_direct_query_answers_as_the_client_does(comments_table):
    """Every shape of Query the pages send: from the top, from a key condition, with an exclusive start
    key, a page that ends the partition; the same answer as botocore's, none through botocore."""
    put_comments(make_comments("READ-3", 45))
    reads, plain = dynamodb_reads(), plain_client()
    through_botocore = botocore_sends(reads)
    query = {"TableName": comments_table, "IndexName": "byProduct", "Limit": 21,
             "KeyConditionExpression": "PK2 = :g", "ExpressionAttributeValues": {":g": {"S": "READ-3"}},
             "ScanIndexForward": False}
    first = reads.query(**query)
    assert len(first["Items"]) == 21 and "LastEvaluatedKey" in first
    assert without_metadata(first) == without_metadata(plain.query(**query))
    after = {**query, "KeyConditionExpression": "PK2 = :g AND SK < :sk",
             "ExpressionAttributeValues": {":g": {"S": "READ-3"}, ":sk": first["Items"][-1]["SK"]}}
    assert without_metadata(reads.query(**after)) == without_metadata(plain.query(**after))
    resumed = {**query, "ExclusiveStartKey": first["LastEvaluatedKey"], "Limit": 100}
    last = reads.query(**resumed)
    assert len(last["Items"]) == 24 and "LastEvaluatedKey" not in last
    assert without_metadata(last) == without_metadata(plain.query(**resumed))
    assert through_botocore == []


def test_direct_query_sends_the_request_botocore_sends(comments_table):
    """Same endpoint, body, operation and signed headers as the client's own request for the call."""
    seen = []
    client = dynamodb()
    client.meta.events.register("before-send.dynamodb.Query", lambda request, **kwargs: seen.append(request))
    try:
        query = {"TableName": comments_table, "IndexName": "byProduct", "Limit": 3,
                 "KeyConditionExpression": "PK2 = :g", "ExpressionAttributeValues": {":g": {"S": "X"}}}
        client.query(**query)
    finally:
        client.meta.events.unregister("before-send.dynamodb.Query")
    theirs, ours = seen[0], dynamodb_reads().signed_request("Query", query)
    assert (ours.method, ours.url) == (theirs.method, theirs.url)
    assert json.loads(ours.body) == json.loads(theirs.body)
    def header(request, name):  # botocore's prepared request holds bytes
        value = request.headers[name]
        return value.decode() if isinstance(value, bytes) else value

    for name in ("Content-Type", "X-Amz-Target"):
        assert header(ours, name) == header(theirs, name)

    def signed(request):
        authorization = header(request, "Authorization")
        scheme, _, fields = authorization.partition(" ")
        parts = dict(field.strip().split("=", 1) for field in fields.split(","))
        return scheme, parts["Credential"], set(parts["SignedHeaders"].split(";"))

    scheme, credential, headers = signed(ours)
    assert scheme == "AWS4-HMAC-SHA256" and credential.endswith(f"/{aws.region(endpoint_url())}/dynamodb/aws4_request")
    assert {"host", "x-amz-date", "x-amz-target", "content-type"} <= headers
    assert signed(theirs)[1:] == (credential, headers)


def read_message(connection: socket.socket) -> bytes:
    """One HTTP/1.1 message (headers and a Content-Length body) from a socket; b"" if it closed first."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


class IdleClosingRelay:
    """A TCP relay to DynamoDB Local that answers one request per connection and then closes it without
    saying so, as a server whose keep-alive timeout strikes while the connection sits idle."""

    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname, parts.port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        self.closed = threading.Semaphore(0)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.upstream) as upstream:
            upstream.sendall(read_message(client))
            client.sendall(read_message(upstream))
        self.closed.release()

    def wait_closed(self) -> None:
        """Until the last answered connection is closed: a close that races the client's reuse of it
        is a different case (a failed attempt, as in botocore), not this one."""
        assert self.closed.acquire(timeout=10)

    def close(self) -> None:
        self.listener.close()


def test_a_connection_closed_while_idle_is_replaced_not_counted_as_a_failure(comments_table, settings):
    """The Query goes again at once on a new connection: no fallback to botocore, no attempt used up."""
    put_comments(make_comments("READ-6", 3))
    from django.test import override_settings

    relay = IdleClosingRelay(settings.PAGINATION_INDEX["AWS"]["ENDPOINT_URL"])
    try:
        # Only for this block: the table's teardown must reach DynamoDB Local itself again.
        with aws_settings(ENDPOINT_URL=relay.url, MAX_ATTEMPTS=1):
            reads = dynamodb_reads()
            through_botocore = botocore_sends(reads)
            query = {"TableName": comments_table, "IndexName": "byProduct",
                     "KeyConditionExpression": "PK2 = :g", "ExpressionAttributeValues": {":g": {"S": "READ-6"}}}
            for _ in range(3):
                assert len(reads.query(**query)["Items"]) == 3
                relay.wait_closed()
            assert through_botocore == [] and relay.connections == 3
    finally:
        relay.close()


def test_direct_query_parses_errors_and_binary_values_as_botocore_does(comments_table):
    """botocore's own parser reads what is not plain JSON: an error becomes the client's exception class
    at once (a ValidationException is not retried), a binary value comes back as bytes."""
    reads = dynamodb_reads()
    through_botocore = botocore_sends(reads)
    with pytest.raises(reads.client.exceptions.ClientError) as caught:
        reads.query(TableName=comments_table, KeyConditionExpression="nonsense = :x", ExpressionAttributeValues={":x": {"S": "y"}})
    assert caught.value.response["Error"]["Code"] == "ValidationException"
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    dynamodb().put_item(TableName=comments_table, Item={"PK": {"S": "bin"}, "SK": {"S": format_sk(datetime.now(timezone.utc))},
                                                        "PK2": {"S": "READ-4"}, "blob": {"B": b"\x00\xff"}})
    found = reads.query(TableName=comments_table, IndexName="byProduct", KeyConditionExpression="PK2 = :g",
                        ExpressionAttributeValues={":g": {"S": "READ-4"}})
    assert found["Items"][0]["blob"] == {"B": b"\x00\xff"}
    assert through_botocore == []


class ClosingServer:
    """Accepts connections and closes each at once, unanswered: a DynamoDB that is down behind a load
    balancer. Counts the connections (one per attempt)."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            read_message(connection)
            connection.close()

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("attempts", [1, 3])
def test_a_dead_endpoint_is_store_unavailable_after_the_attempt_budget(dynamodb_settings, settings, attempts):
    """DYNAMODB_MAX_ATTEMPTS requests in all, the direct path's and botocore's together."""
    from comments.selectors import comments_query
    from comments.table.client import StoreUnavailable

    server = ClosingServer()
    try:
        settings.PAGINATION_INDEX = index_config(aws={"ENDPOINT_URL": server.url, "MAX_ATTEMPTS": attempts})
        with pytest.raises(StoreUnavailable):
            comments_query("READ-5")[0:20]
        assert server.connections == attempts
    finally:
        server.close()


def test_a_proxy_sends_the_page_path_through_botocore(dynamodb_settings, settings, monkeypatch):
    """botocore speaks to proxies and the direct path does not: with HTTPS_PROXY/HTTP_PROXY set for the
    endpoint, the direct path steps aside (and NO_PROXY brings it back)."""
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    settings.PAGINATION_INDEX = index_config()
    assert not dynamodb_reads().direct
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    settings.PAGINATION_INDEX = index_config()
    assert dynamodb_reads().direct
