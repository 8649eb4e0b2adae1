"""What a batch's WAIT for replicas costs the stream consumer (issue 43): the time of one index write
(a stream batch's apply_net: one MULTI/EXEC) with SYNC["WAIT_REPLICAS"] at 0, 1 and 2, on a primary
with two replicas of the run's own (redis-server on loopback, no persistence).

    python -m bench.redis_wait           # 500 batches per row
    python -m bench.redis_wait --smoke   # 50 batches per row

A batch is BATCH_OPS adds spread over 10 products (a stream page of that many INSERTs), each a
fresh member, so every batch really writes. Wall time per batch (median, p99) from one client;
CPU per batch is the client process's. On loopback a replica's acknowledgement is a round trip
through another process, so the extra time is mostly scheduling on this shared 2-core machine;
across hosts add a network round trip (WAIT asks the replicas for an ACK at once, REPLCONF GETACK).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-not-secret")
django.setup()

import redis  # noqa: E402
from django.conf import settings  # noqa: E402
from django.test import override_settings  # noqa: E402

from bench.common import format_table, machine_info, shown, stamp, write_json  # noqa: E402
from pagination_index.backends.redis import RedisIndex  # noqa: E402
from pagination_index.sortkeys import micros_sort_key  # noqa: E402
from tests.services import RedisSentinelServers  # noqa: E402

BATCHES, SMOKE_BATCHES = 500, 50
BATCH_SIZES = (100, 1000)
BASE = 1_700_000_000_000_000


def wait_online(node: redis.Redis, replicas: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        info = node.info("replication")
        if info["connected_slaves"] >= replicas and all(
                info[f"slave{n}"]["state"] == "online" for n in range(info["connected_slaves"])):
            return
        time.sleep(0.1)
    raise RuntimeError("the replicas did not come online")


def measure(location: str, batch_ops: int, batches: int, counter: list[int]) -> list[dict]:
    """Batches for WAIT at 0, 1 and 2 replicas taken in turn, so that the machine's load drifts over
    all three rows alike (the other helpers' tests share its 2 cores)."""
    indexes = {}
    for replicas in (0, 1, 2):
        sync = {**settings.PAGINATION_INDEX.get("SYNC", {}), "WAIT_REPLICAS": replicas, "WAIT_TIMEOUT_SECONDS": 5.0}
        with override_settings(PAGINATION_INDEX={**settings.PAGINATION_INDEX, "SYNC": sync}):
            indexes[replicas] = RedisIndex({"LOCATION": location, "KEY_PREFIX": "bench-wait:"})
    walls: dict[int, list[float]] = {replicas: [] for replicas in indexes}
    cpus: dict[int, list[float]] = {replicas: [] for replicas in indexes}
    for _ in range(batches):
        for replicas, index in indexes.items():
            adds: dict[str, list] = {}
            for n in range(batch_ops):
                counter[0] += 1
                adds.setdefault(f"SKU-{n % 10}", []).append((f"{counter[0]:032x}", micros_sort_key(BASE + counter[0])))
            wall, cpu = time.perf_counter(), time.process_time()
            index.apply_net(adds, {})
            walls[replicas].append(time.perf_counter() - wall)
            cpus[replicas].append(time.process_time() - cpu)
    rows = []
    for replicas, index in indexes.items():
        index.close()
        times = sorted(walls[replicas])
        rows.append({"replicas": replicas, "batch_ops": batch_ops, "batches": batches,
                     "median_ms": round(statistics.median(times) * 1000, 3),
                     "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1000, 3),
                     "mean_ms": round(statistics.fmean(times) * 1000, 3),
                     "cpu_ms_per_batch": round(statistics.fmean(cpus[replicas]) * 1000, 3)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    batches = SMOKE_BATCHES if args.smoke else BATCHES
    load = os.getloadavg()
    when = stamp()
    with tempfile.TemporaryDirectory(prefix="bench-wait-") as folder:
        servers = RedisSentinelServers(Path(folder), replicas=2, sentinels=0)
        try:
            primary = servers.data_ports[0]
            servers.start_data(primary)
            for port in servers.data_ports[1:]:
                servers.start_data(port, replica_of=primary)
            wait_online(servers.node(primary), 2)
            version = servers.node(primary).info("server")["redis_version"]
            location = f"redis://127.0.0.1:{primary}/0"
            counter = [0]
            rows = []
            for batch_ops in BATCH_SIZES:
                measure(location, batch_ops, max(batches // 10, 5), counter)  # warm-up
                rows += measure(location, batch_ops, batches, counter)
        finally:
            servers.stop()
    for row in rows:
        base = next(r for r in rows if r["batch_ops"] == row["batch_ops"] and r["replicas"] == 0)
        row["extra_median_ms"] = round(row["median_ms"] - base["median_ms"], 3)
    print(format_table(
        ["ops/batch", "WAIT replicas", "median ms", "p99 ms", "extra (median) ms", "client CPU ms/batch"],
        [[str(r["batch_ops"]), str(r["replicas"]), f"{r['median_ms']:.3f}", f"{r['p99_ms']:.3f}",
          f"{r['extra_median_ms']:+.3f}", f"{r['cpu_ms_per_batch']:.3f}"] for r in rows], left=2))
    path = write_json("redis_wait", args.smoke, when, {
        "machine": machine_info({"redis": version}, load, "2 cores shared with other helpers' tests and "
                                "DynamoDB Local's JVM; primary and both replicas on this machine's loopback"),
        "rows": rows,
    })
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
