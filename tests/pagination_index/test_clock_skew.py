"""Leases are judged by the database's clock (issue 43): two `sync_index` processes on PostgreSQL, one
of them with its clock 60 s ahead (Debian's faketime, libfaketime), take turns correctly: the skewed
one never takes the live lease of the other, and takes over once the other is paused past its lease;
the paused one, resumed, does not take it back. Judged by each host's clock, the skewed consumer
would see every lease as expired and take it at its first poll."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connections
from django.db.models.functions import Now

from pagination_index.models import ShardCheckpoint
from tests import factories
from tests.config import index_config
from tests.pagination_index.streams import assert_index_equals_table
from tests.processes import descendants

ROOT = Path(__file__).resolve().parents[2]
LEASE = 3.0
SKEW = 60
STARTED: list[int] = []  # the consumers' processes, as the test started them

pytestmark = pytest.mark.slow


@pytest.fixture
def faketime():
    from tests.conftest import service_missing

    if not shutil.which("faketime"):
        service_missing("faketime is not installed (Debian: apt-get install faketime)")


def start_consumer(database: str, table: str, endpoint: str, log: Path, skew: int = 0) -> subprocess.Popen:
    settings = connections[database].settings_dict
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PAGINATION_INDEX_BACKEND": "relational",
           "DATABASE_URL": f"postgres://{settings['USER']}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/"
                           f"{settings['NAME']}",
           "COMMENTS_TABLE": table, "DYNAMODB_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
           "SYNC_INDEX_LEASE_SECONDS": str(LEASE), "SYNC_INDEX_POLL_SECONDS": "0.3",
           # Only the wall clock is skewed: timers (time.monotonic) run true, as on a real host.
           "FAKETIME_DONT_FAKE_MONOTONIC": "1"}
    command = [sys.executable, "manage.py", "sync_index"]
    if skew:
        command = ["faketime", "-f", f"{skew:+d}s", *command]
        env["PYTHONPATH"] = str(Path(__file__).parent / "faketime_site")  # time.sleep under libfaketime
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    STARTED.append(process.pid)
    return process


def owner_pid(database: str) -> int | None:
    """The process holding the lease, as the process the test started: `faketime` runs the consumer
    as its child, whose pid the owner id names."""
    row = ShardCheckpoint.objects.using(database).filter(finished=False).first()
    if row is None or not row.lease_owner:
        return None
    pid = int(row.lease_owner.split(":")[2])
    return next((started for started in STARTED if pid in descendants(started)), pid)


def watch_owner(database: str, seconds: float) -> set[int | None]:
    """Every lease owner (by pid) seen over `seconds`, sampled every 0.1 s."""
    seen = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen.add(owner_pid(database))
        time.sleep(0.1)
    return seen


def wait_for_owner(database: str, pid: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while owner_pid(database) != pid:
        if time.monotonic() > deadline:
            with connections[database].cursor() as cursor:
                cursor.execute("SELECT pid, state, wait_event_type, left(query, 80), now() - state_change "
                               "FROM pg_stat_activity WHERE datname = current_database()")
                sessions = cursor.fetchall()
            rows = list(ShardCheckpoint.objects.using(database).annotate(now=Now()).values(
                "lease_owner", "lease_expires_at", "lease_epoch", "now"))
            raise AssertionError(f"process {pid} did not take the lease within {seconds} s: {rows} {sessions}")
        time.sleep(0.1)


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_two_consumers_with_clocks_60_s_apart_take_turns(settings, postgres_database, comments_table,
                                                          dynamodb_settings, faketime, tmp_path):
    settings.PAGINATION_INDEX = index_config(BACKEND=settings.PAGINATION_INDEX_BACKENDS["relational"],
                                             OPTIONS={"DATABASE": postgres_database})
    factories.seed("A", 10, seed=1)
    endpoint = dynamodb_settings["ENDPOINT_URL"]
    true = start_consumer(postgres_database, comments_table, endpoint, tmp_path / "true.log")
    ahead = None
    try:
        wait_for_owner(postgres_database, true.pid, 60)
        ahead = start_consumer(postgres_database, comments_table, endpoint, tmp_path / "ahead.log", skew=SKEW)
        factories.seed("A", 5, seed=2)
        # The skewed consumer polls for four leases while the other holds its lease: it never takes it.
        assert watch_owner(postgres_database, 4 * LEASE) == {true.pid}
        assert ahead.poll() is None

        for pid in descendants(true.pid):
            os.kill(pid, signal.SIGSTOP)  # paused past its lease: the skewed one takes over
        wait_for_owner(postgres_database, ahead.pid, 10 * LEASE)
        factories.seed("A", 5, seed=3)
        deadline = time.monotonic() + 30
        while ShardCheckpoint.objects.using(postgres_database).get().applied_at is None or \
                ShardCheckpoint.objects.using(postgres_database).annotate(now=Now()).filter(
                    applied_at__lt=Now() + timedelta(seconds=SKEW / 2)).exists():
            assert time.monotonic() < deadline, "the skewed consumer applied nothing"
            time.sleep(0.2)  # its batch's applied_at, from its own clock, is 60 s ahead: the skew is real
        for pid in descendants(true.pid):
            os.kill(pid, signal.SIGCONT)
        assert watch_owner(postgres_database, 3 * LEASE) == {ahead.pid}  # the resumed one waits its turn
        assert_index_equals_table("A")
    finally:
        for process in (true, ahead):
            if process is not None and process.poll() is None:
                for pid in descendants(process.pid):
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGTERM)
                process.wait(30)
        STARTED.clear()
