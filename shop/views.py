from django.contrib.sitemaps import views as sitemap_views
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import reverse
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_safe

from comments.selectors import product_comment_counts
from shop.models import Product
from shop.sitemaps import SITEMAPS

# Crawlers may fetch every page, product and numbered comment page. They may not post forms (comments
# are posted to /products/<sku>/comments/), nor crawl filter or cursor URLs, which only re-slice the
# numbered pages, nor the admin or an API. Wildcards are the Google/Bing extension, also in RFC 9309.
ROBOTS_DISALLOW = [
    "/admin/",
    "/api/",
    "/products/*/comments/",
    "/*?rating=",
    "/*&rating=",
    "/*?cursor=",
    "/*&cursor=",
]


def catalogue(request):
    products = list(Product.objects.all())
    counts = product_comment_counts([product.sku for product in products])
    rows = [(product, counts[product.sku]) for product in products]
    return render(request, "shop/catalogue.html", {
        "rows": rows,
        "canonical_url": request.build_absolute_uri(reverse("catalogue")),
    })


@require_safe
def robots_txt(request):
    return render(request, "robots.txt", {
        "disallow": ROBOTS_DISALLOW,
        "sitemap_url": request.build_absolute_uri(reverse("sitemap")),
    }, content_type="text/plain; charset=utf-8")


# Browsers ask for /favicon.ico whatever the page links. The file is a static file like any other
# (content-hashed, cached for a year, served by WhiteNoise or nginx); this sends them to it. Not a
# permanent redirect: the hashed name changes with the icon.
FAVICON_REDIRECT_MAX_AGE = 24 * 3600


@require_safe
def favicon(request):
    response = HttpResponseRedirect(static("favicon.ico"))
    patch_cache_control(response, public=True, max_age=FAVICON_REDIRECT_MAX_AGE)
    return response


@require_safe
def sitemap_index(request):
    return sitemap_views.index(request, SITEMAPS, sitemap_url_name="sitemap-section").render()


@require_safe
def sitemap_section(request, section):
    # Django's own template dates lastmod to the day; ours gives the moment (W3C datetime).
    return sitemap_views.sitemap(request, SITEMAPS, section=section, template_name="sitemaps/urlset.xml").render()
