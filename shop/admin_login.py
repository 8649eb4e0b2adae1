"""The admin's login with a limit on failed attempts: at most ADMIN_LOGIN_FAILURES_PER_MINUTE wrong
passwords per client a minute (counted in Django's cache, shared by every worker with the Redis
cache; the client as shop.clients sees it behind the site's proxies). Past it, the form is refused
with a 429 before any password is checked, so guessing runs at a few tries a minute per address;
nginx's limit_req on /admin/login/ slows every address further (deploy/nginx/shop.conf.template)."""
from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from comments.throttle import counted, failures_allowed
from shop.clients import client_address

KIND = "admin-login-failures"


@never_cache
def admin_login(request, **kwargs):
    if request.method != "POST":
        return admin.site.login(request, **kwargs)
    limit = settings.ADMIN_LOGIN_FAILURES_PER_MINUTE
    client = client_address(request)
    verdict = failures_allowed(KIND, client, limit=limit)
    if not verdict.allowed:
        response = render(request, "429.html", {
            "notice": "We received too many wrong passwords from your address.",
            "retry_after": verdict.retry_after}, status=429)
        response["Retry-After"] = str(verdict.retry_after)
        return response
    response = admin.site.login(request, **kwargs)
    if not request.user.is_authenticated:  # the form shown again: a wrong password (or no staff account)
        counted(KIND, client, limit=limit)
    return response
