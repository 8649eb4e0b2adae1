"""Groups that may have lost stream records (TrimmedDataAccessException and the like).

The marks are rows (in the database that holds the checkpoints), so they outlive the process that
found the loss: verify_index fails while a
checked group (or "*", any group) is marked, and rebuild_index clears the marks of what it rebuilt.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Iterable

from django.db import transaction
from django.utils import timezone

from pagination_index.models import StaleGroup

logger = logging.getLogger(__name__)


def stale_groups_mark(*, groups: Iterable[str], reason: str, using: str) -> list[str]:
    """Mark `groups` as needing a rebuild; ["*"] (StaleGroup.ALL) marks every group in one row."""
    names = sorted(set(groups))
    now = timezone.now()
    with transaction.atomic(using=using):
        for name in names:
            StaleGroup.objects.using(using).update_or_create(group=name, defaults={"reason": reason, "detected_at": now})
    logger.error("STREAM RECORDS LOST: %s; groups needing `rebuild_index`: %s", reason, ", ".join(names))
    return names


def stale_groups_clear(*, groups: Iterable[str] | None, before: datetime, using: str) -> int:
    """Clear the marks a rebuild that started at `before` made good (None: a full rebuild, all)."""
    marks = StaleGroup.objects.using(using).filter(detected_at__lt=before)
    if groups is not None:
        marks = marks.filter(group__in=list(groups))
    return marks.delete()[0]


def stale_groups(groups: Iterable[str] | None = None, *, using: str) -> dict[str, str]:
    """Marks that concern `groups` (None: every mark), including "*"; name -> reason."""
    marks = StaleGroup.objects.using(using).all()
    if groups is not None:
        marks = marks.filter(group__in=[*groups, StaleGroup.ALL])
    return dict(marks.order_by("group").values_list("group", "reason"))
