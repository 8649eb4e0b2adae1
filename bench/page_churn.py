"""How many URLs of a product change per new comment and per delete, newest-first against stable
page numbers (COMMENTS_PAGE_NUMBERING), on the benchmarks' shop (bench/dataset.py).

    python -m bench.page_churn            # the flagship with 12,000 comments, as the demo's
    python -m bench.page_churn --smoke    # 3,000 comments

The method of tests/comments/test_stable_pages.py at the demo's size: every URL of the flagship
(its product URL and ?page=1 .. the last page + 2) is fetched through Django's test client in both
numberings; then one comment is posted (comments.services.comment_create) or one deleted, the index
is rebuilt for the product, and everything is fetched again. A URL has changed when its status,
Location, ETag, Last-Modified, Cache-Control or body did.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from bench.common import format_table, machine_info, shown, stamp, write_json
from bench.dataset import FLAGSHIP, Dataset

SIZE, SMOKE_SIZE = 12_000, 3_000
NUMBERINGS = ("newest", "stable")


def snapshot(client, urls):
    seen = {}
    for url in urls:
        r = client.get(url)
        seen[url] = (r.status_code, r.get("Location"), r.get("ETag"), r.get("Last-Modified"),
                     r.get("Cache-Control"), r.content)
    return seen


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE:,} comments instead of {SIZE:,}")
    parser.add_argument("--posts", type=int, default=3, help="posts measured one by one (default 3)")
    args = parser.parse_args(argv)
    size = SMOKE_SIZE if args.smoke else SIZE
    os.environ.update(COMMENTS_FAST_CACHE_SECONDS="0", RESPONSE_MICRO_CACHE_SECONDS="0",
                      COMMENTS_RENDERED_CACHE_SECONDS="0")
    load = os.getloadavg()
    with Dataset(size):
        from django.core.management import call_command
        from django.test import Client, override_settings

        from comments.selectors import product_comment_slice
        from comments.services import comment_create
        from comments.table.client import dynamodb
        from comments.table.keys import table_name
        from pagination_index import index

        client = Client()
        count = index.count(FLAGSHIP)
        urls = [f"/products/{FLAGSHIP}/"] + [f"/products/{FLAGSHIP}/?page={n}" for n in range(1, count // 20 + 4)]

        def all_pages():
            snaps = {}
            for numbering in NUMBERINGS:
                started = time.monotonic()
                with override_settings(COMMENTS_PAGE_NUMBERING=numbering):
                    snaps[numbering] = snapshot(client, urls)
                print(f"  fetched {len(urls):,} URLs ({numbering}) in {time.monotonic() - started:.1f} s",
                      file=sys.stderr, flush=True)
            return snaps

        rows, events = [], []
        before = all_pages()
        steps = [("post", i) for i in range(args.posts)] + [("delete in the middle", 0)]
        for kind, i in steps:
            total = index.count(FLAGSHIP)
            if kind == "post":
                comment_create(sku=FLAGSHIP, author="Bench", rating=4, body=f"Churn post {i}")
            else:  # the comment in the middle of the product: newest-first rank total // 2
                middle = product_comment_slice(sku=FLAGSHIP, offset=total // 2, limit=1).comments[0]
                dynamodb().delete_item(TableName=table_name(), Key={"PK": {"S": middle.pk}, "SK": {"S": middle.sk}})
            call_command("rebuild_index", group=[FLAGSHIP], verbosity=0)
            after = all_pages()
            event = {"event": kind, "comments_before": total, "comments_after": index.count(FLAGSHIP)}
            for numbering in NUMBERINGS:
                changed = [url for url in urls if before[numbering][url] != after[numbering][url]]
                event[numbering] = {"changed": len(changed), "served_pages_after": sum(
                    1 for url in urls if after[numbering][url][0] == 200)}
            events.append(event)
            rows.append([f"{kind} ({total:,} -> {event['comments_after']:,})",
                         f"{event['newest']['changed']:,}", f"{event['stable']['changed']:,}"])
            print(f"{rows[-1][0]}: newest {rows[-1][1]}, stable {rows[-1][2]}", file=sys.stderr, flush=True)
            before = after
        print(format_table(["event", "URLs changed, newest", "URLs changed, stable"], rows))
        when = stamp()
        path = write_json("page_churn", args.smoke, when, {
            "comments": size, "page_size": 20, "urls_fetched": len(urls), "events": events,
            "machine": machine_info({}, load, "2-core machine shared with DynamoDB Local's JVM, Redis and other "
                                               "engineers' work; the counts do not depend on the load"),
        })
        print(f"wrote {shown(path)}")


if __name__ == "__main__":
    main()
