"""at() latency by depth, for every index backend, beside the plain baselines in the same run.

    python -m bench.index_depth            # groups of 1e5 and 2e6 entries
    python -m bench.index_depth --smoke    # groups of 1e3 and 2e4: a quick check that it all works

For each store (SQLite, PostgreSQL, Redis) it bulk-loads one group per size straight into the
backend's own layout (COPY, executemany, pipelined ZADD: not add_many), then times `at(group, rank)`
at ranks 0, 1e3, 1e5, 1e6 and the last, through the backend and through the store's plain query
(`ORDER BY ... LIMIT 1 OFFSET n` on a raw DB-API connection; `ZREVRANGE` through redis-py). It prints
a table and writes JSON under bench/results/ with the machine it ran on. No DynamoDB is involved.

Stores are sections: a `Store` loads a group and names its `Subject`s (a backend or a baseline).
To measure another backend, add a store function to STORES (or a subject to an existing store).
Its own scratch data only: a temporary SQLite file, a PostgreSQL database created and dropped by the
run, Redis keys under a per-run prefix, deleted at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import dj_database_url
import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-not-secret")  # DEBUG stays off, as in production
# The default database of a benchmark is a scratch one, never the developer's var/db.sqlite3.
# Removed when the process exits (mkdtemp left one behind per run).
_SCRATCH_VAR = tempfile.TemporaryDirectory(prefix="bench-var-")
os.environ.setdefault("SHOP_VAR_DIR", _SCRATCH_VAR.name)
django.setup()

import hiredis  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402
from redis.utils import HIREDIS_AVAILABLE  # noqa: E402

from bench.common import add_database_alias, machine_info, pyplot  # noqa: E402
from pagination_index.sortkeys import micros_sort_key  # noqa: E402
from pagination_index.backends.redis import RedisIndex, decode_member, encode_member, sort_key_score  # noqa: E402
from pagination_index.backends.relational import RelationalIndex  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = (100_000, 2_000_000)
SMOKE_SIZES = (1_000, 20_000)
RANKS = (0, 1_000, 100_000, 1_000_000)  # and the last rank of each group
# Per (subject, group, rank): at least MIN_CALLS timed calls, more while within the time budget.
MIN_CALLS, MAX_CALLS, BUDGET_SECONDS = 5, 200, 1.0

POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
TABLE = "pagination_index_indexentry"
OFFSET_SQL = (f'SELECT member, sort_key FROM {TABLE} WHERE "group" = {{p}} '
              f"ORDER BY sort_key DESC, member DESC LIMIT 1 OFFSET {{p}}")

Entry = tuple[str, str]


@dataclass
class Subject:
    """One thing whose at() is timed: a backend, or the store's plain query as its baseline."""

    name: str
    kind: str  # "backend" or "baseline"
    at: Callable[[str, int], Entry | None]


@dataclass
class Store:
    name: str
    version: str
    load: Callable[[str, list[Entry]], None]  # bulk-load one group, newest first
    subjects: list[Subject]
    close: Callable[[], None] = lambda: None
    notes: list[str] = field(default_factory=list)


# --- data -------------------------------------------------------------------------------------
def make_entries(size: int, seed: int) -> list[Entry]:
    """`size` entries newest first: random PKs, distinct microsecond SKs over about three years."""
    rng = random.Random(seed)
    start = int(datetime(2023, 1, 1, tzinfo=timezone.utc).timestamp() * 1_000_000)
    scores = sorted(rng.sample(range(start, start + 10**14), size), reverse=True)
    return [(f"{rng.getrandbits(128):032x}", micros_sort_key(score)) for score in scores]


def add_database(alias: str, config: dict) -> None:
    """A database alias of the run's own, migrated."""
    add_database_alias(alias, config)
    call_command("migrate", database=alias, verbosity=0)


def set_group_count(alias: str, group: str, count: int) -> None:
    """Count the group, and build its counted blocks in bulk, as rebuild_index does."""
    from pagination_index.models import IndexGroup

    IndexGroup.objects.using(alias).update_or_create(name=group, defaults={"count": count})
    RelationalIndex({"DATABASE": alias}).repair_group(group)


