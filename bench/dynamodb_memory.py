"""Peak memory of rebuild_index and verify_index on the DynamoDB index backend, by product size.

    python -m bench.dynamodb_memory                          # products of 20,000 and 200,000 comments
    python -m bench.dynamodb_memory --smoke                  # 500 and 5,000 (< 1 min on a quiet machine)
    python -m bench.dynamodb_memory --sizes 20000,1000000    # any sizes

Each size is a shop of one product on a DynamoDB Local of its own (in memory, 3 GB of heap): its comments (bench.scale's
generator, 200-byte bodies) seeded into the comments table, then rebuilt into the DynamoDB index
table by `rebuild_index` (the product's group and its five rating groups: two index entries a
comment), then checked by `verify_index`, each command in a process of its own: peak RSS (/proc's
VmHWM), seconds and CPU seconds. The target (issue 42): peak RSS at 200,000
within 1.5x of 20,000's, and at most 300 MB at 5,000,000. DynamoDB Local (one JVM) takes the
writes on the same shared 2-core machine, at about 1,000-2,000 items a second: the seconds are
DynamoDB Local's, not DynamoDB's; the memory is the Python process's own.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DYNAMODB_LOCAL, format_table, machine_info, stamp, write_json
from bench.scale import comments as scale_comments
from bench.scale import run_child

SIZES, SMOKE_SIZES = [20_000, 200_000], [500, 5_000]

CHILD = """
import json, sys, time
import django
django.setup()
from django.core.management import call_command
def peak_mib():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]) / 1024
command = sys.argv[1]
if command == "setup":
    from bench.dynamodb_memory import seed
    call_command("migrate", verbosity=0)
    call_command("create_tables", verbosity=0)
    started = time.perf_counter()
    seed(int(sys.argv[2]))
    print(json.dumps({"seed_seconds": time.perf_counter() - started}))
    sys.exit()
started, cpu = time.perf_counter(), time.process_time()
if command == "rebuild_index":
    call_command("rebuild_index", verbosity=0)
else:
    call_command("verify_index", verbosity=0, recheck_seconds=0)
print(json.dumps({"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu,
                  "peak_rss_mib": peak_mib()}))
"""
SKU = "P0000000"
HEAP = "3g"


def seed(comments: int) -> None:
    """One product's comments (bench.scale's generator: newest first from a seed, 200-byte bodies),
    BatchWriteItem from 8 threads."""
    from concurrent.futures import ThreadPoolExecutor
    from itertools import islice

    from comments.table.client import dynamodb_bulk
    from comments.table.keys import table_name

    client, table = dynamodb_bulk(), table_name()

    def flush(batch):
        pending = {table: batch}
        while pending:
            pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}

    def requests():
        for member, sort_key, rating in scale_comments(SKU, comments):
            yield {"PutRequest": {"Item": {
                "PK": {"S": member}, "SK": {"S": sort_key}, "PK2": {"S": SKU}, "PK2R": {"S": f"{SKU}/{rating}"},
                "rating": {"N": str(rating)}, "author": {"S": "bench"}, "body": {"S": "x" * 200}}}}

    made = requests()
    with ThreadPoolExecutor(8) as pool:
        while chunk := list(islice(made, 25 * 64)):
            list(pool.map(flush, [chunk[i:i + 25] for i in range(0, len(chunk), 25)]))


def measure(comments: int, folder: Path) -> dict:
    """Seed a DynamoDB Local of its own with one product, then rebuild_index and verify_index. In
    memory, with a heap of HEAP (the tests' 512 MB would leave 200,000 comments and their index items
    collecting all the time; on disk, DynamoDB Local writes about 30 items a second)."""
    os.environ.setdefault("DYNAMODB_LOCAL_HEAP", HEAP)  # read when stack.dynamodb_local is imported
    from stack.dynamodb_local import DynamoDBLocal

    database = DynamoDBLocal(log_path=folder / "dynamodb.log").start()
    endpoint = database.endpoint_url
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "shop.settings", "DJANGO_SECRET_KEY": "bench-only-not-secret",
           "SHOP_VAR_DIR": str(folder), "PAGINATION_INDEX_BACKEND": "dynamodb",
           "DYNAMODB_ENDPOINT_URL": endpoint, "COMMENTS_TABLE": "comments",
           "REBUILD_SETTLE_SECONDS": "0", "LOG_LEVEL": "WARNING"}
    try:
        setup = run_child(CHILD, ["setup", str(comments)], env)
        rebuild = run_child(CHILD, ["rebuild_index"], env)
        verify = run_child(CHILD, ["verify_index"], env)
    finally:
        database.stop()
    return {"comments": comments, "index_entries": 2 * comments, **setup, "rebuild_index": rebuild, "verify_index": verify,
            "cpu_ms_per_comment": {"rebuild_index": 1000 * rebuild["cpu_seconds"] / comments,
                                   "verify_index": 1000 * verify["cpu_seconds"] / comments}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZES} comments instead of {SIZES}")
    parser.add_argument("--sizes", help="comma-separated product sizes (comments)")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")] if args.sizes else (SMOKE_SIZES if args.smoke else SIZES)
    load_at_start = os.getloadavg()
    folder = Path(tempfile.mkdtemp(prefix="bench-dynamodb-memory-"))
    results = []
    try:
        for comments in sizes:
            started = time.monotonic()
            work = folder / str(comments)
            work.mkdir()
            results.append(measure(comments, work))
            print(f"{comments:,} comments: {time.monotonic() - started:.0f} s (load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows = [[f"{r['comments']:,}", command, f"{r[command]['peak_rss_mib']:.0f}", f"{r[command]['seconds']:.1f}",
             f"{1000 * r['cpu_ms_per_comment'][command]:.0f}"]
            for r in results for command in ("rebuild_index", "verify_index")]
    table = format_table(["comments", "command", "peak RSS MiB", "seconds", "CPU µs/comment"], rows, left=2)
    print(table)
    ratios = {}
    if len(results) > 1:
        first, last = results[0], results[-1]
        ratios = {command: last[command]["peak_rss_mib"] / first[command]["peak_rss_mib"]
                  for command in ("rebuild_index", "verify_index")}
        print(f"peak RSS at {last['comments']:,} / at {first['comments']:,}: "
              + ", ".join(f"{command} {ratio:.2f}x" for command, ratio in ratios.items()) + " (target: within 1.5x)")
    path = write_json("dynamodb_memory", args.smoke, stamp(), {
        "machine": machine_info({"DynamoDB Local": DYNAMODB_LOCAL}, load_at_start,
                                "shared 2-core machine; DynamoDB Local's JVM on the same cores"),
        "command": " ".join(["python -m bench.dynamodb_memory", *sys.argv[1:]]),
        "results": results, "peak_ratio_largest_to_smallest": ratios, "table": table,
    })
    print(f"saved {path}")


if __name__ == "__main__":
    main()
