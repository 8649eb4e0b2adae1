"""System checks for PAGINATION_INDEX and PAGINATION_INDEX_SOURCE, reported by `manage.py check`
instead of crashing at import."""
from django.conf import settings
from django.core.checks import Error, Tags, register

from pagination_index import InvalidIndexBackendError, InvalidSourceError, load_backend, load_source
from pagination_index.backends.redis import RedisIndex, redis_database


def _check_dotted(setting: str, load, invalid: type, ids: tuple[str, str, str, str], hint: str) -> list[Error]:
    """A {"BACKEND": dotted path, "OPTIONS": {...}} setting whose class loads and accepts its OPTIONS.
    ids: no BACKEND, OPTIONS not a dict, not found or of the wrong class, rejected its OPTIONS."""
    config = getattr(settings, setting, None)
    if not isinstance(config, dict) or not config.get("BACKEND"):
        return [Error(f"{setting} must be a dict with a 'BACKEND' dotted path.", hint=hint, id=ids[0])]
    if not isinstance(config.get("OPTIONS", {}), dict):
        return [Error(f"{setting}['OPTIONS'] must be a dict.", id=ids[1])]
    try:
        loaded = load(config)
    except invalid as exc:
        return [Error(str(exc), hint=hint, id=ids[2])]
    except Exception as exc:  # a class whose constructor rejects its OPTIONS
        return [Error(f"{setting}: {config['BACKEND']} could not be created: {exc}", id=ids[3])]
    close = getattr(loaded, "close", None)
    if close:
        close()
    return []


@register(Tags.caches)
def check_pagination_index(app_configs, **kwargs):
    known = ", ".join(sorted(getattr(settings, "PAGINATION_INDEX_BACKENDS", {})))
    return _check_dotted("PAGINATION_INDEX", load_backend, InvalidIndexBackendError,
                         ("pagination_index.E001", "pagination_index.E002", "pagination_index.E003",
                          "pagination_index.E004"),
                         f"Set PAGINATION_INDEX_BACKEND to one of {known}, or a dotted path to a BaseIndex subclass.")


@register(Tags.caches)
def check_pagination_index_source(app_configs, **kwargs):
    return _check_dotted("PAGINATION_INDEX_SOURCE", load_source, InvalidSourceError,
                         ("pagination_index.E005", "pagination_index.E006", "pagination_index.E007",
                          "pagination_index.E008"),
                         "Set PAGINATION_INDEX_SOURCE to a dotted path to a BaseSource subclass (the comments "
                         "table's is comments.table.source.CommentsTableSource).")


def _cache_locations(cache: dict) -> list[str]:
    location = cache.get("LOCATION") or []
    return location.split(",") if isinstance(location, str) else list(location)


@register(Tags.caches)
def check_index_apart_from_caches(app_configs, **kwargs):
    """A Redis cache's clear() is FLUSHDB: no cache may live in the Redis index's database."""
    config = getattr(settings, "PAGINATION_INDEX", None)
    if not isinstance(config, dict) or config.get("BACKEND") != f"{RedisIndex.__module__}.{RedisIndex.__qualname__}":
        return []
    location = (config.get("OPTIONS") or {}).get("LOCATION")
    if not location:
        return []
    index_database = redis_database(location)
    errors = []
    for alias, cache in settings.CACHES.items():
        if "redis" not in cache.get("BACKEND", "").lower():
            continue
        if any(redis_database(url.strip()) == index_database for url in _cache_locations(cache)):
            errors.append(Error(
                f"The cache {alias!r} uses the Redis database of the pagination index ({location}): "
                "its clear() would delete the whole index.",
                hint="Give the index a database of its own: PAGINATION_INDEX_REDIS_URL=redis://HOST:6379/1 "
                     "(another database number, or another Redis) apart from REDIS_URL.",
                id="pagination_index.E009",
            ))
    return errors
