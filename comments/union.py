"""Reading a product's comments at any offset, with or without a rating filter.

A filter is a set of ratings; each rating is one byRating partition and one index group
("<SKU>/<rating>"), and no filter is the product's own group. The comments of a filter are the union
of its groups, merged by (SK, PK) newest first. Offset `o` of the union is found without any
per-combination index (5 ratings make 31 combinations):

1. the boundary is the union's entry at rank o-1: a search over the groups' ranks that reads one
   entry and asks count_newer() of the other groups per step, O(log n) steps however many groups;
2. each group resumes after its last entry at or before the boundary (its rank is known from the
   same counts), tie-safe as in store.newest();
3. the groups' partitions are queried in parallel and merged, and the first `count` taken.

Where each group stopped is a Position: the content of a cursor.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from django.core.paginator import EmptyPage

from comments import store
from comments.partitions import parallel
from comments.store import Comment
from comments.table.keys import rating_group
from pagination_index import index

# How far back to look per index read when counting a run of equal sort keys.
TIE_SCAN_CHUNK = 64
# Where a group's partition resumes, in store.newest()'s terms: (after, skip); (None, 0) is its top.
Start = tuple[tuple[str, str] | None, int]
TOP: Start = (None, 0)


@dataclass(frozen=True)
class Position:
    """A place in a filter's comments: how many come before it, and where each group resumes."""
    offset: int
    starts: dict[str, Start]


@dataclass(frozen=True)
class Slice:
    comments: list[Comment]
    resume: Position  # just after these comments


def groups_for(sku: str, ratings: Sequence[int] = ()) -> list[str]:
    """The index groups (= GSI partitions) whose union is a filter's comments."""
    return [rating_group(sku, rating) for rating in ratings] if ratings else [sku]


# --- finding where each group starts --------------------------------------------------------
def _tie_skip(group: str, rank: int, sort_key: str) -> int:
    """How many entries at ranks <= rank share `sort_key` (the run of ties a read starts inside)."""
    skip = 0
    while rank >= 0:
        low = max(rank - TIE_SCAN_CHUNK + 1, 0)
        for _, entry_sort_key in reversed(index.range(group, low, rank + 1)):
            if entry_sort_key != sort_key:
                return skip
            skip += 1
        rank = low - 1
    return skip


def start_after_rank(group: str, rank: int) -> Start:
    """Where a group resumes after its entry at `rank` (-1: from its top)."""
    if rank < 0:
        return TOP
    first = max(rank - 1, 0)
    neighbours = index.range(group, first, rank + 2)
    if rank - first >= len(neighbours):
        raise EmptyPage("That page no longer exists.")  # the group shrank since count()
    entry = neighbours[rank - first]
    tied = sum(1 for _, sort_key in neighbours if sort_key == entry[1]) > 1
    return entry, _tie_skip(group, rank, entry[1]) if tied else 0


def union_ranks(groups: Sequence[str], counts: dict[str, int], rank: int) -> dict[str, int]:
    """For the union's entry at `rank` (the boundary): in each group, the rank of its last entry at
    or before the boundary (-1 when it has none).

    Every group keeps an interval of ranks where the boundary may be. Each step reads one entry e of
    the widest interval and counts, in the other groups, the entries newer than e: their sum plus
    e's own rank is e's union rank. Equal to `rank`: e is the boundary. Below: the boundary is older
    than e, so in every group it is at or past the count; above: before it. Steps alternate between
    the interval's middle (so the widest interval at least halves every two steps: O(log n) steps
    however many groups) and an interpolated guess (ratings interleave evenly, so the guess is
    usually close and the search ends in a few steps). Each step is one at() and one
    count_newer_many().
    """
    low = {group: 0 for group in groups}
    high = {group: counts[group] for group in groups}
    step = 0
    while True:
        group = max(groups, key=lambda g: high[g] - low[g])
        if high[group] <= low[group]:
            raise EmptyPage("That page no longer exists.")  # the groups changed during the search
        probe = (low[group] + high[group]) // 2
        step += 1
        if step % 2:
            below, width = sum(low.values()), sum(high.values()) - sum(low.values())
            guess = low[group] + (rank - below) * (high[group] - low[group]) // max(width, 1)
            probe = min(max(guess, low[group]), high[group] - 1)
        entry = index.at(group, probe)
        if entry is None:
            raise EmptyPage("That page no longer exists.")
        member, sort_key = entry
        newer = index.count_newer_many([g for g in groups if g != group], sort_key, member)
        newer[group] = probe
        found = sum(newer.values())
        if found == rank:
            return {g: probe if g == group else newer[g] - 1 for g in groups}
        for g in groups:
            if found < rank:
                low[g] = max(low[g], newer[g] + (g == group))
            else:
                high[g] = min(high[g], newer[g])


def position_at(groups: Sequence[str], offset: int, counts: dict[str, int] | None = None) -> Position:
    """The Position with `offset` comments of the union before it, from the index."""
    if offset <= 0:
        return Position(0, {group: TOP for group in groups})
    if len(groups) == 1:
        ranks = {groups[0]: offset - 1}
    else:
        ranks = union_ranks(groups, counts if counts is not None else index.count_many(groups), offset - 1)
    return Position(offset, {group: start_after_rank(group, rank) for group, rank in ranks.items()})


# --- reading from a position ----------------------------------------------------------------
def resumed(start: Start, taken: list[Comment]) -> Start:
    """Where a group resumes after the comments taken from it: in the tie-safe form (the SK of the
    last one and how many of the group's entries up to it share that SK), which is all a cursor
    needs to carry."""
    if not taken:
        return start
    last = taken[-1]
    run = sum(1 for comment in taken if comment.sk == last.sk)
    after, skip = start
    if after is not None and after[1] == last.sk:
        run += skip or 1
    return (last.pk, last.sk), run


def merge(groups: Sequence[str], lists: Sequence[list[Comment]], position: Position, count: int) -> Slice:
    """The first `count` of the groups' comments (each list in index order, from the position)."""
    tagged = sorted(
        ((comment, group) for group, comments in zip(groups, lists) for comment in comments),
        key=lambda pair: pair[0].order_key, reverse=True,
    )[:count]
    taken: dict[str, list[Comment]] = {group: [] for group in groups}
    for comment, group in tagged:
        taken[group].append(comment)
    starts = {group: resumed(position.starts[group], taken[group]) for group in groups}
    return Slice([comment for comment, _ in tagged], Position(position.offset + len(tagged), starts))


def read(groups: Sequence[str], position: Position, count: int) -> Slice:
    """`count` comments of the union from `position`: one Query per group, in parallel."""
    def query(group: str) -> list[Comment]:
        after, skip = position.starts[group]
        return store.newest(group, count, after=after, skip=skip)[0]

    return merge(groups, parallel(query, list(groups)), position, count)
