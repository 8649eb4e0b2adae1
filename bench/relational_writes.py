"""How fast the relational index loads a big group through its write API, with its counted blocks
(RelationalIndex) against the plain table (PlainRelationalIndex, no blocks) as the baseline.

    python -m bench.relational_writes [--entries 1000000] [--databases postgresql,sqlite]
    python -m bench.relational_writes --smoke     # 20,000 entries

Three loads of --entries entries (random 32-hex members, distinct microsecond sort keys, in random
order) into an empty group, each timed on its own fresh group:
- `add_many` in batches of --batch (1,000: the stream consumer's batch), one transaction each;
- `add_many` of the whole list in one call;
- `replace` of the whole list (what rebuild_index and verify_index --repair do).
Reported: records/s, and the CPU seconds of this process and of the PostgreSQL server process
serving its connection (utime+stime from /proc; SQLite runs inside this process). The blocks are
checked against the entries after each load (check_integrity must find nothing), and after the
batched load, which grows the blocks write by write, range() of a 20-entry page is timed at pages
11, 5,000 and the last: flat at any depth.

Each database is the run's own: a `bench_writes_<pid>` PostgreSQL database created and dropped here,
a SQLite file (WAL, as `make run` uses it) in a temporary folder. Prints a table and saves JSON under
bench/results/ with the machine it ran on.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dj_database_url
import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-not-secret")  # DEBUG stays off, as in production
django.setup()

import psycopg  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connections  # noqa: E402

from bench.common import (  # noqa: E402
    add_database_alias,
    forget_database_alias,
    format_table,
    machine_info,
    shown,
    stamp,
    write_json,
)
from bench.index_depth import make_entries  # noqa: E402
from pagination_index.backends.relational import PlainRelationalIndex, RelationalIndex  # noqa: E402

ALIAS = "bench_writes"
POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres")
SIZE, SMOKE_SIZE = 1_000_000, 20_000
PAGE, READS = 20, 200
LOADS = ("add_many batches", "add_many one call", "replace")


def server_cpu(vendor: str) -> float:
    """CPU seconds of the PostgreSQL backend serving ALIAS (0 for SQLite, which runs in this process)."""
    if vendor != "postgresql":
        return 0.0
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(index, vendor: str, group: str, entries: list, how: str, batch: int) -> dict:
    server, process, started = server_cpu(vendor), time.process_time(), time.perf_counter()
    if how == "add_many batches":
        for start in range(0, len(entries), batch):
            index.add_many(group, entries[start : start + batch])
    elif how == "add_many one call":
        index.add_many(group, entries)
    else:
        index.replace(group, entries)
    seconds = time.perf_counter() - started
    figures = {"seconds": seconds, "records_per_s": len(entries) / seconds,
               "process_cpu_s": time.process_time() - process, "server_cpu_s": server_cpu(vendor) - server}
    assert index.count(group) == len(entries), (how, index.count(group))
    if isinstance(index, RelationalIndex):
        problems = index.check_integrity(group)
        assert not problems, problems[:5]
        if how == "add_many batches":
            figures["pages"] = page_reads(index, group, len(entries))
    index.replace(group, [])
    return figures


def page_reads(index, group: str, count: int) -> dict:
    """Median ms of range() for a 20-entry page at depth, on the blocks the batched load grew
    (not a fresh build): pages 11, 5,000 (as the flagship product's last; the last one in a smaller
    group) and the group's last."""
    last = (count - 1) // PAGE * PAGE
    pages = {"11": 10 * PAGE, "5,000": min(4999 * PAGE, last), "last": last}
    samples = {label: [] for label in pages}
    for _ in range(READS):  # round robin: each page sees the same share of the machine's load
        for label, start in pages.items():
            started = time.perf_counter()
            index.range(group, start, start + PAGE)
            samples[label].append((time.perf_counter() - started) * 1000)
    return {label: statistics.median(values) for label, values in samples.items()}


def run(vendor: str, entries: list, args) -> dict:
    workdir = None
    if vendor == "postgresql":
        name = f"bench_writes_{os.getpid()}"
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        config = {**dj_database_url.parse(POSTGRES_URL), "NAME": name}
    else:
        workdir = tempfile.TemporaryDirectory(prefix="bench-writes-")
        config = {**dj_database_url.parse(f"sqlite:///{workdir.name}/bench.sqlite3"),
                  "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}}
    add_database_alias(ALIAS, config)
    try:
        call_command("migrate", "pagination_index", database=ALIAS, verbosity=0)
        backends = {"blocks": RelationalIndex({"DATABASE": ALIAS}), "plain": PlainRelationalIndex({"DATABASE": ALIAS})}
        results = {}
        for how in args.loads:
            for backend in args.backends:
                print(f"[{vendor}] {backend}: {how} ...", flush=True)
                results[f"{backend}|{how}"] = load(backends[backend], vendor, f"{backend}-{how}", entries, how, args.batch)
        return {"database": vendor, "loads": results}
    finally:
        forget_database_alias(ALIAS)
        if vendor == "postgresql":
            with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            workdir.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=SIZE)
    parser.add_argument("--batch", type=int, default=1000, help="entries per add_many call in the batched load")
    parser.add_argument("--databases", default="postgresql,sqlite")
    parser.add_argument("--loads", default=",".join(LOADS), help=f"which loads (default: {','.join(LOADS)})")
    parser.add_argument("--backends", default="blocks,plain", help="blocks, plain or both (the baseline)")
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE:,} entries")
    args = parser.parse_args(argv)
    args.loads, args.backends = args.loads.split(","), args.backends.split(",")
    size = SMOKE_SIZE if args.smoke else args.entries
    load_at_start = os.getloadavg()
    entries = make_entries(size, seed=size)
    random.Random(size).shuffle(entries)  # batches land all over the group, not at one end
    results = [run(vendor.strip(), entries, args) for vendor in args.databases.split(",")]
    rows = []
    missing = {"records_per_s": float("nan"), "process_cpu_s": float("nan"), "server_cpu_s": float("nan")}
    for result in results:
        for how in args.loads:
            blocks, plain = (result["loads"].get(f"{name}|{how}", missing) for name in ("blocks", "plain"))
            rows.append([result["database"], how, f"{blocks['records_per_s']:,.0f}", f"{plain['records_per_s']:,.0f}",
                         f"{plain['records_per_s'] / blocks['records_per_s']:.2f}",
                         f"{blocks['process_cpu_s']:.1f} + {blocks['server_cpu_s']:.1f}",
                         f"{plain['process_cpu_s']:.1f} + {plain['server_cpu_s']:.1f}"])
    table = format_table(["database", f"load of {size:,}", "blocks rec/s", "plain rec/s", "plain/blocks",
                          "blocks CPU s (py + server)", "plain CPU s (py + server)"], rows, left=2)
    print(f"\n{table}")
    for result in results:
        if "blocks|add_many batches" not in result["loads"]:
            continue
        pages = result["loads"]["blocks|add_many batches"]["pages"]
        print(f"{result['database']}: range() of a 20-entry page after the batched load, median ms:"
              f" {', '.join(f'page {label} {ms:.2f}' for label, ms in pages.items())};"
              f" page 5,000 / page 11 = {pages['5,000'] / pages['11']:.2f}")
    path = write_json("relational_writes", args.smoke, stamp(), {
        "command": " ".join(["python -m bench.relational_writes", *(argv if argv is not None else sys.argv[1:])]),
        "entries": size, "batch": args.batch, "results": results, "table": table,
        "machine": machine_info({}, load_at_start, "shared machine (2 cores, other engineers' test runs);"
                                " index stores only, no DynamoDB")})
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
