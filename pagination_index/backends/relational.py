"""The relational backends: IndexEntry rows with a covering index, IndexGroup counts.

Works on SQLite and PostgreSQL. RelationalIndex (the default) also keeps counted blocks of each
group's sort order (backends/blocks.py), so at() and range() cost the same at any depth.
PlainRelationalIndex is the seed design, kept as the benchmark's baseline: its at() is ORDER BY ...
OFFSET, which walks `rank` index entries, linear in depth.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Iterable, NamedTuple, Sequence

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections, router, transaction
from django.db.models import Count, F, Q

from pagination_index.backends.base import Entry, IndexUnavailable, NetWriteIndex, Removal
from pagination_index.backends.blocks import MIN, BlockTree, Key
from pagination_index.models import IndexBlock, IndexEntry, IndexGroup

Change = tuple[Key, int]  # ((sort_key, member), +1 added or -1 removed)

# Stays under every SQLite build's bound-parameter limit.
CHUNK = 500


def _chunks(items, size=CHUNK):
    for start in range(0, len(items), size):
        yield items[start : start + size]


class PlainRelationalIndex(NetWriteIndex):
    def __init__(self, options=None):
        super().__init__(options)
        self.using = self.options.get("DATABASE") or router.db_for_write(IndexEntry)

    # --- writes -------------------------------------------------------------------------------
    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        """Upsert and delete across groups in one transaction, keeping the group counts exact."""
        try:
            with transaction.atomic(using=self.using):
                for group in sorted(set(adds) | set(removes)):  # a fixed lock order: no deadlocks
                    self._apply_group(group, adds.get(group, []), removes.get(group, []))
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc

    def _apply_group(self, group: str, entries: list[Entry], removals: list[Removal]) -> None:
        self._lock_group(group)
        delta = -self._delete(group, removals)
        delta += sum(change for _, change in self._upsert(group, entries))
        if delta:
            IndexGroup.objects.using(self.using).filter(name=group).update(count=F("count") + delta)

    def _lock_group(self, group: str) -> tuple[int, int, int]:
        """Create the group's row if needed and lock it; return its (id, count, levels)."""
        groups = IndexGroup.objects.using(self.using)
        groups.bulk_create([IndexGroup(name=group, count=0)], ignore_conflicts=True)
        return groups.select_for_update().filter(name=group).values_list("pk", "count", "levels").get()

    def _delete(self, group: str, removals: list[Removal]) -> int:
        """Delete members, the conditional ones only where the sort key still matches."""
        return len(self._delete_keys(group, removals))

    def _delete_keys(self, group: str, removals: list[Removal]) -> list[Change]:
        """Delete entries, a conditional removal only while the entry still has its sort key (the
        stream's REMOVE of item (PK, SK) must not delete the entry of a newer (PK, SK')); return the
        keys deleted, in one statement a chunk."""
        anyway = list(dict.fromkeys(member for member, sort_key in removals if sort_key is None))
        unconditional = set(anyway)
        conditional = list(dict.fromkeys(
            (member, sort_key) for member, sort_key in removals if sort_key is not None and member not in unconditional
        ))
        changes: list[Change] = []
        for chunk in _chunks(anyway):
            changes += self._delete_returning(group, f"member IN ({', '.join(['%s'] * len(chunk))})", chunk)
        for chunk in _chunks(conditional, CHUNK // 2):
            condition = " OR ".join(["(member = %s AND sort_key = %s)"] * len(chunk))
            changes += self._delete_returning(group, f"({condition})", [value for pair in chunk for value in pair])
        return changes

    def _delete_returning(self, group: str, condition: str, params: list[str]) -> list[Change]:
        connection = connections[self.using]
        table = connection.ops.quote_name(IndexEntry._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE {connection.ops.quote_name('group')} = %s AND {condition}"
                " RETURNING sort_key, member",
                [group, *params],
            )
            return [((sort_key, member), -1) for sort_key, member in cursor.fetchall()]

    def _upsert(self, group: str, entries: list[Entry]) -> list[Change]:
        """Insert new members, move changed ones; return the changes of keys this made."""
        wanted = dict(entries)  # a member given twice keeps its last sort key
        rows = IndexEntry.objects.using(self.using)
        changes: list[Change] = []
        for chunk in _chunks(list(wanted.items())):
            members = [member for member, _ in chunk]
            # ORDER BY member steers SQLite to the (group, member) index: without it, it scans the
            # whole group on the rank index, which also covers the query (1 s a batch at 5M entries).
            existing = dict(
                rows.filter(group=group, member__in=members).order_by("member").values_list("member", "sort_key")
            )
            moved = [member for member, sort_key in chunk if member in existing and existing[member] != sort_key]
            if moved:
                rows.filter(group=group, member__in=moved).delete()
            fresh = [(member, sort_key) for member, sort_key in chunk if existing.get(member) != sort_key]
            rows.bulk_create(IndexEntry(group=group, member=m, sort_key=s) for m, s in fresh)
            changes += [((existing[member], member), -1) for member in moved]
            changes += [((sort_key, member), 1) for member, sort_key in fresh]
        return changes

    def replace(self, group: str, entries: Sequence[Entry]) -> None:
        wanted = dict(entries)
        try:
            with transaction.atomic(using=self.using):
                group_id, _, levels = self._lock_group(group)
                IndexEntry.objects.using(self.using).filter(group=group).delete()
                for chunk in _chunks(list(wanted.items()), 2000):
                    IndexEntry.objects.using(self.using).bulk_create(
                        IndexEntry(group=group, member=m, sort_key=s) for m, s in chunk
                    )
                self._replaced(group, group_id, len(wanted), levels)
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc

    def _replaced(self, group: str, group_id: int, count: int, levels: int) -> None:
        """Bring the group's row in step with entries just swapped in (the lock is held)."""
        IndexGroup.objects.using(self.using).filter(pk=group_id).update(count=count)

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


class GroupState(NamedTuple):
    id: int
    count: int
    levels: int
    version: int


class RelationalIndex(PlainRelationalIndex):
    """Counted blocks of each group's sort order (backends/blocks.py) make at(), range() and
    count() cost the same at any depth, on SQLite and PostgreSQL.

    OPTIONS: BLOCK_SIZE, the target number of entries of a level 0 block (kept within half to
    twice that), and FANOUT, the target number of blocks under a block of the next level.
    """

    default_block_size = 1024
    default_fanout = 64
    # Reads retried while writes to the group commit underneath them, before taking its lock.
    optimistic_reads = 3

    def __init__(self, options=None):
        super().__init__(options)
        self.block_size = int(self.options.get("BLOCK_SIZE", self.default_block_size))
        self.fanout = int(self.options.get("FANOUT", self.default_fanout))
        self._last_seen: dict[str, tuple[int, int]] = {}  # group -> (id, levels), for _state
        if self.block_size < 2 or self.fanout < 2:
            raise ImproperlyConfigured("RelationalIndex OPTIONS BLOCK_SIZE and FANOUT must be at least 2")

    def _tree(self, group: str, group_id: int, levels: int) -> BlockTree:
        return BlockTree(connections[self.using], group=group, group_id=group_id, levels=levels,
                         block_size=self.block_size, fanout=self.fanout)

    # --- writes -------------------------------------------------------------------------------
    def _apply_group(self, group: str, entries: list[Entry], removals: list[Removal]) -> None:
        group_id, count, levels = self._lock_group(group)
        changes = self._delete_keys(group, removals) + self._upsert(group, entries)
        if not changes:
            return
        count += sum(change for _, change in changes)
        tree = self._tree(group, group_id, levels)
        if levels:
            tree.apply(changes)
        else:  # first write, or a group filled before the blocks existed
            tree.build(count)
        IndexGroup.objects.using(self.using).filter(pk=group_id).update(
            count=count, levels=tree.levels, version=F("version") + 1
        )

    def _replaced(self, group: str, group_id: int, count: int, levels: int) -> None:
        levels = self._tree(group, group_id, levels).build(count)
        IndexGroup.objects.using(self.using).filter(pk=group_id).update(
            count=count, levels=levels, version=F("version") + 1
        )

    def rebuild_blocks(self, group: str) -> None:
        """Rebuild a group's blocks from its entries and recount it (repairs what check_blocks finds)."""
        try:
            with transaction.atomic(using=self.using):
                group_id, _, levels = self._lock_group(group)
                count = IndexEntry.objects.using(self.using).filter(group=group).count()
                self._replaced(group, group_id, count, levels)
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc

    # --- reads --------------------------------------------------------------------------------
    def count(self, group: str) -> int:
        """One plain statement: pages ask for it on every request."""
        connection = connections[self.using]
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT count FROM {connection.ops.quote_name(IndexGroup._meta.db_table)}"
                               f" WHERE name = %s", [group])
                found = cursor.fetchone()
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc
        return found[0] if found else 0

    def _state(self, group: str, *, lock: bool = False) -> tuple[GroupState | None, list[tuple[Key, int]] | None]:
        """The group's row and its top level blocks (lowest first), in one statement. The blocks
        are looked up by the group's id and top level as last seen (kept per process, checked
        against the row, and read again when they moved): as literals they get the blocks index;
        as a join or subqueries PostgreSQL plans a scan of every block."""
        connection = connections[self.using]
        quote = connection.ops.quote_name
        groups, blocks = quote(IndexGroup._meta.db_table), quote(IndexBlock._meta.db_table)
        with connection.cursor() as cursor:
            if lock and connection.features.has_select_for_update:  # the lock first, then the reads
                cursor.execute(f"SELECT id FROM {groups} WHERE name = %s FOR UPDATE", [group])
            for _ in range(2):
                seen = self._last_seen.get(group, (0, 0))
                cursor.execute(
                    f"SELECT id, count, levels, version, NULL AS sort_key, NULL AS member, NULL AS total"
                    f" FROM {groups} WHERE name = %s UNION ALL"
                    f" SELECT NULL, NULL, NULL, NULL, floor_sort_key, floor_member, count FROM {blocks}"
                    f" WHERE group_id = %s AND level = %s ORDER BY 5, 6",
                    [group, seen[0], seen[1] - 1],
                )
                rows = cursor.fetchall()
                found = [GroupState(*row[:4]) for row in rows if row[0] is not None]
                if not found:
                    return None, []
                state = found[0]
                self._last_seen[group] = (state.id, state.levels)
                if (state.id, state.levels) == seen or not state.levels:
                    break
            else:
                return state, None  # the levels keep moving: the caller reads the top level itself
        top = [((sort_key, member), count) for *_, sort_key, member, count in rows if sort_key is not None]
        return state, top

    def range(self, group: str, start: int, stop: int) -> list[Entry]:
        """Reads take no lock: they are retried while writes to the group commit underneath them
        (its version moves), and done under the group's lock if writes keep coming."""
        start = max(start, 0)
        if stop <= start:
            return []
        try:
            for _ in range(self.optimistic_reads):
                state, top = self._state(group)
                entries, version = self._read(group, state, top, start, stop)
                if version is None or version == state.version:  # None: one statement read it all
                    return entries
            with transaction.atomic(using=self.using):
                state, top = self._state(group, lock=True)
                return self._read(group, state, top, start, stop)[0]
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc

    def _read(self, group, state, top, start, stop) -> tuple[list[Entry], int | None]:
        """Entries start..stop-1 and the group's version at the last statement (None: nothing
        was read after the group's row)."""
        if state is None or start >= state.count:
            return [], None
        if not state.levels:  # filled before the blocks existed: until its next write
            return list(self._ordered(group)[start:stop]), None
        tree = self._tree(group, state.id, state.levels)
        if top is None:
            top = tree.items(state.levels - 1, MIN, None, descending=False)
        key, version = tree.locate(start, state.count, top)
        if key is None:  # a walk that missed saw blocks from two states (or broken ones): retry
            return [], -1 if version is None else version
        if stop - start > 1:
            keys, version = tree.entries_from(key, stop - start)
        else:
            keys = [key]
        return [(member, sort_key) for sort_key, member in keys], version

    def count_newer_many(self, groups: Iterable[str], sort_key: str, member: str | None = None) -> dict[str, int]:
        """From the blocks: a few small statements a group at any depth, not a walk of the newer
        entries. Retried like range() when a write commits underneath."""
        return {group: self._count_newer(group, sort_key, member) for group in groups}

    def _count_newer(self, group: str, sort_key: str, member: str | None) -> int:
        try:
            for attempt in range(self.optimistic_reads + 1):
                locked = attempt == self.optimistic_reads
                with transaction.atomic(using=self.using) if locked else nullcontext():
                    state, _ = self._state(group, lock=locked)
                    if state is None or not state.count:
                        return 0
                    if not state.levels:  # filled before the blocks existed
                        return super().count_newer_many([group], sort_key, member)[group]
                    count, version = self._tree(group, state.id, state.levels).count_newer(sort_key, member)
                    if locked or version == state.version:
                        return count
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc

    def check_integrity(self, group: str) -> list[str]:
        """verify_index's hook: the block counts against the entries."""
        return self.check_blocks(group)

    def check_blocks(self, group: str) -> list[str]:
        """What is wrong with a group's blocks and count, compared with its entries ([] if
        nothing). Reads under the group's lock, so it sees one state."""
        try:
            with transaction.atomic(using=self.using):
                state, _ = self._state(group, lock=True)
                if state is None:
                    return []
                return self._tree(group, state.id, state.levels).check(state.count)
        except DatabaseError as exc:
            raise IndexUnavailable(f"relational index: {exc}") from exc
