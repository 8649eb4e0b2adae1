from django.contrib import admin
from django.urls import include, path, re_path

from comments import api as comment_api
from comments import views as comment_views
from metrics.views import metrics
from moderation import views as moderation_views
from shop import views

urlpatterns = [
    path("", views.catalogue, name="catalogue"),
    path("products/<str:sku>/", comment_views.product_detail, name="product-detail"),
    path("robots.txt", views.robots_txt, name="robots-txt"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("metrics", metrics, name="metrics"),  # Prometheus (metrics/), for METRICS_ALLOWED_IPS only
    path("sitemap.xml", views.sitemap_index, name="sitemap"),
    path("sitemap-<slug:section>.xml", views.sitemap_section, name="sitemap-section"),
    path("products/<str:sku>/comments/", comment_views.comment_post, name="comment-post"),
    path("products/<str:sku>/comments/<str:comment_id>/report/", moderation_views.comment_report,
         name="comment-report"),
    path("products/<str:sku>/reported/", moderation_views.comment_reported, name="comment-reported"),
    path("api/products/<str:sku>/comments", comment_api.product_comments, name="api-product-comments"),
    re_path(r"^api/", comment_api.not_found),
    path("admin/", admin.site.urls),
    path("", include("ops.urls")),
]

handler400 = "shop.errors.bad_request"
