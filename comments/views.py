import logging

from botocore.exceptions import BotoCoreError, ClientError
from django.core.paginator import InvalidPage
from django.http import Http404, HttpResponsePermanentRedirect
from django.shortcuts import get_object_or_404, render
from django.utils.cache import get_conditional_response
from django.views.decorators.http import require_safe

from comments import caching, seo
from comments.pager import page_href, pager_links
from comments.selectors import parse_page_number, product_comment_page
from pagination_index import IndexUnavailable
from shop.models import Product

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 30


def service_unavailable(request, what: str):
    response = render(request, "503.html", {"what": what}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


@require_safe
def product_detail(request, sku):
    product = get_object_or_404(Product, sku=sku)
    values = request.GET.getlist("page")
    if values == ["1"]:
        return HttpResponsePermanentRedirect(product.get_absolute_url())
    try:
        page = product_comment_page(sku=sku, number=parse_page_number(values))
    except InvalidPage as exc:
        raise Http404(str(exc)) from exc
    except IndexUnavailable:
        logger.warning("pagination index unavailable for %s page %s", sku, values, exc_info=True)
        return service_unavailable(request, "the comment index")
    except (BotoCoreError, ClientError):
        logger.warning("DynamoDB failed for %s page %s", sku, values, exc_info=True)
        return service_unavailable(request, "the comment store")

    personal = caching.has_pending_messages(request)
    etag = caching.page_etag(request, product, page)
    last_modified = caching.product_last_modified(product, page.newest_sk)
    if not personal:
        response = get_conditional_response(request, etag=etag, last_modified=caching.http_timestamp(last_modified))
        if response is not None:  # 304 (or 412), without rendering
            return caching.set_cache_headers(request, response, etag=etag, last_modified=last_modified)

    path = product.get_absolute_url()
    number, num_pages = page.number, page.paginator.num_pages
    product_url = request.build_absolute_uri(path)
    canonical = request.build_absolute_uri(page_href(path, number))
    response = render(request, "comments/product_detail.html", {
        "product": product,
        "page_obj": page,
        "comments": page.object_list,
        "pager": pager_links(path, number, num_pages),
        "previous_url": page_href(path, number - 1) if page.has_previous() else None,
        "next_url": page_href(path, number + 1) if page.has_next() else None,
        "previous_absolute_url": request.build_absolute_uri(page_href(path, number - 1)) if page.has_previous() else None,
        "next_absolute_url": request.build_absolute_uri(page_href(path, number + 1)) if page.has_next() else None,
        "canonical_url": canonical,
        "meta_description": seo.meta_description(product, page.paginator.count, number, num_pages),
        "json_ld": seo.product_json_ld(product=product, url=product_url, page_url=canonical,
                                       comments=page.object_list, ratings=page.ratings),
    })
    return caching.set_cache_headers(request, response, etag=etag, last_modified=last_modified, personal=personal)
