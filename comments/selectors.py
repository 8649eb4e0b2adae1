"""Reads for product pages and the comments API: page N, or any offset, of a product's comments,
newest first, optionally only some ratings (DESIGN.md, "Serving page N"; comments/union.py)."""
from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

from django.conf import settings
from django.core.cache import cache
from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator

from comments import store, union
from comments.store import Comment
from comments.union import RATINGS, TOP, Position, Slice, groups_for
from pagination_index import IndexUnavailable, aws, index
from pagination_index.source import rating_group
from shop.models import Product

# A page number is a plain positive integer: no sign, no leading zero, no exponent, at most 10 digits.
PAGE_NUMBER = re.compile(r"[1-9][0-9]{0,9}")
RATING_VALUES = {str(rating): rating for rating in RATINGS}


class InvalidFilter(ValueError):
    """A `rating` filter that is not a sorted list of distinct ratings 1..5 (a 404: no such page)."""


class CommentPaginator(Paginator):
    """A Paginator whose count comes from the index, not from len(object_list)."""

    def __init__(self, count: int, per_page: int):
        super().__init__((), per_page, allow_empty_first_page=True)
        self.__dict__["count"] = count


@dataclass(frozen=True, slots=True)
class RatingSummary:
    """Ratings of every comment of a product: from the index's rating groups, or from the comments
    themselves when all of them are in hand."""
    count: int
    total: int

    @property
    def average(self) -> float:
        return round(self.total / self.count, 2)

    @classmethod
    def of(cls, comments: list[Comment]) -> RatingSummary | None:
        ratings = [c.rating for c in comments if 1 <= c.rating <= 5]
        return cls(len(ratings), sum(ratings)) if ratings else None


@dataclass(frozen=True)
class RatingStats:
    """How many comments a product has per rating, from the index's group counts."""
    counts: dict[int, int]

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    @property
    def summary(self) -> RatingSummary | None:
        total = sum(rating * n for rating, n in self.counts.items())
        return RatingSummary(self.count, total) if self.count else None

    @property
    def bars(self) -> list[tuple[int, int, float]]:
        """(rating, count, percent of all), five stars first."""
        count = self.count or 1
        return [(rating, self.counts[rating], 100 * self.counts[rating] / count) for rating in reversed(RATINGS)]


class CommentPage(Page):
    """Django's Page, plus how it was served ("fast": straight from DynamoDB, "index", or "cursor"),
    and where the next page resumes (for a cursor)."""

    def __init__(self, object_list, number, paginator, *, served_by: str, count_is_estimate: bool = False,
                 resume: Position | None = None, newest_sk: str | None = None, ratings: RatingSummary | None = None,
                 rating_stats: RatingStats | None = None):
        super().__init__(object_list, number, paginator)
        self.served_by = served_by
        self.count_is_estimate = count_is_estimate
        self.resume = resume
        self.newest_sk = newest_sk  # the newest comment shown by any page of this filter: inserts shift pages
        self.ratings = ratings  # the product's ratings, when known (index counts, or every comment in hand)
        self.rating_stats = rating_stats  # the product's comments per rating, from the index

    def has_more(self) -> bool:
        """Whether comments follow this page (a cursor page need not start on a page boundary)."""
        return self.resume is not None and self.resume.offset < self.paginator.count


@dataclass(frozen=True)
class CommentSlice:
    """`comments` at `offset` of a filter's `total`, for the API."""
    comments: list[Comment]
    offset: int
    total: int
    resume: Position
    served_by: str
    total_is_estimate: bool = False


@dataclass(frozen=True)
class FastWindow:
    comments: list[Comment]
    complete: bool  # True when the group has no comments beyond these


def parse_page_number(values: list[str]) -> int:
    """The `page` query values -> a number; PageNotAnInteger for anything but one plain integer."""
    if not values:
        return 1
    if len(values) != 1 or not PAGE_NUMBER.fullmatch(values[0]):
        raise PageNotAnInteger("That page number is not a whole number.")
    return int(values[0])


