"""Django REST framework's page-number pagination over query() (`pip install 'django-pagination-index[drf]'`).

    from pagination_index.contrib.drf import IndexPagination

    class EventList(ListAPIView):
        pagination_class = IndexPagination
        serializer_class = EventSerializer

        def get_queryset(self):
            return query("events", self.kwargs["owner"])

DRF's PageNumberPagination pages query() as it is (the count is the index's, a page one Query). This
subclass adds what paging an index needs, and nothing else:

- the index down is a 503 with Retry-After (ServiceUnavailable: DRF's exception handler writes the
  header from its `wait`), never a 500;
- a page past a count that is only a lower bound (the index down with FAST_ITEMS on) is that 503
  too, not a 404: the page may exist (pagination_index.paginator.IndexPaginator);
- the response says whether its count is such a lower bound (`count_is_estimate`);
- a client that may choose the page size (page_size_query_param) gets at most max_page_size items.

The rest is DRF's, configured as DRF's is: REST_FRAMEWORK["PAGE_SIZE"] or `page_size`,
`page_query_param`, `page_size_query_param`, `last_page_strings`, the browsable API's controls.
"""
from __future__ import annotations

import logging

try:
    from rest_framework import status
    from rest_framework.exceptions import APIException
    from rest_framework.pagination import PageNumberPagination
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("pagination_index.contrib.drf needs Django REST framework: "
                      "pip install 'django-pagination-index[drf]'") from exc
from django.utils.translation import gettext_lazy as _

from pagination_index.backends.base import IndexUnavailable
from pagination_index.paginator import IndexPaginator

logger = logging.getLogger(__name__)


class ServiceUnavailable(APIException):
    """A 503 whose `wait` DRF's exception handler sends as Retry-After (as it does Throttled's)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = _("The index is unavailable; try again shortly.")
    default_code = "index_unavailable"

    def __init__(self, detail=None, code=None, *, wait: int | None = None):
        super().__init__(detail, code)
        self.wait = wait


class IndexPagination(PageNumberPagination):
    django_paginator_class = IndexPaginator
    # A page is one Query from where the index says it starts: a client must not make one request
    # read a whole group (only used with page_size_query_param, as in DRF).
    max_page_size = 100
    # Seconds a client is asked to wait when the index is down (the Retry-After header).
    retry_after = 30

    def paginate_queryset(self, queryset, request, view=None):
        try:
            return super().paginate_queryset(queryset, request, view)
        except IndexUnavailable as exc:
            # What failed is for the log; the client learns only that it may try again.
            logger.warning("index unavailable for %s", request.get_full_path(), exc_info=exc)
            raise ServiceUnavailable(wait=self.retry_after) from exc

    def get_paginated_response(self, data):
        response = super().get_paginated_response(data)
        body = response.data
        estimate = bool(getattr(self.page.paginator.object_list, "count_is_estimate", False))
        response.data = {"count": body.pop("count"), "count_is_estimate": estimate, **body}
        return response

    def get_paginated_response_schema(self, schema):
        described = super().get_paginated_response_schema(schema)
        described["properties"] = {
            "count": described["properties"]["count"],
            "count_is_estimate": {"type": "boolean", "example": False,
                                  "description": "The count is a lower bound: the index is down."},
            **{name: value for name, value in described["properties"].items() if name != "count"},
        }
        return described
