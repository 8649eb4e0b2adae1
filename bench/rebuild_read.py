"""How rebuild_index should read the table: one Query per product (what it does) against a parallel
Scan of the whole table (what it did), on DynamoDB Local.

    python -m bench.rebuild_read            # 50,000 comments over Zipf-sized products
    python -m bench.rebuild_read --smoke    # 5,000

Each read runs in a process of its own and only reads (no index is written), so the figures are the
read path's: seconds, items a second and peak RSS (VmHWM). "query" is what rebuild_index reads of each
of the comments table's sources (byProduct, then byRating): the keys-only discovery Scan of its GSI
(groups()) plus each group's newest-first Query streamed through group_entries(); "scan" is a 4-segment parallel Scan whose entries are
collected by group, as the old all_entries() did (a Scan spilled to sorted runs would add an external
sort on disk to the same read). DynamoDB Local serves reads from one JVM on this shared machine: the
rates compare the two paths, not DynamoDB.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import DYNAMODB_LOCAL, format_table, machine_info, stamp, write_json
from bench.scale import comments, product_sizes

SIZE, SMOKE_SIZE = 50_000, 5_000

CHILD = """
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
import django
django.setup()
from comments.table import client
from comments.table.keys import PRODUCTS, table_name
from pagination_index import sources
def peak_mib():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]) / 1024
started = time.perf_counter()
items = 0
if sys.argv[1] == "query":
    for source in sources.for_table(table_name()):
        for group in source.groups():
            count = sum(1 for _ in source.group_entries(group))
            if source.name == PRODUCTS:  # the comments (each is in a rating group too)
                items += count
else:
    def segment(number):
        found = {}
        kwargs = {"TableName": table_name(), "Segment": number, "TotalSegments": 4,
                  "ProjectionExpression": "PK, SK, PK2, PK2R"}
        while True:
            response = client.dynamodb_bulk().scan(**kwargs)
            for item in response["Items"]:
                for attribute in ("PK2", "PK2R"):
                    found.setdefault(item[attribute]["S"], []).append((item["PK"]["S"], item["SK"]["S"]))
            if "LastEvaluatedKey" not in response:
                return found
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]
    with ThreadPoolExecutor(4) as pool:
        parts = list(pool.map(segment, range(4)))
    items = sum(len(entries) for part in parts for group, entries in part.items() if "/" not in group)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "items": items, "items_per_second": items / seconds, "peak_rss_mib": peak_mib()}))
"""


def seed(total: int) -> None:
    """BatchWriteItem from 8 threads, the items generated as bench.scale generates them."""
    from comments.table.client import dynamodb_bulk
    from comments.table.keys import table_name
    from comments.table.schema import create_tables

    create_tables()
    sizes = product_sizes(total)
    client = dynamodb_bulk()

    def write(number: int) -> None:
        sku = f"P{number:07d}"
        batch = []
        for member, sort_key, rating in comments(sku, sizes[number]):
            batch.append({"PutRequest": {"Item": {
                "PK": {"S": member}, "SK": {"S": sort_key}, "PK2": {"S": sku}, "PK2R": {"S": f"{sku}/{rating}"},
                "rating": {"N": str(rating)}, "author": {"S": "bench"}, "body": {"S": "x" * 200}}}})
            if len(batch) == 25:
                flush(batch)
                batch = []
        if batch:
            flush(batch)

    def flush(batch):
        pending = {table_name(): batch}
        while pending:
            pending = client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(len(sizes))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--size", type=int)
    args = parser.parse_args()
    total = args.size or (SMOKE_SIZE if args.smoke else SIZE)
    load_at_start = os.getloadavg()
    from stack.dynamodb_local import DynamoDBLocal

    folder = Path(tempfile.mkdtemp(prefix="bench-rebuild-read-"))
    database = DynamoDBLocal(log_path=folder / "dynamodb.log").start()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "shop.settings", "DJANGO_SECRET_KEY": "bench-only-not-secret",
           "SHOP_VAR_DIR": str(folder), "DYNAMODB_ENDPOINT_URL": database.endpoint_url, "LOG_LEVEL": "WARNING",
           "COMMENTS_TABLE": "comments"}
    os.environ.update(env)
    try:
        import django

        django.setup()
        seed(total)
        results = {}
        for way in ("query", "scan"):
            done = subprocess.run([sys.executable, "-c", CHILD, way], env=env, capture_output=True, text=True,
                                  cwd=Path(__file__).resolve().parent.parent)
            if done.returncode:
                raise SystemExit(done.stderr[-3000:])
            results[way] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        database.stop()
    print(format_table(["read", "comments", "seconds", "comments/s", "peak RSS MiB"],
                       [[way, f"{r['items']:,}", f"{r['seconds']:.1f}", f"{r['items_per_second']:,.0f}",
                         f"{r['peak_rss_mib']:.0f}"] for way, r in results.items()]))
    path = write_json("rebuild_read", args.smoke, stamp(), {
        "machine": machine_info({"DynamoDB Local": DYNAMODB_LOCAL}, load_at_start, "shared 2-core machine"),
        "comments": total, "largest_product": max(product_sizes(total)), "results": results,
    })
    print(f"saved {path}")


if __name__ == "__main__":
    main()
