"""Request logging and the Content-Security-Policy header."""
from __future__ import annotations

import logging
import re
import time
import uuid

from django.conf import settings

logger = logging.getLogger("shop.request")

REQUEST_ID_HEADER = "X-Request-ID"
# An incoming request id is echoed only if it is short and plain; anything else is replaced.
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class RequestLogMiddleware:
    """One structured log line per request, and a request id echoed in the X-Request-ID header.

    Views add what only they know as request attributes: product pages set `page_number` and
    `page_served_by` ("fast" or "index").
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        incoming = request.headers.get(REQUEST_ID_HEADER, "")
        request.request_id = incoming if REQUEST_ID.fullmatch(incoming) else uuid.uuid4().hex
        response = self.get_response(request)
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
    built-in CSP). An empty setting sends no header."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = settings.CONTENT_SECURITY_POLICY
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response
