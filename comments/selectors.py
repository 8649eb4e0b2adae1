"""Reads for product pages and the comments API, through the pagination index's read API: a product's
comments (or those with some ratings) are pagination_index.query(), which Django's Paginator pages.

Pages 1..COMMENTS_FAST_PAGES come from the source's fast window (the newest comments, read straight
from DynamoDB and shared between requests); deeper pages find their start in the index and read one
Query from there (pagination_index/sequence.py)."""
from __future__ import annotations

from typing import Iterable, Sequence

import hashlib

from django.conf import settings
from django.core.cache import cache
from django.core.paginator import EmptyPage

from comments import store
from comments.paging import CommentPage, CommentPaginator, CommentSlice, RatingStats, RatingSummary
from comments.store import Comment, comment_from_item
from comments.table.keys import PRODUCT_RATINGS, PRODUCTS, RATINGS, rating_group, rating_groups
from pagination_index import IndexUnavailable, index, query
from pagination_index.sequence import IndexedQuery, Items, Position
from shop.models import Product


def product_key(sku: str) -> str:
    return f"comments:product:{hashlib.sha1(sku.encode()).hexdigest()}"


def product_for_page(sku: str) -> Product | None:
    """The product a page shows, kept for COMMENTS_FAST_CACHE_SECONDS (an edit shows within them;
    moderation drops it at once, caching.product_caches_forget): most page views then need no database."""
    seconds = settings.COMMENTS_FAST_CACHE_SECONDS
    if not seconds:
        return Product.objects.filter(sku=sku).first()
    key = product_key(sku)
    product = cache.get(key)
    if product is None:
        product = Product.objects.filter(sku=sku).first()
        if product is not None:
            cache.set(key, product, seconds)
    return product


def comments_query(sku: str, ratings: Sequence[int] = (), *, fast: bool = True) -> IndexedQuery:
    """A product's comments, newest first: all of them, or the union of some rating groups."""
    if ratings:
        return query(PRODUCT_RATINGS, [rating_group(sku, rating) for rating in ratings], transform=comment_from_item,
                     fast=fast)
    return query(PRODUCTS, sku, transform=comment_from_item, fast=fast)


def fast_window_size() -> int:
    return settings.COMMENTS_FAST_PAGES * settings.COMMENTS_PAGE_SIZE


class WithPinned:
    """A query with the comments this reader just posted in its first FAST_ITEMS, read by key: a GSI
    is eventually consistent, and another process may hold an older cached window, so a comment just
    posted can be missing from the window. A lazy sequence like the query itself (count, slicing)."""

    def __init__(self, items: IndexedQuery, pinned: list[Comment]):
        self.items = items
        window = list(items[0:items.fast_items])
        present = {comment.pk for comment in window}
        mine = [comment for comment in pinned if comment.pk not in present]
        self.window = sorted([*window, *mine], key=lambda c: c.order_key, reverse=True)
        self.count_is_estimate = items.count_is_estimate

    def count(self) -> int:
        counted = self.items.count()
        self.count_is_estimate = self.items.count_is_estimate
        return max(counted, len(self.window))

    def __len__(self) -> int:
        return self.count()

    def __getitem__(self, key: slice) -> Items:
        if key.stop is not None and key.stop <= self.items.fast_items:
            found = Items(self.window[key])
            found.served_by = "fast"
            return found
        return self.items[key]


def _pinned(sku: str, ratings: Sequence[int], keys: Iterable[tuple[str, str]]) -> list[Comment]:
    found = [store.get_comment(pk, sk) for pk, sk in keys]
    return [comment for comment in found
            if comment is not None and comment.sku == sku and (not ratings or comment.rating in ratings)]


def product_comment_page(*, sku: str, number: int, ratings: Sequence[int] = (),
                         pinned: Iterable[tuple[str, str]] = ()) -> CommentPage:
    """Page `number` of a product's comments, only those with the given ratings if any. Raises
    EmptyPage (-> 404) past the last page, IndexUnavailable (-> 503) when the page needs the index
    and it cannot answer (pages 1..FAST_PAGES don't).

    `pinned`: keys (PK, SK) of comments this reader just posted, shown on pages 1..FAST_PAGES even
    if the GSI or a cached window does not have them yet."""
    per_page = settings.COMMENTS_PAGE_SIZE
    items = comments_query(sku, ratings)
    shown = items
    if pinned and number * per_page <= items.fast_items:
        mine = _pinned(sku, ratings, pinned)
        if mine:
            shown = WithPinned(items, mine)
    paginator = CommentPaginator(shown, per_page)
    try:
        page = paginator.page(number)
    except EmptyPage:
        if shown.count_is_estimate:  # the index is down: the count is what the first pages show
            raise IndexUnavailable("the index is needed past the first pages") from None
        raise
    if number > 1 and not page.object_list:
        raise EmptyPage("That page no longer exists.")  # the group shrank since the count
    return _described(page, items, product_rating_stats(sku=sku), ratings)


