"""`make run` (python -m stack.run) with PAGINATION_INDEX_BACKEND=dynamodb, on free ports: it creates
the index's own table, fills it from the comments table, serves deep pages from it with sync_index
beside it, and stops on SIGTERM. The comments are seeded first, in a DynamoDB Local of the test's own
that stack.run finds answering on its port: make run's own flagship product of 12,000 comments (the
other products fewer), whose stream, applied in batches of 1,000, grew one page item of the index
past DynamoDB's 400 KB until issue 42 (TransactWriteItems refused with a ValidationException, waited
out as an outage, and make run exiting "The index is unavailable")."""
from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from pagination_index.backends.dynamodb import DynamoDBIndex
from stack.dynamodb_local import DynamoDBLocal, DynamoDBLocalError, free_port
from tests.conftest import service_missing
from tests.pages import parse

# make run's own 12,000-comment product goes through sync_index first: minutes, more than the
# suite's 10-minute default on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
SKU = "KETTLE-2000"
BIG = 12_000  # make run's (seed_demo's default): 600 pages of 20, pages 11..600 from the index
PAGES = BIG // 20


def get(port: int, path: str) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


def test_make_run_serves_deep_pages_from_the_dynamodb_index(tmp_path):
    dynamodb = DynamoDBLocal()
    try:
        dynamodb.start()
    except DynamoDBLocalError as exc:
        service_missing(f"DynamoDB Local: {exc}")
    web = free_port()
    env = {"PATH": os.environ["PATH"], "DJANGO_SETTINGS_MODULE": "shop.settings", "SHOP_VAR_DIR": str(tmp_path / "var"),
           "DYNAMODB_LOCAL_PORT": str(dynamodb.port), "DYNAMODB_ENDPOINT_URL": dynamodb.endpoint_url,
           "WEB_ADDRESS": f"127.0.0.1:{web}", "PAGINATION_INDEX_BACKEND": "dynamodb", "PYTHONUNBUFFERED": "1",
           "DYNAMODB_READ_TIMEOUT": "30", "DJANGO_DEBUG": "1"}  # DJANGO_DEBUG: as make run sets it
    process = None
    log_path = tmp_path / "run.log"
    try:
        (tmp_path / "var").mkdir()
        for command in (["migrate", "--no-input", "-v", "0"], ["create_tables"], ["seed_demo", "--big", str(BIG), "--products", "2", "--comments", "25",
                                            "--threads", "2"]):
            done = subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        with open(log_path, "wb") as log:
            process = subprocess.Popen([sys.executable, "-m", "stack.run"], cwd=ROOT, env=env, stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 1800  # sync_index --once applies 12,000 records first (minutes on a loaded machine)
        while True:
            assert process.poll() is None, f"stack.run exited: {log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no answer on port {web}: {log_path.read_text()[-3000:]}"
            try:
                if get(web, "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        output = log_path.read_text()
        assert "index table comments-pidx (PAGINATION_INDEX_BACKEND=dynamodb)" in output, output

        client = boto3.client("dynamodb", endpoint_url=dynamodb.endpoint_url, region_name="us-east-1",
                              aws_access_key_id="local", aws_secret_access_key="local")
        assert client.describe_table(TableName="comments-pidx")["Table"]["TableStatus"] == "ACTIVE"
        index = DynamoDBIndex({"ENDPOINT_URL": dynamodb.endpoint_url, "TABLE": "comments-pidx"})
        assert index.count(SKU) == BIG
        # DynamoDB's own order of the product: its byProduct GSI, newest first
        table = []
        for page in client.get_paginator("query").paginate(
                TableName="comments", IndexName="byProduct", KeyConditionExpression="PK2 = :g",
                ExpressionAttributeValues={":g": {"S": SKU}}, ScanIndexForward=False):
            table += [item["PK"]["S"] for item in page["Items"]]
        assert len(table) == BIG and [member for member, _ in index.range(SKU, 0, BIG)] == table

        for number in (11, 12, 137, PAGES // 2, PAGES - 1, PAGES):  # deep pages: the index path
            status, html = get(web, f"/products/{SKU}/?page={number}")
            assert status == 200, number
            assert [pk for pk, _ in parse(html)["comments"]] == table[(number - 1) * 20:number * 20], number
        assert get(web, f"/products/{SKU}/?page={PAGES + 1}")[0] == 404
        assert {group: index.check_integrity(group) for group in index.groups()} == {group: [] for group in index.groups()}

        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(60) == 0, log_path.read_text()[-3000:]
    finally:
        if process and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        dynamodb.stop()
