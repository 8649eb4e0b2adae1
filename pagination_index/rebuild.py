"""Walking a source's table group by group for rebuild_index and verify_index.

Memory stays flat at any table size: groups are listed a page at a time, each group's entries
stream from the table into the backend's replace() (or into a comparison) without being held,
and a group finished is a RebuildCheckpoint row, so `--resume` skips it after a crash or Ctrl-C.
Several workers take waves of groups at once, their reads sharing one ReadBudget.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Iterable, Iterator

from django.db import connections
from django.utils import timezone

from pagination_index.backends.base import BaseIndex, Entry, batched
from pagination_index.capacity import ReadBudget
from pagination_index.fences import Fences
from pagination_index.leases import lease_acquire, lease_release, new_owner_id
from pagination_index.models import RebuildCheckpoint
from pagination_index.sequence import shared
from pagination_index.sources import BaseSource
from pagination_index.stale import stale_groups_clear, stale_groups_mark

UNITS_PAGE = 1000


def pending_units(units: Iterable[str], *, run: str, resume: bool, using: str) -> Iterator[str]:
    """`units` without those a previous run of `run` finished (with resume); without resume, the
    previous run's checkpoints are dropped first."""
    checkpoints = RebuildCheckpoint.objects.using(using).filter(run=run)
    if not resume:
        checkpoints.delete()
    for page in batched(units, UNITS_PAGE):
        done = set(checkpoints.filter(unit__in=page).values_list("unit", flat=True))
        yield from (unit for unit in page if unit not in done)


def unit_done(unit: str, *, run: str, using: str) -> None:
    RebuildCheckpoint.objects.using(using).get_or_create(run=run, unit=unit)


def run_finished(run: str, *, using: str) -> None:
    RebuildCheckpoint.objects.using(using).filter(run=run).delete()


def in_waves(units: Iterable[str], work: Callable[[list[str]], None], *, workers: int, wave: int,
             stop: threading.Event | None = None) -> None:
    """Call work(wave) on consecutive waves of units, from `workers` threads (inline for one);
    the first error stops every worker and is raised."""
    waves = batched(units, wave)
    stop = stop or threading.Event()
    if workers == 1:
        for chunk in waves:
            if stop.is_set():
                return
            work(chunk)
        return
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker():
        try:
            while not stop.is_set():
                with lock:
                    chunk = next(waves, None)
                if chunk is None:
                    return
                work(chunk)
        except BaseException as exc:  # handed to the main thread below
            errors.append(exc)
            stop.set()
        finally:
            connections.close_all()  # this thread's own

    threads = [threading.Thread(target=worker, name=f"unit-worker-{n}", daemon=True) for n in range(workers)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # a short join keeps Ctrl-C deliverable to the main thread
    except KeyboardInterrupt:
        stop.set()
        for thread in threads:
            thread.join()
        raise
    if errors:
        raise errors[0]


class Rebuild:
    """Refill groups of a source from the table while the stream keeps flowing (fences.py): a wave's
    groups are fenced, and after a settle wait each group is read, swapped in and its journal
    replayed, one group after another."""

    def __init__(self, *, index: BaseIndex, source: BaseSource, using: str, budget: ReadBudget | None = None,
                 fence_seconds: float = 120.0, settle_seconds: float = 1.0, run: str | None = None,
                 on_entries: Callable[[int], None] | None = None):
        self.index, self.source, self.using = index, source, using
        self.budget = budget or ReadBudget()
        self.settle_seconds = settle_seconds
        self.run = run
        self.on_entries = on_entries
        self.fences = Fences(owner=new_owner_id("rebuild"), using=using, seconds=fence_seconds)
        self.groups = 0
        self.entries = 0
        self._lock = threading.Lock()

    def wave(self, groups: list[str]) -> None:
        started = timezone.now()
        self.fences.open(groups)
        try:
            with self.fences.renewed():  # until the wave's last group is swapped, however long it takes
                if self.settle_seconds > 0:
                    time.sleep(self.settle_seconds)
                for group in groups:
                    self._group(group, started)
        finally:  # a failed or interrupted wave: the stream's ops held for its groups go in now
            self.fences.close(self.index, groups)

    def _group(self, group: str, started) -> None:
        counted = _Counted(self.source.group_entries(group, budget=self.budget), self.on_entries)
        self.index.replace(group, counted)
        lost = self.fences.close(self.index, [group])
        shared(self.source).invalidate(group)  # what pages shared of the group (counts) is read again
        if lost:
            stale_groups_mark(groups=lost, reason="its rebuild's fence expired before the swap", using=self.using)
        stale_groups_clear(groups=[group], before=started, using=self.using)
        if self.run:
            unit_done(group, run=self.run, using=self.using)
        with self._lock:
            self.groups += 1
            self.entries += counted.count


class _Counted:
    """An entry stream that counts what passes (and advances a progress bar every TICK entries)."""

    TICK = 1000

    def __init__(self, entries: Iterable[Entry], on_entries: Callable[[int], None] | None):
        self.entries, self.on_entries, self.count = entries, on_entries, 0

    def __iter__(self) -> Iterator[Entry]:
        for entry in self.entries:
            self.count += 1
            if self.on_entries and self.count % self.TICK == 0:
                self.on_entries(self.TICK)
            yield entry
        if self.on_entries and self.count % self.TICK:
            self.on_entries(self.count % self.TICK)


def note_unread_shards(*, index: BaseIndex, stream_arn: str, lease_seconds: float, sources: list[BaseSource]) -> int:
    """Give every shard no consumer has read yet a checkpoint at its current end, each under its
    own lease for the moment it takes: what the rebuild reads from the table need not be replayed
    from the start of the stream. Shards already being read are left alone. Returns how many."""
    from pagination_index.stream import StreamConsumer

    consumer = StreamConsumer(index=index, stream_arn=stream_arn, owner=new_owner_id("rebuild"),
                              lease_seconds=lease_seconds, sources=sources)
    noted = 0
    for shard in consumer.describe_shards():
        checkpoint = consumer._checkpoint(shard)
        if checkpoint.sequence_number or checkpoint.finished:
            continue
        if lease_acquire(checkpoint=checkpoint, owner=consumer.owner, seconds=lease_seconds):
            try:
                if not checkpoint.sequence_number and not checkpoint.finished:
                    consumer.note_position(checkpoint, shard)
                    noted += 1
            finally:
                lease_release(stream_arn=stream_arn, owner=consumer.owner, using=consumer.database)
    return noted