def _described(page: CommentPage, items: IndexedQuery, stats: RatingStats | None,
               ratings: Sequence[int]) -> CommentPage:
    page.newest_sk = _newest_sk(items)
    page.rating_stats = stats
    if stats is not None:
        page.ratings = stats.summary
    elif not ratings and items.fast_items:  # the index is down: every comment in hand, if the window holds them
        window = items.windows()[items.groups[0]]
        page.ratings = RatingSummary.of(list(map(comment_from_item, window.items))) if window.complete else None
    return page


def _newest_sk(items: IndexedQuery) -> str | None:
    try:
        newest = items.newest()
    except IndexUnavailable:
        return None
    return newest[1] if newest else None


def product_comment_slice(*, sku: str, offset: int, limit: int, ratings: Sequence[int] = ()) -> CommentSlice:
    """`limit` comments from `offset` (the API). EmptyPage past the end; offset 0 always exists."""
    items = comments_query(sku, ratings)
    total = items.count()
    if offset and offset >= total:
        if items.count_is_estimate:
            raise IndexUnavailable("the index is needed past the first comments")
        raise EmptyPage(f"Offset {offset} is past the last comment ({total}).")
    found = items[offset:offset + limit]
    if offset and not found:
        raise EmptyPage(f"Offset {offset} is past the last comment.")
    return CommentSlice(list(found), offset, max(total, offset + len(found)), found.resume, found.served_by,
                        items.count_is_estimate)


def product_comment_slice_after(*, sku: str, position: Position, limit: int,
                                ratings: Sequence[int] = ()) -> CommentSlice:
    """`limit` comments from a cursor's position: Queries only, no index read for the comments
    themselves (the total still comes from the index, or is the position when it is down)."""
    items = comments_query(sku, ratings)
    found = items.after(position, limit)
    try:
        total, estimate = sum(items.counts().values()), False
    except IndexUnavailable:
        total, estimate = found.resume.offset, True
    return CommentSlice(list(found), position.offset, max(total, found.resume.offset), found.resume, "cursor",
                        estimate)


class _Slice:
    """A slice already read, as the one-page object list of a cursor page's Paginator."""

    def __init__(self, found: Items, total: int, offset: int):
        self.found, self.total, self.offset = found, total, offset

    def count(self) -> int:
        return self.total

    def __getitem__(self, key: slice) -> Items:
        return self.found


def product_comment_cursor_page(*, sku: str, position: Position, ratings: Sequence[int] = ()) -> CommentPage:
    """The page a "Load more" cursor points at; numbered by where it starts."""
    per_page = settings.COMMENTS_PAGE_SIZE
    items = comments_query(sku, ratings)
    found = product_comment_slice_after(sku=sku, position=position, limit=per_page, ratings=ratings)
    stats = product_rating_stats(sku=sku)
    read = Items(found.comments)
    read.served_by, read.resume = "cursor", found.resume
    number = position.offset // per_page + 1
    paginator = CommentPaginator(_Slice(read, max(found.total, position.offset + 1), position.offset), per_page)
    page = CommentPage(read, number, paginator)
    page.newest_sk = _newest_sk(items)
    page.ratings = stats.summary if stats else None
    page.rating_stats = stats
    return page


def product_rating_stats(*, sku: str) -> RatingStats | None:
    """Comments per rating from the five rating groups' counts (one index call, no scan); None when
    the index cannot answer."""
    try:
        counts = query(PRODUCT_RATINGS, rating_groups(sku)).counts()
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
    entry = index.at(sku, 0)
    return entry[1] if entry else None


