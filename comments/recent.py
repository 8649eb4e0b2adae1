"""The comments a visitor just posted, kept in their session for a minute.

The product page pins them (selectors.product_comment_page's `pinned`), so the poster sees their
comment on the page they are sent back to even while the GSI, or another process's cached window,
has not caught up. Afterwards the page is the same for everyone.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from django.conf import settings

from comments.store import Comment, parse_sk

SESSION_KEY = "comments_posted"
PIN_FOR = timedelta(seconds=60)
MAX_PINNED = 5


def remember_posted(request, comment: Comment) -> None:
    entries = [entry for entry in _fresh(request) if entry[1] != comment.pk]
    entries.append([comment.sku, comment.pk, comment.sk])
    request.session[SESSION_KEY] = entries[-MAX_PINNED:]


def posted_keys(request, sku: str) -> list[tuple[str, str]]:
    """(PK, SK) of the comments on `sku` this visitor posted in the last minute.

    A visitor without a session cookie has posted nothing: don't touch (and so vary on) the session."""
    if settings.SESSION_COOKIE_NAME not in request.COOKIES or SESSION_KEY not in request.session:
        return []
    entries = _fresh(request)
    if entries != request.session[SESSION_KEY]:
        if entries:
            request.session[SESSION_KEY] = entries
        else:
            del request.session[SESSION_KEY]
    return [(pk, sk) for entry_sku, pk, sk in entries if entry_sku == sku]


def _fresh(request) -> list[list[str]]:
    oldest = datetime.now(timezone.utc) - PIN_FOR
    return [entry for entry in request.session.get(SESSION_KEY, []) if parse_sk(entry[2]) >= oldest]
