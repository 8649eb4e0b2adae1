import logging

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.contrib import messages
from django.core.paginator import InvalidPage
from django.http import Http404, HttpResponsePermanentRedirect, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import get_conditional_response
from django.views.decorators.http import require_safe

from comments import caching, seo
from comments.forms import CommentForm
from comments.pager import page_href, pager_links
from comments.recent import posted_keys, remember_posted
from comments.selectors import parse_page_number, product_comment_page
from comments.services import comment_create
from comments.throttle import comment_post_allowed
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
        page = product_comment_page(sku=sku, number=parse_page_number(values), pinned=posted_keys(request, sku))
    except InvalidPage as exc:
        raise Http404(str(exc)) from exc
    except IndexUnavailable:
        logger.warning("pagination index unavailable for %s page %s", sku, values, exc_info=True)
        return service_unavailable(request, "the comment index")
    except (BotoCoreError, ClientError):
        logger.warning("DynamoDB failed for %s page %s", sku, values, exc_info=True)
        return service_unavailable(request, "the comment store")

    # The form (and its CSRF token, which makes a page private) only on page 1: deeper pages link
    # to it, so shared caches and crawlers can keep them.
    has_form = page.number == 1
    personal = caching.has_pending_messages(request)
    etag = caching.page_etag(request, product, page, has_form=has_form)
    last_modified = caching.product_last_modified(product, page.newest_sk)
    if not personal:
        response = get_conditional_response(request, etag=etag, last_modified=caching.http_timestamp(last_modified))
        if response is not None:  # 304 (or 412), without rendering
            return caching.set_cache_headers(request, response, etag=etag, last_modified=last_modified,
                                             has_form=has_form)

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
        "comment_form": CommentForm() if has_form else None,
    })
    return caching.set_cache_headers(request, response, etag=etag, last_modified=last_modified,
                                     personal=personal, has_form=has_form)


POSTED_MESSAGE = "Thank you! Your comment is posted."


class HttpResponseSeeOther(HttpResponseRedirect):
    status_code = 303


def comment_form_page(request, product, form, *, heading, notice="", status):
    return render(request, "comments/comment_form_page.html", {
        "product": product, "form": form, "heading": heading, "notice": notice,
    }, status=status)


def comment_post(request, sku):
    """The comment form's target. Success is a 303 to page 1, where the new comment is first."""
    product = get_object_or_404(Product, sku=sku)
    if request.method != "POST":
        return redirect(product)
    verdict = comment_post_allowed(request)
    if not verdict.allowed:
        response = comment_form_page(
            request, product, CommentForm(initial=request.POST.dict()), status=429,
            heading="Please wait a moment",
            notice=f"You can post up to {settings.COMMENTS_POSTS_PER_MINUTE} comments a minute. Your comment "
                   f"is kept below: please post it again in {verdict.retry_after} seconds.")
        response["Retry-After"] = str(verdict.retry_after)
        return response
    form = CommentForm(request.POST)
    if form.is_bot():
        logger.info("comment honeypot filled for %s; dropped", sku)
        messages.success(request, POSTED_MESSAGE)
        return HttpResponseSeeOther(product.get_absolute_url())
    if not form.is_valid():
        return comment_form_page(request, product, form, status=400, heading=f"Your comment on {product.name}")
    try:
        comment = comment_create(sku=sku, **form.comment_fields())
    except (BotoCoreError, ClientError):
        logger.warning("DynamoDB failed posting a comment on %s", sku, exc_info=True)
        response = comment_form_page(
            request, product, form, status=503, heading="We couldn't save your comment",
            notice="Our comment store is not answering right now. Your comment is kept below, "
                   "unchanged: please post it again in a minute.")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    remember_posted(request, comment)
    messages.success(request, POSTED_MESSAGE)
    return HttpResponseSeeOther(product.get_absolute_url())
