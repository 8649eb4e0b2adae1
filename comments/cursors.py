"""Cursors: a Position (pagination_index.sequence) carried in a URL, compact and signed.

The payload is a JSON list, no attribute names: [format, ratings, offset, starts], where ratings is
the filter as digits ("35"; "" for none), starts has one item per group in filter order, 0 for "from
its top" or [SK as integer microseconds since the epoch, skip] (the group resumes after its `skip`-th
entry with that SK: tie-safe, and all a source's read() needs). django.core.signing zlib-compresses it
when that is shorter, encodes it base64url and appends an HMAC signature, salted per product so a
cursor only opens pages of the product it came from. A forged, truncated or stale-format cursor is
an InvalidCursor (a 400), never a 500.
"""
from __future__ import annotations

import zlib
from typing import Sequence

from django.core import signing

from comments.table.keys import rating_group
from pagination_index.sequence import Position
from pagination_index.sortkeys import micros_sort_key, sort_key_micros

FORMAT = 1
SALT = "comments.cursor.v1"
MAX_CURSOR_LENGTH = 2000
# SKs a cursor may name: years 1970..9999.
MAX_MICROS = sort_key_micros("9999-12-31T00:00:00.000000Z")


class InvalidCursor(ValueError):
    """The cursor was not made by this site for this product and filter, or is in an old format."""


def groups_for(sku: str, ratings: Sequence[int]) -> list[str]:
    """The index groups of a filter, in the order a cursor lists their starts."""
    return [rating_group(sku, rating) for rating in ratings] if ratings else [sku]


def _signer(sku: str) -> signing.Signer:
    return signing.Signer(salt=f"{SALT}:{sku}")


def encode(sku: str, ratings: Sequence[int], position: Position) -> str:
    starts = []
    for group in groups_for(sku, ratings):
        start = position.starts[group]
        starts.append(0 if start is None else [sort_key_micros(start[0]), start[1]])
    payload = [FORMAT, "".join(map(str, ratings)), position.offset, starts]
    return _signer(sku).sign_object(payload, compress=True)


def decode(cursor: str, sku: str, ratings: Sequence[int]) -> Position:
    """The Position a cursor carries; InvalidCursor unless it is intact, current and for this
    product and filter."""
    if not cursor or len(cursor) > MAX_CURSOR_LENGTH:
        raise InvalidCursor("That cursor is empty or too long.")
    try:
        payload = _signer(sku).unsign_object(cursor)
    except (signing.BadSignature, ValueError, UnicodeError, zlib.error) as exc:
        raise InvalidCursor("That cursor is not valid.") from exc
    try:
        version, filter_digits, offset, starts = payload
    except (TypeError, ValueError):
        raise InvalidCursor("That cursor is not valid.") from None
    if version != FORMAT:
        raise InvalidCursor("That cursor is from an older version of the site; start again from the first page.")
    groups = groups_for(sku, ratings)
    if filter_digits != "".join(map(str, ratings)) or not isinstance(starts, list) or len(starts) != len(groups):
        raise InvalidCursor("That cursor belongs to another rating filter.")
    if not _natural(offset):
        raise InvalidCursor("That cursor is not valid.")
    return Position(offset, {group: _start(item) for group, item in zip(groups, starts)})


def _natural(value) -> bool:
    return type(value) is int and value >= 0


def _start(item):
    if item == 0 and type(item) is int:
        return None
    if (isinstance(item, list) and len(item) == 2 and _natural(item[0]) and item[0] <= MAX_MICROS
            and _natural(item[1]) and item[1] >= 1):
        return micros_sort_key(item[0]), item[1]
    raise InvalidCursor("That cursor is not valid.")
