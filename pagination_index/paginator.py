"""Django's Paginator for query(), where "no such page" must not be said while the index is down.

    from pagination_index.paginator import IndexPaginator
    page = IndexPaginator(query("events", owner), 25).page(request.GET.get("page", 1))

Django's own Paginator pages query() unchanged. One answer of it would be wrong: with the index down
and the source's FAST_ITEMS on, query().count() is what the fast windows show, a lower bound
(count_is_estimate), so a page past it may well exist. Django's Paginator says EmptyPage (a 404, which
a crawler de-indexes); this one raises IndexUnavailable (a 503 with Retry-After: try again shortly).
Every other answer is Django's: a page that is not a whole number, or below 1, or past an exact count.
"""
from __future__ import annotations

from django.core.paginator import EmptyPage, Paginator

from pagination_index.backends.base import IndexUnavailable


class IndexPaginator(Paginator):
    def validate_number(self, number):
        try:
            return super().validate_number(number)
        except EmptyPage:
            # Django's EmptyPage comes after the whole-number check: int() cannot fail here.
            if int(number) > 1 and getattr(self.object_list, "count_is_estimate", False):
                raise IndexUnavailable(f"page {int(number)} lies past the {self.count} items the index can vouch for "
                                       "while it is down (count_is_estimate)") from None
            raise
