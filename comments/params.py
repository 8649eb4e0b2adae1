"""The query string of product pages and the API: page numbers and rating filters, accepted only in
their one normal form, so every page has exactly one URL."""
from __future__ import annotations

import re

from django.core.paginator import PageNotAnInteger

from comments.table.keys import RATINGS

# A page number is a plain positive integer: no sign, no leading zero, no exponent, at most 10 digits.
PAGE_NUMBER = re.compile(r"[1-9][0-9]{0,9}")
RATING_VALUES = {str(rating): rating for rating in RATINGS}


class InvalidFilter(ValueError):
    """A `rating` filter that is not a sorted list of distinct ratings 1..5 (a 404: no such page)."""


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
