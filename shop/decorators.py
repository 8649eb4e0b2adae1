"""View decorators shared by the shop's apps."""
from functools import wraps
from urllib.parse import unquote_plus

from django.http import HttpResponsePermanentRedirect
from django.shortcuts import render
from django.utils.encoding import escape_uri_path
from django.views.decorators.csrf import csrf_exempt

SAFE_METHODS = ("GET", "HEAD")


def method_not_allowed(request, allowed: tuple[str, ...]):
    """A 405 page in the site's look, with the `Allow` header naming what the URL does take."""
    response = render(request, "405.html", {"allowed": allowed}, status=405)
    response["Allow"] = ", ".join(allowed)
    return response


def read_only(view):
    """GET and HEAD only; any other method is a 405 with `Allow: GET, HEAD`.

    The view is exempt from Django's CSRF check, which would otherwise answer a POST first with the
    "Please try again" page: a view that changes nothing has nothing for CSRF to protect, and a 405
    says what is actually wrong."""

    @wraps(view)
    def read_only_view(request, *args, **kwargs):
        if request.method not in SAFE_METHODS:
            return method_not_allowed(request, SAFE_METHODS)
        return view(request, *args, **kwargs)

    return csrf_exempt(read_only_view)


def canonical_query(*known: str):
    """GET and HEAD with any parameter the view does not read, or its parameters out of the order its own
    links write them, are a 301 to the URL with only `known` parameters, in that order (each keeps its
    values, in their order and as they were encoded).

    Before the view does any work: `?page=300&utm_x=1` and `?page=300&x=2` cost one cheap redirect, never
    a page read from the index and DynamoDB, and every cache (the rendered HTML, the micro-cache, nginx,
    a CDN) only ever sees one URL per page. Search engines follow the 301 to the canonical URL, as
    <link rel=canonical> asks them to anyway."""
    order = {name: position for position, name in enumerate(known)}

    def decorator(view):
        @wraps(view)
        def canonical_view(request, *args, **kwargs):
            query = request.META.get("QUERY_STRING", "")
            if query and request.method in SAFE_METHODS:
                fields = query.split("&")
                names = [unquote_plus(field.partition("=")[0]) for field in fields]
                kept = sorted(((order[name], field) for name, field in zip(names, fields) if name in order),
                              key=lambda pair: pair[0])
                canonical = [field for _, field in kept]
                if canonical != fields:
                    location = escape_uri_path(request.path) + ("?" + "&".join(canonical) if canonical else "")
                    return HttpResponsePermanentRedirect(location)
            return view(request, *args, **kwargs)

        return canonical_view

    return decorator
