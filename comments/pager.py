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

    @property
    def label(self) -> str:
        """"12,345": as humanize's intcomma writes it in English, without a template filter per link."""
        return f"{self.number:,}"


def filter_params(ratings: Sequence[int]) -> list[tuple[str, int]]:
    """A rating filter as query parameters, in its one normalised order."""
    return [("rating", rating) for rating in ratings]


def page_href(path: str, number: int, ratings: Sequence[int] = ()) -> str:
    """A page's URL relative to the site: page 1 is the bare product URL (one URL per page); a rating
    filter comes first: "?rating=3&rating=5&page=4"."""
    params = filter_params(ratings) + ([("page", number)] if number > 1 else [])
    return f"{path}?{urlencode(params)}" if params else path


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
