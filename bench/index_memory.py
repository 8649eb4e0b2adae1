"""Bytes per index entry for each backend, at 1,000,000 entries in one group.

    python -m bench.index_memory            # 1,000,000 entries
    python -m bench.index_memory --smoke    # 20,000 entries

Loads the group with bench/index_depth.py's loaders (the backend's own layout; the relational
backend's counted blocks built as rebuild_index builds them) and measures:
Redis `MEMORY USAGE` of the group's key and the `INFO memory` used_memory delta; PostgreSQL
`pg_total_relation_size` of every pagination_index table (rows, TOAST and indexes); SQLite the
`dbstat` pages of every pagination_index table and index, and the file size delta. Scratch data only,
removed after (Redis keys under a per-run prefix, a PostgreSQL database created and dropped).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench import index_depth
from bench.common import format_table, machine_info, pyplot, result_path, shown, stamp, write_json

SIZE, SMOKE_SIZE = 1_000_000, 20_000
GROUP = "bench-memory"


def redis_bytes(store, entries) -> dict:
    import redis
    from django.conf import settings

    raw = redis.Redis.from_url(settings.PAGINATION_INDEX_REDIS["LOCATION"])
    before = raw.info("memory")["used_memory"]
    store.load(GROUP, entries)
    used = raw.info("memory")["used_memory"] - before
    key = next(subject.at for subject in store.subjects if subject.kind == "backend").__self__.key(GROUP)
    usage = raw.memory_usage(key, samples=0)
    raw.close()
    return {"memory_usage_key": usage, "used_memory_delta": used, "bytes_per_entry": usage / len(entries),
            "detail": "MEMORY USAGE <key> SAMPLES 0; used_memory delta is shared-server noise-prone"}


def with_blocks(store) -> None:
    """The relational backend's counted blocks (one row per ~1,024 entries), as rebuild_index builds them."""
    next(subject.at for subject in store.subjects if subject.kind == "backend").__self__.repair_group(GROUP)


def postgres_bytes(store, entries) -> dict:
    from django.db import connections

    store.load(GROUP, entries)
    with_blocks(store)
    with connections["bench_postgres"].cursor() as cursor:
        cursor.execute("SELECT relname, pg_total_relation_size(oid), pg_relation_size(oid) FROM pg_class "
                       "WHERE relkind = 'r' AND relname LIKE 'pagination_index_%' ORDER BY relname")
        tables = {name: {"total": total, "heap": heap} for name, total, heap in cursor.fetchall()}
    total = sum(table["total"] for table in tables.values())
    return {"tables": tables, "total_bytes": total, "bytes_per_entry": total / len(entries),
            "detail": "pg_total_relation_size of every pagination_index_* table (heap, TOAST, indexes)"}


def sqlite_bytes(store, entries, path: Path) -> dict:
    import sqlite3

    from django.db import connections

    connections["bench_sqlite"].close()
    before = path.stat().st_size
    store.load(GROUP, entries)
    with_blocks(store)
    connections["bench_sqlite"].close()
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    try:
        rows = raw.execute("SELECT name, SUM(pgsize) FROM dbstat WHERE name LIKE '%pagination_index_%' "
                           "GROUP BY name ORDER BY name").fetchall()
        objects = dict(rows)
    except sqlite3.OperationalError:  # SQLite built without dbstat
        objects = {}
    raw.close()
    delta = path.stat().st_size - before
    total = sum(objects.values()) if objects else delta
    return {"objects": objects, "file_size_delta": delta, "total_bytes": total, "bytes_per_entry": total / len(entries),
            "detail": "dbstat pages of every pagination_index_* table and index" if objects else "file size delta"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE:,} entries instead of {SIZE:,}")
    args = parser.parse_args(argv)
    size = SMOKE_SIZE if args.smoke else SIZE
    out = lambda text: print(text, flush=True)  # noqa: E731
    load_at_start = os.getloadavg()
    entries = index_depth.make_entries(size, seed=size)
    results, versions = {}, {}
    with tempfile.TemporaryDirectory(prefix="index-memory-") as workdir:
        measures = {"SQLite": (index_depth.sqlite_store, lambda s: sqlite_bytes(s, entries, Path(workdir) / "index.sqlite3")),
                    "PostgreSQL": (index_depth.postgres_store, lambda s: postgres_bytes(s, entries)),
                    "Redis": (index_depth.redis_store, lambda s: redis_bytes(s, entries))}
        for name, (make_store, measure) in measures.items():
            store = make_store(Path(workdir))
            versions[name] = store.version
            try:
                results[name] = measure(store)
            finally:
                store.close()
            out(f"  {name}: {results[name]['bytes_per_entry']:.1f} bytes per entry ({results[name]['detail']})")
    table = format_table(["store", "bytes/entry", f"MiB at {size:,}"],
                         [[name, f"{r['bytes_per_entry']:.1f}", f"{r['bytes_per_entry'] * size / 2**20:.1f}"]
                          for name, r in results.items()])
    out("\n" + table)
    when = stamp()
    png = result_path("index_memory", args.smoke, when, "png")
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6, 4))
    axis.bar(list(results), [r["bytes_per_entry"] for r in results.values()], color=["#4c72b0", "#55a868", "#c44e52"])
    axis.set_ylabel("bytes per index entry")
    axis.set_title(f"Index size at {size:,} entries (32-hex PK + microsecond SK)")
    figure.tight_layout()
    figure.savefig(png, dpi=110)
    path = write_json("index_memory", args.smoke, when, {
        "entries": size, "results": results, "table": table, "plot": png.name,
        "machine": machine_info(versions, load_at_start, "shared machine; index stores only")})
    out(f"\nwrote {shown(path)} and {shown(png)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
