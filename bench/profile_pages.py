"""Where a product page's time goes: py-spy samples this process serving the load test's mixes through
Django's WSGI handler (settings as in production, caches on), and writes a flame graph per mix plus
the functions with the most samples.

    python -m bench.profile_pages            # 100,000-comment shop, 3,000 requests per mix
    python -m bench.profile_pages --smoke    # small shop, 200 requests per mix

py-spy needs ptrace rights over the process (root, or kernel.yama.ptrace_scope = 0).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from bench.common import format_table, machine_info, page_server, result_path, shown, stamp, write_json
from stack.dynamodb_local import ROOT

SIZE, SMOKE_SIZE = 100_000, 3_000
REQUESTS, SMOKE_REQUESTS = 3_000, 200
TOP = 15


def serve_mix(size: int, mix: str, requests: int) -> None:
    """The profiled child: serve `requests` paths of the mix, in process."""
    from bench.dataset import Dataset
    from bench.load import mixes

    with Dataset(size) as dataset:
        page_server(mixes(dataset.products())[mix], seed=size)(requests)


# Libraries whose share of the samples is worth a line of its own.
LIBRARIES = ("django/template", "django/db", "django/middleware", "botocore", "urllib3", "redis", "whitenoise")


def top_functions(collapsed: Path) -> tuple[list[tuple[str, int, int]], int]:
    """(what, self samples, total samples) from py-spy's raw collapsed stacks: our own functions (the
    project's modules, not bench/) and each library in LIBRARIES as one line, most total first."""
    self_samples, total_samples, samples = Counter(), Counter(), 0
    ours = ("(comments/", "(shop/", "(pagination_index/", f"({ROOT}/comments/", f"({ROOT}/shop/",
            f"({ROOT}/pagination_index/")
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames, count = stack.split(";"), int(count)
        samples += count
        names = set()
        for position, frame in enumerate(frames):
            name = next((f"[{lib}]" for lib in LIBRARIES if f"{lib}/" in frame), None)
            if name is None and any(root in frame for root in ours):
                name = frame
            if name is None:
                continue
            if position == len(frames) - 1:
                self_samples[name] += count
            names.add(name)
        for name in names:
            total_samples[name] += count
    ranked = sorted(total_samples, key=total_samples.get, reverse=True)[:TOP]
    return [(name, self_samples[name], total_samples[name]) for name in ranked], samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="small shop, few requests")
    parser.add_argument("--serve", choices=["hot", "crawl"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    size = SMOKE_SIZE if args.smoke else SIZE
    requests = SMOKE_REQUESTS if args.smoke else REQUESTS
    if args.serve:
        serve_mix(size, args.serve, requests)
        return 0
    load_at_start, when, results = os.getloadavg(), stamp(), {}
    py_spy = str(Path(sys.executable).parent / "py-spy")
    raw = Path(tempfile.mkdtemp(prefix="profile-pages-"))  # py-spy's raw stacks: megabytes nobody reads
    for mix in ("hot", "crawl"):
        collapsed = raw / f"{mix}.txt"
        svg = result_path(f"profile_pages-{mix}", args.smoke, when, "svg")
        child = [sys.executable, "-m", "bench.profile_pages", "--serve", mix] + (["--smoke"] if args.smoke else [])
        for output, form in ((collapsed, "raw"), (svg, "flamegraph")):
            subprocess.run([py_spy, "record", "--rate", "200", "--format", form, "--output", str(output),
                            "--", *child], check=True, capture_output=True)
        ranked, samples = top_functions(collapsed)
        results[mix] = {"samples": samples, "flamegraph": svg.name,
                        "top": [{"function": f, "self": s, "total": t} for f, s, t in ranked]}
        print(f"\n{mix} mix: {samples} samples at 200 Hz; {shown(svg)}")
        print(format_table(["function", "self %", "total %"],
                           [[f[:110], f"{100 * s / samples:.1f}", f"{100 * t / samples:.1f}"] for f, s, t in ranked]))
    path = write_json("profile_pages", args.smoke, when, {
        "requests_per_mix": requests, "flagship_comments": size, "results": results,
        "machine": machine_info({}, load_at_start, "shared machine; includes the process's start-up and seeding check")})
    shutil.rmtree(raw, ignore_errors=True)
    print(f"\nwrote {shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
