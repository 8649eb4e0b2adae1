"""query(): a group of a source (or the union of several groups) as a lazy sequence.

    items = query("events", "alice")            # newest first
    len(items)                                  # the index's count
    items[5800:5825]                            # one Query, from the key the index gives for rank 5799

That is all Django's Paginator (and so ListView and DRF's PageNumberPagination) needs: a no-argument
count() and slicing. A slice:

- within the source's first FAST_ITEMS items: cut from the group's newest items, read straight from
  DynamoDB with one Query (the "fast window", shared between requests for CACHE_SECONDS), so the
  first pages need no index and show new items at once;
- deeper: the index gives the entry just before the slice (the boundary) and the run of equal sort
  keys it ends; one Query reads on from the boundary's sort key (sources.TableSource.read);
- oldest first: the mirror image of the newest-first slice, [n-b, n-a) reversed for [a, b) of n items
  (so a stable page counted from the oldest costs what a newest-first page does);
- of several groups (a union, merged by the index order): the boundary is found by a search over the
  groups' ranks that reads one entry and asks count_newer() of the other groups per step, O(log n)
  steps however many groups; each group's partition is then read from its own start, and merged.

A slice is a list of the items (boto3's deserializer turns each into Python values, or `transform`
does) with `.served_by` ("fast" or "index") and `.resume`, the Position just after it: what a
"load more" cursor carries (IndexedQuery.after reads from one without the index).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from boto3.dynamodb.types import TypeDeserializer

from pagination_index.backends.base import Entry, IndexUnavailable
from pagination_index.sources import BaseSource, Read, Start

# How far back to look per index read when counting a run of equal sort keys.
TIE_SCAN_CHUNK = 64

_deserializer = TypeDeserializer()


def python_item(item: dict) -> dict:
    """A DynamoDB item as Python values (boto3's deserializer: numbers are Decimals)."""
    return {name: _deserializer.deserialize(value) for name, value in item.items()}


@dataclass(frozen=True)
class Position:
    """A place in a query's items: how many come before it, and where each group resumes
    (Start: None for its first item, or (sort key text, items with that key to skip))."""
    offset: int
    starts: dict[str, Start]


class Items(list):
    """A slice of a query: its items, how it was read ("fast" or "index"), and the Position after it
    (worked out when asked for: only a "load more" link needs it)."""
    served_by: str = "index"
    _resume: Position | Callable[[], Position] | None = None

    @property
    def resume(self) -> Position | None:
        if callable(self._resume):
            self._resume = self._resume()
        return self._resume

    @resume.setter
    def resume(self, value: Position | Callable[[], Position] | None) -> None:
        self._resume = value


@dataclass(frozen=True)
class Window:
    """A group's newest items as DynamoDB has them (the fast window), and whether that is all of it."""
    items: list[dict]
    complete: bool


def pages_index():
    """The index as request handling uses it (the "pages" alias: failing fast)."""
    from pagination_index import PAGES_ALIAS, indexes

    return indexes[PAGES_ALIAS]


# --- shared between requests: the fast windows, counts and newest entries (CACHE_SECONDS) ------
class Shared:
    """What the source's CACHE_SECONDS lets requests share, in Django's cache (CACHE), every key
    versioned by its group's generation (BaseSource.cache_scope): invalidate() moves the generation on
    (one incr), so a write reaches every process at once, and nothing is ever deleted one key at a time. Each process also
    keeps the windows it unpickled, by the same versioned key and for the same seconds (unpickling a
    window of 200 items costs more than the rest of a hot page)."""

    memo_limit = 1024

    def __init__(self, source: BaseSource):
        self.source = source
        self.seconds = float(getattr(source, "cache_seconds", 0) or 0)
        self._memo: dict[str, tuple[float, object]] = {}

    @property
    def cache(self):
        from django.core.cache import caches

        return caches[getattr(self.source, "cache_alias", "default")]

    def _key(self, kind: str, group: str, generation: int) -> str:
        digest = hashlib.sha1(f"{self.source.table}\0{self.source.name}\0{group}".encode()).hexdigest()
        return f"pagination_index:{kind}:{digest}:{generation}"

    def _generation_key(self, group: str) -> str:
        scope = self.source.cache_scope(group)
        return "pagination_index:generation:" + hashlib.sha1(f"{self.source.table}\0{scope}".encode()).hexdigest()

    def generations(self, groups: Sequence[str]) -> dict[str, int]:
        keys = {group: self._generation_key(group) for group in groups}
        found = self.cache.get_many(list(set(keys.values())))
        return {group: found.get(key, 0) for group, key in keys.items()}

    def invalidate(self, group: str) -> None:
        if not self.seconds:
            return
        key = self._generation_key(group)
        if self.cache.add(key, 1, None):
            return
        try:
            self.cache.incr(key)
        except ValueError:  # evicted between add and incr
            self.cache.set(key, 1, None)

    def get(self, kind: str, groups: Sequence[str], compute: Callable[[list[str]], dict[str, object]],
            *, memo: bool = False, generations: dict[str, int] | None = None) -> dict[str, object]:
        """{group: value} for each group, from the cache (or this process's memo) where present,
        else compute(missing groups) and share it for `seconds`. `generations`: the groups'
        generations, when the caller read them already."""
        if not self.seconds:
            return compute(list(groups))
        if generations is None or any(group not in generations for group in groups):
            generations = self.generations(groups)
        keys = {group: self._key(kind, group, generations[group]) for group in groups}
        now = time.monotonic()
        found: dict[str, object] = {}
        if memo:
            for group, key in keys.items():
                kept = self._memo.get(key)
                if kept is not None and kept[0] > now:
                    found[group] = kept[1]
        wanted = [keys[group] for group in groups if group not in found]
        cached = self.cache.get_many(wanted) if wanted else {}
        for group, key in keys.items():
            if group not in found and key in cached:
                found[group] = cached[key]
                if memo:
                    self._remember(key, cached[key], now)
        missing = [group for group in groups if group not in found]
        if missing:
            computed = compute(missing)
            self.cache.set_many({keys[group]: computed[group] for group in missing}, self.seconds)
            for group in missing:
                found[group] = computed[group]
                if memo:
                    self._remember(keys[group], computed[group], now)
        return found

    def _remember(self, key: str, value, now: float) -> None:
        if len(self._memo) >= self.memo_limit:
            self._memo = {}
        self._memo[key] = (now + self.seconds, value)


def shared(source: BaseSource) -> Shared:
    """The source's Shared, made once (a source made again after a settings change gets its own)."""
    made = source.__dict__.get("_query_shared")
    if made is None:
        made = source.__dict__.setdefault("_query_shared", Shared(source))
    return made


def query(source: str, group: str | Iterable[str], *, newest_first: bool = True,
          transform: Callable[[dict], object] | None = None, fast: bool = True) -> "IndexedQuery":
    """The items of a group (or the union of several groups, a list) of a declared source, as a lazy
    sequence: len() from the index, a slice is one Query. `transform` turns each DynamoDB item into what a
    slice holds (default: boto3's deserializer); fast=False reads every slice from the index's boundary,
    even within the source's FAST_ITEMS."""
    from pagination_index import sources

    return IndexedQuery(sources[source], group, newest_first=newest_first, transform=transform, fast=fast)


def invalidate(source: str, group: str) -> None:
    """After a write to a group: what query() shares between requests of it (CACHE_SECONDS) is read
    again, in every process that shares the cache."""
    from pagination_index import sources

    declared = sources[source]
    shared(declared).invalidate(declared.index_group(group))


# --- the lazy sequence ----------------------------------------------------------------------------
class IndexedQuery:
    """A group (or the union of groups) of a source, newest first or oldest first."""

    def __init__(self, source: BaseSource, group: str | Iterable[str], *, newest_first: bool = True,
                 transform: Callable[[dict], object] | None = None, fast: bool = True):
        self.source = source
        values = [group] if isinstance(group, str) else list(group)
        if not values:
            raise ValueError("query() needs at least one group")
        self.groups = [source.index_group(value) for value in values]
        self.newest_first = newest_first
        self.transform = transform or python_item
        self.shared = shared(source)
        self.window_size = int(getattr(source, "fast_items", 0) or 0)  # the source's FAST_ITEMS
        self.fast_items = self.window_size if fast else 0  # what this query reads from the windows
        self._counts: dict[str, int] | None = None
        self._generations: dict[str, int] | None = None
        self._windows: dict[str, Window] | None = None  # the fast windows, once this query has read them
        self._index = None
        self.count_is_estimate = False  # count() is a lower bound: the index was down, the windows are not all there is

    def __repr__(self):
        order = "newest first" if self.newest_first else "oldest first"
        return f"<IndexedQuery {self.source.name} {', '.join(self.groups)} ({order})>"

    @property
    def index(self):
        if self._index is None:
            self._index = pages_index()
        return self._index

    # --- what requests share ---------------------------------------------------------------------
    def _shared(self, kind: str, groups: Sequence[str], compute, *, memo: bool = False) -> dict:
        """Shared.get, the groups' generations read once for this query (a page asks several things)."""
        if self.shared.seconds and self._generations is None:
            self._generations = self.shared.generations(self.groups)
        return self.shared.get(kind, groups, compute, memo=memo, generations=self._generations)

    # --- counting -------------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Each group's count, from the index (shared for CACHE_SECONDS)."""
        if self._counts is None:
            self._counts = self._shared("count", self.groups, lambda groups: self.index.count_many(groups))
        return self._counts

    def count(self) -> int:
        """How many items: the index's count. Where the fast windows hold a group whole, their size
        (exact, index or not); where the index is down, or holds fewer of a group than its window shows
        (not built yet, as while an index moves to another backend), what the windows show: a lower
        bound (count_is_estimate), so the first pages still render, and a page past them is not known
        to be missing (a caller answers it 503, not 404)."""
        try:
            counts = dict(self.counts())
        except IndexUnavailable:
            if not self.fast_items:
                raise
            windows = self.windows()
            self.count_is_estimate = not all(window.complete for window in windows.values())
            self._counts = None
            return sum(len(window.items) for window in windows.values())
        if self.fast_items and any(count < self.fast_items for count in counts.values()):
            # A group the index holds fewer of than its window: small (the window is exact) or not
            # built yet in the index (the window shows more: deeper slices will say so).
            windows = self.windows([group for group, count in counts.items() if count < self.fast_items])
            for group, window in windows.items():
                if window.complete:
                    counts[group] = len(window.items)
                elif counts[group] < len(window.items):  # the index has not caught up with the group
                    self.count_is_estimate = True
                    counts[group] = len(window.items)
        return sum(counts.values())

    def __len__(self) -> int:
        return self.count()

    # --- the fast windows -----------------------------------------------------------------------
    def windows(self, groups: Sequence[str] | None = None) -> dict[str, Window]:
        groups = list(groups or self.groups)

        def read(missing: list[str]) -> dict[str, Window]:
            return {group: Window(*_read_whole(self.source, group, self.window_size)) for group in missing}

        known = self._windows or {}
        missing = [group for group in groups if group not in known]
        if missing:  # each window read once per query, whatever it is asked for
            known = self._windows = {**known, **self._shared("window", missing, read, memo=True)}
        return {group: known[group] for group in groups}

    def newest(self) -> Entry | None:
        """The newest entry of the query (its items' rank 0): the date of every page of it. From the
        fast windows when this query has read them (the first pages), else from the index (rank 0,
        shared for CACHE_SECONDS), or from the windows when the index is down."""
        if self._windows is not None and all(group in self._windows for group in self.groups):
            entries = self._window_tops(self.groups)
        else:
            entries = self._shared("newest", self.groups, self._newest_entries)
        found = [entry for entry in entries.values() if entry is not None]
        return max(found, key=lambda entry: (entry[1], entry[0]), default=None)

    def _window_tops(self, groups: list[str]) -> dict[str, Entry | None]:
        return {group: (self.source.entry(window.items[0]) if window.items else None)
                for group, window in self.windows(groups).items()}

    def _newest_entries(self, groups: list[str]) -> dict[str, Entry | None]:
        try:
            return {group: self.index.at(group, 0) for group in groups}
        except IndexUnavailable:
            if not self.fast_items:
                raise
        return self._window_tops(groups)

    # --- slicing --------------------------------------------------------------------------------
    def __iter__(self):
        return iter(self[0:self.count()])

    def __getitem__(self, key):
        if isinstance(key, int):
            if key < 0:
                key += self.count()
            found = self[key:key + 1] if key >= 0 else []
            if not found:
                raise IndexError("query index out of range")
            return found[0]
        if not isinstance(key, slice):
            raise TypeError(f"query indices must be integers or slices, not {type(key).__name__}")
        if key.step not in (None, 1):
            raise ValueError("query slices take no step")
        start, stop = key.start or 0, key.stop
        if start < 0 or stop is None or stop < 0:
            start, stop, _ = key.indices(self.count())
        if stop <= start:
            return Items()
        if self.newest_first:
            return self._slice(start, stop)
        if start == 0 and len(self.groups) == 1:  # from the oldest item: no index needed
            return self._oldest_from_top(stop)
        total = self.count()
        stop = min(stop, total)
        if stop <= start:
            return Items()
        found = self._slice(total - stop, total - start)
        mirrored = Items(reversed(found))
        mirrored.served_by, mirrored.resume = found.served_by, None
        return mirrored

    def _oldest_from_top(self, stop: int) -> Items:
        group = self.groups[0]
        read = self.source.read(group, stop, newest_first=False)
        return self._items(read.items, "index", None)

    def _slice(self, start: int, stop: int) -> Items:
        """Newest-first items [start, stop)."""
        if stop <= self.fast_items:
            return self._from_windows(start, stop)
        try:
            position = self.position_at(start)
        except BeyondTheIndex as exc:
            if self.index_behind([exc.group]):
                raise IndexUnavailable(f"the index does not hold all of {exc.group!r} yet: rebuild_index or "
                                       "sync_index has not reached it") from exc
            return Items()  # the group shrank since count(): the slice is past its end now
        return self.after(position, stop - start, served_by="index")

    def index_behind(self, groups: Sequence[str] | None = None) -> bool:
        """Whether the table holds more of a group than the index does (a group not built yet, as while
        an index moves to another backend), rather than the group having shrunk: a slice past the
        index's end is then a 503 to answer, not a 404. Reads the fast windows (one Query a group,
        shared), or one item of a group the index holds none of when the source has no FAST_ITEMS."""
        groups = list(groups or self.groups)
        counts = self.index.count_many(groups)
        if self.window_size:
            return any(len(window.items) > counts[group] for group, window in self.windows(groups).items())
        return any(counts[group] == 0 and self.source.read(group, 1).items for group in groups)

    def _from_windows(self, start: int, stop: int) -> Items:
        windows = self.windows()
        merged = self._merge({group: window.items for group, window in windows.items()}, stop)
        top = Position(0, {group: None for group in self.groups})
        return self._items(merged[start:stop], "fast", lambda: self._resumed(top, merged[:stop]))

    def after(self, position: Position, count: int, *, served_by: str = "cursor") -> Items:
        """`count` items from a Position: one Query per group (no index read), merged."""
        lists = {group: self.source.read(group, count, start=position.starts[group]).items for group in self.groups}
        merged = self._merge(lists, count)
        return self._items(merged, served_by, lambda: self._resumed(position, merged))

    def _items(self, items: list[dict], served_by: str, resume) -> Items:
        found = Items(map(self.transform, items))
        found.served_by, found.resume = served_by, resume
        return found

    def _merge(self, lists: dict[str, list[dict]], count: int) -> list[dict]:
        if len(lists) == 1:
            return next(iter(lists.values()))[:count]
        tagged = [(self.source.entry(item), item) for items in lists.values() for item in items]
        tagged.sort(key=lambda pair: (pair[0][1], pair[0][0]), reverse=True)
        return [item for _, item in tagged[:count]]

    def _resumed(self, position: Position, taken: list[dict]) -> Position:
        """The Position after `taken` (merged from `position`): each group resumes after the last
        item taken from it, as (its sort key, how many of the group's items up to it share that key)."""
        starts = dict(position.starts)
        by_group: dict[str, list[Entry]] = {group: [] for group in self.groups}
        single = len(self.groups) == 1
        for item in taken:
            group = self.groups[0] if single else self._group_of(item)
            by_group[group].append(self.source.entry(item))
        for group, entries in by_group.items():
            if not entries:
                continue
            last_key = entries[-1][1]
            run = sum(1 for _, sort_key in entries if sort_key == last_key)
            before = starts[group]
            if before is not None and before[0] == last_key:
                run += before[1]
            starts[group] = (last_key, run)
        return Position(position.offset + len(taken), starts)

    def _group_of(self, item: dict) -> str:
        group = self.source.group_of(item)
        if group in self.groups:
            return group
        raise ValueError(f"an item of {group!r} in a query of {self.groups}")

    # --- where a slice starts -----------------------------------------------------------------
    def position_at(self, offset: int) -> Position:
        """The Position with `offset` items of the query before it, from the index (the top, asking
        nothing, for 0: there is no boundary entry to search a union for)."""
        if offset <= 0:
            return Position(0, {group: None for group in self.groups})
        index = self.index
        if len(self.groups) == 1:
            ranks = {self.groups[0]: offset - 1}
        else:
            ranks = union_ranks(index, self.groups, index.count_many(self.groups), offset - 1)
        return Position(offset, {group: self._start_after(index, group, rank) for group, rank in ranks.items()})

    def _start_after(self, index, group: str, rank: int) -> Start:
        """Where a group resumes after its entry at `rank` (-1: from its top)."""
        if rank < 0:
            return None
        first = max(rank - 1, 0)
        neighbours = index.range(group, first, rank + 1)
        if rank - first >= len(neighbours):
            raise BeyondTheIndex(group, rank)
        entry = neighbours[rank - first]
        if rank == first or neighbours[0][1] != entry[1]:
            return entry[1], 1
        return entry[1], _tie_run(index, group, rank, entry[1])


class BeyondTheIndex(LookupError):
    """A slice starts past what the index holds of a group: the group shrank since count(), or the
    index has not caught up with it (IndexedQuery reads which)."""

    def __init__(self, group: str, rank: int):
        super().__init__(f"{group!r} has no entry at rank {rank}")
        self.group, self.rank = group, rank


def _read_whole(source: BaseSource, group: str, count: int) -> tuple[list[dict], bool]:
    read: Read = source.read(group, count)
    return read.items, read.complete


def _tie_run(index, group: str, rank: int, sort_key: str) -> int:
    """How many entries at ranks <= rank share `sort_key` (the run of ties a read starts inside)."""
    run = 0
    while rank >= 0:
        low = max(rank - TIE_SCAN_CHUNK + 1, 0)
        for _, entry_sort_key in reversed(index.range(group, low, rank + 1)):
            if entry_sort_key != sort_key:
                return run
            run += 1
        rank = low - 1
    return run


def union_ranks(index, groups: Sequence[str], counts: dict[str, int], rank: int) -> dict[str, int]:
    """For the union's entry at `rank` (the boundary): in each group, the rank of its last entry at
    or before the boundary (-1 when it has none).

    Every group keeps an interval of ranks where the boundary may be. Each step reads one entry e of
    the widest interval and counts, in the other groups, the entries newer than e: their sum plus
    e's own rank is e's union rank. Equal to `rank`: e is the boundary. Below: the boundary is older
    than e, so in every group it is at or past the count; above: before it. Steps alternate between
    the interval's middle (so the widest interval at least halves every two steps: O(log n) steps
    however many groups) and an interpolated guess (groups that interleave evenly end the search in a
    few steps). Each step is one at() and one count_newer_many().
    """
    low = {group: 0 for group in groups}
    high = {group: counts[group] for group in groups}
    step = 0
    while True:
        group = max(groups, key=lambda g: high[g] - low[g])
        if high[group] <= low[group]:
            raise BeyondTheIndex(group, rank)  # the groups changed during the search
        probe = (low[group] + high[group]) // 2
        step += 1
        if step % 2:
            below, width = sum(low.values()), sum(high.values()) - sum(low.values())
            guess = low[group] + (rank - below) * (high[group] - low[group]) // max(width, 1)
            probe = min(max(guess, low[group]), high[group] - 1)
        entry = index.at(group, probe)
        if entry is None:
            raise BeyondTheIndex(group, probe)
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
