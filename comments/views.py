import logging

from django.conf import settings
from django.contrib import messages
from django.core.paginator import InvalidPage
from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpResponsePermanentRedirect, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.views.decorators.csrf import csrf_exempt

from comments import caching, cursors, seo
from comments.forms import CommentForm
from comments.origin import post_origin_refusal
from comments.pager import archive_href, archive_pager_links, cursor_href, page_href, pager_links
from comments.params import InvalidFilter, parse_page_number, parse_ratings
from comments.recent import posted_keys, remember_posted
from comments.selectors import (
    ArchiveOnLandingPage,
    newest_archive_page,
    numbering_is_stable,
    product_archive_page,
    product_comment_cursor_page,
    product_comment_page,
)
from comments.services import comment_create
from comments.table.client import StoreUnavailable
from comments.table.keys import RATINGS
from comments.throttle import comment_post_allowed
from comments.page_cache import page_cache
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
    """A product and one page of its comments: `?page=N`, optionally `?rating=3&rating=5` (filtered
    pages are noindex), or `?cursor=...` ("Load more"). The index or the store being down is a 503
    (shop.middleware.ServiceUnavailableMiddleware)."""
    product = page_cache.product(sku)
    if product is None:
        raise Http404("No such product.")
    values = request.GET.getlist("page")
    try:
        ratings = parse_ratings(request.GET.getlist("rating"))
    except InvalidFilter as exc:
        raise Http404(str(exc)) from exc
    path = product.get_absolute_url()
    cursor = request.GET.getlist("cursor")
    # Stable numbering covers the unfiltered numbered pages; filters and cursors stay newest first.
    stable = numbering_is_stable() and not ratings and not cursor
    if values == ["1"] and not stable:
        return HttpResponsePermanentRedirect(page_href(path, 1, ratings))
    try:
        if cursor:
            if values or len(cursor) != 1:
                return bad_request(request, "A cursor link takes no page number.")
            page = product_comment_cursor_page(sku=sku, position=cursors.decode(cursor[0], sku, ratings),
                                               ratings=ratings)
        elif stable and values:
            page = product_archive_page(sku=sku, number=parse_page_number(values))
        else:
            page = product_comment_page(sku=sku, number=parse_page_number(values), ratings=ratings,
                                        pinned=posted_keys(request, sku))
    except cursors.InvalidCursor as exc:
        return bad_request(request, str(exc))
    except InvalidPage as exc:
        raise Http404(str(exc)) from exc
    except ArchiveOnLandingPage:
        # Its comments are all on the landing page for now: a temporary redirect, cached briefly.
        return caching.set_cache_headers(request, HttpResponseRedirect(path), etag=None, last_modified=None)
    request.page_number, request.page_served_by = page.number, page.served_by  # for the request log line

    archive = page.archive
    landing = stable and not archive
    # The form only on page 1 / the landing page (deeper pages link to it). It carries no per-visitor
    # token (comment_post checks the Origin instead), so page 1 is as public as every other page.
    has_form = page.number == 1 and not (ratings or cursor or archive)
    personal = caching.has_pending_messages(request)
    digest = caching.page_digest(request, product, page)
    etag = caching.page_etag(digest)
    last_modified = caching.product_last_modified(product, page.newest_sk)
    # An archive page looked up while posts kept arriving may be off by one: the short max-age then.
    max_age = settings.COMMENTS_ARCHIVE_MAX_AGE if archive and page.settled else settings.COMMENTS_PAGE_MAX_AGE
    if not personal:
        response = caching.unchanged_response(request, etag=etag, last_modified=last_modified)
        if response is not None:  # 304 (or 412), without rendering
            return caching.set_cache_headers(request, response, etag=etag, last_modified=last_modified,
                                             max_age=max_age)

    number, num_pages = page.number, page.paginator.num_pages
    product_url = request.build_absolute_uri(path)
    if archive:
        # Links only to pages that exist as long as this one does (comments/pager.py): the same
        # bytes after every post. "Previous" is the newer neighbour, "Next" the older one.
        canonical = request.build_absolute_uri(archive_href(path, number))
        previous_url = archive_href(path, number + 1)
        next_url = archive_href(path, number - 1) if number > 1 else None
        pager = archive_pager_links(path, number, 0)
    elif landing:
        newest = newest_archive_page(page.paginator.count)
        canonical = product_url
        previous_url = None
        next_url = archive_href(path, newest) if newest else None
        pager = archive_pager_links(path, None, newest)
    else:
        # A cursor page is its own canonical: it is noindex, and a canonical naming the numbered page
        # it overlaps would contradict that (and the cursor's slice need not line up with any page).
        canonical = request.build_absolute_uri(cursor_href(path, cursor[0], ratings) if cursor
                                               else page_href(path, number, ratings))
        previous_url = page_href(path, number - 1, ratings) if page.has_previous() else None
        # A cursor page continues with its cursor ("Load more"), not with numbered neighbours.
        next_url = page_href(path, number + 1, ratings) if page.has_next() and not cursor else None
        pager = pager_links(path, number, num_pages, ratings)
    # "Load more" only where robots.txt already keeps crawlers out (filters, cursors): unfiltered
    # pages link numbered pages only, so a crawler never meets a disallowed link.
    more_url = (cursor_href(path, cursors.encode(sku, ratings, page.resume), ratings)
                if (ratings or cursor) and page.has_more() else None)

    def render_page():
        return render(request, "comments/product_detail.html", {
            "product": product,
            "page_obj": page,
            "archive": archive,
            "landing": landing,
            "comments": page.object_list,
            "pager": pager,
            "previous_url": previous_url,
            "next_url": next_url,
            "previous_absolute_url": request.build_absolute_uri(previous_url) if previous_url else None,
            "next_absolute_url": request.build_absolute_uri(next_url) if next_url else None,
            "more_url": more_url,
            "canonical_url": canonical,
            # Filters and cursors only re-slice the product's numbered pages: crawlers may follow their
            # links but not index them (robots.txt keeps them out too). Their canonical is their own
            # URL (`canonical` above): pointing it at another page while saying noindex would send
            # search engines two contradicting signals.
            "noindex": bool(ratings or cursor),
            "ratings": ratings,
            "rating_choices": [(rating, rating in ratings) for rating in RATINGS],
            # Product-wide figures change with every post: the landing page has them, archive pages not.
            "rating_stats": None if archive else page.rating_stats,
            "meta_description": (seo.archive_description(product, page) if archive else
                                 seo.meta_description(product, page.paginator.count, number,
                                                      1 if landing else num_pages)),
            "json_ld": seo.product_json_ld(product=product, url=product_url, page_url=canonical,
                                           comments=page.object_list, ratings=None if archive else page.ratings),
            "comment_form": CommentForm() if has_form else None,
        })

    # A page with a flash message is for one visitor: rendered for them, never from the shared HTML.
    response = render_page() if personal else caching.rendered_page(digest, render_page)
    return caching.set_cache_headers(request, response, etag=etag, last_modified=last_modified,
                                     personal=personal, max_age=max_age)


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
