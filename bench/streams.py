"""The stream consumers on a stream shaped like AWS's (issue 28's targets).

    .venv/bin/python -m bench.streams [--writes N] [--max-shards S] [--rollover-seconds T] [--rate R]
        [--backend relational|redis|files|dynamodb] [--kills K] [--lease-seconds L] [--skip-lambda] [--smoke]
        [--keep DIR]

DynamoDB Local behind the strict endpoint with its emulated stream (stack/strict_endpoint/streams.py):
shards roll over every T seconds, the stream grows from 1 to 8 shards and then to S, 30% of GetRecords
pages from open shards are empty. A writer makes N mixed writes (inserts 60%, deletes 15%, rating
changes 15%, moves to another product 10%) over 12 products.

1. `sync_index`: two `manage.py sync_index` processes (active and standby, each with credentials of its
   own so the endpoint's log tells their calls apart, leases of L seconds) follow the stream; the
   active one is SIGKILLed K times (default 2) while the writes go on and started again. Measured:
   apply lag of sampled inserts (written -> present in the index, p50/p99; and without the samples a
   kill or a mass roll-over held up), records per second, the consumers' CPU per write, DescribeStream calls per consumer per 10 s in
   the steady part (after the last split; the listings just after a mass roll-over or a restart
   counted apart), then `verify_index` as the consumers were stopped, a
   drain (`sync_index --once`, roll-overs stopped) of what they had not applied, `verify_index`
   again (clean or not: a write missing now is lost, not late) and the stale marks.
2. Lambda: the same write mix through `stack/lambda_driver.py` (8 shards, one invocation per shard at
   a time), then `verify_index`.
3. Lambda while `rebuild_index` runs: the same again, with `manage.py rebuild_index` (in a process of
   its own) started once a third of the writes are made, so products are fenced, their records
   journaled by the handler and replayed after each swap while the writes go on; then `verify_index`.

The index is `--backend`'s (default relational): relational on PostgreSQL when it answers on
127.0.0.1:5432 (a throw-away database, which also holds the checkpoints), else SQLite (lag read from
its table); redis on the machine's Redis under a key prefix of the run's own; files in the run's
folder; dynamodb in a table of the run's own beside the comments (lag read through the index's
public API: at(count_newer(entry)) is the entry). Figures are printed and
saved to bench/results/streams[-smoke]-<UTC time>.json with the machine's load average. With --keep
DIR the run's working files stay in DIR for a look at the tail: the consumers' and the endpoint's
logs (run with LOG_LEVEL=DEBUG LOG_FORMAT=json for every poll's and batch's timing), `lags.json`
(each sampled insert's write time and lag, the kills and the mass roll-overs) and `stream_calls.json`
(every DynamoDB Streams call the endpoint logged: when, which consumer, the answer, how long it took).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCTS = [f"S-{n:02d}" for n in range(12)]
BACKENDS = ("relational", "redis", "files", "dynamodb")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=20_000)
    parser.add_argument("--max-shards", type=int, default=120)
    parser.add_argument("--rollover-seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=200.0, help="writes per second")
    parser.add_argument("--smoke", action="store_true", help="600 writes, 1 -> 4 -> 12 shards, roll-over every 5 s")
    parser.add_argument("--skip-lambda", action="store_true")
    parser.add_argument("--backend", choices=BACKENDS, default="relational",
                        help="the index backend the consumers write (default: relational)")
    parser.add_argument("--kills", type=int, default=2, choices=range(0, 10), metavar="N",
                        help="SIGKILLs of the active consumer during the writes (default 2; 0 for the apply lag alone)")
    parser.add_argument("--lease-seconds", type=float, default=5.0,
                        help="SYNC_INDEX_LEASE_SECONDS of the consumers: how soon the standby takes a dead one's shards")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep the run's logs, lags.json and stream_calls.json in DIR (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.writes, args.max_shards, args.rollover_seconds, args.rate = 600, 12, 5.0, 100.0
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    load_at_start = os.getloadavg()
    from stack.dynamodb_local import DynamoDBLocal
    from stack.strict_endpoint import StrictEndpoint

    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with (contextlib.nullcontext(str(args.keep)) if args.keep else tempfile.TemporaryDirectory()) as tmp_name, \
            DynamoDBLocal() as dynamodb:
        tmp = Path(tmp_name)
        config = {"creating_seconds": 0, "streams": {
            "class": "stack.strict_endpoint.streams.EmulatedStreams",
            "options": {"seed": 28, "rollover_seconds": args.rollover_seconds, "empty_page_rate": 0.3}}}
        with StrictEndpoint(dynamodb.endpoint_url, config=config, log_path=tmp / "endpoint.log") as endpoint:
            database = _database(tmp)
            run_id = uuid.uuid4().hex[:8]
            env = {**os.environ, **endpoint.env(), "DJANGO_SETTINGS_MODULE": "shop.settings",
                   "DATABASE_URL": database, "PAGINATION_INDEX_BACKEND": args.backend,
                   "COMMENTS_TABLE": f"bench-streams-{run_id}", "SYNC_INDEX_POLL_SECONDS": "0.5",
                   "SYNC_INDEX_LEASE_SECONDS": str(args.lease_seconds), "DJANGO_SECRET_KEY": "bench-only-not-secret",
                   **_backend_env(args.backend, run_id, tmp)}
            os.environ.update(env)
            import django

            django.setup()
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            call_command("create_tables", verbosity=0)
            try:
                report = {"sync_index": run_sync(args, endpoint, env, tmp)}
                if not args.skip_lambda:
                    report["lambda"] = run_lambda(args, endpoint)
                    report["lambda_during_rebuild"] = run_lambda(args, endpoint, rebuild_env=env)
            finally:
                if args.backend != "relational":
                    from pagination_index import get_index

                    get_index().clear()
                _drop(database)
    from bench.common import machine_info, stamp, write_json

    report["settings"] = {"writes": args.writes, "max_shards": args.max_shards,
                          "rollover_seconds": args.rollover_seconds, "rate": args.rate, "empty_page_rate": 0.3,
                          "lease_seconds": args.lease_seconds,
                          "index": args.backend if args.backend != "relational" else
                          "relational/" + ("postgresql" if report_db_is_pg(os.environ["DATABASE_URL"]) else "sqlite"),
                          "checkpoints": "postgresql" if report_db_is_pg(os.environ["DATABASE_URL"]) else "sqlite"}
    report["machine"] = machine_info({}, load_at_start, "shared machine: 2 cores, other helpers' tests running")
    print_report(report)
    path = write_json("streams", args.smoke, stamp(), report)
    print(f"saved {path.relative_to(ROOT)}")
    clean = all(report.get(part, {}).get("verify_clean", True) for part in ("sync_index", "lambda", "lambda_during_rebuild"))
    clean = clean and report.get("lambda_during_rebuild", {}).get("rebuild", {}).get("returncode", 0) == 0
    return 0 if clean else 1


POSTGRES = "postgres://postgres@127.0.0.1:5432"


def _backend_env(backend: str, run_id: str, tmp: Path) -> dict:
    """Where each backend keeps this run's index: Redis under a prefix of the run's own (in the
    index's database of the local Redis), files in the run's folder, DynamoDB in a table beside the
    comments table; the relational one in the run's database."""
    return {"redis": {"PAGINATION_INDEX_KEY_PREFIX": f"bench-streams-{run_id}:"},
            "files": {"PAGINATION_INDEX_PATH": str(tmp / "index")},
            "dynamodb": {"PAGINATION_INDEX_DYNAMODB_TABLE": f"bench-streams-{run_id}-pidx"}}.get(backend, {})


def _database(tmp: Path) -> str:
    """A throw-away PostgreSQL database when the server answers (two consumer processes and a lag
    watcher share it), else SQLite in WAL mode."""
    try:
        import psycopg

        name = f"bench_streams_{os.getpid()}"
        with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True, connect_timeout=2) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return f"{POSTGRES}/{name}"
    except Exception:
        return f"sqlite:///{tmp / 'bench.sqlite3'}"


