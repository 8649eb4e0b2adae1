"""A read-capacity budget shared by a long command's threads (rebuild_index, verify_index and
backfill_rating_keys' `--max-rcu`).

Each read spends the units DynamoDB says it consumed (ReturnConsumedCapacity) and the thread waits
while the spending runs ahead of the budget, so a table's provisioned capacity (or an on-demand
table's bill) is shared with the site instead of being taken by a rebuild. Throttled reads are
botocore's business: the bulk client's adaptive retry mode retries them and slows its own rate down.
"""
from __future__ import annotations

import threading
import time

BURST_SECONDS = 1.0  # spending this far ahead of the budget is let through without waiting


class ReadBudget:
    def __init__(self, units_per_second: float | None = None):
        self.limit = units_per_second or 0.0  # 0: no budget
        self._lock = threading.Lock()
        self._next = time.monotonic()

    def spend(self, units: float) -> None:
        if not self.limit:
            return
        with self._lock:
            now = time.monotonic()
            self._next = max(self._next, now - BURST_SECONDS) + units / self.limit
            wait = self._next - now - BURST_SECONDS
        if wait > 0:
            time.sleep(wait)
