"""The pagination index contract: one sorted set of (member, sort_key) per group.

Order, everywhere, is newest first: sort_key descending, ties broken by member descending.
Rank 0 is the newest entry. Modelled on django.core.cache.backends.base: the essentials raise
NotImplementedError, the rest have slow-but-correct defaults that backends override for speed.
"""
from __future__ import annotations

import functools
import inspect
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import Callable, Iterable, Iterator, Sequence

from django.core.exceptions import ImproperlyConfigured

Entry = tuple[str, str]  # (member, sort_key)


class InvalidIndexBackendError(ImproperlyConfigured):
    pass


class IndexUnavailable(Exception):
    """The index store cannot be reached or failed; the caller should answer 503, not 500."""


def index_errors(method, errors: tuple[type[BaseException], ...], label: str):
    """`method`, with the store's own `errors` raised as IndexUnavailable: the one place a backend
    says "the store is down" (django-redis's omit_exception, without the omitting). The call is timed
    when the host gave the backend an observer for it (`call_observers`, signals.index_loaded)."""
    name = method.__name__

    @functools.wraps(method)
    def funnel(self, *args, **kwargs):
        observe = self.call_observers.get(name)
        started = time.perf_counter() if observe else 0.0
        try:
            return method(self, *args, **kwargs)
        except errors as exc:
            raise IndexUnavailable(f"{label}: {exc}") from exc
        finally:
            if observe:
                observe(time.perf_counter() - started)

    funnel.index_errors = True
    return funnel


@dataclass(frozen=True, slots=True)
class Add:
    group: str
    member: str
    sort_key: str


@dataclass(frozen=True, slots=True)
class Remove:
    """Remove a member; with a sort_key, only while the member's entry still has that sort key.

    The stream's REMOVE of item (PK, SK1) must not delete the entry a later INSERT of (PK, SK2)
    made: the two are different items, whose records may be applied out of order (different
    shards, or a replay after a rebuild).
    """

    group: str
    member: str
    sort_key: str | None = None


Op = Add | Remove
Removal = tuple[str, str | None]  # (member, sort key it must still have, or None: unconditionally)


def net_ops(ops: Iterable[Op]) -> tuple[dict[str, list[Entry]], dict[str, list[Removal]]]:
    """Reduce a sequence of ops to its net effect, as (adds by group, removals by group).

    Adds are upserts and removes are idempotent, so the ops on one (group, member) fold into one
    final op; applying the folded ops, in any order, ends where applying them all in order would.
    A conditional remove after an add of another sort key does nothing; several conditional
    removes in a row stay several removals (remove if the entry has any of those sort keys).
    """
    last: dict[tuple[str, str], Add | list[Removal]] = {}
    for op in ops:
        key = (op.group, op.member)
        before = last.get(key)
        if isinstance(op, Add):
            last[key] = op
        elif isinstance(before, Add):
            if op.sort_key is None or op.sort_key == before.sort_key:
                last[key] = [(op.member, None)]  # the add fixed the entry; this removes it
        elif before is None or op.sort_key is None:
            last[key] = [(op.member, op.sort_key)]
        elif (op.member, None) not in before:
            last[key] = before + [(op.member, op.sort_key)]
    adds: dict[str, list[Entry]] = {}
    removes: dict[str, list[Removal]] = {}
    for (group, member), folded in last.items():
        if isinstance(folded, Add):
            adds.setdefault(group, []).append((member, folded.sort_key))
        else:
            removes.setdefault(group, []).extend(folded)
    return adds, removes