def parse_ratings(values: list[str]) -> tuple[int, ...]:
    """The `rating` query values -> the filter; only the normalised form (sorted, distinct, each one
    of 1..5) is accepted, so every filtered page has exactly one URL."""
    try:
        ratings = tuple(RATING_VALUES[value] for value in values)
    except KeyError:
        raise InvalidFilter("Ratings are whole numbers from 1 to 5.") from None
    if list(ratings) != sorted(set(ratings)):
        raise InvalidFilter("Ratings must be listed once each, in ascending order.")
    return ratings


# --- the fast windows: the newest FAST_PAGES * PAGE_SIZE comments of each group ----------------
def fast_window_size() -> int:
    return settings.COMMENTS_FAST_PAGES * settings.COMMENTS_PAGE_SIZE


def _fast_cache_key(group: str) -> str:
    digest = hashlib.sha1(f"{aws.table_name()}\0{group}".encode()).hexdigest()
    return f"comments:fast:{digest}"


class LocalMemo:
    """Values by key for a few seconds, in this process only (no pickling, no round trip): expiry on
    the monotonic clock; emptied whole when it reaches `limit` keys, which bounds its memory."""

    def __init__(self, limit: int):
        self.limit = limit
        self._items: dict[str, tuple[float, object]] = {}

    def get_many(self, keys: Iterable[str], now: float) -> dict[str, object]:
        found = {}
        for key in keys:
            expires, value = self._items.get(key, (0.0, None))
            if now < expires:
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


# This process's fast windows: read without unpickling 200 comments from Django's cache (about 1 ms
# a request, even from LocMemCache).
_local_windows = LocalMemo(limit=1024)


def fast_windows(groups: Sequence[str]) -> list[FastWindow]:
    """Each group's newest comments: one Query per group (in parallel), shared for a few seconds by
    pages 1..FAST_PAGES of every filter that includes the group, in this process and in Django's
    cache (shared with other processes when that is Redis)."""
    seconds = settings.COMMENTS_FAST_CACHE_SECONDS
    keys = {group: _fast_cache_key(group) for group in groups}
    now = time.monotonic()
    local = _local_windows.get_many(keys.values(), now) if seconds else {}
    found = {group: local[keys[group]] for group in groups if keys[group] in local}
    rest = [group for group in groups if group not in found]
    cached = cache.get_many([keys[group] for group in rest]) if seconds and rest else {}
    missing = [group for group in rest if keys[group] not in cached]
    fetched = union.parallel(lambda group: FastWindow(*store.newest(group, fast_window_size())), missing)
    if seconds and fetched:
        cache.set_many({keys[group]: window for group, window in zip(missing, fetched)}, seconds)
    found.update({group: cached[keys[group]] for group in rest if keys[group] in cached})
    found.update(zip(missing, fetched))
    if seconds and rest:
        _local_windows.set_many({keys[group]: found[group] for group in rest}, now + seconds)
    return [found[group] for group in groups]


def fast_window(sku: str) -> FastWindow:
    """The newest FAST_PAGES * PAGE_SIZE comments of a product (or of any group)."""
    return fast_windows([sku])[0]


def forget_fast_window(sku: str) -> None:
    """Drop a product's cached windows and counts, its rating groups' included (after a write)."""
    keys = [_fast_cache_key(group) for group in [sku, *groups_for(sku, RATINGS)]]
    for key in keys:
        _local_windows.pop(key)
        _local_counts.pop(key)
    cache.delete_many(keys)


# This process's group counts for pages 1..FAST_PAGES and the rating bars: as fresh as the fast
# windows they are shown with (COMMENTS_FAST_CACHE_SECONDS), and two index calls a request fewer on
# the most viewed pages. Deeper pages count afresh: their reads need it.
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