# --- stores -----------------------------------------------------------------------------------
def sqlite_store(workdir: Path) -> Store:
    path = workdir / "index.sqlite3"
    alias = "bench_sqlite"
    add_database(alias, {
        "ENGINE": "django.db.backends.sqlite3", "NAME": str(path),
        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
    })
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA cache_size = -262144")  # 256 MiB: the (group, member) index is filled in random order

    def load(group: str, entries: list[Entry]) -> None:
        with raw:
            raw.executemany(f'INSERT INTO {TABLE} ("group", member, sort_key) VALUES (?, ?, ?)',
                            ((group, member, sort_key) for member, sort_key in entries))
        raw.execute("ANALYZE")
        set_group_count(alias, group, len(entries))

    query = OFFSET_SQL.format(p="?")
    return Store(
        name="SQLite", version=sqlite3.sqlite_version, load=load,
        subjects=[
            Subject("relational", "backend", RelationalIndex({"DATABASE": alias}).at),
            Subject("SQL OFFSET", "baseline", lambda group, rank: raw.execute(query, (group, rank)).fetchone()),
        ],
        close=raw.close,
    )


def postgres_store(workdir: Path) -> Store:
    name = f"bench_index_{os.getpid()}"
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        version = admin.execute("SHOW server_version").fetchone()[0]
    url = psycopg.conninfo.make_conninfo(POSTGRES_URL, dbname=name)
    alias = "bench_postgres"
    add_database(alias, {**dj_database_url.parse(POSTGRES_URL), "NAME": name})
    raw = psycopg.connect(url, autocommit=True)

    def load(group: str, entries: list[Entry]) -> None:
        with raw.cursor() as cursor:
            with cursor.copy(f'COPY {TABLE} ("group", member, sort_key) FROM STDIN') as copy:
                for member, sort_key in entries:
                    copy.write_row((group, member, sort_key))
        raw.execute(f"VACUUM (ANALYZE) {TABLE}")  # the visibility map lets rank reads stay index-only
        set_group_count(alias, group, len(entries))

    def close() -> None:
        raw.close()
        connections[alias].close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}"')

    query = OFFSET_SQL.format(p="%s")
    return Store(
        name="PostgreSQL", version=version, load=load,
        subjects=[
            Subject("relational", "backend", RelationalIndex({"DATABASE": alias}).at),
            Subject("SQL OFFSET", "baseline", lambda group, rank: raw.execute(query, (group, rank)).fetchone()),
        ],
        close=close,
    )


def redis_store(workdir: Path) -> Store:
    """The backend as configured (hiredis parses replies when installed, as requirements.txt has it)
    beside the same backend on redis-py's pure-Python parser, through a pool of its own (django-redis
    keeps one pool per URL, so the URL names a client to differ), and plain ZREVRANGE. `range 5k` is
    a 5,000-entry range() read from the rank on."""
    prefix = f"bench-pidx:{os.getpid()}:"
    options = dict(settings.PAGINATION_INDEX_REDIS, KEY_PREFIX=prefix)
    index = RedisIndex(options)
    python_url = options["LOCATION"] + ("&" if "?" in options["LOCATION"] else "?") + "client_name=bench-python-parser"
    python = RedisIndex(dict(options, LOCATION=python_url, PARSER_CLASS="redis._parsers.resp3._RESP3Parser"))
    raw = redis.Redis.from_url(settings.PAGINATION_INDEX_REDIS["LOCATION"])
    version = raw.info("server")["redis_version"]
    version += f", hiredis {hiredis.__version__}" if HIREDIS_AVAILABLE else ", hiredis not installed"
    if type(python.client.connection_pool.get_connection()._parser).__name__ != "_RESP3Parser":
        raise SystemExit("the pure-Python subject does not use the Python parser")

    def load(group: str, entries: list[Entry]) -> None:
        pipe = raw.pipeline(transaction=False)
        for start in range(0, len(entries), 10_000):
            chunk = entries[start : start + 10_000]
            pipe.zadd(index.key(group), {encode_member(member): sort_key_score(sort_key) for member, sort_key in chunk})
            if len(pipe) >= 20:
                pipe.execute()
        pipe.execute()

    def close() -> None:
        index.clear()
        raw.close()

    return Store(
        name="Redis", version=version, load=load,
        subjects=[
            Subject("redis", "backend", index.at),
            Subject("redis, Python parser", "backend", python.at),
            Subject("redis range 5k", "backend", lambda group, rank: index.range(group, rank, rank + 5000)[0]),
            Subject("redis range 5k, Python parser", "backend", lambda group, rank: python.range(group, rank, rank + 5000)[0]),
            Subject("ZREVRANGE", "baseline", lambda group, rank: raw.zrevrange(index.key(group), rank, rank, withscores=True)),
        ],
        close=close,
    )


STORES: list[Callable[[Path], Store]] = [sqlite_store, postgres_store, redis_store]


