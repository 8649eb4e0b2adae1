from django.contrib import admin
from django.urls import include, path

from comments import views as comment_views
from shop import views

urlpatterns = [
    path("", views.catalogue, name="catalogue"),
    path("products/<str:sku>/", comment_views.product_detail, name="product-detail"),
    path("admin/", admin.site.urls),
    path("", include("ops.urls")),
]
