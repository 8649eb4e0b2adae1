"""`make bench` / `make bench-smoke`: run every benchmark, passing the arguments on (e.g. --smoke).

Each runs in a process of its own: they point Django's settings at different data before setup.
"""
import subprocess
import sys
import time

BENCHMARKS = [
    "bench.index_depth", "bench.relational_depth", "bench.relational_writes", "bench.filtered_pages",
    "bench.sync_rate", "bench.index_memory", "bench.files_index", "bench.redis_cluster", "bench.dynamodb_cost", "bench.dynamodb_memory", "bench.page_depth",
    "bench.request_cpu", "bench.query_paths", "bench.render_cpu", "bench.load", "bench.abuse", "bench.chaos", "bench.credentials", "bench.moderation", "bench.scale", "bench.scale_bulk", "bench.rebuild_read",
    "bench.streams", "bench.resp", "bench.redis_wait", "bench.faults_net",
]

if __name__ == "__main__":
    failed = []
    for module in BENCHMARKS:
        started = time.monotonic()
        print(f"== {module} {' '.join(sys.argv[1:])}", flush=True)
        if subprocess.run([sys.executable, "-m", module, *sys.argv[1:]]).returncode:
            failed.append(module)
        print(f"== {module}: {time.monotonic() - started:.0f} s\n", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    sys.exit(1 if failed else 0)
