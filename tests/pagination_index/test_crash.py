"""The crash test (issue 5): sync_index runs as real processes, two at once for failover, while a
writer makes thousands of mixed writes; the processes are SIGKILLed at random points and restarted;
after a final drain the index equals the table exactly.

Backends: each entry of SUBPROCESS_BACKENDS takes the test's `request` and `settings`, points the
test process at the backend and returns the environment a sync_index process needs to use the same
store (and the same database for its checkpoints). A backend is added with one line.
"""
from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from django.db import connections

from comments.store import Comment, format_sk
from pagination_index import get_index
from tests.pagination_index.streams import checkpoints, delete, move, put, table_order
from tests.config import index_config

ROOT = Path(__file__).resolve().parents[2]
# 1,600 writes by default keep the six kills inside the writing (and the suite within CI's budget:
# six backends ran 10 minutes at 3,200); CRASH_TEST_WRITES=10000 makes a longer, harsher run.
WRITES = int(os.environ.get("CRASH_TEST_WRITES", "1600"))
WRITER_THREADS = 4  # each owns its items, so per-item order is the writer's order
KILLS = 6
LEASE_SECONDS = 2
PRODUCTS = [f"P{n}" for n in range(5)]



def database_url(alias: str = "default") -> str:
    """A test database, as a URL a sync_index process can open too."""
    db = connections[alias].settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    host = f"{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    return f"postgres://{host}/{db['NAME']}"


def relational_on_postgres(request, settings) -> dict:
    alias = request.getfixturevalue("postgres_database")
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["relational"],
                                 "OPTIONS": {"DATABASE": alias}})
    return {"PAGINATION_INDEX_BACKEND": "relational", "DATABASE_URL": database_url(alias)}


def redis_index(request, settings, options_fixture="redis_index_options") -> dict:
    options = request.getfixturevalue(options_fixture)
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["redis"], "OPTIONS": options})
    return {"PAGINATION_INDEX_BACKEND": "redis", "PAGINATION_INDEX_KEY_PREFIX": options["KEY_PREFIX"],
            "PAGINATION_INDEX_REDIS_URL": options["LOCATION"]}


def dynamodb_index(request, settings) -> dict:
    """Page items of 3 entries and MAX_SHIFT 2: most writes in the middle mark their group, so the
    kills also land in shifts, marks and sync_index's background re-mark."""
    options = dict(request.getfixturevalue("dynamodb_index_options"), MAX_SHIFT=2)
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["dynamodb"], "OPTIONS": options})
    return {"PAGINATION_INDEX_BACKEND": "dynamodb", "PAGINATION_INDEX_DYNAMODB_TABLE": options["TABLE"],
            "PAGINATION_INDEX_DYNAMODB_PAGE_SIZE": str(options["PAGE_SIZE"]),
            "PAGINATION_INDEX_DYNAMODB_MAX_SHIFT": str(options["MAX_SHIFT"])}


def files_index(request, settings) -> dict:
    """The files backend on a folder of the test's own; commits every 40 changes, so the kills
    land in commits too."""
    path = str(request.getfixturevalue("tmp_path") / "files-index")
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": settings.PAGINATION_INDEX_BACKENDS["files"],
                                 "OPTIONS": {"PATH": path, "COMMIT_ENTRIES": 40}})
    return {"PAGINATION_INDEX_BACKEND": "files", "PAGINATION_INDEX_PATH": path, "PAGINATION_INDEX_COMMIT_ENTRIES": "40"}


SUBPROCESS_BACKENDS = {
    "relational-sqlite": lambda request, settings: {"PAGINATION_INDEX_BACKEND": "relational"},
    "relational-postgres": relational_on_postgres,
    "redis": redis_index,
    "redis-cluster": lambda request, settings: redis_index(request, settings, "redis_cluster_index_options"),
    "dynamodb": dynamodb_index,
    "files": files_index,
}