def product_for_page(*, sku: str) -> Product | None:
    """The product a page shows, shared by its requests for COMMENTS_FAST_CACHE_SECONDS like the
    fast window (an edit shows within that): most page views then need no database connection."""
    seconds = settings.COMMENTS_FAST_CACHE_SECONDS
    key = f"comments:product:{hashlib.sha1(sku.encode()).hexdigest()}"
    product = cache.get(key) if seconds else None
    if product is None:
        product = Product.objects.filter(sku=sku).first()
        if seconds and product is not None:
            cache.set(key, product, seconds)
    return product


# --- slices at any offset -------------------------------------------------------------------
def _total(groups: list[str], seen: int, complete: bool) -> tuple[int, bool]:
    """The union's size, and whether it is only a lower bound (the index is down)."""
    if complete:
        return seen, False
    try:
        return max(sum(recent_counts(groups).values()), seen), False
    except IndexUnavailable:
        return seen, True  # the fast windows don't need the index: serve them with what we can see


@dataclass(frozen=True)
class _Found:
    slice: Slice
    total: int
    estimate: bool  # the total is only a lower bound (the index is down)
    served_by: str
    newest_sk: str | None  # the filter's newest comment
    everything: list[Comment] | None = None  # every comment of the filter, when the fast windows hold them all


def _newest_sk(groups: list[str]) -> str | None:
    """The newest SK of the union, from the index (rank 0 of each group)."""
    entries = [index.at(group, 0) for group in groups]
    return max((entry[1] for entry in entries if entry), default=None)


def _with_pinned(sku: str, groups: list[str], windows: list[FastWindow],
                 pinned: Iterable[tuple[str, str]]) -> list[list[Comment]]:
    """Each group's window plus the pinned comments (PK, SK) it lacks, read by key.

    A GSI is eventually consistent, and another process may hold an older cached window: a
    comment just posted can be missing from the window, so its poster's pages read it by key.
    """
    present = {comment.pk for window in windows for comment in window.comments}
    missing = [store.get_comment(pk, sk) for pk, sk in pinned if pk not in present]
    missing = [comment for comment in missing if comment is not None and comment.sku == sku]
    lists = []
    for group, window in zip(groups, windows):
        mine = [comment for comment in missing if group in (comment.sku, comment.rating_group)]
        lists.append(sorted([*window.comments, *mine], key=lambda c: c.order_key, reverse=True)
                     if mine else window.comments)
    return lists


def _find(sku: str, groups: list[str], offset: int, count: int, validate,
          pinned: Iterable[tuple[str, str]] = ()) -> _Found:
    """`count` comments of the union from `offset`; `validate(total)` raises before any read past
    the end. `pinned` comments show in the fast windows even before the GSI has them."""
    if offset + count <= fast_window_size():
        windows = fast_windows(groups)
        lists = _with_pinned(sku, groups, windows, pinned)
        top = union.merge(groups, lists, Position(0, dict.fromkeys(groups, TOP)), offset + count)
        seen = sum(len(comments) for comments in lists)
        complete = all(window.complete for window in windows)
        total, estimate = _total(groups, seen, complete)
        validate(total)
        everything = [c for comments in lists for c in comments] if complete else None
        return _Found(Slice(top.comments[offset:], top.resume), total, estimate, "fast",
                      top.comments[0].sk if top.comments else None, everything)
    counts = index.count_many(groups)
    total = sum(counts.values())
    validate(total)
    found = union.read(groups, union.position_at(groups, offset, counts), count)
    return _Found(found, total, False, "index", _newest_sk(groups))


def _page(sku: str, ratings: Sequence[int], found: _Found, number: int, paginator: CommentPaginator) -> CommentPage:
    stats = product_rating_stats(sku=sku)
    summary = RatingSummary.of(found.everything) if found.everything is not None and not ratings else None
    return CommentPage(found.slice.comments, number, paginator, served_by=found.served_by,
                       count_is_estimate=found.estimate, resume=found.slice.resume, newest_sk=found.newest_sk,
                       ratings=summary or (stats.summary if stats else None), rating_stats=stats)


