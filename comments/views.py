import logging

from django.conf import settings
from django.contrib import messages
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpResponsePermanentRedirect, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.views.decorators.csrf import csrf_exempt

from comments import caching
from comments.forms import CommentForm
from comments.origin import post_origin_refusal
from comments.pagination import BadPageRequest, Redirect, pagination_for
from comments.recent import remember_posted
from comments.selectors import product_for_page
from comments.services import comment_create
from comments.table.client import StoreUnavailable
from comments.throttle import comment_post_allowed
from shop.decorators import method_not_allowed, read_only
from shop.middleware import service_unavailable
from shop.models import Product

logger = logging.getLogger(__name__)


def render(request, template_name: str, context: dict, status: int | None = None) -> TemplateResponse:
    """django.shortcuts.render's response, rendered at once, that keeps what it was rendered from
    (`response.context_data`) whichever engine rendered it (Django's test client records contexts
    for Django's own engine only)."""
    return TemplateResponse(request, template_name, context, status=status).render()


def bad_request(request, message: str):
    return render(request, "400.html", {"message": message}, status=400)


@read_only
def product_detail(request, sku):
    """A product and one page of its comments, numbered as pagination_for() chooses
    (comments/pagination.py). The index or the store being down is a 503
    (shop.middleware.ServiceUnavailableMiddleware)."""
    product = product_for_page(sku)
    if product is None:
        raise Http404("No such product.")
    pagination = pagination_for(request)
    try:
        page = pagination.paginate(request, product)
    except BadPageRequest as exc:
        return bad_request(request, str(exc))
    except Redirect as redirect:
        if redirect.permanent:
            return HttpResponsePermanentRedirect(redirect.url)
        return caching.set_cache_headers(request, HttpResponseRedirect(redirect.url), etag=None, last_modified=None)
    request.page_number, request.page_served_by = page.number, page.served_by  # for the request log line
    # A page with a flash message is for one visitor: never 304'd, never from the shared HTML.
    personal = caching.has_pending_messages(request)
    digest = caching.page_digest(request, product, page)
    headers = {"etag": caching.page_etag(digest), "max_age": pagination.max_age,
               "last_modified": caching.product_last_modified(product, page.newest_sk)}
    unchanged = None if personal else caching.unchanged_response(
        request, etag=headers["etag"], last_modified=headers["last_modified"])
    if unchanged is not None:  # 304 (or 412), without rendering
        return caching.set_cache_headers(request, unchanged, **headers)

    def render_page():
        # The form carries no per-visitor token (comment_post checks the Origin instead), so the
        # page that shows it is as public as every other page.
        return render(request, "comments/product_detail.html", {
            "product": product, **pagination.get_html_context(pagination.get_links()),
            "comment_form": CommentForm() if pagination.has_form else None,
        })

    response = render_page() if personal else caching.rendered_page(digest, render_page)
    return caching.set_cache_headers(request, response, personal=personal, **headers)


POSTED_MESSAGE = "Thank you! Your comment is posted."


class HttpResponseSeeOther(HttpResponseRedirect):
    status_code = 303


def comment_form_page(request, product, form, *, heading, notice="", status):
    return render(request, "comments/comment_form_page.html", {
        "product": product, "form": form, "heading": heading, "notice": notice,
    }, status=status)


def too_many_posts(request, product, form, verdict, *, accepted: bool):
    """The 429 page, with the comment kept (and an invalid one's errors shown) and Retry-After."""
    if accepted:
        notice = f"You can post up to {settings.COMMENTS_POSTS_PER_MINUTE} comments a minute."
    else:
        notice = f"We received more than {settings.COMMENTS_INVALID_POSTS_PER_MINUTE} incomplete forms from you this minute."
    response = comment_form_page(
        request, product, form, status=429, heading="Please wait a moment",
        notice=f"{notice} Your comment is kept below: please post it again in {verdict.retry_after} seconds.")
    response["Retry-After"] = str(verdict.retry_after)
    return response


POST_URL_METHODS = ("GET", "HEAD", "POST")  # GET and HEAD go to the product page


@csrf_exempt  # no per-visitor token in the form: the Origin is checked instead (comments.origin)
def comment_post(request, sku):
    """The comment form's target. Success is a 303 to page 1, where the new comment is first; a post
    from another site is a 403."""
    if request.method not in POST_URL_METHODS:
        return method_not_allowed(request, POST_URL_METHODS)
    try:
        product = get_object_or_404(Product, sku=sku)
    except (OperationalError, InterfaceError):  # the shop's database is down: keep the comment, not a bare 503
        logger.warning("database unavailable posting a comment on %s", sku, exc_info=True)
        return service_unavailable(comment_form_page(
            request, Product(sku=sku, name=sku), CommentForm(initial=request.POST.dict()), status=503,
            heading="We couldn't save your comment",
            notice="Our shop is not answering right now. Your comment is kept below, unchanged: please post it "
                   "again in a minute."))
    if request.method != "POST":
        return redirect(product)
    refusal = post_origin_refusal(request)
    if refusal:
        logger.info("comment post on %s refused: %s", sku, refusal)
        return comment_form_page(request, product, CommentForm(initial=request.POST.dict()), status=403,
                                 heading="We couldn't accept this form", notice=refusal)
    # Judged first, counted after: only accepted posts (and the honeypot's) use up the posting limit;
    # invalid ones have a more generous limit of their own (comments/throttle.py).
    form = CommentForm(request.POST)
    is_bot = form.is_bot()
    accepted = is_bot or form.is_valid()
    verdict = comment_post_allowed(request, accepted=accepted)
    if not verdict.allowed:
        return too_many_posts(request, product, form, verdict, accepted=accepted)
    if is_bot:
        logger.info("comment honeypot filled for %s; dropped", sku)
        messages.success(request, POSTED_MESSAGE)
        return HttpResponseSeeOther(product.get_absolute_url())
    if not accepted:
        return comment_form_page(request, product, form, status=400, heading=f"Your comment on {product.name}")
    try:
        comment = comment_create(sku=sku, **form.comment_fields())
    except StoreUnavailable:  # the form is kept, not lost to the 503 page
        logger.warning("DynamoDB failed posting a comment on %s", sku, exc_info=True)
        return service_unavailable(comment_form_page(
            request, product, form, status=503, heading="We couldn't save your comment",
            notice="Our comment store is not answering right now. Your comment is kept below, "
                   "unchanged: please post it again in a minute."))
    try:
        remember_posted(request, comment)
    except (OperationalError, InterfaceError):  # the session unreadable: the comment is stored all the same
        logger.warning("session unavailable after posting comment %s on %s; not pinned", comment.pk, sku,
                       exc_info=True)
    messages.success(request, POSTED_MESSAGE)
    return HttpResponseSeeOther(product.get_absolute_url())
