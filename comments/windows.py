"""What product pages share between requests for a few seconds (COMMENTS_FAST_CACHE_SECONDS): each
group's newest comments (the fast window), group counts, and the product row; and dropping them
after a write."""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Sequence

from django.conf import settings
from django.core.cache import cache

from comments import store, union
from comments.store import Comment
from comments.table.keys import product_groups, table_name
from pagination_index import index
from shop.models import Product

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FastWindow:
    comments: list[Comment]
    complete: bool  # True when the group has no comments beyond these


def fast_window_size() -> int:
    return settings.COMMENTS_FAST_PAGES * settings.COMMENTS_PAGE_SIZE


def _fast_cache_key(group: str) -> str:
    digest = hashlib.sha1(f"{table_name()}\0{group}".encode()).hexdigest()
    return f"comments:fast:{digest}"


class LocalMemo:
    """Values by key for a few seconds, in this process only (no pickling, no round trip): expiry on
    the monotonic clock; emptied whole when it reaches `limit` keys, which bounds its memory."""

    def __init__(self, limit: int):
        self.limit = limit
        self._items: dict[str, tuple[float, object]] = {}

    def get_many(self, keys: Iterable[str], now: float, *, grace: float = 0.0) -> dict[str, object]:
        """The values not yet expired at `now`; with `grace`, also those expired less than `grace`
        seconds ago."""
        found = {}
        for key in keys:
            expires, value = self._items.get(key, (0.0, None))
            if now < expires + grace:
                found[key] = value
        return found

    def set_many(self, values: dict[str, object], expires: float) -> None:
        if len(self._items) + len(values) > self.limit:
            self._items.clear()
        self._items.update({key: (expires, value) for key, value in values.items()})

    def pop(self, key: str) -> None:
        self._items.pop(key, None)

    def clear(self) -> None:
        self._items.clear()


def read_window(group: str) -> FastWindow:
    """A group's fast window as DynamoDB has it now (one Query, continued while it returns short)."""
    return FastWindow(*store.newest(group, fast_window_size()))


# This process's fast windows: read without unpickling 200 comments from Django's cache on every
# request (unpickling costs even with LocMemCache).
_local_windows = LocalMemo(limit=1024)


