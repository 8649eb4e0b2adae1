"""Hide 100 comments of a large product while crawlers read it: how long until no page shows any of
them, what the hides cost, what the crawlers' pages cost meanwhile, and the same for showing them again.

    python -m bench.moderation              # the flagship with 100,000 comments (the issue's target)
    python -m bench.moderation --smoke      # 3,000 comments, 10 hides, one crawler (under a minute)

The benchmarks' shop (bench/dataset.py) in a folder of its own (its SQLite database, index and stream
checkpoints are put back as seeded at every run, like DynamoDB Local's data). Django runs in this
process with its caches as in production (fast window COMMENTS_FAST_CACHE_SECONDS, rendered HTML,
micro-cache); crawler threads GET random pages of the flagship through Django's WSGI handler (no HTTP
server: nginx keeps a page one second, deploy/nginx); the stream consumer (sync_index) follows in a
thread. The moderator hides comments spread over every depth through moderation.services, one after
another; then a checker fetches every page of the product until none of them shows a hidden comment,
and verify_index checks the index. Then all are shown again, and every page must be as before.
"""
from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import sys
import threading
import time

from bench.common import DYNAMODB_LOCAL, format_table, machine_info, stamp, write_json
from bench.dataset import DATA, FLAGSHIP, Dataset

SIZE, SMOKE_SIZE = 100_000, 3_000
HIDES, SMOKE_HIDES = 100, 10
CRAWLERS, SMOKE_CRAWLERS = 2, 1
COMMENT_ID = re.compile(rb'id="comment-([0-9a-f]+)"')


