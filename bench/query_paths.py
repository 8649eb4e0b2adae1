"""The page path's Query sent three ways, through the strict endpoint (TLS, every signature checked):
is the hand-written request (then comments/table/direct.py) worth keeping? Issue 27 keeps it only if it
saves at least 20% of a crawl page's CPU over the library path.

    python -m bench.query_paths            # 3,000 comments, 300 crawl pages and 1,000 Queries a way
    python -m bench.query_paths --smoke    # fewer of each (CI)

The three ways, each answering the same Query:
- botocore: the site's botocore client (`client.query`, with pagination_index/aws/parsers.py's item-read
  parser);
- sigv4-urllib3: botocore's SigV4Auth on an AWSRequest, sent through a urllib3 connection pool
  (library code without botocore's client pipeline): the page path's DirectReads;
- hand-written: the signer and `http.client` connections the page path used before this benchmark
  (kept here, as it was, to be measured: a SigV4 signature written for the one request shape, with
  the day's signing key kept, and a Connections class of kept-alive `http.client` connections).

The site now uses the library path (pagination_index/aws/direct.py): the hand-written one saved too little
over it (bench/notes/performance.md).

Per way: thread CPU per crawl page (bench.load's crawl mix through Django's WSGI handler in this
process, caches as in production: what a gunicorn worker spends on the page) and per Query alone.
Thread CPU time, so other processes on the shared machine do not inflate it; the endpoint's own
CPU is another process's. The ways run interleaved, in rounds, so a change in the machine's load
falls on all of them alike.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import http.client
import json
import os
import ssl
import sys
import time
from collections import deque
from contextlib import contextmanager
from urllib.parse import urlsplit

from bench.common import format_table, machine_info, page_server, shown, stamp, write_json
from bench.dataset import Dataset

SIZE = 3_000
PAGES, SMOKE_PAGES = 300, 60
QUERIES, SMOKE_QUERIES = 1_000, 200
ROUNDS = 3
WAYS = ("botocore", "sigv4-urllib3", "hand-written")
IDLE_CLOSED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
SERVICE, DEFAULT_PORTS, ALGORITHM = "dynamodb", {"http": 80, "https": 443}, "AWS4-HMAC-SHA256"


class BotocoreReads:
    """The page path's Query through the botocore client itself."""

    def __init__(self, client):
        self.client = client

    def query(self, **params) -> dict:
        return self.client.query(**params)


# --- the hand-written way, as the page path had it -------------------------------------------------
def host_header(url: str) -> str:
    parts = urlsplit(url)
    if parts.port is None or DEFAULT_PORTS.get(parts.scheme) == parts.port:
        return parts.hostname
    return f"{parts.hostname}:{parts.port}"


def _hmac(key: bytes, message: str) -> bytes:
    return hmac.new(key, message.encode(), hashlib.sha256).digest()


class RequestSigner:
    """Signs POSTs of JSON to an endpoint's "/" for one region, with botocore credentials (refreshable
    or not: each call asks them for their current frozen values, as botocore does)."""

    def __init__(self, credentials, region: str, url: str):
        self._credentials = credentials
        self.region = region
        self.host = host_header(url)
        self._keys: tuple[str, str, bytes] | None = None  # (secret, day, signing key): one day's key

    def _signing_key(self, secret: str, day: str) -> bytes:
        kept = self._keys
        if kept is not None and kept[0] == secret and kept[1] == day:
            return kept[2]
        key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret}".encode(), day), self.region), SERVICE), "aws4_request")
        self._keys = (secret, day, key)
        return key

    def headers(self, headers: dict[str, str], body: bytes, amz_date: str | None = None) -> dict[str, str]:
        """`headers` (names as sent; no Host) plus Host, X-Amz-Date, the session token if any, and the
        Authorization that signs them all and the body. `amz_date`: "20240305T130405Z", default now."""
        frozen = self._credentials.get_frozen_credentials()
        amz_date = amz_date or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        day = amz_date[:8]
        signed = {**headers, "Host": self.host, "X-Amz-Date": amz_date}
        if frozen.token:
            signed["X-Amz-Security-Token"] = frozen.token
        canonical = sorted((name.lower(), " ".join(value.split())) for name, value in signed.items())
        names = ";".join(name for name, _ in canonical)
        request = "\n".join(["POST", "/", "", *(f"{name}:{value}" for name, value in canonical), "", names,
                             hashlib.sha256(body).hexdigest()])
        scope = f"{day}/{self.region}/{SERVICE}/aws4_request"
        to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(request.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(frozen.secret_key, day), to_sign.encode(), hashlib.sha256).hexdigest()
        signed["Authorization"] = (f"{ALGORITHM} Credential={frozen.access_key}/{scope}, SignedHeaders={names}, "
                                   f"Signature={signature}")
        return signed


