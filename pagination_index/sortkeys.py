"""Sort keys as the compact backends store them: integer microseconds since the epoch.

Every sort key is text that orders as its moment does: ISO-8601 UTC with microseconds,
"2021-08-25T13:00:00.123456Z". Backends that pack keys into numbers (Redis scores, fixed-size
records) and signed cursors convert with these two functions, which are exact inverses.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

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