def product_comment_page(*, sku: str, number: int, ratings: Sequence[int] = (),
                         pinned: Iterable[tuple[str, str]] = ()) -> CommentPage:
    """Page `number` of a product's comments, only those with the given ratings if any. Raises
    EmptyPage (-> 404) past the last page and IndexUnavailable (-> 503) when the page needs the
    index and it cannot answer; pages 1..FAST_PAGES don't need it.

    `pinned`: keys (PK, SK) of comments this reader just posted, shown on pages 1..FAST_PAGES even
    if the GSI or a cached window does not have them yet."""
    per_page = settings.COMMENTS_PAGE_SIZE
    if number < 1:
        raise EmptyPage("Page numbers start at 1.")
    paginators: list[CommentPaginator] = []

    def validate(total: int) -> None:
        paginators.append(CommentPaginator(total, per_page))
        paginators[0].validate_number(number)

    found = _find(sku, groups_for(sku, ratings), (number - 1) * per_page, per_page, validate, pinned)
    return _page(sku, ratings, found, number, paginators[0])


def product_comment_slice(*, sku: str, offset: int, limit: int, ratings: Sequence[int] = ()) -> CommentSlice:
    """`limit` comments from `offset` (the API). EmptyPage past the end; offset 0 always exists."""
    def validate(total: int) -> None:
        if offset and offset >= total:
            raise EmptyPage(f"Offset {offset} is past the last comment ({total}).")

    found = _find(sku, groups_for(sku, ratings), offset, limit, validate)
    return CommentSlice(found.slice.comments, offset, found.total, found.slice.resume, found.served_by, found.estimate)


def product_comment_slice_after(*, sku: str, position: Position, limit: int,
                                ratings: Sequence[int] = ()) -> CommentSlice:
    """`limit` comments from a cursor's position: Queries only, no index read for the comments
    themselves (the total still comes from the index, or is the position when it is down)."""
    groups = groups_for(sku, ratings)
    found = union.read(groups, position, limit)
    try:
        total, estimate = sum(index.count_many(groups).values()), False
    except IndexUnavailable:
        total, estimate = found.resume.offset, True
    return CommentSlice(found.comments, position.offset, max(total, found.resume.offset), found.resume,
                        "cursor", estimate)


def product_comment_cursor_page(*, sku: str, position: Position, ratings: Sequence[int] = ()) -> CommentPage:
    """The page a "Load more" cursor points at; numbered by where it starts."""
    per_page = settings.COMMENTS_PAGE_SIZE
    found = product_comment_slice_after(sku=sku, position=position, limit=per_page, ratings=ratings)
    try:
        newest_sk = _newest_sk(groups_for(sku, ratings))
    except IndexUnavailable:
        newest_sk = None
    return _page(sku, ratings, _Found(Slice(found.comments, found.resume), found.total, found.total_is_estimate,
                                      "cursor", newest_sk),
                 position.offset // per_page + 1, CommentPaginator(found.total, per_page))


def product_rating_stats(*, sku: str) -> RatingStats | None:
    """Comments per rating from the five rating groups' counts (one index call, no scan); None when
    the index cannot answer."""
    try:
        counts = recent_counts([rating_group(sku, rating) for rating in RATINGS])
    except IndexUnavailable:
        return None
    return RatingStats({rating: counts[rating_group(sku, rating)] for rating in RATINGS})


def product_comment_counts(skus: list[str]) -> dict[str, int | None]:
    """Comment counts for the catalogue, from the index; None where the index cannot answer."""
    try:
        return index.count_many(skus)
    except IndexUnavailable:
        return {sku: None for sku in skus}


def product_newest_sk(sku: str) -> str | None:
    """The SK of a product's newest comment, from the index (its rank 0): one cheap read."""
    return _newest_sk([sku])


def product_page_count(count: int) -> int:
    """Pages of a product with `count` comments: page 1 exists even with none."""
    return max(1, -(-count // settings.COMMENTS_PAGE_SIZE))