def _drop(database: str) -> None:
    if not report_db_is_pg(database):
        return
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(f"{POSTGRES}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database.rsplit("/", 1)[1]}" WITH (FORCE)')


def report_db_is_pg(database: str) -> bool:
    return database.startswith("postgres")


# --- writes ---------------------------------------------------------------------------------------
class Writer(threading.Thread):
    """Mixed writes at `rate` per second; remembers when each sampled insert was written. One write in
    10 is sampled: with every insert sampled (tried), the writer, which shares its process with the
    watcher's queries, made 128-141 of the 200 writes a second asked (197 with one in 10)."""

    def __init__(self, count: int, rate: float, seed: int, on_progress=None):
        super().__init__(daemon=True)
        self.count, self.rate, self.rng = count, rate, random.Random(seed)
        self.on_progress = on_progress
        self.samples: dict[str, float] = {}  # PK -> write time
        self.keys: dict[str, tuple[str, str]] = {}  # PK -> (product, SK) of a sample, where to look for it
        self.written: dict[str, float] = {}  # every sample's write time (samples loses deleted ones)
        self.done = 0

    def run(self):
        from comments.services import comment_create
        from comments.table.client import dynamodb
        from comments.table.keys import table_name

        live: list = []
        started = time.monotonic()
        for n in range(self.count):
            kind = self.rng.random()
            if kind < 0.6 or len(live) < 20:
                comment = comment_create(sku=self.rng.choice(PRODUCTS), author="bench", rating=self.rng.randint(1, 5),
                                         body="stream bench")
                live.append(comment)
                if n % 10 == 0:
                    self.keys[comment.pk] = (comment.sku, comment.sk)
                    self.samples[comment.pk] = self.written[comment.pk] = time.time()
            else:
                comment = live.pop(self.rng.randrange(len(live)))
                key = {"PK": {"S": comment.pk}, "SK": {"S": comment.sk}}
                if kind < 0.75:
                    self.samples.pop(comment.pk, None)  # it may never be in the index: not a lag sample
                    dynamodb().delete_item(TableName=table_name(), Key=key)
                elif kind < 0.9:
                    rating = self.rng.randint(1, 5)
                    dynamodb().update_item(TableName=table_name(), Key=key,
                                           UpdateExpression="SET rating = :r, PK2R = :g",
                                           ExpressionAttributeValues={":r": {"N": str(rating)},
                                                                      ":g": {"S": f"{comment.sku}/{rating}"}})
                    live.append(comment)
                else:
                    sku = self.rng.choice(PRODUCTS)
                    dynamodb().update_item(TableName=table_name(), Key=key, UpdateExpression="SET PK2 = :s, PK2R = :g",
                                           ExpressionAttributeValues={":s": {"S": sku},
                                                                      ":g": {"S": f"{sku}/{comment.rating}"}})
                    if comment.pk in self.keys:
                        self.keys[comment.pk] = (sku, comment.sk)
                    live.append(dataclasses.replace(comment, sku=sku))
            self.done = n + 1
            if self.on_progress:
                self.on_progress(self.done)
            delay = started + (n + 1) / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)


