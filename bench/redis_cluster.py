"""The Redis index on a Redis Cluster beside one Redis: latency of at() and of a page's index calls,
keys per hash slot and memory per node, for 1,000,000 comments over 1,000 products.

    python -m bench.redis_cluster           # 1,000 products x 1,000 comments
    python -m bench.redis_cluster --smoke   # 20 products x 100 comments

Each comment is in its product's group and its rating group, as the stream writes them (2,000,000
index entries in 6,000 keys at full size). Both stores are redis-server processes of the run's own,
from the same binary with the same settings: one plain Redis, and a cluster of 3 primaries with a
replica each (tests/services.py). Latencies are medians of single calls from one client process,
wall and CPU time; "page" is what a deep product page asks of the index (count_many of the product,
then at() of the rank before the page), "filtered" a two-rating page's count_newer_many, "catalogue"
count_many of 50 products (on a cluster, spread over every primary). No DynamoDB is involved.
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

import django
import redis

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-not-secret")
django.setup()

from django.conf import settings  # noqa: E402
from redis.crc import key_slot  # noqa: E402

from bench.common import format_table, machine_info, shown, stamp, write_json  # noqa: E402
from pagination_index.backends.redis import RedisIndex  # noqa: E402
from tests.services import RedisClusterServers, RedisServer  # noqa: E402

PRODUCTS, PER_PRODUCT = 1_000, 1_000
SMOKE_PRODUCTS, SMOKE_PER_PRODUCT = 20, 100
CALLS, SMOKE_CALLS = 2_000, 200
BASE = 1_600_000_000_000_000  # microseconds since the epoch: 2020-09-13


def product_entries(products: int, per_product: int, seed: int = 1) -> dict[str, list[tuple[str, str]]]:
    """Every group's entries: the product's, and each rating group's (ratings cycle 1..5)."""
    from pagination_index.sortkeys import micros_sort_key

    rng = random.Random(seed)
    groups: dict[str, list[tuple[str, str]]] = {}
    for number in range(products):
        sku = f"SKU-{number:05d}"
        for index in range(per_product):
            entry = (f"{rng.getrandbits(128):032x}", micros_sort_key(BASE + rng.randrange(10**14)))
            groups.setdefault(sku, []).append(entry)
            groups.setdefault(f"{sku}/{1 + index % 5}", []).append(entry)
    return groups


def used_memory(ports: list[int]) -> dict[int, int]:
    return {port: redis.Redis(port=port).info("memory")["used_memory"] for port in ports}


def timed(call, calls: int) -> dict:
    """Median and p90 wall time, and mean CPU time, of `calls` calls (one warm-up first)."""
    call()
    walls = []
    cpu_before = time.process_time()
    for _ in range(calls):
        started = time.perf_counter()
        call()
        walls.append((time.perf_counter() - started) * 1e6)
    cpu = (time.process_time() - cpu_before) * 1e6 / calls
    walls.sort()
    return {"median_us": statistics.median(walls), "p90_us": walls[int(calls * 0.9) - 1], "cpu_us": cpu}


