"""The pagination index contract: one sorted set of (member, sort_key) per group.

Order, everywhere, is newest first: sort_key descending, ties broken by member descending.
Rank 0 is the newest entry. Modelled on django.core.cache.backends.base: the essentials raise
NotImplementedError, the rest have slow-but-correct defaults that backends override for speed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from django.core.exceptions import ImproperlyConfigured

Entry = tuple[str, str]  # (member, sort_key)


class InvalidIndexBackendError(ImproperlyConfigured):
    pass


class IndexUnavailable(Exception):
    """The index store cannot be reached or failed; the caller should answer 503, not 500."""


@dataclass(frozen=True, slots=True)
class Add:
    group: str
    member: str
    sort_key: str


@dataclass(frozen=True, slots=True)
class Remove:
    group: str
    member: str


Op = Add | Remove


def net_ops(ops: Iterable[Op]) -> tuple[dict[str, list[Entry]], dict[str, list[str]]]:
    """Reduce a sequence of ops to its net effect, as (adds by group, removes by group).

    Adds are upserts and removes are idempotent, so the last op on a (group, member) decides its
    final state: applying only the last ones, in any order, ends in the same place.
    """
    last: dict[tuple[str, str], Op] = {}
    for op in ops:
        last[(op.group, op.member)] = op
    adds: dict[str, list[Entry]] = {}
    removes: dict[str, list[str]] = {}
    for (group, member), op in last.items():
        if isinstance(op, Add):
            adds.setdefault(group, []).append((member, op.sort_key))
        else:
            removes.setdefault(group, []).append(member)
    return adds, removes


def newest_first(entries: Iterable[Entry]) -> list[Entry]:
    """Entries in index order: sort_key descending, then member descending."""
    return sorted(entries, key=lambda entry: (entry[1], entry[0]), reverse=True)


def is_newer(entry: Entry, sort_key: str, member: str | None = None) -> bool:
    """Whether `entry` comes before (sort_key, member) in index order; with member None, before
    every entry with that sort key."""
    if member is None:
        return entry[1] > sort_key
    return (entry[1], entry[0]) > (sort_key, member)


class BaseIndex:
    def __init__(self, options: dict | None = None):
        self.options = dict(options or {})

    # --- writes -------------------------------------------------------------------------------
    def add_many(self, group: str, entries: Sequence[Entry]) -> None:
        raise NotImplementedError("subclasses of BaseIndex must provide an add_many() method")

    def remove_many(self, group: str, members: Sequence[str]) -> None:
        raise NotImplementedError("subclasses of BaseIndex must provide a remove_many() method")

    def replace(self, group: str, entries: Sequence[Entry]) -> None:
        raise NotImplementedError("subclasses of BaseIndex must provide a replace() method")

    def apply(self, ops: Iterable[Op]) -> None:
        """Apply a batch of ops. This default is not atomic; backends that can be, override it."""
        adds, removes = net_ops(ops)
        for group, members in removes.items():
            self.remove_many(group, members)
        for group, entries in adds.items():
            self.add_many(group, entries)

    # --- reads --------------------------------------------------------------------------------
    def count(self, group: str) -> int:
        raise NotImplementedError("subclasses of BaseIndex must provide a count() method")

    def at(self, group: str, rank: int) -> Entry | None:
        raise NotImplementedError("subclasses of BaseIndex must provide an at() method")

    def range(self, group: str, start: int, stop: int) -> list[Entry]:
        """Entries at ranks start..stop-1, newest first."""
        result = []
        for rank in range(max(start, 0), stop):
            entry = self.at(group, rank)
            if entry is None:
                break
            result.append(entry)
        return result

    def count_many(self, groups: Iterable[str]) -> dict[str, int]:
        return {group: self.count(group) for group in groups}

    def count_newer(self, group: str, sort_key: str, member: str | None = None) -> int:
        """How many entries come strictly before (sort_key, member) in index order: the rank that
        entry has or would have. With member None, the entries with a greater sort_key.

        This default is a binary search over at(): O(log n) reads. Backends override it with one call.
        """
        low, high = 0, self.count(group)
        while low < high:
            middle = (low + high) // 2
            entry = self.at(group, middle)
            if entry is not None and is_newer(entry, sort_key, member):
                low = middle + 1
            else:
                high = middle
        return low

    def count_newer_many(self, groups: Iterable[str], sort_key: str, member: str | None = None) -> dict[str, int]:
        """count_newer() of one key in several groups (filtered pages ask it of every chosen group)."""
        return {group: self.count_newer(group, sort_key, member) for group in groups}

    def groups(self) -> list[str]:
        """Every non-empty group (rebuild, verify, operators)."""
        raise NotImplementedError("subclasses of BaseIndex must provide a groups() method")

    def clear(self) -> None:
        """Drop every group (tests and full rebuilds)."""
        for group in self.groups():
            self.replace(group, [])

    def close(self) -> None:
        """Release connections; called when the handler is reset."""
