"""Reads for product pages: page N of a product's comments, newest first (DESIGN.md, "Serving page N")."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Iterable

from django.conf import settings
from django.core.cache import cache
from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator

from comments import store
from comments.store import Comment
from pagination_index import IndexUnavailable, aws, index

# A page number is a plain positive integer: no sign, no leading zero, no exponent, at most 10 digits.
PAGE_NUMBER = re.compile(r"[1-9][0-9]{0,9}")
# How far back to look per index read when counting a run of equal sort keys.
TIE_SCAN_CHUNK = 64


class CommentPaginator(Paginator):
    """A Paginator whose count comes from the index, not from len(object_list)."""

    def __init__(self, count: int, per_page: int):
        super().__init__((), per_page, allow_empty_first_page=True)
        self.__dict__["count"] = count


@dataclass(frozen=True, slots=True)
class RatingSummary:
    """Ratings of every comment of a product: only built when all of them are in hand."""
    count: int
    total: int

    @property
    def average(self) -> float:
        return round(self.total / self.count, 2)

    @classmethod
    def of(cls, comments: list[Comment]) -> RatingSummary | None:
        ratings = [c.rating for c in comments if 1 <= c.rating <= 5]
        return cls(len(ratings), sum(ratings)) if ratings else None


class CommentPage(Page):
    """Django's Page, plus how it was served: "fast" (straight from DynamoDB) or "index"."""

    def __init__(self, object_list, number, paginator, *, served_by: str, count_is_estimate: bool = False,
                 newest_sk: str | None = None, ratings: RatingSummary | None = None):
        super().__init__(object_list, number, paginator)
        self.served_by = served_by
        self.count_is_estimate = count_is_estimate
        self.newest_sk = newest_sk  # the product's newest comment: every insert shifts every page
        self.ratings = ratings  # every comment's rating, when the product's comments are all in hand


@dataclass(frozen=True)
class FastWindow:
    comments: list[Comment]
    complete: bool  # True when the product has no comments beyond these


def parse_page_number(values: list[str]) -> int:
    """The `page` query values -> a number; PageNotAnInteger for anything but one plain integer."""
    if not values:
        return 1
    if len(values) != 1 or not PAGE_NUMBER.fullmatch(values[0]):
        raise PageNotAnInteger("That page number is not a whole number.")
    return int(values[0])


def _fast_cache_key(sku: str) -> str:
    digest = hashlib.sha1(f"{aws.table_name()}\0{sku}".encode()).hexdigest()
    return f"comments:fast:{digest}"


def fast_window(sku: str) -> FastWindow:
    """The newest FAST_PAGES * PAGE_SIZE comments: one Query shared by pages 1..FAST_PAGES."""
    key = _fast_cache_key(sku)
    seconds = settings.COMMENTS_FAST_CACHE_SECONDS
    window = cache.get(key) if seconds else None
    if window is None:
        comments, complete = store.newest(sku, settings.COMMENTS_FAST_PAGES * settings.COMMENTS_PAGE_SIZE)
        window = FastWindow(comments, complete)
        if seconds:
            cache.set(key, window, seconds)
    return window


def forget_fast_window(sku: str) -> None:
    cache.delete(_fast_cache_key(sku))


def _tie_skip(sku: str, rank: int, sort_key: str) -> int:
    """How many entries at ranks <= rank share `sort_key` (the run of ties the page starts inside)."""
    skip = 0
    while rank >= 0:
        low = max(rank - TIE_SCAN_CHUNK + 1, 0)
        for _, entry_sort_key in reversed(index.range(sku, low, rank + 1)):
            if entry_sort_key != sort_key:
                return skip
            skip += 1
        rank = low - 1
    return skip


def _with_pinned(sku: str, window: FastWindow, pinned: Iterable[tuple[str, str]]) -> list[Comment]:
    """The window plus the pinned comments (PK, SK) it lacks, read by key.

    A GSI is eventually consistent, and another process may hold an older cached window: a
    comment just posted can be missing from the window, so its poster's pages read it by key.
    """
    present = {comment.pk for comment in window.comments}
    missing = [store.get_comment(pk, sk) for pk, sk in pinned if pk not in present]
    missing = [comment for comment in missing if comment is not None and comment.sku == sku]
    if not missing:
        return window.comments
    return sorted([*window.comments, *missing], key=lambda c: c.order_key, reverse=True)


def _fast_page(sku: str, number: int, per_page: int, pinned: Iterable[tuple[str, str]] = ()) -> CommentPage:
    window = fast_window(sku)
    comments = _with_pinned(sku, window, pinned)
    estimate = False
    if window.complete:
        count = len(comments)
    else:
        try:
            count = max(index.count(sku), len(comments))
        except IndexUnavailable:
            # Pages 1..FAST_PAGES don't need the index: serve them, with the total we can see.
            count, estimate = len(comments), True
    paginator = CommentPaginator(count, per_page)
    paginator.validate_number(number)
    start = (number - 1) * per_page
    return CommentPage(comments[start : start + per_page], number, paginator,
                       served_by="fast", count_is_estimate=estimate,
                       newest_sk=comments[0].sk if comments else None,
                       ratings=RatingSummary.of(comments) if window.complete else None)


def _index_page(sku: str, number: int, per_page: int) -> CommentPage:
    paginator = CommentPaginator(index.count(sku), per_page)
    paginator.validate_number(number)
    rank = (number - 1) * per_page - 1  # the last comment of page N-1
    first = max(rank - 1, 0)
    neighbours = index.range(sku, first, rank + 2)
    if rank - first >= len(neighbours):
        raise EmptyPage("That page no longer exists.")  # the group shrank since count()
    boundary = neighbours[rank - first]
    tied = sum(1 for _, sort_key in neighbours if sort_key == boundary[1]) > 1
    skip = _tie_skip(sku, rank, boundary[1]) if tied else 0
    comments, _ = store.newest(sku, per_page, after=boundary, skip=skip)
    return CommentPage(comments, number, paginator, served_by="index", newest_sk=product_newest_sk(sku))


def product_comment_page(*, sku: str, number: int, pinned: Iterable[tuple[str, str]] = ()) -> CommentPage:
    """Page `number` of a product's comments. Raises EmptyPage (-> 404) past the last page and
    IndexUnavailable (-> 503) when an index page is asked for and the index cannot answer.

    `pinned`: keys (PK, SK) of comments this reader just posted, shown on pages 1..FAST_PAGES even
    if the GSI or a cached window does not have them yet."""
    per_page = settings.COMMENTS_PAGE_SIZE
    if number < 1:
        raise EmptyPage("Page numbers start at 1.")
    if number <= settings.COMMENTS_FAST_PAGES:
        return _fast_page(sku, number, per_page, pinned)
    return _index_page(sku, number, per_page)


def product_comment_counts(skus: list[str]) -> dict[str, int | None]:
    """Comment counts for the catalogue, from the index; None where the index cannot answer."""
    try:
        return index.count_many(skus)
    except IndexUnavailable:
        return {sku: None for sku in skus}


def product_newest_sk(sku: str) -> str | None:
    """The SK of a product's newest comment, from the index (its rank 0): one cheap read."""
    entry = index.at(sku, 0)
    return entry[1] if entry else None


def product_page_count(count: int) -> int:
    """Pages of a product with `count` comments: page 1 exists even with none."""
    return max(1, -(-count // settings.COMMENTS_PAGE_SIZE))
