"""A pluggable rank -> key index, loaded like Django's cache backends.

    from pagination_index import index
    index.at("SKU-1", 219)

`index` is a lazy proxy to the backend named by settings.PAGINATION_INDEX["BACKEND"].
"""
from __future__ import annotations

import threading

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from pagination_index.backends.base import BaseIndex, IndexUnavailable, InvalidIndexBackendError

__all__ = ["BaseIndex", "IndexUnavailable", "InvalidIndexBackendError", "get_index", "index", "load_backend"]

_lock = threading.Lock()
_instance: BaseIndex | None = None


def load_backend(config: dict) -> BaseIndex:
    path = config.get("BACKEND", "")
    try:
        backend_cls = import_string(path)
    except ImportError as exc:
        raise InvalidIndexBackendError(f"Could not find pagination index backend {path!r}: {exc}") from exc
    if not (isinstance(backend_cls, type) and issubclass(backend_cls, BaseIndex)):
        raise InvalidIndexBackendError(f"Pagination index backend {path!r} is not a subclass of BaseIndex")
    return backend_cls(config.get("OPTIONS") or {})


def get_index() -> BaseIndex:
    global _instance
    if _instance is None:
        with _lock:
            if _instance is None:
                _instance = load_backend(settings.PAGINATION_INDEX)
    return _instance


def reset_index() -> None:
    global _instance
    with _lock:
        if _instance is not None:
            _instance.close()
        _instance = None


def _on_setting_changed(*, setting, **kwargs):
    if setting in {"PAGINATION_INDEX", "CACHES", "DATABASES"}:
        reset_index()


setting_changed.connect(_on_setting_changed)


class _IndexProxy:
    def __getattr__(self, name):
        return getattr(get_index(), name)

    def __repr__(self):
        return f"<pagination index {settings.PAGINATION_INDEX.get('BACKEND')}>"


index = _IndexProxy()
