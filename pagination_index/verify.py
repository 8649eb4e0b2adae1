"""Comparing an index group with the table's truth, entry by entry and in full order."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from pagination_index.backends.base import BaseIndex, Entry, newest_first

READ_CHUNK = 5000


@dataclass
class GroupDrift:
    group: str
    table_count: int
    index_count: int  # what count() says, as pages use it
    missing: int = 0  # in the table, not in the index (or with another sort key)
    extra: int = 0  # in the index, not in the table
    misordered: int = 0  # common entries out of the table's order
    problems: list[str] = field(default_factory=list)  # count() disagreeing, backend integrity checks
    pending: int = 0  # writes the backend holds for a commit (files backend's log): included in reads, not drift

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.misordered or self.problems)


def index_entries(index: BaseIndex, group: str) -> list[Entry]:
    """Every entry of a group in index order, read in slices until one comes back short."""
    entries: list[Entry] = []
    while True:
        chunk = index.range(group, len(entries), len(entries) + READ_CHUNK)
        entries.extend(chunk)
        if len(chunk) < READ_CHUNK:
            return entries


def group_drift(index: BaseIndex, group: str, table: Sequence[Entry]) -> GroupDrift:
    expected = newest_first(table)
    actual = index_entries(index, group)
    drift = GroupDrift(group=group, table_count=len(expected), index_count=index.count(group))
    expected_set, actual_set = set(expected), set(actual)
    drift.missing = len(expected_set - actual_set)
    drift.extra = len(actual_set - expected_set)
    common_expected = [entry for entry in expected if entry in actual_set]
    common_actual = [entry for entry in actual if entry in expected_set]
    drift.misordered = sum(1 for a, b in zip(common_expected, common_actual) if a != b)
    if drift.index_count != len(actual):
        drift.problems.append(f"count() says {drift.index_count} but the group holds {len(actual)} entries")
    drift.problems.extend(index.check_integrity(group))
    drift.problems.extend(index.check_order(group, expected))
    drift.pending = index.pending_changes(group)
    return drift
