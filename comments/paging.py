"""Page objects of product pages and the API: Django's Paginator and Page, counted by the index."""
from __future__ import annotations

from dataclasses import dataclass

from django.core.paginator import Page, Paginator

from comments.store import Comment
from comments.table.keys import RATINGS
from comments.union import Position


class CommentPaginator(Paginator):
    """A Paginator whose count comes from the index, not from len(object_list). `count` is overridden
    as a plain property (the pages' comments come from DynamoDB, never from `page()`), so nothing relies
    on how Django caches its own `count`."""

    def __init__(self, count: int, per_page: int):
        super().__init__((), per_page, allow_empty_first_page=True)
        self._index_count = count

    @property
    def count(self) -> int:
        return self._index_count


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
        ratings = [c.rating for c in comments if c.rating in RATINGS]
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
                 rating_stats: RatingStats | None = None, archive: bool = False, settled: bool = True):
        super().__init__(object_list, number, paginator)
        # A stable archive page (COMMENTS_PAGE_NUMBERING=stable): numbered from the oldest comment, and
        # showing nothing that a new comment changes (no total, no rating figures).
        self.archive = archive
        # False: the index's count moved on every attempt while the page was looked up, so the page may
        # be shifted by a comment: not cached for an archive page's long max-age.
        self.settled = settled
        self.served_by = served_by
        self.count_is_estimate = count_is_estimate
        self.resume = resume
        self.newest_sk = newest_sk  # the newest comment shown by any page of this filter: inserts shift pages
        self.ratings = ratings  # the product's ratings, when known (index counts, or every comment in hand)
        self.rating_stats = rating_stats  # the product's comments per rating, from the index

    @property
    def oldest_number(self) -> int:
        """An archive page's first comment, counted from the oldest (1-based): "Comments 241-260"."""
        return (self.number - 1) * self.paginator.per_page + 1

    @property
    def newest_number(self) -> int:
        return self.oldest_number + len(self.object_list) - 1

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
