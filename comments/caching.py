"""What product pages keep between requests, and their HTTP caching: the rendered HTML (Django's
cache; the product row is kept by selectors.product_for_page), a strong ETag of what the page shows, Last-Modified, 304s, and Cache-Control that
never lets a shared cache hand one visitor's flash message or session to another. Every page, page 1
and its comment form included, is the same for every visitor without a message. The comments
themselves are shared by pagination_index.query() (the sources' CACHE_SECONDS); docs/architecture.md,
"Caches", lists every cache of the site and why it is there."""
from __future__ import annotations

import hashlib
import json
from calendar import timegm
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.contrib.messages import get_messages
from django.core.cache import cache
from django.http import HttpResponse
from django.utils.cache import patch_cache_control, patch_vary_headers
from django.utils import timezone
from django.utils.http import http_date
from django.views.decorators.http import condition

import pagination_index
from comments.paging import CommentPage
from comments.selectors import product_key
from comments.store import parse_sk
from comments.table.keys import PRODUCTS
from metrics import cache_lookup
from shop.models import Product


def product_caches_forget(sku: str, *, product_changed: bool = False) -> None:
    """After a write to a product's comments: what pages share of its groups is read again, in every
    process that shares Django's cache (one generation for the product and its rating groups:
    comments.table.source.ProductRatingComments.cache_scope); its row too when moderation dated it."""
    pagination_index.invalidate(PRODUCTS, sku)
    if product_changed:
        cache.delete(product_key(sku))


@lru_cache(maxsize=1)
def template_fingerprint() -> str:
    """A digest of the project's templates, so that a deploy that changes the markup changes every
    ETag. Read once per process (runserver restarts when a template changes)."""
    digest = hashlib.sha256()
    for folder in [folder for engine in settings.TEMPLATES for folder in engine.get("DIRS", [])]:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def product_changed_at(product: Product) -> datetime:
    """When the product's pages last changed other than by a post: its row (the header) or a moderation
    action (a removal leaves no newer comment to date the pages by). Never later than now: a
    Last-Modified must not be in the future (RFC 9110, 8.8.2.1), and moderation rounds its time up."""
    changed = max(product.updated_at, product.comments_changed_at or product.updated_at)
    return min(changed, timezone.now())


def product_last_modified(product: Product, newest_sk: str | None) -> datetime:
    """When a product page last changed: a new comment shifts every page and changes the count;
    the product row changes the header; a moderation action removes or restores comments.
    For a stable archive page, `newest_sk` is the page's own newest comment: when it got its comments."""
    if newest_sk is None:
        return product_changed_at(product)
    return max(product_changed_at(product), parse_sk(newest_sk))


def page_digest(request, product: Product, page: CommentPage) -> str:
    """A digest of everything the page renders that can change, for every visitor alike: the ETag's
    base and the key of the page's rendered HTML."""
    shown = [
        template_fingerprint(),
        request.build_absolute_uri(),  # the URL: its filters and cursor shape links, noindex, canonical
        [product.sku, product.name, product.description, str(product.price), product.updated_at.isoformat()],
        [page.number, page.paginator.count, page.count_is_estimate],
        [page.ratings.count, page.ratings.total] if page.ratings else None,
        sorted(page.rating_stats.counts.items()) if page.rating_stats else None,
        [[c.pk, c.sk, c.author, c.body, c.rating] for c in page.object_list],
        settings.COMMENTS_PAGE_NUMBERING,
    ]
    if page.archive:  # a stable archive page shows no product-wide figure: its ETag outlives posts
        shown[3:6] = [page.number, None, None]
    return hashlib.sha256(json.dumps(shown, ensure_ascii=False).encode()).hexdigest()


def catalogue_digest(request, rows: list[tuple[Product, int | None]]) -> str:
    """The catalogue's counterpart of page_digest: every product row as shown, with its comment count."""
    shown = [
        template_fingerprint(),
        request.build_absolute_uri(),
        [[p.sku, p.name, str(p.price), p.updated_at.isoformat(), count] for p, count in rows],
    ]
    return hashlib.sha256(json.dumps(shown, ensure_ascii=False).encode()).hexdigest()


def page_etag(digest: str) -> str:
    """A strong ETag from the page's digest: the same for every visitor."""
    return f'"{digest[:40]}"'


def rendered_page(digest: str, render: Callable[[], HttpResponse]) -> HttpResponse:
    """`render()`'s response, its HTML reused from the cache for this digest for
    COMMENTS_RENDERED_CACHE_SECONDS (0: render every time): on a miss the rendered response itself
    (with its `context_data`), on a hit a plain HttpResponse of the cached HTML. A page with a flash
    message must not come here: it is for one visitor."""
    seconds = settings.COMMENTS_RENDERED_CACHE_SECONDS
    if not seconds:
        return render()
    key = f"comments:html:{digest}"
    html = cache.get(key)
    cache_lookup("rendered-page", html is not None)
    if html is None:
        response = render()
        cache.set(key, response.content, seconds)
        return response
    return HttpResponse(html)


# The request headers `condition` compares (If-None-Match, If-Modified-Since, If-Match, If-Unmodified-Since).
VALIDATORS = ("HTTP_IF_NONE_MATCH", "HTTP_IF_MODIFIED_SINCE", "HTTP_IF_MATCH", "HTTP_IF_UNMODIFIED_SINCE")


def unchanged_response(request, *, etag: str, last_modified: datetime | None) -> HttpResponse | None:
    """The 304 (or 412) that Django's documented `condition` decorator answers when the request's
    validators match the page's, else None: the page must be rendered. No `last_modified` (the
    catalogue): the ETag alone decides. A request without validators (a crawler's first visit) has
    nothing to compare."""
    if not any(name in request.META for name in VALIDATORS):
        return None
    proceed = HttpResponse()

    @condition(etag_func=lambda request: etag, last_modified_func=lambda request: last_modified)
    def page(request):
        return proceed

    response = page(request)
    return None if response is proceed else response


def http_timestamp(moment: datetime) -> int:
    return timegm(moment.utctimetuple())


def has_pending_messages(request) -> bool:
    """A flash message is meant for one visitor, once: such a page is neither cached nor 304'd."""
    return len(get_messages(request)) > 0


def is_personal(request, response) -> bool:
    """Does the response depend on this visitor: the session read (a comment they just posted is
    pinned), a cookie set?"""
    session = getattr(request, "session", None)
    return bool(response.cookies or (session is not None and session.accessed))


def set_cache_headers(request, response, *, etag: str | None, last_modified: datetime | None,
                      personal: bool = False, max_age: int | None = None):
    """Validators (when given), then `public` only when the page is the same for everyone; a page read
    through the visitor's session stays cacheable by their own browser (`private`, `Vary: Cookie`); a
    flash message page is not stored at all. No `last_modified` (the catalogue: its counts change
    undated) sends the ETag alone. `max_age` defaults to COMMENTS_PAGE_MAX_AGE (full archive pages of
    stable numbering pass COMMENTS_ARCHIVE_MAX_AGE)."""
    if personal:
        patch_cache_control(response, no_store=True, private=True)
        return response
    if etag is not None:
        response.headers["ETag"] = etag
    if last_modified is not None:
        response.headers["Last-Modified"] = http_date(http_timestamp(last_modified))
    if max_age is None:
        max_age = settings.COMMENTS_PAGE_MAX_AGE
    if is_personal(request, response):
        patch_cache_control(response, private=True, max_age=max_age)
        patch_vary_headers(response, ("Cookie",))
    else:
        patch_cache_control(response, public=True, max_age=max_age)
    return response
