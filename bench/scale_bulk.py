"""The seeds' scale loaded straight into each backend's bulk path (issue 29's sizes; not in CI).

    python -m bench.scale_bulk                                         # each backend at the issue's size:
    python -m bench.scale_bulk --backend files                         #   500,000,000 entries, ~12 GB of disk
    python -m bench.scale_bulk --backend redis                         #   20,000,000, ~3 GB of memory
    python -m bench.scale_bulk --backend relational                    #   50,000,000 on PostgreSQL
    python -m bench.scale_bulk --backend redis-cluster                 #   20,000,000 on a 3-primary cluster
    python -m bench.scale_bulk --backend dynamodb                      #   1,000,000 on DynamoDB Local
    python -m bench.scale_bulk --backend files --entries 10000000      # any size
    python -m bench.scale_bulk --backend redis-cluster --cluster-node-timeout 1000  # as the tests run it
    python -m bench.scale_bulk --smoke                                 # 50,000 entries, each backend
                                                                       #   (DynamoDB: 10,000)

bench.scale loads its shop through `rebuild_index` (a few thousand entries a second: the path's own
cost, and the figure for peak RSS); at hundreds of millions that would take days, so here the index
is written by the backends' bulk paths from data numpy makes. The shop is bench.scale's: products
whose sizes follow a Zipf-like law from 300 to 5,000,000 comments (`product_sizes`), each comment
in its product's group and one of five rating groups, so entries = 2 x comments. A product's
comments are made by numpy from its number (keys strictly newest first, uuid members, ratings).

- files: `FileIndex.replace_records()` (the generation writer under `replace()`: each group's
  generation appended to its pack, or written to a file of its own from 1 MiB, fsynced) in 2 processes,
  then `compact_packs()` (what `commit_index --compact` runs) over the packs left in many pieces on
  disk, in the build's time;
- redis, redis-cluster, relational and dynamodb: `replace()` itself, fed text entries numpy formats
  a product at a time (the formatting is in the build's time, a few tenths of a microsecond an entry).

Servers are the run's own, on free ports: a redis-server (redis), a Redis Cluster of 3 primaries with
a replica each (tests/services.py's RedisClusterServers, as bench.redis_cluster starts it; the index
through a redis+cluster:// URL), DynamoDB Local in memory (stack.dynamodb_local; the index in a table
of the run's own, made by the backend's create_storage()). PostgreSQL is the machine's, in a database
created and dropped by the run. The smoke (part of `make bench-smoke`, whose whole run CI times) loads
50,000 entries and reads from 4 reader processes, not 16, of 100 pairs each, not 400 (5 s at the
default read rate); DynamoDB
loads 10,000 and its readers 50 pairs: DynamoDB Local writes a few hundred to a few thousand entries a
second here (each entry is a member item, every 20 a page item) and a read costs its client a few ms
of CPU (boto3).

Measured per backend: build seconds and entries/s, bytes per entry (files: their sizes and the
blocks they take; Redis: used_memory of a server of the bench's own; the cluster: used_memory summed
over its primaries, once the replicas have caught up, less the empty cluster's; PostgreSQL: the
index tables' total relation size; DynamoDB: computed, not measured: every item of the table, read
by a Query of each group's partition, sized by AWS's documented rules
(stack.strict_endpoint.metering.item_size), plus the 100 bytes per item AWS bills as overhead, with
DynamoDB Local's DescribeTable TableSizeBytes and ItemCount beside it), at() and range(20) p50/p99
at uniformly random depth (a comment drawn over all of them) from 16 reader processes, each paced to
--read-rate pairs a second (default 20) so the 2 cores are not saturated and the figures are the
reads' own, with CPU per read and the pair rate the readers achieved (below 320 a second when they
fall behind, as on DynamoDB Local: then the figures include the queue for the cores), and at() of
another rank called as a page view calls it, right after count() ("at after count()"): the pair's
at() is each reader's first call after its sleep, and finds a Redis server idle or, on the files
backend, looks at the group's pack for the first time in that reader (bench/notes/scaling.md); on Redis
backends, the same-run baseline of that first call: each reader sleeps again for half a slot and
times a bare PING to the group's server ("ping after sleep"); the apply
rate of stream batches (100 adds over random products) into the loaded index; spot checks of
random ranks against the generated data; peak RSS (VmHWM) of every process, and of the store's
servers (redis-server, DynamoDB Local's JVM). Saved to bench/results/scale_bulk[-smoke]-<UTC time>.json.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

from bench.common import format_table, machine_info, stamp, write_json
from bench.scale import product_sizes
from pagination_index.backends.files.format import UUID_COLUMNS

ROOT = Path(__file__).resolve().parent.parent
BASE_MICROS = 1_700_000_000_000_000
READERS, READS_PER_READER = 16, 400
SMOKE_READERS = 4  # each a spawned process that sets Django up: 16 of them per backend were most of the smoke
SMOKE_ENTRIES = {"dynamodb": 10_000}  # every other backend: SMOKE_DEFAULT
SMOKE_DEFAULT = 50_000
SMOKE_READS = {"dynamodb": 50}  # reads a reader makes in --smoke (every other backend: SMOKE_READS_DEFAULT)
SMOKE_READS_DEFAULT = 100
# The sizes: what `make bench` (no --entries) loads into each backend.
FULL_ENTRIES = {"files": 500_000_000, "redis": 20_000_000, "redis-cluster": 20_000_000, "relational": 50_000_000,
                "dynamodb": 1_000_000}
BACKENDS = list(FULL_ENTRIES)
DYNAMODB_OVERHEAD = 100  # bytes AWS adds to each item for storage billing (developer guide, "Item sizes")
POSTGRES = "postgres://postgres@127.0.0.1:5432"


def peak_mib(pid: int | str = "self") -> float:
    return int(next(line for line in open(f"/proc/{pid}/status") if line.startswith("VmHWM:")).split()[1]) / 1024


def sku(number: int) -> str:
    return f"P{number:07d}"


def product(number: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A product's comments as UUID24 records in index order (keys strictly decreasing), and ratings."""
    rng = np.random.default_rng(number)
    records = np.empty(size, UUID_COLUMNS)
    records["k"] = BASE_MICROS - np.cumsum(rng.integers(1, 5_000, size))
    records["hi"] = rng.integers(0, 2**64, size, dtype=np.uint64)
    records["lo"] = rng.integers(0, 2**64, size, dtype=np.uint64)
    return records, rng.integers(1, 6, size)