def chunked(items: Sequence, size: int) -> Iterator[Sequence]:
    """Consecutive slices of at most `size` items (commands and statements have size limits)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def batched(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of at most `size` items from any iterable, read as they are needed."""
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


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
    """What every backend offers. Beside the operations, a backend may declare capabilities, each
    with a default here so a reader sees in one place what any backend can do:

    - `database_alias`: the Django database whose transaction covers the backend's writes, or None.
      Stream checkpoints are written in that transaction when there is one (a batch and its
      checkpoint commit together), else in the default database just after the write.
    - `check_integrity(group)` / `repair_group(group)`: invariants of the backend's own derived
      structures (counts, blocks, files), and rebuilding them from the group's own entries.
    - `check_format()`: what in the store's format as a whole needs an operator's step (the Redis
      backend's members still in the text form of older releases: `rebuild_index`).
    - `check_order(group, expected)`: the backend's own structures checked against the true order
      (verify_index passes the table's entries), e.g. each page marker against the rank it must hold.
    - `maintain()` / `pending_changes(group)`: deferred work sync_index runs after each poll (the
      DynamoDB backend's re-mark of marked groups, the files backend's due commits), and writes
      waiting for it (the files backend's write-ahead log).
    - `partial_failures`: True when part of the store can be down while the rest answers (a Redis
      Cluster that lost one primary). Request handling then does not fail every call fast after
      one failure, so the groups still served keep answering.
    - `write_ahead_log`: True when writes wait in a log that `commit(group)` folds in and
      `pending_groups()` lists (the files backend; commit_index).
    - `table` / `create_table()`: the store's own table where the backend has one (DynamoDB), and
      making it (`make run`).
    - `sort_keys`: None when any sort key text is stored as it is; "iso8601" or "integer" when the
      backend stores a sort key as a number (Redis scores, the files backend's records), which then
      must be an ISO-8601 timestamp with microseconds, or a whole number (checks.py compares it with
      the sources' sort key types).
    """

    database_alias: str | None = None
    sort_keys: str | None = None
    # {method name: callable(seconds)}: the host's timers of the backend's calls (its metrics), set per
    # instance by a receiver of signals.index_loaded; none by default.
    call_observers: dict[str, Callable[[float], None]] = {}
    partial_failures: bool = False
    write_ahead_log: bool = False
    table: str | None = None
    # The store's own exceptions that mean "down or failing". Every public method a subclass defines
    # is wrapped by index_errors() to raise them as IndexUnavailable, so backend code raises its own
    # errors (or lets the client's through) and never IndexUnavailable itself.
    unavailable_errors: tuple[type[BaseException], ...] = ()
    # How the error messages name the backend.
    error_label: str = "pagination index"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not cls.unavailable_errors:
            return
        for name, attribute in list(vars(cls).items()):
            if (inspect.isfunction(attribute) and not name.startswith("_")
                    and not getattr(attribute, "index_errors", False)):
                setattr(cls, name, index_errors(attribute, cls.unavailable_errors, cls.error_label))

    def __init__(self, options: dict | None = None):
        self.options = dict(options or {})

    # --- writes -------------------------------------------------------------------------------
    def add_many(self, group: str, entries: Sequence[Entry]) -> None:
        raise NotImplementedError("subclasses of BaseIndex must provide an add_many() method")

    def remove_many(self, group: str, members: Sequence[str]) -> None:
        raise NotImplementedError("subclasses of BaseIndex must provide a remove_many() method")

    def remove_entries(self, group: str, removals: Sequence[Removal]) -> None:
        """Remove (member, sort_key) pairs: a member only while its entry has that sort key
        (None: whatever it has). Needed by the stream, whose removes are conditional."""
        if any(sort_key is not None for _, sort_key in removals):
            raise NotImplementedError(
                "subclasses of BaseIndex must provide a remove_entries() method for conditional removes"
            )
        self.remove_many(group, [member for member, _ in removals])

    def replace(self, group: str, entries: Iterable[Entry]) -> None:
        """Swap the group's entries for `entries` atomically. Any iterable, read once, in any order
        (a repeated member keeps its last sort key); rebuilds pass a stream newest first, which
        backends consume a chunk at a time where they can, so a group of millions is never a list."""
        raise NotImplementedError("subclasses of BaseIndex must provide a replace() method")

    @contextmanager
    def fenced(self, epochs: dict[str, int]):
        """Writes made inside carry these fencing tokens, {shard: lease epoch} (pagination_index.leases):
        a backend outside the checkpoints' database overrides this to refuse, atomically with the
        write, a token older than one it has applied (so a consumer that lost its lease while paused
        cannot write an old batch over a newer one). This default ignores them: an index in the
        checkpoints' database is written under the lease row's lock."""
        yield

    def apply(self, ops: Iterable[Op]) -> None:
        """Apply a batch of ops. This default is not atomic; backends that can be, override it."""
        adds, removes = net_ops(ops)
        for group, removals in removes.items():
            self.remove_entries(group, removals)
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

    def is_empty(self) -> bool:
        """Whether no group holds an entry (rebuild_index --if-empty); backends answer without
        listing every group."""
        return not self.groups()

    def clear(self) -> None:
        """Drop every group (tests and full rebuilds)."""
        for group in self.groups():
            self.replace(group, [])

    def close(self) -> None:
        """Release connections; called when the handler is reset."""

    def create_storage(self) -> str | None:
        """Make what the backend stores its entries in outside the Django database, if missing (the
        DynamoDB backend's table), and say what it is; None: nothing to make. `manage.py create_tables`
        calls it, never the running site, which then needs no permission to create anything."""
        return None

    def maintain(self, *, rewrites: bool = True) -> int:
        """Deferred work, a bounded amount per call: the files backend commits the logs that are due,
        the DynamoDB backend re-marks marked groups. sync_index calls it after every poll (with
        --once, until it returns 0). Returns how many steps it took. `rewrites` False: the caller's
        time and memory are capped (a Lambda invocation), so no step may rewrite a whole group; the
        DynamoDB backend lists such a group for repair instead (sync_index or verify_index --repair)."""
        return 0

    def pending_changes(self, group: str) -> int:
        """Writes accepted but not yet folded into the backend's main structure (the files backend's
        log): verify_index reports them apart from drift. Reads include them either way."""
        return 0

    # --- capabilities (see the class docstring) -------------------------------------------------
    def check_integrity(self, group: str) -> list[str]:
        """What is wrong with the backend's own structures for a group (verify_index reports it)."""
        return []

    def repair_group(self, group: str) -> None:
        """Rebuild what check_integrity checks from the group's own entries."""

    def check_format(self) -> list[str]:
        """What in the store's format needs an operator's step (check_index reports it)."""
        return []

    def check_order(self, group: str, expected: Sequence[Entry]) -> list[str]:
        """What in the backend's structures disagrees with `expected` (the true entries, newest first)."""
        return []

    def commit(self, group: str) -> bool:
        """Fold the group's write-ahead log in now; False when there was nothing to fold."""
        return False

    def compact_packs(self, share: tuple[int, int] = (0, 1), progress=None) -> int:
        """Rewrite what a bulk load left in pieces on disk (the files backend's packs); the pieces
        rewritten. Nothing to do elsewhere."""
        return 0

    def pending_groups(self) -> list[str]:
        """The groups whose write-ahead log holds changes not yet committed."""
        return []

    def create_table(self) -> None:
        """Create the store's own table, where the backend has one; nothing to make elsewhere."""


