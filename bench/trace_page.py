"""The path of one deep product page through the project's code: which of the project's files a
request enters from the view to the DynamoDB Query (and to the response), and how often control
crosses from one file to another, recorded with sys.setprofile (calls and returns of Python code).

    python -m bench.trace_page                          # /products/KETTLE-2000/?page=300, 10,000-comment shop
    python -m bench.trace_page --page 11 --smoke

Only the project's own files count (not Django, botocore or the standard library); the request is
traced warm (served once before, so no first-use setup is counted), with caches as in production.
The result names each file in order of first entry and lists the crossings; it is written to
bench/results/trace_page-<stamp>.json.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.common import machine_info, stamp, write_json
from bench.dataset import FLAGSHIP, Dataset

ROOT = Path(__file__).resolve().parents[1]
OWN = ("pagination_index", "comments", "shop", "metrics", "moderation", "ops")
SIZE, SMOKE_SIZE = 10_000, 3_000


def own_file(filename: str) -> str | None:
    path = Path(filename)
    try:
        relative = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(relative) if relative.parts and relative.parts[0] in OWN else None


class Tracer:
    """Project files in the order control reaches them, from the view's entry on; the moment the
    page path's Query is sent (pagination_index/aws/direct.py, DirectReads.query) is marked."""

    def __init__(self, view: str, query: str):
        self.view, self.query = view, query
        self.started = False
        self.sequence: list[str] = []  # project file of each call or return that changed file
        self.query_at: int | None = None
        self.current: str | None = None

    def __call__(self, frame, event, arg):
        if event not in ("call", "return"):
            return
        code = frame.f_code
        if not self.started:
            if event == "call" and code.co_name == self.view and own_file(code.co_filename) == "comments/views.py":
                self.started = True
            else:
                return
        if event == "return":
            frame = frame.f_back
            if frame is None:
                return
            code = frame.f_code
        name = own_file(code.co_filename)
        if name is None or name == self.current:
            return
        self.current = name
        self.sequence.append(name)
        if self.query_at is None and name == "pagination_index/aws/direct.py" and code.co_name == self.query:
            self.query_at = len(self.sequence)


def summary(sequence: list[str]) -> dict:
    files = list(dict.fromkeys(sequence))
    return {"files": files, "file_count": len(files), "crossings": max(len(sequence) - 1, 0),
            "entries": {name: sequence.count(name) for name in files}}


def trace(path: str) -> dict:
    from django.core.handlers.wsgi import WSGIHandler

    from bench.common import get_environ

    handler = WSGIHandler()
    target, _, query = path.partition("?")

    def request():
        status = []
        b"".join(handler(get_environ(target, query), lambda code, headers, exc_info=None: status.append(code)))
        return status[0]

    assert request().startswith("200")  # warm: first-use setup is not the page's path
    tracer = Tracer("product_detail", "query")
    sys.setprofile(tracer)
    try:
        status = request()
    finally:
        sys.setprofile(None)
    assert status.startswith("200"), status
    to_query = tracer.sequence[: tracer.query_at] if tracer.query_at else []
    return {"path": path, "to_query": summary(to_query), "whole": summary(tracer.sequence),
            "query_sent": tracer.query_at is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", type=int, default=300)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    size = SMOKE_SIZE if args.smoke else SIZE
    page = min(args.page, size // 20)
    load = os.getloadavg()
    when = stamp()
    with Dataset(size):
        result = trace(f"/products/{FLAGSHIP}/?page={page}")
    result.update(machine=machine_info({}, load, "one request traced in this process, relational index on SQLite"),
                  size=size)
    for part in ("to_query", "whole"):
        found = result[part]
        print(f"{part}: {found['file_count']} files, {found['crossings']} crossings")
        for name in found["files"]:
            print(f"  {found['entries'][name]:3d}x {name}")
    print(f"saved {write_json('trace_page', args.smoke, when, result)}")


if __name__ == "__main__":
    main()
