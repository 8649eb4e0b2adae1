from datetime import timedelta

from django.conf import settings

from pagination_index.conf import index_settings
from django.contrib.admin.views.decorators import staff_member_required
from django.core.paginator import InvalidPage, Paginator
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache

from comments.pager import page_href, pager_links
from comments.params import parse_page_number
from ops import selectors
from ops.charts import lag_chart
from shop.decorators import read_only
from shop.middleware import service_unavailable
from shop.models import Product


@read_only
@never_cache
def healthz(request):
    """The process is up and answers; touches no dependency (a liveness probe)."""
    return HttpResponse("ok\n", content_type="text/plain")


@read_only
@never_cache
def readyz(request):
    """Every dependency of a page answers (a readiness probe): 200, or 503 naming what failed."""
    checks = selectors.readiness()
    ready = all(result == "ok" for result in checks.values())
    response = JsonResponse({"status": "ok" if ready else "unavailable", "checks": checks},
                            status=200 if ready else 503)
    return response if ready else service_unavailable(response)


@read_only
@never_cache
@staff_member_required
def status(request):
    """Health at a glance: a page of products with their index counts (the exact table count of one
    product on demand, ?count=SKU), the stream consumer, and its lag."""
    values = request.GET.getlist("page")
    try:
        number = parse_page_number(values)
        page = Paginator(Product.objects.order_by("sku"), settings.OPS_PRODUCTS_PER_PAGE).page(number)
    except InvalidPage:
        raise Http404("No such page of products.")
    exact = request.GET.get("count")
    rows, errors = selectors.product_counts(list(page.object_list), exact=exact)
    path = reverse("ops-status")
    start, end = selectors.lag_window(hours=1)
    samples = selectors.lag_samples(since=start)
    chart = lag_chart([(sample.at, sample.lag_seconds) for sample in samples], start=start, end=end,
                      gap=timedelta(seconds=max(3 * index_settings.SYNC["LAG_SAMPLE_SECONDS"], 30)))
    return render(request, "ops/status.html", {
        "rows": rows,
        "errors": errors,
        "page_obj": page,
        "page_url": page_href(path, number),
        "pager": pager_links(path, number, page.paginator.num_pages) if page.paginator.num_pages > 1 else [],
        "checkpoints": selectors.stream_checkpoints(),
        "latest_lag": selectors.latest_lag_sample(),
        "samples": samples,
        "chart": chart,
        "readiness": selectors.readiness(),
    })
