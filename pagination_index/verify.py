"""Comparing an index group with the table's truth, entry by entry and in full order, as streams.

The table's entries arrive newest first (BaseSource.group_entries) and the index's are read in
slices, so a comparison holds a bounded window of entries whatever the group's size: the index's
entries pass through a reordering window (entries out of place by less than ORDER_WINDOW ranks are
put back in order, and counted as misordered), then one merge of two sorted streams counts what is
missing and what is extra.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

from pagination_index.backends.base import BaseIndex, Entry, newest_first

READ_CHUNK = 5000
ORDER_WINDOW = 1000
# check_order() is given the table's entries as a list for groups up to this size (the DynamoDB
# index checks each page item against them); larger groups skip that backend check.
ORDER_CHECK_LIMIT = 100_000


@dataclass
class GroupDrift:
    group: str
    table_count: int
    index_count: int  # what count() says, as pages use it
    missing: int = 0  # in the table, not in the index (or with another sort key)
    extra: int = 0  # in the index, not in the table
    misordered: int = 0  # index entries away from their place in the table's order
    problems: list[str] = field(default_factory=list)  # count() disagreeing, backend integrity checks
    pending: int = 0  # writes the backend holds for a commit (files backend's log): included in reads, not drift
    index_read: int = 0  # entries the index's range() gave

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.misordered or self.problems)


class _Newest(tuple):
    """(sort_key, member) ordered so that heapq's smallest is the newest entry."""

    def __lt__(self, other):
        return tuple.__gt__(self, other)


def index_entries(index: BaseIndex, group: str) -> Iterator[Entry]:
    """Every entry of a group in index order, read in slices until one comes back short."""
    start = 0
    while True:
        chunk = index.range(group, start, start + READ_CHUNK)
        yield from chunk
        start += len(chunk)
        if len(chunk) < READ_CHUNK:
            return


def _reordered(entries: Iterable[Entry], drift: GroupDrift) -> Iterator[Entry]:
    """The entries in index order, put right within ORDER_WINDOW; counts the raw positions that
    differ from the ordered ones (misordered) and every entry read (drift.index_read)."""
    window: list[_Newest] = []
    raw: deque[Entry] = deque()

    def emit() -> Entry:
        sort_key, member = heapq.heappop(window)
        entry = (member, sort_key)
        if raw.popleft() != entry:
            drift.misordered += 1
        return entry

    for entry in entries:
        drift.index_read += 1
        raw.append(entry)
        heapq.heappush(window, _Newest((entry[1], entry[0])))
        if len(window) > ORDER_WINDOW:
            yield emit()
    while window:
        yield emit()


def stream_drift(index: BaseIndex, group: str, table: Iterable[Entry]) -> GroupDrift:
    """Compare a group with the table's entries given newest first."""
    drift = GroupDrift(group=group, table_count=0, index_count=index.count(group))
    kept: list[Entry] | None = []

    def key(entry: Entry) -> tuple[str, str]:
        return entry[1], entry[0]

    expected = iter(table)

    def next_expected() -> Entry | None:
        nonlocal kept
        entry = next(expected, None)
        if entry is not None:
            drift.table_count += 1
            if kept is not None:
                kept.append(entry)
                if len(kept) > ORDER_CHECK_LIMIT:
                    kept = None
        return entry

    want = next_expected()
    for entry in _reordered(index_entries(index, group), drift):
        while want is not None and key(want) > key(entry):
            drift.missing += 1
            want = next_expected()
        if want == entry:
            want = next_expected()
        else:
            drift.extra += 1
    while want is not None:
        drift.missing += 1
        want = next_expected()
    if drift.index_count != drift.index_read:
        drift.problems.append(f"count() says {drift.index_count} but the group holds {drift.index_read} entries")
    drift.problems.extend(index.check_integrity(group))
    if kept is not None:
        drift.problems.extend(index.check_order(group, kept))
    drift.pending = index.pending_changes(group)
    return drift


def group_drift(index: BaseIndex, group: str, table: Sequence[Entry]) -> GroupDrift:
    """Compare a group with the table's entries given in any order (a list)."""
    return stream_drift(index, group, newest_first(table))
