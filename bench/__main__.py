"""`make bench` / `make bench-smoke`: run every benchmark, passing the arguments on (e.g. --smoke)."""
import sys

from bench import filtered_pages, index_depth, relational_depth, sync_rate

BENCHMARKS = [index_depth, relational_depth, filtered_pages, sync_rate]

if __name__ == "__main__":
    sys.exit(max(benchmark.main(sys.argv[1:]) for benchmark in BENCHMARKS))