class ModerationDataset(Dataset):
    """The benchmarks' shop in moderation-<size>/: this benchmark writes to the table, the index and
    the moderation tables, so it keeps its own copy and restores the SQLite database too."""

    def __init__(self, size: int):
        super().__init__(size)
        self.folder = DATA / f"moderation-{size}"
        self.saved = self.folder / "dynamodb"
        self.database.log_path = self.folder / "dynamodb.log"
        os.environ["SHOP_VAR_DIR"] = str(self.folder)

    def __enter__(self):
        database = self.folder / "db.sqlite3"
        pristine = self.folder / "db.sqlite3.seeded"
        if self.stamp.exists() and pristine.exists():
            shutil.copyfile(pristine, database)
        super().__enter__()
        if not pristine.exists():
            from django.db import connection

            connection.close()
            shutil.copyfile(database, pristine)
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)  # moderation's tables on an older copy
        return self


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))] if values else float("nan")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SIZE:,} comments, {SMOKE_HIDES} hides")
    parser.add_argument("--hides", type=int, help=f"comments hidden (default {HIDES}, smoke {SMOKE_HIDES})")
    parser.add_argument("--crawlers", type=int, help=f"crawler threads (default {CRAWLERS}, smoke {SMOKE_CRAWLERS})")
    args = parser.parse_args(argv)
    size = SMOKE_SIZE if args.smoke else SIZE
    hides = args.hides or (SMOKE_HIDES if args.smoke else HIDES)
    crawler_threads = args.crawlers or (SMOKE_CRAWLERS if args.smoke else CRAWLERS)
    load = os.getloadavg()
    when = stamp()
    with ModerationDataset(size):
        from django.conf import settings
        from django.core.management import call_command
        from django.test import Client

        from comments.selectors import product_comment_slice
        from comments.table.keys import PRODUCTS
        from moderation import services
        from pagination_index import get_index, sources
        from pagination_index.stream import StreamConsumer

        page_size = settings.COMMENTS_PAGE_SIZE
        count = get_index().count(FLAGSHIP)
        pages = [f"/products/{FLAGSHIP}/"] + [f"/products/{FLAGSHIP}/?page={n}"
                                               for n in range(2, (count - 1) // page_size + 2)]
        rng = random.Random(32)
        ranks = sorted(rng.sample(range(count), hides))
        targets = [product_comment_slice(sku=FLAGSHIP, offset=rank, limit=1).comments[0].pk for rank in ranks]
        # The pages a hidden comment could be on: its own, give or take the hides before it (a page
        # shifts by at most the removed comments), and page 1; at 100,000 comments the other 4,900
        # pages cannot show it and would make each check take minutes.
        near = sorted({1, *(number for rank in ranks
                            for number in range(max(1, (rank - hides) // page_size + 1),
                                                min(len(pages), (rank + hides) // page_size + 1) + 1))})
        checked = [pages[number - 1] for number in near]

        stop = threading.Event()
        consumer = StreamConsumer(index=get_index(), stream_arn=sources[PRODUCTS].stream_arn(), stop_event=stop)
        follower = threading.Thread(target=consumer.run, kwargs={"once": False, "poll_seconds": 1.0})
        follower.start()
        latencies: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        phase = {"name": "before"}
        errors: list[str] = []

        def crawl(seed: int) -> None:
            client, own = Client(), random.Random(seed)
            while not stop.is_set():
                url = own.choice(pages)
                started = time.perf_counter()
                status = client.get(url).status_code
                latencies[phase["name"]].append(time.perf_counter() - started)
                if status not in (200, 404):  # a page past the end after hides: 404
                    errors.append(f"{url}: {status}")

        crawlers = [threading.Thread(target=crawl, args=(i,)) for i in range(crawler_threads)]
        for thread in crawlers:
            thread.start()

        def all_pages() -> dict[str, bytes]:
            client = Client()
            seen = {}
            for url in checked:
                response = client.get(url)
                seen[url] = response.content if response.status_code == 200 else b""
            return seen

        def shown(snapshot) -> set[str]:
            return {pk.decode() for body in snapshot.values() for pk in COMMENT_ID.findall(body)}

        def wait_until(done, label: str) -> float:
            started = time.monotonic()
            while True:
                snapshot = all_pages()
                if done(snapshot):
                    return time.monotonic() - started
                if time.monotonic() - started > 600:
                    raise SystemExit(f"{label}: not done after 600 s")
                print(f"  {label}: not yet ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)

        try:
            time.sleep(1)  # the crawlers' "before" sample
            before = all_pages()
            assert set(targets) <= shown(before)
            phase["name"] = "during"
            cpu, started = time.process_time(), time.monotonic()
            hide_seconds, hide_cpu = [], []
            for pk in targets:
                t0, c0 = time.perf_counter(), time.thread_time()
                services.comment_hide(comment_id=pk, actor=None, reason="bench")
                hide_seconds.append(time.perf_counter() - t0)
                hide_cpu.append(time.thread_time() - c0)  # this thread's CPU: ours, not DynamoDB Local's
            hidden_at = time.monotonic()
            gone = wait_until(lambda snap: not set(targets) & shown(snap), "hidden comments still shown")
            total_gone = time.monotonic() - started
            phase["name"] = "after"
            call_command("verify_index", group=[FLAGSHIP], verbosity=0)
            for pk in targets:
                services.comment_unhide(comment_id=pk, actor=None, reason="bench")
            back = wait_until(lambda snap: snap == before, "pages not yet as before")
            process_cpu = time.process_time() - cpu
        finally:
            stop.set()
            for thread in crawlers:
                thread.join()
            follower.join()
        call_command("verify_index", group=[FLAGSHIP], verbosity=0)

    report = {
        "flagship_comments": count, "pages": len(pages), "pages_checked": len(checked), "hidden": hides, "crawler_threads": crawler_threads,
        "hide_ms": {"median": round(statistics.median(hide_seconds) * 1000, 1),
                    "p95": round(percentile(hide_seconds, 95) * 1000, 1),
                    "cpu_median": round(statistics.median(hide_cpu) * 1000, 1)},
        "hides_took_s": round(hidden_at - started, 1),
        "from_first_hide_to_gone_everywhere_s": round(total_gone, 1),
        "from_last_hide_to_gone_everywhere_s": round(gone, 1),
        "from_unhide_to_every_page_as_before_s": round(back, 1),
        "process_cpu_s_whole_run": round(process_cpu, 1),
        "crawler_page_ms": {name: {"requests": len(values), "p50": round(percentile(values, 50) * 1000, 1),
                                   "p95": round(percentile(values, 95) * 1000, 1)}
                            for name, values in latencies.items()},
        "crawler_errors": errors[:10],
    }
    report["machine"] = machine_info({"DynamoDB Local": DYNAMODB_LOCAL}, load, (
        "Django in-process (WSGI handler, no HTTP server), caches as in production; sync_index following in a "
        "thread; DynamoDB Local; shared machine: see the load averages"))
    rows = [[name, str(v["requests"]), f"{v['p50']:.1f}", f"{v['p95']:.1f}"] for name, v in report["crawler_page_ms"].items()]
    print(format_table(["crawler pages", "requests", "p50 ms", "p95 ms"], rows))
    print(f"{hides} hides of {count:,} comments: {report['hide_ms']['median']} ms each (median; {report['hide_ms']['cpu_median']} ms of our CPU); gone from the "
          f"{len(checked):,} pages that could show them {report['from_first_hide_to_gone_everywhere_s']} s after the first hide; every page "
          f"as before {report['from_unhide_to_every_page_as_before_s']} s after showing them again; "
          f"load average {load[0]:.1f} -> {os.getloadavg()[0]:.1f}")
    print(write_json("moderation", args.smoke, when, report))
    if errors:
        raise SystemExit(f"crawlers saw {len(errors)} errors, e.g. {errors[0]}")


if __name__ == "__main__":
    main()