class WindowRefresher:
    """Reads expired fast windows again off the request path: while one is read, requests keep
    serving the one before (for at most COMMENTS_FAST_STALE_SECONDS past its expiry), so a page view
    never waits on DynamoDB for a window it has. At most one read per window at a time; a window
    dropped by a write meanwhile (`forget`) is not put back by a read that started before it."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._under_way: set[str] = set()
        self._generations: dict[str, int] = {}  # bumped by forget(): a read older than that is dropped

    def start(self, group: str, key: str) -> None:
        with self._lock:
            if key in self._under_way:
                return
            self._under_way.add(key)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="window-refresh")
            generation = self._generations.get(key, 0)
            pool = self._pool
        pool.submit(self._refresh, group, key, generation)

    def forget(self, key: str) -> None:
        with self._lock:
            self._generations[key] = self._generations.get(key, 0) + 1
            if len(self._generations) > _local_windows.limit:  # bounded like the windows, but for reads under way
                self._generations = {name: number for name, number in self._generations.items()
                                     if name == key or name in self._under_way}

    def _refresh(self, group: str, key: str, generation: int) -> None:
        seconds = settings.COMMENTS_FAST_CACHE_SECONDS
        try:
            window = cache.get(key)  # another process may have read it already
            if window is None:
                window = read_window(group)
                if self._generations.get(key, 0) == generation:
                    cache.set(key, window, seconds)
            with self._lock:
                if self._generations.get(key, 0) == generation:
                    _local_windows.set_many({key: window}, time.monotonic() + seconds)
        except Exception as exc:  # the old window serves until its grace is over; then a request reads it
            logger.warning("fast window of %s not refreshed: %s", group, exc)
        finally:
            with self._lock:
                self._under_way.discard(key)

    def wait(self, timeout: float = 10.0) -> None:
        """Until no refresh is under way (tests)."""
        deadline = time.monotonic() + timeout
        while self._under_way and time.monotonic() < deadline:
            time.sleep(0.005)


refresher = WindowRefresher()


def fast_windows(groups: Sequence[str]) -> list[FastWindow]:
    """Each group's newest comments: one Query per group (in parallel), shared for a few seconds by
    pages 1..FAST_PAGES of every filter that includes the group, in this process and in Django's
    cache (shared with other processes when that is Redis). A window expired less than
    COMMENTS_FAST_STALE_SECONDS ago is served while a background thread reads it again."""
    seconds = settings.COMMENTS_FAST_CACHE_SECONDS
    keys = {group: _fast_cache_key(group) for group in groups}
    now = time.monotonic()
    local = _local_windows.get_many(keys.values(), now) if seconds else {}
    found = {group: local[keys[group]] for group in groups if keys[group] in local}
    expired = [group for group in groups if group not in found]
    if seconds and expired and settings.COMMENTS_FAST_STALE_SECONDS:
        stale = _local_windows.get_many([keys[group] for group in expired], now,
                                        grace=settings.COMMENTS_FAST_STALE_SECONDS)
        for group in expired:
            if keys[group] in stale:
                found[group] = stale[keys[group]]
                refresher.start(group, keys[group])
    rest = [group for group in groups if group not in found]
    cached = cache.get_many([keys[group] for group in rest]) if seconds and rest else {}
    missing = [group for group in rest if keys[group] not in cached]
    fetched = union.parallel(read_window, missing)
    if seconds and fetched:
        cache.set_many({keys[group]: window for group, window in zip(missing, fetched)}, seconds)
    found.update({group: cached[keys[group]] for group in rest if keys[group] in cached})
    found.update(zip(missing, fetched))
    if seconds and rest:
        _local_windows.set_many({keys[group]: found[group] for group in rest}, now + seconds)
    return [found[group] for group in groups]


def forget_fast_window(sku: str) -> None:
    """Drop a product's cached windows and counts, its rating groups' included (after a write)."""
    keys = [_fast_cache_key(group) for group in product_groups(sku)]
    for key in keys:
        refresher.forget(key)
        _local_windows.pop(key)
        _local_counts.pop(key)
        _local_newest.pop(key)
    cache.delete_many(keys)


# This process's group counts for pages 1..FAST_PAGES, the rating bars and unfiltered deeper pages
# (whose count only validates the page number): as fresh as the fast windows they are shown with
# (COMMENTS_FAST_CACHE_SECONDS), and index calls a request fewer. A filter's deeper pages and the
# stable archive pages count afresh: their reads depend on the count of the moment.
_local_counts = LocalMemo(limit=6 * 1024)  # a product and its five rating groups


def recent_counts(groups: Sequence[str]) -> dict[str, int]:
    """index.count_many(groups), shared by this process's requests for COMMENTS_FAST_CACHE_SECONDS.
    Raises IndexUnavailable as count_many does (failures are not kept)."""
    seconds = settings.COMMENTS_FAST_CACHE_SECONDS
    if not seconds:
        return index.count_many(groups)
    now = time.monotonic()
    keys = {group: _fast_cache_key(group) for group in groups}
    local = _local_counts.get_many(keys.values(), now)
    counts = {group: local[keys[group]] for group in groups if keys[group] in local}
    missing = [group for group in groups if group not in counts]
    if missing:
        fetched = index.count_many(missing)
        _local_counts.set_many({keys[group]: fetched[group] for group in missing}, now + seconds)
        counts.update(fetched)
    return counts


# This process's newest entry of each group, for the Last-Modified of deeper pages (their comments are
# read afresh; the date that heads them is as fresh as pages 1..FAST_PAGES).
_local_newest = LocalMemo(limit=1024)


def recent_newest_sk(group: str) -> str | None:
    """The SK of a group's newest entry (index rank 0), shared by this process's requests for
    COMMENTS_FAST_CACHE_SECONDS. Raises IndexUnavailable as at() does (failures are not kept)."""
    seconds = settings.COMMENTS_FAST_CACHE_SECONDS
    key = _fast_cache_key(group)
    now = time.monotonic()
    found = _local_newest.get_many([key], now) if seconds else {}
    if key in found:
        return found[key]
    entry = index.at(group, 0)
    newest = entry[1] if entry else None
    if seconds:
        _local_newest.set_many({key: newest}, now + seconds)
    return newest


# This process's product rows, like the windows: no unpickling of a model instance per request.
_local_products = LocalMemo(limit=1024)


def product_for_page(*, sku: str) -> Product | None:
    """The product a page shows, shared by its requests for COMMENTS_FAST_CACHE_SECONDS like the
    fast window (an edit shows within that), in this process and in Django's cache: most page views
    then need no database connection."""
    seconds = settings.COMMENTS_FAST_CACHE_SECONDS
    if not seconds:
        return Product.objects.filter(sku=sku).first()
    key = f"comments:product:{hashlib.sha1(sku.encode()).hexdigest()}"
    now = time.monotonic()
    found = _local_products.get_many([key], now)
    if key in found:
        return found[key]
    product = cache.get(key)
    if product is None:
        product = Product.objects.filter(sku=sku).first()
        if product is not None:
            cache.set(key, product, seconds)
    if product is not None:
        _local_products.set_many({key: product}, now + seconds)
    return product


def clear_local_memos() -> None:
    """Empty this process's memos (tests: what one test read must not serve the next)."""
    for memo in (_local_windows, _local_counts, _local_newest, _local_products):
        memo.clear()
