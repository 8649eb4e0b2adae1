"""Sort keys as the compact backends store them: integer microseconds since the epoch.

Every sort key is text that orders as its moment does: ISO-8601 UTC with microseconds,
"2021-08-25T13:00:00.123456Z". Backends that pack keys into numbers (Redis scores, fixed-size
records) and signed cursors convert with these two functions, which are exact inverses.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from decimal import Decimal

SORT_KEY_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_SORT_KEY = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{6})Z")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def sort_key_micros(sort_key: str) -> int:
    """'2021-08-25T13:00:00.123456Z' -> microseconds since the epoch (ValueError if not that form)."""
    match = _SORT_KEY.fullmatch(sort_key)
    if not match:
        raise ValueError(f"sort key {sort_key!r} is not of the form YYYY-MM-DDTHH:MM:SS.ffffffZ")
    return (datetime(*map(int, match.groups()), tzinfo=timezone.utc) - _EPOCH) // _MICROSECOND


def micros_sort_key(micros: int | float) -> str:
    """The exact sort key back from sort_key_micros' number (OverflowError outside years 1..9999)."""
    moment = _EPOCH + timedelta(microseconds=int(micros))
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T{moment.hour:02d}:{moment.minute:02d}:"
        f"{moment.second:02d}.{moment.microsecond:06d}Z"
    )


# --- Numbers as text that sorts as they do -------------------------------------------------------
# DynamoDB's N holds up to 38 significant digits, magnitudes 1E-130 to 9.9999999999999999999999999999999999999E+125.
# The index keeps every sort key as text compared by code point (= UTF-8 bytes), so a number is
# written as: a sign class ("0" negative, "1" zero, "2" positive), then for non-zero numbers the
# decimal exponent of the first significant digit (0.d1d2... x 10^E) offset to three digits (inverted
# for negatives), then the significant digits (each complemented to 9-d for negatives, and closed by
# "~", which sorts after every digit, so that a negative's shorter digit string sorts last).
_EXPONENT_OFFSET = 500


def number_key(value: str | int | Decimal) -> str:
    """A DynamoDB number as index text: number_key(a) < number_key(b) exactly when a < b."""
    number = Decimal(value)
    if not number.is_finite():
        raise ValueError(f"{value!r} is not a finite number")
    if number == 0:
        return "1"
    sign, digits, exponent = number.as_tuple()
    text = "".join(map(str, digits)).rstrip("0")
    first = len(digits) + exponent  # 0.d1d2... x 10^first
    if not sign:
        return f"2{first + _EXPONENT_OFFSET:03d}{text}"
    return f"0{999 - (first + _EXPONENT_OFFSET):03d}{''.join(str(9 - int(d)) for d in text)}~"


def key_number(key: str) -> Decimal:
    """number_key's number back (ValueError for text it did not write)."""
    try:
        if key == "1":
            return Decimal(0)
        if key[0] == "2":
            first, digits = int(key[1:4]) - _EXPONENT_OFFSET, key[4:]
            return Decimal(f"0.{digits}E{first}") if digits.isdigit() else _not_a_number_key(key)
        if key[0] == "0" and key.endswith("~"):
            first = 999 - int(key[1:4]) - _EXPONENT_OFFSET
            digits = "".join(str(9 - int(d)) for d in key[4:-1])
            return Decimal(f"-0.{digits}E{first}") if digits else _not_a_number_key(key)
    except (ValueError, IndexError, ArithmeticError):
        pass
    return _not_a_number_key(key)


def _not_a_number_key(key: str):
    raise ValueError(f"{key!r} is not a number written by number_key()")


def canonical_number(value: str | int | Decimal) -> str:
    """The shortest plain text of a DynamoDB number (its value as a group name or member): "1.50" and
    "15E-1" are both "1.5"."""
    number = Decimal(value).normalize()
    return f"{number:f}" if number else "0"


# --- What the compact backends store: an integer per sort key ------------------------------------
# The Redis and files backends store a sort key as an integer (a Redis score, 8 bytes on disk). The
# text of the key says how: ISO-8601 timestamps with microseconds (SORT_KEYS="iso8601", their
# default: the comments table's) become microseconds since the epoch; numbers written by number_key()
# (SORT_KEYS="integer") must be whole and within what the store holds exactly.
SORT_KEY_FORMATS = ("iso8601", "integer")


def key_to_int(key: str, sort_keys: str) -> int:
    if sort_keys == "iso8601":
        return sort_key_micros(key)
    number = key_number(key)
    if number != number.to_integral_value():
        raise ValueError(f"sort key {number} is not a whole number (SORT_KEYS='integer')")
    return int(number)


def int_to_key(value: int | float, sort_keys: str) -> str:
    if sort_keys == "iso8601":
        return micros_sort_key(value)
    return number_key(int(value))
