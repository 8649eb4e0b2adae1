"""Request logging, the Content-Security-Policy header, the one place where a dependency that is
down becomes a 503, and the per-process micro-cache of public responses."""
from __future__ import annotations

import logging
import re
import time
import uuid

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.middleware.gzip import re_accepts_gzip
from django.middleware.http import ConditionalGetMiddleware
from django.shortcuts import render
from django.utils.cache import patch_cache_control

from comments.table.client import StoreUnavailable
from metrics import cache_lookup, observe_request
from pagination_index import IndexUnavailable
from pagination_index.aws.retries import RetryBudget, page_retries
from pagination_index.conf import index_settings
from shop.errors import request_too_large
from shop.logs import current_request_id

logger = logging.getLogger("shop.request")
unavailable_logger = logging.getLogger("shop.unavailable")

REQUEST_ID_HEADER = "X-Request-ID"
# An incoming request id is echoed only if it is short and plain; anything else is replaced.
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class RequestLogMiddleware:
    """One structured log line per request, and a request id echoed in the X-Request-ID header.

    The request's DynamoDB retry budget (pagination_index.aws.retries.page_retries) is set here too.

    The id is also this thread's `shop.logs.current_request_id` while the request is served, so every
    line logged meanwhile carries it (shop.logs.RequestIdFilter); shop.apps clears it when the response
    is closed, after Django's own "Not Found: ..." line, which is logged outside the middleware.

    Views add what only they know as request attributes: product pages set `page_number` and
    `page_served_by` ("fast" or "index").
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        incoming = request.headers.get(REQUEST_ID_HEADER, "")
        request.request_id = incoming if REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        current_request_id.set(request.request_id)
        page_retries.set(RetryBudget(index_settings.AWS["MAX_ATTEMPTS"] - 1))
        response = self.get_response(request)
        observe_request(request, response, time.perf_counter() - started)
        response[REQUEST_ID_HEADER] = request.request_id
        fields = {
            "request_id": request.request_id,
            "method": request.method,
            "path": request.path,
            "status": response.status_code,
            "duration_ms": round((time.perf_counter() - started) * 1000, 1),
        }
        page = getattr(request, "page_number", None)
        if page is not None:
            fields["page"] = page
            fields["served_by"] = getattr(request, "page_served_by", None)
        level = logging.ERROR if response.status_code >= 500 and response.status_code != 503 else logging.INFO
        logger.log(level, "request", extra={"fields": fields})
        return response


class ContentSecurityPolicyMiddleware:
    """Adds settings.CONTENT_SECURITY_POLICY to responses that don't set their own (Django 5.2 has no
    built-in CSP). An empty setting sends no header.

    Under DEBUG, Django's own debug pages (the technical 404 and 500 pages, styled and scripted
    inline) get the policy with inline styles and scripts allowed, so they render as Django means them
    to; every other response keeps the policy production sends."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = settings.CONTENT_SECURITY_POLICY
        if policy and "Content-Security-Policy" not in response:
            if settings.DEBUG and is_django_debug_page(response):
                policy = allow_inline(policy)
            response["Content-Security-Policy"] = policy
        return response


# Django's technical_404.html and technical_500.html (and no template of ours) carry this tag.
DEBUG_PAGE_MARK = b'<meta name="robots" content="NONE,NOARCHIVE">'


def is_django_debug_page(response) -> bool:
    return (response.status_code >= 400 and not response.streaming
            and response.get("Content-Type", "").startswith("text/html") and DEBUG_PAGE_MARK in response.content)


def allow_inline(policy: str) -> str:
    """`policy` with 'unsafe-inline' added to style-src and script-src (added with 'self' if absent)."""
    directives = [directive.split() for directive in policy.split(";") if directive.strip()]
    for name in ("style-src", "script-src"):
        directive = next((d for d in directives if d[0] == name), None)
        if directive is None:
            directives.append([name, "'self'", "'unsafe-inline'"])
        elif "'unsafe-inline'" not in directive:
            directive.append("'unsafe-inline'")
    return "; ".join(" ".join(directive) for directive in directives)


