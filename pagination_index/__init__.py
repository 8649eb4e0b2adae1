"""A pluggable rank -> key index, loaded like Django's cache backends.

    from pagination_index import index
    index.at("SKU-1", 219)

`indexes` is the handler (django.utils.connection.BaseConnectionHandler, as `caches` is): the alias
"default" is the backend settings.PAGINATION_INDEX names, and "pages" that backend behind the
fail-fast wrapper (backends/failfast.py). `index` is a proxy to "pages", for request handling;
`get_index()` gives "default", for commands and the stream consumer, which wait out a slow store.
`get_source()` gives the table the index mirrors, named by settings.PAGINATION_INDEX_SOURCE.
"""
from __future__ import annotations

import threading

from django.utils.connection import BaseConnectionHandler, ConnectionProxy
from django.utils.module_loading import import_string

from metrics import instrument_index
from pagination_index.backends.base import Add, BaseIndex, Entry, IndexUnavailable, InvalidIndexBackendError, Op, Remove
from pagination_index.capacity import ReadBudget
from pagination_index.progress import Progress
from pagination_index.sortkeys import SORT_KEY_FORMAT, micros_sort_key, sort_key_micros
from pagination_index.sources import BaseSource, InvalidSourceError, NoStream, SourceUnavailable

__all__ = [
    "Add", "Entry", "Op", "Progress", "ReadBudget", "Remove", "SORT_KEY_FORMAT",
    "BaseIndex", "BaseSource", "IndexUnavailable", "InvalidIndexBackendError", "InvalidSourceError", "NoStream", "SourceUnavailable",
    "get_index", "get_source", "index", "indexes", "load_backend", "load_source", "micros_sort_key", "reset_index",
    "sort_key_micros", "sources",
]

DEFAULT_ALIAS = "default"
PAGES_ALIAS = "pages"


def _load(config: dict, base: type, error: type, what: str):
    path = config.get("BACKEND", "")
    try:
        loaded = import_string(path)
    except ImportError as exc:
        raise error(f"Could not find {what} {path!r}: {exc}") from exc
    if not (isinstance(loaded, type) and issubclass(loaded, base)):
        raise error(f"{what.capitalize()} {path!r} is not a subclass of {base.__name__}")
    return loaded(config.get("OPTIONS") or {})


def load_backend(config: dict) -> BaseIndex:
    return instrument_index(_load(config, BaseIndex, InvalidIndexBackendError, "pagination index backend"))


def load_source(config: dict) -> BaseSource:
    return _load(config, BaseSource, InvalidSourceError, "pagination index source")


class _Made:
    """The objects a handler made, by alias, shared by every thread."""


class _Handler(BaseConnectionHandler):
    """One object per alias for the whole process, not per thread as Django's caches: backends are
    thread-safe and hold connection pools and read caches worth sharing. Django closes its database
    connections itself at the end of a request; the backends' own pools outlive requests, as
    django-redis's do, so nothing is closed on request_finished."""

    load = None

    def __init__(self, settings=None):
        super().__init__(settings)
        self._connections = _Made()
        self._lock = threading.RLock()  # a backend made under it may ask for another alias

    def __getitem__(self, alias):
        try:
            return getattr(self._connections, alias)
        except AttributeError:
            with self._lock:  # made once, even when threads ask together
                return super().__getitem__(alias)

    def create_connection(self, alias):
        return type(self).load(self.settings[alias])

    def reset(self) -> None:
        """Close what was made and read the settings again on next use (tests, settings changes)."""
        with self._lock:
            made = self.all(initialized_only=True)
            self._connections = _Made()
            self.__dict__.pop("settings", None)
            self._settings = None
        for made_one in made:
            made_one.close()


class IndexHandler(_Handler):
    settings_name = "PAGINATION_INDEX"
    exception_class = InvalidIndexBackendError
    load = staticmethod(load_backend)

    def configure_settings(self, settings):
        return {
            DEFAULT_ALIAS: super().configure_settings(settings),
            PAGES_ALIAS: {"BACKEND": "pagination_index.backends.failfast.FailFastIndex", "OPTIONS": {"INDEX": DEFAULT_ALIAS}},
        }


class SourceHandler(_Handler):
    settings_name = "PAGINATION_INDEX_SOURCE"
    exception_class = InvalidSourceError
    load = staticmethod(load_source)

    def configure_settings(self, settings):
        return {DEFAULT_ALIAS: super().configure_settings(settings)}


indexes = IndexHandler()
sources = SourceHandler()
index = ConnectionProxy(indexes, PAGES_ALIAS)


def get_index() -> BaseIndex:
    return indexes[DEFAULT_ALIAS]


def get_source() -> BaseSource:
    return sources[DEFAULT_ALIAS]


def reset_index() -> None:
    """Forget the loaded index and source (and the fail-fast state with them): the next use loads
    them from the settings as they are then. Tests call it; production code never needs to."""
    indexes.reset()
    sources.reset()
