"""The site under load: gunicorn (workers as in gunicorn.conf.py) driven by wrk, per index backend,
straight to gunicorn ("gunicorn direct") and through nginx with the repository's config
(deploy/nginx/shop.conf.template: "nginx → gunicorn").

    python -m bench.load            # 60 s per mix at 16 and 64 connections
    python -m bench.load --smoke    # 3 s per mix at 16 connections, on the small shop
    python -m bench.load --backend redis --connections 16 --seconds 15 \
        --server sync:5 --server gthread:5x4 --server gthread:2x4   # worker classes side by side

Mixes (bench/load.lua draws each request's path uniformly from a list):
- hot: pages 1-3 of the top products (most comments);
- crawl: every page of every product, uniformly (on the 100,000-comment shop, mostly deep pages);
- bare: /healthz, a view that touches nothing, through the same middleware: the same run's baseline,
  against which each mix's CPU per request is given as a multiple ("x bare").

Reported per run: requests/s, p50/p95/p99 latency, errors (socket errors, and every response that
is not 2xx/3xx: must be 0), CPU milliseconds per request of gunicorn's master and workers (utime+stime
from /proc, reaped workers included through the master's cutime+cstime), of nginx (master and workers)
and of DynamoDB Local's JVM (what a box against real DynamoDB would not spend), and each worker's
resident memory (VmRSS) after the runs. DynamoDB Local, Redis, nginx and wrk share the same 2 cores.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from bench.common import DYNAMODB_LOCAL, format_table, machine_info, pyplot, result_path, shown, stamp, write_json
from bench.dataset import DATA, Dataset, redis_index
from stack.dynamodb_local import ROOT, free_port
from stack.nginx import Nginx, nginx_binary
from stack.processes import process_tree, stop

SIZE, SMOKE_SIZE = 100_000, 3_000
DURATION, SMOKE_DURATION = 60, 3
# wrk's client-side timeout. The smoke run checks that every request gets a good answer on a CI
# machine whose two cores are shared with everything else; a 2 s queue there is noise, not a hang.
TIMEOUT_S, SMOKE_TIMEOUT_S = 2, 10
CONNECTIONS, SMOKE_CONNECTIONS = (16, 64), (16,)
TOP_PRODUCTS = 5
PAGE_SIZE = 20
ERROR_KINDS = ("status_errors", "connect_errors", "read_errors", "write_errors", "timeouts")
TARGETS = {"hot": 1000, "crawl": 300}  # requests/s on this 2-core machine, straight to gunicorn
CPU_TARGETS_MS = {"hot": 1.0, "crawl": 4.0}  # gunicorn's CPU per request (issue 15)
LUA = Path(__file__).resolve().parent / "load.lua"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def mixes(products: dict[str, int]) -> dict[str, list[str]]:
    def href(sku: str, page: int) -> str:
        return f"/products/{sku}/" + (f"?page={page}" if page > 1 else "")

    pages = {sku: max(1, -(-count // PAGE_SIZE)) for sku, count in products.items()}
    top = sorted(products, key=products.get, reverse=True)[:TOP_PRODUCTS]
    return {
        "hot": [href(sku, page) for sku in top for page in range(1, min(pages[sku], 3) + 1)],
        "crawl": [href(sku, page) for sku, last in pages.items() for page in range(1, last + 1)],
        "bare": ["/healthz"],
    }


def cpu_seconds(master: int, pids: list[int] | None = None) -> float:
    """utime+stime of the master and its live workers (or of `pids`), plus the master's reaped children."""
    total = 0
    for pid in pids or process_tree(master):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
        if pid == master:
            total += int(fields[13]) + int(fields[14])  # cutime, cstime
    return total / CLOCK_TICKS


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def server_env(spec: str | None) -> dict:
    """`gthread:5x4` (class:workers x threads), `sync:5`, `gevent:2x100`: gunicorn's environment."""
    if not spec:
        return {}
    worker_class, _, size = spec.partition(":")
    workers, _, threads = size.partition("x")
    env = {"GUNICORN_WORKER_CLASS": worker_class}
    if workers:
        env["GUNICORN_WORKERS"] = workers
    if threads:
        env["GUNICORN_THREADS" if worker_class == "gthread" else "GUNICORN_WORKER_CONNECTIONS"] = threads
    return env


