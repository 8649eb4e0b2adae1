from django.contrib import admin
from django.urls import include, path, re_path, register_converter

from comments import api as comment_api
from comments import views as comment_views
from metrics.views import metrics
from moderation import views as moderation_views
from shop import views
from shop.admin_login import admin_login



class CommentIdConverter:
    """A comment id as the shop issues them (comments.services: uuid4().hex): anything else is a 404
    from the URL resolver, before a view could send it to DynamoDB (which refuses a key over 2,048
    bytes with a ValidationException) or log it."""

    regex = "[0-9a-f]{32}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class SkuConverter(CommentIdConverter):
    """A SKU as the catalogue allows it (shop.models.Product: at most 100 characters, no "/")."""

    regex = "[^/]{1,100}"


register_converter(CommentIdConverter, "comment_id")
register_converter(SkuConverter, "sku")

urlpatterns = [
    path("", views.catalogue, name="catalogue"),
    path("products/<sku:sku>/", comment_views.product_detail, name="product-detail"),
    path("robots.txt", views.robots_txt, name="robots-txt"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("metrics", metrics, name="metrics"),  # Prometheus (metrics/), for METRICS_ALLOWED_IPS only
    path("sitemap.xml", views.sitemap_index, name="sitemap"),
    path("sitemap-<slug:section>.xml", views.sitemap_section, name="sitemap-section"),
    path("products/<sku:sku>/comments/", comment_views.comment_post, name="comment-post"),
    path("products/<sku:sku>/comments/<comment_id:comment_id>/report/", moderation_views.comment_report,
         name="comment-report"),
    path("products/<sku:sku>/reported/", moderation_views.comment_reported, name="comment-reported"),
    path("api/products/<sku:sku>/comments", comment_api.product_comments, name="api-product-comments"),
    re_path(r"^api/", comment_api.not_found),
    path("admin/login/", admin_login, name="admin-login"),  # before the admin's own: failed logins are limited
    path("admin/", admin.site.urls),
    path("", include("ops.urls")),
]

handler400 = "shop.errors.bad_request"
