"""The seeds' scale: a synthetic shop whose product sizes follow a Zipf-like law, rebuilt into each
index backend through rebuild_index itself, then verified, read and written.

    python -m bench.scale --smoke                       # 20,000 comments, every backend (< 60 s)
    python -m bench.scale --sizes 100000,1000000        # peak RSS of rebuild/verify at each size
    python -m bench.scale --sizes 1000000 --backends files
    python -m bench.scale --catalogue-only             # the catalogue of 100,000 products alone
    python -m bench.scale --sizes 6000000 --largest 5000000 --backends files
                                                        # one product of 5,000,000 comments, the rest small

The table is a source of the bench's own (SyntheticSource): each product's comments are generated
newest first from a seed, so the index is loaded through the same path as production
(rebuild_index: units, unit_entries streamed into replace(), fences, checkpoints) without
DynamoDB Local's ~1,000 writes/s in the way; the DynamoDB read side of that path is the one Query
stream per product (comments.table.source), whose memory is a page of items.

Per backend and size, each command in a process of its own (peak RSS from /proc's VmHWM):
- rebuild_index: seconds, index entries/s (a comment is in its product's group and one rating group)
- bytes per index entry: the files' size on disk, the SQLite file, Redis's used_memory delta
- at() and range(20) p50/p99 at uniformly random depth (a rank drawn over all comments), 16 threads
- stream apply: batches of 100 adds over random products, ops/s
- verify_index: seconds, entries/s
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from bench.common import format_table, machine_info, stamp, write_json
from pagination_index import BaseSource
from pagination_index.sortkeys import micros_sort_key

SMOKE_SIZES, SIZES = [10_000], [100_000, 1_000_000]
BACKENDS = ["relational", "files", "redis"]
MIN_SIZE, MAX_SIZE = 300, 5_000_000  # the seeds' groups: a few hundred to several million
BASE_MICROS = 1_700_000_000_000_000
READERS, READS, SMOKE_READS = 16, 400, 50


def product_sizes(total: int, largest: int | None = None) -> list[int]:
    """Zipf-like sizes s_k = top * k**-a, clipped to [MIN_SIZE, top], summing to about `total`:
    top is 5 % of the total up to 5,000,000 (reached from 100,000,000 comments), or `largest`,
    products one per 2,500 comments as in the seeds (~200,000 at 500,000,000) and a is solved for."""
    top = largest or max(10 * MIN_SIZE, min(MAX_SIZE, total // 20))
    products = max(total // 2_500, 3 * total // top)

    def sizes(a: float) -> list[int]:
        return [max(MIN_SIZE, min(top, int(top * k ** -a))) for k in range(1, products + 1)]

    low, high = 0.01, 4.0
    for _ in range(40):
        middle = (low + high) / 2
        if sum(sizes(middle)) > total:
            low = middle
        else:
            high = middle
    return sizes(high)


def env_sizes() -> list[int]:
    """The product sizes of the run, in the processes measure() starts."""
    return product_sizes(int(os.environ["BENCH_SCALE_TOTAL"]), int(os.environ.get("BENCH_SCALE_LARGEST") or 0) or None)


def comments(sku: str, size: int):
    """(member, sort_key, rating) of a product, newest first, the same on every call."""
    rng = random.Random(sku)
    micros = BASE_MICROS
    for _ in range(size):
        micros -= rng.randrange(1, 5_000)
        yield uuid.UUID(int=rng.getrandbits(128)).hex, micros_sort_key(micros), 1 + rng.randrange(5)


class EmptyStream:
    """A stream with no shards: rebuild_index notes nothing and no record is replayed."""

    def describe_stream(self, **kwargs):
        return {"StreamDescription": {"Shards": []}}


class SyntheticSource(BaseSource):
    """The bench's table (PAGINATION_INDEX_SOURCE): BENCH_SCALE_TOTAL comments over Zipf-sized products."""

    def __init__(self, options=None):
        super().__init__(options)
        self.sizes = dict(enumerate(env_sizes()))

    def sku(self, number: int) -> str:
        return f"P{number:07d}"

    def stream_arn(self):
        return "arn:bench:synthetic"

    def stream_client(self):
        return EmptyStream()

    def record_ops(self, record):
        return []

    def units(self, *, budget=None, segments=4):
        return [self.sku(number) for number in self.sizes]

    def unit_of(self, group):
        return group.partition("/")[0]

    def unit_groups(self, unit):
        return [unit, *(f"{unit}/{rating}" for rating in range(1, 6))]

    def unit_entries(self, unit, *, budget=None):
        size = self.sizes[int(unit[1:])]
        yield unit, ((member, sort_key) for member, sort_key, _ in comments(unit, size))
        for rating in range(1, 6):  # generated again rather than held: memory stays flat
            yield f"{unit}/{rating}", ((m, s) for m, s, r in comments(unit, size) if r == rating)

    def group_entries(self, group):
        unit, _, rating = group.partition("/")
        for member, sort_key, r in comments(unit, self.sizes[int(unit[1:])]):
            if not rating or r == int(rating):
                yield member, sort_key

    def has_items(self):
        return True

    def approximate_item_count(self):
        return sum(self.sizes.values())