class Gunicorn:
    def __init__(self, env: dict, log: Path):
        self.port = free_port()
        self.env = {**os.environ, **env, "GUNICORN_BIND": f"127.0.0.1:{self.port}"}
        self.log = log
        self.process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        return [gunicorn, "-c", str(ROOT / "gunicorn.conf.py"), "shop.wsgi"]

    def __enter__(self) -> "Gunicorn":
        self.log_offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.command(), cwd=ROOT, env=self.env, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"gunicorn exited with {self.process.returncode}; see {self.log}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/", timeout=2)
                return self
            except OSError:
                time.sleep(0.3)
        raise SystemExit(f"gunicorn did not answer within 60 s; see {self.log}")

    def __exit__(self, *exc) -> None:
        stop(self.process, 30)

    def workers(self) -> list[int]:
        return process_tree(self.process.pid)[1:]

    def boot_cpu_s(self) -> list[float]:
        """CPU seconds each worker spent booting (importing the app), as gunicorn.conf.py's
        post_worker_init hook logs it: what every recycle by max_requests costs again."""
        with open(self.log, "rb") as log:
            log.seek(self.log_offset)
            text = log.read().decode(errors="replace")
        return [float(match) for match in re.findall(r"worker booted in ([0-9.]+) s of CPU", text)]


def run_wrk(port: int, paths_file: Path, connections: int, seconds: int, timeout: int) -> dict:
    command = ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "--timeout", f"{timeout}s", "--latency",
               "-s", str(LUA), f"http://127.0.0.1:{port}", "--", str(paths_file)]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    line = next(line for line in output.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


# Seconds of unmeasured wrk load before each measured run.
WARM_SECONDS = 3


def warm(port: int, paths_file: Path, connections: int, timeout: int) -> None:
    """A few requests one by one (a failing page stops the run with its path), then WARM_SECONDS of the
    same load unmeasured: every worker and thread has compiled its templates and opened its
    connections before the figures start. (30 requests on one connection, as before, left most of the
    5 workers cold: their first requests, 0.1-0.8 s each, fell inside the measured run.)"""
    paths = paths_file.read_text().split()
    for path in random.sample(paths, min(len(paths), 30)):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10).read()
        except OSError as exc:
            raise SystemExit(f"warming up: {path}: {exc}") from exc
    run_wrk(port, paths_file, connections, WARM_SECONDS, timeout)


