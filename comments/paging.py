"""Page objects of product pages and the API: Django's own Paginator over pagination_index.query(),
with a Page that says how it was read."""
from __future__ import annotations

from dataclasses import dataclass

from django.core.paginator import Page, Paginator

from comments.store import Comment
from comments.table.keys import RATINGS
from pagination_index.sequence import Position


class CommentPaginator(Paginator):
    """Django's Paginator, its pages CommentPages (the documented _get_page() hook)."""

    def _get_page(self, *args, **kwargs) -> "CommentPage":
        return CommentPage(*args, **kwargs)


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
    """Django's Page, plus what the product page shows of how it was read. `served_by` ("fast":
    straight from DynamoDB, "index", or "cursor") and `resume` (where the next page starts, for a
    cursor) come from the query's slice; the selectors set the rest."""

    archive = False  # a stable archive page (COMMENTS_PAGE_NUMBERING=stable): shows no product-wide figure
    # False: the index's count moved on every attempt while the page was looked up, so the page may be
    # shifted by a comment: not cached for an archive page's long max-age.
    settled = True
    newest_sk: str | None = None  # the newest comment shown by any page of this filter: inserts shift pages
    ratings: RatingSummary | None = None  # the product's ratings, when known
    rating_stats: RatingStats | None = None  # the product's comments per rating, from the index

    @property
    def served_by(self) -> str:
        return getattr(self.object_list, "served_by", "index")

    @property
    def resume(self) -> Position | None:
        return getattr(self.object_list, "resume", None)

    @property
    def count_is_estimate(self) -> bool:
        return getattr(self.paginator.object_list, "count_is_estimate", False)

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
