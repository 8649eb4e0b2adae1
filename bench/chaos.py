"""Faults under load: the production topology on this machine, every part of it killed in turn while
shoppers browse and post, and then proof that nothing was lost.

    python -m bench.chaos               # 20,000-comment shop, Redis index, every fault
    python -m bench.chaos --smoke       # 3,000 comments, shorter windows (CI)
    python -m bench.chaos --index postgres
    python -m bench.chaos --direct      # DynamoDB Local straight, without the strict endpoint

The stack, all processes of this run's own on free ports: nginx with the repository's config in
front (--no-nginx: none), gunicorn with gunicorn.conf.py and production settings (DEBUG off), `sync_index` following the stream, DynamoDB Local with its data in
a folder (a restart reads the same data, so the stream's shard iterators go stale), and the index
in a redis-server of its own (append-only file, fsync always) or a PostgreSQL cluster of its own.

Load: threads fetching hot pages (pages 1-3 of the biggest products) and crawl pages (any page of
any product), and a poster submitting the real form (a GET for its CSRF cookie, then the POST), each
comment with a unique marker in its text.

DynamoDB is reached through the strict endpoint (stack/strict_endpoint/) by default, as on AWS: TLS,
every signature checked against the one pair of credentials the processes are given, 10% of the
table's reads and writes throttled (--throttle-rate) and 3-8 ms of latency on every request, from
the first shopper to the last fault (the closing checks run without faults). Printed beside the
faults: the share of 503s with no fault but the throttles, the most attempts one page request made
(counted at the endpoint by X-Request-Tag), and the keys requests were signed with.

Faults, one at a time, each followed by a recovery window: kill -9 and restart of the index store,
of DynamoDB Local, of sync_index (twice) and of one gunicorn worker; a 10 s SIGSTOP of Redis.

Printed per fault: responses by status during the fault and after it, p99 latency during it, the
seconds until every page answers 200 again once the service is back, and the 500s (must be none).
Then: every post answered 303 is in DynamoDB exactly once and in the index; every post answered 503
showed the form again with the text kept; verify_index finds no drift; a crawl of every page of the
flagship product equals a Query of its GSI partition.
"""
from __future__ import annotations

import argparse
import http.client
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

from bench.common import DYNAMODB_LOCAL, format_table, machine_info, stamp, write_json
from bench.dataset import FLAGSHIP, Dataset
from stack.dynamodb_local import ROOT, free_port
from stack.nginx import Nginx, nginx_binary
from tests.pages import parse
from tests.services import RedisServer

# The table's reads and writes: what the throttles of --throttle-rate hit (the stream and DescribeTable not).
DATA_OPERATIONS = ["GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems", "PutItem", "UpdateItem",
                   "DeleteItem", "BatchWriteItem", "TransactWriteItems"]
LATENCY = {"base_ms": 3, "jitter_ms": 5}  # 3-8 ms on every request
SIZE, SMOKE_SIZE = 20_000, 3_000
PAGE_SIZE = 20
LOAD_THREADS = 4
REQUEST_TIMEOUT = 15.0  # a client's patience: a hung request shows as a timeout, not as a pass
RECOVERY_TARGET = 5.0  # seconds from a service's return to every page answering 200
POST_SKU = "TEAPOT-JP"
TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@dataclass
class Sample:
    at: float
    status: int  # 0: no answer (connection refused, reset, timed out)
    seconds: float
    path: str


@dataclass
class Post:
    at: float
    status: int
    marker: str
    kept_text: bool  # a 503 page still held the comment's text


@dataclass
class Window:
    name: str
    started: float
    restored: float | None = None  # when the service answered again
    ended: float | None = None
    notes: list[str] = field(default_factory=list)


class Client:
    """One keep-alive HTTP connection that reconnects after any failure, with a cookie jar."""

    def __init__(self, port: int):
        self.port = port
        self.connection: http.client.HTTPConnection | None = None
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: str | None = None, headers: dict | None = None):
        headers = dict(headers or {})
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        for attempt in range(2):  # a keep-alive connection the server closed meanwhile: once more
            if self.connection is None:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT)
            try:
                self.connection.request(method, path, body=body, headers=headers)
                response = self.connection.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException):
                self.connection.close()
                self.connection = None
                if attempt:
                    raise
                continue
            for header, value in response.getheaders():
                if header.lower() == "set-cookie":
                    name, _, rest = value.partition("=")
                    self.cookies[name.strip()] = rest.split(";", 1)[0]
            if response.getheader("Connection", "").lower() == "close":
                self.connection.close()
                self.connection = None
            return response.status, data
        raise AssertionError("unreachable")


