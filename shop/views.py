import hashlib
import re

from django.conf import settings
from django.core.cache import cache
from django.contrib.sitemaps import views as sitemap_views
from django.core.paginator import InvalidPage, Paginator
from django.http import Http404, HttpResponse, HttpResponsePermanentRedirect, HttpResponseRedirect
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import reverse
from django.utils.cache import patch_cache_control

from comments import caching
from comments.pager import page_href, pager_links
from comments.params import parse_page_number
from comments.selectors import product_comment_counts
from metrics import cache_lookup
from shop.decorators import canonical_query, read_only
from shop.models import Product
from shop.sitemaps import SITEMAPS

# Crawlers may fetch every page, product and numbered comment page. They may not post forms (comments
# are posted to /products/<sku>/comments/), nor crawl filter or cursor URLs, which only re-slice the
# numbered pages, nor the admin or an API. Wildcards are the Google/Bing extension, also in RFC 9309.
ROBOTS_DISALLOW = [
    "/admin/",
    "/api/",
    "/products/*/comments/",  # the comment form's target and every comment's report form
    "/products/*/reported/",
    "/*?rating=",
    "/*&rating=",
    "/*?cursor=",
    "/*&cursor=",
]


@read_only
@canonical_query("page")
def catalogue(request):
    """The products, CATALOGUE_PAGE_SIZE a page in name order, with their comment counts (one index
    read a page). Numbered like comment pages: ?page=1 is a 301 to the bare URL, anything else that is
    not a page is a 404. Conditional GET as on product pages (comments/caching.py): a strong ETag of
    the rows shown, 304 before rendering, public unless a flash message is pending. No Last-Modified:
    a count changes without a date the catalogue could give."""
    values = request.GET.getlist("page")
    try:
        number = parse_page_number(values)
        # The OFFSET walks only the (name, id) index, which holds the ids: deep pages skip index
        # entries, not table rows. The page's own rows come after, by primary key.
        ordered_ids = Product.objects.order_by("name", "id").values_list("id", flat=True)
        page = Paginator(ordered_ids, settings.CATALOGUE_PAGE_SIZE).page(number)
    except InvalidPage:
        raise Http404("No such catalogue page.")
    if values and number == 1:
        return HttpResponsePermanentRedirect(reverse("catalogue"))
    ids = list(page.object_list)
    by_id = Product.objects.in_bulk(ids)
    products = [by_id[pk] for pk in ids if pk in by_id]  # one deleted in between is left out
    counts = product_comment_counts([product.sku for product in products])
    rows = [(product, counts[product.sku]) for product in products]
    personal = caching.has_pending_messages(request)
    etag = caching.page_etag(caching.catalogue_digest(request, rows))
    if not personal:
        response = caching.unchanged_response(request, etag=etag, last_modified=None)
        if response is not None:  # 304, without rendering
            return caching.set_cache_headers(request, response, etag=etag, last_modified=None)
    path = reverse("catalogue")
    num_pages = page.paginator.num_pages
    response = render(request, "shop/catalogue.html", {
        "rows": rows,
        "page_obj": page,
        "pager": pager_links(path, number, num_pages) if num_pages > 1 else [],
        "previous_url": page_href(path, number - 1) if page.has_previous() else None,
        "next_url": page_href(path, number + 1) if page.has_next() else None,
        "canonical_url": request.build_absolute_uri(page_href(path, number)),
    })
    return caching.set_cache_headers(request, response, etag=etag, last_modified=None, personal=personal)


@read_only
@canonical_query()
def robots_txt(request):
    return render(request, "robots.txt", {
        "disallow": ROBOTS_DISALLOW,
        "sitemap_url": request.build_absolute_uri(reverse("sitemap")),
    }, content_type="text/plain; charset=utf-8")


# Browsers ask for /favicon.ico whatever the page links. The file is a static file like any other
# (content-hashed, cached for a year, served by WhiteNoise or nginx); this sends them to it. Not a
# permanent redirect: the hashed name changes with the icon.
FAVICON_REDIRECT_MAX_AGE = 24 * 3600


@read_only
@canonical_query()
def favicon(request):
    response = HttpResponseRedirect(static("favicon.ico"))
    patch_cache_control(response, public=True, max_age=FAVICON_REDIRECT_MAX_AGE)
    return response


# A sitemap file's page number (?p=N): a plain positive integer, nothing else is looked up.
SITEMAP_PAGE = re.compile(r"[1-9][0-9]{0,9}")


def cached_sitemap(request, name: str, build) -> HttpResponse | None:
    """A sitemap response kept in Django's cache for SITEMAP_CACHE_SECONDS, keyed by the site (its
    URLs are absolute: scheme and host, one of ALLOWED_HOSTS) and `name` only (the section and page):
    building one reads the whole catalogue and an index entry per product, so a crawler (or anyone)
    asking again within minutes costs one cache read. None (no such page) is not kept."""
    seconds = settings.SITEMAP_CACHE_SECONDS
    if not seconds:
        return build()
    site = hashlib.sha256(f"{request.scheme}://{request.get_host()}".encode()).hexdigest()[:16]
    key = f"shop:sitemap:{site}:{name}"
    response = cache.get(key)
    cache_lookup("sitemap", response is not None)
    if response is None:
        response = build()
        if response is not None:
            cache.set(key, response, seconds)
    return response


@read_only
@canonical_query()
def sitemap_index(request):
    return cached_sitemap(request, "index", lambda: sitemap_views.index(
        request, SITEMAPS, sitemap_url_name="sitemap-section").render())


@read_only
@canonical_query("p")
def sitemap_section(request, section):
    """One section's file (?p=N past the first 50,000 URLs). A page past the last is a 404 that is
    cached too, so no page number makes the catalogue be read more than once in SITEMAP_CACHE_SECONDS;
    anything that is not a page number is a 404 without reading anything."""
    page = request.GET.get("p", "1")
    if section not in SITEMAPS or not SITEMAP_PAGE.fullmatch(page):
        raise Http404("No such sitemap.")
    pages = cache.get(f"shop:sitemap-pages:{section}")
    if pages is not None and int(page) > pages:
        raise Http404("No such sitemap page.")

    def build():
        site = SITEMAPS[section]()
        try:
            # Django's own template dates lastmod to the day; ours gives the moment (W3C datetime).
            return sitemap_views.sitemap(request, {section: site}, section=section,
                                         template_name="sitemaps/urlset.xml").render()
        except Http404:
            return None
        finally:
            cache.set(f"shop:sitemap-pages:{section}", site.paginator.num_pages, settings.SITEMAP_CACHE_SECONDS)

    response = cached_sitemap(request, f"{section}:{page}", build)
    if response is None:
        raise Http404("No such sitemap page.")
    return response
