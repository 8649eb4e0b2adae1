"""The comments API: `GET /api/products/<sku>/comments?offset=O&limit=L`, or `?cursor=C`, with
`rating=` filters. JSON in and out; every error is JSON too (400 bad parameter or cursor, 404 no
such product or offset past the end, 503 index or store down), never HTML, never a 500."""
from __future__ import annotations

import logging
import re
from urllib.parse import urlencode

from django.conf import settings
from django.core.paginator import InvalidPage
from django.http import JsonResponse
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from comments import cursors
from comments.pager import filter_params
from comments.paging import CommentSlice
from comments.params import InvalidFilter, parse_ratings
from comments.selectors import product_comment_slice, product_comment_slice_after
from comments.store import Comment
from shop.models import Product

logger = logging.getLogger(__name__)

NATURAL = re.compile(r"0|[1-9][0-9]{0,11}")
PARAMETERS = {"offset", "limit", "cursor", "rating"}


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": {"status": status, "message": message}}, status=status)


def _one(request, name: str) -> str | None:
    values = request.GET.getlist(name)
    if len(values) > 1:
        raise ApiError(400, f"`{name}` may be given once.")
    return values[0] if values else None


def _natural(request, name: str, default: int) -> int:
    value = _one(request, name)
    if value is None:
        return default
    if not NATURAL.fullmatch(value):
        raise ApiError(400, f"`{name}` must be a whole number >= 0.")
    return int(value)


def comment_json(comment: Comment) -> dict:
    return {"id": comment.pk, "created": comment.sk, "author": comment.author, "body": comment.body,
            "rating": comment.rating}


def _url(request, sku: str, params: list[tuple[str, object]]) -> str:
    return request.build_absolute_uri(reverse("api-product-comments", kwargs={"sku": sku}) + "?" + urlencode(params))


def _body(request, sku: str, ratings: tuple[int, ...], found: CommentSlice, limit: int) -> dict:
    rating_params = filter_params(ratings)
    end = found.resume.offset
    following = end < found.total
    return {
        "comments": [comment_json(comment) for comment in found.comments],
        "offset": found.offset,
        "limit": limit,
        "total": found.total,
        "total_is_estimate": found.total_is_estimate,
        "ratings": list(ratings),
        "next": _url(request, sku, rating_params + [("offset", end), ("limit", limit)]) if following else None,
        "next_cursor": (_url(request, sku, rating_params + [("cursor", cursors.encode(sku, ratings, found.resume)),
                                                             ("limit", limit)]) if following else None),
        "previous": (_url(request, sku, rating_params + [("offset", max(found.offset - limit, 0)), ("limit", limit)])
                     if found.offset > 0 else None),
    }


@csrf_exempt  # changes nothing: a POST gets this JSON 404 rather than the CSRF failure page
def not_found(request, path=""):
    return error(404, "No such API endpoint.")


@csrf_exempt  # read-only: other methods get the JSON 405 below, not the CSRF failure page
def product_comments(request, sku):
    if request.method not in {"GET", "HEAD"}:
        response = error(405, "Only GET and HEAD are allowed.")
        response["Allow"] = "GET, HEAD"
        return response
    try:
        if set(request.GET) - PARAMETERS:
            # Names the parameters it knows, never the ones it got: nothing from the request comes back.
            raise ApiError(400, f"Unknown parameter; this endpoint takes only {', '.join(sorted(PARAMETERS))}.")
        try:
            ratings = parse_ratings(request.GET.getlist("rating"))
        except InvalidFilter as exc:
            raise ApiError(400, str(exc)) from exc
        limit = _natural(request, "limit", settings.COMMENTS_API_DEFAULT_LIMIT)
        if not 1 <= limit <= settings.COMMENTS_API_MAX_LIMIT:
            raise ApiError(400, f"`limit` must be from 1 to {settings.COMMENTS_API_MAX_LIMIT}.")
        cursor = _one(request, "cursor")
        if cursor is not None and "offset" in request.GET:
            raise ApiError(400, "Give `offset` or `cursor`, not both.")
        offset = _natural(request, "offset", 0)
        if not Product.objects.filter(sku=sku).exists():
            raise ApiError(404, f"No product {sku!r}.")
        if cursor is not None:
            try:
                position = cursors.decode(cursor, sku, ratings)
            except cursors.InvalidCursor as exc:
                raise ApiError(400, str(exc)) from exc
            found = product_comment_slice_after(sku=sku, position=position, limit=limit, ratings=ratings)
        else:
            found = product_comment_slice(sku=sku, offset=offset, limit=limit, ratings=ratings)
    except ApiError as exc:
        return error(exc.status, str(exc))
    except InvalidPage as exc:
        return error(404, str(exc))
    return JsonResponse(_body(request, sku, ratings, found, limit))
