"""At most COMMENTS_POSTS_PER_MINUTE accepted comment posts per client per minute, counted in Django's
cache. Posts refused as invalid have a count and a more generous limit of their own
(COMMENTS_INVALID_POSTS_PER_MINUTE), so a person correcting their form is not locked out of posting.

A fixed one-minute window per client: `cache.add` then `cache.incr`, both atomic on LocMemCache and
on Redis (django-redis), so concurrent posts from one client are all counted. LocMemCache counts per
process; configure the Redis cache (CACHE_BACKEND=redis) to share the count between processes.
"""
from __future__ import annotations

import hashlib
import ipaddress
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache

WINDOW_SECONDS = 60


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after: int  # seconds until the window resets


def client_address(request) -> str:
    """The client's address: REMOTE_ADDR, or the rightmost address of COMMENTS_CLIENT_IP_HEADER (the
    one our own trusted proxy appended; addresses to its left are whatever the client sent).
    IPv6 clients are counted per /64, the block one subscriber usually has."""
    address = request.META.get("REMOTE_ADDR", "")
    header = settings.COMMENTS_CLIENT_IP_HEADER
    if header:
        forwarded = request.META.get("HTTP_" + header.upper().replace("-", "_"), "")
        address = forwarded.rsplit(",", 1)[-1].strip() or address
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address or "unknown"
    if ip.version == 6:
        if ip.ipv4_mapped:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def comment_post_allowed(request, *, accepted: bool) -> Verdict:
    """Count this post against the client's minute, once the form has been judged: `accepted` (valid,
    or the honeypot's pretended success) against COMMENTS_POSTS_PER_MINUTE, an invalid one against
    COMMENTS_INVALID_POSTS_PER_MINUTE. Allowed while that count is within its limit (0: no limit)."""
    if accepted:
        return within_limit(request, kind="posts", limit=settings.COMMENTS_POSTS_PER_MINUTE)
    return within_limit(request, kind="invalid-posts", limit=settings.COMMENTS_INVALID_POSTS_PER_MINUTE)


def within_limit(request, *, kind: str, limit: int) -> Verdict:
    """Count one `kind` of request against the client's minute: allowed while the count is within
    `limit` (0: no limit)."""
    now = time.time()
    window = int(now // WINDOW_SECONDS)
    retry_after = max(1, int((window + 1) * WINDOW_SECONDS - now + 0.999))
    if limit <= 0:
        return Verdict(True, retry_after)
    client = hashlib.sha256(client_address(request).encode()).hexdigest()[:32]
    key = f"comments:{kind}:{client}:{window}"
    cache.add(key, 0, timeout=WINDOW_SECONDS + 5)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=WINDOW_SECONDS + 5)
        count = 1
    return Verdict(count <= limit, retry_after)
