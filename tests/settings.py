"""Settings for the test suite: shop.settings as production runs it (DEBUG off), with a test-only
secret key and plain static file storage, so pages render without running collectstatic first."""
import os

os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-not-secret-5b2f7c0e9a1d4e6b8c3f2a7d1e0b9c8a")
os.environ.setdefault("DJANGO_STATICFILES_STORAGE", "django.contrib.staticfiles.storage.StaticFilesStorage")

from shop.settings import *  # noqa: E402,F401,F403

# WhiteNoise serves straight from the apps' static folders; there is no collected STATIC_ROOT here.
STATIC_ROOT = None
WHITENOISE_USE_FINDERS = True

# Tests read pages right after changing data: the one-second micro-cache would show them the page
# from before. tests/shop/test_micro_cache.py turns it on.
RESPONSE_MICRO_CACHE_SECONDS = 0

# DynamoDB Local updates its GSIs with the table write, and the tests drive the consumers
# themselves: a rebuild need not wait for writes in flight (tests/pagination_index covers fences).
PAGINATION_INDEX["REBUILD"] = {"SETTLE_SECONDS": 0}  # noqa: F405
# The site's own endpoint when a test sets none: nothing listens there, so a test that forgot to ask for
# DynamoDB Local fails at once instead of reaching AWS.
PAGINATION_INDEX["AWS"]["ENDPOINT_URL"] = PAGINATION_INDEX["AWS"]["ENDPOINT_URL"] or "http://127.0.0.1:9"  # noqa: F405
