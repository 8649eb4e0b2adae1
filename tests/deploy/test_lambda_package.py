"""`make lambda-package` builds the stream Lambda's zip from requirements.lock within Lambda's limits;
unpacked into an empty folder and run by a bare interpreter (no site-packages), its handler applies an
AWS-shaped DynamoDB Streams event to the index (the DynamoDB backend on DynamoDB Local).

The zip is built for this machine's Python (LAMBDA_PYTHON) so that it can run here; the template's
runtime is python3.12, the Makefile's default, built the same way."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from deploy.aws.lambda_package import UNZIPPED_LIMIT
from pagination_index.backends.dynamodb import DynamoDBIndex
from stack.dynamodb_local import ROOT
from tests import factories
from tests.pagination_index.streams import lambda_event, read_stream_records, stream_arn

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    output = tmp_path_factory.mktemp("lambda") / "sync-index.zip"
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    result = subprocess.run(["make", "--no-print-directory", "lambda-package", f"LAMBDA_PYTHON={python}",
                             f"LAMBDA_ZIP={output}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return output


def test_the_zip_holds_the_handler_and_its_dependencies_within_the_limit(package):
    with zipfile.ZipFile(package) as archive:
        names = set(archive.namelist())
        unzipped = sum(info.file_size for info in archive.infolist())
    assert "pagination_index/aws_lambda.py" in names
    assert {"django/__init__.py", "boto3/__init__.py", "aws_lambda_powertools/__init__.py"} <= names
    assert not any("__pycache__" in name for name in names)
    assert unzipped < UNZIPPED_LIMIT


@pytest.mark.django_db
def test_the_unpacked_handler_applies_a_streams_event(package, comments_table, dynamodb_settings, tmp_path):
    comments = factories.seed("LAMBDA-1", 7, seed=4)
    event = lambda_event(read_stream_records(stream_arn()), stream_arn())
    assert [record["eventName"] for record in event["Records"]] == ["INSERT"] * 7
    folder = tmp_path / "task"
    with zipfile.ZipFile(package) as archive:
        archive.extractall(folder)
    (tmp_path / "event.json").write_text(json.dumps(event))
    options = {"ENDPOINT_URL": dynamodb_settings["ENDPOINT_URL"], "TABLE": f"pidx-{uuid.uuid4().hex[:12]}"}
    index = DynamoDBIndex(options)
    index.create_table()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "DJANGO_SETTINGS_MODULE": "shop.settings",
           "DJANGO_SECRET_KEY": "lambda-" + uuid.uuid4().hex * 2, "SHOP_VAR_DIR": str(tmp_path), "DATABASE_URL": f"sqlite:///{tmp_path / 'site.sqlite3'}",
           "DYNAMODB_ENDPOINT_URL": dynamodb_settings["ENDPOINT_URL"], "COMMENTS_TABLE": comments_table,
           "PAGINATION_INDEX_BACKEND": "dynamodb", "PAGINATION_INDEX_DYNAMODB_TABLE": options["TABLE"],
           "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_DEFAULT_REGION": "us-east-1",
           "POWERTOOLS_METRICS_NAMESPACE": "CornerShop", "POWERTOOLS_SERVICE_NAME": "sync-index"}
    # The site's database, migrated (the operator's `migrate`): the handler reads rebuild fences there.
    script = ("import json, sys; sys.path.insert(0, '.'); import django; django.setup(); "
              "from django.core.management import call_command; call_command('migrate', verbosity=0); "
              "from pagination_index.aws_lambda import handler; "
              f"print(json.dumps(handler(json.load(open({str(tmp_path / 'event.json')!r})), None)))")
    try:
        # -S: no site-packages, so nothing but the unpacked folder and the standard library is importable.
        result = subprocess.run([sys.executable, "-S", "-c", script], cwd=folder, env=env, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        *logged, answer = result.stdout.strip().splitlines()
        assert json.loads(answer) == {"batchItemFailures": []}
        [emf] = [json.loads(line) for line in logged if line.startswith('{"_aws"')]
        assert emf["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "CornerShop"
        assert emf["service"] == "sync-index" and emf["RecordsApplied"] == [7.0] and emf["RecordsFailed"] == [0.0]
        assert 0 <= emf["StreamApplyLag"][0] < 600
        assert [member for member, _ in index.range("LAMBDA-1", 0, 10)] == [c.pk for c in comments]
    finally:
        index.delete_table()
        index.close()
