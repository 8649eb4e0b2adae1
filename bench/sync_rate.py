"""How fast the stream sync applies records, per index backend, and how far it lags a live writer.

    .venv/bin/python -m bench.sync_rate [--records N] [--lag-seconds S] [--smoke]

1. Apply rate: a batch of stream records is read once off DynamoDB Local's stream (inserts, deletes,
   moves between products), then each backend applies it through the consumer's commit (index ops +
   checkpoint + lease check in one transaction) in batches of 100 and 1000. Only apply+checkpoint is
   timed, so DynamoDB Local's own speed is not measured. Baseline in the same run: the same records
   through `apply_records` alone (no checkpoint, no lease).
2. Lag: a writer puts 200 comments/s (BatchWriteItem every 100 ms from two threads) while the consumer follows the stream (polling every
   SYNC_INDEX_POLL_SECONDS when caught up); lag = when a comment's record was applied minus when it was
   written (its SK is its write time). Writer and consumer share one process (and its GIL).

The records are the comments table's: each applies to both of its sources (the products' GSI and the
ratings' GSI), as sync_index applies them.

Each backend runs in its own process (its own Django settings); results are printed as a table and
saved to bench/results/sync_rate[-smoke]-<UTC time>.json with the machine they ran on.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
POSTGRES = "postgres://postgres@127.0.0.1:5432"


def backend_cases(tmp: Path) -> dict[str, dict]:
    """Environment per case; PostgreSQL and Redis only where they answer."""
    sqlite = f"sqlite:///{tmp / 'bench.sqlite3'}"
    cases = {"relational/sqlite": {"PAGINATION_INDEX_BACKEND": "relational", "DATABASE_URL": sqlite}}
    cases["files"] = {"PAGINATION_INDEX_BACKEND": "files", "DATABASE_URL": sqlite,  # checkpoints in SQLite
                      "PAGINATION_INDEX_PATH": str(tmp / "files-index")}
    if _postgres_up():
        cases["relational/postgresql"] = {"PAGINATION_INDEX_BACKEND": "relational",
                                          "DATABASE_URL": f"{POSTGRES}/bench_sync_{os.getpid()}"}
    if _redis_up():  # checkpoints in SQLite, written after the Redis transaction
        cases["redis"] = {"PAGINATION_INDEX_BACKEND": "redis", "DATABASE_URL": sqlite,
                          "PAGINATION_INDEX_KEY_PREFIX": f"bench-sync:{os.getpid()}:{uuid.uuid4().hex[:6]}:"}
    return cases


def _redis_up() -> bool:
    try:
        import redis

        redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), socket_connect_timeout=1).ping()
        return True
    except Exception:
        return False


def _postgres_up() -> bool:
    try:
        import psycopg

        psycopg.connect(f"{POSTGRES}/postgres", connect_timeout=2).close()
        return True
    except Exception:
        return False


def _django(env: dict) -> None:
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-not-secret")  # DEBUG stays off, as in production
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


# --- parent: DynamoDB Local, the records, the cases --------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=10_000, help="Stream records to apply (default 10,000).")
    parser.add_argument("--lag-seconds", type=float, default=20, help="How long the 200/s writer runs.")
    parser.add_argument("--rate", type=int, default=200, help="Writer's comments per second.")
    parser.add_argument("--smoke", action="store_true", help="Tiny sizes, to prove the script runs.")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--records-file", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.records, args.lag_seconds = 1_000, 3
    if args.case:
        return run_case(args)

    from stack.dynamodb_local import PACKAGE, DynamoDBLocal

    with tempfile.TemporaryDirectory() as tmp_name, DynamoDBLocal() as dynamodb:
        tmp = Path(tmp_name)
        common = {"DYNAMODB_ENDPOINT_URL": dynamodb.endpoint_url, "COMMENTS_TABLE": f"bench-{uuid.uuid4().hex[:8]}"}
        _django({**common, "DATABASE_URL": f"sqlite:///{tmp / 'parent.sqlite3'}"})
        records_file = tmp / "records.pickle"
        started = time.perf_counter()
        records = stream_records(args.records)
        print(f"read {len(records):,} stream records off DynamoDB Local in {time.perf_counter() - started:.1f}s")
        records_file.write_bytes(pickle.dumps(records))
        results = []
        for name, env in backend_cases(tmp).items():
            print(f"running {name} ...", flush=True)
            case = subprocess.run(
                [sys.executable, "-m", "bench.sync_rate", "--case", name, "--records-file", str(records_file),
                 "--lag-seconds", str(args.lag_seconds), "--rate", str(args.rate), *(["--smoke"] if args.smoke else [])],
                cwd=ROOT, env={**os.environ, **common, **env}, capture_output=True, text=True,
            )
            if case.returncode:  # the case's own error, not just its exit status
                sys.stderr.write(case.stdout + case.stderr)
                raise SystemExit(f"bench.sync_rate: the {name} case failed (exit status {case.returncode})")
            results.append(json.loads(case.stdout.strip().splitlines()[-1]))
    report = {"machine": machine(), "emulator": f"DynamoDB Local (npm {PACKAGE}), in memory",
              "records": len(records), "writer_rate": args.rate, "lag_seconds": args.lag_seconds, "results": results}
    print_table(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = RESULTS / f"sync_rate{'-smoke' if args.smoke else ''}-{stamp}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {path.relative_to(ROOT)}")
    return 0


def stream_records(count: int) -> list[dict]:
    """Write a mix that makes `count` records (80% inserts, 10% deletes, 10% moves), read them back."""
    from comments.store import put_comments
    from comments.table.client import dynamodb
    from comments.table.keys import PRODUCTS, table_name
    from comments.table.schema import create_tables
    from pagination_index import sources
    from tests.factories import make_comments
    from tests.pagination_index.streams import read_stream_records

    create_tables()
    inserts = int(count * 0.8)
    comments = [c for n in range(10) for c in make_comments(f"SKU-{n}", inserts // 10, seed=n)]
    put_comments(comments)
    client, table = dynamodb(), table_name()
    for comment in comments[: count // 10]:
        client.delete_item(TableName=table, Key={"PK": {"S": comment.pk}, "SK": {"S": comment.sk}})
    for comment in comments[count // 10 : count // 10 + count - inserts - count // 10]:
        client.update_item(TableName=table, Key={"PK": {"S": comment.pk}, "SK": {"S": comment.sk}},
                           UpdateExpression="SET PK2 = :g", ExpressionAttributeValues={":g": {"S": "SKU-moved"}})
    return read_stream_records(sources[PRODUCTS].stream_arn())


def machine() -> dict:
    memory = ""
    try:
        memory = next(line.split(":")[1].strip() for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    except OSError:
        pass
    return {"cores": os.cpu_count(), "memory": memory, "platform": platform.platform(),
            "python": platform.python_version(), "load_average_at_start": os.getloadavg()}


def print_table(report: dict) -> None:
    machine_ = report["machine"]
    print(f"\n{machine_['cores']} cores, {machine_['memory']}, load average {machine_['load_average_at_start'][0]:.1f}; "
          f"{report['emulator']}")
    _table(f"apply rate: {report['records']:,} stream records already read",
           ("backend", "batch", "apply+checkpoint rec/s", "baseline: apply only rec/s"),
           [(r["case"], batch, f"{rate['commit']:,.0f}", f"{rate['apply_only']:,.0f}")
            for r in report["results"] for batch, rate in r["apply"].items()])
    _table(f"follow-mode lag, writer at {report['writer_rate']}/s for {report['lag_seconds']}s",
           ("backend", "writes/s, writer alone", "writes/s, following", "applied", "poll s", "lag p50", "lag p95",
            "lag max"),
           [(r["case"], f"{r['writer_alone']['writes_per_second']:.0f}", f"{r['lag']['writes_per_second']:.0f}", r["lag"]["applied"], r["lag"]["poll_seconds"],
             f"{r['lag']['p50']:.2f}s", f"{r['lag']['p95']:.2f}s", f"{r['lag']['max']:.2f}s") for r in report["results"]])


def _table(title: str, header: tuple, rows: list) -> None:
    print(f"\n{title}")
    rows = [header, *rows]
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    for row in rows:
        print("  ".join(str(cell).rjust(width) for cell, width in zip(row, widths)))


# --- child: one backend ----------------------------------------------------------------------------
def run_case(args) -> int:
    _django({})
    from django.conf import settings
    from django.core.management import call_command

    database = settings.DATABASES["default"]
    created_pg = "postgresql" in database["ENGINE"]
    if created_pg:
        import psycopg

        with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{database["NAME"]}"')
    from pagination_index import get_index

    try:
        call_command("migrate", verbosity=0)
        records = pickle.loads(Path(args.records_file).read_bytes())
        result = {"case": args.case, "database": database["ENGINE"].rsplit(".", 1)[-1],
                  "apply": {str(size): apply_rate(records, size) for size in (100, 1000)},
                  **lag_phases(args)}
    finally:
        get_index().clear()  # the Redis case's keys (all under its own prefix); the databases go anyway
        if created_pg:
            from django.db import connections

            connections.close_all()
            with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{database["NAME"]}" WITH (FORCE)')
    print(json.dumps(result))
    return 0


def apply_rate(records: list[dict], batch_size: int) -> dict:
    from django.db import transaction

    from comments.table.keys import table_name
    from pagination_index import get_index, sources
    from pagination_index.leases import lease_acquire
    from pagination_index.models import ShardCheckpoint
    from pagination_index.stream import StreamConsumer, apply_records

    index = get_index()
    table_sources = sources.for_table(table_name())  # the sources the records apply to
    batches = [records[start : start + batch_size] for start in range(0, len(records), batch_size)]
    index.clear()
    started = time.perf_counter()
    for batch in batches:
        with transaction.atomic():
            apply_records(index, batch, table_sources)
    apply_only = len(records) / (time.perf_counter() - started)

    index.clear()
    ShardCheckpoint.objects.all().delete()
    consumer = StreamConsumer(index=index, stream_arn="bench:records", lease_seconds=600, sources=table_sources)
    checkpoint = consumer._checkpoint({"ShardId": "bench"})
    lease_acquire(checkpoint=checkpoint, owner=consumer.owner, seconds=600)
    started = time.perf_counter()
    for batch in batches:
        consumer._commit(checkpoint, batch, finished=False)
    commit = len(records) / (time.perf_counter() - started)
    return {"commit": commit, "apply_only": apply_only}


def lag_phases(args) -> dict:
    """The writer alone, then the consumer following it. --smoke writes a few hundred comments in all:
    both phases share one DynamoDB Local (a fresh table each), two JVM starts fewer per case."""
    from stack.dynamodb_local import DynamoDBLocal

    if not args.smoke:
        return {"writer_alone": follow_lag(args.lag_seconds / 2, args.rate, follow=False),
                "lag": follow_lag(args.lag_seconds, args.rate)}
    with DynamoDBLocal() as server:
        return {"writer_alone": follow_lag(args.lag_seconds / 2, args.rate, follow=False, server=server),
                "lag": follow_lag(args.lag_seconds, args.rate, server=server)}


def follow_lag(seconds: float, rate: int, *, follow: bool = True, server=None) -> dict:
    """A consumer following a fresh table's stream while writer threads put `rate` comments/s
    (follow=False: the writer alone, the baseline for the write rate DynamoDB Local reaches here).

    The table is in a DynamoDB Local of its own (unless `server` is given): once one table of a
    DynamoDB Local has streamed 10,000 records (the apply-rate batch), writes to a new table there
    crawl at ~140 items/s against ~900/s on a fresh one (measured here; an emulator effect, not a
    DynamoDB one)."""
    from contextlib import nullcontext

    from django.test import override_settings

    import tests.signals  # noqa: F401  (override_settings resets the AWS clients made from settings)
    from comments.table.schema import create_tables
    from stack.dynamodb_local import DynamoDBLocal
    from tests.config import index_config

    table = f"bench-lag-{uuid.uuid4().hex[:8]}"
    with (nullcontext(server) if server else DynamoDBLocal()) as fresh, override_settings(
            COMMENTS_TABLE=table, PAGINATION_INDEX=index_config(aws={"ENDPOINT_URL": fresh.endpoint_url}, table=table)):
        create_tables()
        return _follow_lag(seconds, rate, follow=follow)


def _follow_lag(seconds: float, rate: int, *, follow: bool) -> dict:
    from datetime import datetime, timezone

    from comments.store import Comment, format_sk, parse_sk, put_comments
    from comments.table.keys import PRODUCTS
    from pagination_index import get_index, sources
    from pagination_index.conf import index_settings
    from pagination_index.stream import StreamConsumer

    lags: list[float] = []
    stop = threading.Event()

    class Measured(StreamConsumer):
        def _commit_batches(self, batches):
            committed = super()._commit_batches(batches)
            now = datetime.now(timezone.utc)
            lags.extend((now - parse_sk(r["dynamodb"]["NewImage"]["SK"]["S"])).total_seconds()
                        for batch in committed for r in batch.records if "NewImage" in r["dynamodb"])
            return committed

    poll_seconds = index_settings.SYNC["POLL_SECONDS"]
    consumer = Measured(index=get_index(), stream_arn=sources[PRODUCTS].stream_arn(), stop_event=stop)
    follower = threading.Thread(target=consumer.run, kwargs={"once": False, "poll_seconds": poll_seconds})
    if follow:
        follower.start()
    written = itertools.count()
    threads = 2  # each puts a BatchWriteItem every `tick`: per-item put_item cannot keep 200/s on a loaded box
    tick = 0.1

    def write(n: int) -> None:
        per_tick = max(1, round(rate * tick / threads))
        due = time.monotonic()
        end = due + seconds
        while time.monotonic() < end:
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            put_comments(Comment(pk=uuid.uuid4().hex, sk=format_sk(datetime.now(timezone.utc)), sku=f"LAG-{n}",
                                 author="bench", body="lag", rating=5) for _ in range(per_tick))
            for _ in range(per_tick):
                next(written)
            due += tick

    started = time.perf_counter()
    writers = [threading.Thread(target=write, args=(n,)) for n in range(threads)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    elapsed = time.perf_counter() - started
    writes = next(written)
    if not follow:
        return {"writes_per_second": writes / elapsed}
    deadline = time.monotonic() + 30
    while len(lags) < writes and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    follower.join()
    ordered = sorted(lags)
    return {"writes": writes, "writes_per_second": writes / elapsed, "applied": len(lags),
            "poll_seconds": poll_seconds,
            "p50": statistics.median(ordered), "p95": ordered[int(0.95 * (len(ordered) - 1))], "max": ordered[-1]}


if __name__ == "__main__":
    sys.exit(main())