def bench_backend(name: str, env: dict, paths: dict[str, Path], connections, seconds, logs: Path, out, *,
                  server: str | None, nginx: bool, jvm: int, timeout: int) -> tuple[list[dict], dict]:
    rows = []
    label = server or "gunicorn.conf.py"
    with Gunicorn({**env, **server_env(server)}, logs / f"gunicorn-{name.replace('/', '-')}.log") as gunicorn, \
            ExitStack() as stack:
        routes = [("gunicorn direct", gunicorn.port, None)]
        if nginx:
            proxy = stack.enter_context(Nginx(logs / f"nginx-{os.getpid()}", upstream=f"127.0.0.1:{gunicorn.port}",
                                              static_root=Path(os.environ["DJANGO_STATIC_ROOT"])))
            routes.append(("nginx → gunicorn", proxy.port, proxy))
        for mix, paths_file in paths.items():
            for via, port, proxy in routes:
                for count in connections:
                    warm(port, paths_file, count, timeout)
                    nginx_pids = proxy.pids() if proxy else []
                    workers_before = set(gunicorn.workers())
                    before = (cpu_seconds(gunicorn.process.pid), cpu_seconds(0, nginx_pids) if proxy else 0.0,
                              cpu_seconds(0, [jvm]))
                    result = run_wrk(port, paths_file, count, seconds, timeout)
                    after = (cpu_seconds(gunicorn.process.pid), cpu_seconds(0, nginx_pids) if proxy else 0.0,
                             cpu_seconds(0, [jvm]))
                    requests = max(result["requests"], 1)
                    restarts = len(set(gunicorn.workers()) - workers_before)
                    cpu_ms = [round((end - start) * 1000 / requests, 3) for start, end in zip(before, after)]
                    errors = sum(result[key] for key in ERROR_KINDS)
                    row = {"backend": name, "server": label, "via": via, "mix": mix, "connections": count,
                           "seconds": seconds, "requests": result["requests"],
                           "requests_per_s": round(result["requests"] / (result["duration_us"] / 1e6), 1),
                           "p50_ms": result["p50_us"] / 1000, "p95_ms": result["p95_us"] / 1000,
                           "p99_ms": result["p99_us"] / 1000, "max_ms": result["max_us"] / 1000,
                           "errors": errors, "wrk": result, "worker_restarts": restarts,
                           "cpu_ms_per_request": cpu_ms[0], "nginx_cpu_ms_per_request": cpu_ms[1],
                           "dynamodb_local_cpu_ms_per_request": cpu_ms[2],
                           "load_average": os.getloadavg()}
                    rows.append(row)
                    out(f"  {name:<10} {label:<12} {via:<16} {mix:<5} c={count:<3} {row['requests_per_s']:8.1f} req/s"
                        f"  p50 {row['p50_ms']:.1f} ms  p95 {row['p95_ms']:.1f}  p99 {row['p99_ms']:.1f}  errors {errors}"
                        f"  CPU gunicorn {cpu_ms[0]:.2f} nginx {cpu_ms[1]:.2f} JVM {cpu_ms[2]:.2f} ms/req"
                        f"  workers recycled {restarts}")
        memory = {"workers": len(gunicorn.workers()), "worker_boot_cpu_s": gunicorn.boot_cpu_s(), "vmrss_kib": [rss_kib(pid) for pid in gunicorn.workers()],
                  "master_vmrss_kib": rss_kib(gunicorn.process.pid)}
    return rows, memory


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f"{r['backend']} {r['server']}\n{'nginx' if r['via'].startswith('nginx') else 'direct'} "
              f"{r['mix']} c={r['connections']}" for r in rows]
    colours = ["#c44e52" if r["mix"] == "hot" else "#4c72b0" for r in rows]
    axes[0].bar(range(len(rows)), [r["requests_per_s"] for r in rows], color=colours)
    for mix, target in TARGETS.items():
        axes[0].axhline(target, linestyle="--", color="#c44e52" if mix == "hot" else "#4c72b0",
                        label=f"{mix} target {target}/s")
    axes[0].set_xticks(range(len(rows)), labels, fontsize=7)
    axes[0].set_ylabel("requests/s")
    axes[0].legend(fontsize=8)
    for offset, (key, label) in enumerate((("p50_ms", "p50"), ("p95_ms", "p95"), ("p99_ms", "p99"))):
        axes[1].bar([i + offset * 0.27 for i in range(len(rows))], [r[key] for r in rows], 0.27, label=label)
    axes[1].set_xticks([i + 0.27 for i in range(len(rows))], labels, fontsize=7)
    axes[1].set_ylabel("latency, ms")
    axes[1].legend(fontsize=8)
    figure.suptitle("gunicorn + wrk on 2 shared cores (DynamoDB Local and Redis on the same machine)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small shop, a few seconds per mix")
    parser.add_argument("--seconds", type=int, help="seconds per mix (default: 60, smoke 3)")
    parser.add_argument("--backend", action="append", choices=["redis", "relational"],
                        help="only this backend (repeatable; default both)")
    parser.add_argument("--server", action="append",
                        help="gunicorn worker class and size, e.g. sync:5, gthread:5x4, gevent:2x100 "
                             "(repeatable; default: gunicorn.conf.py as it is)")
    parser.add_argument("--connections", type=int, action="append", help="wrk connections (repeatable)")
    parser.add_argument("--mix", action="append", choices=["hot", "crawl", "bare"], help="default: all three")
    parser.add_argument("--no-nginx", action="store_true", help="only the gunicorn direct rows")
    args = parser.parse_args(argv)
    nginx = not args.no_nginx
    if nginx and not nginx_binary():
        print("nginx is needed for the nginx → gunicorn rows: apt-get install nginx (or --no-nginx)", file=sys.stderr)
        return 1
    if not shutil.which("wrk"):
        print("wrk is needed: apt-get install wrk", file=sys.stderr)
        return 1
    size = SMOKE_SIZE if args.smoke else SIZE
    seconds = args.seconds or (SMOKE_DURATION if args.smoke else DURATION)
    connections = args.connections or (SMOKE_CONNECTIONS if args.smoke else CONNECTIONS)
    timeout = SMOKE_TIMEOUT_S if args.smoke else TIMEOUT_S
    backends = args.backend or ["redis", "relational"]
    out = lambda text: print(text, flush=True)  # noqa: E731
    load_at_start = os.getloadavg()
    dataset = Dataset(size)
    logs = DATA / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rows, memory = [], {}
    with dataset:
        products = dataset.products()
        paths = {}
        for mix, urls in mixes(products).items():
            if args.mix and mix not in args.mix:
                continue
            paths[mix] = logs / f"paths-{mix}-{size}.txt"
            paths[mix].write_text("\n".join(urls) + "\n")
        out(f"load: {len(products)} products, {sum(products.values()):,} comments; "
            f"hot mix {len(mixes(products)['hot'])} URLs, crawl mix {len(mixes(products)['crawl']):,} URLs; "
            f"{seconds} s per run")
        for backend in backends:
            with ExitStack() as stack:
                env = dict(dataset.env)
                if backend == "redis":
                    env.update(stack.enter_context(redis_index()))
                for server in args.server or [None]:
                    backend_rows, memory[f"{backend} {server or 'gunicorn.conf.py'}"] = bench_backend(
                        backend, env, paths, connections, seconds, logs, out, server=server, nginx=nginx,
                        jvm=dataset.database.process.pid, timeout=timeout)
                    rows += backend_rows
    for row in rows:  # each mix's CPU against the bare view of the same backend, server, path and connections
        bare = next((r for r in rows if r["mix"] == "bare" and all(
            r[key] == row[key] for key in ("backend", "server", "via", "connections"))), None)
        row["x_bare"] = round(row["cpu_ms_per_request"] / bare["cpu_ms_per_request"], 2) if bare and bare[
            "cpu_ms_per_request"] else None
    header = ["backend", "server", "via", "mix", "conns", "req/s", "p50 ms", "p95 ms", "p99 ms", "errors",
              "CPU ms/req", "x bare", "nginx CPU", "JVM CPU"]
    table = format_table(header, [[r["backend"], r["server"], r["via"], r["mix"], str(r["connections"]),
                                   f"{r['requests_per_s']:.0f}", f"{r['p50_ms']:.1f}", f"{r['p95_ms']:.1f}",
                                   f"{r['p99_ms']:.1f}", str(r["errors"]), f"{r['cpu_ms_per_request']:.2f}",
                                   "-" if r["x_bare"] is None else f"{r['x_bare']:.1f}",
                                   f"{r['nginx_cpu_ms_per_request']:.2f}",
                                   f"{r['dynamodb_local_cpu_ms_per_request']:.2f}"] for r in rows], left=4)
    out("\n" + table)
    for backend, used in memory.items():
        out(f"  {backend}: {used['workers']} workers, VmRSS after the runs "
            f"{', '.join(f'{kib / 1024:.0f}' for kib in used['vmrss_kib'])} MiB; CPU of a worker's boot "
            f"(before its first request) {', '.join(f'{s:.2f}' for s in used['worker_boot_cpu_s'])} s")
    when = stamp()
    png = result_path("load", args.smoke, when, "png")
    plot(rows, png)
    path = write_json("load", args.smoke, when, {
        "flagship_comments": size, "seconds_per_run": seconds, "wrk_timeout_s": timeout,
        "targets_requests_per_s": TARGETS,
        "targets_cpu_ms_per_request": CPU_TARGETS_MS,
        "gunicorn": "gunicorn.conf.py",
        "machine": machine_info({}, load_at_start, f"shared machine; {DYNAMODB_LOCAL}, Redis, nginx and wrk on "
                                                   "the same 2 cores as gunicorn"),
        "results": rows, "worker_memory": memory, "table": table, "plot": png.name})
    out(f"\nwrote {shown(path)} and {shown(png)}")
    failed = [r for r in rows if r["errors"]]
    for r in failed:
        kinds = ", ".join(f"{key} {r['wrk'][key]}" for key in ERROR_KINDS if r["wrk"][key])
        print(f"errors: {r['backend']} {r['via']} {r['mix']} c={r['connections']}: {kinds}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