def bench_store(name: str, index: RedisIndex, groups: dict, primaries: list[int], calls: int, out) -> dict:
    before = used_memory(primaries)
    started, cpu_started = time.perf_counter(), time.process_time()
    for group, entries in groups.items():
        index.replace(group, entries)
    load = {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu_started}
    out(f"  {name}: loaded {sum(len(e) for g, e in groups.items() if '/' not in g):,} comments "
        f"({sum(len(e) for e in groups.values()):,} entries, {len(groups):,} keys) in {load['seconds']:.1f} s")
    after = used_memory(primaries)
    skus = sorted(group for group in groups if "/" not in group)
    size = len(groups[skus[0]])
    rng = random.Random(2)
    picks = [(rng.choice(skus), rng.randrange(size)) for _ in range(calls + 1)]
    cycle = iter(picks * 4)

    def at():
        index.at(*next(cycle))

    def page():
        sku, rank = next(cycle)
        index.count_many([sku])
        index.at(sku, rank)

    def filtered():
        sku, rank = next(cycle)
        member, sort_key = groups[sku][rank]
        index.count_newer_many([f"{sku}/4", f"{sku}/5"], sort_key, member)

    def catalogue():
        start = rng.randrange(len(skus) - 50) if len(skus) > 50 else 0
        index.count_many(skus[start : start + 50])

    ordered = {sku: sorted(groups[sku], key=lambda entry: (entry[1], entry[0]), reverse=True) for sku in skus[:5]}
    for sku, entries in ordered.items():  # a fast wrong answer measures nothing
        for rank in (0, size // 2, size - 1):
            if index.at(sku, rank) != entries[rank]:
                raise SystemExit(f"{name}: at({sku}, {rank}) = {index.at(sku, rank)}, expected {entries[rank]}")
    assert index.count_many(skus[:3]) == {sku: size for sku in skus[:3]}
    return {
        "load": load,
        "latency": {"at": timed(at, calls), "page": timed(page, calls), "filtered": timed(filtered, calls),
                    "catalogue": timed(catalogue, max(calls // 10, 20))},
        "memory_per_primary": {str(port): after[port] - before[port] for port in primaries},
    }


def slot_layout(index: RedisIndex, groups: dict, cluster: RedisClusterServers) -> dict:
    """Keys per hash slot (client side, checked against CLUSTER COUNTKEYSINSLOT) and per primary."""
    per_slot: dict[int, int] = {}
    for group in groups:
        slot = key_slot(index.key(group).encode())
        per_slot[slot] = per_slot.get(slot, 0) + 1
    primaries = sorted({cluster.primary_port_of(index.key(group)) for group in groups})
    for slot in list(per_slot)[:20]:
        owner = next(port for port in primaries
                     if redis.Redis(port=port).execute_command("CLUSTER COUNTKEYSINSLOT", slot))
        assert redis.Redis(port=owner).execute_command("CLUSTER COUNTKEYSINSLOT", slot) == per_slot[slot]
    counts = sorted(per_slot.values())
    return {"slots_used": len(per_slot), "keys_per_used_slot": {"min": counts[0], "median": statistics.median(counts),
                                                                "max": counts[-1]},
            "keys_per_primary": {str(port): redis.Redis(port=port).dbsize() for port in primaries}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help=f"{SMOKE_PRODUCTS} products x {SMOKE_PER_PRODUCT} comments instead of {PRODUCTS} x {PER_PRODUCT}")
    args = parser.parse_args(argv)
    products, per_product = (SMOKE_PRODUCTS, SMOKE_PER_PRODUCT) if args.smoke else (PRODUCTS, PER_PRODUCT)
    calls = SMOKE_CALLS if args.smoke else CALLS
    out = lambda text: print(text, flush=True)  # noqa: E731
    out(f"redis_cluster: {products:,} products x {per_product:,} comments, one Redis beside a 3-primary cluster")
    groups = product_entries(products, per_product)
    load_at_start = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory(prefix="redis-cluster-bench-") as work:
        single = RedisServer(Path(work)).start()
        cluster = RedisClusterServers(Path(work) / "cluster")
        (Path(work) / "cluster").mkdir()
        try:
            cluster.start()
            options = dict(settings.PAGINATION_INDEX_REDIS, KEY_PREFIX="pidx:")
            stores = {
                "one Redis": (RedisIndex(dict(options, LOCATION=f"redis://127.0.0.1:{single.port}/1")), [single.port]),
                "cluster": (RedisIndex(dict(options, LOCATION=cluster.url)), None),
            }
            for name, (index, primaries) in stores.items():
                if primaries is None:
                    primaries = sorted({cluster.primary_port_of(index.key(g)) for g in groups})
                results[name] = bench_store(name, index, groups, primaries, calls, out)
                index.close()
            results["cluster"]["slots"] = slot_layout(stores["cluster"][0], groups, cluster)
            version = redis.Redis(port=single.port).info("server")["redis_version"]
        finally:
            cluster.stop()
            single.kill()
    header = ["store", "at() median", "page", "filtered", "catalogue (50)", "at() CPU", "load s", "memory per primary"]
    rows = []
    for name, result in results.items():
        latency = result["latency"]
        rows.append([name, *(f"{latency[part]['median_us']:.0f} us" for part in ("at", "page", "filtered", "catalogue")),
                     f"{latency['at']['cpu_us']:.0f} us", f"{result['load']['seconds']:.1f}",
                     ", ".join(f"{size / 2**20:.1f} MiB" for size in result["memory_per_primary"].values())])
    single_at = results["one Redis"]["latency"]["at"]["median_us"]
    table = format_table(header, rows)
    slots = results["cluster"]["slots"]
    out("")
    out(table)
    out(f"cluster at() / one Redis at(): {results['cluster']['latency']['at']['median_us'] / single_at:.2f}")
    out(f"cluster: {slots['slots_used']:,} slots used, keys per used slot {slots['keys_per_used_slot']}, "
        f"keys per primary {slots['keys_per_primary']}")
    when = stamp()
    path = write_json("redis_cluster", args.smoke, when, {
        "products": products, "comments_per_product": per_product, "calls": calls, "results": results,
        "ratio_cluster_to_single_at": results["cluster"]["latency"]["at"]["median_us"] / single_at, "table": table,
        "machine": machine_info({"Redis": version}, load_at_start,
                                "2 cores shared with other engineers' test runs; client and every redis-server "
                                "on the same machine (no network hop); memory is used_memory growth per primary"),
    })
    out(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
