"""The relational backends: IndexEntry rows with a covering index, IndexGroup counts.

Works on SQLite and PostgreSQL. RelationalIndex (the default) also keeps counted blocks of each
group's sort order (backends/blocks.py), so at() and range() cost the same at any depth.
PlainRelationalIndex is the seed design, kept as the benchmark's baseline: its at() is ORDER BY ...
OFFSET, which walks `rank` index entries, linear in depth.
"""
from __future__ import annotations

import json
from collections import defaultdict
from contextlib import nullcontext
from typing import Iterable, NamedTuple, Sequence

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections, router, transaction
from django.db.models import Count, F, Q

from pagination_index.backends.base import Entry, NetWriteIndex, Removal, batched, chunked
from pagination_index.backends.blocks import MIN, BlockTree, Key, json_rows
from pagination_index.models import IndexBlock, IndexEntry, IndexGroup

Change = tuple[Key, int]  # ((sort_key, member), +1 added or -1 removed)
GroupChange = tuple[str, Key, int]  # (group, (sort_key, member), +1 or -1)

# Stays under every SQLite build's bound-parameter limit.
CHUNK = 500


def _split_removals(removals: list[Removal]) -> tuple[list[str], list[tuple[str, str]]]:
    """The members to remove whatever their sort key, and the (member, sort key) pairs to remove
    only while the entry has that key (a member in both is removed anyway)."""
    anyway = list(dict.fromkeys(member for member, sort_key in removals if sort_key is None))
    unconditional = set(anyway)
    conditional = list(dict.fromkeys(
        (member, sort_key) for member, sort_key in removals if sort_key is not None and member not in unconditional
    ))
    return anyway, conditional