CHILD = """
import json, os, sys, time
import django
django.setup()
from django.core.management import call_command
def peak_mib():
    return int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1]) / 1024
command = sys.argv[1]
if command == "migrate":
    call_command("migrate", verbosity=0)
    print(json.dumps({}))
    sys.exit()
started, cpu = time.perf_counter(), time.process_time()
if command == "rebuild_index":
    call_command("rebuild_index", verbosity=0, wave=200)
else:
    call_command("verify_index", verbosity=0, recheck_seconds=0)
print(json.dumps({"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu,
                  "peak_rss_mib": peak_mib()}))
"""

READER = """
import json, os, random, statistics, sys, threading, time, bisect
import django
django.setup()
from pagination_index import get_index
from bench.scale import env_sizes, READERS
READS = int(os.environ["BENCH_SCALE_READS"])
index = get_index()
sizes = env_sizes()
starts = [0]
for size in sizes:
    starts.append(starts[-1] + size)
timings = {"at": [], "range": []}
lock = threading.Lock()
def reader(seed):
    rng = random.Random(seed)
    mine = {"at": [], "range": []}
    for _ in range(READS):
        position = rng.randrange(starts[-1])  # uniformly random over all comments: depth in its product
        product = bisect.bisect_right(starts, position) - 1
        group, rank = f"P{product:07d}", position - starts[product]
        t = time.perf_counter(); entry = index.at(group, rank); mine["at"].append(time.perf_counter() - t)
        assert entry is not None, (group, rank)
        t = time.perf_counter(); index.range(group, rank, rank + 20); mine["range"].append(time.perf_counter() - t)
    with lock:
        for name in timings:
            timings[name] += mine[name]
threads = [threading.Thread(target=reader, args=(n,)) for n in range(READERS)]
for thread in threads: thread.start()
for thread in threads: thread.join()
def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] * 1000
result = {f"{name}_{label}_ms": pct(values, p) for name, values in timings.items() for label, p in (("p50", 0.5), ("p99", 0.99))}
from pagination_index import Add
from django.db import transaction
rng = random.Random(7)
batches, ops = 50, 0
started = time.perf_counter()
for batch in range(batches):
    adds = [Add(f"P{rng.randrange(len(sizes)):07d}", f"new{batch:03d}{n:03d}", f"2030-01-01T00:00:{n % 60:02d}.{batch:06d}Z")
            for n in range(100)]
    with transaction.atomic():
        index.apply(adds)
    ops += len(adds)
result["apply_ops_per_second"] = ops / (time.perf_counter() - started)
print(json.dumps(result))
"""


CATALOGUE = """
import json, statistics, sys, time
import django
django.setup()
from django.core.management import call_command
from django.test import Client
from shop.models import Product
call_command("migrate", verbosity=0)
total = int(sys.argv[1])
for start in range(0, total, 5000):
    Product.objects.bulk_create(Product(sku=f"C{n:07d}", name=f"Product {n:07d}", price="9.99")
                                for n in range(start, min(total, start + 5000)))
client = Client()
last = -(-total // 50)
result = {}
for name, page in (("first", 1), ("middle", last // 2 or 1), ("last", last)):
    path = "/" if page == 1 else f"/?page={page}"
    timings, cpu = [], []
    for _ in range(20):
        started, cpu_started = time.perf_counter(), time.process_time()
        assert client.get(path).status_code == 200
        timings.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - cpu_started) * 1000)
    result[f"{name}_page_{page}_p50_ms"] = statistics.median(timings)
    result[f"{name}_page_{page}_cpu_p50_ms"] = statistics.median(cpu)
print(json.dumps(result))
"""


