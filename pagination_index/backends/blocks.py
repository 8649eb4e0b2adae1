"""Counted blocks of one group's sort order: the rank tree behind RelationalIndex.

A level 0 block covers a contiguous range of the group's keys (sort_key, member) and stores how
many entries fall in it; a level k+1 block covers a run of level k blocks and stores their total.
A block is named by its floor, the lowest key it covers, and reaches up to the next floor of its
level. Every level has a block whose floor is MIN, and every floor of level k+1 is also a floor of
level k, so each block lies inside exactly one block of the level above.

at(rank) walks down from the top level: it sums the counts of one block's children (at most about
2 * fanout of them, or the top level) to find the child holding the rank, and finally reads at most
about 2 * block_size entries of one level 0 block, from whichever end is nearer. A write changes one
count per level; a block that grows past twice its target size is split, one that shrinks under
half of it is merged with a sibling, so no write rewrites more than a few blocks.

Every comparison of keys is made by the database (row values), never in Python, so the tree follows
the columns' collation exactly as ORDER BY does. Callers hold the group's row lock for writes.
"""
from __future__ import annotations

import json
from math import ceil

from pagination_index.models import IndexBlock, IndexEntry, IndexGroup

Key = tuple[str, str]  # (sort_key, member), the order of the index
MIN: Key = ("", "")  # no key is lower: the floor of each level's first block
# Three bound parameters a change in a count update: stays under every SQLite build's limit.
LOOKUP_CHUNK = 300