class LagWatcher(threading.Thread):
    """Polls the index for the sampled inserts: lag = present - written. The relational index is
    asked for all pending members in one query; any other backend through its public API, as a
    page would find the entry: at(count_newer(entry)) is the entry."""

    def __init__(self, writer: Writer):
        super().__init__(daemon=True)
        self.writer, self.lags, self.stop = writer, {}, threading.Event()

    def run(self):
        from django.db import connection

        from pagination_index import get_index
        from pagination_index.backends.relational import RelationalIndex

        index = get_index()
        relational = isinstance(index, RelationalIndex)
        while not self.stop.wait(0.1 if relational else 0.25):
            pending = [pk for pk in list(self.writer.samples) if pk not in self.lags]
            if pending:
                now = time.time()
                for pk in self._present(index, relational, pending):
                    written = self.writer.samples.get(pk)
                    if written is not None:
                        self.lags[pk] = now - written
        connection.close()

    def _present(self, index, relational: bool, pending: list[str]):
        if relational:
            from pagination_index.models import IndexEntry

            return IndexEntry.objects.filter(member__in=pending).values_list("member", flat=True).distinct()
        present = []
        for pk in pending:
            group, sort_key = self.writer.keys[pk]
            if index.at(group, index.count_newer(group, sort_key, pk)) == (pk, sort_key):
                present.append(pk)
        return present


# Seconds after a mass roll-over in which a consumer's DescribeStream calls are counted as that
# roll-over's listing.
ROLLOVER_WINDOW = 10.0


