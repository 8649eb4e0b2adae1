"""Signatures, credentials and TLS: each refusal is the error AWS answers, parsed by botocore."""
from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request

import boto3
import pytest
from botocore.exceptions import ClientError, SSLError

from tests.strict_endpoint.helpers import client, error_code, fresh_botocore_session


def test_a_signed_call_succeeds_through_tls_with_the_ca_bundle(strict_endpoint):
    strict_endpoint.reset()
    answer = client(strict_endpoint).list_tables()
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert strict_endpoint.url.startswith("https://")
    [entry] = strict_endpoint.requests()
    assert (entry["operation"], entry["status"], entry["key_id"]) == ("ListTables", 200, strict_endpoint.access_key_id)


def test_dynamodb_streams_goes_through_the_same_checks(strict_endpoint):
    assert "Streams" in client(strict_endpoint, "dynamodbstreams").list_streams()
    with pytest.raises(ClientError) as excinfo:
        client(strict_endpoint, "dynamodbstreams", key="AKIAIOSFODNN7EXAMPLE", secret="x" * 40).list_streams()
    assert error_code(excinfo) == "UnrecognizedClientException"


def test_a_client_that_does_not_trust_the_ca_is_refused_by_tls(strict_endpoint):
    untrusting = boto3.client("dynamodb", endpoint_url=strict_endpoint.url, region_name="us-east-1",
                              aws_access_key_id=strict_endpoint.access_key_id,
                              aws_secret_access_key=strict_endpoint.secret_access_key, verify=True)
    with pytest.raises(SSLError):
        untrusting.list_tables()


def test_an_unknown_key_id_is_unrecognized(strict_endpoint):
    with pytest.raises(ClientError) as excinfo:
        client(strict_endpoint, key="local", secret="local").list_tables()
    assert error_code(excinfo) == "UnrecognizedClientException"
    assert excinfo.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert excinfo.value.response["ResponseMetadata"]["RequestId"]


def test_a_wrong_secret_is_an_invalid_signature(strict_endpoint):
    with pytest.raises(ClientError) as excinfo:
        client(strict_endpoint, secret="w" * 40).list_tables()
    assert error_code(excinfo) == "InvalidSignatureException"
    assert "signature we calculated does not match" in excinfo.value.response["Error"]["Message"]


def test_a_session_token_on_a_long_term_key_is_unrecognized(strict_endpoint):
    with pytest.raises(ClientError) as excinfo:
        client(strict_endpoint, token="not-a-token").list_tables()
    assert error_code(excinfo) == "UnrecognizedClientException"


def _post(strict_endpoint, headers: dict, body: bytes = b"{}") -> tuple[int, dict]:
    context = ssl.create_default_context(cafile=strict_endpoint.ca_bundle)
    request = urllib.request.Request(strict_endpoint.url + "/", data=body, method="POST", headers={
        "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "DynamoDB_20120810.ListTables", **headers})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_no_authorization_is_a_missing_authentication_token(strict_endpoint):
    status, body = _post(strict_endpoint, {})
    assert status == 400
    assert body["__type"] == "com.amazon.coral.service#MissingAuthenticationTokenException"


def test_a_signed_body_changed_on_the_way_is_an_invalid_signature(strict_endpoint):
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method="POST", url=strict_endpoint.url + "/", data=b"{}", headers={
        "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "DynamoDB_20120810.ListTables"})
    SigV4Auth(Credentials(strict_endpoint.access_key_id, strict_endpoint.secret_access_key), "dynamodb",
              "us-east-1").add_auth(request)
    headers = {name: value for name, value in request.headers.items() if name.lower() != "host"}
    assert _post(strict_endpoint, headers, b"{}")[0] == 200
    status, body = _post(strict_endpoint, headers, b'{"Limit": 1}')
    assert (status, body["__type"]) == (400, "com.amazon.coral.service#InvalidSignatureException")


@pytest.mark.parametrize("skew, words", [(400, "Signature expired"), (-400, "Signature not yet current")])
def test_a_request_date_more_than_five_minutes_off_is_refused(strict_endpoint, skew, words):
    """The endpoint's clock is set `skew` seconds from the machine's, so botocore's X-Amz-Date is off."""
    strict_endpoint.reset()
    strict_endpoint.configure(clock_skew_seconds=skew)
    try:
        with pytest.raises(ClientError) as excinfo:
            client(strict_endpoint).list_tables()
        assert error_code(excinfo) == "InvalidSignatureException"
        assert excinfo.value.response["Error"]["Message"].startswith(words)
        strict_endpoint.configure(clock_skew_seconds=skew * 0.7)  # within five minutes: accepted
        client(strict_endpoint).list_tables()
    finally:
        strict_endpoint.reset()


def test_temporary_credentials_refresh_through_the_container_provider_across_rotations(strict_endpoint, monkeypatch):
    """botocore's ContainerProvider reads AWS_CONTAINER_CREDENTIALS_FULL_URI; with credentials living
    less than its 10-minute mandatory refresh window it fetches them before every call, so calls keep
    working across rotations while a token once expired is refused."""
    url = strict_endpoint.temporary_credentials("web-test", lifetime=2.0, rotate_every=0.5)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url)
    session = fresh_botocore_session()
    web = client(strict_endpoint, session=session)
    first = session.get_credentials().get_frozen_credentials()
    assert first.access_key.startswith("ASIA") and first.token
    keys_used = set()
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        web.list_tables()
        keys_used.add(session.get_credentials().get_frozen_credentials().access_key)
        time.sleep(0.2)
    assert len(keys_used) >= 3  # rotated while in use, and no call failed
    with pytest.raises(ClientError) as excinfo:
        client(strict_endpoint, key=first.access_key, secret=first.secret_key, token=first.token).list_tables()
    assert error_code(excinfo) == "ExpiredTokenException"
    with pytest.raises(ClientError) as excinfo:
        client(strict_endpoint, key=first.access_key, secret=first.secret_key, token="forged" + first.token).list_tables()
    assert error_code(excinfo) == "UnrecognizedClientException"
