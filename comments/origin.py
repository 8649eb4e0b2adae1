"""Is a comment POST from one of the site's own pages? Checked from the request's own headers, so the
comment form needs no per-visitor CSRF token and page 1 can be one public page for everybody.

Browsers send `Origin` on every form POST (Chrome since 2019, Firefox 70, Safari 12) and
`Sec-Fetch-Site` with it; neither can be set by a page of another site. A request with neither
(an old browser, curl, a script) is accepted only when its `Referer` is one of our pages: a script
could forge that header, but it forges nothing a cross-site attacker needs, since a script posting
from its own machine has no visitor's ambient credentials to ride on (the form is anonymous).
Anything else is refused, with a page that says why.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings


def site_origins(request) -> set[str]:
    """The site's own origins: the request's scheme and host, and DJANGO_CSRF_TRUSTED_ORIGINS."""
    return {f"{request.scheme}://{request.get_host()}".lower(),
            *(origin.lower() for origin in settings.CSRF_TRUSTED_ORIGINS)}


def is_site_origin(origin: str, origins: set[str]) -> bool:
    """`origin` is one of `origins`; an entry like https://*.example.com covers its subdomains."""
    origin = origin.lower()
    if origin in origins:
        return True
    parts = urlsplit(origin)
    return any(trusted.startswith(f"{parts.scheme}://*.") and parts.netloc.endswith(trusted.split("*", 1)[1])
               for trusted in origins)


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


def post_origin_refusal(request) -> str | None:
    """None when the POST comes from one of the site's pages, else why it is refused."""
    origins = site_origins(request)
    origin = request.headers.get("Origin")
    if origin is not None:
        if is_site_origin(origin, origins):
            return None
        return "This form was sent from another site."
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None:
        return None if fetch_site == "same-origin" else "This form was sent from another site."
    referer = request.headers.get("Referer", "")
    if referer and is_site_origin(origin_of(referer), origins):
        return None
    return ("Your browser did not say which page this form was sent from. Post the comment from the "
            "product page in a browser that sends the Origin or Referer header.")
