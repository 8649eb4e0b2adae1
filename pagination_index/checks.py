"""System checks for PAGINATION_INDEX, reported by `manage.py check` instead of crashing at import."""
from django.conf import settings
from django.core.checks import Error, Tags, register

from pagination_index import InvalidIndexBackendError, load_backend


@register(Tags.caches)
def check_pagination_index(app_configs, **kwargs):
    config = getattr(settings, "PAGINATION_INDEX", None)
    if not isinstance(config, dict) or not config.get("BACKEND"):
        return [
            Error(
                "PAGINATION_INDEX must be a dict with a 'BACKEND' dotted path.",
                hint="Set PAGINATION_INDEX_BACKEND=relational (or redis), or a dotted path to a BaseIndex subclass.",
                id="pagination_index.E001",
            )
        ]
    if not isinstance(config.get("OPTIONS", {}), dict):
        return [Error("PAGINATION_INDEX['OPTIONS'] must be a dict.", id="pagination_index.E002")]
    try:
        load_backend(config).close()
    except InvalidIndexBackendError as exc:
        return [
            Error(
                str(exc),
                hint="Known backends: " + ", ".join(sorted(getattr(settings, "PAGINATION_INDEX_BACKENDS", {}).values())),
                id="pagination_index.E003",
            )
        ]
    except Exception as exc:  # a backend whose constructor rejects its OPTIONS
        return [Error(f"Pagination index backend could not be created: {exc}", id="pagination_index.E004")]
    return []
