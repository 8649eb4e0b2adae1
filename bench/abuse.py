"""Hostile traffic through nginx and gunicorn (issue 45): while a flood runs, a shopper crawls deep pages,
and its latency is compared with the same crawl on the quiet site, measured in the same run.

    python -m bench.abuse            # the 100,000-comment shop, 30 s per phase
    python -m bench.abuse --smoke    # 3,000 comments, 6 s per phase (make bench-smoke)

The stack is docker-compose.yml's: nginx with the repository's config (deploy/nginx/shop.conf.template)
in front of gunicorn (gunicorn.conf.py), Django's database on PostgreSQL (a database of the run's own,
with the dataset's products; reports are written to it), the Redis index and Django's cache on the
dataset's Redis, DynamoDB reached through the strict endpoint (stack/strict_endpoint/: TLS, SigV4, its
request log counts every DynamoDB request). (On SQLite, every report's write transaction queues behind
every other writer's, and a report flood then holds gunicorn's threads: the embedded default is for
`make run`, not for a hostile internet.)

The floods come from a crowd: wrk connects from 127.0.0.1, which nginx trusts as the load balancer
(NGINX_TRUSTED_PROXIES), and names a client of a large pool in X-Forwarded-For for every request
(bench/abuse.lua), so nginx's limits per address do not stop it: the site's own defences must.
- junk parameters: deep pages with a random unknown parameter (`?page=300&x=N`);
- reports: the report form posted for comments of the flagship, from 50,000 clients;
- /readyz: the readiness probe, asked by anyone;
- slow clients: connections from 127.0.1.x that send their headers, or a form's body, a line or a
  byte every two seconds (slowloris, R.U.D.Y.), holding as many connections as they can.
The shopper is one visitor (its own X-Forwarded-For) reading random deep pages (past the fast
window: the index, then one Query) one after another, 100 ms apart, through nginx.

A 503 is the site's answer when a dependency does not answer in time (for /readyz: "not ready");
it is counted apart from other 5xx, and the readiness checks that failed are read from gunicorn's log.

Before the floods, the junk-parameter target: 120 URLs that differ from a deep page's only in unknown
parameters, counting the Redis cache's keys (DBSIZE) and DynamoDB requests (the strict endpoint's log)
before and after.

Reported per phase: the flood's rate and its answers by status (429s are nginx's or the site's
limits, on purpose; 5xx must be 0), the shopper's p50/p95/p99 and its p99 against the quiet one (the
two quiet windows, before and after the floods, pooled; target: within 2x), and the CPU milliseconds
per request of gunicorn (master and workers), nginx, the strict endpoint and DynamoDB Local's JVM.
Everything shares the machine's 2 cores. A smoke run fails on a 5xx or a missed junk-parameter
target only (six seconds of a shared CI machine say little about a p99); a full run on every target.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from bench.common import DYNAMODB_LOCAL, format_table, machine_info, shown, stamp, write_json
from bench.dataset import DATA, FLAGSHIP, Dataset, redis_index
from bench.load import Gunicorn, cpu_seconds
from stack.dynamodb_local import ROOT
from stack.nginx import Nginx, nginx_binary

SIZE, SMOKE_SIZE = 100_000, 3_000
SECONDS, SMOKE_SECONDS = 30, 6
FAST_PAGES, PAGE_SIZE = 10, 20
# The shopper reads pages 11 to 50 of each product: past the fast window, so each is the index and
# one Query. Not thousands deep: there DynamoDB Local's own cost of a deep key condition (a second or
# two a page at 100,000 comments, which AWS does not have: bench/notes/performance.md) would be the p99 of
# every phase, quiet or not, and hide what the floods do.
SHOPPER_DEPTH = 40
JUNK_URLS = 120
SHOPPER_ADDRESS = "192.0.2.10"  # TEST-NET-1: a header value only
SHOPPER_THINK_SECONDS = 0.1
P99_TARGET_RATIO = 2.0
CACHE_ENTRIES_TARGET = 5  # "at most a handful"
LUA = Path(__file__).resolve().parent / "abuse.lua"
COMMENT_ID = re.compile(r'id="comment-([0-9a-f]{32})"')

# Each flood: wrk connections, the pause of a connection between requests (ms), the pool of client
# addresses. Rates the site can serve on 2 shared cores.
FLOODS = {
    "junk parameters": {"connections": 4, "delay_ms": 10, "pool": 50_000},
    "report flood": {"connections": 4, "delay_ms": 40, "pool": 50_000},
    "/readyz flood": {"connections": 4, "delay_ms": 10, "pool": 50_000},
}
SLOW_CLIENTS, SMOKE_SLOW_CLIENTS = 400, 100


def deep_pages(products: dict[str, int], depth: int | None = None) -> list[str]:
    """Pages past the fast window of every product that has them (the first `depth` of them)."""
    return [f"/products/{sku}/?page={page}" for sku, count in products.items()
            for page in range(FAST_PAGES + 1, min(-(-count // PAGE_SIZE), FAST_PAGES + (depth or count)) + 1)]


def readiness_failures(log: Path, offset: int) -> dict[str, int]:
    """The readiness checks that failed since `offset` in gunicorn's log, by check and error."""
    with open(log, "rb") as text:
        text.seek(offset)
        found = re.findall(r"readiness check (\w+) failed: (\w+)", text.read().decode(errors="replace"))
    counts: dict[str, int] = {}
    for check, error in found:
        counts[f"{check}: {error}"] = counts.get(f"{check}: {error}", 0) + 1
    return counts


