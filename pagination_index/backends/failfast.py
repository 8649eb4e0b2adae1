"""FailFastIndex: a wrapper backend, the index as request handling uses it (`pagination_index.index`).

Once a call fails with IndexUnavailable, every call fails at once for
PAGINATION_INDEX["FAIL_FAST_SECONDS"] instead of each waiting out its own timeouts (a page
makes several calls), so a dead or frozen store is a quick 503 and no worker thread queues behind it;
unless the wrapped backend declares partial_failures (one lost part must not take the others' pages
down). Commands and the stream consumer use the wrapped backend itself (get_index()): they wait.
"""
from __future__ import annotations

import inspect
import time

from pagination_index.conf import index_settings

from pagination_index.backends.base import BaseIndex, IndexUnavailable


class FailFastIndex(BaseIndex):
    """OPTIONS: INDEX, the alias of the index it wraps (in pagination_index.indexes)."""

    def __init__(self, options=None):
        super().__init__(options)
        self.alias = self.options["INDEX"]
        self._failed_at = float("-inf")

    @property
    def wrapped(self) -> BaseIndex:
        from pagination_index import indexes

        return indexes[self.alias]

    @property
    def database_alias(self) -> str | None:
        return self.wrapped.database_alias

    @property
    def partial_failures(self) -> bool:
        return self.wrapped.partial_failures

    def _call(self, name: str, args, kwargs):
        wrapped = self.wrapped
        if (time.monotonic() - self._failed_at < index_settings.FAIL_FAST_SECONDS
                and not wrapped.partial_failures):
            raise IndexUnavailable("the pagination index failed moments ago (failing fast)")
        try:
            return getattr(wrapped, name)(*args, **kwargs)
        except IndexUnavailable:
            self._failed_at = time.monotonic()
            raise

    def __getattr__(self, name):
        """What one backend offers beyond BaseIndex (the DynamoDB backend's table name)."""
        if name.startswith("_") or name in ("alias", "options"):
            raise AttributeError(name)  # not made yet (copy, pickle): never ask the wrapped index
        return getattr(self.wrapped, name)

    def close(self) -> None:
        """The wrapped index is closed under its own alias."""

    def __repr__(self):
        return f"<fail-fast {self.wrapped!r}>"


def _guarded(name: str):
    def method(self, *args, **kwargs):
        return self._call(name, args, kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = getattr(BaseIndex, name).__doc__
    return method


for _name, _method in list(vars(BaseIndex).items()):
    if inspect.isfunction(_method) and not _name.startswith("_") and _name not in vars(FailFastIndex):
        setattr(FailFastIndex, _name, _guarded(_name))
