"""The session engine (SESSION_ENGINE): Django's database sessions, except that a session which
cannot be written because the shop's database is unreachable loses this request's changes, with a
warning, instead of failing a response whose work is done.

Django's `db.SessionStore.save()` turns any `DatabaseError` while updating an existing session into
`UpdateError`, which `SessionMiddleware` answers with `SessionInterrupted`, a 400: meant for a row
deleted by a concurrent logout, it also caught a connection lost under a comment post whose comment
DynamoDB had already stored (docs/reliability.md). Here only a failure to reach the database
(`OperationalError`/`InterfaceError`: refused, reset, terminated, locked) is absorbed; a row that
really vanished ("Forced update did not affect any rows", a plain `DatabaseError`) still raises
`UpdateError`, so a session a visitor ended is never written back. Creating a session (no cookie
yet) at the end of a request is absorbed the same way; `create()` called directly (login's
`cycle_key()`) still raises, so a view that needs a new session gets the 503 funnel.

What the shop keeps in sessions is a convenience (the "just posted" pins of comments/recent.py,
flash messages that overflow their cookie): losing one request's changes to it loses nothing the
visitor sent. Reading a session that cannot be read still raises (product pages: the 503 funnel).
"""
from __future__ import annotations

import logging

from django.contrib.sessions.backends import db
from django.contrib.sessions.backends.base import UpdateError
from django.db import InterfaceError, OperationalError

logger = logging.getLogger(__name__)

UNREACHABLE = (OperationalError, InterfaceError)


class SessionStore(db.SessionStore):
    def save(self, must_create=False):
        if must_create:  # create()'s insert: its callers handle (or report) the error
            return super().save(must_create=True)
        try:
            return super().save()
        except UpdateError as exc:
            if not isinstance(exc.__context__, UNREACHABLE):
                raise  # the row is gone (a concurrent logout): Django's SessionInterrupted
            self._not_saved(exc.__context__)
        except UNREACHABLE as exc:  # a new session's insert, or loading it for the update
            self._not_saved(exc)

    def _not_saved(self, exc: Exception) -> None:
        logger.warning("session not saved, its changes in this request are lost: the shop's database is "
                       "unavailable (%s)", type(exc).__name__, exc_info=exc)
