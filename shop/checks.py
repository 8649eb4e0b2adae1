"""The shop's system checks for production (`manage.py check --deploy`)."""
from django.conf import settings
from django.core import checks

from shop.site_keys import missing_keys, missing_message

PER_PROCESS_CACHES = ("django.core.cache.backends.locmem.LocMemCache", "django.core.cache.backends.dummy.DummyCache")


@checks.register(checks.Tags.security, deploy=True)
def check_web_keys(app_configs, **kwargs):
    missing = missing_keys()
    return [checks.Error(missing_message(missing), id="shop.E001")] if missing else []


@checks.register(checks.Tags.caches, deploy=True)
def check_shared_cache(app_configs, **kwargs):
    """Rate limits, the fast windows and moderation's invalidations live in the default cache: per
    process, a limit is multiplied by every worker and host, and a removed comment stays in other
    workers' windows until they expire."""
    if settings.CACHES["default"]["BACKEND"] not in PER_PROCESS_CACHES:
        return []
    return [checks.Warning(
        "The default cache is per process: post and report limits count per worker, and a moderated "
        "comment stays in other workers' cached pages until they expire.",
        hint="Set CACHE_BACKEND=redis (and REDIS_URL) in production (docs/operations.md).", id="shop.W001")]
