"""Numbered pages over DynamoDB: a pluggable rank -> key index per group, kept in step with a table's
stream, and a lazy sequence that Django's Paginator and DRF page unchanged.

    from pagination_index import query
    Paginator(query("events", "alice"), 25).page(292)

`query()` is the read API (pagination_index/sequence.py). Below it, `indexes` is the handler of the
index backend (django.utils.connection.BaseConnectionHandler, as `caches` is): the alias "default" is
the backend settings.PAGINATION_INDEX names, and "pages" that backend behind the fail-fast wrapper
(backends/base.py, FailFastIndex). `index` is a proxy to "pages", for request handling; `get_index()` gives
"default", for commands and the stream consumer, which wait out a slow store. `sources` are the
tables the index mirrors, declared in settings.PAGINATION_INDEX["SOURCES"].
"""
from __future__ import annotations

import threading

from django.utils.connection import BaseConnectionHandler, ConnectionProxy
from django.utils.module_loading import import_string

from pagination_index import signals
from pagination_index.backends.base import (Add, BaseIndex, Breaker, Entry, IndexUnavailable, InvalidIndexBackendError, Op,
                                            Remove)
from pagination_index.capacity import ReadBudget
from pagination_index.conf import index_settings
from pagination_index.sources import (
    BaseSource,
    InvalidSourceError,
    NoStream,
    SourceRegistry,
    SourceUnavailable,
    TableSource,
)

__version__ = "1.0.0"

__all__ = [
    "Add", "Entry", "Op", "ReadBudget", "Remove",
    "BaseIndex", "BaseSource", "Breaker", "IndexUnavailable", "InvalidIndexBackendError", "InvalidSourceError", "NoStream",
    "SourceUnavailable", "TableSource",
    "get_index", "index", "indexes", "invalidate", "load_backend", "query", "reset", "sources",
]

DEFAULT_ALIAS = "default"
PAGES_ALIAS = "pages"


def load_backend(config: dict) -> BaseIndex:
    path = config.get("BACKEND", "")
    try:
        loaded = import_string(path)
    except ImportError as exc:
        raise InvalidIndexBackendError(f"Could not find pagination index backend {path!r}: {exc}") from exc
    if not (isinstance(loaded, type) and issubclass(loaded, BaseIndex)):
        raise InvalidIndexBackendError(f"Pagination index backend {path!r} is not a subclass of BaseIndex")
    made = loaded(config.get("OPTIONS") or {})
    signals.index_loaded.send(sender=loaded, index=made)
    return made


class _Made:
    """The objects a handler made, by alias, shared by every thread."""


class IndexHandler(BaseConnectionHandler):
    """One object per alias for the whole process, not per thread as Django's caches: backends are
    thread-safe and hold connection pools and read caches worth sharing. Django closes its database
    connections itself at the end of a request; the backends' own pools outlive requests, as
    django-redis's do, so nothing is closed on request_finished."""

    settings_name = "PAGINATION_INDEX"
    exception_class = InvalidIndexBackendError

    def __init__(self, settings=None):
        super().__init__(settings)
        self._connections = _Made()
        self._lock = threading.RLock()  # a backend made under it may ask for another alias

    def configure_settings(self, settings):
        return {
            DEFAULT_ALIAS: {"BACKEND": index_settings.BACKEND, "OPTIONS": index_settings.OPTIONS},
            PAGES_ALIAS: {"BACKEND": "pagination_index.backends.base.FailFastIndex", "OPTIONS": {"INDEX": DEFAULT_ALIAS}},
        }

    def __getitem__(self, alias):
        try:
            return getattr(self._connections, alias)
        except AttributeError:
            with self._lock:  # made once, even when threads ask together
                return super().__getitem__(alias)

    def create_connection(self, alias):
        return load_backend(self.settings[alias])

    def reset(self) -> None:
        """Close what was made and read the settings again on next use."""
        with self._lock:
            made = self.all(initialized_only=True)
            self._connections = _Made()
            self.__dict__.pop("settings", None)
            self._settings = None
        for made_one in made:
            made_one.close()


indexes = IndexHandler()
index = ConnectionProxy(indexes, PAGES_ALIAS)
sources = SourceRegistry()


def get_index() -> BaseIndex:
    return indexes[DEFAULT_ALIAS]


def reset() -> None:
    """Forget the loaded index, sources and AWS clients (and the fail-fast state with them): the next
    use makes them from the settings as they are then. Sent on setting_changed (override_settings)."""
    from pagination_index import aws

    indexes.reset()
    sources.reset()
    aws.reset()


from pagination_index.sequence import invalidate, query  # noqa: E402  (the read API: see sequence.py)