def catalogue(products: int) -> dict:
    """Server time of catalogue pages with `products` products (SQLite, the relational index, in-process
    requests through Django's test client: the middleware and the template included, no HTTP)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-scale-catalogue-"))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "shop.settings", "DJANGO_SECRET_KEY": "bench-scale-not-secret",
           "SHOP_VAR_DIR": str(folder), "RESPONSE_MICRO_CACHE_SECONDS": "0", "LOG_LEVEL": "WARNING",
           "DJANGO_STATICFILES_STORAGE": "django.contrib.staticfiles.storage.StaticFilesStorage"}
    try:
        return {"products": products, **run_child(CATALOGUE, [str(products)], env)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_child(code: str, args: list[str], env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)
    if done.returncode:
        raise SystemExit(f"{args}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def start_redis(folder: Path):
    from tests.services import RedisServer

    return RedisServer(folder).start()


def used_memory(port: int) -> int:
    import redis

    return redis.Redis(port=port).info("memory")["used_memory"]


def measure(backend: str, total: int, folder: Path, reads: int, largest: int | None = None) -> dict:
    sizes = product_sizes(total, largest)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "shop.settings", "DJANGO_SECRET_KEY": "bench-scale-not-secret",
           "SHOP_VAR_DIR": str(folder), "PAGINATION_INDEX_BACKEND": backend,
           "PAGINATION_INDEX_SOURCE": "bench.scale.SyntheticSource", "BENCH_SCALE_TOTAL": str(total),
           "PAGINATION_INDEX_PATH": str(folder / "index"), "REBUILD_SETTLE_SECONDS": "0", "LOG_LEVEL": "WARNING",
           "BENCH_SCALE_READS": str(reads), "BENCH_SCALE_LARGEST": str(largest or "")}
    redis_server = None
    if backend == "redis":
        redis_server = start_redis(folder)
        env["PAGINATION_INDEX_REDIS_URL"] = f"redis://127.0.0.1:{redis_server.port}/1"
    try:
        run_child(CHILD, ["migrate"], env)
        before = used_memory(redis_server.port) if redis_server else 0
        rebuild = run_child(CHILD, ["rebuild_index"], env)
        index_entries = 2 * sum(sizes)  # each comment: its product's group and one rating group
        if backend == "files":
            size = sum(path.stat().st_size for path in (folder / "index").rglob("*") if path.is_file())
        elif backend == "relational":
            size = (folder / "db.sqlite3").stat().st_size
        else:
            size = used_memory(redis_server.port) - before
        verify = run_child(CHILD, ["verify_index"], env)
        timings = run_child(READER, [], env)  # after verify: its stream apply adds entries the table lacks
    finally:
        if redis_server:
            redis_server.process.kill()
            redis_server.process.wait()
    return {
        "backend": backend, "comments": sum(sizes), "products": len(sizes), "largest_product": max(sizes),
        "index_entries": index_entries,
        "rebuild": {**rebuild, "entries_per_second": index_entries / rebuild["seconds"]},
        "bytes_per_entry": size / index_entries, "reads": timings,
        "verify": {**verify, "entries_per_second": index_entries / verify["seconds"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--sizes", help="comma-separated comment totals")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--largest", type=int, help="comments of the largest product (default: 5%% of the size, "
                        "at most 5,000,000)")
    parser.add_argument("--catalogue", type=int, help="products in the catalogue timing (default 100,000; smoke 2,000)")
    parser.add_argument("--catalogue-only", action="store_true", help="only the catalogue timing, no backend")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")] if args.sizes else (SMOKE_SIZES if args.smoke else SIZES)
    if args.catalogue_only:
        sizes = []
    load_at_start = os.getloadavg()
    when = stamp()
    results = []
    for total in sizes:
        for backend in args.backends.split(","):
            folder = Path(tempfile.mkdtemp(prefix=f"bench-scale-{backend}-"))
            try:
                results.append(measure(backend, total, folder, SMOKE_READS if args.smoke else READS, args.largest))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            print(f"{backend} at {total:,} comments: done (load {os.getloadavg()[0]:.1f})", flush=True)
    rows = [[r["backend"], f"{r['index_entries']:,}", f"{r['largest_product']:,}",
             f"{r['rebuild']['entries_per_second']:,.0f}", f"{r['rebuild']['peak_rss_mib']:.0f}",
             f"{r['bytes_per_entry']:.1f}", f"{r['reads']['at_p50_ms']:.2f}/{r['reads']['at_p99_ms']:.2f}",
             f"{r['reads']['range_p50_ms']:.2f}/{r['reads']['range_p99_ms']:.2f}",
             f"{r['reads']['apply_ops_per_second']:,.0f}", f"{r['verify']['entries_per_second']:,.0f}",
             f"{r['verify']['peak_rss_mib']:.0f}"] for r in results]
    if rows:
        print(format_table(["backend", "entries", "largest", "build/s", "build MiB", "B/entry", "at p50/p99 ms",
                            "range p50/p99 ms", "apply ops/s", "verify/s", "verify MiB"], rows))
    pages = catalogue(args.catalogue or (2_000 if args.smoke else 100_000))
    print(f"catalogue of {pages['products']:,} products: " + ", ".join(
        f"{name} {value:.1f}" for name, value in pages.items() if name != "products"))
    path = write_json("scale", args.smoke, when, {
        "machine": machine_info({}, load_at_start, "shared machine: 2 cores (the load averages say how busy); "
                                "16 reader threads in one Python process (the GIL serialises them)"),
        "results": results,
        "catalogue": pages,
    })
    print(f"saved {path}")


if __name__ == "__main__":
    main()
