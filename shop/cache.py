"""Django's cache on Redis (CACHE_BACKEND=redis), shared by every web process: an optimisation the
pages never depend on.

Whatever django-redis calls a lost connection (refused, timed out, a Sentinel naming no primary in
the middle of a failover, a former primary turned read-only replica: its ConnectionInterrupted) is
answered as an empty cache would answer: a read misses, a write is dropped (django-redis's own
IGNORE_EXCEPTIONS). A page then costs what it costs with the caches off, instead of the 500 that
reached visitors before. After such a failure no thread of the process asks Redis again for
FAIL_FAST_SECONDS; then one call PINGs it while the others still answer at once (the Breaker the
index's FailFastIndex uses too), so a host that drops packets holds one thread per window, not every
call of every thread (a page makes five or six), and no worker queues behind it.

What an unreachable cache costs, besides the time: Django's cache is where the post and admin-login
limits count (comments.throttle), so they allow everything until it answers again; and a post's
invalidation that could not reach it leaves the shared windows of that product to expire by their
own CACHE_SECONDS (docs/reliability.md, "The cache's Redis unreachable").
"""
from __future__ import annotations

import logging
import sys
import threading

from django_redis.cache import RedisCache
from django_redis.exceptions import ConnectionInterrupted
from redis.exceptions import RedisError

from pagination_index import Breaker

logger = logging.getLogger(__name__)


class FailingFast(ConnectionInterrupted):
    """Raised instead of asking Redis while the fail-fast window lasts."""

    def __str__(self) -> str:
        return "the cache's Redis failed moments ago (failing fast)"


_BREAKERS: dict[str, Breaker] = {}
_BREAKERS_LOCK = threading.Lock()


def breaker_of(server: str, seconds: float) -> Breaker:
    with _BREAKERS_LOCK:
        return _BREAKERS.setdefault(server, Breaker(seconds))


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
        self.cache.breaker.failed()
        logger.warning("Django's cache is unreachable (%s): answering as an empty cache for %.1f s",
                       error.__cause__ or error, self.cache.breaker.seconds)


class SharedRedisCache(RedisCache):
    """django-redis's RedisCache with IGNORE_EXCEPTIONS on and a fail-fast window (module docstring).

    OPTIONS: django-redis's, plus FAIL_FAST_SECONDS (default 2; 0 asks Redis on every call)."""

    def __init__(self, server, params):
        options = dict(params.get("OPTIONS", {}))
        seconds = float(options.pop("FAIL_FAST_SECONDS", 2))
        options["IGNORE_EXCEPTIONS"] = True
        super().__init__(server, {**params, "OPTIONS": options})
        self._log_ignored_exceptions = True
        self.logger = _Failures(self)
        # One per Redis (its Sentinels' addresses too: a redis+sentinel LOCATION names only a service).
        where = f"{server} {options.get('SENTINELS', '')}"
        self.breaker = breaker_of(where, seconds)

    @property
    def client(self):
        verdict = self.breaker.ask()
        if verdict == "skip":
            raise FailingFast(connection=None)
        client = super().client
        if verdict == "probe":
            try:
                client.get_client(write=True).ping()
            except (RedisError, OSError) as exc:
                raise ConnectionInterrupted(connection=None) from exc  # the hook above reopens the window
            except BaseException:
                self.breaker.abandon()  # never left half-open
                raise
            self.breaker.answered()
        return client