def request(port: int, method: str, path: str, *, headers: dict | None = None, body: str | None = None,
            connection: http.client.HTTPConnection | None = None) -> tuple[int, dict, bytes]:
    own = connection is None
    connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        if own:
            connection.close()


class Shopper:
    """One visitor reading random deep pages one after another through nginx; keeps each latency."""

    def __init__(self, port: int, pages: list[str]):
        self.port, self.pages = port, pages
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}

    def crawl(self, seconds: float) -> "Shopper":
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                try:
                    status, _, _ = request(self.port, "GET", random.choice(self.pages), connection=connection,
                                           headers={"X-Forwarded-For": SHOPPER_ADDRESS, "Accept-Encoding": "gzip"})
                except (OSError, http.client.HTTPException):
                    connection.close()
                    connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                    status = 0
                self.latencies.append(time.perf_counter() - started)
                self.statuses[status] = self.statuses.get(status, 0) + 1
                time.sleep(SHOPPER_THINK_SECONDS)
        finally:
            connection.close()
        return self

    def figures(self) -> dict:
        ordered = sorted(self.latencies)

        def percentile(p: float) -> float:
            return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000, 1)

        return {"requests": len(ordered), "p50_ms": percentile(50), "p95_ms": percentile(95),
                "p99_ms": percentile(99), "mean_ms": round(statistics.fmean(ordered) * 1000, 1),
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())}}


