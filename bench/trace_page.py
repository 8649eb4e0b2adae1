"""The path of one deep product page through the project's code, recorded with sys.setprofile: the
project files on the stack when the DynamoDB Query is sent (the line from the view to the Query), every
project file the request enters on the way there (side trips to the index included) and to the
response, and how many calls cross from one project file into another.

    python -m bench.trace_page                          # /products/KETTLE-2000/?page=300, 10,000-comment shop
    python -m bench.trace_page --page 11 --smoke
    python -m bench.trace_page --query-at comments/table/direct.py:query   # a tree where the Query lived there

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
OWN = ("pagination_index", "comments", "shop", "metrics", "moderation", "ops", "aws")
SIZE, SMOKE_SIZE = 10_000, 3_000


def own_file(filename: str) -> str | None:
    path = Path(filename)
    try:
        relative = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    return str(relative) if relative.parts and relative.parts[0] in OWN else None


class Tracer:
    """From the view's entry on: every call into a project file, with the project file it came from
    (the nearest project frame below it; None when only library code lies between), until the page
    path's Query is sent (pagination_index/aws/direct.py, DirectReads.query), where the project files
    on the stack are noted: the line from the view to the Query."""

    def __init__(self, view: str, query_file: str, query: str):
        self.view, self.query_file, self.query = view, query_file, query
        self.started = False
        self.calls: list[tuple[str | None, str]] = []  # (from, into) of each call into a project file
        self.query_at: int | None = None
        self.stack_at_query: list[str] = []

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        name = own_file(code.co_filename)
        if name is None:
            return
        if not self.started:
            if code.co_name == self.view and name == "comments/views.py":
                self.started = True
            else:
                return
        caller = frame.f_back
        while caller is not None and own_file(caller.f_code.co_filename) is None:
            caller = caller.f_back
        self.calls.append((own_file(caller.f_code.co_filename) if caller else None, name))
        if self.query_at is None and name == self.query_file and code.co_name == self.query:
            self.query_at = len(self.calls)
            stack, outer = [], frame
            while outer is not None:
                own = own_file(outer.f_code.co_filename)
                if own and (not stack or stack[-1] != own):
                    stack.append(own)
                if outer.f_code.co_name == self.view and own == "comments/views.py":
                    break
                outer = outer.f_back
            self.stack_at_query = stack[::-1]


def summary(calls: list[tuple[str | None, str]]) -> dict:
    files = list(dict.fromkeys(into for _, into in calls))
    crossings = [(caller, into) for caller, into in calls if caller != into]
    return {"files": files, "file_count": len(files), "crossings": len(crossings),
            "entries": {name: sum(1 for caller, into in crossings if into == name) for name in files}}


def trace(path: str, query_at: str) -> dict:
    from django.core.handlers.wsgi import WSGIHandler

    from bench.common import get_environ

    handler = WSGIHandler()
    target, _, query = path.partition("?")

    def request():
        status = []
        b"".join(handler(get_environ(target, query), lambda code, headers, exc_info=None: status.append(code)))
        return status[0]

    assert request().startswith("200")  # warm: first-use setup is not the page's path
    tracer = Tracer("product_detail", *query_at.split(":"))
    sys.setprofile(tracer)
    try:
        status = request()
    finally:
        sys.setprofile(None)
    assert status.startswith("200"), status
    to_query = tracer.calls[: tracer.query_at] if tracer.query_at else []
    return {"path": path, "to_query": summary(to_query), "whole": summary(tracer.calls),
            "stack_at_query": tracer.stack_at_query, "query_sent": tracer.query_at is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--page", type=int, default=300)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--query-at", default="pagination_index/aws/direct.py:query",
                        help="FILE:FUNCTION that sends the page's Query (default: %(default)s)")
    args = parser.parse_args()
    size = SMOKE_SIZE if args.smoke else SIZE
    page = min(args.page, size // 20)
    load = os.getloadavg()
    when = stamp()
    with Dataset(size):
        result = trace(f"/products/{FLAGSHIP}/?page={page}", args.query_at)
    result.update(machine=machine_info({}, load, "one request traced in this process, relational index on SQLite"),
                  size=size)
    print(f"the line from the view to the Query ({len(result['stack_at_query'])} files): "
          + " -> ".join(result["stack_at_query"]))
    for part in ("to_query", "whole"):
        found = result[part]
        print(f"{part}: {found['file_count']} files entered, {found['crossings']} calls from one file into another")
        for name in found["files"]:
            print(f"  {found['entries'][name]:3d}x {name}")
    print(f"saved {write_json('trace_page', args.smoke, when, result)}")


if __name__ == "__main__":
    main()
