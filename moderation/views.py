"""The shopper's side of moderation: reporting a comment (a plain form, no JavaScript) and the
thank-you page. The form is origin-checked like the comment form (comments.origin), so it carries no
per-visitor token; reports are rate-limited per client."""
from __future__ import annotations

import logging

from django.conf import settings
from django.http import Http404
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.csrf import csrf_exempt

from comments.origin import post_origin_refusal
from comments.throttle import within_limit
from comments.views import HttpResponseSeeOther, render
from moderation import services
from moderation.forms import ReportForm
from shop.clients import client_address
from shop.decorators import canonical_query, method_not_allowed, read_only
from shop.models import Product
from shop.site_keys import reporter_hashes

logger = logging.getLogger(__name__)

REPORT_METHODS = ("GET", "HEAD", "POST")


def client_hashes(request) -> list[str]:
    """The client's address as a keyed hash (MODERATION_REPORTER_KEY), then as each fallback key hashes
    it: the same client gives the same hash, and without the key the hash cannot be turned back into
    an address by trying every IPv4 address."""
    return reporter_hashes(client_address(request))


def report_page(request, product, comment, form, *, status=200, notice=""):
    response = render(request, "moderation/report.html", {
        "product": product, "comment": comment, "form": form, "notice": notice}, status=status)
    # It quotes the comment: never kept by a shared cache, so a hidden comment's quote goes with it.
    add_never_cache_headers(response)
    return response


@csrf_exempt  # no per-visitor token in the form: the Origin is checked instead (comments.origin)
@canonical_query()
def comment_report(request, sku, comment_id):
    """GET: the report form; POST: store the report, then 303 to the thank-you page."""
    if request.method not in REPORT_METHODS:
        return method_not_allowed(request, REPORT_METHODS)
    product = get_object_or_404(Product, sku=sku)
    if request.method == "POST":
        refusal = post_origin_refusal(request)
        if refusal:
            logger.info("report on %s refused: %s", comment_id, refusal)
            return report_page(request, product, None, ReportForm(initial=request.POST.dict()), status=403,
                               notice=refusal)
        verdict = within_limit(request, kind="reports", limit=settings.MODERATION_REPORTS_PER_MINUTE)
        if not verdict.allowed:
            response = report_page(
                request, product, None, ReportForm(initial=request.POST.dict()), status=429,
                notice=f"We received many reports from you this minute: please send this one again in "
                       f"{verdict.retry_after} seconds.")
            response["Retry-After"] = str(verdict.retry_after)
            return response
    comment = services.shown_comment(comment_id)
    if comment is None or comment.sku != product.sku:
        raise Http404("No such comment.")
    if request.method != "POST":
        return report_page(request, product, comment, ReportForm())
    form = ReportForm(request.POST)
    if not form.is_valid():
        return report_page(request, product, comment, form, status=400)
    current, *earlier = client_hashes(request)
    services.report_create(comment=comment, reason=form.cleaned_data["reason"], note=form.cleaned_data["note"],
                           client_hash=current, earlier_hashes=earlier)
    return HttpResponseSeeOther(reverse("comment-reported", kwargs={"sku": sku}))


@read_only
@canonical_query()
def comment_reported(request, sku):
    product = get_object_or_404(Product, sku=sku)
    return render(request, "moderation/reported.html", {"product": product})
