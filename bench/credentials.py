"""Pages under load while the site's temporary credentials rotate (issue 27's target: every 60 s for
10 minutes, no failed page).

    python -m bench.credentials                  # 10 minutes, new keys every 60 s
    python -m bench.credentials --smoke          # 20 s, new keys every 2 s

The benchmarks' shop (bench/dataset.py, 3,000-comment flagship) behind the strict endpoint (TLS,
every signature checked). The site gets no keys of its own: AWS_CONTAINER_CREDENTIALS_FULL_URI points
boto3's chain at the endpoint's container-credentials server, whose keys rotate every --rotate
seconds and expire --lifetime seconds after they are issued (the old ones are refused from then on).
Crawler threads GET random pages of every product through Django's WSGI handler, with the page
caches off so every page reads DynamoDB. Counted: pages answered and their statuses, the distinct
access key ids the endpoint saw (one per rotation, at least), and requests it refused.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from collections import Counter

from bench.common import DYNAMODB_LOCAL, get_environ, machine_info, stamp, write_json
from bench.dataset import Dataset

SIZE = 3_000


def crawl(paths: list[str], until: float, statuses: Counter, lock: threading.Lock, seed: int) -> None:
    from django.core.handlers.wsgi import WSGIHandler

    handler, rng = WSGIHandler(), random.Random(seed)
    while time.monotonic() < until:
        path, _, query = rng.choice(paths).partition("?")
        status = []
        b"".join(handler(get_environ(path, query), lambda code, headers, exc_info=None: status.append(code)))
        with lock:
            statuses[status[0].split()[0]] += 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.credentials", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--rotate", type=float, default=60.0, help="seconds between new keys")
    parser.add_argument("--lifetime", type=float, default=120.0, help="seconds a key is accepted after it is issued")
    parser.add_argument("--crawlers", type=int, default=4)
    parser.add_argument("--smoke", action="store_true", help="20 s, keys rotating every 2 s and living 4 s")
    args = parser.parse_args(argv)
    if args.smoke:
        args.seconds, args.rotate, args.lifetime = 20.0, 2.0, 4.0
    load_at_start = os.getloadavg()
    with Dataset(SIZE) as dataset:
        from django.test import override_settings

        import tests.signals  # noqa: F401  (override_settings rebuilds the AWS clients the seeding made)
        from bench.load import mixes
        from stack.strict_endpoint import StrictEndpoint
        from tests.config import index_config

        with StrictEndpoint(dataset.database.endpoint_url, config={"creating_seconds": 0}) as endpoint:
            os.environ.update(endpoint.env())
            for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
                os.environ.pop(name, None)
            os.environ["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = endpoint.temporary_credentials(
                "web-rotating", lifetime=args.lifetime, rotate_every=args.rotate)
            caches_off = {"COMMENTS_FAST_CACHE_SECONDS": 0, "COMMENTS_RENDERED_CACHE_SECONDS": 0,
                          "RESPONSE_MICRO_CACHE_SECONDS": 0}
            with override_settings(PAGINATION_INDEX=index_config(aws={"ENDPOINT_URL": endpoint.url}, cache_seconds=0),
                                   **caches_off):
                paths = mixes(dataset.products())["crawl"]
                statuses, lock = Counter(), threading.Lock()
                endpoint.clear_requests()
                started = time.monotonic()
                until = started + args.seconds
                threads = [threading.Thread(target=crawl, args=(paths, until, statuses, lock, seed))
                           for seed in range(args.crawlers)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                elapsed = time.monotonic() - started
                requests = endpoint.requests()
    keys = sorted({entry["key_id"] for entry in requests if entry["key_id"]})
    refused = Counter(entry["error"] for entry in requests if entry["status"] != 200)
    pages = sum(statuses.values())
    report = {"seconds": round(elapsed, 1), "rotate_seconds": args.rotate, "lifetime_seconds": args.lifetime,
              "crawlers": args.crawlers, "pages": pages, "statuses": dict(statuses),
              "failed_pages": pages - statuses.get("200", 0), "dynamodb_requests": len(requests),
              "access_key_ids": len(keys), "refused_at_endpoint": dict(refused)}
    for name, value in report.items():
        print(f"{name}: {value}")
    path = write_json("credentials", args.smoke, stamp(), {**report, "machine": machine_info(
        {}, load_at_start, f"{DYNAMODB_LOCAL} behind the strict endpoint; crawlers are threads of one process "
                           "serving through Django's WSGI handler, page caches off")})
    print(f"wrote {path}")
    # The endpoint issues a new key to the first fetch --rotate seconds after the last one, so how many
    # keys a run sees depends on how evenly the (busy) machine lets it fetch; a run cannot outlast
    # seconds / lifetime keys without using an expired one, which the endpoint would have refused.
    ok = report["failed_pages"] == 0 and len(keys) >= int(args.seconds // args.lifetime)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
