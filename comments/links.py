"""URLs of a product's comment pages: page N, a rating filter, a cursor."""
from __future__ import annotations

from typing import Sequence
from urllib.parse import urlencode


def filter_params(ratings: Sequence[int]) -> list[tuple[str, int]]:
    return [("rating", rating) for rating in ratings]


def page_query(ratings: Sequence[int], number: int, *, path: str = "") -> str:
    """Page `number` of a filter, relative to the product page: "?rating=3&rating=5&page=4"; page 1
    of no filter is the bare product URL (`path`)."""
    params = filter_params(ratings) + ([("page", number)] if number > 1 else [])
    return f"?{urlencode(params)}" if params else path


def cursor_query(ratings: Sequence[int], cursor: str) -> str:
    return f"?{urlencode(filter_params(ratings) + [('cursor', cursor)])}"
