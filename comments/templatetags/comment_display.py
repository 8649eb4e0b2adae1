"""How a comment's rating and date are shown."""
from __future__ import annotations

from datetime import datetime, timezone

from django import template

register = template.Library()


@register.filter
def stars(rating: int) -> str:
    """4 -> "★★★★☆" (decoration: templates give the number as text for screen readers)."""
    rating = max(0, min(int(rating), 5))
    return "★" * rating + "☆" * (5 - rating)


@register.filter
def html_datetime(moment: datetime) -> str:
    """A valid HTML `datetime` value: UTC, milliseconds (HTML allows at most three digits)."""
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
