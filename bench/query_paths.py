"""The page path's Query sent three ways, through the strict endpoint (TLS, every signature checked):
is the hand-written request (comments/table/direct.py) worth keeping? Issue 27 keeps it only if it
saves at least 20% of a crawl page's CPU over the library path.

    python -m bench.query_paths            # 3,000 comments, 300 crawl pages and 1,000 Queries a way
    python -m bench.query_paths --smoke    # fewer of each (CI)

The three ways, each answering the same Query:
- botocore: the site's botocore client (`client.query`, with aws/parsers.py's item-read parser);
- sigv4-urllib3: botocore's SigV4Auth on an AWSRequest, sent through a urllib3 connection pool
  (library code without botocore's client pipeline);
- direct: today's signer (comments/table/signing.py) on kept-alive http.client connections.

Per way: thread CPU per crawl page (bench.load's crawl mix through Django's WSGI handler in this
process, caches as in production: what a gunicorn worker spends on the page) and per Query alone.
Thread CPU time, so other processes on the shared machine do not inflate it; the endpoint's own
CPU is another process's. The ways run interleaved, in rounds, so a change in the machine's load
falls on all of them alike.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import contextmanager

from bench.common import format_table, machine_info, page_server, shown, stamp, write_json
from bench.dataset import Dataset

SIZE = 3_000
PAGES, SMOKE_PAGES = 300, 60
QUERIES, SMOKE_QUERIES = 1_000, 200
ROUNDS = 3
WAYS = ("botocore", "sigv4-urllib3", "direct")


class BotocoreReads:
    """The page path's Query through the botocore client itself."""

    def __init__(self, client):
        self.client = client

    def query(self, **params) -> dict:
        return self.client.query(**params)


class LibraryReads:
    """botocore's SigV4Auth on an AWSRequest, sent through a urllib3 pool with the client's TLS settings;
    a 200 is json.loads'd, anything else goes to the botocore client (the happy path is what is
    measured)."""

    def __init__(self, client, credentials, verify):
        import urllib3
        from botocore.auth import SigV4Auth

        self.client = client
        self.url = client.meta.endpoint_url.rstrip("/") + "/"
        self.auth = SigV4Auth(credentials, "dynamodb", client.meta.region_name)
        cert = {"cert_reqs": "CERT_NONE"} if verify is False else {
            "cert_reqs": "CERT_REQUIRED", **({"ca_certs": verify} if isinstance(verify, str) else {})}
        self.pool = urllib3.PoolManager(maxsize=32, **cert)

    def query(self, **params) -> dict:
        from botocore.awsrequest import AWSRequest

        body = json.dumps(params, separators=(",", ":")).encode()
        request = AWSRequest(method="POST", url=self.url, data=body, headers={
            "Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "DynamoDB_20120810.Query"})
        self.auth.add_auth(request)
        response = self.pool.request("POST", self.url, body=body, headers=dict(request.headers.items()),
                                     retries=False)
        if response.status == 200:
            return json.loads(response.data)
        return self.client.query(**params)


def ways() -> dict:
    import aws
    from comments.table.client import dynamodb, dynamodb_reads

    client = dynamodb()
    return {"botocore": BotocoreReads(client),
            "sigv4-urllib3": LibraryReads(client, aws.credentials(client.meta.endpoint_url), aws.verify()),
            "direct": dynamodb_reads()}


@contextmanager
def reads_by(way):
    """The page path reads through `way` (comments.store looks dynamodb_reads() up on each call)."""
    import comments.store as store

    original = store.dynamodb_reads
    store.dynamodb_reads = lambda: way
    try:
        yield
    finally:
        store.dynamodb_reads = original


def query_cpu_ms(way, query: dict, count: int) -> float:
    started = time.thread_time()
    for _ in range(count):
        way.query(**query)
    return (time.thread_time() - started) * 1000 / count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="fewer pages and Queries (CI)")
    args = parser.parse_args(argv)
    pages, queries = (SMOKE_PAGES, SMOKE_QUERIES) if args.smoke else (PAGES, QUERIES)
    load_at_start = os.getloadavg()
    with Dataset(SIZE) as dataset:
        from django.conf import settings
        from django.test import override_settings

        from bench.load import mixes
        from stack.strict_endpoint import StrictEndpoint

        with StrictEndpoint(dataset.database.endpoint_url, config={"creating_seconds": 0}) as endpoint:
            os.environ.update(endpoint.env())
            for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
                os.environ.pop(name, None)
            with override_settings(DYNAMODB=dict(settings.DYNAMODB, ENDPOINT_URL=endpoint.url)):
                crawl = mixes(dataset.products())["crawl"]
                sku = max(dataset.products(), key=dataset.products().get)
                query = {"TableName": settings.DYNAMODB["TABLE"], "IndexName": settings.DYNAMODB["GSI"],
                         "KeyConditionExpression": "PK2 = :g", "ExpressionAttributeValues": {":g": {"S": sku}},
                         "ScanIndexForward": False, "Limit": 21}
                built = ways()
                serve = page_server(crawl, seed=1)
                page_ms = {way: [] for way in WAYS}
                alone_ms = {way: [] for way in WAYS}
                for way in WAYS:  # warm: connections, credentials, caches of every page
                    with reads_by(built[way]):
                        serve(20)
                    query_cpu_ms(built[way], query, 20)
                for _ in range(ROUNDS):
                    for way in WAYS:
                        with reads_by(built[way]):
                            started = time.thread_time()
                            serve(pages // ROUNDS)
                            page_ms[way].append((time.thread_time() - started) * 1000 / (pages // ROUNDS))
                        alone_ms[way].append(query_cpu_ms(built[way], query, queries // ROUNDS))
                refused = [entry for entry in endpoint.requests() if entry["status"] != 200]
    rows = [{"way": way, "crawl_page_cpu_ms": min(page_ms[way]), "query_cpu_ms": min(alone_ms[way]),
             "crawl_page_cpu_ms_rounds": page_ms[way], "query_cpu_ms_rounds": alone_ms[way]} for way in WAYS]
    library = rows[1]["crawl_page_cpu_ms"]
    for row in rows:
        row["crawl_page_vs_library"] = row["crawl_page_cpu_ms"] / library - 1
    table = format_table(["way", "crawl page CPU ms", "vs sigv4-urllib3", "Query alone CPU ms"], [
        [r["way"], f"{r['crawl_page_cpu_ms']:.3f}", f"{r['crawl_page_vs_library']:+.0%}", f"{r['query_cpu_ms']:.3f}"]
        for r in rows], left=1)
    print(table)
    print(f"answers other than 200 at the endpoint: {len(refused)}")
    path = write_json("query_paths", args.smoke, stamp(), {
        "results": rows, "table": table, "pages_per_way": pages, "queries_per_way": queries,
        "comments": SIZE, "non_200_answers": len(refused),
        "machine": machine_info({}, load_at_start, "one thread, Django's WSGI handler, caches on; through the "
                                "strict endpoint (TLS, SigV4 checked); best of 3 interleaved rounds")})
    print(f"wrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