class Load:
    """Browsing threads and one posting thread, recording every answer until stopped."""

    def __init__(self, port: int, paths: dict[str, list[str]], post_every: float, seed: int = 7):
        self.port, self.paths, self.post_every = port, paths, post_every
        self.samples: list[Sample] = []
        self.posts: list[Post] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._browse, args=(seed + n,), daemon=True)
                        for n in range(LOAD_THREADS)]
        self.threads.append(threading.Thread(target=self._post, daemon=True))

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(REQUEST_TIMEOUT * 3)

    def _browse(self, seed: int) -> None:
        rng, client = random.Random(seed), Client(self.port)
        while not self.stop.is_set():
            path = rng.choice(self.paths[rng.choice(["hot", "crawl"])])
            started = time.monotonic()
            try:
                status, _ = client.request("GET", path)
            except (OSError, http.client.HTTPException):
                status = 0
                time.sleep(0.05)  # a refused connection answers at once: don't spin
            with self.lock:
                self.samples.append(Sample(started, status, time.monotonic() - started, path))

    def _post(self) -> None:
        client, number, token, have_form = Client(self.port), 0, None, False
        page = f"/products/{POST_SKU}/"
        while not self.stop.wait(self.post_every):
            number += 1
            marker = f"chaos-{uuid.uuid4().hex[:12]}"
            text = f"Comment {number} of the chaos run {marker}"
            started = time.monotonic()
            try:
                shown, html = client.request("GET", page)
                if shown == 200:  # else: the form a shopper already has open, posted while the page is down
                    found = TOKEN.search(html.decode())
                    token, have_form = (found.group(1) if found else None), True
                elif not have_form:
                    continue
                form = {"author": "Chaos Monkey", "rating": "4", "body": text, "website": ""}
                if token:
                    form["csrfmiddlewaretoken"] = token
                origin = f"http://127.0.0.1:{self.port}"
                status, body = client.request("POST", f"/products/{POST_SKU}/comments/", urlencode(form), {
                    "Content-Type": "application/x-www-form-urlencoded", "Origin": origin,
                    "Referer": origin + page, "Sec-Fetch-Site": "same-origin"})
            except (OSError, http.client.HTTPException):
                status, body = 0, b""
            with self.lock:
                self.posts.append(Post(started, status, marker, marker.encode() in body))

    def since(self, start: float, end: float) -> list[Sample]:
        """The requests answered (or given up) between start and end: one in flight when a fault
        hit counts towards the fault."""
        with self.lock:
            return [sample for sample in self.samples if start <= sample.at + sample.seconds < end]


class Process:
    """A child process of the stack, its output in a log file; kill -9 and restart."""

    def __init__(self, name: str, command: list[str], env: dict, log: Path):
        self.name, self.command, self.env, self.log = name, command, env, log
        self.process: subprocess.Popen | None = None

    def start(self) -> "Process":
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class PostgresCluster:
    """A PostgreSQL cluster of this run's own (initdb as the postgres user), so a restart hurts
    nobody else's database."""

    def __init__(self, folder: Path):
        self.folder = folder / "postgres"
        self.port = free_port()
        self.bin = Path(sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1])

    def _as_postgres(self, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True)

    def start(self) -> "PostgresCluster":
        if not self.folder.exists():
            self.folder.mkdir(parents=True)
            shutil.chown(self.folder, "postgres", "postgres")
            self._as_postgres(str(self.bin / "initdb"), "-D", str(self.folder / "data"), "-A", "trust", "-U", "postgres")
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"), "-l", str(self.folder / "log"),
                          "-w", "-o", f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1", "start")
        return self

    def pid(self) -> int:
        return int((self.folder / "data" / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        os.kill(self.pid(), signal.SIGKILL)
        time.sleep(0.5)

    def stop(self) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", str(self.bin / "pg_ctl"), "-D", str(self.folder / "data"),
                        "-m", "fast", "stop"], capture_output=True)

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"


