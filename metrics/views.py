"""/metrics: Prometheus' text format. In multiprocess mode (PROMETHEUS_MULTIPROC_DIR, gunicorn) the
values of every worker, live or gone, are added up from their files; otherwise this process's.

Prometheus scrapes the web process itself, from an address in METRICS_ALLOWED_IPS. A request that came
through a proxy (nginx, a load balancer: any forwarding header) is refused whatever its address: on a
host where nginx runs beside gunicorn, every visitor's request arrives from 127.0.0.1. nginx answers
/metrics with a 404 itself too (deploy/nginx/shop.conf.template)."""
from __future__ import annotations

import os

from django.conf import settings
from django.http import Http404, HttpResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess

from shop.clients import came_through_a_proxy


@never_cache  # private, no-store: no cache on the way keeps a copy
def metrics(request):
    if request.META.get("REMOTE_ADDR") not in settings.METRICS_ALLOWED_IPS or came_through_a_proxy(request):
        raise Http404
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