class PlainRelationalIndex(NetWriteIndex):
    unavailable_errors = (DatabaseError,)
    error_label = "relational index"

    def __init__(self, options=None):
        super().__init__(options)
        self.using = self.options.get("DATABASE") or router.db_for_write(IndexEntry)

    @property
    def database_alias(self) -> str:
        """Index writes join this database's transactions, so checkpoints commit with them."""
        return self.using

    # --- writes -------------------------------------------------------------------------------
    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        """Upsert and delete across groups in one transaction, keeping the group counts exact."""
        with transaction.atomic(using=self.using):
            for group in sorted(set(adds) | set(removes)):  # a fixed lock order: no deadlocks
                self._apply_group(group, adds.get(group, []), removes.get(group, []))

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
        if self._set_based:
            return [(key, delta) for _, key, delta in self._delete_across({group: removals})]
        anyway, conditional = _split_removals(removals)
        changes: list[Change] = []
        for chunk in chunked(anyway, CHUNK):
            changes += self._delete_returning(group, f"member IN ({', '.join(['%s'] * len(chunk))})", chunk)
        for chunk in chunked(conditional, CHUNK // 2):
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

    # --- PostgreSQL: one statement a batch for all its groups, the keys passed as JSON -----------
    # A list of ORs (or of IN values) per chunk and group gets a plan per statement, and for the
    # conditional removes a scan of the group; keys read from json_to_recordset() are one probe of
    # the (group, member) index each, and a batch touching 60 groups (a product and its rating
    # groups, for 10 products) is still one statement.
    @property
    def _set_based(self) -> bool:
        return connections[self.using].vendor == "postgresql"

    def _entries_sql(self, sql: str, params: list, *, delta: int) -> list[GroupChange]:
        """Run `sql` with {entries} and {group} filled in; its (group, sort_key, member) rows as
        changes of `delta`."""
        connection = connections[self.using]
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute(sql.format(entries=quote(IndexEntry._meta.db_table), group=quote("group")), params)
            return [(group, (sort_key, member), delta) for group, sort_key, member in cursor.fetchall()]

    def _delete_across(self, removes: dict[str, list[Removal]]) -> list[GroupChange]:
        anyway: list[tuple[str, str]] = []
        conditional: list[tuple[str, str, str]] = []
        for group, removals in removes.items():
            members, pairs = _split_removals(removals)
            anyway += [(group, member) for member in members]
            conditional += [(group, member, sort_key) for member, sort_key in pairs]
        return self._delete_matching(anyway, "") + self._delete_matching(conditional, " AND sort_key = r.sort_key")

    def _delete_matching(self, keys: list[tuple], condition: str) -> list[GroupChange]:
        """Delete the entries of these (group, member) or (group, member, sort_key) keys that meet
        `condition`. Each key is looked up on its own (LATERAL ... LIMIT 1, one probe of the
        (group, member) index) and the rows deleted by ctid: a plain join is planned from the
        table's statistics, and with stale ones (a group just loaded) PostgreSQL hashes the table."""
        if not keys:
            return []
        columns = ("grp", "member", "sort_key")[: len(keys[0])]
        return self._entries_sql(
            "DELETE FROM {entries} WHERE ctid = ANY(ARRAY(SELECT found.ctid FROM json_to_recordset(%s::json)"
            f" AS r({', '.join(f'{column} text' for column in columns)}) CROSS JOIN LATERAL"
            " (SELECT ctid FROM {entries} WHERE {group} = r.grp AND member = r.member" + condition
            + " LIMIT 1) AS found)) RETURNING {group}, sort_key, member",
            [json_rows(columns, keys)], delta=-1,
        )

    def _upsert_across(self, adds: dict[str, list[Entry]]) -> list[GroupChange]:
        """Delete the members whose sort key changed, then insert every member not there (the
        moved ones again): two statements, however many entries and groups."""
        rows = [(group, member, sort_key) for group, entries in adds.items() for member, sort_key in dict(entries).items()]
        if not rows:
            return []
        moved = self._delete_matching(rows, " AND sort_key <> r.sort_key")
        fresh = self._entries_sql(
            "INSERT INTO {entries} ({group}, member, sort_key) SELECT grp, member, sort_key"
            " FROM json_to_recordset(%s::json) AS w(grp text, member text, sort_key text)"
            " ON CONFLICT ({group}, member) DO NOTHING RETURNING {group}, sort_key, member",
            [json_rows(("grp", "member", "sort_key"), rows)], delta=1,
        )
        return moved + fresh

    def _copy_entries(self, group: str, entries: Iterable[Entry]) -> int:
        """Load a group's entries with COPY (no statement, plan or model instance per entry) into a
        scratch table, then insert the last sort key of each member from it; returns the count.
        The entries stream through: memory does not grow with the group.

        They are inserted in index order (newest first), so the table's pages hold the group in
        rank order: a rank read's index-only scan that has to visit the table (pages not yet
        marked all-visible by VACUUM, as after any bulk load) reads a few consecutive pages, not
        one page per entry it steps over (a group inserted in member order scatters them)."""
        connection = connections[self.using]
        quote = connection.ops.quote_name
        with connection.cursor() as cursor:
            cursor.execute("CREATE TEMPORARY TABLE IF NOT EXISTS pagination_index_replace"
                           " (seq bigserial, member text, sort_key text) ON COMMIT DROP")
            cursor.execute("TRUNCATE pagination_index_replace")
            with cursor.cursor.copy("COPY pagination_index_replace (member, sort_key) FROM STDIN") as copy:
                for member, sort_key in entries:
                    copy.write_row((member, sort_key))
            cursor.execute(
                f"INSERT INTO {quote(IndexEntry._meta.db_table)} ({quote('group')}, member, sort_key)"
                " SELECT %s, member, sort_key FROM (SELECT DISTINCT ON (member) member, sort_key"
                " FROM pagination_index_replace ORDER BY member, seq DESC) AS last"
                ' ORDER BY sort_key COLLATE "C" DESC, member COLLATE "C" DESC',
                [group],
            )
            return cursor.rowcount

    def _insert_entries(self, group: str, entries: Iterable[Entry]) -> int:
        """Insert a group's entries a chunk at a time, a repeated member keeping its last sort key."""
        rows = IndexEntry.objects.using(self.using)
        for chunk in batched(entries, 2000):
            rows.bulk_create(
                (IndexEntry(group=group, member=m, sort_key=s) for m, s in dict(chunk).items()),
                update_conflicts=True, unique_fields=["group", "member"], update_fields=["sort_key"],
            )
        return rows.filter(group=group).count()

    def _upsert(self, group: str, entries: list[Entry]) -> list[Change]:
        """Insert new members, move changed ones; return the changes of keys this made."""
        if self._set_based:
            return [(key, delta) for _, key, delta in self._upsert_across({group: entries})]
        wanted = dict(entries)  # a member given twice keeps its last sort key
        rows = IndexEntry.objects.using(self.using)
        changes: list[Change] = []
        for chunk in chunked(list(wanted.items()), CHUNK):
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

    def replace(self, group: str, entries: Iterable[Entry]) -> None:
        with transaction.atomic(using=self.using):
            group_id, _, levels = self._lock_group(group)
            IndexEntry.objects.using(self.using).filter(group=group).delete()
            insert = self._copy_entries if self._set_based else self._insert_entries
            self._replaced(group, group_id, insert(group, entries), levels)

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
        counts = {}
        for chunk in chunked(groups, CHUNK):
            counts.update(IndexGroup.objects.using(self.using).filter(name__in=chunk).values_list("name", "count"))
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
        return list(self._ordered(group)[start:stop])

    def count_newer(self, group: str, sort_key: str, member: str | None = None) -> int:
        return self.count_newer_many([group], sort_key, member)[group]

    def count_newer_many(self, groups: Iterable[str], sort_key: str, member: str | None = None) -> dict[str, int]:
        """One COUNT over the covering index for all the groups. It walks the newer entries, so it is
        linear in the rank, like at(): counted blocks would make both flat."""
        groups = list(groups)
        newer = Q(sort_key__gt=sort_key)
        if member is not None:
            newer |= Q(sort_key=sort_key, member__gt=member)
        counts = dict(
            IndexEntry.objects.using(self.using).filter(newer, group__in=groups)
            .values("group").annotate(newer=Count("pk")).values_list("group", "newer")
        )
        return {group: counts.get(group, 0) for group in groups}

    def groups(self) -> list[str]:
        return list(IndexGroup.objects.using(self.using).filter(count__gt=0).order_by("name").values_list("name", flat=True))

    def is_empty(self) -> bool:
        return not IndexGroup.objects.using(self.using).filter(count__gt=0).exists()


class _Written:
    """What a batch's data statements did: changes and net change per group name, and the floors
    of the level 0 blocks that left their bounds, per group id."""

    def __init__(self):
        self.changes: dict[str, int] = defaultdict(int)
        self.delta: dict[str, int] = defaultdict(int)
        self.misfits: dict[int, set[Key]] = defaultdict(set)


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
    # A write of at least this many changes, and of at least a quarter of the group's entries,
    # rebuilds the group's blocks in one pass (a few set-based statements) rather than counting
    # every change into them and splitting block after block.
    bulk_changes = 10_000
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
    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        if not self._set_based:
            return super().apply_net(adds, removes)
        with transaction.atomic(using=self.using):
            self._apply_across(adds, removes)

    def _apply_across(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        """PostgreSQL: a batch's writes to all its groups in a fixed number of statements: lock the
        groups, delete the removed entries, insert the added ones, update the groups. Each data
        statement also counts the changes it made into the blocks, at every level, inside the
        server (a data-modifying WITH), and returns only each group's number of changes and the
        level 0 blocks that left their bounds: no key travels back to Python. Re-adds of a member
        already there (a replay, or a new sort key) take two more statements, for those keys only."""
        states = self._lock_groups(sorted(set(adds) | set(removes)))
        # Groups with blocks are counted into, unless the write would be bulk were its adds all new
        # members: those are rebuilt whatever it comes to (counting them in first would be wasted).
        bulk = {group for group, (_, count, _) in states.items()
                if self._rebuilds(len(adds.get(group, ())) + len(removes.get(group, ())),
                                  count + len(adds.get(group, ())))}
        counting = [{"g": group, "i": group_id, "l": levels}
                    for group, (group_id, _, levels) in states.items() if levels and group not in bulk]
        written = _Written()
        if removes:
            anyway, conditional = [], []
            for group, removals in removes.items():
                members, pairs = _split_removals(removals)
                anyway += [(group, member, None) for member in members]
                conditional += [(group, member, sort_key) for member, sort_key in pairs]
            self._delete_counted(anyway, conditional, [], counting, written)
        rows = [(group, member, sort_key)
                for group, entries in adds.items() for member, sort_key in dict(entries).items()]  # last one wins
        if rows:
            conflicts = self._insert_counted(json_rows(("g", "m", "s"), rows), counting, written)
            if conflicts:  # members already there: replaced where their sort key differs
                if self._delete_counted([], [], conflicts, counting, written):
                    self._insert_counted(json_rows(("g", "m", "s"), conflicts), counting, written)
        updates = []
        for group, changes in written.changes.items():
            group_id, count, levels = states[group]
            count += written.delta[group]
            tree = self._tree(group, group_id, levels)
            if levels and group not in bulk and not self._rebuilds(changes, count):
                tree.settle(written.misfits.get(group_id, set()))
            else:  # first write, a group filled before the blocks existed, or a bulk write
                tree.build(count)
            updates.append((group_id, count, tree.levels))
        if updates:
            self._groups_sql(
                "UPDATE {groups} AS g SET count = v.count, levels = v.levels, version = g.version + 1"
                " FROM unnest(%s::bigint[], %s::bigint[], %s::int[]) AS v(id, count, levels) WHERE g.id = v.id",
                [list(column) for column in zip(*updates)],
            )

    # The changes a data statement made, as rows `changed` (g: group, s: sort key, m: member,
    # delta: +1 or -1), counted into the blocks of every level of the groups listed in the JSON
    # `counting` (g, i: id, l: levels): one probe of the blocks index a change for its level 0
    # block, then one a level 0 block touched (not a change) for each level above (each block lies
    # inside one block of the level above, so the one holding its floor holds all its keys); one
    # UPDATE a block. Returned: 'g' rows (group, changes, net change), 'b' rows (group id, floor
    # of a level 0 block now out of its bounds) and 'c' rows (keys not inserted: already there).
    COUNTED = (
        " tree AS (SELECT * FROM json_to_recordset(%s::json) AS t(g text, i bigint, l int)),"
        " zero AS (SELECT z.id, z.floor_sort_key AS s, z.floor_member AS m, t.i, t.l, SUM(c.delta)::int AS delta"
        "  FROM changed c JOIN tree t ON t.g = c.g CROSS JOIN LATERAL"
        "  (SELECT f.id, f.floor_sort_key, f.floor_member FROM {blocks} f WHERE f.group_id = t.i AND f.level = 0"
        "   AND (f.floor_sort_key, f.floor_member) <= (c.s, c.m)"
        "   ORDER BY f.floor_sort_key DESC, f.floor_member DESC LIMIT 1) AS z"
        "  GROUP BY z.id, z.floor_sort_key, z.floor_member, t.i, t.l),"
        " counted AS (UPDATE {blocks} AS b SET count = b.count + d.delta FROM ("
        "  SELECT id, delta FROM zero UNION ALL SELECT (SELECT f.id FROM {blocks} f"
        "   WHERE f.group_id = z.i AND f.level = l.level AND (f.floor_sort_key, f.floor_member) <= (z.s, z.m)"
        "   ORDER BY f.floor_sort_key DESC, f.floor_member DESC LIMIT 1), SUM(z.delta)"
        "  FROM zero z CROSS JOIN unnest(%s::int[]) AS l(level) WHERE l.level < z.l GROUP BY 1) AS d"
        " WHERE b.id = d.id AND d.delta <> 0"
        " RETURNING b.group_id, b.level, b.floor_sort_key, b.floor_member, b.count)"
        " SELECT 'g', g, NULL, NULL, COUNT(*), SUM(delta) FROM changed GROUP BY g"
        " UNION ALL SELECT 'b', group_id::text, floor_sort_key::text, floor_member::text, NULL, NULL FROM counted"
        " WHERE level = 0 AND (2 * count < %s OR count > 2 * %s)"
    )

    def _counted_sql(self, sql: str, params: list, counting: list[dict], written: _Written,
                     tail: str = "") -> list[tuple[str, str, str]]:
        """Run a data statement `sql` (WITH ... changed AS (...),), then COUNTED and `tail`; note
        its changes and misfits in `written`; return its 'c' rows as (group, member, sort key)."""
        connection = connections[self.using]
        quote = connection.ops.quote_name
        levels = max((group["l"] for group in counting), default=0)
        with connection.cursor() as cursor:
            cursor.execute(
                (sql + self.COUNTED + tail).format(
                    entries=quote(IndexEntry._meta.db_table), group=quote("group"),
                    blocks=quote(IndexBlock._meta.db_table)),
                [*params, json.dumps(counting), list(range(1, levels)), self.block_size, self.block_size],
            )
            rows = cursor.fetchall()
        conflicts = []
        for kind, group, a, b, changes, delta in rows:
            if kind == "g":
                written.changes[group] += changes
                written.delta[group] += delta
            elif kind == "b":
                written.misfits[int(group)].add((a, b))
            else:
                conflicts.append((group, a, b))
        return conflicts

    def _insert_counted(self, keys: str, counting: list[dict], written: _Written) -> list[tuple[str, str, str]]:
        """Insert the JSON `keys` (g, m, s) not there yet; return those already there."""
        return self._counted_sql(
            "WITH keys AS (SELECT * FROM json_to_recordset(%s::json) AS k(g text, m text, s text)),"
            " ins AS (INSERT INTO {entries} ({group}, member, sort_key) SELECT g, m, s FROM keys"
            "  ON CONFLICT ({group}, member) DO NOTHING RETURNING {group}, sort_key, member),"
            " changed AS (SELECT {group} AS g, sort_key AS s, member AS m, 1 AS delta FROM ins),",
            [keys], counting, written,
            tail=" UNION ALL SELECT 'c', k.g, k.m, k.s, NULL, NULL FROM keys k"
            " WHERE NOT EXISTS (SELECT FROM ins WHERE ins.{group} = k.g AND ins.member = k.m)",
        )

    def _delete_counted(self, anyway: list[tuple], conditional: list[tuple], moved: list[tuple],
                        counting: list[dict], written: _Written) -> int:
        """Delete the entries of (group, member, sort key) keys: `anyway` whatever their sort key,
        `conditional` only while they have it, `moved` only while they have another one. Each key
        is looked up on its own (LATERAL ... LIMIT 1, one probe of the (group, member) index) and
        the rows deleted by ctid: a plain join is planned from the table's statistics, and with
        stale ones (a group just loaded) PostgreSQL hashes the table. Returns how many went."""
        keys = [(*key, "a") for key in anyway] + [(*key, "c") for key in conditional] + [(*key, "m") for key in moved]
        before = sum(written.changes.values())
        self._counted_sql(
            "WITH gone AS (DELETE FROM {entries} WHERE ctid = ANY(ARRAY(SELECT found.ctid"
            "  FROM json_to_recordset(%s::json) AS r(g text, m text, s text, h text) CROSS JOIN LATERAL"
            "  (SELECT ctid FROM {entries} WHERE {group} = r.g AND member = r.m AND (r.h = 'a'"
            "   OR (r.h = 'c' AND sort_key = r.s) OR (r.h = 'm' AND sort_key <> r.s)) LIMIT 1) AS found))"
            "  RETURNING {group}, sort_key, member),"
            " changed AS (SELECT {group} AS g, sort_key AS s, member AS m, -1 AS delta FROM gone),",
            [json_rows(("g", "m", "s", "h"), keys)], counting, written,
        )
        return sum(written.changes.values()) - before

    def _lock_groups(self, groups: list[str]) -> dict[str, tuple[int, int, int]]:
        """Create the groups' rows if needed and lock them, in name order (code points, as the one
        by one _lock_group takes them in sorted(): no deadlocks); return name -> (id, count, levels)."""
        self._groups_sql("INSERT INTO {groups} (name, count, levels, version) SELECT name, 0, 0, 0"
                         " FROM unnest(%s::text[]) AS n(name) ON CONFLICT (name) DO NOTHING", [groups])
        rows = self._groups_sql("SELECT name, id, count, levels FROM {groups} WHERE name = ANY(%s::text[])"
                                ' ORDER BY name COLLATE "C" FOR UPDATE', [groups])
        return {name: (group_id, count, levels) for name, group_id, count, levels in rows}

    def _groups_sql(self, sql: str, params: list) -> list[tuple]:
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(sql.format(groups=connection.ops.quote_name(IndexGroup._meta.db_table)), params)
            return cursor.fetchall() if cursor.description else []

    def _apply_group(self, group: str, entries: list[Entry], removals: list[Removal]) -> None:
        group_id, count, levels = self._lock_group(group)
        changes = self._delete_keys(group, removals) + self._upsert(group, entries)
        if not changes:
            return
        count += sum(change for _, change in changes)
        tree = self._tree(group, group_id, levels)
        if levels and not self._rebuilds(len(changes), count):
            tree.apply(changes)
        else:  # first write, a group filled before the blocks existed, or a bulk write
            tree.build(count)
        IndexGroup.objects.using(self.using).filter(pk=group_id).update(
            count=count, levels=tree.levels, version=F("version") + 1
        )

    def _rebuilds(self, changes: int, count: int) -> bool:
        return changes >= self.bulk_changes and 4 * changes >= count

    def _replaced(self, group: str, group_id: int, count: int, levels: int) -> None:
        levels = self._tree(group, group_id, levels).build(count)
        IndexGroup.objects.using(self.using).filter(pk=group_id).update(
            count=count, levels=levels, version=F("version") + 1
        )

    def repair_group(self, group: str) -> None:
        """Rebuild a group's blocks from its entries and recount it (repairs what check_integrity finds)."""
        with transaction.atomic(using=self.using):
            group_id, _, levels = self._lock_group(group)
            count = IndexEntry.objects.using(self.using).filter(group=group).count()
            self._replaced(group, group_id, count, levels)

    # --- reads --------------------------------------------------------------------------------
    def count(self, group: str) -> int:
        """One plain statement: pages ask for it on every request."""
        connection = connections[self.using]
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count FROM {connection.ops.quote_name(IndexGroup._meta.db_table)}"
                           f" WHERE name = %s", [group])
            found = cursor.fetchone()
        return found[0] if found else 0

    def _state(self, group: str, *, lock: bool = False) -> tuple[GroupState | None, list[tuple[Key, int]] | None]:
        """The group's row and its top level blocks (lowest first), in one statement.

        PostgreSQL: the blocks are joined LATERAL to the group's row (a nested loop: one probe of
        the name index, then one range of the blocks index by the row's id and top level, whatever
        the statistics say), so a group this process has not read before costs one round trip too.
        Elsewhere (SQLite has no LATERAL) the blocks are looked up by the group's id and top level
        as last seen (kept per process, checked against the row, and read again when they moved)."""
        connection = connections[self.using]
        quote = connection.ops.quote_name
        groups, blocks = quote(IndexGroup._meta.db_table), quote(IndexBlock._meta.db_table)
        with connection.cursor() as cursor:
            if lock and connection.features.has_select_for_update:  # the lock first, then the reads
                cursor.execute(f"SELECT id FROM {groups} WHERE name = %s FOR UPDATE", [group])
            if self._set_based:
                cursor.execute(
                    f"SELECT g.id, g.count, g.levels, g.version, b.floor_sort_key, b.floor_member, b.count"
                    f" FROM {groups} g LEFT JOIN LATERAL (SELECT floor_sort_key, floor_member, count FROM {blocks}"
                    f" WHERE group_id = g.id AND level = g.levels - 1) AS b ON TRUE WHERE g.name = %s ORDER BY 5, 6",
                    [group],
                )
                rows = cursor.fetchall()
                if not rows:
                    return None, []
                top = [((sort_key, member), count) for *_, sort_key, member, count in rows if sort_key is not None]
                return GroupState(*rows[0][:4]), top
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

    def at(self, group: str, rank: int) -> Entry | None:
        """PostgreSQL: one statement, pagination_index_locate() (migration 0008), which walks the
        blocks on the server in one snapshot. Anything it cannot answer (no such rank, a group
        without blocks yet, counts caught out of step) goes the general way, range()."""
        if rank < 0:
            return None
        if self._set_based:
            with connections[self.using].cursor() as cursor:
                cursor.execute("SELECT sort_key, member FROM pagination_index_locate(%s, %s)", [group, rank])
                row = cursor.fetchone()
            if row is None:  # no such group
                return None
            if row[0] is not None:
                return row[1], row[0]
        found = self.range(group, rank, rank + 1)
        return found[0] if found else None

    def range(self, group: str, start: int, stop: int) -> list[Entry]:
        """Reads take no lock: they are retried while writes to the group commit underneath them
        (its version moves), and done under the group's lock if writes keep coming."""
        start = max(start, 0)
        if stop <= start:
            return []
        for _ in range(self.optimistic_reads):
            state, top = self._state(group)
            entries, version = self._read(group, state, top, start, stop)
            if version is None or version == state.version:  # None: one statement read it all
                return entries
        with transaction.atomic(using=self.using):
            state, top = self._state(group, lock=True)
            return self._read(group, state, top, start, stop)[0]

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

    def check_integrity(self, group: str) -> list[str]:
        """What is wrong with a group's blocks and count, compared with its entries ([] if
        nothing). Reads under the group's lock, so it sees one state."""
        with transaction.atomic(using=self.using):
            state, _ = self._state(group, lock=True)
            if state is None:
                return []
            return self._tree(group, state.id, state.levels).check(state.count)