def wait_until(check, timeout: float, every: float = 0.1) -> float | None:
    """Seconds until check() is true, or None after `timeout`."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if check():
                return time.monotonic() - started
        except Exception:  # the service is still coming up
            pass
        time.sleep(every)
    return None


def answers(port: int, path: str = "/healthz") -> bool:
    try:
        return Client(port).request("GET", path)[0] == 200
    except (OSError, http.client.HTTPException):
        return False


def gunicorn_workers(master: int) -> list[int]:
    return [int(pid) for pid in Path(f"/proc/{master}/task/{master}/children").read_text().split()]


def manage(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def statuses(samples: list[Sample]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for sample in samples:
        key = str(sample.status) if sample.status else "no answer"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


def back_to_200(load: Load, window: Window) -> float | None:
    """Seconds from the service's return until the first request of an unbroken run of 200s that
    lasts to the window's end (None: never, within the window)."""
    since = window.restored if window.restored is not None else window.started
    after = load.since(since, window.ended)
    failing = [sample for sample in after if sample.status != 200]
    if not failing:
        return 0.0
    last_failure = max(sample.at + sample.seconds for sample in failing)
    if not any(sample.at + sample.seconds > last_failure for sample in after):
        return None
    return max(last_failure - since, 0.0)


class Stack:
    """The production topology, and the faults it knows how to suffer."""

    def __init__(self, dataset: Dataset, index: str, scratch: Path, *, nginx: bool, strict=None):
        self.dataset, self.index, self.scratch, self.strict = dataset, index, scratch, strict
        self.port = free_port()  # gunicorn's
        self.nginx = Nginx(scratch / "nginx", upstream=f"127.0.0.1:{self.port}",
                           static_root=Path(dataset.env["DJANGO_STATIC_ROOT"])) if nginx else None
        self.front = self.nginx.port if self.nginx else self.port  # where shoppers connect
        self.redis = RedisServer(scratch, durable=True)  # the index's store (and nothing else's)
        self.postgres = PostgresCluster(scratch) if index == "postgres" else None
        # The stream checkpoints live in a copy of the dataset's database: each run starts from the
        # dataset's saved table, so checkpoints a previous run advanced must not carry over.
        (scratch / "var").mkdir()
        shutil.copy(dataset.folder / "db.sqlite3", scratch / "var" / "db.sqlite3")
        self.env = {**os.environ, **dataset.env, "SHOP_VAR_DIR": str(scratch / "var"), "GUNICORN_BIND": f"127.0.0.1:{self.port}", "GUNICORN_WORKERS": "3",
                    "GUNICORN_ACCESS_LOG": "", "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
                    "DJANGO_CSRF_TRUSTED_ORIGINS": f"http://127.0.0.1:{self.port},http://127.0.0.1:{self.front}", "COMMENTS_POSTS_PER_MINUTE": "0",
                    "SYNC_INDEX_LEASE_SECONDS": "5", "LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1",
                    "DJANGO_SETTINGS_MODULE": "shop.settings"}
        if strict is not None:  # its URL, its CA, the one pair of keys it knows: the processes' only credentials
            for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
                self.env.pop(name, None)
            self.env.update(strict.env())
        self.gunicorn = Process("gunicorn", [str(Path(sys.executable).parent / "gunicorn"), "-c",
                                             str(ROOT / "gunicorn.conf.py"), "shop.wsgi"],
                                self.env, scratch / "gunicorn.log")
        self.sync = Process("sync_index", [sys.executable, "manage.py", "sync_index"], self.env, scratch / "sync.log")

    def start(self) -> None:
        if self.postgres:
            self.postgres.start()
            self.env.update(PAGINATION_INDEX_BACKEND="relational", DATABASE_URL=self.postgres.url)
            result = manage(self.env, "migrate", "--no-input")
            assert result.returncode == 0, result.stderr
            self._copy_products()
        else:
            self.redis.start()
            self.env.update(PAGINATION_INDEX_BACKEND="redis", REDIS_URL=f"redis://127.0.0.1:{self.redis.port}/0",
                            PAGINATION_INDEX_REDIS_URL=f"redis://127.0.0.1:{self.redis.port}/1")
        forget = "from pagination_index.models import ShardCheckpoint; ShardCheckpoint.objects.all().delete()"
        for args in (["shell", "-c", forget], ["rebuild_index", "-v", "0"]):  # the index, and where the stream is
            result = manage(self.env, *args)
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        self.gunicorn.start()
        self.sync.start()
        if wait_until(lambda: answers(self.port), 60) is None:
            raise SystemExit(f"gunicorn did not answer; see {self.gunicorn.log}")
        if self.nginx:
            self.nginx.start()

    def _copy_products(self) -> None:
        """The catalogue (in the dataset's SQLite) into the run's PostgreSQL."""
        dump = self.scratch / "products.json"
        sqlite = {key: value for key, value in self.env.items() if key != "DATABASE_URL"}
        result = manage(sqlite, "dumpdata", "shop.Product", "-o", str(dump))
        assert result.returncode == 0, result.stderr
        result = manage(self.env, "loaddata", str(dump))
        assert result.returncode == 0, result.stderr

    def stop(self) -> None:
        if self.nginx:
            self.nginx.stop()
        self.gunicorn.stop()
        self.sync.stop()
        self.redis.kill()
        if self.postgres:
            self.postgres.stop()

    # --- faults: each returns when the service answers again --------------------------------
    def kill_index_store(self) -> None:
        if self.postgres:
            self.postgres.kill()
            time.sleep(3)
            self.postgres.start()
        else:
            self.redis.kill()
            time.sleep(3)
            self.redis.start()

    def kill_dynamodb(self) -> None:
        self.dataset.database.process.kill()
        self.dataset.database.process.wait(10)
        time.sleep(1)
        self.dataset.database.start()

    def kill_sync(self) -> None:
        self.sync.kill()
        time.sleep(1)
        self.sync.start()

    def kill_worker(self) -> None:
        os.kill(random.choice(gunicorn_workers(self.gunicorn.process.pid)), signal.SIGKILL)

    def pause_redis(self) -> None:
        os.kill(self.redis.process.pid, signal.SIGSTOP)
        time.sleep(10)
        os.kill(self.redis.process.pid, signal.SIGCONT)