class RequestTooLargeMiddleware:
    """A request body over DATA_UPLOAD_MAX_MEMORY_SIZE gets the 413 page under DEBUG too.

    Without DEBUG, Django hands the RequestDataTooBig to handler400 (shop.errors), which answers 413;
    with DEBUG it shows its debug page with status 400 instead, so `make run` would disagree with
    production. This answers first in both modes: process_view parses a POST's form before the CSRF
    check does (the parse is kept on the request, so nothing reads the body twice), and
    process_exception catches a view that reads the body itself."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.method == "POST":
            try:
                request.POST
            except RequestDataTooBig:
                return request_too_large(request)
        return None

    def process_exception(self, request, exception):
        return request_too_large(request) if isinstance(exception, RequestDataTooBig) else None


class ServiceUnavailableMiddleware:
    """A view whose index or comment store is down answers 503 with Retry-After, never a 500: JSON
    under /api/, the 503 page elsewhere. Views that degrade on purpose (pages 1..FAST_PAGES without
    the index, counts shown as "-", the comment form kept after a failed post) catch the error
    themselves; everything else lets it reach this."""

    UNAVAILABLE = {IndexUnavailable: "the comment index", StoreUnavailable: "the comment store",
                   # The shop's own database unreachable (not a bad query: those stay errors).
                   OperationalError: "the shop's database", InterfaceError: "the shop's database"}

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        what = next((name for kind, name in self.UNAVAILABLE.items() if isinstance(exception, kind)), None)
        if what is None:
            return None
        unavailable_logger.warning("%s unavailable for %s", what, request.get_full_path(), exc_info=exception)
        if request.path.startswith("/api/"):
            response = JsonResponse({"error": {"status": 503, "message": f"{what.capitalize()} is unavailable; "
                                                                         "try again shortly."}}, status=503)
        else:
            response = render(request, "503.html", {"what": what}, status=503)
        return service_unavailable(response)


def service_unavailable(response):
    """Mark a 503 with the Retry-After every unavailable answer of the site carries."""
    response["Retry-After"] = str(settings.RETRY_AFTER_SECONDS)
    return response


class MicroCacheMiddleware:
    """Whole public responses, kept in this process for RESPONSE_MICRO_CACHE_SECONDS (about a second)
    and handed to cookie-less GETs of the same URL (gzip-accepting or not: a copy for each, since
    GZipMiddleware runs inside) without running the rest of the stack.

    A hot page asked for hundreds of times a second is then built about once a second per worker.
    Only a 200 marked `Cache-Control: public` (never private or no-store, no cookie set, no Vary but
    Accept-Encoding) is stored, and only requests with no Cookie and no Authorization header are
    answered from it, so a visitor's session, messages or pinned comments never meet the cache;
    If-None-Match / If-Modified-Since are answered against the stored validators. A write handled by
    this process (any non-GET answered below 400) empties it; other processes' copies are at most that
    old, as nginx's micro-cache in front is (docs/nginx.md)."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.seconds = settings.RESPONSE_MICRO_CACHE_SECONDS
        self.entries: dict[tuple, tuple] = {}
        # Django's documented conditional GET: a replay whose validators match answers 304 with its headers.
        self.conditional_get = ConditionalGetMiddleware(get_response)

    def __call__(self, request):
        if not self.seconds:
            return self.get_response(request)
        meta = request.META
        if request.method != "GET":
            response = self.get_response(request)
            if request.method != "HEAD" and response.status_code < 400:
                self.entries.clear()
            return response
        if meta.get("HTTP_COOKIE") or "HTTP_AUTHORIZATION" in meta:
            return self.get_response(request)
        # GZipMiddleware (inside) compresses for clients that accept gzip: one copy for them, one for the rest.
        key = (request.scheme, meta.get("HTTP_HOST", ""), meta.get("PATH_INFO", ""), meta.get("QUERY_STRING", ""),
               bool(re_accepts_gzip.search(meta.get("HTTP_ACCEPT_ENCODING", ""))))
        now = time.monotonic()
        entry = self.entries.get(key)
        cache_lookup("micro", entry is not None and entry[0] > now)
        if entry is not None and entry[0] > now:
            return self.replay(request, entry)
        response = self.get_response(request)
        if self.shareable(response):
            self.store(key, now, response)
        return response

    @staticmethod
    def shareable(response) -> bool:
        if response.status_code != 200 or response.streaming or response.cookies:
            return False
        control = response.get("Cache-Control", "")
        if "public" not in control or "private" in control or "no-store" in control:
            return False
        return response.get("Vary", "Accept-Encoding").lower() == "accept-encoding"

    def store(self, key: tuple, now: float, response) -> None:
        if len(self.entries) >= settings.RESPONSE_MICRO_CACHE_ENTRIES:
            snapshot = list(self.entries.items())  # one C-level copy: other threads may store meanwhile
            for stale in [k for k, entry in snapshot if entry[0] <= now] or [k for k, _ in snapshot[:1]]:
                self.entries.pop(stale, None)
        headers = [(name, value) for name, value in response.items() if name != REQUEST_ID_HEADER]
        self.entries[key] = (now + self.seconds, response.content, headers,
                             response.get("ETag"), response.get("Last-Modified"))

    def replay(self, request, entry: tuple):
        _, content, headers, etag, last_modified = entry
        response = HttpResponse(content, headers=headers)
        if etag is None and last_modified is None:
            return response
        return self.conditional_get.process_response(request, response)


class CookieResponsesArePrivateMiddleware:
    """A response that sets a cookie is for one visitor: `public` becomes `private`, whatever the view
    chose, so no shared cache stores it. It sits outside SessionMiddleware and CsrfViewMiddleware, which
    add their cookies after the view has set Cache-Control (a `{% csrf_token %}` on a public page sets the
    CSRF cookie that way). It reads the response's own cookies, no internal flag of Django's."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.cookies and "public" in response.get("Cache-Control", ""):
            patch_cache_control(response, private=True)
        return response
