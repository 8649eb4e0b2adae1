"""/metrics: Prometheus' text format. In multiprocess mode (PROMETHEUS_MULTIPROC_DIR, gunicorn) the
values of every worker, live or gone, are added up from their files; otherwise this process's."""
from __future__ import annotations

import os

from django.conf import settings
from django.http import Http404, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess


def metrics(request):
    if request.META.get("REMOTE_ADDR") not in settings.METRICS_ALLOWED_IPS:
        raise Http404
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
