"""The relational backend: IndexEntry rows with a covering index, IndexGroup counts.

Works on SQLite and PostgreSQL. at() is ORDER BY ... OFFSET, which walks `rank` index entries:
cheap for the ranks a shop usually has, linear in depth beyond that.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from django.db import DatabaseError, router, transaction
from django.db.models import Count, F, Q

from pagination_index.backends.base import BaseIndex, Entry, IndexUnavailable, Op, Removal, net_ops
from pagination_index.models import IndexEntry, IndexGroup

# Stays under every SQLite build's bound-parameter limit.
CHUNK = 500


def _chunks(items, size=CHUNK):
    for start in range(0, len(items), size):
        yield items[start : start + size]


class RelationalIndex(BaseIndex):
    def __init__(self, options=None):
        super().__init__(options)
        self.using = self.options.get("DATABASE") or router.db_for_write(IndexEntry)

    # --- writes -------------------------------------------------------------------------------
    def add_many(self, group: str, entries: Sequence[Entry]) -> None:
        self.apply_net({group: list(entries)}, {})

    def remove_many(self, group: str, members: Sequence[str]) -> None:
        self.apply_net({}, {group: [(member, None) for member in members]})

    def remove_entries(self, group: str, removals: Sequence[Removal]) -> None:
        self.apply_net({}, {group: list(removals)})

    def apply(self, ops: Iterable[Op]) -> None:
        adds, removes = net_ops(ops)
        self.apply_net(adds, removes)

    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        """Upsert and delete across groups in one transaction, keeping the group counts exact."""
        try:
            with transaction.atomic(using=self.using):
                for group in sorted(set(adds) | set(removes)):  # a fixed lock order: no deadlocks
                    self._lock_group(group)
                    delta = -self._delete(group, removes.get(group, []))
                    delta += self._upsert(group, adds.get(group, []))
                    if delta:
                        IndexGroup.objects.using(self.using).filter(name=group).update(count=F("count") + delta)
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc

    def _lock_group(self, group: str) -> None:
        groups = IndexGroup.objects.using(self.using)
        groups.bulk_create([IndexGroup(name=group, count=0)], ignore_conflicts=True)
        list(groups.select_for_update().filter(name=group).values_list("pk"))

    def _delete(self, group: str, removals: list[Removal]) -> int:
        """Delete members, the conditional ones only where the sort key still matches."""
        rows = IndexEntry.objects.using(self.using).filter(group=group)
        deleted = 0
        for chunk in _chunks(removals):
            wanted: dict[str, set | None] = {}
            for member, sort_key in chunk:
                if sort_key is None or wanted.get(member, set()) is None:
                    wanted[member] = None
                else:
                    wanted.setdefault(member, set()).add(sort_key)
            existing = rows.filter(member__in=list(wanted)).values_list("member", "sort_key")
            doomed = [member for member, sort_key in existing if wanted[member] is None or sort_key in wanted[member]]
            if doomed:
                deleted += rows.filter(member__in=doomed).delete()[0]
        return deleted

    def _upsert(self, group: str, entries: list[Entry]) -> int:
        """Insert new members, move changed ones; return how many members are new."""
        wanted = dict(entries)  # a member given twice keeps its last sort key
        rows = IndexEntry.objects.using(self.using)
        new = 0
        for chunk in _chunks(list(wanted.items())):
            members = [member for member, _ in chunk]
            existing = dict(rows.filter(group=group, member__in=members).values_list("member", "sort_key"))
            moved = [member for member, sort_key in chunk if member in existing and existing[member] != sort_key]
            if moved:
                rows.filter(group=group, member__in=moved).delete()
            fresh = [(member, sort_key) for member, sort_key in chunk if existing.get(member) != sort_key]
            rows.bulk_create(IndexEntry(group=group, member=m, sort_key=s) for m, s in fresh)
            new += sum(1 for member, _ in chunk if member not in existing)
        return new

    def replace(self, group: str, entries: Sequence[Entry]) -> None:
        wanted = dict(entries)
        try:
            with transaction.atomic(using=self.using):
                self._lock_group(group)
                IndexEntry.objects.using(self.using).filter(group=group).delete()
                for chunk in _chunks(list(wanted.items()), 2000):
                    IndexEntry.objects.using(self.using).bulk_create(
                        IndexEntry(group=group, member=m, sort_key=s) for m, s in chunk
                    )
                IndexGroup.objects.using(self.using).filter(name=group).update(count=len(wanted))
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc

    def clear(self) -> None:
        with transaction.atomic(using=self.using):
            IndexEntry.objects.using(self.using).all().delete()
            IndexGroup.objects.using(self.using).all().delete()

    # --- reads --------------------------------------------------------------------------------
    def _ordered(self, group: str):
        return (
            IndexEntry.objects.using(self.using)
            .filter(group=group)
            .order_by("-sort_key", "-member")
            .values_list("member", "sort_key")
        )

    def count(self, group: str) -> int:
        return self.count_many([group])[group]

    def count_many(self, groups: Iterable[str]) -> dict[str, int]:
        groups = list(groups)
        try:
            counts = {}
            for chunk in _chunks(groups):
                counts.update(IndexGroup.objects.using(self.using).filter(name__in=chunk).values_list("name", "count"))
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc
        return {group: counts.get(group, 0) for group in groups}

    def at(self, group: str, rank: int) -> Entry | None:
        if rank < 0:
            return None
        found = self.range(group, rank, rank + 1)
        return found[0] if found else None

    def range(self, group: str, start: int, stop: int) -> list[Entry]:
        start = max(start, 0)
        if stop <= start:
            return []
        try:
            return list(self._ordered(group)[start:stop])
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc

    def count_newer(self, group: str, sort_key: str, member: str | None = None) -> int:
        return self.count_newer_many([group], sort_key, member)[group]

    def count_newer_many(self, groups: Iterable[str], sort_key: str, member: str | None = None) -> dict[str, int]:
        """One COUNT over the covering index for all the groups. It walks the newer entries, so it is
        linear in the rank, like at(): counted blocks would make both flat."""
        groups = list(groups)
        newer = Q(sort_key__gt=sort_key)
        if member is not None:
            newer |= Q(sort_key=sort_key, member__gt=member)
        try:
            counts = dict(
                IndexEntry.objects.using(self.using).filter(newer, group__in=groups)
                .values("group").annotate(newer=Count("pk")).values_list("group", "newer")
            )
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc
        return {group: counts.get(group, 0) for group in groups}

    def groups(self) -> list[str]:
        return list(IndexGroup.objects.using(self.using).filter(count__gt=0).order_by("name").values_list("name", flat=True))
