import logging

from django.apps import AppConfig
from django.core.signals import request_finished, request_started

from pagination_index.aws.retries import page_retries
from shop.logs import current_request_id


def clear_request_id(**kwargs):
    """No request id (nor page retry budget) outside a request: none before the middleware sets one,
    none once the response is closed (a thread serves many requests, and logs between them)."""
    current_request_id.set(None)
    page_retries.set(None)


class ShopConfig(AppConfig):
    name = "shop"
    verbose_name = "Shop"

    def ready(self):
        # Python warnings (a missing static folder, a deprecation) become log lines in the log's format
        # (logger py.warnings) instead of raw text among the JSON lines.
        logging.captureWarnings(True)
        request_started.connect(clear_request_id, dispatch_uid="shop.clear_request_id.started")
        request_finished.connect(clear_request_id, dispatch_uid="shop.clear_request_id.finished")
