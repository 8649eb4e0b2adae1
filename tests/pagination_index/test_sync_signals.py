"""sync_index stopped by signals, as a real process: one SIGINT/SIGTERM stops it after the batch under
way; a second one forces it out at once. Either way it releases its shard leases (a standby need not
wait for them to expire) and prints no traceback."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from comments.table.schema import create_tables, delete_tables
from pagination_index.stream import StreamConsumer
from tests import factories
from tests.processes import leases
from tests.config import table_settings

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def follower(dynamodb_settings, tmp_path):
    """Start `sync_index` on a table of its own with a migrated SQLite file; yields (process, db, stderr,
    stdout)."""
    config = dict(dynamodb_settings, TABLE=f"comments-signals-{uuid.uuid4().hex[:8]}")
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", str(tmp_path)),
           "DJANGO_SETTINGS_MODULE": "shop.settings", "DJANGO_DEBUG": "1", "SHOP_VAR_DIR": str(tmp_path),
           "PYTHONUNBUFFERED": "1",  # what it printed survives a kill
           "DYNAMODB_ENDPOINT_URL": config["ENDPOINT_URL"], "COMMENTS_TABLE": config["TABLE"]}
    with table_settings(config["TABLE"]):
        create_tables()
        try:
            factories.seed("SIG-1", 30, seed=3)
            subprocess.run([sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env,
                           check=True, timeout=300)
            stderr, stdout = tmp_path / "stderr.txt", tmp_path / "stdout.txt"
            with open(stderr, "wb") as err, open(stdout, "wb") as out:
                process = subprocess.Popen([sys.executable, "manage.py", "sync_index", "--poll-seconds", "0.2"],
                                           cwd=ROOT, env=env, stdout=out, stderr=err, process_group=0)
            database = tmp_path / "db.sqlite3"
            try:
                deadline = time.monotonic() + 120
                while not any(owner.startswith("sync:") for _, owner, _ in leases(database)):
                    assert process.poll() is None, stderr.read_text()
                    assert time.monotonic() < deadline, "sync_index took no lease"
                    time.sleep(0.2)
                yield process, database, stderr, stdout
            finally:
                if process.poll() is None:
                    process.kill()
                process.wait()
        finally:
            delete_tables()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_one_signal_stops_it_cleanly(follower, signum):
    process, database, stderr, _ = follower
    process.send_signal(signum)
    assert process.wait(30) == 0, stderr.read_text()
    assert "Traceback" not in stderr.read_text()
    assert all(owner == "" for _, owner, _ in leases(database)), leases(database)


def test_a_second_signal_forces_it_out_without_a_traceback_leases_released(follower):
    """What `make run` did before issue 16: the terminal's SIGINT, then stack.run's SIGTERM at once.

    "At once" is two kill() calls: on a busy machine the first signal can stop the consumer, and the
    command finish, before the second is sent. Then the second meets the default handler put back for
    the exit and ends the process with it, which is a stop too: the command had printed its summary."""
    process, database, stderr, stdout = follower
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGTERM)
    code = process.wait(30)
    errors = stderr.read_text()
    assert "Traceback" not in errors and "KeyboardInterrupt" not in errors, errors
    # The second signal found the consumer still running (forced: exit 1 with a one-line reason),
    # or already stopping (ignored: a clean stop), or the command already done (killed on its way out).
    finished = "stopped: " in stdout.read_text()
    assert (code == 0 or (code == 1 and "forced to stop" in errors)
            or (code == -signal.SIGTERM and finished)), (code, errors, stdout.read_text())
    assert all(owner == "" for _, owner, _ in leases(database)), leases(database)


@pytest.mark.django_db
def test_a_signal_during_once_is_passed_on_to_the_callers_own_handler(comments_table, monkeypatch):
    """stack.run runs `sync_index --once` in its own process on start-up: a Ctrl-C then must stop
    stack.run too, not only the drain. A caller's own handler gets the signal once sync_index is done."""
    factories.seed("SIG-2", 5, seed=4)
    poll = StreamConsumer.poll

    def poll_after_a_signal(self, revisit=None):
        os.kill(os.getpid(), signal.SIGTERM)  # as if it arrived during this poll
        return poll(self, revisit)

    monkeypatch.setattr(StreamConsumer, "poll", poll_after_a_signal)
    caught = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: caught.append(signum))
    try:
        call_command("sync_index", once=True, verbosity=0)
        assert caught == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
