"""`make bench` / `make bench-smoke`: run benchmarks, passing the arguments on (e.g. --smoke).

    python -m bench                 # every benchmark at full size (make bench)
    python -m bench --smoke         # the CI set, each at its smoke size (make bench-smoke)
    python -m bench --smoke --all   # every benchmark at its smoke size (about half an hour here)

Each runs in a process of its own: they point Django's settings at different data before setup.
CI's budget (audit, the suite and the smoke set under 30 minutes on 2 cores) holds SMOKE to the
benchmarks whose scripts nothing else runs; the others start gunicorn, nginx or several DynamoDB Locals
for minutes and their behaviour is the suite's own (tests/ops/test_nginx.py, tests/comments/test_lag_
invariants.py, tests/pagination_index/test_stream_topology.py, ...): run them with --all.
"""
import subprocess
import sys
import time

BENCHMARKS = [
    "bench.index_depth", "bench.relational_depth", "bench.relational_writes", "bench.filtered_pages",
    "bench.sync_rate", "bench.index_memory", "bench.files_index", "bench.redis_cluster", "bench.dynamodb_cost",
    "bench.dynamodb_memory", "bench.page_depth", "bench.request_cpu", "bench.query_paths", "bench.render_cpu",
    "bench.load", "bench.abuse", "bench.chaos", "bench.credentials", "bench.moderation", "bench.scale",
    "bench.scale_bulk", "bench.rebuild_read", "bench.streams", "bench.resp", "bench.redis_wait", "bench.faults_net",
]
# `make bench-smoke` in CI: seconds each, at smoke size, on 2 quiet cores.
SMOKE = [
    "bench.index_depth", "bench.relational_depth", "bench.relational_writes", "bench.filtered_pages",
    "bench.index_memory", "bench.files_index", "bench.redis_cluster", "bench.dynamodb_memory", "bench.request_cpu",
    "bench.query_paths", "bench.credentials", "bench.scale", "bench.rebuild_read", "bench.resp", "bench.redis_wait",
    "bench.faults_net",
]

if __name__ == "__main__":
    args = sys.argv[1:]
    every = "--all" in args
    args = [arg for arg in args if arg != "--all"]
    chosen = SMOKE if "--smoke" in args and not every else BENCHMARKS
    failed = []
    for module in chosen:
        started = time.monotonic()
        print(f"== {module} {' '.join(args)}", flush=True)
        if subprocess.run([sys.executable, "-m", module, *args]).returncode:
            failed.append(module)
        print(f"== {module}: {time.monotonic() - started:.0f} s\n", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    sys.exit(1 if failed else 0)
