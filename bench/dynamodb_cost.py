"""What a page view, a post, a stream record and a rebuild cost in DynamoDB capacity units, metered by
the strict endpoint (stack/strict_endpoint/metering.py: AWS's rules, 4 KB and 1 KB rounding,
eventually consistent reads at half, transactions at double, GSI writes), for each index backend.

    python -m bench.dynamodb_cost            # bench.dataset's 20,000-comment shop
    python -m bench.dynamodb_cost --smoke    # its 3,000-comment shop (CI)

The shop runs in this process (Django's WSGI handler, nothing else running) against the strict
endpoint in front of the dataset's DynamoDB Local; the endpoint's meter before and after a page view
is its cost: the comments table, its GSIs and (with PAGINATION_INDEX_BACKEND=dynamodb) the index
table, all together. (Not the meter per X-Request-Tag: a filtered page reads its groups on a
thread pool, whose calls do not carry the request's id.) Page views are uncached: Django's
cache is cleared before each, so the figures are what a view costs when nothing is cached (with the
production caches most views cost nothing). Measured per backend: the flagship product's pages 1, 5,
11, 100 and the last, a filtered page (ratings 4 and 5), the cursor page its pager links to; a post
(the form, 303), a stream record applied (the posts' INSERT records turned into index ops by the
source and applied in one batch, as sync_index does), and a rebuild of the flagship product
(`rebuild_index --group SKU`, into emptied groups).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import uuid
from contextlib import ExitStack, contextmanager

from bench.common import format_table, get_environ, machine_info, shown, stamp, write_json
from bench.dataset import FLAGSHIP, Dataset, redis_index

SIZE, SMOKE_SIZE = 20_000, 3_000
PAGE_SIZE = 20
POSTS = 5
BACKENDS = ("relational", "redis", "dynamodb")
CURSOR_LINK = re.compile(r'href="([^"]*cursor=[^"]*)"')


@contextmanager
def dynamodb_index():
    """The DynamoDB index backend in a table of this run's own (made by create_storage, filled by
    rebuild_index, deleted after)."""
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    from pagination_index import get_index
    from pagination_index import reset as reset_index

    options = dict(settings.PAGINATION_INDEX_DYNAMODB, TABLE=f"bench-pidx-{uuid.uuid4().hex[:8]}")
    with override_settings(PAGINATION_INDEX=dict(settings.PAGINATION_INDEX, OPTIONS=options,
                                                 BACKEND=settings.PAGINATION_INDEX_BACKENDS["dynamodb"])):
        reset_index()
        index = get_index()
        index.create_storage()
        try:
            call_command("rebuild_index", verbosity=0)
            yield
        finally:
            index.delete_table()
            reset_index()


@contextmanager
def backend(name: str):
    from pagination_index import reset as reset_index

    with ExitStack() as stack:
        if name == "redis":
            stack.enter_context(redis_index())
        elif name == "dynamodb":
            stack.enter_context(dynamodb_index())
        reset_index()
        try:
            yield
        finally:
            reset_index()


class Shop:
    """GETs and posts through Django's WSGI handler, each with a request id of its own."""

    def __init__(self, endpoint):
        from django.core.handlers.wsgi import WSGIHandler

        self.endpoint, self.handler = endpoint, WSGIHandler()

    def view(self, url: str) -> tuple[dict, str]:
        """(read and write units the endpoint metered for one uncached GET of `url`, its HTML)."""
        from django.core.cache import caches

        from pagination_index import sources

        for cache in caches.all():
            cache.clear()
        sources.reset()  # and the process's own copies of the windows (kept by each source's Shared)
        path, _, query = url.partition("?")
        before = self.endpoint.meter()["total"]
        environ = get_environ(path, query)
        status = []
        html = b"".join(self.handler(environ, lambda code, headers, exc_info=None: status.append(code))).decode()
        if not status[0].startswith("200"):
            raise SystemExit(f"{url}: {status[0]}")
        after = self.endpoint.meter()["total"]
        return {"read": after["read"] - before["read"], "write": after["write"] - before["write"],
                "requests": after.get("requests", 0) - before.get("requests", 0)}, html

    def post(self, sku: str) -> dict:
        from django.test import Client

        before = self.endpoint.meter()["total"]
        response = Client(headers={"Origin": "http://testserver"}).post(
            f"/products/{sku}/comments/", {"author": "Cost", "rating": "5", "body": f"Metered {uuid.uuid4().hex}."})
        if response.status_code != 303:
            raise SystemExit(f"post: {response.status_code}")
        after = self.endpoint.meter()["total"]
        return {"read": after["read"] - before["read"], "write": after["write"] - before["write"]}


def difference(after: dict, before: dict) -> dict:
    return {"read": after["read"] - before["read"], "write": after["write"] - before["write"]}


