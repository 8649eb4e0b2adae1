import logging

from botocore.exceptions import BotoCoreError, ClientError
from django.core.paginator import InvalidPage
from django.http import Http404, HttpResponsePermanentRedirect
from django.shortcuts import get_object_or_404, render

from comments import cursors
from comments.links import cursor_query, page_query
from comments.selectors import (
    RATINGS, InvalidFilter, parse_page_number, parse_ratings, product_comment_cursor_page, product_comment_page,
    product_rating_stats,
)
from pagination_index import IndexUnavailable
from shop.models import Product

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 30


def service_unavailable(request, what: str):
    response = render(request, "503.html", {"what": what}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def bad_request(request, message: str):
    return render(request, "400.html", {"message": message}, status=400)


def product_detail(request, sku):
    """A product and one page of its comments: `?page=N`, `?rating=3&rating=5` (filtered pages are
    noindex), or `?cursor=...` ("Load more")."""
    product = get_object_or_404(Product, sku=sku)
    values = request.GET.getlist("page")
    try:
        ratings = parse_ratings(request.GET.getlist("rating"))
    except InvalidFilter as exc:
        raise Http404(str(exc)) from exc
    path = product.get_absolute_url()
    if values == ["1"]:
        return HttpResponsePermanentRedirect(path + page_query(ratings, 1))
    cursor = request.GET.getlist("cursor")
    try:
        if cursor:
            if values or len(cursor) != 1:
                return bad_request(request, "A cursor link takes no page number.")
            position = cursors.decode(cursor[0], sku, ratings)
            page = product_comment_cursor_page(sku=sku, position=position, ratings=ratings)
        else:
            page = product_comment_page(sku=sku, number=parse_page_number(values), ratings=ratings)
    except cursors.InvalidCursor as exc:
        return bad_request(request, str(exc))
    except InvalidPage as exc:
        raise Http404(str(exc)) from exc
    except IndexUnavailable:
        logger.warning("pagination index unavailable for %s page %s", sku, values, exc_info=True)
        return service_unavailable(request, "the comment index")
    except (BotoCoreError, ClientError):
        logger.warning("DynamoDB failed for %s page %s", sku, values, exc_info=True)
        return service_unavailable(request, "the comment store")
    canonical = request.build_absolute_uri(path + page_query(ratings, page.number))
    page_links = [
        (number, None if number == page.paginator.ELLIPSIS else page_query(ratings, number, path=request.path))
        for number in page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)
    ]
    return render(request, "comments/product_detail.html", {
        "product": product,
        "page_obj": page,
        "comments": page.object_list,
        "page_links": page_links,
        "previous_url": page_query(ratings, page.number - 1, path=request.path) if page.has_previous() else None,
        "next_url": page_query(ratings, page.number + 1) if page.has_next() and not cursor else None,
        "more_url": cursor_query(ratings, cursors.encode(sku, ratings, page.resume)) if page.has_more() else None,
        "canonical_url": canonical,
        # Filters and cursors only re-slice the product's comments: crawl through them, index the
        # unfiltered numbered pages only (robots.txt disallows them too).
        "noindex": bool(ratings or cursor),
        "ratings": ratings,
        "rating_choices": [(rating, rating in ratings) for rating in RATINGS],
        "rating_stats": product_rating_stats(sku=sku),
    })
