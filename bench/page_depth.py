"""Time to serve product pages by depth, split into index, DynamoDB and our own time, per index backend,
beside the baseline that reaches page N by reading pages 1..N-1 through LastEvaluatedKey.

    python -m bench.page_depth            # the flagship product with 100,000 comments
    python -m bench.page_depth --smoke    # 3,000 comments: a quick check that it all works
    python -m bench.page_depth --size 1000000 --sqlite-only --no-dynalite --no-baseline   # page 50,000 vs 11

Each page is served through Django's WSGI handler (middleware, view, template, ETag: everything but
the HTTP server), with the fast window's, the rendered pages' and the micro-cache off so every request does its own reads and renders. Timers wrap
the index backend's methods and the boto3 client's calls on their instances, in this process only:
"index" is time inside the backend, "DynamoDB" time inside the client's calls (of which "wire" is the
HTTP round trip with the response read, timed by botocore's before-send and before-parse events, the
rest botocore), "ours" everything else (also as this thread's CPU time, which other processes on a busy machine do
not inflate).

DynamoDB Local's Query from an ExclusiveStartKey gets slower the deeper the key (real DynamoDB's does
not); pages start by the key condition `SK < boundary` instead, which it seeks. The emulator's cost is
reported on its own: per page, one 21-item Query from the page's boundary both ways ("start cost").
"""
from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from functools import wraps

from bench.common import (
    DYNAMODB_LOCAL,
    format_table,
    get_environ,
    machine_info,
    pyplot,
    result_path,
    shown,
    stamp,
    write_json,
)
from bench.dataset import DATA, FLAGSHIP, Dataset, postgres_index, redis_index
from stack.dynamodb_local import free_port, is_up

SIZE, SMOKE_SIZE = 100_000, 3_000
PAGE_SIZE = 20
# Per (backend, page): at least MIN_CALLS timed requests, more while within the time budget.
MIN_CALLS, MAX_CALLS, BUDGET_SECONDS = 5, 60, 1.5
# Baseline: pages whose walk is longer than this are timed once.
BASELINE_REPEAT_PAGES = 20