class NetWriteIndex(BaseIndex):
    """A backend whose every write is one atomic `apply_net(adds, removes)` (the net effect of
    net_ops): adds, removes and whole batches are all routed through it."""

    def apply_net(self, adds: dict[str, list[Entry]], removes: dict[str, list[Removal]]) -> None:
        raise NotImplementedError("subclasses of NetWriteIndex must provide an apply_net() method")

    def add_many(self, group: str, entries: Sequence[Entry]) -> None:
        self.apply_net({group: list(entries)}, {})

    def remove_many(self, group: str, members: Sequence[str]) -> None:
        self.apply_net({}, {group: [(member, None) for member in members]})

    def remove_entries(self, group: str, removals: Sequence[Removal]) -> None:
        self.apply_net({}, {group: list(removals)})

    def apply(self, ops: Iterable[Op]) -> None:
        self.apply_net(*net_ops(ops))


class Breaker:
    """What a process knows of one store, shared by its threads: asked freely until a call fails
    (failed()); then no call asks it for `seconds`; then one call asks it (ask() says "probe") while
    every other still answers at once, until that call is answered (answered()) or fails (failed()
    again). A store that is still away so holds one thread per window, not every thread that needed
    it in that moment. A probe that ends otherwise (a bad argument, not the store) calls abandon():
    the next call probes."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.lock = threading.Lock()
        self.failed_at: float | None = None
        self.probing = False

    def ask(self) -> str:
        """"ask" (closed), "probe" (this call finds out whether the store is back) or "skip"."""
        if self.seconds <= 0:
            return "ask"
        with self.lock:
            if self.failed_at is None:
                return "ask"
            if self.probing or time.monotonic() - self.failed_at < self.seconds:
                return "skip"
            self.probing = True
            return "probe"

    def failed(self) -> None:
        with self.lock:
            self.failed_at, self.probing = time.monotonic(), False

    def answered(self) -> None:
        with self.lock:
            self.failed_at, self.probing = None, False

    def abandon(self) -> None:
        with self.lock:
            self.probing = False


class FailFastIndex(BaseIndex):
    """The index as request handling uses it (`pagination_index.index`, the alias "pages"): once a call
    fails with IndexUnavailable, every call fails at once for PAGINATION_INDEX["FAIL_FAST_SECONDS"]
    instead of each waiting out its own timeouts (a page makes several calls), so a dead or frozen store
    is a quick 503 and no worker thread queues behind it; then one call asks the store again while the
    others still fail at once (Breaker); unless the wrapped backend declares
    partial_failures (one lost part must not take the others' pages down). Commands and the stream
    consumer use the wrapped backend itself (get_index()): they wait.

    OPTIONS: INDEX, the alias of the index it wraps (in pagination_index.indexes)."""

    def __init__(self, options=None):
        from pagination_index.conf import index_settings

        super().__init__(options)
        self.alias = self.options["INDEX"]
        self.breaker = Breaker(float(index_settings.FAIL_FAST_SECONDS))
        self._wrapped: BaseIndex | None = None

    @property
    def wrapped(self) -> BaseIndex:
        if self._wrapped is None:  # made by the same handler, and forgotten with this object on a reset
            from pagination_index import indexes

            self._wrapped = indexes[self.alias]
        return self._wrapped

    @property
    def database_alias(self) -> str | None:
        return self.wrapped.database_alias

    @property
    def partial_failures(self) -> bool:
        return self.wrapped.partial_failures

    def _call(self, name: str, args, kwargs):
        wrapped = self.wrapped
        verdict = "ask" if wrapped.partial_failures else self.breaker.ask()
        if verdict == "skip":
            raise IndexUnavailable("the pagination index failed moments ago (failing fast)")
        try:
            result = getattr(wrapped, name)(*args, **kwargs)
        except IndexUnavailable:
            self.breaker.failed()
            raise
        except BaseException:
            if verdict == "probe":
                self.breaker.abandon()
            raise
        if verdict == "probe":
            self.breaker.answered()
        return result

    def __getattr__(self, name):
        """What one backend offers beyond BaseIndex (the DynamoDB backend's table name)."""
        if name.startswith("_") or name in ("alias", "options", "breaker"):
            raise AttributeError(name)  # not made yet (copy, pickle): never ask the wrapped index
        return getattr(self.wrapped, name)

    def close(self) -> None:
        """The wrapped index is closed under its own alias."""

    def __repr__(self):
        return f"<fail-fast {self.wrapped!r}>"


def _guarded(name: str):
    def method(self, *args, **kwargs):
        return self._call(name, args, kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(BaseIndex, name).__doc__
    return method


for _name, _method in list(vars(BaseIndex).items()):
    if inspect.isfunction(_method) and not _name.startswith("_") and _name not in vars(FailFastIndex):
        setattr(FailFastIndex, _name, _guarded(_name))