def faults(stack: Stack, smoke: bool) -> list[tuple[str, callable]]:
    store = "PostgreSQL" if stack.postgres else "Redis"
    chosen = [(f"kill -9 {store} (index), restart", stack.kill_index_store),
              ("kill -9 DynamoDB Local, restart on its data", stack.kill_dynamodb),
              ("kill -9 sync_index, restart", stack.kill_sync),
              ("kill -9 sync_index again, restart", stack.kill_sync),
              ("kill -9 one gunicorn worker", stack.kill_worker)]
    if not stack.postgres:
        chosen.append(("SIGSTOP Redis 10 s, SIGCONT", stack.pause_redis))
    return chosen[:3] if smoke else chosen


def crawl_equals_query(port: int, sku: str, pages: int) -> tuple[bool, int]:
    """Every page of a product, in order, against a Query of its GSI partition (SK, PK descending)."""
    from comments.table.keys import PRODUCTS
    from pagination_index import sources

    expected = [pk for pk, _ in sorted(sources[PRODUCTS].group_entries(sku), key=lambda e: (e[1], e[0]),
                                       reverse=True)]
    client, shown = Client(port), []
    for number in range(1, pages + 1):
        status, html = client.request("GET", f"/products/{sku}/" + (f"?page={number}" if number > 1 else ""))
        if status != 200:
            return False, number
        shown.extend(pk for pk, _ in parse(html.decode())["comments"])
    return shown == expected, len(shown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="Small shop, three faults, short windows (CI).")
    parser.add_argument("--index", choices=["redis", "postgres"], default="redis")
    parser.add_argument("--no-nginx", action="store_true", help="Shoppers talk to gunicorn directly.")
    parser.add_argument("--recovery-seconds", type=float, help="Load kept on after each fault (default 12; smoke 6).")
    parser.add_argument("--direct", action="store_true", help="DynamoDB Local straight, without the strict endpoint.")
    parser.add_argument("--throttle-rate", type=float, default=0.1,
                        help="Share of the table's reads and writes the strict endpoint throttles (default 0.1).")
    args = parser.parse_args()
    size = SMOKE_SIZE if args.smoke else SIZE
    recovery = args.recovery_seconds or (6.0 if args.smoke else 12.0)
    when, load_start = stamp(), os.getloadavg()
    scratch = Path(tempfile.mkdtemp(prefix="chaos-"))
    if args.index == "postgres":
        shutil.chown(scratch, "postgres", "postgres")
    dataset = Dataset(size)
    windows: list[Window] = []
    endpoint_report: dict = {"direct": True} if args.direct else {}
    with dataset, ExitStack() as services:
        products = dataset.products()
        pages = {sku: max(1, -(-count // PAGE_SIZE)) for sku, count in products.items()}
        top = sorted(products, key=products.get, reverse=True)[:3]
        paths = {"hot": [f"/products/{sku}/" + (f"?page={n}" if n > 1 else "") for sku in top for n in (1, 2, 3)],
                 "crawl": [f"/products/{sku}/?page={n}" for sku, last in pages.items() for n in range(2, last + 1)]}
        nginx = not args.no_nginx and nginx_binary() is not None
        strict = None if args.direct else services.enter_context(strict_endpoint(dataset, scratch))
        stack = Stack(dataset, args.index, scratch, nginx=nginx, strict=strict)
        try:
            stack.start()
            if strict is not None:
                strict.set_faults([{"kind": "ProvisionedThroughputExceededException", "rate": args.throttle_rate,
                                    "operations": DATA_OPERATIONS}], seed=1, latency=LATENCY)
                strict.clear_requests()
            print(f"stack up on 127.0.0.1:{stack.front} ({'nginx -> ' if nginx else ''}gunicorn; index: {args.index}); "
                  f"load for {recovery:.0f} s first")
            with Load(stack.front, paths, post_every=0.5) as load:
                time.sleep(recovery)
                baseline = Window("no fault (baseline)", time.monotonic() - recovery, ended=time.monotonic())
                windows.append(baseline)
                for name, fault in faults(stack, args.smoke):
                    print(f"fault: {name}", flush=True)
                    window = Window(name, time.monotonic())
                    fault()
                    window.restored = time.monotonic()
                    time.sleep(recovery)
                    window.ended = time.monotonic()
                    windows.append(window)
            rows, report = [], []
            for window in windows:
                during = load.since(window.started, window.restored or window.ended)
                after = load.since(window.restored or window.started, window.ended)
                recovered = back_to_200(load, window)
                entry = {
                    "fault": window.name, "during": statuses(during),
                    "p99_during_ms": round(1000 * percentile([s.seconds for s in during], 0.99), 1),
                    "max_during_ms": round(1000 * max((s.seconds for s in during), default=0), 1),
                    "after": statuses(after), "back_to_200_s": None if recovered is None else round(recovered, 2),
                    "status_500": sum(1 for s in during + after if s.status == 500),
                    "down_seconds": round((window.restored or window.started) - window.started, 2),
                    "failed_examples": [f"{s.status} {s.path} after {s.seconds:.2f}s"
                                        for s in during + after if s.status != 200][:5],
                }
                report.append(entry)
                rows.append([window.name, f"{entry['down_seconds']:.1f}", fmt(entry["during"]),
                             f"{entry['p99_during_ms']:.0f}", fmt(entry["after"]),
                             "never" if recovered is None else f"{recovered:.1f}", str(entry["status_500"])])
            print(format_table(["fault", "down s", "during", "p99 ms", "after", "to 200 s", "500s"], rows))
            if strict is not None:
                endpoint_report = endpoint_figures(strict, baseline, load, args.throttle_rate)
                strict.set_faults([])
            losses = check_nothing_lost(stack, load, products, args.smoke)
        finally:
            stack.stop()
    all_500 = sum(entry["status_500"] for entry in report)
    slow = [entry["fault"] for entry in report if entry["back_to_200_s"] is None or entry["back_to_200_s"] > RECOVERY_TARGET]
    path = write_json("chaos", args.smoke, when, {
        "machine": machine_info({"DynamoDB": DYNAMODB_LOCAL}, load_start,
                                "2 cores shared by gunicorn, sync_index, DynamoDB Local's JVM, the index store and "
                                "this load generator"),
        "index": args.index, "nginx": nginx, "comments": size, "faults": report, "nothing_lost": losses,
        "strict_endpoint": endpoint_report,
        "status_500": all_500, "recovery_target_s": RECOVERY_TARGET, "slow_recoveries": slow,
    })
    print(f"saved {path.relative_to(ROOT)}")
    for entry in report:
        if entry["failed_examples"] and entry["fault"] == windows[0].name:
            print(f"failed without a fault: {entry['failed_examples']} (logs in {scratch})")
            break
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    problems = [f"{all_500} responses with status 500"] if all_500 else []
    if endpoint_report.get("foreign_keys"):
        problems.append(f"requests signed with other keys: {endpoint_report['foreign_keys']}")
    problems += [f"lost: {what}" for what, ok in losses.items() if ok is False]
    if problems:
        raise SystemExit("chaos: " + "; ".join(problems))
    if slow:
        print(f"slower than {RECOVERY_TARGET:.0f} s to recover: {', '.join(slow)}")


@contextmanager
def strict_endpoint(dataset: Dataset, scratch: Path):
    """The strict endpoint in front of the dataset's DynamoDB Local (its log in the run's folder)."""
    from stack.strict_endpoint import StrictEndpoint

    endpoint = StrictEndpoint(dataset.database.endpoint_url, config={"creating_seconds": 0},
                              state_dir=scratch / "strict-endpoint", log_path=scratch / "strict-endpoint.log")
    endpoint.start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


def endpoint_figures(strict, baseline: Window, load: Load, throttle_rate: float) -> dict:
    """What the endpoint saw under load: attempts per page request, the keys requests were signed
    with, and the 503s of the baseline window (no fault but the throttles)."""
    summary = strict.attempts_summary()
    calm = load.since(baseline.started, baseline.ended)
    unavailable = sum(1 for sample in calm if sample.status == 503)
    figures = {
        "throttle_rate": throttle_rate, "latency": LATENCY,
        "max_attempts_per_page_request": summary.get("max_attempts_per_request_id"),
        "max_retries_per_page_request": summary.get("max_retries_per_request_id"),
        "max_attempts_per_call": summary.get("max_attempts_per_invocation"),
        "key_ids": summary.get("key_ids", []),
        "foreign_keys": sorted(set(summary.get("key_ids", [])) - {strict.access_key_id}),
        "baseline_responses": len(calm), "baseline_503": unavailable,
        "baseline_503_share": round(unavailable / len(calm), 4) if calm else None,
    }
    print(f"strict endpoint: {throttle_rate:.0%} throttled, 3-8 ms latency; baseline 503s {unavailable} of "
          f"{len(calm)}; most attempts in one page request {figures['max_attempts_per_page_request']} "
          f"({figures['max_retries_per_page_request']} of them re-sends); "
          f"signed with other keys: {figures['foreign_keys'] or 'none'}")
    return figures


def fmt(counts: dict[str, int]) -> str:
    return " ".join(f"{status}:{count}" for status, count in counts.items()) or "-"


def check_nothing_lost(stack: Stack, load: Load, products: dict[str, int], smoke: bool) -> dict[str, object]:
    """After the faults: every accepted post is stored once and indexed, the index has no drift,
    and the flagship's pages equal its GSI partition."""
    from comments.store import comment_from_item
    from comments.table.keys import PRODUCTS
    from pagination_index import sources

    stored: dict[str, list[str]] = {}
    comments = map(comment_from_item, sources[PRODUCTS].read(POST_SKU, 100_000).items)  # the table's, not the index's
    for comment in comments:
        found = re.search(r"chaos-[0-9a-f]{12}", comment.body)
        if found:
            stored.setdefault(found.group(0), []).append(comment.pk)
    accepted = [post for post in load.posts if post.status == 303]
    refused = [post for post in load.posts if post.status == 503]
    caught_up = wait_until(lambda: manage(stack.env, "verify_index", "--recheck-seconds", "0").returncode == 0,
                           120, every=2)
    verify = manage(stack.env, "verify_index", "--recheck-seconds", "2")
    listing = manage(stack.env, "shell", "-c", "from pagination_index import index; "
                     f"print(' '.join(m for m, _ in index.range({POST_SKU!r}, 0, 10**6)))")
    indexed = set(listing.stdout.split())
    result = {
        "posts": {"303": len(accepted), "503": len(refused),
                  "other": sorted({post.status for post in load.posts} - {303, 503})},
        "accepted_posts_stored_once": all(len(stored.get(post.marker, [])) == 1 for post in accepted),
        "accepted_posts_indexed": all(pk in indexed for post in accepted for pk in stored.get(post.marker, [])),
        "refused_posts_kept_their_text": all(post.kept_text for post in refused),
        "refused_posts_stored_anyway": sum(1 for post in refused if post.marker in stored),
        "sync_caught_up_s": None if caught_up is None else round(caught_up, 1),
        "verify_index_no_drift": verify.returncode == 0,
    }
    equal, shown = crawl_equals_query(stack.front, FLAGSHIP, max(1, -(-products[FLAGSHIP] // PAGE_SIZE)))
    result["flagship_crawl_equals_query"] = equal
    print(f"posts: {result['posts']}; stored once: {result['accepted_posts_stored_once']}; indexed: "
          f"{result['accepted_posts_indexed']}; 503s kept their text: {result['refused_posts_kept_their_text']} "
          f"({result['refused_posts_stored_anyway']} reached DynamoDB anyway); verify_index: "
          f"{'no drift' if result['verify_index_no_drift'] else verify.stdout[-500:] + verify.stderr[-500:]}; "
          f"flagship crawl ({shown} comments) equals its Query: {equal}")
    result["verify_index_output"] = (verify.stdout + verify.stderr)[-2000:]
    return result


if __name__ == "__main__":
    main()
