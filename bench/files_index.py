"""The files index backend (PAGINATION_INDEX_BACKEND=files): size, reads at depth, commit, bulk build,
apply rate.

    python -m bench.files_index            # 1,000,000 entries; commit of 2,300,000 + 1,000 changes
    python -m bench.files_index --smoke    # 20,000 entries; commit of 100,000 + 1,000 changes

- bytes per entry: the generation file's size over its entries (uuid4 hex members: 24-byte records)
- bulk build rate: replace() of the whole group (sorting, encoding, write, fsync, rename)
- at() at depths 0, 1 %, 10 %, 50 %, last: local storage without and with 1,000 pending log
  changes, and S3 storage on moto's standalone server (a local HTTP process: the figures are this
  code's and moto's cost, not S3's network latency)
- commit: 1,000 pending changes folded into a group of 2,300,000 entries, in a process of its own,
  whose wall time, CPU time and peak RSS (VmHWM, interpreter and numpy included) are reported
- apply rate: batches of 100 ops over 50 groups, each batch fsynced (syncfs) as sync_index's are
- replace() memory: a group of 5,000,000 entries (the seeds' largest product; smoke 200,000) built
  from a generator in a process of its own, peak RSS and time: in random order ("chunks") and newest
  first as a rebuild gives them ("ordered"), against the build before this round (the whole group as
  a dict of its texts, then sorted: "dict") in the same run; then check_integrity() of the ordered
  one (verify_index's check of each group), peak RSS and time
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import format_table, machine_info, stamp, write_json

SIZE, SMOKE_SIZE = 1_000_000, 20_000
COMMIT_SIZE, SMOKE_COMMIT_SIZE = 2_300_000, 100_000
REPLACE_SIZE, SMOKE_REPLACE_SIZE = 5_000_000, 200_000
PENDING = 1_000
GROUP = "bench-files"
BASE_MICROS = 1_600_000_000_000_000

# Peak RSS from /proc's VmHWM: ru_maxrss carries the parent's peak across fork and exec on Linux.
COMMITTER = """
import json, sys, time
from pagination_index.backends.files import FileIndex
def peak_mib():
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
index = FileIndex({"PATH": sys.argv[1], "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9})
before = peak_mib()
wall, cpu = time.perf_counter(), time.process_time()
assert index.commit(sys.argv[2])
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
print(json.dumps({"seconds": wall, "cpu_seconds": cpu, "peak_rss_mib": peak_mib(),
                  "peak_rss_before_commit_mib": before, "count": index.count(sys.argv[2])}))
"""

REPLACER = """
import json, random, sys, time, uuid
from pagination_index.sortkeys import micros_sort_key
from pagination_index.backends.files import FileIndex
from pagination_index.backends.files import format as fmt
def peak_mib():
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
path, count, how, base = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def stream():  # random keys; "ordered": newest first, as a rebuild's Query gives them
    rng = random.Random(9)
    for n in range(count):
        key = base + (count - n) * 1000 if how == "ordered" else base + rng.randrange(10**13)
        yield uuid.UUID(int=rng.getrandbits(128)).hex, micros_sort_key(key)
index = FileIndex({"PATH": path, "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9})
before = peak_mib()
wall, cpu = time.perf_counter(), time.process_time()
if how in ("chunks", "ordered"):
    index.replace("g", stream())
else:  # the build before this round: the group as a dict of its texts, sorted by numpy
    index.replace_records("g", fmt.uuid_records(dict(stream())))
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
assert index.count("g") == count
print(json.dumps({"seconds": wall, "cpu_seconds": cpu, "peak_rss_mib": peak_mib(),
                  "peak_rss_before_mib": before}))
"""

# check_integrity() of the group REPLACER built ("ordered"): what verify_index runs for each group.
CHECKER = """
import json, sys, time
from pagination_index.backends.files import FileIndex
def peak_mib():
    line = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
index = FileIndex({"PATH": sys.argv[1]})
before = peak_mib()
wall, cpu = time.perf_counter(), time.process_time()
problems = index.check_integrity("g")
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
assert problems == [], problems
print(json.dumps({"seconds": wall, "cpu_seconds": cpu, "peak_rss_mib": peak_mib(), "peak_rss_before_mib": before}))
"""


def entries(count: int, seed: int) -> list[tuple[str, str]]:
    from pagination_index.sortkeys import micros_sort_key

    rng = random.Random(seed)
    return [(uuid.UUID(int=rng.getrandbits(128)).hex, micros_sort_key(BASE_MICROS + rng.randrange(10**13)))
            for _ in range(count)]


def changes(existing: list[tuple[str, str]], count: int, seed: int) -> list:
    """Half new comments, a quarter removed, a quarter moved to a new sort key."""
    from pagination_index import Add, Remove
    from pagination_index.sortkeys import micros_sort_key

    rng = random.Random(seed)
    new = [Add(GROUP, member, sort_key) for member, sort_key in entries(count // 2, seed + 1)]
    picked = rng.sample(existing, count - count // 2)
    gone = [Remove(GROUP, member, sort_key) for member, sort_key in picked[: len(picked) // 2]]
    moved = [Add(GROUP, member, micros_sort_key(BASE_MICROS + rng.randrange(10**13))) for member, _ in picked[len(picked) // 2 :]]
    return new + gone + moved


def timed_reads(index, count: int, rounds: int) -> dict:
    ranks = {"0": 0, "1%": count // 100, "10%": count // 10, "50%": count // 2, "last": count - 1}
    result = {}
    for name, rank in ranks.items():
        index.at(GROUP, rank)  # the view and the generation's header cached, as in a warm worker
        walls, cpu = [], time.process_time()
        for _ in range(rounds):
            started = time.perf_counter()
            index.at(GROUP, rank)
            walls.append(time.perf_counter() - started)
        result[name] = {"rank": rank, "median_us": round(statistics.median(walls) * 1e6, 1),
                        "cpu_us_per_call": round((time.process_time() - cpu) / rounds * 1e6, 1)}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE:,} entries instead of {SIZE:,}")
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 reads (moto's server)")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from pagination_index.backends.files import FileIndex

    out = lambda text: print(text, flush=True)  # noqa: E731
    size = SMOKE_SIZE if args.smoke else SIZE
    commit_size = SMOKE_COMMIT_SIZE if args.smoke else COMMIT_SIZE
    rounds = 200 if args.smoke else 2000
    load_at_start, when = os.getloadavg(), stamp()
    report: dict = {"entries": size, "commit_entries": commit_size, "pending_changes": PENDING}
    with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp:
        options = {"PATH": str(Path(tmp) / "local"), "COMMIT_ENTRIES": 10**9, "COMMIT_SECONDS": 10**9}
        index = FileIndex(options)
        data = entries(size, 1)
        started = time.perf_counter()
        index.replace(GROUP, data)
        build = time.perf_counter() - started
        file_bytes = index.storage.footprint(GROUP)
        report["bytes_per_entry"] = round(file_bytes / size, 3)
        report["file_bytes"] = file_bytes
        report["bulk_build"] = {"seconds": round(build, 3), "entries_per_second": round(size / build)}
        out(f"{size:,} entries: {file_bytes:,} bytes = {file_bytes / size:.3f} B/entry; "
            f"bulk build {build:.2f} s ({size / build:,.0f} entries/s)")
        report["at_local"] = timed_reads(index, size, rounds)
        index.apply(changes(data, PENDING, 2))
        report["at_local_pending"] = timed_reads(index, index.count(GROUP), rounds)
        del data

        big = FileIndex(dict(options, PATH=str(Path(tmp) / "commit")))
        big_data = entries(commit_size, 3)
        big.replace(GROUP, big_data)
        big.apply(changes(big_data, PENDING, 4))
        del big_data
        committed = subprocess.run([sys.executable, "-c", COMMITTER, big.options["PATH"], GROUP],
                                   capture_output=True, text=True, check=True)
        report["commit"] = json.loads(committed.stdout)
        out(f"commit of {commit_size:,} entries + {PENDING:,} changes: {report['commit']['seconds']:.2f} s "
            f"({report['commit']['cpu_seconds']:.2f} s CPU), peak RSS {report['commit']['peak_rss_mib']:.0f} MiB")

        groups = [f"apply-{n}" for n in range(50)]
        applier = FileIndex(dict(options, PATH=str(Path(tmp) / "apply"), COMMIT_ENTRIES=1000))
        rng, batches, applied = random.Random(5), 20 if args.smoke else 100, 0
        from pagination_index import Add
        started, cpu = time.perf_counter(), time.process_time()
        for _ in range(batches):
            batch = [Add(rng.choice(groups), member, key) for member, key in entries(100, rng.randrange(10**9))]
            applier.apply(batch)
            applied += len(batch)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        report["apply"] = {"ops": applied, "batch": 100, "groups": len(groups), "ops_per_second": round(applied / wall),
                           "cpu_us_per_op": round(cpu / applied * 1e6, 1)}
        out(f"apply: {applied / wall:,.0f} ops/s in batches of 100 over 50 groups ({cpu / applied * 1e6:.0f} µs CPU per op)")

        replace_size = SMOKE_REPLACE_SIZE if args.smoke else REPLACE_SIZE
        report["replace_memory"] = {"entries": replace_size}
        for how in ("dict", "chunks", "ordered"):
            done = subprocess.run([sys.executable, "-c", REPLACER, str(Path(tmp) / f"replace-{how}"),
                                   str(replace_size), how, str(BASE_MICROS)], capture_output=True, text=True, check=True)
            figures = report["replace_memory"][how] = json.loads(done.stdout)
            out(f"replace() of {replace_size:,} entries from a generator, {how}: {figures['seconds']:.1f} s "
                f"({figures['cpu_seconds']:.1f} s CPU, the generator included), peak RSS "
                f"{figures['peak_rss_mib']:.0f} MiB ({figures['peak_rss_before_mib']:.0f} before)")
        done = subprocess.run([sys.executable, "-c", CHECKER, str(Path(tmp) / "replace-ordered")],
                              capture_output=True, text=True, check=True)
        figures = report["check_memory"] = {"entries": replace_size, **json.loads(done.stdout)}
        out(f"check_integrity() of that group (verify_index's per-group check): {figures['seconds']:.1f} s "
            f"({figures['cpu_seconds']:.1f} s CPU), peak RSS {figures['peak_rss_mib']:.0f} MiB "
            f"({figures['peak_rss_before_mib']:.0f} before)")

        if not args.no_s3:
            report["at_s3"] = s3_reads(Path(tmp), size, min(rounds, 200), out)
    rows = [[name, str(report["at_local"][name]["rank"]), f"{report['at_local'][name]['median_us']}",
             f"{report['at_local_pending'][name]['median_us']}",
             f"{report.get('at_s3', {}).get(name, {}).get('median_us', '-')}"] for name in report["at_local"]]
    out(format_table(["depth", "rank", "local µs", "local, 1,000 pending µs", "S3 (moto) µs"], rows))
    path = write_json("files_index", args.smoke, when, {
        **report, "machine": machine_info({}, load_at_start, "shared 2-core machine (DynamoDB Local's JVM, Redis and "
                                                            "other engineers' work); medians of wall time, CPU per call beside them"),
    })
    out(f"wrote {path}")
    return 0


def s3_reads(tmp: Path, size: int, rounds: int, out) -> dict:
    import boto3
    import django

    # The S3 storage's client comes from the library's AWS client layer, which reads settings.PAGINATION_INDEX["AWS"].
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-files-index")
    django.setup()

    from pagination_index.backends.files import FileIndex
    from tests.services import S3Server

    server = S3Server(tmp).start()
    try:
        bucket = "bench-files-index"
        boto3.client("s3", endpoint_url=server.url, region_name="us-east-1", aws_access_key_id="local",
                     aws_secret_access_key="local").create_bucket(Bucket=bucket)
        index = FileIndex({"PATH": str(tmp / "s3-journal"), "S3_BUCKET": bucket, "S3_ENDPOINT_URL": server.url,
                           "MANIFEST_SECONDS": 3600})
        started = time.perf_counter()
        index.replace(GROUP, entries(size, 1))
        out(f"S3: uploaded {size:,} entries in {time.perf_counter() - started:.1f} s")
        return timed_reads(index, size, rounds)
    finally:
        server.kill()


if __name__ == "__main__":
    sys.exit(main())
