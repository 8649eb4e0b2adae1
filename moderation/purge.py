"""Telling shared caches that a product's pages changed.

Every product page and API answer carries the product's surrogate key twice, as `Cache-Tag`
(Cloudflare, Akamai) and `Surrogate-Key` (Fastly, Varnish xkey): a CDN purges all of a product's
cached pages by that one key, whatever their query strings. After a hide, unhide, delete or erasure,
services call `purge_product(sku)`, which hands the keys and the product's path to the callable named
by MODERATION_PURGE_HOOK (docs/moderation.md, "Purging caches"):

    def purge(*, keys: list[str], paths: list[str]) -> None

nginx needs no purge: it keeps a page for one second (deploy/nginx/shop.conf.template).
"""
from __future__ import annotations

import hashlib
import json
import logging
import urllib.request
from functools import lru_cache

from django.conf import settings
from django.urls import reverse
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)

# The headers every product page and API answer is tagged with (moderation.middleware).
TAG_HEADERS = ("Cache-Tag", "Surrogate-Key")


def product_key(sku: str) -> str:
    """A product's surrogate key: a header token whatever the SKU holds (spaces, commas, non-ASCII)."""
    return f"product-{hashlib.sha256(sku.encode()).hexdigest()[:20]}"


@lru_cache(maxsize=4)
def _hook(path: str):
    return import_string(path)


def purge_product(sku: str) -> None:
    """Ask the configured hook to purge a product's pages. A failing hook is logged, not raised: the
    comment is already out of every page the site serves, and a CDN's copies expire by their
    max-age (COMMENTS_PAGE_MAX_AGE) anyway."""
    path = settings.MODERATION_PURGE_HOOK
    if not path:
        return
    keys = [product_key(sku)]
    paths = [reverse("product-detail", kwargs={"sku": sku}),
             reverse("api-product-comments", kwargs={"sku": sku})]
    try:
        _hook(path)(keys=keys, paths=paths)
    except Exception:
        logger.exception("purge hook %s failed for product %s (keys %s)", path, sku, keys)


def webhook(*, keys: list[str], paths: list[str]) -> None:
    """A ready-made hook: POST {"keys": [...], "paths": [...]} as JSON to MODERATION_PURGE_WEBHOOK_URL
    (a small function of your own that calls the CDN's purge API), failing on any non-2xx answer."""
    request = urllib.request.Request(
        settings.MODERATION_PURGE_WEBHOOK_URL, data=json.dumps({"keys": keys, "paths": paths}).encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=settings.MODERATION_PURGE_TIMEOUT) as response:
        response.read()
