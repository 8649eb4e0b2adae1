"""Which pages a product page links to, as a pure function of (page, page count).

Besides its neighbours, the first and the last page, a page links jumps of 1, 2, 3 and 5 times each
power of ten, both ways. That keeps every page of a product with 100,000 pages within 8 clicks of
page 1 (tests/comments/test_pager.py proves it by a breadth-first search) with at most 41 numbered
links, 43 with "Previous" and "Next". Crawlers reach deep pages cheaply; people read the pager as
groups of equal jump size, in ascending order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence
from urllib.parse import urlencode

STEP_MULTIPLIERS = (1, 2, 3, 5)


@dataclass(frozen=True, slots=True)
class PagerLink:
    number: int
    href: str
    current: bool = False
    name: str = ""  # shown instead of the number ("Newest": the landing page of stable numbering)

    @property
    def label(self) -> str:
        """"12,345": as humanize's intcomma writes it in English, without a template filter per link."""
        return self.name or f"{self.number:,}"


def filter_params(ratings: Sequence[int]) -> list[tuple[str, int]]:
    """A rating filter as query parameters, in its one normalised order."""
    return [("rating", rating) for rating in ratings]


def page_href(path: str, number: int, ratings: Sequence[int] = ()) -> str:
    """A page's URL relative to the site: page 1 is the bare product URL (one URL per page); a rating
    filter comes first: "?rating=3&rating=5&page=4"."""
    # What urlencode() writes for these whole numbers, without its quoting (a pager has ~40 links).
    params = [f"rating={rating:d}" for rating in ratings]
    if number > 1:
        params.append(f"page={number:d}")
    return f"{path}?{'&'.join(params)}" if params else path


def cursor_href(path: str, cursor: str, ratings: Sequence[int] = ()) -> str:
    """A "Load more" URL: the filter, then the cursor (comments/cursors.py)."""
    return f"{path}?{urlencode(filter_params(ratings) + [('cursor', cursor)])}"


def _steps(num_pages: int):
    """(magnitude, step) for every jump size smaller than the page count."""
    power, magnitude = 1, 0
    while power < num_pages:
        for multiplier in STEP_MULTIPLIERS:
            yield magnitude, multiplier * power
        power *= 10
        magnitude += 1


def pager_groups(number: int, num_pages: int) -> list[list[int]]:
    """The page numbers the pager shows (the current one included), ascending, grouped so that each
    group holds the jumps of one power of ten on one side; first and last pages are groups of their own.
    Nothing to show when there is a single page."""
    if num_pages <= 1:
        return []
    # Group key: 0 for the first page, 1..k for backward jumps (largest first), the neighbours
    # and the current page in the middle, then forward jumps, then the last page.
    groups: dict[tuple[int, int], set[int]] = {(0, 0): {1}, (2, 0): {number}, (4, 0): {num_pages}}
    for magnitude, step in _steps(num_pages):
        back, forward = ((2, 0), (2, 0)) if magnitude == 0 else ((1, -magnitude), (3, magnitude))
        if number - step >= 1:
            groups.setdefault(back, set()).add(number - step)
        if number + step <= num_pages:
            groups.setdefault(forward, set()).add(number + step)
    seen: set[int] = set()
    ordered = []
    for key in sorted(groups):
        members = sorted(groups[key] - seen)
        seen.update(members)
        if members:
            ordered.append(members)
    return ordered


def pager_numbers(number: int, num_pages: int) -> set[int]:
    """Every page the pager links to (the current page excluded): the edges of the click graph."""
    return {n for group in pager_groups(number, num_pages) for n in group} - {number}


def pager_links(path: str, number: int, num_pages: int, ratings: Sequence[int] = ()) -> list[list[PagerLink]]:
    return [[PagerLink(n, page_href(path, n, ratings), n == number) for n in group]
            for group in pager_groups(number, num_pages)]


# --- Stable numbering (COMMENTS_PAGE_NUMBERING = "stable") ------------------------------------
# Archive pages count from the oldest comment, so a page's links may only name pages that exist for
# as long as it does: older pages, its newer neighbour (which exists, at worst redirecting to the
# landing page, while the page is served) and the landing page. Its pager is then the same after
# every post. The landing page links the archive from its newest page down. Both list newest first.

def archive_href(path: str, number: int) -> str:
    """An archive page's URL: "?page=1" is the oldest page, not the bare product URL."""
    return f"{path}?{urlencode([('page', number)])}"


def archive_numbers(number: int | None, newest: int) -> set[int]:
    """The archive pages a stable page links to: archive page `number` (None: the landing page, whose
    newest archive page is `newest`). Jumps of 1, 2, 3, 5 x 10^i down to page 1, and the newer
    neighbour."""
    if number is None:
        return {n for group in pager_groups(newest + 1, newest + 1) for n in group} - {newest + 1} if newest else set()
    return pager_numbers(number, number + 1)


def archive_pager_links(path: str, number: int | None, newest: int) -> list[list[PagerLink]]:
    """The pager of a stable page, newest first: "Newest" (the landing page), then the archive pages
    in groups of equal jump size (archive_numbers)."""
    if number is None:
        if not newest:
            return []
        groups = [[n for n in group if n <= newest] for group in pager_groups(newest + 1, newest + 1)]
    else:
        groups = pager_groups(number, number + 1)
    links = [[PagerLink(n, archive_href(path, n), n == number) for n in reversed(group)]
             for group in reversed(groups) if group]
    return [[PagerLink(0, path, number is None, name="Newest")], *links]
