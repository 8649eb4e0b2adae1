"""CPU time of one product page request in this process, split by where it goes: the template render,
the DynamoDB client's calls, the index, the rest (middleware, view, digest), beside a bare view
(/healthz, through the same middleware) measured in the same run. No HTTP server, one thread, caches
as in production (fast window, counts and rendered pages on).

    python -m bench.request_cpu                  # both mixes of bench/load.py, Redis index, 100,000 comments
    python -m bench.request_cpu --backend relational --mix crawl --requests 500
    python -m bench.request_cpu --smoke

Thread CPU time (time.thread_time), so other processes on a busy machine do not inflate it; the
request path runs on this thread (a single-group page makes no use of the partition pool).
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from contextlib import ExitStack, contextmanager

from bench.common import format_table, machine_info, page_server, shown, stamp, write_json
from bench.dataset import Dataset, redis_index

SIZE, SMOKE_SIZE = 100_000, 3_000
WARM = 50


@contextmanager
def timed(spent: dict[str, float]):
    """Thread CPU seconds inside the template render, the DynamoDB client and the index backend."""
    import comments.views as views
    from comments.table.client import dynamodb, dynamodb_reads
    from pagination_index import get_index

    def wrap(function, label):
        def measured(*args, **kwargs):
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                spent[label] += time.thread_time() - started
        return measured

    client, index = dynamodb(), get_index()
    render = views.render
    views.render = wrap(render, "render")
    patched = [(client, name, "dynamodb") for name in ("query", "get_item")] + [(dynamodb_reads(), "query", "dynamodb")]
    patched += [(index, name, "index") for name in ("at", "range", "count", "count_many", "count_newer_many")]
    for target, name, label in patched:
        setattr(target, name, wrap(getattr(target, name), label))
    try:
        yield
    finally:
        views.render = render
        for target, name, _ in patched:
            delattr(target, name)


def measure(paths: list[str], requests: int) -> dict:
    serve = page_server(paths, seed=1)
    spent: dict[str, float] = defaultdict(float)
    from comments.table.client import dynamodb_reads

    with timed(spent):
        serve(WARM)
        spent.clear()
        through_botocore = []  # page-path Queries botocore sent instead of the direct path: 0 expected
        dynamodb_reads().client.meta.events.register("before-send.dynamodb.Query",
                                                     lambda **kwargs: through_botocore.append(1))
        started, wall = time.thread_time(), time.perf_counter()
        serve(requests)
        total, wall = time.thread_time() - started, time.perf_counter() - wall
        fallbacks = len(through_botocore)
    parts = {label: spent[label] * 1000 / requests for label in ("render", "dynamodb", "index")}
    return {"requests": requests, "cpu_ms": total * 1000 / requests, "wall_ms": wall * 1000 / requests,
            "query_fallbacks": fallbacks,
            **{f"{label}_cpu_ms": value for label, value in parts.items()},
            "rest_cpu_ms": total * 1000 / requests - sum(parts.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE:,} comments, few requests")
    parser.add_argument("--backend", choices=["redis", "relational"], default="redis")
    parser.add_argument("--mix", action="append", choices=["hot", "crawl", "bare"], help="default: all three")
    parser.add_argument("--requests", type=int, help="requests per mix (default 2,000 hot and bare, 300 crawl)")
    args = parser.parse_args(argv)
    load_at_start, rows = __import__("os").getloadavg(), []
    with Dataset(SMOKE_SIZE if args.smoke else SIZE) as dataset, ExitStack() as stack:
        if args.backend == "redis":
            stack.enter_context(redis_index())
        from bench.load import mixes

        urls = mixes(dataset.products())
        for mix in args.mix or ["bare", "hot", "crawl"]:
            count = args.requests or (50 if args.smoke else {"hot": 2000, "bare": 2000, "crawl": 300}[mix])
            rows.append({"mix": mix, "backend": args.backend, **measure(urls[mix], count)})
    bare = next((r["cpu_ms"] for r in rows if r["mix"] == "bare"), None)
    for row in rows:
        row["x_bare"] = round(row["cpu_ms"] / bare, 2) if bare else None
    header = ["mix", "backend", "requests", "CPU ms", "x bare", "render", "DynamoDB", "index", "rest", "wall ms"]
    table = format_table(header, [[r["mix"], r["backend"], str(r["requests"]), f"{r['cpu_ms']:.2f}",
                                   "-" if r["x_bare"] is None else f"{r['x_bare']:.1f}"] + [
        f"{r[key]:.2f}" for key in ("render_cpu_ms", "dynamodb_cpu_ms", "index_cpu_ms", "rest_cpu_ms", "wall_ms")]
        for r in rows], left=2)
    print(table)
    path = write_json("request_cpu", args.smoke, stamp(), {
        "results": rows, "table": table,
        "machine": machine_info({}, load_at_start, "one thread, Django's WSGI handler, caches on")})
    print(f"wrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
