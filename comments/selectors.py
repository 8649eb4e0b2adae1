"""Reads for product pages and the comments API: page N, or any offset, of a product's comments,
newest first, optionally only some ratings (the union of rating groups: comments/union.py).

Pages 1..FAST_PAGES come from each group's newest comments (comments/page_cache.py), read straight from
DynamoDB; deeper pages find their start in the pagination index and read one Query from there."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from django.conf import settings
from django.core.paginator import EmptyPage

from comments import store, union
from comments.paging import CommentPage, CommentPaginator, CommentSlice, RatingStats, RatingSummary
from comments.store import Comment
from comments.table.keys import RATINGS, rating_group
from comments.union import TOP, Position, Slice, groups_for
from comments.page_cache import FastWindow, fast_window_size, page_cache
from pagination_index import IndexUnavailable, index


def _total(groups: list[str], seen: int, complete: bool) -> tuple[int, bool]:
    """The union's size, and whether it is only a lower bound (the index is down)."""
    if complete:
        return seen, False
    try:
        return max(sum(page_cache.counts(groups).values()), seen), False
    except IndexUnavailable:
        return seen, True  # the fast windows don't need the index: serve them with what we can see


@dataclass(frozen=True)
class _Counted:
    """What is known of a filter before its comments are read: its size, and for offsets inside the
    fast windows, the windows' comments themselves."""
    total: int
    estimate: bool  # the total is only a lower bound (the index is down)
    newest_sk: str | None = None  # the filter's newest comment (index path)
    counts: dict[str, int] | None = None  # per group (index path)
    lists: list[list[Comment]] | None = None  # each group's window, pinned comments added (fast path)
    complete: bool = False  # the windows hold every comment of the filter


@dataclass(frozen=True)
class _Found:
    slice: Slice
    total: int
    estimate: bool
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


def _count(sku: str, groups: list[str], stop: int, pinned: Iterable[tuple[str, str]] = ()) -> _Counted:
    """The filter's size, before any comment past offset `stop` is read. `pinned` comments show in
    the fast windows even before the GSI has them."""
    if stop <= fast_window_size():
        windows = page_cache.windows(groups)
        lists = _with_pinned(sku, groups, windows, pinned)
        seen = sum(len(comments) for comments in lists)
        complete = all(window.complete for window in windows)
        total, estimate = _total(groups, seen, complete)
        return _Counted(total, estimate, lists=lists, complete=complete)
    if len(groups) == 1:
        # One group: its count only validates the page number, and its newest entry only dates the
        # page (Last-Modified); both are shared for COMMENTS_FAST_CACHE_SECONDS, as fresh as pages
        # 1..FAST_PAGES. The comments themselves are looked up afresh (start_after_rank: a page that
        # shrank away is a 404). A union's search needs the counts of this moment.
        counts, newest_sk = page_cache.counts(groups), page_cache.newest_sk(groups[0])
    else:
        counts, newest_sk = index.count_many(groups), _newest_sk(groups)
    return _Counted(sum(counts.values()), False, newest_sk, counts)


def _read(groups: list[str], counted: _Counted, offset: int, count: int) -> _Found:
    """`count` comments of the union from `offset`: cut from the windows, or read from the start
    position the index gives."""
    if counted.lists is not None:
        top = union.merge(groups, counted.lists, Position(0, dict.fromkeys(groups, TOP)), offset + count)
        everything = [c for comments in counted.lists for c in comments] if counted.complete else None
        return _Found(Slice(top.comments[offset:], top.resume), counted.total, counted.estimate, "fast",
                      top.comments[0].sk if top.comments else None, everything)
    found = union.read(groups, union.position_at(groups, offset, counted.counts), count)
    return _Found(found, counted.total, False, "index", counted.newest_sk)


def _page(ratings: Sequence[int], stats: RatingStats | None, found: _Found, number: int,
          paginator: CommentPaginator) -> CommentPage:
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
    groups, offset = groups_for(sku, ratings), (number - 1) * per_page
    stats = product_rating_stats(sku=sku)  # counts first, then the start position, then the store read
    counted = _count(sku, groups, offset + per_page, pinned)
    paginator = CommentPaginator(counted.total, per_page)
    paginator.validate_number(number)
    return _page(ratings, stats, _read(groups, counted, offset, per_page), number, paginator)


