"""What product pages share between requests for COMMENTS_FAST_CACHE_SECONDS, kept in Django's cache
only (so a write's invalidation reaches every process that shares it): each group's newest comments
(the fast window), group counts, each group's newest sort key, and the product row.
docs/architecture.md, "Caches", lists every cache of the site and why it is there."""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

from django.conf import settings
from django.core.cache import cache

from comments import store
from comments.partitions import parallel
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


def read_window(group: str) -> FastWindow:
    """A group's fast window as DynamoDB has it now (one Query, continued while it returns short)."""
    return FastWindow(*store.newest(group, fast_window_size()))


def cache_key(kind: str, group: str) -> str:
    digest = hashlib.sha1(f"{table_name()}\0{group}".encode()).hexdigest()
    return f"comments:{kind}:{digest}"


class WindowRefresher:
    """Reads stale fast windows again off the request path, at most one read per window at a time in
    a process. A refresh puts its window back only while the stale entry it replaces is still there:
    a write's product_caches_forget() meanwhile (in any process) deleted it, and the refresh's read
    may predate that write."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._under_way: set[str] = set()

    def start(self, group: str, key: str, stale_until: float) -> None:
        with self._lock:
            if key in self._under_way:
                return
            self._under_way.add(key)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="window-refresh")
            pool = self._pool
        pool.submit(self._refresh, group, key, stale_until)

    def _refresh(self, group: str, key: str, stale_until: float) -> None:
        try:
            window = read_window(group)
            if cache.get(f"{key}:stamp") == stale_until:
                PageCache.put_window(key, window)
        except Exception as exc:  # the stale window serves until its grace is over; then a request reads it
            logger.warning("fast window of %s not refreshed: %s", group, exc)
        finally:
            with self._lock:
                self._under_way.discard(key)

    @property
    def idle(self) -> bool:
        return not self._under_way


class PageCache:
    """The one layer in front of Django's cache for product pages' data. Every value lives
    COMMENTS_FAST_CACHE_SECONDS (0: nothing is kept). A fast window is kept as (fresh until, window)
    for COMMENTS_FAST_STALE_SECONDS longer: past its freshness it is still served while
    `refresher` reads it again, so no page view waits on DynamoDB for a window the cache has.
    Failures are never kept: a call that raises IndexUnavailable raises it again next time."""

    refresher = WindowRefresher()
    # Unpickling a 200-comment window from Django's cache costs more than the rest of a hot page
    # (docs/benchmarks.md), so each process keeps the windows it unpickled, by the stamp they were
    # stored with. It never serves a window Django's cache no longer stamps: every request reads the
    # stamps (small values), so a write's product_caches_forget() reaches every process at once.
    unpickled_limit = 1024

    def __init__(self):
        self._unpickled: dict[str, tuple[float, FastWindow]] = {}

    @staticmethod
    def put_window(key: str, window: FastWindow) -> None:
        seconds = settings.COMMENTS_FAST_CACHE_SECONDS
        fresh_until = time.time() + seconds
        keep = seconds + settings.COMMENTS_FAST_STALE_SECONDS
        cache.set_many({key: (fresh_until, window), f"{key}:stamp": fresh_until}, keep)

    def windows(self, groups: Sequence[str]) -> list[FastWindow]:
        """Each group's newest comments: one Query per missing group (in parallel), shared by pages
        1..FAST_PAGES of every filter that includes the group."""
        if not settings.COMMENTS_FAST_CACHE_SECONDS:
            return parallel(read_window, list(groups))
        keys = {group: cache_key("fast", group) for group in groups}
        stamps = cache.get_many([f"{key}:stamp" for key in keys.values()])
        now, found, unpickle = time.time(), {}, []
        for group, key in keys.items():
            stamp = stamps.get(f"{key}:stamp")
            if stamp is None or now - stamp >= settings.COMMENTS_FAST_STALE_SECONDS and stamp <= now:
                continue  # never read, dropped by a write, or stale beyond its grace
            if stamp <= now:
                self.refresher.start(group, key, stamp)
            mine = self._unpickled.get(key)
            if mine is not None and mine[0] == stamp:
                found[group] = mine[1]
            else:
                unpickle.append(group)
        cached = cache.get_many([keys[group] for group in unpickle])
        if len(self._unpickled) + len(cached) > self.unpickled_limit:
            self._unpickled = {}
        for group in unpickle:
            if keys[group] in cached:
                found[group] = cached[keys[group]][1]
                self._unpickled[keys[group]] = cached[keys[group]]
        missing = [group for group in groups if group not in found]
        for group, window in zip(missing, parallel(read_window, missing)):
            self.put_window(keys[group], window)
            found[group] = window
        return [found[group] for group in groups]

    def counts(self, groups: Sequence[str]) -> dict[str, int]:
        """index.count_many(groups): for pages 1..FAST_PAGES, the rating bars and unfiltered deeper
        pages (whose count only validates the page number). A filter's deeper pages and the stable
        archive pages count afresh: their reads depend on the count of the moment."""
        seconds = settings.COMMENTS_FAST_CACHE_SECONDS
        if not seconds:
            return index.count_many(groups)
        keys = {group: cache_key("count", group) for group in groups}
        cached = cache.get_many(list(keys.values()))
        counts = {group: cached[key] for group, key in keys.items() if key in cached}
        missing = [group for group in groups if group not in counts]
        if missing:
            fetched = index.count_many(missing)
            cache.set_many({keys[group]: fetched[group] for group in missing}, seconds)
            counts.update(fetched)
        return counts

    def newest_sk(self, group: str) -> str | None:
        """The SK of a group's newest entry (index rank 0): the Last-Modified of deeper pages, as
        fresh as pages 1..FAST_PAGES (their comments are read afresh)."""
        seconds = settings.COMMENTS_FAST_CACHE_SECONDS
        key = cache_key("newest", group)
        found = cache.get(key, ()) if seconds else ()
        if found != ():
            return found[0]
        entry = index.at(group, 0)
        newest = entry[1] if entry else None
        if seconds:
            cache.set(key, (newest,), seconds)  # a tuple: None is a newest SK too (an empty group)
        return newest

    def product(self, sku: str) -> Product | None:
        """The product a page shows (an edit shows within COMMENTS_FAST_CACHE_SECONDS): most page
        views then need no database connection."""
        seconds = settings.COMMENTS_FAST_CACHE_SECONDS
        if not seconds:
            return Product.objects.filter(sku=sku).first()
        key = cache_key("product", sku)
        product = cache.get(key)
        if product is None:
            product = Product.objects.filter(sku=sku).first()
            if product is not None:
                cache.set(key, product, seconds)
        return product

    def forget(self, sku: str) -> None:
        """Drop a product's windows, counts and newest keys, its rating groups' included, and its row
        (moderation dates its pages there: Product.comments_changed_at)."""
        keys = [cache_key(kind, group) for group in product_groups(sku) for kind in ("fast", "count", "newest")]
        stamps = [f"{key}:stamp" for key in keys if key.startswith("comments:fast:")]
        cache.delete_many(keys + stamps + [cache_key("product", sku)])


page_cache = PageCache()


def product_caches_forget(sku: str) -> None:
    """After a write to a product's comments: what pages share of them is read again, in every
    process that shares Django's cache."""
    page_cache.forget(sku)
