"""`make run` stopped with one Ctrl-C: the stack launched as `make run` launches it (`python -m
stack.run`, here on free ports with a scratch var dir, against this session's DynamoDB Local), in a
process group of its own as a terminal's foreground job is, then SIGINT sent to the whole group as
the terminal does (or SIGTERM, as `kill -- -PGID` does). Every process must exit, no traceback may be
printed, and sync_index must give up its shard leases (a standby would otherwise wait for them to
expire)."""
from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.test import override_settings

from comments.table.schema import create_tables, delete_tables
from stack.dynamodb_local import free_port
from tests import factories
from tests.processes import alive, descendants, leases
from tests.config import table_settings

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def answers(address: str) -> bool:
    host, port = address.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=2)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def assert_strict_endpoint_used(stdout: str) -> None:
    import json
    import re
    import urllib.request

    admin = re.search(r"strict endpoint https://\S+ in front of DynamoDB Local \(admin (http://[\d.:]+)", stdout)
    assert admin, stdout
    with urllib.request.urlopen(admin[1] + "/requests", timeout=5) as response:
        attempts = json.loads(response.read())
    assert {entry["operation"] for entry in attempts} >= {"DescribeTable", "DescribeStream"}
    assert len({entry["key_id"] for entry in attempts}) == 1
    # create_tables' CreateTable of the existing table is its ResourceInUseException; nothing else failed
    assert {entry["error"] for entry in attempts} <= {None, "ResourceInUseException"}, attempts


@pytest.fixture
def stack_table(dynamodb_settings):
    """A comments table with a few comments, so stack.run's seed_demo (--if-empty) writes nothing."""
    config = dict(dynamodb_settings, TABLE=f"comments-stack-{uuid.uuid4().hex[:8]}")
    with table_settings(config["TABLE"]):
        create_tables()
        factories.seed("RUN-1", 30, seed=5)
        try:
            yield config
        finally:
            delete_tables()


@pytest.mark.parametrize("signum, strict", [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["ctrl-c", "kill-group", "ctrl-c-strict-endpoint"])
def test_one_signal_to_the_process_group_stops_everything_cleanly(stack_table, tmp_path, signum, strict):
    """With STRICT_DYNAMODB=1 the site and sync_index also work through the strict endpoint: every
    request it saw was signed with the one key it knows, and none was refused."""
    web = f"127.0.0.1:{free_port()}"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "DJANGO_SETTINGS_MODULE": "shop.settings",
        "SHOP_VAR_DIR": str(tmp_path / "var"),
        "DYNAMODB_LOCAL_PORT": stack_table["ENDPOINT_URL"].rsplit(":", 1)[1],
        "COMMENTS_TABLE": stack_table["TABLE"],
        "WEB_ADDRESS": web,
        "SYNC_INDEX_POLL_SECONDS": "0.2",
    }
    if strict:
        env["STRICT_DYNAMODB"] = "1"
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "stack.run"], cwd=ROOT, env=env, stdout=stdout,
                                   stderr=stderr, process_group=0)
    database = tmp_path / "var" / "db.sqlite3"
    processes = [process.pid]
    try:
        deadline = time.monotonic() + 120
        while not (answers(web) and any(owner.startswith("sync:") for _, owner, _ in leases(database))):
            assert process.poll() is None, f"stack.run exited early:\n{out.read_text()}\n{err.read_text()}"
            assert time.monotonic() < deadline, f"the stack did not come up:\n{out.read_text()}\n{err.read_text()}"
            time.sleep(0.3)
        processes = descendants(process.pid)
        assert len(processes) >= 4, processes  # stack.run, runserver and its autoreloaded child, sync_index
        if strict:
            assert_strict_endpoint_used(out.read_text())

        os.killpg(process.pid, signum)
        assert process.wait(30) == 0, err.read_text()
        deadline = time.monotonic() + 15
        while alive(processes) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive(processes) == [], "processes left running"
    finally:
        for pid in alive(processes + (descendants(process.pid) if process.poll() is None else [])):
            os.kill(pid, signal.SIGKILL)
        process.wait()
    errors = err.read_text()
    assert "Traceback" not in errors and "KeyboardInterrupt" not in errors, errors
    assert leases(database) and all(owner == "" and expires is None for _, owner, expires in leases(database)), \
        leases(database)


