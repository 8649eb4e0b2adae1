from django.urls import path

from ops import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("ops/", views.status, name="ops-status"),
]