def product_page_count(count: int) -> int:
    """Pages of a product with `count` comments: page 1 exists even with none."""
    return max(1, -(-count // settings.COMMENTS_PAGE_SIZE))


# --- Stable page numbers (COMMENTS_PAGE_NUMBERING = "stable") ----------------------------------
# Archive page k of a product with N comments holds the comments ranked (k-1)*P .. k*P-1 from the
# oldest, i.e. newest-first ranks N-k*P .. N-(k-1)*P-1, listed newest first. It is served (and
# indexable) only while it is full and not the landing page's list, k*P < N: then no post changes it.
# A page whose comments are all on the landing page (the one filling up, or a full one that equals
# the landing list) redirects there; past that it does not exist.

class ArchiveOnLandingPage(Exception):
    """Every comment of this archive page is on the product's landing page: a temporary redirect."""


def numbering_is_stable() -> bool:
    return settings.COMMENTS_PAGE_NUMBERING == "stable"


def newest_archive_page(count: int) -> int:
    """The newest archive page that is served rather than redirected: full, and not the landing list
    (0: none yet)."""
    return max(0, (count - 1) // settings.COMMENTS_PAGE_SIZE)


# Attempts at an archive page's count and boundary lookup from one state of the index (see below).
ARCHIVE_READ_ATTEMPTS = 3


def _archive_count(sku: str) -> tuple[int, list[Comment] | None]:
    """A product's comment count for its archive pages, afresh from the index (a page cached for a
    day must not come from a count shared for seconds), and its fast window when that holds every
    comment (the page is then cut from it: count and comments from one read)."""
    try:
        count = index.count(sku)
    except IndexUnavailable:
        count = None
    windowed = comments_query(sku)
    if count is None or count <= windowed.fast_items:
        window = windowed.windows()[windowed.groups[0]]
        if window.complete:
            return len(window.items), [comment_from_item(item) for item in window.items]
        if count is None:
            raise IndexUnavailable("the index is needed for this archive page")
    return count, None


def product_archive_page(*, sku: str, number: int) -> CommentPage:
    """Archive page `number` (counted from the oldest) of a product's comments, newest first within
    the page. Raises ArchiveOnLandingPage when its comments are all on the landing page, EmptyPage
    (-> 404) past that, IndexUnavailable (-> 503) when the index is needed and down.

    The index counts ranks from the newest, so the page's boundary rank comes from the count: a
    comment indexed between the count and the lookup would shift the page by one. The count is read
    again after the read; when it moved, both are read again (ARCHIVE_READ_ATTEMPTS in all). A page
    whose count never held still is served, marked `settled=False`: the view gives it the landing
    page's short max-age, not the archive's day."""
    per_page = settings.COMMENTS_PAGE_SIZE
    if number < 1:
        raise EmptyPage("Page numbers start at 1.")
    items = comments_query(sku, fast=False)  # count and boundary from one state of the index
    count, window = _archive_count(sku)
    settled = True
    for attempt in range(1, ARCHIVE_READ_ATTEMPTS + 1):
        if number * per_page >= count:
            if number <= count // per_page + 1:
                raise ArchiveOnLandingPage(f"Archive page {number} is on the landing page.")
            raise EmptyPage("That page contains no results")
        offset = count - number * per_page  # newest-first rank of the page's newest comment
        if window is not None:  # count and comments from one read
            found = Items(window[offset:offset + per_page])
            found.served_by = "fast"
            break
        found = items[offset:offset + per_page]
        try:
            again = index.count(sku)
        except IndexUnavailable:  # the read is done; unconfirmed, it is served briefly
            again = None
        settled = again == count
        if not settled and again is not None and attempt < ARCHIVE_READ_ATTEMPTS:
            count = again  # posts arrived (or went) meanwhile: read the page again at the new count
            continue
        break
    page = CommentPage(found, number, CommentPaginator(_Slice(found, count, offset), per_page))
    page.archive, page.settled = True, settled
    page.newest_sk = found[0].sk if found else None
    return page


def archive_page_lastmods(sku: str, count: int, first: int, last: int) -> dict[int, str]:
    """The SK of the newest comment of each archive page first..last (ascending numbers): when the
    page got its comments. One index range read of the pages' ranks."""
    per_page = settings.COMMENTS_PAGE_SIZE
    start = count - last * per_page
    entries = index.range(sku, start, count - first * per_page + 1)
    return {number: entries[(count - number * per_page) - start][1] for number in range(first, last + 1)
            if (count - number * per_page) - start < len(entries)}
