"""View decorators shared by the shop's apps."""
from functools import wraps

from django.shortcuts import render
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
