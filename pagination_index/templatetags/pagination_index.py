"""`{% pager page %}`: a numbered pager for a page of Django's Paginator (query()'s or any other).

    {% load pagination_index %}
    {% pager page %}                                  {# 1 2 … 40 41 [42] 43 44 … 99 100 #}
    {% pager page on_each_side=2 on_ends=1 param="p" %}

The numbers are Django's Paginator.get_elided_page_range(); links keep the request's other query
parameters (`?rating=5&page=3`: filters survive paging) and page 1's link drops the page parameter
(one URL per page). The request comes from the context (the `request` context processor); without
it, links carry the page parameter alone. The markup is pagination_index/pager.html: override it as
any app template is overridden.
"""
from __future__ import annotations

from django import template
from django.http import QueryDict
from django.utils.encoding import escape_uri_path

register = template.Library()


def page_href(path: str, query: QueryDict, param: str, number: int) -> str:
    query = query.copy()
    if number == 1 and path:
        query.pop(param, None)
    else:
        query[param] = str(number)
    encoded = query.urlencode()  # percent-encodes names and values; the template escapes the &s
    return f"{path}?{encoded}" if encoded else path


@register.inclusion_tag("pagination_index/pager.html", takes_context=True)
def pager(context, page, *, on_each_side: int = 3, on_ends: int = 2, param: str = "page"):
    request = context.get("request")
    # The path percent-encoded as get_full_path() writes it (request.path is decoded).
    path, query = (escape_uri_path(request.path), request.GET) if request is not None else ("", QueryDict())
    paginator = page.paginator
    links = []
    for number in paginator.get_elided_page_range(page.number, on_each_side=on_each_side, on_ends=on_ends):
        if number == paginator.ELLIPSIS:
            links.append({"ellipsis": number})
        else:
            links.append({"number": number, "href": page_href(path, query, param, number),
                          "current": number == page.number})
    return {
        "page": page,
        "links": links if paginator.num_pages > 1 else [],
        "previous": page_href(path, query, param, page.previous_page_number()) if page.has_previous() else None,
        "next": page_href(path, query, param, page.next_page_number()) if page.has_next() else None,
    }