class TopologyWatcher(threading.Thread):
    """Notes the moments at least half the open shards closed at once (a roll-over of a generation,
    or a split), from the endpoint's stream status four times a second."""

    def __init__(self, endpoint):
        super().__init__(daemon=True)
        self.endpoint, self.mass_closes, self.stop = endpoint, [], threading.Event()

    def run(self):
        seen = None
        while not self.stop.wait(0.25):
            try:
                status = next(iter(self.endpoint.hook_status("streams").values()), None)
            except Exception:  # the endpoint is busy or between tables: try again
                continue
            if not status:
                continue
            if seen and status["shards"] - seen["shards"] >= max(seen["open_shards"] // 2, 1):
                self.mass_closes.append(time.time())
            seen = status


# --- 1. sync_index ---------------------------------------------------------------------------------
def run_sync(args, endpoint, env, tmp: Path) -> dict:
    keys = {name: endpoint.add_credentials() for name in ("active", "standby")}

    def start(name):
        key, secret = keys[name]
        log = open(tmp / f"sync-{name}.log", "ab")
        return subprocess.Popen([sys.executable, "manage.py", "sync_index", "-v", "0"], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT,
                                env={**env, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret})

    consumers = {"active": start("active")}
    time.sleep(1.0)  # the active one takes the leases first
    consumers["standby"] = start("standby")
    phases = {int(args.writes * 0.15): 8, int(args.writes * 0.4): args.max_shards}
    kills = {int(args.writes * (n + 1) / (args.kills + 1)) for n in range(args.kills)}
    state = {"steady_from": None, "killed": 0, "kills": [], "cpu_seconds": 0.0}

    def on_progress(done):
        if done in phases:
            endpoint.configure_hook("streams", shards=phases[done])
            if phases[done] == args.max_shards:
                state["steady_from"] = time.time() + 5
        if done in kills:
            state["cpu_seconds"] += _cpu_seconds(consumers["active"].pid)
            consumers["active"].send_signal(signal.SIGKILL)
            consumers["active"].wait()
            state["killed"] += 1
            state["kills"].append(time.time())
            consumers["active"] = start("active")

    writer = Writer(args.writes, args.rate, seed=1, on_progress=on_progress)
    watcher = LagWatcher(writer)
    topology = TopologyWatcher(endpoint)
    started = time.time()
    topology.start()
    watcher.start()
    writer.start()
    writer.join()
    written = time.time()
    deadline = time.time() + 120
    while time.time() < deadline and set(writer.samples) - set(watcher.lags):
        time.sleep(0.5)
    caught_up = time.time()
    time.sleep(3)  # deletes and moves after the last sampled insert
    watcher.stop.set()
    topology.stop.set()
    ended = time.time()
    requests = endpoint.requests()
    describes = _describe_rates(requests, keys, state["steady_from"] or written, ended, topology.mass_closes,
                                state["kills"])
    cpu_seconds = state["cpu_seconds"] + sum(_cpu_seconds(process.pid) for process in consumers.values())
    for process in consumers.values():
        process.send_signal(signal.SIGTERM)
    for process in consumers.values():
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
    stopped = subprocess.run([sys.executable, "manage.py", "verify_index", "--recheck-seconds", "3"], cwd=ROOT,
                             env=env, capture_output=True, text=True)
    # What the consumers had not applied yet when they were stopped is drained, then verified: a
    # write missing after that is lost, not late. Roll-overs stop first: a drain ends when no shard
    # is left to finish (tests/pagination_index/test_stream_topology.py says why).
    endpoint.configure_hook("streams", rollover_seconds=3600)
    drain_started = time.time()
    drained = subprocess.run([sys.executable, "manage.py", "sync_index", "--once", "-v", "0"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=900)
    drain_seconds = time.time() - drain_started
    verify = subprocess.run([sys.executable, "manage.py", "verify_index", "--recheck-seconds", "3"], cwd=ROOT,
                            env=env, capture_output=True, text=True)
    from pagination_index.models import StaleGroup

    lags = sorted(watcher.lags.values())
    if args.keep:
        (tmp / "lags.json").write_text(json.dumps({
            "started": started, "kills": state["kills"], "mass_closes": topology.mass_closes,
            "samples": [{"written": writer.written[pk], "lag": lag} for pk, lag in watcher.lags.items()]}))
        # Every stream call, for a look at what the consumers did and how long each call took.
        (tmp / "stream_calls.json").write_text(json.dumps({
            "keys": keys, "steady_from": state["steady_from"] or written, "until": ended, "calls": [
            {k: e.get(k) for k in ("at", "operation", "key_id", "status", "error", "duration_ms")}
            for e in requests if e.get("service") == "streams"]}))
    # The samples a SIGKILL held up: waiting to be applied when it came, or written from then until
    # its shards are surely taken over (the lease, a poll and a start-up's worth); against all the
    # others: what the SIGKILLs cost, apart from the rest.
    lease = float(env.get("SYNC_INDEX_LEASE_SECONDS", 5))

    def held_up(pk, moments: list[float], window: float) -> bool:
        """Waiting to be applied at one of the moments, or written within `window` seconds after one."""
        written = writer.written[pk]
        applied = written + watcher.lags[pk]
        return any(written <= moment <= applied or moment <= written <= moment + window for moment in moments)

    def near_kill(pk):
        return held_up(pk, state["kills"], lease + 5)

    calm = sorted(lag for pk, lag in watcher.lags.items() if not near_kill(pk))

    # The samples a mass roll-over or split held up (at least half the open shards closed at once,
    # as the emulation closes a generation: AWS spreads them over hours): waiting to be applied
    # when it came, or written in the 5 s after it, while the children are listed and first read.
    steady = sorted(lag for pk, lag in watcher.lags.items()
                    if not near_kill(pk) and not held_up(pk, topology.mass_closes, 5))
    status = endpoint.hook_status("streams")
    return {
        "writes": writer.done, "write_seconds": round(written - started, 1),
        "sampled_inserts": len(writer.samples), "sampled_applied": len(set(writer.samples) & set(watcher.lags)),
        "apply_lag_p50_s": _pct(lags, 50), "apply_lag_p99_s": _pct(lags, 99), "apply_lag_max_s": _pct(lags, 100),
        "apply_lag_away_from_kills": {"samples": len(calm), "p50_s": _pct(calm, 50), "p99_s": _pct(calm, 99),
                                      "window_s": lease + 5},
        "apply_lag_away_from_kills_and_mass_rollovers": {
            "samples": len(steady), "p50_s": _pct(steady, 50), "p99_s": _pct(steady, 99),
            "mass_closes": len(topology.mass_closes)},
        "records_per_second": round(writer.done / max(caught_up - started, 1e-9), 1),
        "sigkills": state["killed"], "stream": status,
        # Both consumers' CPU (every incarnation of the active one) from their start to the stop,
        # per write made: what following the stream costs, the standby's polls included.
        "consumers_cpu_seconds": round(cpu_seconds, 1),
        "consumers_cpu_ms_per_write": round(cpu_seconds * 1000 / max(writer.done, 1), 3),
        "describe_stream_per_10s_steady": describes,
        "verify_when_stopped": stopped.stdout.strip().splitlines()[-3:],
        "drain": {"returncode": drained.returncode, "seconds": round(drain_seconds, 1)},
        "verify_clean": verify.returncode == 0 and drained.returncode == 0,
        "verify_output": verify.stdout.strip().splitlines()[-3:],
        "stale_marks": list(StaleGroup.objects.values_list("group", flat=True)),
    }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a running process so far (/proc/<pid>/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _describe_rates(requests: list[dict], keys, since: float, until: float, mass_closes: list[float] = (),
                    restarts: list[float] = ()) -> dict:
    """DescribeStream calls per 10 s of each consumer over the steady part; and apart: the calls in
    the ROLLOVER_WINDOW seconds after each mass roll-over (the listings that find the new shards,
    per roll-over; from a second before it, as a consumer may meet the new shards before the
    watcher's next look) and after each restart of a killed consumer (its first listing), and the
    rate between them (the map's periodic refresh and child look-ups), which is what a stream
    rolling a shard over every 4 hours, as AWS's does, would see."""
    entries = [e for e in requests if e.get("operation") == "DescribeStream" and since <= e["at"] <= until]
    calls = {name: [e for e in entries if e.get("key_id") == key] for name, (key, _) in keys.items()}
    seconds = max(until - since, 1e-9)
    rates = {name: round(len(own) / seconds * 10, 2) for name, own in calls.items()} | {"seconds_observed": round(seconds, 1)}
    closes = [moment for moment in mass_closes if since - ROLLOVER_WINDOW <= moment <= until]
    kills = [moment for moment in restarts if since - ROLLOVER_WINDOW <= moment <= until]
    windows = sorted([(moment - 1.0, moment + ROLLOVER_WINDOW) for moment in closes]
                     + [(moment, moment + ROLLOVER_WINDOW) for moment in kills])

    def near(at: float, moments: list[float], before: float) -> bool:
        return any(moment - before <= at <= moment + ROLLOVER_WINDOW for moment in moments)

    covered, reach = 0.0, since
    for low, high in windows:  # the union of the windows within the steady part (they may overlap)
        start, end = max(low, reach), min(high, until)
        covered, reach = covered + max(end - start, 0.0), max(reach, end)
    between = max(seconds - covered, 1e-9)
    rates["mass_rollovers"], rates["restarts"] = len(closes), len(kills)
    for name, own in calls.items():
        at_rollovers = sum(1 for e in own if near(e["at"], closes, 1.0))
        at_restarts = sum(1 for e in own if near(e["at"], kills, 0.0) and not near(e["at"], closes, 1.0))
        rates[f"{name}_per_rollover"] = round(at_rollovers / len(closes), 2) if closes else None
        rates[f"{name}_per_restart"] = round(at_restarts / len(kills), 2) if kills else None
        rates[f"{name}_per_10s_between_rollovers_and_restarts"] = round((len(own) - at_rollovers - at_restarts) / between * 10, 2)
    rates["seconds_between_rollovers_and_restarts"] = round(between, 1)
    return rates


# --- 2. Lambda --------------------------------------------------------------------------------------
def run_lambda(args, endpoint, rebuild_env: dict | None = None) -> dict:
    from django.core.management import call_command

    from comments.table.client import dynamodbstreams
    from comments.table.schema import create_tables, delete_tables
    from pagination_index.aws_lambda import handler
    from pagination_index import get_index
    from stack.lambda_driver import EventSourceMapping

    # 8 shards before the table is made again: its new stream splits to the count set when it starts
    # (set after, a stream of the last run's 120 shards would mean 120 pollers, each, like a Lambda
    # execution environment, with a database connection of its own: past PostgreSQL's 100).
    endpoint.configure_hook("streams", shards=8, rollover_seconds=args.rollover_seconds)
    delete_tables()
    create_tables()
    get_index().clear()
    arn = get_stream_arn()
    rebuild: dict = {}

    def start_rebuild(done):  # a third of the way: the rest of the writes meet fences and a journal
        if rebuild_env is not None and done == args.writes // 3:
            rebuild["started"] = time.time()
            rebuild["process"] = subprocess.Popen(
                [sys.executable, "manage.py", "rebuild_index", "-v", "1", "--wave", "3"], cwd=ROOT, env=rebuild_env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    writer = Writer(args.writes, args.rate, seed=3 if rebuild_env else 2, on_progress=start_rebuild)
    watcher = LagWatcher(writer)
    started = time.time()
    from django.db import connections

    with EventSourceMapping(client=dynamodbstreams(), stream_arn=arn, handler=handler, batch_size=100,
                            batching_window=0.5, max_retries=5, on_poller_exit=connections.close_all) as mapping:
        watcher.start()
        writer.start()
        writer.join()
        writes_ended = time.time()
        if "process" in rebuild:
            output, _ = rebuild["process"].communicate(timeout=1800)
            ended = time.time()
            rebuild["seconds"] = round(ended - rebuild["started"], 1)
            rebuild["seconds_alongside_writes"] = round(min(ended, writes_ended) - rebuild["started"], 1)
            rebuild["returncode"] = rebuild["process"].returncode
            rebuild["output"] = output.strip().splitlines()[-2:]
        mapping.drain(timeout=300, quiet=3)
    watcher.stop.set()
    ended = time.time()
    import io

    out = io.StringIO()
    try:
        call_command("verify_index", recheck_seconds=2, stdout=out, stderr=out)
        clean = True
    except Exception:
        clean = False
    lags = sorted(watcher.lags.values())
    return {"writes": writer.done, "shards": 8, "invocations": mapping.stats.invocations,
            "records_per_second": round(mapping.stats.records / max(ended - started, 1e-9), 1),
            "apply_lag_p50_s": _pct(lags, 50), "apply_lag_p99_s": _pct(lags, 99),
            "discarded_batches": mapping.stats.discarded_batches, "verify_clean": clean,
            "verify_output": out.getvalue().strip().splitlines()[-3:],
            **({"rebuild": {k: v for k, v in rebuild.items() if k not in ("process", "started")}} if rebuild else {})}


def get_stream_arn() -> str:
    """The comments table's stream (both of its sources read it)."""
    from comments.table.keys import PRODUCTS
    from pagination_index import sources

    return sources[PRODUCTS].stream_arn()


def _pct(values: list[float], pct: int):
    if not values:
        return None
    if pct >= 100:
        return round(values[-1], 3)
    return round(statistics.quantiles(values, n=100, method="inclusive")[pct - 1], 3) if len(values) > 1 else round(values[0], 3)


def print_report(report: dict) -> None:
    for part in ("sync_index", "lambda", "lambda_during_rebuild"):
        if part in report:
            print(f"-- {part}")
            for key, value in report[part].items():
                print(f"  {key}: {value}")
    print(f"load average: start {report['machine']['load_average_at_start']}, end {report['machine']['load_average_at_end']}")


if __name__ == "__main__":
    sys.exit(main())
