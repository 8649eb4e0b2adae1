"""serve_index (the files index over RESP) against a real redis-server holding the same data, same run.

    python -m bench.resp                          # everything at the issue's sizes (500,000,000 entries: ~12 GB)
    python -m bench.resp --scale-entries 50000000 # the scale part at another size (0: skip it)
    python -m bench.resp --smoke                  # small sizes, for CI
    python -m bench.resp --folder DIR             # keep the data in DIR; a later run with the same DIR
                                                  #   reuses its scale build (hours under load)

1. Differential: a seeded random sequence of the index's commands on both servers, every reply compared
   (tests/pagination_index/resp_differential.py; 20,000 operations, smoke 2,000).
2. Throughput: redis-benchmark without pipelining, 50 connections, `ZREVRANGE key r r WITHSCORES` at
   rank r = 77 % of a 1,000,000-member group (smoke 20,000), alternately against serve_index and a
   redis-server of the run's own loaded with the same entries, ROUNDS rounds each; requests/s and
   latency percentiles as redis-benchmark reports them, and each server's CPU per request (its
   utime + stime over the round, from /proc). redis-benchmark shares the 2 cores with the servers.
3. serve_index's RSS (VmRSS, VmHWM) and the files' disk bytes per entry.
4. ZCOMMIT: 1,000 changes (ZADDs of new members) staged in a 2,300,000-member group (smoke 100,000),
   then one ZCOMMIT, timed as the client sees it; ROUNDS times.
5. Scale: bench.scale_bulk's shop (products of 300 to 5,000,000 comments, each in its product's group
   and a rating group) written to the files at --scale-entries by its bulk path, then served: the same
   redis-benchmark ZREVRANGE at 77 % of the largest group, at() of random ranks of random groups
   through the RESP backend (redis-py), the server's RSS, and the disk bytes per entry.
Saved to bench/results/resp[-smoke]-<UTC time>.json; summarised in bench/notes/resp.md.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-not-secret")

from bench.common import format_table, machine_info, stamp, write_json  # noqa: E402
from pagination_index.backends.files.format import UUID_COLUMNS, sort_uuid_records  # noqa: E402

GROUP = "bench-resp"
SIZE, SMOKE_SIZE = 1_000_000, 20_000
COMMIT_SIZE, SMOKE_COMMIT_SIZE = 2_300_000, 100_000
OPERATIONS, SMOKE_OPERATIONS = 20_000, 2_000
SCALE, SMOKE_SCALE = 500_000_000, 200_000
REQUESTS, SMOKE_REQUESTS = 200_000, 20_000
ROUNDS, SMOKE_ROUNDS = 3, 1
CHANGES = 1_000
CONNECTIONS = 50
DEPTH = 0.77
BASE_MICROS = 1_600_000_000_000_000


def records(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty(count, UUID_COLUMNS)
    out["k"] = BASE_MICROS + rng.integers(0, 10**13, count)
    out["hi"] = rng.integers(0, 2**64, count, dtype=np.uint64)
    out["lo"] = rng.integers(0, 2**64, count, dtype=np.uint64)
    return sort_uuid_records(out)


def write_group(path: Path, group: str, data: np.ndarray) -> None:
    from pagination_index.backends.files import FileIndex

    FileIndex({"PATH": path, "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9}).replace_records(group, data)


def load_redis(port: int, group: str, data: np.ndarray) -> None:
    """The same entries into redis-server: ZADD of 10,000 members a command."""
    import redis

    client = redis.Redis(port=port)
    members = np.empty((len(data), 2), ">u8")
    members[:, 0], members[:, 1] = data["hi"], data["lo"]
    text = members.tobytes().hex()
    scores = data["k"].astype(np.int64).tolist()
    with client.pipeline(transaction=False) as pipe:
        for start in range(0, len(data), 10_000):
            pipe.zadd(group, {text[i * 32:(i + 1) * 32]: scores[i] for i in range(start, min(start + 10_000, len(data)))})
            if start % 200_000 == 0:
                pipe.execute()
        pipe.execute()
    assert client.zcard(group) == len(data)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int) -> dict:
    status = {line.split(":")[0]: line.split()[1] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
              if line.startswith(("VmRSS", "VmHWM"))}
    return {"rss_mib": int(status["VmRSS"]) / 1024, "peak_rss_mib": int(status["VmHWM"]) / 1024}


def benchmark(port: int, pid: int, group: str, rank: int, requests: int) -> dict:
    """redis-benchmark, 50 connections, no pipelining, one ZREVRANGE at `rank`; the server's CPU over it."""
    command = ["redis-benchmark", "-p", str(port), "-c", str(CONNECTIONS), "-n", str(requests), "--csv",
               "ZREVRANGE", group, str(rank), str(rank), "WITHSCORES"]
    before = cpu_seconds(pid)
    output = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=True).stdout
    cpu = cpu_seconds(pid) - before
    header, row = [line for line in output.splitlines() if line.startswith('"')][-2:]
    names = [name.strip('"') for name in header.split(",")]
    values = [value.strip('"') for value in row.split(",")]
    figures = {name: float(value) for name, value in zip(names[1:], values[1:])}
    figures["server_cpu_us_per_request"] = cpu / requests * 1e6
    return figures


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def throughput(ours, theirs, group: str, size: int, requests: int, rounds: int, out) -> dict:
    rank = int(size * DEPTH)
    runs = {"serve_index": [], "redis-server": []}
    for number in range(rounds):
        for name, server in (("redis-server", theirs), ("serve_index", ours)):
            figures = benchmark(server.port, server.process.pid, group, rank, requests)
            figures["load_average"] = os.getloadavg()[0]
            runs[name].append(figures)
            out(f"  round {number + 1} {name}: {figures['rps']:,.0f} requests/s, p50 {figures['p50_latency_ms']} ms, "
                f"p99 {figures['p99_latency_ms']} ms, server CPU {figures['server_cpu_us_per_request']:.1f} us/request, "
                f"load {figures['load_average']:.1f}")
    summary = {name: {key: median([run[key] for run in found]) for key in found[0]} for name, found in runs.items()}
    return {"rank": rank, "group_size": size, "connections": CONNECTIONS, "requests_per_round": requests,
            "rounds": runs, "median": summary,
            "ratio_requests_per_second": summary["serve_index"]["rps"] / summary["redis-server"]["rps"]}