class Flood:
    """wrk with bench/abuse.lua in the background, for `seconds`."""

    def __init__(self, port: int, requests_file: Path, *, connections: int, delay_ms: int, pool: int, seconds: float):
        self.command = ["wrk", "-t2", f"-c{connections}", f"-d{int(seconds)}s", "--timeout", "10s", "-s", str(LUA),
                        f"http://127.0.0.1:{port}", "--", str(requests_file), str(delay_ms), str(pool),
                        f"http://127.0.0.1:{port}"]
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> "Flood":
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return self

    def result(self) -> dict:
        out, err = self.process.communicate(timeout=120)
        line = next((line for line in out.splitlines() if line.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"wrk gave no result: {err or out}")
        result = json.loads(line.removeprefix("RESULT "))
        result["requests_per_s"] = round(result["requests"] / (result["duration_us"] / 1e6), 1)
        return result

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class SlowClients:
    """`count` connections from 127.0.1.x (one address per 2 connections, within nginx's 32 per
    address), half sending a header line every 2 s and never ending the headers, half a form's body
    a byte every 2 s. Each one nginx drops is opened again."""

    def __init__(self, port: int, count: int, sku: str):
        self.port, self.count, self.sku = port, count, sku
        self.stop = threading.Event()
        self.opened = self.dropped = 0
        self.thread = threading.Thread(target=self.run, name="slow-clients", daemon=True)

    def connect(self, slot: int) -> socket.socket | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                            source_address=(f"127.0.1.{slot // 2 % 250 + 1}", 0))
            if slot % 2:
                sock.sendall(f"POST /products/{self.sku}/comments/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000\r\n"
                             f"Origin: http://127.0.0.1:{self.port}\r\n\r\nbody=".encode())
            else:
                sock.sendall(f"GET /products/{self.sku}/ HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
            sock.setblocking(False)
            self.opened += 1
            return sock
        except OSError:
            return None

    def run(self) -> None:
        sockets: list[socket.socket | None] = [None] * self.count
        while not self.stop.is_set():
            for slot, sock in enumerate(sockets):
                if self.stop.is_set():
                    break
                if sock is None:
                    sockets[slot] = self.connect(slot)
                    continue
                try:
                    sock.send(b"a" if slot % 2 else b"X-Slow: yes\r\n")
                    sock.recv(4096)  # an answer (408, 400) or the end: nginx is done with this one
                except BlockingIOError:
                    continue  # nothing from nginx: still held open
                except OSError:
                    pass
                sock.close()
                self.dropped += 1
                sockets[slot] = None
            self.stop.wait(2)
        for sock in sockets:
            if sock is not None:
                sock.close()

    def __enter__(self) -> "SlowClients":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(30)

    def result(self) -> dict:
        return {"connections_held": self.count, "opened": self.opened, "dropped_by_nginx": self.dropped}


def junk_parameter_check(port: int, page: str, redis_client, strict) -> dict:
    """120 URLs that differ from `page` only in unknown parameters: their answers, and what they added
    to the cache and cost at DynamoDB."""
    assert request(port, "GET", page, headers={"X-Forwarded-For": SHOPPER_ADDRESS})[0] == 200
    keys_before = redis_client.dbsize()
    strict.clear_requests()
    statuses: dict[int, int] = {}
    locations = set()
    for i in range(JUNK_URLS):
        status, headers, _ = request(port, "GET", f"{page}&utm_source=bench&x={i}",
                                     headers={"X-Forwarded-For": f"198.51.100.{i % 250 + 1}"})
        statuses[status] = statuses.get(status, 0) + 1
        locations.add(headers.get("Location"))
    return {"urls": JUNK_URLS, "statuses": {str(k): v for k, v in statuses.items()},
            "redirected_to": sorted(filter(None, locations)),
            "cache_entries_added": redis_client.dbsize() - keys_before,
            "dynamodb_requests": len(strict.requests())}


def endpoint_summary(entries: list[dict]) -> dict:
    """What the strict endpoint saw in a phase: requests by operation, errors, the slowest answers."""
    durations = sorted(entry.get("duration_ms") or 0 for entry in entries)
    operations: dict[str, int] = {}
    errors: dict[str, int] = {}
    for entry in entries:
        operations[entry["operation"]] = operations.get(entry["operation"], 0) + 1
        if entry.get("error"):
            errors[entry["error"]] = errors.get(entry["error"], 0) + 1
    return {"requests": len(entries), "operations": operations, "errors": errors,
            "p99_ms": durations[int(0.99 * len(durations))] if durations else None,
            "max_ms": durations[-1] if durations else None}


def cpu_now(gunicorn: Gunicorn, nginx: Nginx, strict, jvm: int) -> tuple[float, ...]:
    return (cpu_seconds(gunicorn.process.pid), cpu_seconds(0, nginx.pids()), cpu_seconds(0, [strict.process.pid]),
            cpu_seconds(0, [jvm]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small shop, a few seconds per phase")
    parser.add_argument("--seconds", type=int, help=f"seconds per phase (default {SECONDS}, smoke {SMOKE_SECONDS})")
    parser.add_argument("--flood", action="append", choices=[*FLOODS, "slow clients"],
                        help="only this flood, between the two quiet windows (repeatable; default: all)")
    args = parser.parse_args(argv)
    if not nginx_binary() or not shutil.which("wrk"):
        print("bench.abuse needs nginx and wrk: apt-get install nginx wrk (make bench-tools)", file=sys.stderr)
        return 1
    size = SMOKE_SIZE if args.smoke else SIZE
    seconds = args.seconds or (SMOKE_SECONDS if args.smoke else SECONDS)
    slow_count = SMOKE_SLOW_CLIENTS if args.smoke else SLOW_CLIENTS
    out = lambda text: print(text, flush=True)  # noqa: E731
    load_at_start = os.getloadavg()
    dataset = Dataset(size)
    with dataset, ExitStack() as stack:
        import redis
        from stack.strict_endpoint import StrictEndpoint

        scratch = Path(tempfile.mkdtemp(prefix="abuse-", dir=DATA))
        stack.callback(shutil.rmtree, scratch, ignore_errors=True)
        database_url = stack.enter_context(postgres_shop())
        index_env = stack.enter_context(redis_index())
        strict = stack.enter_context(StrictEndpoint(
            dataset.database.endpoint_url, config={"creating_seconds": 0}, state_dir=scratch / "strict-endpoint",
            log_path=scratch / "strict-endpoint.log"))
        env = {**os.environ, **dataset.env, **strict.env(), **index_env, "DATABASE_URL": database_url,
               "CACHE_BACKEND": "redis", "COMMENTS_CLIENT_IP_HEADER": "X-Forwarded-For",
               "COMMENTS_CLIENT_IP_PROXIES": "1", "DJANGO_ALLOWED_HOSTS": "127.0.0.1", "LOG_LEVEL": "WARNING",
               "GUNICORN_ACCESS_LOG": ""}
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
            env.pop(name, None)
        gunicorn = stack.enter_context(Gunicorn(env, scratch / "gunicorn.log"))
        nginx = stack.enter_context(Nginx(scratch / "nginx", upstream=f"127.0.0.1:{gunicorn.port}",
                                          static_root=Path(dataset.env["DJANGO_STATIC_ROOT"])))
        cache = redis.Redis.from_url(dataset.env["REDIS_URL"])
        products = dataset.products()
        pages = deep_pages(products)
        shopper_pages = deep_pages(products, SHOPPER_DEPTH)
        if not pages:
            raise SystemExit("no product has pages past the fast window")
        _, _, flagship = request(nginx.port, "GET", f"/products/{FLAGSHIP}/", headers={"X-Forwarded-For": SHOPPER_ADDRESS})
        comment_ids = COMMENT_ID.findall(flagship.decode())
        requests_files = {
            "junk parameters": [f"GET {random.choice(pages)}&x={n}" for n in range(5000)],
            "report flood": [f"POST /products/{FLAGSHIP}/comments/{pk}/report/ reason=spam&note=flood" for pk in comment_ids],
            "/readyz flood": ["GET /readyz"],
        }
        for name, lines in requests_files.items():
            path = scratch / f"{name.strip('/').replace(' ', '-')}.txt"
            path.write_text("\n".join(lines) + "\n")
            requests_files[name] = path
        out(f"abuse: {len(products)} products, {sum(products.values()):,} comments, {len(pages):,} deep pages "
            f"(the shopper reads {len(shopper_pages):,} of them); "
            f"{seconds} s per phase; nginx :{nginx.port} -> gunicorn :{gunicorn.port}")
        Shopper(nginx.port, shopper_pages).crawl(min(seconds, 5))  # warm: templates, connections, the index
        junk = junk_parameter_check(nginx.port, pages[len(pages) // 2], cache, strict)
        out(f"  {JUNK_URLS} junk-parameter URLs: {junk['statuses']}, cache entries added {junk['cache_entries_added']}, "
            f"DynamoDB requests {junk['dynamodb_requests']}")

        jvm = dataset.database.process.pid
        rows = []
        quiet_latencies: list[float] = []
        for phase in ["quiet", *(args.flood or [*FLOODS, "slow clients"]), "quiet again"]:
            before = cpu_now(gunicorn, nginx, strict, jvm)
            log_offset = (scratch / "gunicorn.log").stat().st_size
            strict.clear_requests()
            shopper = Shopper(nginx.port, shopper_pages)
            with ExitStack() as flood_stack:
                flood = slow = None
                if phase in FLOODS:
                    flood = flood_stack.enter_context(Flood(nginx.port, requests_files[phase], seconds=seconds + 1,
                                                            **FLOODS[phase]))
                elif phase == "slow clients":
                    slow = flood_stack.enter_context(SlowClients(nginx.port, slow_count, FLAGSHIP))
                if flood or slow:
                    time.sleep(0.5)  # the flood under way before the shopper starts
                shopper.crawl(seconds)
                flood_result = flood.result() if flood else slow.result() if slow else {}
            after = cpu_now(gunicorn, nginx, strict, jvm)
            if phase.startswith("quiet"):
                quiet_latencies += shopper.latencies
            figures = shopper.figures()
            handled = max(1, figures["requests"] + flood_result.get("requests", 0))
            cpu_ms = [round((end - start) * 1000 / handled, 3) for start, end in zip(before, after)]
            row = {"phase": phase, "flood": flood_result, "shopper": figures,
                   "readiness_failures": readiness_failures(scratch / "gunicorn.log", log_offset),
                   "dynamodb": endpoint_summary(strict.requests()),
                   "cpu_ms_per_request": dict(zip(("gunicorn", "nginx", "strict_endpoint", "dynamodb_local"), cpu_ms)),
                   "load_average": os.getloadavg()}
            rows.append(row)
            out(f"  {phase:<16} flood {flood_result.get('requests_per_s', '-')} req/s "
                f"5xx {flood_result.get('5xx', '-')} 503 {flood_result.get('503', '-')} 429 {flood_result.get('429', '-')}"
                f"  shopper p50 {figures['p50_ms']} "
                f"p99 {figures['p99_ms']} ms ({figures['requests']} pages, {figures['statuses']})  "
                f"CPU ms/req gunicorn {cpu_ms[0]} nginx {cpu_ms[1]}")
        reports_stored = report_count(database_url)

    # The quiet baseline: both quiet windows (before the floods and after them) pooled, so neither a
    # cold start nor what the floods left behind decides it alone.
    pooled = Shopper(0, [])
    pooled.latencies, pooled.statuses = quiet_latencies, {200: len(quiet_latencies)}
    quiet = pooled.figures()["p99_ms"]
    for row in rows:
        row["shopper"]["p99_vs_quiet"] = round(row["shopper"]["p99_ms"] / quiet, 2) if quiet else None
    header = ["phase", "flood req/s", "2xx", "3xx", "4xx", "429", "503", "5xx", "shopper pages", "p50 ms", "p95 ms", "p99 ms",
              "p99 / quiet", "shopper 5xx", "gunicorn CPU ms/req", "nginx CPU ms/req"]
    table = format_table(header, [[
        r["phase"], str(r["flood"].get("requests_per_s", "-")),
        *[str(r["flood"].get(k, "-")) for k in ("2xx", "3xx", "4xx", "429", "503", "5xx")],
        str(r["shopper"]["requests"]), f"{r['shopper']['p50_ms']}", f"{r['shopper']['p95_ms']}",
        f"{r['shopper']['p99_ms']}", f"{r['shopper']['p99_vs_quiet']}",
        str(sum(v for k, v in r["shopper"]["statuses"].items() if k.startswith("5") or k == "0")),
        f"{r['cpu_ms_per_request']['gunicorn']}", f"{r['cpu_ms_per_request']['nginx']}"] for r in rows])
    out("\n" + table)
    out(f"quiet baseline (both quiet windows): p99 {quiet} ms; reports stored {reports_stored}")
    problems = []
    if junk["cache_entries_added"] > CACHE_ENTRIES_TARGET or junk["dynamodb_requests"] or any(
            status.startswith("5") for status in junk["statuses"]):
        problems.append(f"junk parameters: {junk}")
    for r in rows:
        if r["flood"].get("5xx") or any(k.startswith("5") or k == "0" for k in r["shopper"]["statuses"]):
            problems.append(f"{r['phase']}: 5xx or failed requests")
        slower = r["shopper"]["p99_vs_quiet"]
        if not args.smoke and slower and slower > P99_TARGET_RATIO:
            problems.append(f"{r['phase']}: shopper p99 {slower}x quiet")
    when = stamp()
    path = write_json("abuse", args.smoke, when, {
        "flagship_comments": size, "seconds_per_phase": seconds, "floods": FLOODS, "slow_clients": slow_count,
        "shopper_pages": f"pages {FAST_PAGES + 1}-{FAST_PAGES + SHOPPER_DEPTH} of each product",
        "shopper_think_seconds": SHOPPER_THINK_SECONDS, "targets": {
            "shopper_p99_vs_quiet_at_most": P99_TARGET_RATIO, "junk_cache_entries_at_most": CACHE_ENTRIES_TARGET,
            "junk_dynamodb_requests": 0, "5xx": 0},
        "junk_parameters": junk, "reports_stored": reports_stored, "quiet_p99_ms": quiet, "results": rows,
        "table": table,
        "met": not problems, "problems": problems,
        "machine": machine_info({}, load_at_start, f"shared machine; gunicorn, nginx, the strict endpoint, {DYNAMODB_LOCAL}, "
                                                   "Redis, wrk and the shopper on the same 2 cores")})
    out(f"\nwrote {shown(path)}")
    for problem in problems:
        print(f"target missed: {problem}", file=sys.stderr)
    return 1 if problems else 0


@contextmanager
def postgres_shop():
    """A PostgreSQL database of the run's own, migrated, with the dataset's products (Django's default
    database here is the dataset's SQLite file); dropped at the end. Yields its DATABASE_URL."""
    import dj_database_url
    import psycopg
    from django.core.management import call_command
    from django.db import connections

    from bench.common import add_database_alias, forget_database_alias
    from bench.dataset import POSTGRES_URL
    from shop.models import Product

    name, alias = f"bench_abuse_{os.getpid()}", "abuse"
    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    add_database_alias(alias, {**dj_database_url.parse(POSTGRES_URL), "NAME": name})
    try:
        call_command("migrate", database=alias, verbosity=0)
        Product.objects.using(alias).bulk_create(Product.objects.all())
        connections[alias].close()
        yield urlsplit(POSTGRES_URL)._replace(path=f"/{name}").geturl()
    finally:
        forget_database_alias(alias)
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def report_count(database_url: str) -> int:
    import psycopg

    with psycopg.connect(database_url) as connection:
        return connection.execute("SELECT COUNT(*) FROM moderation_report").fetchone()[0]


if __name__ == "__main__":
    sys.exit(main())