def test_make_run_with_the_resp_backend_serves_every_page_in_agreement_with_dynamodb(stack_table, tmp_path):
    """PAGINATION_INDEX_BACKEND=resp: stack.run starts serve_index before anything reads the index,
    fills it (rebuild_index through ZLOAD/ZREPLACE), and every page past the first, read through the
    index, shows DynamoDB's comments in order; a comment written afterwards reaches the pages through
    sync_index and the server; one Ctrl-C stops serve_index too."""
    import sqlite3
    import urllib.request

    from tests.pages import parse

    web = f"127.0.0.1:{free_port()}"
    env = {
        "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path)),
        "DJANGO_SETTINGS_MODULE": "shop.settings", "SHOP_VAR_DIR": str(tmp_path / "var"),
        "DYNAMODB_LOCAL_PORT": stack_table["ENDPOINT_URL"].rsplit(":", 1)[1], "COMMENTS_TABLE": stack_table["TABLE"],
        "WEB_ADDRESS": web, "SYNC_INDEX_POLL_SECONDS": "0.2",
        "PAGINATION_INDEX_BACKEND": "resp", "PAGINATION_INDEX_RESP_URL": f"redis://127.0.0.1:{free_port()}/0",
        "COMMENTS_PAGE_SIZE": "3", "COMMENTS_FAST_PAGES": "1", "COMMENTS_FAST_CACHE_SECONDS": "0",
        "RESPONSE_MICRO_CACHE_SECONDS": "0",
    }
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "stack.run"], cwd=ROOT, env=env, stdout=stdout,
                                   stderr=stderr, process_group=0)
    database = tmp_path / "var" / "db.sqlite3"
    processes = [process.pid]

    def pages() -> list[tuple[str, str]]:
        url, shown = f"http://{web}/products/RUN-1/", []
        while url:
            with urllib.request.urlopen(url, timeout=10) as response:
                page = parse(response.read().decode())
            shown += page["comments"]
            url = page["next"] and (page["next"] if page["next"].startswith("http") else
                                    f"http://{web}/products/RUN-1/" + page["next"].split("/products/RUN-1/")[-1])
        return shown

    try:
        deadline = time.monotonic() + 120
        while not (answers(web) and any(owner.startswith("sync:") for _, owner, _ in leases(database))):
            assert process.poll() is None, f"stack.run exited early:\n{out.read_text()}\n{err.read_text()}"
            assert time.monotonic() < deadline, f"the stack did not come up:\n{out.read_text()}\n{err.read_text()}"
            time.sleep(0.3)
        assert any("serve_index" in " ".join(Path(f"/proc/{pid}/cmdline").read_text().split("\0"))
                   for pid in alive(descendants(process.pid)))
        with sqlite3.connect(database) as connection:
            connection.execute("INSERT INTO shop_product (sku, name, description, price, created_at, updated_at) "
                               "VALUES ('RUN-1', 'Run', '', 9.99, datetime('now'), datetime('now'))")
        # stack_table's comments (factories.seed("RUN-1", 30, seed=5) makes them alike every time)
        expected = [(comment.pk, comment.sk) for comment in factories.newest_first(
            factories.make_comments("RUN-1", 30, seed=5))]
        assert pages() == expected
        with override_settings(DYNAMODB=stack_table):
            [new] = factories.seed("RUN-1", 1, seed=9)
        expected = [(comment.pk, comment.sk) for comment in factories.newest_first(
            factories.make_comments("RUN-1", 30, seed=5) + [new])]
        deadline = time.monotonic() + 30
        while (shown := pages()) != expected:  # the pages' Queries show it before the index's ranks do
            assert time.monotonic() < deadline, f"the pages did not come to agree with the table: {shown}"
            time.sleep(0.5)
        processes = descendants(process.pid)
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(40) == 0, err.read_text()
        deadline = time.monotonic() + 15
        while alive(processes) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive(processes) == [], "processes left running"
    finally:
        for pid in alive(processes + (descendants(process.pid) if process.poll() is None else [])):
            os.kill(pid, signal.SIGKILL)
        process.wait()
    errors = err.read_text()
    assert "Traceback" not in errors, errors