def commits(ours, group: str, rounds: int, out) -> list[dict]:
    import redis

    client = redis.Redis(port=ours.port, socket_timeout=600)
    found = []
    for number in range(rounds):
        with client.pipeline(transaction=False) as pipe:
            for change in range(CHANGES):
                pipe.zadd(group, {uuid.uuid4().hex: BASE_MICROS + random.randrange(10**13)})
            pipe.execute()
        pending = client.execute_command("ZPENDING", group)
        started = time.perf_counter()
        assert client.execute_command("ZCOMMIT", group) == 1
        seconds = time.perf_counter() - started
        found.append({"pending_changes": pending, "seconds": seconds, "count": client.zcard(group)})
        out(f"  ZCOMMIT of {pending:,} changes into {found[-1]['count']:,} entries: {seconds:.3f} s")
    return found


def disk_bytes(path: Path) -> int:
    return int(subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def disk_blocks_bytes(path: Path) -> int:
    return int(subprocess.run(["du", "-sB1", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def at_through_resp(url: str, groups: list[tuple[str, int]], reads: int) -> dict:
    """at() of random ranks of random groups (weighted by size, as page views are) through RespIndex."""
    from pagination_index.backends.resp import RespIndex

    index = RespIndex({"LOCATION": url, "SOCKET_TIMEOUT": 5})
    rng = random.Random(7)
    weights = [size for _, size in groups]
    timings = []
    cpu = time.process_time()
    for group, size in rng.choices(groups, weights=weights, k=reads):
        rank = rng.randrange(size)
        started = time.perf_counter()
        assert index.at(group, rank) is not None
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return {"reads": reads, "p50_ms": timings[len(timings) // 2], "p99_ms": timings[int(len(timings) * 0.99)],
            "client_cpu_us_per_read": (time.process_time() - cpu) / reads * 1e6}


def scale(entries: int, folder: Path, rounds: int, requests: int, out) -> dict:
    """bench.scale_bulk's shop in the files (its bulk path), then served."""
    from bench.scale import product_sizes
    from bench.scale_bulk import build_part, compact_part, sku
    from tests.services import ServeIndex

    sizes = np.array(product_sizes(entries // 2), dtype=np.int64)
    total = 2 * int(sizes.sum())
    options = {"path": str(folder / "files-index")}
    workers = 2
    order = sorted(range(len(sizes)), key=lambda n: -sizes[n])
    shares = [[(n, int(sizes[n])) for n in order[w::workers]] for w in range(workers)]
    built = folder / "built.json"
    out(f"scale: {total:,} entries over {len(sizes):,} products (largest {sizes.max():,}) ...")
    if built.exists() and json.loads(built.read_text())["entries"] == total:
        build_seconds = json.loads(built.read_text())["seconds"]
        out(f"  built by an earlier run in {build_seconds:,.0f} s: reused")
    else:
        started = time.perf_counter()
        context = multiprocessing.get_context("spawn")
        with context.Pool(workers) as pool:
            pool.map(build_part, [("files", options, share) for share in shares])
            pool.map(compact_part, [(options, (w, workers)) for w in range(workers)])
        build_seconds = time.perf_counter() - started
        built.write_text(json.dumps({"entries": total, "seconds": build_seconds}))
        out(f"  built in {build_seconds:,.0f} s")
    # The page cache warm, as bench.scale_bulk measures reads: every file read once.
    warmed = time.perf_counter()
    subprocess.run(f"find {folder / 'files-index'} -type f -print0 | xargs -0 cat > /dev/null", shell=True, check=True)
    out(f"  page cache warmed in {time.perf_counter() - warmed:,.0f} s")
    server = ServeIndex(folder).start()  # serves folder/files-index, the path just built
    try:
        largest = int(np.argmax(sizes))
        group = sku(largest)
        figures = []
        rank = int(int(sizes[largest]) * DEPTH)
        for number in range(rounds):
            figures.append(benchmark(server.port, server.process.pid, group, rank, requests))
            out(f"  ZREVRANGE at rank {rank:,} of {group} ({int(sizes[largest]):,}): {figures[-1]['rps']:,.0f} "
                f"requests/s, p99 {figures[-1]['p99_latency_ms']} ms")
        groups = [(sku(n), int(sizes[n])) for n in range(len(sizes))]
        at = at_through_resp(server.url, groups, 2000 if requests >= REQUESTS else 300)
        out(f"  at() through RESP, random groups and ranks: p50 {at['p50_ms']:.3f} ms, p99 {at['p99_ms']:.3f} ms")
        disk = disk_blocks_bytes(folder / "files-index")
        result = {"entries": total, "products": len(sizes), "largest_group": int(sizes[largest]),
                  "build_seconds": build_seconds, "benchmark_rank": rank, "benchmark": figures,
                  "at_through_resp": at, "server_memory": memory_mib(server.process.pid),
                  "disk_bytes": disk, "disk_bytes_per_entry": disk / total}
        out(f"  server {result['server_memory']}, disk {disk:,} bytes = {disk / total:.2f} bytes/entry")
        return result
    finally:
        server.kill()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small sizes (CI)")
    parser.add_argument("--scale-entries", type=int, help=f"entries of the scale part (default {SCALE:,}; smoke "
                                                          f"{SMOKE_SCALE:,}; 0 skips it)")
    parser.add_argument("--requests", type=int, help="redis-benchmark requests a round")
    parser.add_argument("--folder", help="where the files and servers live (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    import django

    django.setup()
    from tests.pagination_index.resp_differential import differences
    from tests.services import RedisServer, ServeIndex

    smoke = args.smoke
    size, commit_size = (SMOKE_SIZE, SMOKE_COMMIT_SIZE) if smoke else (SIZE, COMMIT_SIZE)
    operations, rounds = (SMOKE_OPERATIONS, SMOKE_ROUNDS) if smoke else (OPERATIONS, ROUNDS)
    requests = args.requests or (SMOKE_REQUESTS if smoke else REQUESTS)
    scale_entries = args.scale_entries if args.scale_entries is not None else (SMOKE_SCALE if smoke else SCALE)
    for tool in ("redis-server", "redis-benchmark"):
        if not shutil.which(tool):
            print(f"bench.resp needs {tool} (Debian: apt-get install redis-server redis-tools)", file=sys.stderr)
            return 1
    load_at_start = os.getloadavg()
    when = stamp()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="bench-resp-"))
    folder.mkdir(parents=True, exist_ok=True)
    out = lambda text: print(text, flush=True)  # noqa: E731
    result: dict = {}
    ours = theirs = None
    try:
        out(f"data: a {size:,}-member group and a {commit_size:,}-member one ...")
        data = records(size, 1)
        (folder / "ours").mkdir(exist_ok=True)
        write_group(folder / "ours" / "files-index", GROUP, data)
        write_group(folder / "ours" / "files-index", "bench-commit", records(commit_size, 2))
        ours = ServeIndex(folder / "ours", env={"PAGINATION_INDEX_COMMIT_ENTRIES": str(10**9),
                                                "PAGINATION_INDEX_COMMIT_SECONDS": str(10**9)}).start()
        (folder / "redis").mkdir(exist_ok=True)
        theirs = RedisServer(folder / "redis").start()
        load_redis(theirs.port, GROUP, data)

        out(f"differential: {operations:,} operations ...")
        mismatches, compared = differences(ours.port, theirs.port, operations, seed=44)
        result["differential"] = {"operations": compared, "mismatches": len(mismatches),
                                  "first_mismatches": [repr(mismatch)[:2000] for mismatch in mismatches[:3]]}
        out(f"  {compared:,} operations, {len(mismatches)} mismatches")

        out(f"throughput: redis-benchmark -c {CONNECTIONS} -n {requests:,} ZREVRANGE {GROUP} r r WITHSCORES, "
            f"{rounds} round(s) each ...")
        result["throughput"] = throughput(ours, theirs, GROUP, size, requests, rounds, out)
        result["serve_index_memory"] = memory_mib(ours.process.pid)
        files = folder / "ours" / "files-index"
        result["disk"] = {"bytes": disk_blocks_bytes(files), "apparent_bytes": disk_bytes(files),
                          "entries": size + commit_size}
        result["disk"]["bytes_per_entry"] = result["disk"]["bytes"] / result["disk"]["entries"]
        out(f"  serve_index {result['serve_index_memory']}; disk {result['disk']}")

        out(f"commits: {CHANGES:,} changes into {commit_size:,} entries ...")
        result["zcommit"] = commits(ours, "bench-commit", rounds, out)
    finally:
        if ours:
            ours.kill()
        if theirs:
            theirs.kill()
    try:
        if scale_entries:
            (folder / "scale").mkdir(exist_ok=True)
            result["scale"] = scale(scale_entries, folder / "scale", rounds, requests, out)
    finally:
        if not args.folder:
            shutil.rmtree(folder, ignore_errors=True)

    throughput_median = result["throughput"]["median"]
    rows = [[name, f"{figures['rps']:,.0f}", f"{figures['p50_latency_ms']:.3f}", f"{figures['p99_latency_ms']:.3f}",
             f"{figures['server_cpu_us_per_request']:.1f}"] for name, figures in throughput_median.items()]
    out(format_table(["server", "requests/s", "p50 ms", "p99 ms", "server CPU us/request"], rows))
    out(f"serve_index / redis-server requests/s: {result['throughput']['ratio_requests_per_second']:.2f}")
    result["machine"] = machine_info(
        {"redis_server": subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]},
        load_at_start, "2 shared cores: redis-benchmark, the server under test and other work share them")
    path = write_json("resp", smoke, when, result)
    out(f"saved {path}")
    failed = result["differential"]["mismatches"] > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
