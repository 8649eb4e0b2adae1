"""A pluggable rank -> key index, loaded like Django's cache backends.

    from pagination_index import index
    index.at("SKU-1", 219)

`index` is a lazy proxy to the backend named by settings.PAGINATION_INDEX["BACKEND"]; `get_source()`
gives the table the index mirrors, named by settings.PAGINATION_INDEX_SOURCE.
"""
from __future__ import annotations

import threading
import time

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from metrics import instrument_index
from pagination_index.backends.base import Add, BaseIndex, Entry, IndexUnavailable, InvalidIndexBackendError, Op, Remove
from pagination_index.progress import Progress
from pagination_index.sortkeys import SORT_KEY_FORMAT, micros_sort_key, sort_key_micros
from pagination_index.sources import BaseSource, InvalidSourceError, NoStream, SourceUnavailable

__all__ = [
    "Add", "Entry", "Op", "Progress", "Remove", "SORT_KEY_FORMAT",
    "BaseIndex", "BaseSource", "IndexUnavailable", "InvalidIndexBackendError", "InvalidSourceError", "NoStream", "SourceUnavailable",
    "get_index", "get_source", "index", "load_backend", "load_source", "micros_sort_key", "reset_index",
    "sort_key_micros",
]

_lock = threading.Lock()
_loaded: dict[str, object] = {}  # setting name -> the object it configures, made on first use


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


def _configured(setting: str, load):
    """One object per setting for the whole process, made under a lock on first use."""
    found = _loaded.get(setting)
    if found is None:
        with _lock:
            found = _loaded.get(setting)
            if found is None:
                found = _loaded[setting] = load(getattr(settings, setting))
    return found


def get_index() -> BaseIndex:
    return _configured("PAGINATION_INDEX", load_backend)


def get_source() -> BaseSource:
    return _configured("PAGINATION_INDEX_SOURCE", load_source)


def reset_index() -> None:
    index._failed_at = float("-inf")
    with _lock:
        backend = _loaded.pop("PAGINATION_INDEX", None)
        _loaded.clear()
    if backend is not None:
        backend.close()


def _on_setting_changed(*, setting, **kwargs):
    if setting in {"PAGINATION_INDEX", "PAGINATION_INDEX_SOURCE", "CACHES", "DATABASES"}:
        reset_index()


setting_changed.connect(_on_setting_changed)


class _IndexProxy:
    """The index as request handling uses it. Once a call fails with IndexUnavailable, every call
    fails at once for settings.PAGINATION_INDEX_FAIL_FAST_SECONDS instead of each waiting out its
    own timeouts (a page makes several calls), so a dead or frozen store is a quick 503 and no
    worker thread queues behind it; unless the backend declares partial_failures (one lost part
    must not take the others' pages down). Commands and the stream consumer use get_index(): they wait."""

    def __init__(self):
        self._failed_at = float("-inf")

    def __getattr__(self, name):
        attribute = getattr(get_index(), name)
        if not callable(attribute):
            return attribute

        def call(*args, **kwargs):
            if (time.monotonic() - self._failed_at < settings.PAGINATION_INDEX_FAIL_FAST_SECONDS
                    and not get_index().partial_failures):
                raise IndexUnavailable("the pagination index failed moments ago (failing fast)")
            try:
                return attribute(*args, **kwargs)
            except IndexUnavailable:
                self._failed_at = time.monotonic()
                raise

        return call

    def __repr__(self):
        return f"<pagination index {settings.PAGINATION_INDEX.get('BACKEND')}>"


index = _IndexProxy()
