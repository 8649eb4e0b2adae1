"""Lag samples: how old stream records are when the consumer applies them, kept for a few hours."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from pagination_index.conf import index_settings
from pagination_index.models import LagSample


def lag_seconds(created: datetime, now: datetime) -> float:
    """Seconds between a record's creation (as the stream reports it) and its applying; never
    negative, though the stream's clock and ours may disagree."""
    return max((now - created).total_seconds(), 0.0)


class LagSampler:
    """Keeps the largest lag seen and writes it as a LagSample at most once per `every` seconds."""

    def __init__(self, every: float | None = None, keep_hours: float | None = None):
        sync = index_settings.SYNC
        self.every = sync["LAG_SAMPLE_SECONDS"] if every is None else every
        self.keep = timedelta(hours=sync["LAG_SAMPLE_KEEP_HOURS"] if keep_hours is None else keep_hours)
        self.worst: float | None = None
        self._last_write = float("-inf")

    def note(self, lag_seconds: float | None) -> None:
        if lag_seconds is not None:
            self.worst = lag_seconds if self.worst is None else max(self.worst, lag_seconds)

    def flush(self, *, force: bool = False) -> LagSample | None:
        """Write the worst lag noted since the last sample, if one is due; prune old samples."""
        now = time.monotonic()
        if self.worst is None or not (force or now - self._last_write >= self.every):
            return None
        at = datetime.now(timezone.utc)
        sample = LagSample.objects.create(at=at, lag_seconds=round(self.worst, 3))
        LagSample.objects.filter(at__lt=at - self.keep).delete()
        self.worst = None
        self._last_write = now
        return sample