def product_comment_slice(*, sku: str, offset: int, limit: int, ratings: Sequence[int] = ()) -> CommentSlice:
    """`limit` comments from `offset` (the API). EmptyPage past the end; offset 0 always exists."""
    groups = groups_for(sku, ratings)
    counted = _count(sku, groups, offset + limit)
    if offset and offset >= counted.total:
        raise EmptyPage(f"Offset {offset} is past the last comment ({counted.total}).")
    found = _read(groups, counted, offset, limit)
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
    stats = product_rating_stats(sku=sku)
    try:
        newest_sk = _newest_sk(groups_for(sku, ratings))
    except IndexUnavailable:
        newest_sk = None
    found = product_comment_slice_after(sku=sku, position=position, limit=per_page, ratings=ratings)
    return _page(ratings, stats, _Found(Slice(found.comments, found.resume), found.total, found.total_is_estimate,
                                      "cursor", newest_sk),
                 position.offset // per_page + 1, CommentPaginator(found.total, per_page))


def product_rating_stats(*, sku: str) -> RatingStats | None:
    """Comments per rating from the five rating groups' counts (one index call, no scan); None when
    the index cannot answer."""
    try:
        counts = page_cache.counts([rating_group(sku, rating) for rating in RATINGS])
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


def _archive_count(sku: str) -> tuple[int, FastWindow | None]:
    """A product's comment count for its archive pages, and its fast window when that holds every
    comment (the page is then cut from it: count and comments from one read). Raises
    IndexUnavailable when the index is needed and down."""
    try:
        count = index.count(sku)
    except IndexUnavailable:
        window = page_cache.windows([sku])[0]
        if window.complete:
            return len(window.comments), window
        raise
    if count <= fast_window_size():
        window = page_cache.windows([sku])[0]
        if window.complete:
            return len(window.comments), window
    return count, None


# Attempts at an archive page's count and boundary lookup from one state of the index (see below).
ARCHIVE_READ_ATTEMPTS = 3


def product_archive_page(*, sku: str, number: int) -> CommentPage:
    """Archive page `number` (counted from the oldest) of a product's comments, newest first within
    the page. Raises ArchiveOnLandingPage when its comments are all on the landing page, EmptyPage
    (-> 404) past that, IndexUnavailable (-> 503) when the index is needed and down.

    Costs one index count and, for products beyond the fast window, one index lookup, a second count
    and one Query from the page's boundary (comments older than the boundary: a lagging index still
    finds it).

    The index counts ranks from the newest, so the page's boundary rank comes from the count: a
    comment indexed between the count and the lookup would shift the page by one. The count is read
    again after the lookup; when it moved, both are read again (ARCHIVE_READ_ATTEMPTS in all). A page
    whose count never held still is served, marked `settled=False`: the view gives it the landing
    page's short max-age, not the archive's day. (An insert and a delete both between the two counts
    would go unseen: the delete alone already changes archive pages in place.)"""
    per_page = settings.COMMENTS_PAGE_SIZE
    if number < 1:
        raise EmptyPage("Page numbers start at 1.")
    count, window = _archive_count(sku)
    settled = True
    for attempt in range(1, ARCHIVE_READ_ATTEMPTS + 1):
        if number * per_page >= count:
            if number <= count // per_page + 1:
                raise ArchiveOnLandingPage(f"Archive page {number} is on the landing page.")
            raise EmptyPage("That page contains no results")
        offset = count - number * per_page  # newest-first rank of the page's newest comment
        if window is not None:  # count and comments from one read
            comments, served_by = window.comments[offset:offset + per_page], "fast"
            break
        position = union.position_at([sku], offset)
        try:
            again = index.count(sku)
        except IndexUnavailable:  # the lookup is done; unconfirmed, it is served briefly
            again = None
        settled = again == count
        if not settled and again is not None and attempt < ARCHIVE_READ_ATTEMPTS:
            count = again  # posts arrived (or went) meanwhile: look the boundary up again at the new count
            continue
        comments = union.read([sku], position, per_page).comments
        served_by = "index"
        break
    return CommentPage(comments, number, CommentPaginator(count, per_page), served_by=served_by,
                       newest_sk=comments[0].sk if comments else None, archive=True, settled=settled)


def archive_page_lastmods(sku: str, count: int, first: int, last: int) -> dict[int, str]:
    """The SK of the newest comment of each archive page first..last (ascending numbers): when the
    page got its comments. One index range read of the pages' ranks."""
    per_page = settings.COMMENTS_PAGE_SIZE
    start = count - last * per_page
    entries = index.range(sku, start, count - first * per_page + 1)
    return {number: entries[(count - number * per_page) - start][1] for number in range(first, last + 1)
            if (count - number * per_page) - start < len(entries)}