def tls_context(verify) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)


class Connections:
    """Kept-alive HTTP/1.1 connections to one endpoint: taken by one thread for one request and put
    back (at most `maxsize` idle ones are kept). The read timeout applies to every answer."""

    def __init__(self, url: str, *, connect_timeout: float, read_timeout: float, maxsize: int,
                 verify: bool | str = True):
        parts = urlsplit(url)
        self.secure = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port
        self.connect_timeout, self.read_timeout, self.maxsize = connect_timeout, read_timeout, maxsize
        self._context = tls_context(verify) if self.secure else None
        self._idle: deque[http.client.HTTPConnection] = deque()

    def _connect(self) -> http.client.HTTPConnection:
        if self.secure:
            connection = http.client.HTTPSConnection(self.host, self.port, timeout=self.connect_timeout,
                                                     context=self._context)
        else:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        connection.connect()
        connection.sock.settimeout(self.read_timeout)
        return connection

    def post(self, headers: dict[str, str], body: bytes) -> tuple[int, http.client.HTTPMessage, bytes]:
        """(status, headers, body) of a POST to "/". Raises OSError or http.client.HTTPException when
        no answer came."""
        try:
            connection, reused = self._idle.pop(), True
        except IndexError:
            connection, reused = self._connect(), False
        try:
            try:
                response, data = self._exchange(connection, headers, body)
            except IDLE_CLOSED:
                if not reused:
                    raise
                connection.close()  # the server closed it while it sat idle: nothing was answered
                connection = self._connect()
                response, data = self._exchange(connection, headers, body)
        except BaseException:
            connection.close()
            raise
        if response.will_close or len(self._idle) >= self.maxsize:
            connection.close()
        else:
            self._idle.append(connection)
        return response.status, response.headers, data

    @staticmethod
    def _exchange(connection, headers, body) -> tuple[http.client.HTTPResponse, bytes]:
        connection.request("POST", "/", body=body, headers=headers)
        response = connection.getresponse()
        return response, response.read()



class HandWrittenReads:
    """A 200's body json.loads'd; anything else goes to the botocore client (the happy path is measured)."""

    def __init__(self, client, credentials, verify):
        self.client = client
        self.url = client.meta.endpoint_url.rstrip("/") + "/"
        self.signer = RequestSigner(credentials, client.meta.region_name, self.url)
        config = client.meta.config
        self.connections = Connections(self.url, connect_timeout=config.connect_timeout, verify=verify,
                                       read_timeout=config.read_timeout, maxsize=config.max_pool_connections)

    def query(self, **params) -> dict:
        body = json.dumps(params, separators=(",", ":")).encode()
        headers = self.signer.headers({"Content-Type": "application/x-amz-json-1.0",
                                       "X-Amz-Target": "DynamoDB_20120810.Query"}, body)
        status, _, data = self.connections.post(headers, body)
        return json.loads(data) if status == 200 else self.client.query(**params)


def ways() -> dict:
    from pagination_index import aws
    from comments.table.client import dynamodb, dynamodb_reads

    client = dynamodb()
    credentials = aws.credentials(client.meta.endpoint_url)
    return {"botocore": BotocoreReads(client), "sigv4-urllib3": dynamodb_reads(),
            "hand-written": HandWrittenReads(client, credentials, aws.verify())}


@contextmanager
def reads_by(way):
    """The page path reads through `way` (pagination_index.sources.TableSource.read looks
    aws.direct_reads() up on each call)."""
    from pagination_index import aws

    original = aws.direct_reads
    aws.direct_reads = lambda: way
    try:
        yield
    finally:
        aws.direct_reads = original


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

        import tests.signals  # noqa: F401  (override_settings rebuilds the AWS clients a first seeding made)
        from bench.load import mixes
        from comments.table.keys import product_index_name
        from stack.strict_endpoint import StrictEndpoint
        from tests.config import index_config

        with StrictEndpoint(dataset.database.endpoint_url, config={"creating_seconds": 0}) as endpoint:
            os.environ.update(endpoint.env())
            for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE"):
                os.environ.pop(name, None)
            with override_settings(PAGINATION_INDEX=index_config(aws={"ENDPOINT_URL": endpoint.url})):
                crawl = mixes(dataset.products())["crawl"]
                sku = max(dataset.products(), key=dataset.products().get)
                query = {"TableName": settings.COMMENTS_TABLE, "IndexName": product_index_name(),
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