# --- measuring --------------------------------------------------------------------------------
def time_calls(call: Callable[[], object]) -> dict:
    call()  # warm: connection, caches, prepared plans
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < MIN_CALLS or (len(samples) < MAX_CALLS and time.perf_counter() - started < BUDGET_SECONDS):
        before = time.perf_counter_ns()
        call()
        samples.append((time.perf_counter_ns() - before) / 1000)
    samples.sort()
    return {"calls": len(samples), "median_us": statistics.median(samples), "min_us": samples[0],
            "p90_us": samples[int(len(samples) * 0.9) - 1] if len(samples) >= 10 else samples[-1]}


def ranks_for(size: int) -> list[int]:
    return [rank for rank in RANKS if rank < size - 1] + [size - 1]


def check(subject: Subject, group: str, rank: int, expected: Entry) -> None:
    """Every subject must find the right entry: a fast wrong answer measures nothing."""
    found = subject.at(group, rank)
    if subject.kind == "baseline" and isinstance(found, list):  # ZREVRANGE: [(member, score)]
        found = (decode_member(found[0][0]), micros_sort_key(found[0][1]))
    if tuple(found) != expected:
        raise SystemExit(f"{subject.name}: at({group}, {rank}) = {found}, expected {expected}")


def bench_store(store: Store, groups: dict[str, list[Entry]], out) -> list[dict]:
    rows = []
    for group, entries in groups.items():
        started = time.perf_counter()
        store.load(group, entries)
        out(f"  loaded {len(entries):,} entries into {store.name} in {time.perf_counter() - started:.1f} s")
        for subject in store.subjects:
            for rank in ranks_for(len(entries)):
                check(subject, group, rank, entries[rank])
                result = time_calls(lambda: subject.at(group, rank))
                rows.append({"store": store.name, "subject": subject.name, "kind": subject.kind,
                             "size": len(entries), "rank": rank, **result})
    return rows


# --- report -----------------------------------------------------------------------------------
def format_table(rows: list[dict]) -> str:
    columns = sorted({(row["size"], row["rank"]) for row in rows})
    header = ["store", "subject"] + [f"{size:.0e}@{'last' if rank == size - 1 else f'{rank:.0e}' if rank else '0'}"
                                     .replace("e+0", "e") for size, rank in columns]
    lines = [header]
    for key in dict.fromkeys((row["store"], row["subject"]) for row in rows):
        cells = {(row["size"], row["rank"]): row["median_us"] for row in rows if (row["store"], row["subject"]) == key}
        lines.append(list(key) + [_us(cells.get(column)) for column in columns])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            for line in lines]
    return "\n".join([text[0], "-" * len(text[0]), *text[1:]])


def _us(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.1f} ms" if value >= 10_000 else f"{value:.0f} us"


def plot(rows: list[dict], path: Path) -> None:
    """Median at() latency by rank, one line per store, subject and group size (log-log)."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(9, 5))
    for key in dict.fromkeys((row["store"], row["subject"], row["size"]) for row in rows):
        points = [(max(row["rank"], 1), row["median_us"]) for row in rows if (row["store"], row["subject"], row["size"]) == key]
        axis.plot(*zip(*points), marker="o", linestyle="--" if "OFFSET" in key[1] or key[1] == "ZREVRANGE" else "-",
                  label=f"{key[0]} {key[1]}, {key[2]:,} entries")
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("rank (0 shown at 1)")
    axis.set_ylabel("median at() latency, us")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"small groups {SMOKE_SIZES} instead of {SIZES}")
    args = parser.parse_args(argv)
    sizes = SMOKE_SIZES if args.smoke else SIZES
    out = lambda text: print(text, flush=True)  # noqa: E731
    groups = {f"bench-{size}": make_entries(size, seed=size) for size in sizes}
    out(f"index_depth: groups of {', '.join(f'{s:,}' for s in sizes)} entries; median at() latency")
    rows, versions, skipped = [], {"SQLite": sqlite3.sqlite_version}, {}
    load_at_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="index-depth-") as workdir:
        for make_store in STORES:
            try:
                store = make_store(Path(workdir))
            except (psycopg.Error, redis.RedisError) as exc:
                skipped[make_store.__name__] = str(exc)
                out(f"  skipped {make_store.__name__}: {exc}")
                continue
            versions[store.name] = store.version
            try:
                rows += bench_store(store, groups, out)
            finally:
                store.close()
    table = format_table(rows)
    out("")
    out(table)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"index_depth-{'smoke-' if args.smoke else ''}{stamp}.json"
    plot(rows, path.with_suffix(".png"))
    path.write_text(json.dumps({"benchmark": "index_depth", "when": stamp, "sizes": sizes,
                                "machine": machine_info(versions, load_at_start, "shared machine; index stores only, no DynamoDB"),
                                "skipped": skipped,
                                "results": rows, "table": table}, indent=2) + "\n")
    out(f"\nwrote {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
