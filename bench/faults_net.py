"""Several hosts on a real network, with faults between them (issue 43), checked Jepsen-style.

    python -m bench.faults_net           # every scenario
    python -m bench.faults_net --smoke   # the short set (make bench-smoke): under 3 minutes

Hosts are Linux network namespaces on one bridge (root only: `ip netns`, veth pairs, nft), each with
its own address in 10.231.43.0/24 and its own processes:
    ddb   DynamoDB Local                  pg    PostgreSQL, its own cluster under pg_ctl
    r1 r2 Redis primary and replica       s1 s2 s3  Sentinels (quorum 2, down-after 1 s)
    c1 c2 two `sync_index` consumers (the Redis index through redis+sentinel://, WAIT for 1 replica,
          leases of LEASE seconds in PostgreSQL)
The driver (this process, in the root namespace on the bridge's own address) posts comments to
DynamoDB Local, injects one fault per scenario, heals it, and checks the recorded history:
- every post acknowledged by DynamoDB is in the table and, after healing, in the index: `verify_index`
  (a subprocess) is clean within 60 s of healing, and the time it took is the recovery time;
- no shard was applied by two consumers at once: from the consumers' batch log lines (shard, lease
  epoch, checkpoint, time), each epoch belongs to one consumer and, per shard, batches land in epoch
  order;
- no consumer crashed;
- the stream's lag after healing: one more post's time to its index entry.
The web tier: web1 and web2 each run gunicorn (gunicorn.conf.py, 2 workers) with the shop on the
same stores (the Django cache too: CACHE_BACKEND=redis through the Sentinels), behind nginx (the
repository's site config, both web hosts in its upstream) on lb. During every scenario, shoppers
(open loop through nginx: 20 reads and 4 posts a second) read product pages, deep ones included
(past the fast window, where the index is needed), and post comments through the form; every answer
is recorded per web host (nginx names the one that answered). Per scenario: requests and statuses
per host, the 503 share on hosts that could still reach their stores (target at most 1%), 500s
(target none), and every post answered 303 must be in the table (and, with `verify_index` clean, in
the index).
Traffic goes only to the namespaces' addresses; every loop is bounded; the namespaces, the bridge and
every process are removed on the way out, failure or not.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
NET = "10.231.43"
BRIDGE = "px43br"
PREFIX = "px43-"
HOSTS = {"ddb": 10, "pg": 11, "r1": 12, "r2": 13, "s1": 14, "s2": 15, "s3": 16, "c1": 21, "c2": 22,
         "lb": 30, "web1": 31, "web2": 32}
WEBS = ("web1", "web2")
REDIS_HOSTS = ["r1", "r2", "s1", "s2", "s3"]
WEB_PORT, LB_PORT = 8000, 8080
DRIVER = f"{NET}.1"
LEASE = 4.0
SERVICE = "px"
HEAL_SECONDS = 60  # the index must be exact within this many seconds of healing
PG_BIN = Path(shutil.which("pg_ctl") or "/usr/lib/postgresql/15/bin/pg_ctl").parent


def ip(host: str) -> str:
    return f"{NET}.{HOSTS[host]}"


def run(*command: str, check: bool = True, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=check, capture_output=True, text=True, timeout=timeout, **kwargs)


def in_ns(host: str, *command: str) -> list[str]:
    return ["ip", "netns", "exec", PREFIX + host, *command]


class Network:
    """The bridge and one namespace per host; nft tables inside a namespace for partitions."""

    def __init__(self):
        self.made: list[str] = []

    def up(self) -> None:
        self.down()  # what a killed earlier run left behind
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        run("ip", "addr", "add", f"{DRIVER}/24", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        for host in HOSTS:
            ns, outside = PREFIX + host, f"px43{host}b"
            run("ip", "netns", "add", ns)
            self.made.append(ns)
            run("ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
            run("ip", "link", "set", outside, "master", BRIDGE, "up")
            run("ip", "-n", ns, "addr", "add", f"{ip(host)}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")
            run("ip", "-n", ns, "link", "set", "lo", "up")

    def down(self) -> None:
        for host in HOSTS:
            run("ip", "netns", "del", PREFIX + host, check=False)
        run("ip", "link", "del", BRIDGE, check=False)

    def drop(self, host: str, peers: list[str], *, direction: str = "both") -> None:
        """In `host`'s namespace, drop packets to (and/or from) the peers' addresses."""
        addresses = ", ".join(ip(peer) for peer in peers)
        rules = []
        if direction in ("both", "out"):
            rules.append(f"add rule inet fault output ip daddr {{ {addresses} }} drop")
        if direction in ("both", "in"):
            rules.append(f"add rule inet fault input ip saddr {{ {addresses} }} drop")
        script = ("add table inet fault\n"
                  "add chain inet fault input { type filter hook input priority 0; }\n"
                  "add chain inet fault output { type filter hook output priority 0; }\n" + "\n".join(rules) + "\n")
        run(*in_ns(host, "nft", "-f", "-"), input=script)

    def heal(self, host: str) -> None:
        run(*in_ns(host, "nft", "delete", "table", "inet", "fault"), check=False)


class Cluster:
    """The hosts' processes."""

    def __init__(self, folder: Path, net: Network):
        self.folder = folder
        self.net = net
        self.processes: dict[str, subprocess.Popen] = {}

    def spawn(self, name: str, host: str, command: list[str], env: dict | None = None, cwd=None) -> subprocess.Popen:
        log = (self.folder / f"{name}.log").open("a")
        process = subprocess.Popen(in_ns(host, *command), stdout=log, stderr=subprocess.STDOUT, env=env,
                                   cwd=cwd, start_new_session=True)
        self.processes[name] = process
        return process

    def wait_port(self, host: str, port: int, seconds: float = 60) -> None:
        import socket

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                socket.create_connection((ip(host), port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"{host}:{port} did not answer within {seconds} s")

    # --- services ---------------------------------------------------------------------------
    def start_dynamodb(self) -> None:
        from stack.dynamodb_local import jar_dir

        self.spawn("ddb", "ddb", ["java", "-Xmx384m", "-Djava.library.path=./DynamoDBLocal_lib", "-jar",
                                  "DynamoDBLocal.jar", "-sharedDb", "-inMemory", "-port", "8000"], cwd=jar_dir())
        self.wait_port("ddb", 8000)

    def start_postgres(self) -> None:
        data = self.folder / "pg"
        if not data.exists():
            data.mkdir()
            shutil.chown(data, "postgres", "postgres")
            os.chmod(self.folder, 0o755)
            run("runuser", "-u", "postgres", "--", str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
            with (data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {NET}.0/24 trust\n")
        run(*in_ns("pg", "runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(data), "-w",
                   "-l", str(data / "server.log"), "-o",
                   f"-c listen_addresses={ip('pg')} -c port=5432 -c unix_socket_directories={data} -c fsync=off",
                   "start"))

    def stop_postgres(self, mode: str = "fast") -> None:
        run(*in_ns("pg", "runuser", "-u", "postgres", "--", str(PG_BIN / "pg_ctl"), "-D", str(self.folder / "pg"),
                   "-m", mode, "-w", "stop"), check=False)

    def start_redis(self, host: str, replica_of: str | None = None) -> None:
        folder = self.folder / host
        folder.mkdir(exist_ok=True)
        replication = ["--replicaof", ip(replica_of), "6379"] if replica_of else []
        self.spawn(host, host, ["redis-server", "--bind", ip(host), "--port", "6379", "--protected-mode", "no",
                                "--save", "", "--appendonly", "no", "--dir", str(folder), *replication])
        self.wait_port(host, 6379)

    def start_sentinel(self, host: str) -> None:
        folder = self.folder / host
        folder.mkdir(exist_ok=True)
        config = folder / "sentinel.conf"
        if not config.exists():
            config.write_text(
                f"port 26379\nbind {ip(host)}\nprotected-mode no\ndir {folder}\n"
                f"sentinel monitor {SERVICE} {ip('r1')} 6379 2\n"
                f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                f"sentinel failover-timeout {SERVICE} 10000\n")
        self.spawn(host, host, ["redis-server", str(config), "--sentinel"])
        self.wait_port(host, 26379)

    def primary(self) -> str | None:
        import redis

        for sentinel in ("s1", "s2", "s3"):
            try:
                address = redis.Redis(ip(sentinel), 26379, socket_timeout=1,
                                      decode_responses=True).sentinel_get_master_addr_by_name(SERVICE)
                return next(host for host in ("r1", "r2") if ip(host) == address[0])
            except (redis.RedisError, TypeError, StopIteration):
                continue
        return None

    def start_consumer(self, host: str) -> None:
        self.spawn(host, host, [sys.executable, "manage.py", "sync_index"], env=shop_env(), cwd=ROOT)

    def start_web(self, host: str) -> None:
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        # No control socket: both hosts' gunicorns would take the same file in root's home.
        self.spawn(host, host, [gunicorn, "-c", str(ROOT / "gunicorn.conf.py"), "--no-control-socket", "shop.wsgi"],
                   env=web_env(host, self.folder), cwd=ROOT)
        self.wait_port(host, WEB_PORT)

    def start_nginx(self) -> None:
        """nginx on lb with the repository's site config, both web hosts in its upstream. Two changes
        to the rendered site file, for this harness only: the upstream gets the second server (the
        template has one `server ${SHOP_UPSTREAM};` line) and every answer says which web host gave it
        (X-Upstream: nginx's $upstream_addr, empty when nginx answered itself)."""
        from stack.nginx import Nginx, nginx_binary

        proxy = Nginx(self.folder / "nginx", port=LB_PORT, static_root=self.folder / "static",
                      upstream=f"{ip('web1')}:{WEB_PORT}; server {ip('web2')}:{WEB_PORT}",
                      limit_exempt=DRIVER)  # the shoppers all come from the driver: not rate-limited
        conf = proxy.write_config()
        site = proxy.prefix / "shop.conf"
        marker = "add_header X-Cache-Status $upstream_cache_status always;"
        text = site.read_text()
        if marker not in text:
            raise RuntimeError(f"deploy/nginx/shop.conf.template has no {marker!r} line any more")
        site.write_text(text.replace(marker, marker + "\n    add_header X-Upstream $upstream_addr always;", 1))
        binary = nginx_binary()
        run(binary, "-t", "-p", str(proxy.prefix), "-c", str(conf))
        self.spawn("nginx", "lb", [binary, "-p", str(proxy.prefix), "-c", str(conf)])
        self.wait_port("lb", LB_PORT)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                process.wait(30)

    def stop_all(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGCONT)
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
        if (self.folder / "pg").exists():
            self.stop_postgres("immediate")


def shop_env() -> dict:
    sentinels = ",".join(f"{ip(host)}:26379" for host in ("s1", "s2", "s3"))
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "shop.settings", "DJANGO_SECRET_KEY": "bench-only-not-secret",
            "DATABASE_URL": f"postgres://postgres@{ip('pg')}:5432/postgres",
            "PAGINATION_INDEX_BACKEND": "redis",
            "PAGINATION_INDEX_REDIS_URL": f"redis+sentinel://{sentinels}/{SERVICE}/1",
            "DYNAMODB_ENDPOINT_URL": f"http://{ip('ddb')}:8000", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "COMMENTS_TABLE": "comments",
            "SYNC_INDEX_LEASE_SECONDS": str(LEASE), "SYNC_INDEX_POLL_SECONDS": "0.5",
            "SYNC_INDEX_WAIT_REPLICAS": "1", "SYNC_INDEX_WAIT_TIMEOUT_SECONDS": "0.5", "LOG_FORMAT": "json"}


def web_env(host: str, folder: Path) -> dict:
    """A web host's settings: shop_env's stores, and the Django cache on the same Redis through the
    Sentinels (database 0; the index has 1), as production runs it (CACHE_BACKEND=redis)."""
    sentinels = ",".join(f"{ip(sentinel)}:26379" for sentinel in ("s1", "s2", "s3"))
    return {**shop_env(), "CACHE_BACKEND": "redis", "REDIS_URL": f"redis+sentinel://{sentinels}/{SERVICE}/0",
            "DJANGO_STATIC_ROOT": str(folder / "static"), "DJANGO_ALLOWED_HOSTS": ip("lb"),
            "COMMENTS_CURSOR_KEY": "bench-only-cursor-key-not-secret-0123456789",
            "MODERATION_REPORTER_KEY": "bench-only-reporter-key-not-secret-0123456789",
            "GUNICORN_BIND": f"{ip(host)}:{WEB_PORT}", "GUNICORN_WORKERS": "2", "GUNICORN_THREADS": "4",
            "FORWARDED_ALLOW_IPS": ip("lb"), "COMMENTS_CLIENT_IP_HEADER": "X-Forwarded-For",
            # Every shopper is the driver's address: limits high enough never to refuse one, still
            # counted in the cache as in production (a cache that fails shows in the posts' answers).
            "COMMENTS_POSTS_PER_MINUTE": "1000000", "COMMENTS_PRODUCT_POSTS_PER_MINUTE": "1000000",
            "PROMETHEUS_MULTIPROC_DIR": str(folder / f"metrics-{host}"), "LOG_LEVEL": "WARNING"}


def manage(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return run(sys.executable, "manage.py", *args, check=False, timeout=timeout, env=env or shop_env(), cwd=ROOT)


# --- the history -----------------------------------------------------------------------------
class History:
    def __init__(self):
        self.posts: list[dict] = []  # every post and its answer

    def post(self, sku: str, count: int, seed: int) -> int:
        """Write `count` comments; each PutItem's answer is recorded (acknowledged or the error)."""
        from botocore.exceptions import BotoCoreError, ClientError

        from comments.store import put_comments
        from tests.factories import make_comments

        acknowledged = 0
        for comment in make_comments(sku, count, seed=seed):
            try:
                put_comments([comment])
                self.posts.append({"pk": comment.pk, "sku": sku, "answer": "ok", "at": time.time()})
                acknowledged += 1
            except (BotoCoreError, ClientError) as exc:
                self.posts.append({"pk": comment.pk, "sku": sku, "answer": type(exc).__name__, "at": time.time()})
        return acknowledged


WEB_SKU = "WEB-1"
WEB_SEED_COMMENTS = 300  # 15 pages of 20: pages 11-15 are past the fast window (10 pages): the index's
WEB_PAGES = [1, 2, 11, 12, 13, 14, 15]
CLIENT_TIMEOUT = 15  # seconds a shopper waits for an answer (nginx's own proxy timeouts are 60 s)
TRAFFIC_CAP = 240  # seconds: the longest a scenario's shoppers run, whatever the scenario does
READS_PER_S, POSTS_PER_S = 20, 4
IN_FLIGHT = 150  # requests open at once at most (a host that holds them holds many); past it one is skipped


def answering_host(upstream: str | None) -> str:
    """The web host named by nginx's $upstream_addr: "a:8000, b:8000" when nginx tried one and then the
    other (the last one answered); "nginx" when it answered itself (no upstream)."""
    address = (upstream or "").split(",")[-1].strip().rpartition(":")[0]
    return next((web for web in WEBS if ip(web) == address), "nginx")


class Traffic:
    """Shoppers through nginx while a scenario runs, open loop: reads (product pages, deep ones
    included) at READS_PER_S and comment posts at POSTS_PER_S, each sent on time in a pool of
    IN_FLIGHT threads whatever earlier requests are still waiting for, so a web host that hangs
    cannot slow the arrivals at the other (as shoppers who wait for their answer before the next
    request would). Stops when the scenario ends or after TRAFFIC_CAP seconds; every answer is
    recorded with the web host nginx says gave it.

    Requests carry a cookie, so neither nginx's micro-cache nor the app's serves them: every read
    reaches a web host and its stores, which is what the faults are about."""

    def __init__(self, scenario: str):
        self.scenario = scenario
        self.answers: list[dict] = []  # kind, host, status, began, at
        self.posts: list[dict] = []  # token, host, status
        self.skipped = 0
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(IN_FLIGHT)
        self.pool = ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="shopper")
        self.pacer = threading.Thread(target=self.pace, daemon=True)

    def __enter__(self) -> "Traffic":
        self.began = time.monotonic()
        self.deadline = self.began + TRAFFIC_CAP
        self.pacer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.pacer.join(5)
        self.pool.shutdown(wait=True)  # each request ends within CLIENT_TIMEOUT

    def running(self) -> bool:
        return not self.stop.is_set() and time.monotonic() < self.deadline

    def request(self, kind: str, method: str, path: str, form: dict | None = None) -> tuple[str, object]:
        origin = f"http://{ip('lb')}:{LB_PORT}"
        headers = {"Cookie": "faults_net=1"}
        body = None
        if form is not None:
            body = urlencode(form)
            headers.update({"Content-Type": "application/x-www-form-urlencoded", "Origin": origin})
        connection = http.client.HTTPConnection(ip("lb"), LB_PORT, timeout=CLIENT_TIMEOUT)
        host, status, began = "nginx", None, time.monotonic()
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            status = response.status
            host = answering_host(response.getheader("X-Upstream"))
        except TimeoutError:
            status = "timeout"
        except (OSError, http.client.HTTPException) as exc:
            status = type(exc).__name__
        finally:
            connection.close()
        with self.lock:
            self.answers.append({"kind": kind, "host": host, "status": status, "began": began,
                                 "at": time.monotonic()})
        return host, status

    def pace(self) -> None:
        """One request every 1/(READS_PER_S + POSTS_PER_S) seconds, on a fixed schedule."""
        pages = [f"/products/{WEB_SKU}/" + (f"?page={page}" if page > 1 else "") for page in WEB_PAGES]
        every = 1 / (READS_PER_S + POSTS_PER_S)
        sent = 0
        while self.running():
            if self.slots.acquire(blocking=False):
                if sent % (READS_PER_S + POSTS_PER_S) < POSTS_PER_S:
                    self.pool.submit(self.post, sent)
                else:
                    self.pool.submit(self.read, pages[sent % len(pages)])
            else:
                with self.lock:
                    self.skipped += 1
            sent += 1
            self.stop.wait(max(0.0, self.began + sent * every - time.monotonic()))

    def read(self, path: str) -> None:
        try:
            self.request("read", "GET", path)
        finally:
            self.slots.release()

    def post(self, number: int) -> None:
        token = f"faults-net {self.scenario} post {number}"
        try:
            host, status = self.request("post", "POST", f"/products/{WEB_SKU}/comments/",
                                        {"author": "Faults", "rating": "4", "body": token})
            with self.lock:
                self.posts.append({"token": token, "host": host, "status": status})
        finally:
            self.slots.release()

    def summary(self, impaired: list[str], healed_at: float | None) -> dict:
        """Per web host: requests and answers by status, over the whole scenario and over the fault
        (requests begun between the scenario's start and healing), the 503 share, latency, and the last
        answer that was not a 200 or a 303 after healing (seconds: the web side's recovery)."""
        def count(answers: list[dict]) -> dict[str, int]:
            statuses: dict[str, int] = {}
            for answer in answers:
                statuses[str(answer["status"])] = statuses.get(str(answer["status"]), 0) + 1
            return dict(sorted(statuses.items()))

        hosts = {}
        for host in (*WEBS, "nginx"):
            mine = [answer for answer in self.answers if answer["host"] == host]
            if not mine and host == "nginx":
                continue
            statuses = count(mine)
            during = [answer for answer in mine if healed_at and answer["began"] <= healed_at]
            bad_after = [answer["at"] - healed_at for answer in mine
                         if healed_at and answer["at"] > healed_at and answer["status"] not in (200, 303)]
            times = sorted(answer["at"] - answer["began"] for answer in mine)
            hosts[host] = {"requests": len(mine), "statuses": statuses,
                           "share_503": round(statuses.get("503", 0) / len(mine), 4) if mine else None,
                           # answered_after_heal: begun during the fault, answered only once it healed (held)
                           "during_fault": {"requests": len(during), "statuses": count(during),
                                            "answered_after_heal": sum(a["at"] > healed_at for a in during)},
                           "cut_from_a_store": host in impaired,
                           "latency_ms": {"p50": round(times[len(times) // 2] * 1000),
                                          "max": round(times[-1] * 1000)} if times else None,
                           "last_error_after_heal_s": round(max(bad_after), 1) if bad_after else None}
        return {"hosts": hosts, "fault_s": round(healed_at - self.began, 1) if healed_at else None,
                "skipped_client_busy": self.skipped,
                "posts": len(self.posts), "posts_303": sum(post["status"] == 303 for post in self.posts),
                "posts_503": sum(post["status"] == 503 for post in self.posts)}


EXPECTED = ("200", "303", "404", "503")  # a page, a post's redirect, a missing page, "try again later"


def web_problems(name: str, web: dict) -> list[str]:
    """The issue's targets: no 500 anywhere (nor any answer that is not a page, a redirect, a 404 or a
    503), at most 1% 503 on the web hosts that could still reach their stores."""
    problems = []
    for host, seen in web["hosts"].items():
        odd = {status: count for status, count in seen["statuses"].items() if status not in EXPECTED}
        if odd:
            problems.append(f"{name}: {host} answered {odd}")
        if host in WEBS and not seen["cut_from_a_store"] and (seen["share_503"] or 0) > 0.01:
            problems.append(f"{name}: {host} reached its stores but answered 503 to {seen['share_503']:.1%}")
    return problems


def stored_web_posts() -> dict[str, str]:
    """Every comment on WEB_SKU in the table (a consistent Scan): body -> pk."""
    from comments.store import comment_from_item
    from comments.table.client import dynamodb
    from comments.table.keys import table_name

    found, start = {}, None
    for _ in range(1000):  # a few pages at most; bounded all the same
        kwargs = {"ExclusiveStartKey": start} if start else {}
        answer = dynamodb().scan(TableName=table_name(), ConsistentRead=True, **kwargs)
        for item in answer["Items"]:
            comment = comment_from_item(item)
            if comment.sku == WEB_SKU:
                found[comment.body] = comment.pk
        start = answer.get("LastEvaluatedKey")
        if not start:
            break
    return found


def batches(folder: Path) -> list[dict]:
    """Every batch the consumers applied, from their log lines: consumer, shard, epoch, time."""
    found = []
    for consumer in ("c1", "c2"):
        path = folder / f"{consumer}.log"
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("message") == "sync batch" and entry.get("records"):
                found.append({"consumer": consumer, "shard": entry["shard"], "epoch": entry["epoch"],
                              "records": entry["records"], "at": entry["time"]})
    return found


def check_batches(applied: list[dict]) -> list[str]:
    """No shard applied by two consumers at once: an epoch has one consumer, and per shard the
    batches land in epoch order (an older lease never writes after a newer one)."""
    problems = []
    owners: dict[tuple, set] = {}
    for batch in applied:
        owners.setdefault((batch["shard"], batch["epoch"]), set()).add(batch["consumer"])
    problems += [f"shard {shard} epoch {epoch} applied by {sorted(who)}" for (shard, epoch), who in owners.items()
                 if len(who) > 1]
    by_shard: dict[str, list] = {}
    for batch in sorted(applied, key=lambda b: b["at"]):
        by_shard.setdefault(batch["shard"], []).append(batch["epoch"])
    problems += [f"shard {shard}: epochs out of order {epochs}" for shard, epochs in by_shard.items()
                 if epochs != sorted(epochs)]
    return problems


VERIFY_OUTPUT: list[str] = []  # the last verify_index's complaint, for the report


def verify_within(seconds: float) -> float | None:
    """Seconds until `verify_index` is clean (None: not within `seconds`)."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        done = manage("verify_index", "--recheck-seconds", "0", timeout=60)
        if done.returncode == 0:
            return round(time.monotonic() - started, 1)
        VERIFY_OUTPUT[:] = [(done.stdout + done.stderr)[-1500:]]
        time.sleep(1)
    return None


def probe_lag(history: History, seconds: float = HEAL_SECONDS) -> float | None:
    """Stream lag after healing: seconds from one new post's acknowledgement to its index entry."""
    from pagination_index import get_index
    from pagination_index.backends.base import IndexUnavailable

    group = f"PROBE-{len(history.posts)}"
    if not history.post(group, 1, len(history.posts)):
        return None
    posted = time.monotonic()
    index = get_index()
    while time.monotonic() - posted < seconds:
        try:
            if index.count(group) == 1:
                return round(time.monotonic() - posted, 2)
        except IndexUnavailable:
            pass
        time.sleep(0.05)
    return None


# --- scenarios ---------------------------------------------------------------------------------
def holder(folder: Path) -> str | None:
    """The consumer that applied the last batch."""
    applied = batches(folder)
    return applied[-1]["consumer"] if applied else None


def wait_until(condition, seconds: float, step: float = 0.2) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return False


def scenario_redis_failover(cluster: Cluster, net: Network, history: History, seed: int) -> dict:
    """The replica is cut off from the primary while 200 comments are posted and consumed, then the
    primary is killed (-9): the Sentinels promote the replica, which never got those writes."""
    old = cluster.primary() or "r1"
    replica = "r2" if old == "r1" else "r1"
    net.drop(replica, [old])
    posted = history.post("FAIL-1", 200, seed)
    time.sleep(3)  # the consumers apply them on the primary; WAIT sees no replica, checkpoints stay
    cluster.kill(old)
    # Healed only once promoted: the dead primary's kernel keeps retransmitting what its socket held,
    # which a healed link would still deliver to the replica.
    promoted = wait_until(lambda: cluster.primary() == replica, 30)
    net.heal(replica)
    healed = time.monotonic()
    cluster.start_redis(old, replica_of=replica)  # comes back empty, as the new primary's replica
    return {"done": f"replica cut from primary, 200 posts, primary kill -9, Sentinel failover to {replica}",
            "posted": posted, "promoted": promoted, "healed_at": healed}


def scenario_consumer_pg_partition(cluster: Cluster, net: Network, history: History, seed: int) -> dict:
    """The consumer holding the shard loses PostgreSQL (both ways) for 3 leases while posts go on."""
    victim = holder(cluster.folder) or "c1"
    net.drop(victim, ["pg"])
    posted = history.post("PART-1", 50, seed)
    time.sleep(3 * LEASE)
    posted += history.post("PART-1", 50, seed + 1)
    net.heal(victim)
    return {"done": f"{victim} partitioned from PostgreSQL for {3 * LEASE:.0f} s (3 leases)", "posted": posted,
            "healed_at": time.monotonic()}


def scenario_consumer_redis_partition(cluster: Cluster, net: Network, history: History, seed: int) -> dict:
    victim = holder(cluster.folder) or "c1"
    net.drop(victim, ["r1", "r2", "s1", "s2", "s3"])
    posted = history.post("PART-2", 50, seed)
    time.sleep(3 * LEASE)
    net.heal(victim)
    return {"done": f"{victim} partitioned from Redis and the Sentinels for {3 * LEASE:.0f} s", "posted": posted,
            "healed_at": time.monotonic()}


def scenario_pause(cluster: Cluster, net: Network, history: History, seed: int) -> dict:
    victim = holder(cluster.folder) or "c1"
    cluster.kill(victim, signal.SIGSTOP)
    posted = history.post("PAUSE-1", 50, seed)
    time.sleep(3 * LEASE)
    cluster.kill(victim, signal.SIGCONT)
    posted += history.post("PAUSE-1", 20, seed + 1)
    return {"done": f"{victim} paused (SIGSTOP) for {3 * LEASE:.0f} s (3 leases)", "posted": posted,
            "healed_at": time.monotonic()}


def scenario_partial_partition(cluster: Cluster, net: Network, history: History, seed: int) -> dict:
    """c1 reaches PostgreSQL and c2, c2 reaches c1 but not PostgreSQL."""
    net.drop("c2", ["pg"])
    posted = history.post("PART-3", 50, seed)
    time.sleep(2 * LEASE)
    net.heal("c2")
    return {"done": "partial: c2 cut from PostgreSQL, c1 not", "posted": posted, "healed_at": time.monotonic()}


def scenario_postgres_restart(cluster: Cluster, net: Network, history: History, seed: int) -> dict:
    cluster.stop_postgres("immediate")
    posted = history.post("PGR-1", 50, seed)
    time.sleep(2)
    cluster.start_postgres()
    return {"done": "PostgreSQL stopped (immediate) and started again", "posted": posted,
            "healed_at": time.monotonic()}


def scenario_latency(cluster: Cluster, net: Network, history: History, seed: int) -> dict:
    """The consumers' links get slow and lossy: netem delay, loss and reordering where the kernel has
    sch_netem; else (this machine's kernel has none) nft's random 5% loss plus a tbf rate limit."""
    done = "consumers' links: netem delay 50±20 ms, 2% loss, 5% reordering"
    netem = all(run(*in_ns(host, "tc", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "50ms", "20ms",
                           "loss", "2%", "reorder", "5%"), check=False).returncode == 0 for host in ("c1", "c2"))
    if not netem:
        done = "consumers' links: 5% random loss (nft numgen) and 2 Mbit/s (tbf); no sch_netem in this kernel"
        for host in ("c1", "c2"):
            run(*in_ns(host, "tc", "qdisc", "del", "dev", "eth0", "root"), check=False)
            run(*in_ns(host, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "2mbit", "burst", "32kbit",
                       "latency", "400ms"))
            script = ("add table inet fault\n"
                      "add chain inet fault input { type filter hook input priority 0; }\n"
                      "add chain inet fault output { type filter hook output priority 0; }\n"
                      "add rule inet fault input numgen random mod 100 < 5 drop\n"
                      "add rule inet fault output numgen random mod 100 < 5 drop\n")
            run(*in_ns(host, "nft", "-f", "-"), input=script)
    posted = history.post("LAT-1", 50, seed)
    time.sleep(2 * LEASE)
    for host in ("c1", "c2"):
        run(*in_ns(host, "tc", "qdisc", "del", "dev", "eth0", "root"), check=False)
        net.heal(host)
    return {"done": done, "posted": posted, "healed_at": time.monotonic()}


WEB_FAULT_SECONDS = 10


def scenario_web_redis_partition(cluster: Cluster, net: Network, history: History, seed: int) -> dict:
    """web1 loses Redis and the Sentinels (both ways): its index and its Django cache; web2 keeps them."""
    net.drop("web1", REDIS_HOSTS)
    time.sleep(WEB_FAULT_SECONDS)
    net.heal("web1")
    return {"done": f"web1 partitioned from Redis and the Sentinels for {WEB_FAULT_SECONDS} s (web2 not)",
            "posted": 0, "healed_at": time.monotonic()}


def scenario_web_pg_partition(cluster: Cluster, net: Network, history: History, seed: int) -> dict:
    """web1 loses PostgreSQL (both ways): products, sessions; web2 keeps it."""
    net.drop("web1", ["pg"])
    time.sleep(WEB_FAULT_SECONDS)
    net.heal("web1")
    return {"done": f"web1 partitioned from PostgreSQL for {WEB_FAULT_SECONDS} s (web2 not)", "posted": 0,
            "healed_at": time.monotonic()}


def scenario_web_redis_one_way(cluster: Cluster, net: Network, history: History, seed: int) -> dict:
    """One way only: web1's packets reach Redis and the Sentinels, their answers never come back (a
    command may be applied and its answer lost: an INCR counted, a SET done, seen as a timeout)."""
    net.drop("web1", REDIS_HOSTS, direction="in")
    time.sleep(WEB_FAULT_SECONDS)
    net.heal("web1")
    return {"done": f"one-way: Redis' and the Sentinels' packets to web1 dropped for {WEB_FAULT_SECONDS} s "
                    "(web1's own get through)", "posted": 0, "healed_at": time.monotonic()}


# The web hosts each scenario cuts from a store they need (or whose store is down for everybody):
# their 503s are expected; every other web host is held to at most 1%.
IMPAIRED = {"redis_failover": list(WEBS), "postgres_restart": list(WEBS), "web_redis_partition": ["web1"],
            "web_pg_partition": ["web1"], "web_redis_one_way": ["web1"]}

SMOKE = [scenario_redis_failover, scenario_pause]
FULL = [scenario_redis_failover, scenario_consumer_pg_partition, scenario_consumer_redis_partition,
        scenario_pause, scenario_partial_partition, scenario_postgres_restart, scenario_latency,
        scenario_web_redis_partition, scenario_web_pg_partition, scenario_web_redis_one_way]
SCENARIOS = {scenario.__name__.removeprefix("scenario_"): scenario for scenario in FULL}


WEB_TAIL_SECONDS = 5


def web_line(web: dict) -> str:
    """The table's column: "web1 412 (3.1% 503, cut) · web2 398 (0.0% 503)", with any other error counted."""
    parts = []
    for host, seen in web["hosts"].items():
        other = sum(count for status, count in seen["statuses"].items() if status not in EXPECTED)
        parts.append(f"{host} {seen['requests']} ({seen['share_503'] or 0:.1%} 503"
                     + (f", {other} other" if other else "") + (", cut" if seen["cut_from_a_store"] else "") + ")")
    return " · ".join(parts)


def start_web_tier(cluster: Cluster, history: History, folder: str) -> None:
    """Static files, the product the shoppers read and its first WEB_SEED_COMMENTS comments, both web
    hosts and nginx; then both hosts must answer a deep page through nginx."""
    from shop.models import Product

    for host in WEBS:  # prometheus_client's multiprocess folders (gunicorn.conf.py): made before any import
        (Path(folder) / f"metrics-{host}").mkdir(exist_ok=True)
    done = manage("collectstatic", "--no-input", "-v", "0", env=web_env("web1", Path(folder)))
    if done.returncode:
        raise RuntimeError(f"collectstatic: {done.stderr[-2000:]}")
    Product.objects.get_or_create(sku=WEB_SKU, defaults={"name": "Kettle under faults", "price": "9.99"})
    history.post(WEB_SKU, WEB_SEED_COMMENTS, 2)
    for host in WEBS:
        cluster.start_web(host)
    cluster.start_nginx()
    probe = Traffic("warm-up")
    answered: set = set()
    for _ in range(60):  # bounded: about 30 s
        host, status = probe.request("read", "GET", f"/products/{WEB_SKU}/?page={WEB_PAGES[-1]}")
        if status == 200:
            answered.add(host)
        if answered >= set(WEBS):
            return
        time.sleep(0.5)
    raise RuntimeError(f"the web hosts did not both serve a deep page: {probe.answers[-4:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="only this scenario (repeatable; default: all, or the smoke set)")
    args = parser.parse_args()
    from stack.nginx import nginx_binary

    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("ip", "nft", "tc", "redis-server", "java")) \
            or not nginx_binary():
        print("bench.faults_net needs root, ip, nft, tc, redis-server, java and nginx", file=sys.stderr)
        return 1
    os.environ.update(shop_env())
    import django

    django.setup()
    from bench.common import format_table, machine_info, shown, stamp, write_json

    load, when = os.getloadavg(), stamp()
    net = Network()
    rows, problems = [], []
    with tempfile.TemporaryDirectory(prefix="faults-net-") as folder:
        cluster = Cluster(Path(folder), net)
        try:
            net.up()
            cluster.start_dynamodb()
            cluster.start_postgres()
            cluster.start_redis("r1")
            cluster.start_redis("r2", replica_of="r1")
            for sentinel in ("s1", "s2", "s3"):
                cluster.start_sentinel(sentinel)
            for step in (("migrate", "--no-input", "-v", "0"), ("create_tables",)):
                done = manage(*step)
                if done.returncode:
                    raise RuntimeError(f"{step}: {done.stderr[-2000:]}")
            cluster.start_consumer("c1")
            cluster.start_consumer("c2")
            history = History()
            history.post("WARM-1", 20, 1)
            start_web_tier(cluster, history, folder)
            if verify_within(HEAL_SECONDS) is None:
                raise RuntimeError("the warm-up never reached the index")
            chosen = [SCENARIOS[name] for name in args.scenario] if args.scenario else SMOKE if args.smoke else FULL
            web_posts = web_acknowledged = 0
            for number, scenario in enumerate(chosen, start=2):
                name = scenario.__name__.removeprefix("scenario_")
                print(f"-- {name}", flush=True)
                started = time.monotonic()
                with Traffic(name) as traffic:
                    try:
                        outcome = scenario(cluster, net, history, number * 100)
                    except (subprocess.SubprocessError, OSError, RuntimeError) as exc:
                        problems.append(f"{name}: the scenario itself failed: {exc}")
                        for host in HOSTS:
                            net.heal(host)
                        outcome = {"done": f"failed: {exc}", "posted": 0}
                    time.sleep(WEB_TAIL_SECONDS)  # the shoppers go on after healing: the web's recovery
                recovered = verify_within(HEAL_SECONDS)
                healed_at = outcome.pop("healed_at", None)  # verify_within starts at healing
                web = traffic.summary(IMPAIRED.get(name, []), healed_at)
                stored = stored_web_posts()
                web["posts_303_not_in_table"] = [post["token"] for post in traffic.posts
                                                 if post["status"] == 303 and post["token"] not in stored]
                # Not lost, but worth knowing: a post answered otherwise (503: "post it again") yet stored
                # would appear twice once the shopper posts it again.
                web["posts_not_303_but_stored"] = [f"{post['token']} ({post['status']})" for post in traffic.posts
                                                   if post["status"] != 303 and post["token"] in stored]
                web_posts += len(traffic.posts)
                web_acknowledged += web["posts_303"]
                outcome.update(scenario=name, seconds=round(time.monotonic() - started, 1),
                               verify_clean_after_heal_s=recovered, lag_after_heal_s=probe_lag(history), web=web,
                               crashed=[name for name in ("c1", "c2", *WEBS, "nginx")
                                        if cluster.processes[name].poll() is not None])
                if recovered is None:
                    problems.append(f"{name}: index not exact within {HEAL_SECONDS} s of healing: {VERIFY_OUTPUT}")
                problems += web_problems(name, web)
                if web["posts_303_not_in_table"]:
                    problems.append(f"{name}: posts answered 303 not in the table: {web['posts_303_not_in_table']}")
                if outcome["crashed"]:
                    problems.append(f"{name}: process(es) exited: {outcome['crashed']}")
                    for crashed in outcome["crashed"]:
                        if crashed in WEBS:
                            cluster.start_web(crashed)
                        elif crashed == "nginx":
                            cluster.start_nginx()
                        else:
                            cluster.start_consumer(crashed)
                rows.append(outcome)
            applied = batches(Path(folder))
            problems += check_batches(applied)
            acknowledged = [post for post in history.posts if post["answer"] == "ok"]
            history_summary = {"posts": len(history.posts), "acknowledged": len(acknowledged),
                               "web_posts": web_posts, "web_posts_303": web_acknowledged,
                               "batches": len(applied), "consumers": sorted({b["consumer"] for b in applied}),
                               "epochs": sorted({(b["shard"][-8:], b["epoch"], b["consumer"]) for b in applied})}
        finally:
            cluster.stop_all()
            net.down()
            for leftover in ("c1.log", "c2.log", "web1.log", "web2.log", "nginx/error.log"):
                path = Path(folder) / leftover
                if path.exists():
                    shutil.copy(path, Path(tempfile.gettempdir()) / f"faults-net-{leftover.replace('/', '-')}")
    print(format_table(["scenario", "done", "posted", "verify clean after (s)", "lag after (s)", "web answers",
                        "web posts 303/sent"],
                       [[row["scenario"], row["done"], str(row["posted"]),
                         str(row["verify_clean_after_heal_s"]), str(row["lag_after_heal_s"]), web_line(row["web"]),
                         f"{row['web']['posts_303']}/{row['web']['posts']}"] for row in rows], left=2))
    print("problems:", problems or "none")
    path = write_json("faults_net", args.smoke, when, {
        "machine": machine_info({}, load, "2 cores shared with other helpers; every host a network namespace "
                                "of this machine on one bridge"),
        "lease_seconds": LEASE, "rows": rows, "history": history_summary, "problems": problems,
    })
    print(f"wrote {shown(path)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