def groups_of(number: int, size: int):
    """(group, records) of a product: its own group and its five rating groups."""
    records, ratings = product(number, size)
    yield sku(number), records
    for rating in range(1, 6):
        yield f"{sku(number)}/{rating}", records[ratings == rating]


def as_entries(records: np.ndarray) -> list[tuple[str, str]]:
    """(member hex, sort key text) pairs, formatted by numpy a group at a time."""
    members = np.empty((len(records), 2), ">u8")
    members[:, 0], members[:, 1] = records["hi"], records["lo"]
    text = members.tobytes().hex()
    keys = np.datetime_as_string(records["k"].astype(np.int64).astype("datetime64[us]"), unit="us")
    return [(text[i * 32:(i + 1) * 32], key + "Z") for i, key in enumerate(keys.tolist())]


# --- the backends, in each process ------------------------------------------------------------------
def open_index(backend: str, options: dict):
    if backend == "files":
        from pagination_index.backends.files import FileIndex

        return FileIndex({"PATH": options["path"], "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9})
    os.environ.update(options["env"])
    import django

    django.setup()
    from pagination_index import get_index

    return get_index()


def prepare(args) -> str | None:
    """The backend's storage, as `manage.py create_tables` makes it (the DynamoDB index's table)."""
    backend, options = args
    return open_index(backend, options).create_storage()


def build_part(args) -> dict:
    """Load some products (a worker process's share); its time, CPU and peak RSS."""
    backend, options, products = args
    index = open_index(backend, options)
    started, cpu, entries = time.perf_counter(), time.process_time(), 0
    for number, size in products:
        for group, records in groups_of(number, size):
            if backend == "files":
                index.replace_records(group, records)
            else:
                index.replace(group, as_entries(records))
            entries += len(records)
    return {"entries": entries, "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu, "peak_rss_mib": peak_mib()}


def compact_part(args) -> int:
    """The files backend's packs a bulk load left in many pieces on disk, rewritten (a share of the folders)."""
    options, share = args
    return open_index("files", options).compact_packs(share)


def pinger(index):
    """A bare round trip (PING) to the server holding a group's key, on a Redis backend: the same-run
    baseline of a first call after a sleep (None on other backends: files has no server; a DynamoDB
    call is itself the request's cost)."""
    from pagination_index.backends.redis import RedisIndex

    if not isinstance(index, RedisIndex):
        return None
    return lambda group: index._reader(index.key(group)).ping()


def read_part(args) -> dict:
    """One reader: `reads` reads of at() and range(20) at uniformly random depth, paced; then, as a
    page view calls them, count() and at() of another rank of the group (at_after_count_ms): a
    page's at() follows count() of the same group, the pair's at() follows a sleep."""
    backend, options, sizes, seed, rate, reads = args
    index = open_index(backend, options)
    ping = pinger(index)
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(sizes)
    at_ms, range_ms, at_after_ms, ping_ms, checks, cpu = [], [], [], [], [], 0.0
    next_at = first = time.perf_counter()
    for n in range(reads):
        comment = int(rng.integers(0, cumulative[-1]))
        number = int(np.searchsorted(cumulative, comment, side="right"))
        rank = comment - (int(cumulative[number - 1]) if number else 0)
        group = sku(number)
        next_at += 1 / rate
        time.sleep(max(0.0, next_at - time.perf_counter()))
        began, cpu_began = time.perf_counter(), time.process_time()
        found = index.at(group, rank)
        at_ms.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        page = index.range(group, rank, rank + 20)
        range_ms.append((time.perf_counter() - began) * 1000)
        cpu += time.process_time() - cpu_began
        # As a page view calls it: count() first, then at() (outside the CPU figure above).
        index.count(group)
        began = time.perf_counter()
        index.at(group, int(rng.integers(0, int(sizes[number]))))
        at_after_ms.append((time.perf_counter() - began) * 1000)
        if ping is not None:  # the baseline, half a slot later: a bare round trip to the group's server after a sleep
            time.sleep(max(0.0, next_at + 0.5 / rate - time.perf_counter()))
            began = time.perf_counter()
            ping(group)
            ping_ms.append((time.perf_counter() - began) * 1000)
        if n % 20 == 0:
            checks.append((number, rank, found, page))
    pairs_per_second = reads / (time.perf_counter() - first)  # below `rate` when the reads fall behind
    peak = peak_mib()  # the reads' own, before the checks regenerate whole products
    for number, rank, found, page in checks:  # the entry at that rank is the generated one
        records, _ = product(number, int(sizes[number]))
        assert found == as_entries(records[rank:rank + 1])[0], (number, rank, found)
        assert page[0] == found and len(page) == min(20, int(sizes[number]) - rank)
    return {"at_ms": at_ms, "range_ms": range_ms, "at_after_count_ms": at_after_ms, "ping_ms": ping_ms,
            "cpu_seconds": cpu, "pairs_per_second": pairs_per_second,
            "checks": len(checks), "peak_rss_mib": peak}


def apply_part(args) -> dict:
    """Stream batches (100 adds over random products) into the loaded index: ops/s."""
    backend, options, sizes = args
    from pagination_index import Add

    index = open_index(backend, options)
    rng = np.random.default_rng(99)
    batches, ops = 30, 0
    started, cpu = time.perf_counter(), time.process_time()
    for batch in range(batches):
        numbers = rng.integers(0, len(sizes), 100)
        adds = [Add(sku(int(number)), uuid.uuid4().hex, f"2030-01-01T00:00:{batch % 60:02d}.{n:06d}Z")
                for n, number in enumerate(numbers)]
        index.apply(adds)
        ops += len(adds)
    wall = time.perf_counter() - started
    return {"ops": ops, "batch": 100, "ops_per_second": ops / wall,
            "cpu_us_per_op": (time.process_time() - cpu) / ops * 1e6, "peak_rss_mib": peak_mib()}


# --- one run -------------------------------------------------------------------------------------------
def pct(values, p) -> float:
    return float(np.percentile(np.asarray(values), p))


# Redis's own cluster-node-timeout, what a deployment runs (the tests run 1,000 ms).
CLUSTER_NODE_TIMEOUT_MS = 15000


def run(backend: str, entries: int, folder: Path, workers: int, read_rate: float, out,
        reads_per_reader: int = READS_PER_READER, cluster_node_timeout: int = CLUSTER_NODE_TIMEOUT_MS,
        readers: int = READERS) -> dict:
    sizes = np.array(product_sizes(entries // 2), dtype=np.int64)
    total_entries = 2 * int(sizes.sum())
    options: dict = {"path": str(folder / "index")}
    redis_server = cluster = dynamodb = database = None
    if backend == "redis":
        from tests.services import RedisServer

        redis_server = RedisServer(folder).start()
        options["env"] = {"PAGINATION_INDEX_BACKEND": "redis",
                          "PAGINATION_INDEX_REDIS_URL": f"redis://127.0.0.1:{redis_server.port}/1"}
    elif backend == "redis-cluster":
        from tests.services import RedisClusterServers

        (folder / "cluster").mkdir()
        cluster = RedisClusterServers(folder / "cluster", node_timeout_ms=cluster_node_timeout).start()  # 3 primaries, a replica each
        options["env"] = {"PAGINATION_INDEX_BACKEND": "redis", "PAGINATION_INDEX_REDIS_URL": cluster.url}
    elif backend == "dynamodb":
        from stack.dynamodb_local import DynamoDBLocal

        dynamodb = DynamoDBLocal(log_path=folder / "dynamodb.log").start()  # in memory
        options["env"] = {"PAGINATION_INDEX_BACKEND": "dynamodb", "DYNAMODB_ENDPOINT_URL": dynamodb.endpoint_url,
                          "PAGINATION_INDEX_DYNAMODB_TABLE": f"bench-scale-{uuid.uuid4().hex[:8]}-pidx"}
    elif backend == "relational":
        database = f"bench_scale_{uuid.uuid4().hex[:8]}"
        subprocess.run(["psql", POSTGRES + "/postgres", "-qc", f"CREATE DATABASE {database}"], check=True)
        options["env"] = {"PAGINATION_INDEX_BACKEND": "relational", "DATABASE_URL": f"{POSTGRES}/{database}"}
    try:  # from here on the servers started above are stopped, whatever fails
        if "env" in options:
            options["env"].update({"DJANGO_SETTINGS_MODULE": "shop.settings", "DJANGO_SECRET_KEY": "bench-only-not-secret",
                                   "SHOP_VAR_DIR": str(folder), "LOG_LEVEL": "WARNING"})
            subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                           env={**os.environ, **options["env"]})
        context = multiprocessing.get_context("spawn")
        if dynamodb:
            with context.Pool(1) as pool:
                out(f"  {pool.apply(prepare, ((backend, options),))}")
        before = _redis_memory(redis_server) if redis_server else _cluster_memory(cluster) if cluster else 0
        order = sorted(range(len(sizes)), key=lambda n: -sizes[n])  # the largest first: shares even out
        shares = [[(n, int(sizes[n])) for n in order[w::workers]] for w in range(workers)]
        out(f"{backend}: {total_entries:,} entries over {len(sizes):,} products (largest {sizes.max():,}) "
            f"in {workers} processes ...")
        started = time.perf_counter()
        with context.Pool(workers) as pool:
            parts = pool.map(build_part, [(backend, options, share) for share in shares])
            compaction = None
            if backend == "files":  # the bulk load's last step (commit_index --compact), in the build's time
                compacted = time.perf_counter()
                packs = pool.map(compact_part, [(options, (w, workers)) for w in range(workers)])
                compaction = {"seconds": time.perf_counter() - compacted, "packs_rewritten": sum(packs)}
        build_seconds = time.perf_counter() - started
        assert sum(part["entries"] for part in parts) == total_entries
        result = {"backend": backend, "index_entries": total_entries, "comments": int(sizes.sum()),
                  "products": len(sizes), "groups": 6 * len(sizes), "largest_product": int(sizes.max()),
                  "build": {"seconds": build_seconds, "entries_per_second": total_entries / build_seconds,
                            "cpu_seconds": sum(part["cpu_seconds"] for part in parts), "processes": workers,
                            "peak_rss_mib_per_process": max(part["peak_rss_mib"] for part in parts),
                            **({"compaction": compaction} if compaction else {})}}
        if cluster is not None:
            result["cluster_node_timeout_ms"] = cluster_node_timeout
        out(f"  built in {build_seconds:,.0f} s: {total_entries / build_seconds:,.0f} entries/s"
            + (f" (compaction of {compaction['packs_rewritten']:,} packs {compaction['seconds']:,.0f} s of it)" if compaction else ""))
        servers = {"redis": redis_server, "redis-cluster": cluster, "dynamodb": dynamodb}
        result["size"] = _size(backend, folder, servers.get(backend), database, before, total_entries, options, sizes)
        out(f"  size: {result['size']}")
        if backend == "files":  # page cache warm, as the target asks: every file read once
            started = time.perf_counter()
            subprocess.run(f"find {folder / 'index'} -type f -print0 | xargs -0 cat > /dev/null", shell=True, check=True)
            result["page_cache_warm_seconds"] = time.perf_counter() - started
        if backend == "relational":
            result["after_load"] = _postgres_after_load(database)
            out(f"  after the load: {result['after_load']}")
        with context.Pool(readers) as pool:
            read_parts = pool.map(read_part, [(backend, options, sizes, seed, read_rate, reads_per_reader)
                                              for seed in range(readers)])
        at_ms = [value for part in read_parts for value in part["at_ms"]]
        range_ms = [value for part in read_parts for value in part["range_ms"]]
        at_after_ms = [value for part in read_parts for value in part["at_after_count_ms"]]
        reads = 2 * len(at_ms)
        result["reads"] = {"readers": readers, "rate_per_reader": read_rate, "pairs_per_reader": reads_per_reader,
                           "reads": reads,
                           "at_p50_ms": pct(at_ms, 50), "at_p99_ms": pct(at_ms, 99),
                           "range20_p50_ms": pct(range_ms, 50), "range20_p99_ms": pct(range_ms, 99),
                           "at_after_count_p50_ms": pct(at_after_ms, 50), "at_after_count_p99_ms": pct(at_after_ms, 99),
                           "cpu_us_per_read": sum(part["cpu_seconds"] for part in read_parts) / reads * 1e6,
                           "pairs_per_second_achieved": sum(part["pairs_per_second"] for part in read_parts),
                           "spot_checks": sum(part["checks"] for part in read_parts),
                           "peak_rss_mib_per_reader": max(part["peak_rss_mib"] for part in read_parts)}
        ping_ms = [value for part in read_parts for value in part["ping_ms"]]
        if ping_ms:
            result["reads"].update(ping_after_sleep_p50_ms=pct(ping_ms, 50), ping_after_sleep_p99_ms=pct(ping_ms, 99))
        out(f"  reads: {result['reads']}")
        with context.Pool(1) as pool:
            result["apply"] = pool.apply(apply_part, ((backend, options, sizes),))
        out(f"  apply: {result['apply']}")
        result["server"] = _server(backend, redis_server, cluster, dynamodb)
        out(f"  server: {result['server']}")
        return result
    except BaseException:
        if dynamodb and (folder / "dynamodb.log").exists():  # the folder goes with the run: say what it said
            out("DynamoDB Local's log ends:\n" + "\n".join((folder / "dynamodb.log").read_text().splitlines()[-40:]))
        raise
    finally:
        if redis_server:
            redis_server.process.kill()
            redis_server.process.wait()
        if cluster:
            cluster.stop()
        if dynamodb:
            dynamodb.stop()
        if database:
            subprocess.run(["psql", POSTGRES + "/postgres", "-qc", f"DROP DATABASE {database} WITH (FORCE)"], check=False)


def _redis_memory(server) -> int:
    import redis

    return redis.Redis(port=server.port).info("memory")["used_memory"]


def _primaries(cluster) -> list[int]:
    """The ports of the cluster's primaries, as its nodes see them now."""
    return sorted({primary for _, _, primary in cluster._slot_owners(cluster.live_ports()[0])})


def _cluster_memory(cluster) -> dict[int, dict]:
    """used_memory of each primary, once every replica has caught up with it: a replica still being
    fed holds an output buffer on its primary, which used_memory counts."""
    import redis

    deadline = time.monotonic() + 300
    while True:
        infos = {port: redis.Redis(port=port).info("replication") for port in _primaries(cluster)}
        behind = [port for port, info in infos.items()
                  if any(info[f"slave{n}"]["offset"] != info["master_repl_offset"] for n in range(info["connected_slaves"]))]
        if not behind or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return {port: redis.Redis(port=port).info("memory") for port in infos}


def _dynamodb_size(options: dict, sizes: np.ndarray) -> dict:
    """Every item of the index table sized by AWS's rules, read group by group (a Query of each group's
    partition: a Scan of the 1,000,000-entry table failed on DynamoDB Local, InternalFailure after
    botocore's retries), and what DescribeTable says (its ItemCount: were all the items read?)."""
    import boto3

    from stack.strict_endpoint.metering import item_size

    client = boto3.client("dynamodb", endpoint_url=options["env"]["DYNAMODB_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="local", aws_secret_access_key="local")
    table = options["env"]["PAGINATION_INDEX_DYNAMODB_TABLE"]
    kinds = {"stats": [0, 0], "page": [0, 0], "member": [0, 0]}  # items, bytes
    groups = [group for number in range(len(sizes))
              for group in (sku(number), *(f"{sku(number)}/{rating}" for rating in range(1, 6)))]
    pages = (page for group in groups for page in client.get_paginator("query").paginate(
        TableName=table, KeyConditionExpression="g = :g", ExpressionAttributeValues={":g": {"S": group}}))
    for page in pages:
        for item in page["Items"]:
            kind = kinds[{"s": "stats", "p": "page", "m": "member"}[item["p"]["S"][0]]]
            kind[0] += 1
            kind[1] += item_size(item)
    described = client.describe_table(TableName=table)["Table"]
    client.close()
    return {"items": {kind: {"items": n, "item_bytes": size} for kind, (n, size) in kinds.items()},
            "item_bytes": sum(size for _, size in kinds.values()),
            "billed_bytes": sum(size + DYNAMODB_OVERHEAD * n for n, size in kinds.values()),
            "items_read": sum(n for n, _ in kinds.values()),  # DescribeTable's ItemCount, when every item was read
            "describe_table": {"TableSizeBytes": described.get("TableSizeBytes"), "ItemCount": described.get("ItemCount")}}


def _server(backend, redis_server, cluster, dynamodb) -> dict:
    """The store's own processes at the end of the run: peak RSS (VmHWM) and, for Redis, used_memory_peak."""
    import redis

    if backend == "redis":
        return {"redis_server_peak_rss_mib": peak_mib(redis_server.process.pid),
                "used_memory_peak": redis.Redis(port=redis_server.port).info("memory")["used_memory_peak"]}
    if backend == "redis-cluster":
        primaries = _primaries(cluster)
        return {"nodes": len(cluster.ports), "primaries": len(primaries), "replicas_per_primary": cluster.replicas,
                "primary_peak_rss_mib": {str(port): peak_mib(cluster.processes[port].pid) for port in primaries},
                "replica_peak_rss_mib": {str(port): peak_mib(process.pid) for port, process in cluster.processes.items()
                                         if port not in primaries}}
    if backend == "dynamodb":
        from bench.common import DYNAMODB_LOCAL

        return {"emulator": f"{DYNAMODB_LOCAL}, in memory", "java_peak_rss_mib": peak_mib(dynamodb.process.pid)}
    return {}


def _size(backend, folder, server, database, before, entries, options, sizes) -> dict:
    if backend == "files":
        # Every file of the index (packs, groups' own files, empty lock files, the layout's marker)
        # and, in disk blocks, the folders too.
        files = [path for path in (folder / "index").rglob("*") if path.is_file()]
        data = sum(path.stat().st_size for path in files)
        blocks = int(subprocess.run(["du", "-s", "--block-size=1", str(folder / "index")], capture_output=True,
                                    text=True, check=True).stdout.split()[0])
        return {"files": len(files), "packs": sum(path.suffix == ".pack" for path in files),
                "own_files": sum(path.suffix[1:].isdigit() for path in files), "file_bytes": data,
                "bytes_per_entry": data / entries, "disk_blocks_bytes": blocks, "disk_bytes_per_entry": blocks / entries}
    if backend == "redis":
        used = _redis_memory(server) - before
        return {"used_memory_bytes": used, "bytes_per_entry": used / entries}
    if backend == "redis-cluster":
        after = _cluster_memory(server)
        used = {str(port): after[port]["used_memory"] - before[port]["used_memory"] for port in after}
        buffers = {str(port): {field: memory[field] for field in ("mem_replication_backlog", "mem_clients_slaves")}
                   for port, memory in after.items()}
        return {"used_memory_bytes": sum(used.values()), "used_memory_bytes_per_primary": used,
                "replication_memory_per_primary": buffers,
                "bytes_per_entry": sum(used.values()) / entries,
                "detail": "used_memory summed over the primaries (replicas not counted), less the empty cluster's"}
    if backend == "dynamodb":
        size = _dynamodb_size(options, sizes)
        size.update(bytes_per_entry=size["billed_bytes"] / entries, item_bytes_per_entry=size["item_bytes"] / entries,
                    detail="computed from every item (a Query per group) by AWS's item-size rules, plus 100 B of billed overhead "
                           "per item; not a measure of DynamoDB Local's memory")
        return size
    total = int(_psql(database, f"SELECT sum(pg_total_relation_size(c.oid)) {index_relations('r')}"))
    return {"relation_bytes": total, "bytes_per_entry": total / entries}


def index_relations(kinds: str) -> str:
    """FROM and WHERE of the index's relations of the given pg_class kinds ('r' tables, 'i' indexes)."""
    listed = ", ".join(f"'{kind}'" for kind in kinds)
    return ("FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            f"WHERE c.relkind IN ({listed}) AND n.nspname = 'public' AND c.relname LIKE 'pagination_index_%'")


def _psql(database: str, sql: str) -> str:
    return subprocess.run(["psql", f"{POSTGRES}/{database}", "-tAc", sql], capture_output=True, text=True,
                          check=True).stdout.strip()


def _postgres_after_load(database: str) -> dict:
    """What docs/operations.md asks after a bulk load, then the same warm page cache the files run
    gets: VACUUM (ANALYZE) of the index's tables (the visibility map that lets a rank read skip the
    table), then every one of their tables and indexes read once into the OS page cache (pg_prewarm's
    'read' mode; shared_buffers stays the server's own)."""
    started = time.perf_counter()
    tables = _psql(database, f"SELECT c.oid::regclass {index_relations('r')}").split()
    _psql(database, f"VACUUM (ANALYZE) {', '.join(tables)}")
    vacuumed = time.perf_counter()
    _psql(database, "CREATE EXTENSION IF NOT EXISTS pg_prewarm")
    blocks = _psql(database, f"SELECT sum(pg_prewarm(c.oid, 'read')) {index_relations('ri')}")
    return {"vacuum_analyze_seconds": round(vacuumed - started, 1),
            "page_cache_warm_seconds": round(time.perf_counter() - vacuumed, 1), "blocks_read": int(blocks or 0)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_bulk", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    parser.add_argument("--entries", type=int, help="index entries, 2 per comment (default: files 500,000,000, "
                                                    "redis and redis-cluster 20,000,000, relational 50,000,000, "
                                                    "dynamodb 1,000,000)")
    parser.add_argument("--workers", type=int, default=2, help="build processes")
    parser.add_argument("--read-rate", type=float, default=20.0,
                        help="reads a second per reader (at() then range(20)); 16 readers (default 20: 320 pairs/s)")
    parser.add_argument("--folder", help="where the files, the Redis servers and DynamoDB Local's log live "
                                         "(default: a temporary folder)")
    parser.add_argument("--cluster-node-timeout", type=int, default=CLUSTER_NODE_TIMEOUT_MS, metavar="MS",
                        help="the Redis Cluster's cluster-node-timeout (default Redis's own, 15000; the tests run "
                             "1000, so a lost node is seen at once, and its nodes then ping each other ten times as often)")
    parser.add_argument("--smoke", action="store_true",
                        help=f"{SMOKE_DEFAULT:,} entries on every backend but DynamoDB ({SMOKE_ENTRIES['dynamodb']:,})")
    args = parser.parse_args(argv)
    backends = args.backend or BACKENDS
    sys.path.insert(0, str(ROOT))
    out = lambda text: print(text, flush=True)  # noqa: E731
    load_at_start, when = os.getloadavg(), stamp()
    results = []
    for backend in backends:
        folder = Path(tempfile.mkdtemp(prefix=f"scale-bulk-{backend}-", dir=args.folder))
        try:
            entries = SMOKE_ENTRIES.get(backend, SMOKE_DEFAULT) if args.smoke else (args.entries or FULL_ENTRIES[backend])
            reads = SMOKE_READS.get(backend, SMOKE_READS_DEFAULT) if args.smoke else READS_PER_READER
            results.append(run(backend, entries, folder, args.workers, args.read_rate, out, reads, args.cluster_node_timeout,
                               SMOKE_READERS if args.smoke else READERS))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    rows = [[r["backend"], f"{r['index_entries']:,}", f"{r['build']['entries_per_second']:,.0f}",
             f"{r['size']['bytes_per_entry']:.1f}", f"{r['reads']['at_p50_ms']:.3f}", f"{r['reads']['at_p99_ms']:.3f}",
             f"{r['reads']['range20_p99_ms']:.3f}", f"{r['reads']['at_after_count_p50_ms']:.3f}",
             f"{r['reads']['at_after_count_p99_ms']:.3f}", f"{r['reads']['cpu_us_per_read']:.0f}",
             f"{r['apply']['ops_per_second']:,.0f}"] for r in results]
    out(format_table(["backend", "entries", "build/s", "B/entry", "at p50 ms", "at p99 ms", "range20 p99 ms",
                      "at after count() p50", "p99 ms", "CPU µs/read", "apply ops/s"], rows))
    path = write_json("scale_bulk", args.smoke, when, {"results": results, "machine": machine_info(
        {}, load_at_start, "2 cores shared by the build or reader processes, the backend's server, and whatever "
                           "else ran (the load averages say how busy)")})
    out(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
