import logging

from botocore.exceptions import BotoCoreError, ClientError
from django.core.paginator import InvalidPage
from django.http import Http404, HttpResponsePermanentRedirect
from django.shortcuts import get_object_or_404, render

from comments.selectors import parse_page_number, product_comment_page
from pagination_index import IndexUnavailable
from shop.models import Product

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 30


def service_unavailable(request, what: str):
    response = render(request, "503.html", {"what": what}, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


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
    request.page_number, request.page_served_by = page.number, page.served_by  # for the request log line
    canonical = request.build_absolute_uri(product.get_absolute_url())
    if page.number > 1:
        canonical += f"?page={page.number}"
    return render(request, "comments/product_detail.html", {
        "product": product,
        "page_obj": page,
        "comments": page.object_list,
        "page_links": page.paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1),
        "canonical_url": canonical,
    })
