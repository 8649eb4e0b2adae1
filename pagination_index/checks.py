"""System checks for settings.PAGINATION_INDEX, reported by `manage.py check` (and before every
command) instead of crashing at import. Ids are stable: docs/library/configuration.md lists them."""
from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register

from pagination_index.conf import DEFAULTS, SECTIONS, SETTING, SOURCE_DEFAULTS

REDIS_BACKEND = "pagination_index.backends.redis.RedisIndex"


def _unknown(given: dict, known: dict, where: str, check_id: str) -> list[Error]:
    extra = sorted(set(given) - set(known))
    if not extra:
        return []
    return [Error(f"{where} has unknown key(s): {', '.join(extra)}.",
                  hint=f"Known keys: {', '.join(sorted(known))}.", id=check_id)]


@register(Tags.compatibility)
def check_settings(app_configs, **kwargs):
    config = getattr(settings, SETTING, {})
    if not isinstance(config, dict):
        return [Error(f"{SETTING} must be a dict.", id="pagination_index.E001")]
    errors = _unknown(config, DEFAULTS, SETTING, "pagination_index.E002")
    for section in SECTIONS:
        value = config.get(section, {})
        if not isinstance(value, dict):
            errors.append(Error(f"{SETTING}['{section}'] must be a dict.", id="pagination_index.E002"))
        else:
            errors += _unknown(value, DEFAULTS[section], f"{SETTING}['{section}']", "pagination_index.E002")
    if not isinstance(config.get("OPTIONS", {}), dict):
        errors.append(Error(f"{SETTING}['OPTIONS'] must be a dict.", id="pagination_index.E002"))
    return errors


@register(Tags.compatibility)
def check_backend(app_configs, **kwargs):
    from pagination_index import InvalidIndexBackendError, index_settings, load_backend

    path = index_settings.BACKEND
    try:
        backend = load_backend({"BACKEND": path, "OPTIONS": index_settings.OPTIONS})
    except InvalidIndexBackendError as exc:
        return [Error(str(exc), hint="BACKEND is a dotted path to a BaseIndex subclass, e.g. "
                      "pagination_index.backends.relational.RelationalIndex.", id="pagination_index.E003")]
    except Exception as exc:  # a backend whose constructor rejects its OPTIONS, or a missing client library
        return [Error(f"{SETTING}: {path} could not be created: {exc}",
                      hint="Check its OPTIONS, and that its extra is installed "
                           "(pip install 'django-pagination-index[redis]', ...).", id="pagination_index.E004")]
    try:
        return _check_sources(backend)
    finally:
        backend.close()


def _check_sources(backend) -> list:
    from pagination_index.sources import BaseSource, InvalidSourceError, load_source

    declared = getattr(settings, SETTING, {}).get("SOURCES", {}) if isinstance(getattr(settings, SETTING, {}), dict) else {}
    if not isinstance(declared, dict):
        return [Error(f"{SETTING}['SOURCES'] must be a dict of source name -> settings.", id="pagination_index.E005")]
    if not declared:
        return [Warning(f"{SETTING}['SOURCES'] declares no source: query(), sync_index and rebuild_index have "
                        "nothing to read.", hint="Declare a table: {'events': {'TABLE': ..., 'GROUP_KEY': ..., "
                        "'SORT_KEY': ...}}.", id="pagination_index.W001")]
    errors, made = [], []
    for name, config in declared.items():
        if isinstance(config, dict):
            errors += _unknown(config, SOURCE_DEFAULTS, f"{SETTING}['SOURCES'][{name!r}]", "pagination_index.E005")
        try:
            made.append(load_source(name, config))
        except InvalidSourceError as exc:
            errors.append(Error(str(exc), id="pagination_index.E006"))
    sort_keys = getattr(backend, "sort_keys", None)
    for source in made:
        wanted = {"iso8601": "S", "integer": "N"}.get(sort_keys)
        declared_type = getattr(source, "_sort_type", None)
        if wanted and declared_type and declared_type != wanted:
            errors.append(Error(
                f"source {source.name!r} has {declared_type} sort keys, but {type(backend).__name__} is set to "
                f"store {sort_keys!r} sort keys.",
                hint="Set the backend's OPTIONS['SORT_KEYS'] to 'integer' for number sort keys or 'iso8601' for "
                     "ISO-8601 timestamps with microseconds; other text sort keys need the relational or DynamoDB "
                     "backend.", id="pagination_index.E007"))
    for first, second in _pairs(made):
        if first.group_prefix == second.group_prefix and (
                type(first).owns is BaseSource.owns and type(second).owns is BaseSource.owns):
            errors.append(Error(
                f"sources {first.name!r} and {second.name!r} share the group prefix {first.group_prefix!r}: "
                "rebuild and verify could not tell their groups apart.",
                hint="Give each its own GROUP_PREFIX, or a CLASS (a TableSource subclass) whose owns() tells "
                     "their groups apart.", id="pagination_index.E008"))
    return errors


def _pairs(items):
    for n, first in enumerate(items):
        for second in items[n + 1:]:
            yield first, second


def _cache_locations(cache: dict) -> list[str]:
    location = cache.get("LOCATION") or []
    return location.split(",") if isinstance(location, str) else list(location)


@register(Tags.compatibility)
def check_index_apart_from_caches(app_configs, **kwargs):
    """A Redis cache's clear() is FLUSHDB: no cache may live in the Redis index's database."""
    from pagination_index import index_settings

    if index_settings.BACKEND != REDIS_BACKEND:
        return []
    location = (index_settings.OPTIONS or {}).get("LOCATION")
    if not location:
        return []
    from pagination_index.backends.redis import redis_database

    index_database = redis_database(location)
    errors = []
    for alias, cache in settings.CACHES.items():
        if "redis" not in cache.get("BACKEND", "").lower():
            continue
        if any(redis_database(url.strip()) == index_database for url in _cache_locations(cache)):
            errors.append(Error(
                f"The cache {alias!r} uses the Redis database of the pagination index ({location}): "
                "its clear() would delete the whole index.",
                hint="Give the index a database of its own (another database number, or another Redis) "
                     "in PAGINATION_INDEX['OPTIONS']['LOCATION'].",
                id="pagination_index.E009",
            ))
    return errors