class Followers:
    """Two `sync_index` processes following the stream; either can be killed and restarted."""

    def __init__(self, env: dict, logs: Path):
        self.env = env
        self.logs = logs
        self.processes: list[subprocess.Popen | None] = [None, None]
        self.starts = 0

    def start(self, slot: int) -> None:
        self.starts += 1
        log = open(self.logs / f"sync-{self.starts}.log", "w")
        self.processes[slot] = subprocess.Popen(
            [sys.executable, "manage.py", "sync_index", "--poll-seconds", "0.2", "--batch-size", "100",
             "--lease-seconds", str(LEASE_SECONDS), "-v", "0"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()

    def assert_alive(self) -> None:
        for process in self.processes:
            if process is not None and process.poll() is not None:
                pytest.fail(f"sync_index exited on its own ({process.returncode}); logs in {self.logs}")

    def kill(self, slot: int) -> None:
        self.assert_alive()
        self.processes[slot].send_signal(signal.SIGKILL)
        self.processes[slot].wait()

    def stop(self) -> None:
        for process in self.processes:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            if process is not None:
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


class Writer:
    """Mixed writes with a model of what the table holds: inserts, deletes, SK changes (a delete
    and a put: SK is part of the key) and moves between products (an update of PK2)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.live: dict[str, Comment] = {}
        self.writes = 0
        self.base = datetime(2024, 1, 1, tzinfo=timezone.utc)

    def _sk(self) -> str:  # a narrow range of times, so equal sort keys happen
        return format_sk(self.base + timedelta(milliseconds=self.rng.randrange(200_000)))

    def step(self) -> None:
        roll = self.rng.random()
        if len(self.live) < 50 or roll < 0.45:
            comment = Comment(pk=uuid.UUID(int=self.rng.getrandbits(128)).hex, sk=self._sk(),
                              sku=self.rng.choice(PRODUCTS), author="crash", body="test", rating=3)
            put(comment)
            self.live[comment.pk] = comment
            self.writes += 1
            return
        comment = self.live[self.rng.choice(list(self.live))]
        if roll < 0.62:
            delete(comment)
            del self.live[comment.pk]
            self.writes += 1
        elif roll < 0.8:
            delete(comment)
            changed = dataclasses.replace(comment, sk=self._sk())
            put(changed)
            self.live[comment.pk] = changed
            self.writes += 2
        else:
            sku = self.rng.choice([sku for sku in PRODUCTS if sku != comment.sku])
            move(comment, sku)
            self.live[comment.pk] = dataclasses.replace(comment, sku=sku)
            self.writes += 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, databases="__all__")
@pytest.mark.parametrize("backend", list(SUBPROCESS_BACKENDS))
def test_sigkilled_sync_processes_leave_the_index_equal_to_the_table(backend, comments_table, dynamodb_settings,
                                                                    request, settings, tmp_path):
    env = dict(
        os.environ,
        DYNAMODB_ENDPOINT_URL=dynamodb_settings["ENDPOINT_URL"],
        COMMENTS_TABLE=comments_table,
        DATABASE_URL=database_url(),
        PYTHONUNBUFFERED="1",
    )
    env.update(SUBPROCESS_BACKENDS[backend](request, settings))
    rng = random.Random(5)
    kill_at = sorted(rng.sample(range(200, WRITES - 100), KILLS))
    followers = Followers(env, tmp_path)
    writers = [Writer(seed=10 + n) for n in range(WRITER_THREADS)]
    errors = []

    def write(writer):
        try:
            while writer.writes < WRITES // WRITER_THREADS:
                writer.step()
        except Exception as exc:  # surfaced below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(writer,)) for writer in writers]
    kills = 0
    try:
        followers.start(0)
        followers.start(1)
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            if kills < KILLS and sum(w.writes for w in writers) >= kill_at[kills]:
                slot = rng.randrange(2)
                followers.kill(slot)
                kills += 1
                time.sleep(rng.uniform(0, 0.5))
                followers.start(slot)
            time.sleep(0.02)
        followers.assert_alive()
    finally:
        for thread in threads:
            thread.join()
        followers.stop()
    assert not errors
    live = {pk: comment for writer in writers for pk, comment in writer.live.items()}
    assert kills == KILLS and sum(w.writes for w in writers) >= WRITES
    time.sleep(LEASE_SECONDS + 0.5)  # leases of the last killed process run out
    drain = subprocess.run([sys.executable, "manage.py", "sync_index", "--once"], cwd=ROOT, env=env, check=True,
                           capture_output=True, text=True)
    assert "caught up" in drain.stdout, drain.stdout + drain.stderr
    assert "leased by another consumer" not in drain.stderr, drain.stderr  # a warning: on stderr

    index = get_index()
    drift = {}
    for sku in PRODUCTS:
        for group, rating in [(sku, None), *((f"{sku}/{r}", r) for r in range(1, 6))]:  # and its rating groups
            expected = table_order(group)
            assert expected == sorted(((c.pk, c.sk) for c in live.values()
                                       if c.sku == sku and rating in (None, c.rating)),
                                      key=lambda e: (e[1], e[0]), reverse=True)  # the writer's model agrees
            actual = index.range(group, 0, len(expected) + 1000)
            if index.count(group) != len(expected) or actual != expected:
                drift[group] = (f"count {index.count(group)} vs {len(expected)}, "
                                f"missing {len(set(expected) - set(actual))}, extra {len(set(actual) - set(expected))}")
    state = list(checkpoints().values_list("shard_id", "parent_shard_id", "sequence_number", "finished"))
    assert not drift, f"{drift}; drain: {drain!r}; checkpoints: {state}; logs in {tmp_path}"
    for group in index.groups():
        assert index.check_integrity(group) == [], group  # every backend's own structures are whole
    assert getattr(index, "marked_groups", list)() == []  # the drain finished the DynamoDB re-mark
    assert sorted(index.groups()) == sorted({c.sku for c in live.values()} | {f"{c.sku}/{c.rating}" for c in live.values()})
    assert checkpoints().filter(sequence_number__gt="").exists()
