"""At most COMMENTS_POSTS_PER_MINUTE accepted comment posts per client per minute, and at most
COMMENTS_PRODUCT_POSTS_PER_MINUTE on one product from everyone, counted in Django's cache. Posts refused
as invalid have a count and a more generous limit of their own (COMMENTS_INVALID_POSTS_PER_MINUTE), so
a person correcting their form is not locked out of posting.

A fixed one-minute window per client (as shop.clients counts it: behind the site's own proxies, IPv6
per /64): `cache.add` then `cache.incr`, both atomic on LocMemCache and on Redis (django-redis, INCR),
so concurrent posts from one client are all counted. LocMemCache counts per process; production runs
the Redis cache (CACHE_BACKEND=redis), so every worker and host shares one count (the deploy check
shop.W001 warns otherwise). While that Redis cannot be reached, nothing is counted and nothing refused
(shop.cache).
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

from shop.clients import client_address

WINDOW_SECONDS = 60


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int  # seconds until the window resets


def comment_post_allowed(request, *, accepted: bool) -> Verdict:
    """Count this post against the client's minute, once the form has been judged: `accepted` (valid,
    or the honeypot's pretended success) against COMMENTS_POSTS_PER_MINUTE, an invalid one against
    COMMENTS_INVALID_POSTS_PER_MINUTE. Allowed while that count is within its limit (0: no limit)."""
    if accepted:
        return within_limit(request, kind="posts", limit=settings.COMMENTS_POSTS_PER_MINUTE)
    return within_limit(request, kind="invalid-posts", limit=settings.COMMENTS_INVALID_POSTS_PER_MINUTE)


def product_post_allowed(sku: str) -> Verdict:
    """Count an accepted post against the product's minute, whoever sent it: many addresses (a botnet,
    or the 65,536 /64s of one IPv6 /48) cannot flood one product past COMMENTS_PRODUCT_POSTS_PER_MINUTE."""
    return counted("product-posts", sku, limit=settings.COMMENTS_PRODUCT_POSTS_PER_MINUTE)


def within_limit(request, *, kind: str, limit: int) -> Verdict:
    """Count one `kind` of request against the client's minute: allowed while the count is within
    `limit` (0: no limit)."""
    return counted(kind, client_address(request), limit=limit)


def _window(kind: str, subject: str) -> tuple[str, int]:
    """The cache key of `subject`'s count of `kind` in the current minute, and the seconds left in it."""
    now = time.time()
    window = int(now // WINDOW_SECONDS)
    retry_after = max(1, int((window + 1) * WINDOW_SECONDS - now + 0.999))
    return f"comments:{kind}:{hashlib.sha256(subject.encode()).hexdigest()[:32]}:{window}", retry_after


def failures_allowed(kind: str, subject: str, *, limit: int) -> Verdict:
    """Whether `subject` may try again: fewer than `limit` failures of `kind` counted this minute
    (with counted()); nothing is counted by asking."""
    key, retry_after = _window(kind, subject)
    return Verdict(limit <= 0 or (cache.get(key) or 0) < limit, retry_after)


def counted(kind: str, subject: str, *, limit: int) -> Verdict:
    """Count one more `kind` for `subject` (a client, a product) in the current minute: allowed while
    the count is within `limit` (0: no limit, nothing counted)."""
    key, retry_after = _window(kind, subject)
    if limit <= 0:
        return Verdict(True, retry_after)
    cache.add(key, 0, timeout=WINDOW_SECONDS + 5)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=WINDOW_SECONDS + 5)
        count = 1
    # None: the shared cache's Redis is unreachable (shop.cache answers as an empty cache). Nothing can
    # be counted, so nothing is refused: a cache outage must not stop every post and admin login.
    return Verdict(count is None or count <= limit, retry_after)