def measure(shop: Shop, name: str) -> list[dict]:
    from django.core.management import call_command

    base = f"/products/{FLAGSHIP}/"
    rows = []

    def row(what: str, units: dict, per: int = 1, calls: int | None = None) -> None:
        rows.append({"backend": name, "what": what, "read": units["read"] / per, "write": units["write"] / per,
                     "requests": calls})

    from comments.table.client import dynamodb
    from comments.table.keys import GROUP, product_index_name, rating_groups, table_name
    from pagination_index import get_index, sources
    from pagination_index.sources import records_ops

    groups = [FLAGSHIP, *rating_groups(FLAGSHIP)]
    built = get_index().count(FLAGSHIP)
    before = shop.endpoint.meter()["total"]
    for group in groups:  # emptied first, so the rebuild writes every entry
        get_index().replace(group, [])
    # What a rebuild also pays when the groups it replaces were full (after a `*` mark): the
    # generation it replaces deleted. Per comment (its product entry and its rating group's).
    row("dropping the built groups' entries, per comment", difference(shop.endpoint.meter()["total"], before), built)
    before = shop.endpoint.meter()["total"]
    call_command("rebuild_index", group=[FLAGSHIP], verbosity=0)
    comments = get_index().count(FLAGSHIP)  # the table's, now: earlier backends' posts included
    units = difference(shop.endpoint.meter()["total"], before)
    row(f"rebuild of the flagship ({comments:,} comments, its rating groups with it)", units)
    row("  the same, per comment", units, comments)
    # A rebuild over groups that already match the table writes nothing (it compares first).
    before = shop.endpoint.meter()["total"]
    call_command("rebuild_index", group=[FLAGSHIP], verbosity=0)
    row("rebuild again, the groups unchanged, per comment", difference(shop.endpoint.meter()["total"], before),
        comments)
    last = max(1, -(-comments // PAGE_SIZE))
    for number in sorted({1, 5, 11, 100, last}):
        if number <= last:
            units, _ = shop.view(base + (f"?page={number}" if number > 1 else ""))
            row(f"page {number}" + (" (last)" if number == last else ""), units, calls=units["requests"])
    units, html = shop.view(base + "?rating=4&rating=5")
    row("filtered page (ratings 4, 5)", units, calls=units["requests"])
    cursor = CURSOR_LINK.search(html)
    if cursor:
        units, _ = shop.view(cursor.group(1).replace("&amp;", "&"))
        row("cursor page (its next link)", units, calls=units["requests"])
    posts = [shop.post(FLAGSHIP) for _ in range(POSTS)]
    row("post (form, 303)", {"read": sum(p["read"] for p in posts), "write": sum(p["write"] for p in posts)}, POSTS)
    # The posts' INSERT records as the stream carries them (NewImage: the items as the table holds
    # them), applied as sync_index and the Lambda handler apply theirs: the index's units (reading the
    # stream itself is billed apart, per GetRecords call, not in the table's units).
    items = dynamodb().query(TableName=table_name(), IndexName=product_index_name(), Limit=POSTS,
                             KeyConditionExpression="#g = :g", ExpressionAttributeNames={"#g": GROUP},
                             ExpressionAttributeValues={":g": {"S": FLAGSHIP}}, ScanIndexForward=False)["Items"]
    declared = sources.for_table(table_name())
    records = [{"eventName": "INSERT", "dynamodb": {"NewImage": item}} for item in items]
    ops = records_ops(declared, records)

    def unindex() -> None:  # as before the records: not yet indexed
        for group in {op.group for op in ops}:
            get_index().remove_many(group, [op.member for op in ops if op.group == group])

    unindex()
    before = shop.endpoint.meter()["total"]
    get_index().apply(ops)
    row(f"stream record applied ({POSTS} to one product in one batch)",
        difference(shop.endpoint.meter()["total"], before), POSTS)
    # The same records each in a batch of its own, as the Lambda gets them when a table has more
    # shards than writes a second (one record an invocation): nothing is shared between them.
    unindex()
    before = shop.endpoint.meter()["total"]
    for record in records:
        get_index().apply(records_ops(declared, [record]))
    row("stream record applied alone (a batch of one)", difference(shop.endpoint.meter()["total"], before), POSTS)
    # Leave the dataset as the next benchmark expects it: the posts out of the table and out of every
    # group of the index (the dataset restores its DynamoDB data, not its relational index, whose
    # counts the other benchmarks read as the table's).
    for item in items:
        dynamodb().delete_item(TableName=table_name(), Key={"PK": item["PK"], "SK": item["SK"]})
    unindex()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE:,} comments (CI)")
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="default: all")
    args = parser.parse_args(argv)
    load_at_start, rows = os.getloadavg(), []
    with Dataset(SMOKE_SIZE if args.smoke else SIZE) as dataset:
        from django.test import override_settings

        import tests.signals  # noqa: F401  (override_settings resets the shop's own AWS client too)
        from stack.strict_endpoint import StrictEndpoint
        from django.conf import settings

        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)  # a dataset saved before newer migrations
        products = dataset.products()
        with StrictEndpoint(dataset.database.endpoint_url, config={"creating_seconds": 0}) as endpoint:
            os.environ.update(endpoint.env())
            for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
                os.environ.pop(name, None)
            from pagination_index import aws

            aws.reset()  # the credential chain and CA bundle were read before the endpoint's were set
            through_endpoint = dict(settings.PAGINATION_INDEX,
                                    AWS=dict(settings.PAGINATION_INDEX["AWS"], ENDPOINT_URL=endpoint.url))
            with override_settings(PAGINATION_INDEX=through_endpoint, RESPONSE_MICRO_CACHE_SECONDS=0):
                shop = Shop(endpoint)
                for name in args.backend or BACKENDS:
                    with backend(name):
                        rows += measure(shop, name)
                keys = endpoint.attempts_summary().get("key_ids", [])
    table = format_table(["backend", "what", "read units", "write units", "requests"], [
        [r["backend"], r["what"], f"{r['read']:.2f}", f"{r['write']:.2f}", "" if r["requests"] is None else str(r["requests"])]
        for r in rows], left=2)
    print(table)
    path = write_json("dynamodb_cost", args.smoke, stamp(), {
        "results": rows, "table": table, "flagship_comments": products[FLAGSHIP], "signed_with": keys,
        "machine": machine_info({}, load_at_start, "metered by the strict endpoint (AWS's unit rules); page views "
                                "uncached (Django's caches cleared before each)")})
    print(f"wrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
