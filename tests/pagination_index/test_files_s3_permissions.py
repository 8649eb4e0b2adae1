"""The files backend on S3 under an IAM policy (moto's server enforcing it): a manifest S3 refuses with
403 AccessDenied is reported as the missing permission it is, never read as "no group" and never a
bare outage. S3 answers a GetObject of a missing key with 403 to a caller without s3:ListBucket
(GetObject reference, "Permissions"); moto does not emulate that rule (it answers 404 whenever
GetObject is allowed), so the 403 here comes from a policy that leaves the manifests out: the same
answer, the same code path."""
from __future__ import annotations

import json
import logging
import uuid

import boto3
import pytest
from botocore.exceptions import ClientError

from pagination_index.backends.base import IndexUnavailable
from pagination_index.backends.files import FileIndex
from pagination_index.testing import sk
from tests.conftest import service_missing
from tests.services import S3Server

BUCKET = "pidx-permissions"
# Requests moto serves before it enforces IAM: the bucket, the user, the policy and the key below.
SETUP_REQUESTS = 4


@pytest.fixture
def iam_s3(tmp_path):
    try:
        import moto.server  # noqa: F401
    except ImportError as exc:
        service_missing(f"moto[server] is not installed (pip install -r requirements-dev.txt): {exc}")
    server = S3Server(tmp_path, env={"INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}).start()
    yield server
    server.kill()


def test_a_403_on_a_manifest_names_the_missing_permission(iam_s3, tmp_path, monkeypatch, caplog):
    anonymous = dict(endpoint_url=iam_s3.url, region_name="us-east-1", aws_access_key_id="local",
                     aws_secret_access_key="local")
    boto3.client("s3", **anonymous).create_bucket(Bucket=BUCKET)
    iam = boto3.client("iam", **anonymous)
    iam.create_user(UserName="web")
    # The web role before the fix: objects readable, but no s3:ListBucket; here the manifests are left
    # out of GetObject too, so moto answers them 403 as S3 answers a missing one without ListBucket.
    iam.put_user_policy(UserName="web", PolicyName="read", PolicyDocument=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"],
                       "Resource": f"arn:aws:s3:::{BUCKET}/index/g/*/gen-*"}]}))
    key = iam.create_access_key(UserName="web")["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    index = FileIndex({"PATH": str(tmp_path / "journal"), "S3_BUCKET": BUCKET, "S3_PREFIX": "index/",
                       "S3_ENDPOINT_URL": iam_s3.url})
    # IAM is enforced: the same client is refused an action its policy leaves out.
    with pytest.raises(ClientError) as refused:
        index.storage._call("list_objects_v2", Prefix="index/")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    with caplog.at_level(logging.ERROR, logger="pagination_index.backends.files.s3"), \
            pytest.raises(IndexUnavailable, match=rf"s3:ListBucket on arn:aws:s3:::{BUCKET}"):
        index.count(f"no-such-group-{uuid.uuid4().hex}")
    assert "s3:ListBucket" in caplog.text  # logged as the configuration error it is, not only a 503


def test_without_iam_a_missing_manifest_is_no_group(files_s3_options):
    """With s3:ListBucket (moto without IAM answers as S3 does then): 404, an empty group."""
    index = FileIndex(files_s3_options)
    assert index.count("no-such-group") == 0
    assert index.range("no-such-group", 0, 5) == []
    index.replace("g", [("a", sk(1))])
    assert index.count_many(["g", "no-such-group"]) == {"g": 1, "no-such-group": 0}
