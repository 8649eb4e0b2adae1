"""Error pages in the site's look, for errors raised before or outside our views."""
from django.core.exceptions import RequestDataTooBig
from django.shortcuts import render
from django.views.defaults import bad_request as django_bad_request


def bad_request(request, exception):
    """A body over DATA_UPLOAD_MAX_MEMORY_SIZE is a 413 that says so; anything else is Django's 400."""
    if isinstance(exception, RequestDataTooBig):
        return request_too_large(request)
    return django_bad_request(request, exception, template_name="400.html")


def request_too_large(request):
    """The 413 page, from handler400 or, before Django's debug page can take over, from
    shop.middleware.RequestTooLargeMiddleware."""
    return render(request, "413.html", status=413)


def csrf_failure(request, reason=""):
    """CSRF_FAILURE_VIEW: the form was stale or not ours (cookie gone, token missing or wrong)."""
    return render(request, "403_csrf.html", status=403)