def pages_for(size: int) -> list[int]:
    last = -(-size // PAGE_SIZE)
    return [page for page in (1, 2, 10, 11, 100, 1_000) if page < last] + [last]


class Timers:
    """Seconds spent inside wrapped calls, by label, since the last reset()."""

    def __init__(self):
        self.spent: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    def reset(self) -> None:
        self.spent.clear()
        self.cpu.clear()

    def wrap(self, label: str, function):
        @wraps(function)
        def timed(*args, **kwargs):
            started, cpu = time.perf_counter(), time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.spent[label] += time.perf_counter() - started
                self.cpu[label] += time.thread_time() - cpu
        return timed


INDEX_METHODS = ("at", "range", "count", "count_many")
CLIENT_METHODS = ("query", "get_item")


@contextmanager
def instrumented(timers: Timers):
    """Timers on the current index backend's and DynamoDB client's instances (this process only)."""
    from comments.table.client import dynamodb, dynamodb_reads
    from pagination_index import get_index

    index, client, reads = get_index(), dynamodb(), dynamodb_reads()
    originals = ([(index, name) for name in INDEX_METHODS] + [(client, name) for name in CLIENT_METHODS]
                 + [(reads, "query"), (reads.pool, "urlopen")])
    for target, name in originals:
        label = {index: "index", reads.pool: "wire"}.get(target, "dynamodb")
        setattr(target, name, timers.wrap(label, getattr(target, name)))
    # The wire time of every attempt: the page path's direct Query's round trip (reads.pool.urlopen,
    # above), and botocore's calls' through its event hooks, from just before the request is sent to
    # just before its response (read in full) is parsed.
    sent = []

    def before_send(**kwargs):
        sent[:] = [time.perf_counter()]  # returns None: botocore sends the request itself

    def before_parse(**kwargs):
        if sent:
            timers.spent["wire"] += time.perf_counter() - sent.pop()

    events = client.meta.events
    events.register("before-send.dynamodb", before_send, unique_id="bench-wire-send")
    events.register("before-parse.dynamodb", before_parse, unique_id="bench-wire-parse")
    try:
        yield
    finally:
        for target, name in originals:
            delattr(target, name)
        events.unregister("before-send.dynamodb", unique_id="bench-wire-send")
        events.unregister("before-parse.dynamodb", unique_id="bench-wire-parse")


def serve(handler, path: str, query: str) -> int:
    environ = get_environ(path, query)
    status = []
    body = b"".join(handler(environ, lambda code, headers, exc_info=None: status.append(code)))
    if not status[0].startswith("200") or b'class="pagination"' not in body:
        raise SystemExit(f"{path}?{query}: {status[0]}")
    return len(body)


def time_page(handler, timers: Timers, number: int) -> dict:
    path = f"/products/{FLAGSHIP}/"
    query = f"page={number}" if number > 1 else ""
    serve(handler, path, query)  # warm
    samples = []
    started = time.perf_counter()
    while len(samples) < MIN_CALLS or (len(samples) < MAX_CALLS and time.perf_counter() - started < BUDGET_SECONDS):
        timers.reset()
        before, cpu = time.perf_counter(), time.thread_time()
        size = serve(handler, path, query)
        total, cpu = time.perf_counter() - before, time.thread_time() - cpu
        index, dynamodb, wire = timers.spent["index"], timers.spent["dynamodb"], timers.spent["wire"]
        samples.append({"total": total, "index": index, "dynamodb": dynamodb, "wire": wire,
                        "ours": total - index - dynamodb,
                        "ours_cpu": cpu - timers.cpu["index"] - timers.cpu["dynamodb"]})
    result = {key: statistics.median(s[key] for s in samples) * 1000 for key in samples[0]}
    return {"page": number, "calls": len(samples), "bytes": size,
            **{f"{key}_ms": round(value, 3) for key, value in result.items()}}


def baseline_page(number: int) -> dict:
    """Page N the way DynamoDB alone allows: Query page after page, each from the last LastEvaluatedKey."""
    from comments.table.client import dynamodb
    from comments.table.keys import product_index_name, table_name

    client = dynamodb()
    kwargs = {"TableName": table_name(), "IndexName": product_index_name(), "ScanIndexForward": False,
              "KeyConditionExpression": "PK2 = :sku", "ExpressionAttributeValues": {":sku": {"S": FLAGSHIP}},
              "Limit": PAGE_SIZE}

    def walk() -> int:
        start = None
        for _ in range(number):
            response = client.query(**kwargs, **({"ExclusiveStartKey": start} if start else {}))
            start = response.get("LastEvaluatedKey")
        return len(response["Items"])

    repeats = 5 if number <= BASELINE_REPEAT_PAGES else 1
    samples = []
    for _ in range(repeats):
        before = time.perf_counter()
        walk()
        samples.append(time.perf_counter() - before)
    return {"page": number, "calls": repeats, "queries": number, "total_ms": round(statistics.median(samples) * 1000, 3)}


def start_cost(number: int) -> dict:
    """DynamoDB Local's cost of starting page N's Query at its boundary (from the table itself: the
    boundary is the last item of page N-1), by ExclusiveStartKey and by the key condition the pages use."""
    from comments.table.client import dynamodb
    from comments.table.keys import product_index_name, table_name

    client = dynamodb()
    base = {"TableName": table_name(), "IndexName": product_index_name(), "ScanIndexForward": False,
            "KeyConditionExpression": "PK2 = :sku", "ExpressionAttributeValues": {":sku": {"S": FLAGSHIP}}}
    offset = (number - 1) * PAGE_SIZE
    if offset == 0:
        return {"page": number, "exclusive_start_key_ms": None, "key_condition_ms": None}
    # The boundary: the item at rank offset-1 (ProjectionExpression keeps this read small).
    boundary, start, seen = None, None, 0
    while boundary is None:
        response = client.query(**base, Limit=min(offset - seen, 1000), ProjectionExpression="PK, SK, PK2",
                                **({"ExclusiveStartKey": start} if start else {}))
        seen += len(response["Items"])
        start = response.get("LastEvaluatedKey")
        if seen == offset:
            boundary = response["Items"][-1]
    by_key = {**base, "Limit": PAGE_SIZE + 1, "ExclusiveStartKey": {"PK2": boundary["PK2"], "SK": boundary["SK"],
                                                                   "PK": boundary["PK"]}}
    by_condition = {**base, "Limit": PAGE_SIZE + 1, "KeyConditionExpression": "PK2 = :sku AND SK < :sk",
                    "ExpressionAttributeValues": {":sku": {"S": FLAGSHIP}, ":sk": boundary["SK"]}}
    timings = {}
    for label, kwargs in (("exclusive_start_key", by_key), ("key_condition", by_condition)):
        items = None
        samples = []
        for _ in range(7):
            before = time.perf_counter()
            got = client.query(**kwargs)["Items"]
            samples.append(time.perf_counter() - before)
            items = items or got
        timings[f"{label}_ms"] = round(statistics.median(samples) * 1000, 3)
        timings[f"{label}_first"] = items[0]["PK"]["S"] if items else None
    if timings["exclusive_start_key_first"] != timings["key_condition_first"]:
        raise SystemExit(f"page {number}: the two starts disagree ({timings})")
    return {"page": number, **{key: value for key, value in timings.items() if key.endswith("_ms")}}


def bench_backend(name: str, pages: list[int], out) -> list[dict]:
    from django.core.handlers.wsgi import WSGIHandler

    handler, timers, rows = WSGIHandler(), Timers(), []
    with instrumented(timers):
        for number in pages:
            row = {"backend": name, **time_page(handler, timers, number)}
            rows.append(row)
            out(f"  {name:<22} page {number:>6,}: {row['total_ms']:7.2f} ms  (index {row['index_ms']:.2f}, "
                f"DynamoDB {row['dynamodb_ms']:.2f}, ours {row['ours_ms']:.2f})")
    return rows


DYNALITE = DATA / "dynalite" / "node_modules" / ".bin" / "dynalite"


@contextmanager
def dynalite(size: int, out):
    """The read path on dynalite (npm, in memory), whose Query cost does not grow with the depth of the
    ExclusiveStartKey: the table without a stream (dynalite has none), loaded with BatchWriteItem, the
    Redis index filled from it with rebuild_index. Points the index's AWS endpoint at it meanwhile."""
    import random

    from django.test import override_settings

    import tests.signals  # noqa: F401  (override_settings resets the AWS clients)
    from comments import demo
    from comments.store import put_comments
    from comments.table import schema
    from tests.config import index_config

    port = free_port()
    process = subprocess.Popen([str(DYNALITE), "--port", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not is_up(port):
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("dynalite did not start")
            time.sleep(0.2)
        with override_settings(PAGINATION_INDEX=index_config(aws={"ENDPOINT_URL": f"http://127.0.0.1:{port}"})):
            from comments.table.client import dynamodb

            definition = schema.table_definition()
            definition.pop("StreamSpecification", None)
            dynamodb().create_table(**definition)
            started = time.monotonic()
            product = demo.DemoProduct(FLAGSHIP, "", 0, "", size)
            comments = list(demo.comments_for(product, random.Random(size)))
            with ThreadPoolExecutor(4) as pool:
                list(pool.map(put_comments, (comments[i : i + 500] for i in range(0, len(comments), 500))))
            out(f"  dynalite: {size:,} comments loaded in {time.monotonic() - started:.0f} s")
            yield
    finally:
        process.terminate()
        process.wait(10)


def report(rows: list[dict], baseline: list[dict], pages: list[int], starts: list[dict] = ()) -> tuple[str, dict]:
    header = ["backend", "part"] + [f"p{page:,}" for page in pages]
    lines, checks = [], {}
    for backend in dict.fromkeys(row["backend"] for row in rows):
        by_page = {row["page"]: row for row in rows if row["backend"] == backend}
        for part in ("total", "index", "dynamodb", "wire", "ours", "ours_cpu"):
            lines.append([backend, part] + [f"{by_page[p][f'{part}_ms']:.2f}" for p in pages])
        if 11 in by_page:
            checks[backend] = {}
            for part in ("ours", "ours_cpu"):
                ratio = by_page[pages[-1]][f"{part}_ms"] / by_page[11][f"{part}_ms"]
                checks[backend][part] = {"last_over_page_11": round(ratio, 3), "within_1_3x": ratio <= 1.3}
    by_page = {row["page"]: row for row in baseline}
    if baseline:
        lines.append(["baseline (LastEvaluatedKey walk)", "total"] + [f"{by_page[p]['total_ms']:.2f}" for p in pages])
    by_page = {row["page"]: row for row in starts}
    for part, label in (("exclusive_start_key", "ExclusiveStartKey"), ("key_condition", "SK < boundary")):
        if starts:
            lines.append(["start cost: one Query", label] + [
                "-" if by_page[p][f"{part}_ms"] is None else f"{by_page[p][f'{part}_ms']:.2f}" for p in pages])
    return format_table(header, lines, left=2) + "\n(milliseconds, median per request)", checks


def plot(rows: list[dict], baseline: list[dict], pages: list[int], path) -> None:
    plt = pyplot()
    backends = list(dict.fromkeys(row["backend"] for row in rows))
    figure, axes = plt.subplots(1, 2, figsize=(13, 5))
    width = 0.8 / len(backends)
    colours = {"index": "#4c72b0", "dynamodb": "#dd8452", "ours": "#55a868"}
    for number, backend in enumerate(backends):
        by_page = {row["page"]: row for row in rows if row["backend"] == backend}
        bottom = [0.0] * len(pages)
        for part, colour in colours.items():
            values = [by_page[p][f"{part}_ms"] for p in pages]
            axes[0].bar([i + number * width for i in range(len(pages))], values, width, bottom=bottom,
                        color=colour, edgecolor="white", label=part if number == 0 else None)
            bottom = [b + v for b, v in zip(bottom, values)]
    axes[0].set_xticks([i + 0.4 - width / 2 for i in range(len(pages))], [f"{p:,}" for p in pages])
    axes[0].set_xlabel("page (bars left to right: " + ", ".join(backends) + ")")
    axes[0].set_ylabel("ms per request (median)")
    axes[0].set_title("Our pages: index, DynamoDB Local and our own time")
    axes[0].legend()
    for backend in backends:
        by_page = {row["page"]: row for row in rows if row["backend"] == backend}
        axes[1].plot(pages, [by_page[p]["total_ms"] for p in pages], marker="o", label=backend)
    if baseline:
        axes[1].plot(pages, [row["total_ms"] for row in baseline], marker="s", color="black",
                     label="baseline: LastEvaluatedKey walk")
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("page")
    axes[1].set_ylabel("ms to serve (log)")
    axes[1].set_title("Whole page vs reading pages 1..N-1")
    axes[1].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE:,} comments instead of {SIZE:,}")
    parser.add_argument("--size", type=int, help=f"the flagship's comments (default {SIZE:,})")
    parser.add_argument("--sqlite-only", action="store_true",
                        help="only the default stack's index (relational on SQLite), not Redis and PostgreSQL")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="skip the LastEvaluatedKey walk (page N costs N-1 Queries: hours at 1,000,000 comments)")
    parser.add_argument("--no-dynalite", dest="dynalite", action="store_false",
                        help="skip the read path on dynalite (npm; `make bench` installs it)")
    parser.add_argument("--dynalite-only", action="store_true",
                        help="only the read path on dynalite (no DynamoDB Local backends, no baseline)")
    args = parser.parse_args(argv)
    args.dynalite = args.dynalite_only or args.dynalite and not args.smoke and DYNALITE.exists()
    size = SMOKE_SIZE if args.smoke else (args.size or SIZE)
    out = lambda text: print(text, flush=True)  # noqa: E731
    load_at_start = __import__("os").getloadavg()
    dataset = Dataset(size)
    pages = pages_for(size)
    rows, versions, skipped = [], {}, {}
    with dataset:
        from django.core.management import call_command
        from django.test import override_settings

        import tests.signals  # noqa: F401  (override_settings resets the index and clients made from settings)
        from tests.config import index_config

        call_command("migrate", interactive=False, verbosity=0, stdout=io.StringIO())
        out(f"page_depth: {FLAGSHIP} with {size:,} comments, pages {', '.join(f'{p:,}' for p in pages)}")
        # Every cache that would serve a page without its reads is off (the sources' shared fast windows
        # and counts: CACHE_SECONDS), the per-process micro-cache too (its middleware reads the setting
        # when bench_backend builds the WSGI handler).
        with override_settings(COMMENTS_FAST_CACHE_SECONDS=0, COMMENTS_RENDERED_CACHE_SECONDS=0,
                               RESPONSE_MICRO_CACHE_SECONDS=0, PAGINATION_INDEX=index_config(cache_seconds=0)):
            baseline, starts = [], []
            if not args.dynalite_only:
                rows += bench_backend("relational/SQLite", pages, out)
                others = () if args.sqlite_only else (("redis", redis_index), ("relational/PostgreSQL", postgres_index))
                for name, make in others:
                    with ExitStack() as stack:
                        try:
                            version = stack.enter_context(make())
                        except Exception as exc:  # a shared server that is down: say so, measure the rest
                            skipped[name] = str(exc)
                            out(f"  skipped {name}: {exc}")
                            continue
                        if isinstance(version, str):
                            versions["PostgreSQL"] = version
                        rows += bench_backend(name, pages, out)
                for number in pages:
                    starts.append(start_cost(number))
                    out(f"  start cost page {number:>6,}: ExclusiveStartKey {starts[-1]['exclusive_start_key_ms']} ms, "
                        f"SK < boundary {starts[-1]['key_condition_ms']} ms")
                for number in pages if args.baseline else ():
                    baseline.append(baseline_page(number))
                    out(f"  baseline page {number:>6,}: {baseline[-1]['total_ms']:9.1f} ms ({number:,} queries)")
            # The same read path on dynalite (in memory, reads only), an emulator of another make, for comparison.
            if args.dynalite:
                with dynalite(size, out), redis_index():
                    rows += bench_backend("redis on dynalite", pages, out)
    table, checks = report(rows, baseline, pages, starts)
    out("\n" + table)
    for backend, check in checks.items():
        out(f"  {backend}: our own time at the last page / page 11: wall {check['ours']['last_over_page_11']:.2f}, "
            f"CPU {check['ours_cpu']['last_over_page_11']:.2f} (target <= 1.3)")
    when = stamp()
    png = result_path("page_depth", args.smoke, when, "png")
    plot(rows, baseline, pages, png)
    path = write_json("page_depth", args.smoke, when, {
        "flagship_comments": size, "page_size": PAGE_SIZE, "pages": pages,
        "machine": machine_info(versions, load_at_start,
                                f"shared machine; {DYNAMODB_LOCAL}; fast-window and rendered-page caches off; served through "
                                "Django's WSGI handler in one process"),
        "skipped": skipped, "results": rows, "baseline": baseline, "start_cost": starts, "checks": checks, "table": table,
        "plot": png.name})
    out(f"\nwrote {shown(path)} and {shown(png)}")
    return 1 if skipped else 0  # timings are reported, never asserted: the machine is shared


if __name__ == "__main__":
    sys.exit(main())
