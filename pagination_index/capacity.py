"""A read-capacity budget shared by a long command's threads (rebuild_index, verify_index and
backfill_rating_keys' `--max-rcu`).

Each read spends the units DynamoDB says it consumed (ReturnConsumedCapacity) and the thread waits
while the spending runs ahead of the budget, so a table's provisioned capacity (or an on-demand
table's bill) is shared with the shop instead of being taken by a rebuild. A throttled read halves
the rate the budget allows; every quiet second gives back a tenth of the full rate.
"""
from __future__ import annotations

import random
import threading
import time

BURST_SECONDS = 1.0  # spending this far ahead of the budget is let through without waiting
RETRY_CAP_SECONDS = 20.0


class ReadBudget:
    def __init__(self, units_per_second: float | None = None):
        self.limit = units_per_second or 0.0  # 0: no budget
        self.rate = self.limit
        self.throttles = 0
        self._lock = threading.Lock()
        self._next = time.monotonic()
        self._quiet_since = self._next

    def spend(self, units: float) -> None:
        if not self.limit:
            return
        with self._lock:
            now = time.monotonic()
            self.rate = min(self.limit, self.rate + self.limit * 0.1 * max(now - self._quiet_since, 0))
            self._quiet_since = now
            self._next = max(self._next, now - BURST_SECONDS) + units / self.rate
            wait = self._next - now - BURST_SECONDS
        if wait > 0:
            time.sleep(wait)

    def throttled(self, attempt: int) -> None:
        """A read was throttled (after the SDK's own retries): slow down, then wait before retrying
        (capped exponential backoff with full jitter)."""
        with self._lock:
            self.throttles += 1
            if self.limit:
                self.rate = max(self.limit / 64, self.rate / 2)
                self._quiet_since = time.monotonic()
        time.sleep(random.uniform(0, min(RETRY_CAP_SECONDS, 0.2 * 2**attempt)))
