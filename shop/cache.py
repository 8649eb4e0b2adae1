"""Django's cache on Redis (CACHE_BACKEND=redis), shared by every web process: an optimisation the
pages never depend on.

Whatever django-redis calls a lost connection (refused, timed out, a Sentinel naming no primary in
the middle of a failover, a former primary turned read-only replica: its ConnectionInterrupted) is
answered as an empty cache would answer: a read misses, a write is dropped (django-redis's own
IGNORE_EXCEPTIONS). A page then costs what it costs with the caches off, instead of the 500 that
reached visitors before. After such a failure this thread's cache does not ask Redis again for
FAIL_FAST_SECONDS, so a host that drops packets costs one connect timeout per thread and window,
not one per cache call (a page makes five or six), and no worker queues behind it: the index's
FailFastIndex does the same for the pagination index.

What an unreachable cache costs, besides the time: Django's cache is where the post and admin-login
limits count (comments.throttle), so they allow everything until it answers again; and a post's
invalidation that could not reach it leaves the shared windows of that product to expire by their
own CACHE_SECONDS (docs/reliability.md, "The cache's Redis unreachable").
"""
from __future__ import annotations

import logging
import sys
import time

from django_redis.cache import RedisCache
from django_redis.exceptions import ConnectionInterrupted

logger = logging.getLogger(__name__)


class FailingFast(ConnectionInterrupted):
    """Raised instead of asking Redis while the fail-fast window lasts."""

    def __str__(self) -> str:
        return "the cache's Redis failed moments ago (failing fast)"


class _Failures:
    """Stands in for the logger django-redis calls, inside its except clause, for every error it
    ignores (the only hook it gives): the failure opens the fail-fast window, and a window is logged
    once, not a stack trace per call."""

    def __init__(self, cache: "SharedRedisCache"):
        self.cache = cache

    def exception(self, message, *args, **kwargs) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, FailingFast):
            return
        from metrics import CACHE_UNAVAILABLE

        CACHE_UNAVAILABLE.inc()
        self.cache.failed_at = time.monotonic()
        logger.warning("Django's cache is unreachable (%s): answering as an empty cache for %.1f s",
                       error.__cause__ or error, self.cache.fail_fast_seconds)


class SharedRedisCache(RedisCache):
    """django-redis's RedisCache with IGNORE_EXCEPTIONS on and a fail-fast window (module docstring).

    OPTIONS: django-redis's, plus FAIL_FAST_SECONDS (default 2; 0 asks Redis on every call)."""

    def __init__(self, server, params):
        options = dict(params.get("OPTIONS", {}))
        self.fail_fast_seconds = float(options.pop("FAIL_FAST_SECONDS", 2))
        options["IGNORE_EXCEPTIONS"] = True
        super().__init__(server, {**params, "OPTIONS": options})
        self._log_ignored_exceptions = True
        self.logger = _Failures(self)
        self.failed_at = float("-inf")

    @property
    def client(self):
        if time.monotonic() - self.failed_at < self.fail_fast_seconds:
            raise FailingFast(connection=None)
        return super().client