class BlockTree:
    """The blocks of one group, on one database connection."""

    def __init__(self, connection, *, group: str, group_id: int, levels: int, block_size: int, fanout: int):
        self.connection = connection
        self.group = group
        self.group_id = group_id
        self.levels = levels
        self.block_size = block_size
        self.fanout = fanout
        quote = connection.ops.quote_name
        self.entries = quote(IndexEntry._meta.db_table)
        self.blocks = quote(IndexBlock._meta.db_table)
        self.groups = quote(IndexGroup._meta.db_table)
        self.group_column = quote("group")

    # --- SQL helpers ----------------------------------------------------------------------------
    def _rows(self, sql: str, params) -> list[tuple]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def _run(self, sql: str, params) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)

    @staticmethod
    def _between(columns: str, lo: Key, hi: Key | None) -> tuple[str, list]:
        """SQL and params for lo <= (columns) < hi; MIN and None mean no bound. The bounds on the
        first column alone say nothing new, but give PostgreSQL's planner a row estimate (it
        guesses a third of the table for a row comparison, and plans a parallel scan on it)."""
        first = columns.split(",")[0]
        sql, params = "", []
        if lo != MIN:
            sql += f" AND ({columns}) >= (%s, %s) AND {first} >= %s"
            params += [*lo, lo[0]]
        if hi is not None:
            sql += f" AND ({columns}) < (%s, %s) AND {first} <= %s"
            params += [*hi, hi[0]]
        return sql, params

    def _target(self, level: int) -> int:
        return self.block_size if level == 0 else self.fanout

    def items(self, level: int, lo: Key, hi: Key | None, *, descending: bool,
              offset: int = 0, limit: int | None = None) -> list[tuple[Key, int]]:
        """(key, count) of the blocks of `level` with floors in [lo, hi), or of the entries for -1."""
        order = "DESC" if descending else "ASC"
        if level < 0:
            where, params = self._between("sort_key, member", lo, hi)
            sql = (f"SELECT sort_key, member, 1 FROM {self.entries} WHERE {self.group_column} = %s{where}"
                   f" ORDER BY sort_key {order}, member {order}")
            params = [self.group, *params]
        else:
            where, params = self._between("floor_sort_key, floor_member", lo, hi)
            sql = (f"SELECT floor_sort_key, floor_member, count FROM {self.blocks}"
                   f" WHERE group_id = %s AND level = %s{where}"
                   f" ORDER BY floor_sort_key {order}, floor_member {order}")
            params = [self.group_id, level, *params]
        if limit is not None:
            sql += " LIMIT %s OFFSET %s"
            params += [limit, offset]
        return [((sort_key, member), count) for sort_key, member, count in self._rows(sql, params)]

    def _node(self, level: int, key: Key, *, relation: str = "<=", descending: bool = True):
        """(id, floor, count) of the nearest block of `level` whose floor is `relation` key."""
        order = "DESC" if descending else "ASC"
        rows = self._rows(
            f"SELECT id, floor_sort_key, floor_member, count FROM {self.blocks}"
            f" WHERE group_id = %s AND level = %s AND (floor_sort_key, floor_member) {relation} (%s, %s)"
            f" ORDER BY floor_sort_key {order}, floor_member {order} LIMIT 1",
            [self.group_id, level, *key],
        )
        return (rows[0][0], (rows[0][1], rows[0][2]), rows[0][3]) if rows else None

    def _containing(self, level: int, key: Key):
        return self._node(level, key, relation="<=")

    def _next_floor(self, level: int, key: Key) -> Key | None:
        found = self._node(level, key, relation=">", descending=False)
        return found[1] if found else None

    def _is_floor(self, level: int, key: Key) -> bool:
        if level >= self.levels:
            return False
        found = self._node(level, key, relation="<=")
        return found is not None and found[1] == key

    def _set_count(self, block_id: int, count: int) -> None:
        self._run(f"UPDATE {self.blocks} SET count = %s WHERE id = %s", [count, block_id])

    def _delete_block(self, block_id: int) -> None:
        self._run(f"DELETE FROM {self.blocks} WHERE id = %s", [block_id])

    def _insert_blocks(self, level: int, blocks: list[tuple[Key, int]]) -> None:
        if blocks:
            IndexBlock.objects.using(self.connection.alias).bulk_create(
                IndexBlock(group_id=self.group_id, level=level, floor_sort_key=key[0], floor_member=key[1], count=count)
                for key, count in blocks
            )

    # --- reads ----------------------------------------------------------------------------------
    # A read is a few statements, each of which may see a newer commit than the one before: the
    # last one also returns the group's version, which the caller compares with the version it
    # started from (the writers bump it in the same transaction), and retries if it moved.
    def _with_version(self, sql: str, params: list, order: str = "") -> tuple[list[tuple], int | None]:
        """Rows of `sql` and the group's version, read by one statement (so at one instant)."""
        rows = self._rows(
            f"SELECT g.version, picked.* FROM {self.groups} g LEFT JOIN ({sql}) AS picked ON 1 = 1"
            f" WHERE g.id = %s{order}",
            [*params, self.group_id],
        )
        version = rows[0][0] if rows else None
        return [row[1:] for row in rows if row[1] is not None], version

    def locate(self, rank: int, total: int, top: list[tuple[Key, int]]) -> tuple[Key | None, int | None]:
        """The key at `rank` (0 = newest) of a group holding `total` entries, whose top level
        blocks are `top` (lowest first), and the group's version when the key was read."""
        lo, hi = MIN, None
        for level in range(self.levels - 1, -1, -1):
            from_bottom = 2 * rank >= total  # scan from the nearer end
            position = total - 1 - rank if from_bottom else rank
            if level == self.levels - 1:
                rows = top if from_bottom else top[::-1]
            else:
                rows = self.items(level, lo, hi, descending=not from_bottom)
            for index, (key, count) in enumerate(rows):
                if position < count:
                    if from_bottom:
                        lo, hi = key, rows[index + 1][0] if index + 1 < len(rows) else hi
                        rank = count - 1 - position
                    else:
                        lo, hi = key, rows[index - 1][0] if index else hi
                        rank = position
                    total = count
                    break
                position -= count
            else:
                return None, None  # counts out of step with entries: check_index_blocks reports it
        from_bottom = 2 * rank >= total
        order = "ASC" if from_bottom else "DESC"
        where, params = self._between("sort_key, member", lo, hi)
        rows, version = self._with_version(
            f"SELECT sort_key, member FROM {self.entries} WHERE {self.group_column} = %s{where}"
            f" ORDER BY sort_key {order}, member {order} LIMIT 1 OFFSET %s",
            [self.group, *params, total - 1 - rank if from_bottom else rank],
        )
        return (tuple(rows[0]) if rows else None), version

    def entries_from(self, key: Key, limit: int) -> tuple[list[Key], int | None]:
        """Up to `limit` keys from `key` downwards (newest first), and the group's version."""
        rows, version = self._with_version(
            f"SELECT sort_key, member FROM {self.entries} WHERE {self.group_column} = %s"
            f" AND (sort_key, member) <= (%s, %s) ORDER BY sort_key DESC, member DESC LIMIT %s",
            [self.group, *key, limit],
            order=" ORDER BY picked.sort_key DESC, picked.member DESC",
        )
        return [tuple(row) for row in rows], version

    @staticmethod
    def _newer(columns: str, sort_key: str, member: str | None) -> tuple[str, list]:
        """SQL and params for (columns) coming before (sort_key, member) in index order, i.e. a
        greater key; with member None, a greater sort key."""
        first = columns.split(",")[0]
        if member is None:
            return f"{first} > %s", [sort_key]
        return f"({columns}) > (%s, %s) AND {first} >= %s", [sort_key, member, sort_key]

    def count_newer(self, sort_key: str, member: str | None) -> tuple[int, int | None]:
        """How many entries come before (sort_key, member), and the group's version then: the
        blocks wholly newer are summed level by level, and only the entries of the one level 0
        block holding the key are counted."""
        lo, hi, total = MIN, None, 0
        floors = "floor_sort_key, floor_member"
        newer, newer_params = self._newer(floors, sort_key, member)
        for level in range(self.levels - 1, -1, -1):
            where, params = self._between(floors, lo, hi)
            scope = f"FROM {self.blocks} WHERE group_id = %s AND level = %s{where}"
            scope_params = [self.group_id, level, *params]
            total += int(self._rows(f"SELECT COALESCE(SUM(count), 0) {scope} AND {newer}",  # numeric on PostgreSQL
                                    scope_params + newer_params)[0][0])
            holding = self._rows(f"SELECT {floors} {scope} AND NOT ({newer}) ORDER BY floor_sort_key DESC,"
                                 f" floor_member DESC LIMIT 1", scope_params + newer_params)
            above = self._rows(f"SELECT {floors} {scope} AND {newer} ORDER BY floor_sort_key, floor_member LIMIT 1",
                               scope_params + newer_params)
            lo, hi = tuple(holding[0]), (tuple(above[0]) if above else hi)
        where, params = self._between("sort_key, member", lo, hi)
        newer, newer_params = self._newer("sort_key, member", sort_key, member)
        rows, version = self._with_version(
            f"SELECT COUNT(*) AS newer FROM {self.entries} WHERE {self.group_column} = %s{where} AND {newer}",
            [self.group, *params, *newer_params],
        )
        return total + rows[0][0], version

    # --- bulk build -----------------------------------------------------------------------------
    def build(self, count: int | None = None) -> int:
        """Drop the group's blocks and build them from its entries (`count` of them, counted here
        if not given) in a few set-based statements, with no per-entry work in Python.
        Returns the number of levels."""
        if self.levels:
            self._run(f"DELETE FROM {self.blocks} WHERE group_id = %s", [self.group_id])
        if count is None:
            count = self._rows(f"SELECT COUNT(*) FROM {self.entries} WHERE {self.group_column} = %s",
                               [self.group])[0][0]
        if count <= 2 * self.block_size:
            self._insert_blocks(0, [(MIN, count)])
            self.levels = 1
            return self.levels
        size, fanout = int(self.block_size), int(self.fanout)
        self._run(
            f"INSERT INTO {self.blocks} (group_id, level, floor_sort_key, floor_member, count)"
            f" SELECT %s, 0, CASE WHEN rn = 0 THEN '' ELSE sort_key END, CASE WHEN rn = 0 THEN '' ELSE member END,"
            f" CASE WHEN %s - rn < {size} THEN %s - rn ELSE {size} END"
            f" FROM (SELECT sort_key, member, ROW_NUMBER() OVER (ORDER BY sort_key, member) - 1 AS rn"
            f" FROM {self.entries} WHERE {self.group_column} = %s) AS ranked"
            f" WHERE rn %% {size} = 0",
            [self.group_id, count, count, self.group],
        )
        blocks = ceil(count / size)
        level = 0
        while blocks > 2 * fanout:
            self._run(
                f"INSERT INTO {self.blocks} (group_id, level, floor_sort_key, floor_member, count)"
                f" SELECT group_id, level + 1, floor_sort_key, floor_member, run FROM ("
                f" SELECT group_id, level, floor_sort_key, floor_member,"
                f" SUM(count) OVER (ORDER BY floor_sort_key, floor_member ROWS BETWEEN CURRENT ROW AND {fanout - 1} FOLLOWING) AS run,"
                f" ROW_NUMBER() OVER (ORDER BY floor_sort_key, floor_member) - 1 AS rn"
                f" FROM {self.blocks} WHERE group_id = %s AND level = %s) AS ranked WHERE rn %% {fanout} = 0",
                [self.group_id, level],
            )
            level += 1
            blocks = self._level_size(level)
        self.levels = level + 1
        return self.levels

    def _level_size(self, level: int) -> int:
        return self._rows(f"SELECT COUNT(*) FROM {self.blocks} WHERE group_id = %s AND level = %s",
                          [self.group_id, level])[0][0]

    # --- incremental upkeep ---------------------------------------------------------------------
    def apply(self, changes: list[tuple[Key, int]]) -> int:
        """Count entry changes (key, +1 added / -1 removed) already made in the entries table into
        the blocks, then split or merge the blocks that left their size bounds. Returns the levels."""
        suspects: set[Key] = set()
        for start in range(0, len(changes), LOOKUP_CHUNK):
            suspects |= self.misfits(self._count_changes(changes[start : start + LOOKUP_CHUNK]))
        return self.settle(suspects)

    def misfits(self, touched: list[tuple[int, Key, int]]) -> set[Key]:
        """Floors of the level 0 blocks among `touched` (level, floor, count) that left their bounds."""
        return {floor for level, floor, count in touched if level == 0 and not self._fits(count, 0)}

    def settle(self, suspects: set[Key]) -> int:
        """Split or merge the blocks at these floors (and their parents as needed). Returns the levels."""
        if suspects:
            for level in range(self.levels):
                suspects = self._rebalance(level, suspects)
                if not suspects:
                    break
            self._fix_root()
        return self.levels

    def _count_changes(self, changes: list[tuple[Key, int]]) -> list[tuple[int, Key, int]]:
        """Add the changes to the counts of the blocks holding their keys, at every level, in one
        statement; return (level, floor, new count) of each block changed."""
        keys = ", ".join(["(%s, %s, %s)"] * len(changes))
        levels = ", ".join(["(%s)"] * self.levels)
        params = [self.group_id]
        for key, delta in changes:
            params += [*key, delta]
        params += range(self.levels)
        rows = self._rows(
            f"UPDATE {self.blocks} SET count = {self.blocks}.count + changed.delta FROM ("
            f" SELECT (SELECT b.id FROM {self.blocks} b WHERE b.group_id = %s AND b.level = l.column1"
            f" AND (b.floor_sort_key, b.floor_member) <= (k.column1, k.column2)"
            f" ORDER BY b.floor_sort_key DESC, b.floor_member DESC LIMIT 1) AS block_id, SUM(k.column3) AS delta"
            f" FROM (VALUES {keys}) AS k, (VALUES {levels}) AS l GROUP BY 1) AS changed"
            f" WHERE {self.blocks}.id = changed.block_id AND changed.delta <> 0"
            f" RETURNING {self.blocks}.level, {self.blocks}.floor_sort_key, {self.blocks}.floor_member, {self.blocks}.count",
            params,
        )
        return [(level, (sort_key, member), count) for level, sort_key, member, count in rows]

    def _fits(self, size: int, level: int) -> bool:
        target = self._target(level)
        return 2 * size >= target and size <= 2 * target

    def _size(self, level: int, floor: Key, count: int, hi: Key | None) -> int:
        """Entries of a level 0 block, children of a higher one."""
        if level == 0:
            return count
        where, params = self._between("floor_sort_key, floor_member", floor, hi)
        return self._rows(f"SELECT COUNT(*) FROM {self.blocks} WHERE group_id = %s AND level = %s{where}",
                          [self.group_id, level - 1, *params])[0][0]

    def _rebalance(self, level: int, floors: set[Key]) -> set[Key]:
        """Split or merge the blocks of `level` holding these keys; return keys whose parent
        (level + 1) gained or lost a child, or has an underfull child it must make room for."""
        parents: set[Key] = set()
        for floor in floors:
            found = self._containing(level, floor)
            if found is None:
                continue
            block_id, floor, count = found
            hi = self._next_floor(level, floor)
            size = self._size(level, floor, count, hi)
            if size > 2 * self._target(level):
                self._split(level, block_id, floor, hi)
                parents.add(floor)
            elif 2 * size < self._target(level):
                parents.add(self._merge(level, block_id, floor, count, hi))
        return parents

    def _split(self, level: int, block_id: int, floor: Key, hi: Key | None) -> None:
        """Cut a block into pieces of about the target size, by its children in order."""
        children = self.items(level - 1, floor, hi, descending=False)
        pieces = ceil(len(children) / self._target(level))
        cuts = [len(children) * piece // pieces for piece in range(pieces)] + [len(children)]
        counts = [sum(count for _, count in children[a:b]) for a, b in zip(cuts, cuts[1:])]
        self._set_count(block_id, counts[0])
        self._insert_blocks(level, [(children[cut][0], count) for cut, count in zip(cuts[1:-1], counts[1:])])

    def _merge(self, level: int, block_id: int, floor: Key, count: int, hi: Key | None, *,
               retry: bool = True) -> Key:
        """Merge a block with a sibling under the same parent (re-splitting if that is too big).
        A block alone under its parent first has the parent merged, to give it a sibling.
        Returns a key inside the parent, whose upkeep may be due next."""
        if floor != MIN and not self._is_floor(level + 1, floor):
            left_id, left_floor, left_count = self._node(level, floor, relation="<")
            self._delete_block(block_id)
            keep_id, keep_floor, keep_count = left_id, left_floor, left_count + count
        elif hi is not None and not self._is_floor(level + 1, hi):
            right_id, _, right_count = self._containing(level, hi)
            self._delete_block(right_id)
            keep_id, keep_floor, keep_count = block_id, floor, count + right_count
        else:  # alone under its parent
            parent = self._containing(level + 1, floor) if level + 1 < self.levels else None
            if parent is None or not retry:
                return floor
            parent_id, parent_floor, parent_count = parent
            self._merge(level + 1, parent_id, parent_floor, parent_count, self._next_floor(level + 1, parent_floor))
            return self._merge(level, block_id, floor, count, hi, retry=False)
        self._set_count(keep_id, keep_count)
        keep_hi = self._next_floor(level, keep_floor)
        if self._size(level, keep_floor, keep_count, keep_hi) > 2 * self._target(level):
            self._split(level, keep_id, keep_floor, keep_hi)
        return keep_floor

    def _fix_root(self) -> None:
        """Keep the top level short: group it under a new level when it grows past 2 * fanout
        blocks, drop it when it is down to one block."""
        while True:
            top = self.levels - 1
            size = self._level_size(top)
            if size > 2 * self.fanout:
                blocks = self.items(top, MIN, None, descending=False)
                pieces = ceil(len(blocks) / self.fanout)
                cuts = [len(blocks) * piece // pieces for piece in range(pieces)] + [len(blocks)]
                self._insert_blocks(top + 1, [
                    (blocks[a][0], sum(count for _, count in blocks[a:b])) for a, b in zip(cuts, cuts[1:])
                ])
                self.levels += 1
            elif size == 1 and top > 0:
                self._run(f"DELETE FROM {self.blocks} WHERE group_id = %s AND level = %s", [self.group_id, top])
                self.levels -= 1
            else:
                return

    # --- validation -----------------------------------------------------------------------------
    def check(self, count: int) -> list[str]:
        """Compare the blocks and the group's count with the entries; one line per problem."""
        entries = self._rows(f"SELECT COUNT(*) FROM {self.entries} WHERE {self.group_column} = %s",
                             [self.group])[0][0]
        problems = [] if entries == count else [f"group count is {count}, entries are {entries}"]
        top = self._rows(f"SELECT MAX(level) FROM {self.blocks} WHERE group_id = %s", [self.group_id])[0][0]
        if top is None:
            return problems + ([f"no blocks for {entries} entries"] if entries else [])
        if top != self.levels - 1:
            problems.append(f"group says {self.levels} levels, blocks have {top + 1}")
        for level in range(top + 1):
            blocks = self.items(level, MIN, None, descending=False)
            if not blocks or blocks[0][0] != MIN:
                problems.append(f"level {level}: no block at the lowest key")
            for index, (floor, stored) in enumerate(blocks):
                hi = blocks[index + 1][0] if index + 1 < len(blocks) else None
                if level and not self._is_floor_below(level, floor):
                    problems.append(f"level {level} block {floor}: not a floor of level {level - 1}")
                actual = self._covered(level, floor, hi)
                if actual != stored:
                    problems.append(f"level {level} block {floor}: count {stored}, covers {actual}")
        return problems

    def _is_floor_below(self, level: int, floor: Key) -> bool:
        found = self._node(level - 1, floor, relation="<=")
        return found is not None and found[1] == floor

    def _covered(self, level: int, lo: Key, hi: Key | None) -> int:
        """Entries in [lo, hi), counted from the entries for level 0, from the level below above it."""
        if level == 0:
            where, params = self._between("sort_key, member", lo, hi)
            sql = f"SELECT COUNT(*) FROM {self.entries} WHERE {self.group_column} = %s{where}"
            return self._rows(sql, [self.group, *params])[0][0]
        where, params = self._between("floor_sort_key, floor_member", lo, hi)
        sql = f"SELECT COALESCE(SUM(count), 0) FROM {self.blocks} WHERE group_id = %s AND level = %s{where}"
        return int(self._rows(sql, [self.group_id, level - 1, *params])[0][0])


def json_rows(columns: tuple[str, ...], rows) -> str:
    """Rows as one JSON parameter for PostgreSQL's json_to_recordset(). Django binds parameters on
    the client, and psycopg quotes an array parameter element by element in Python
    (bench/notes/relational-writes.md); json.dumps is C, and so is the server's JSON parser."""
    return json.dumps([dict(zip(columns, row)) for row in rows])
