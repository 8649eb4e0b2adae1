"""A response that sets a cookie is never `public`, whichever layer set the cookie: the guard that
replaced reading Django's internal CSRF_COOKIE_NEEDS_UPDATE flag (shop.middleware.CookieResponsesArePrivateMiddleware)."""
from django.http import HttpResponse
from django.template import engines
from django.urls import path
from django.utils.cache import patch_cache_control

from shop.middleware import CookieResponsesArePrivateMiddleware

FORM = engines["django"].from_string('<form method="post">{% csrf_token %}<button>Send</button></form>')


def public_form(request):
    """A page a view marks public although its template hands out the CSRF cookie."""
    response = HttpResponse(FORM.render({}, request))
    patch_cache_control(response, public=True, max_age=60)
    return response


def public_session(request):
    request.session["seen"] = True
    response = HttpResponse("hello")
    patch_cache_control(response, public=True, max_age=60)
    return response


def public_plain(request):
    response = HttpResponse("the same for everyone")
    patch_cache_control(response, public=True, max_age=60)
    return response


urlpatterns = [path("form", public_form), path("session", public_session), path("plain", public_plain)]


def test_a_page_that_sets_the_csrf_cookie_is_never_public(client, settings):
    settings.ROOT_URLCONF = __name__
    response = client.get("/form")
    assert settings.CSRF_COOKIE_NAME in response.cookies  # CsrfViewMiddleware set it after the view ran
    assert "public" not in response["Cache-Control"] and "private" in response["Cache-Control"]


def test_a_page_that_sets_the_session_cookie_is_never_public(client, db, settings):
    settings.ROOT_URLCONF = __name__
    response = client.get("/session")
    assert settings.SESSION_COOKIE_NAME in response.cookies
    assert "public" not in response["Cache-Control"] and "private" in response["Cache-Control"]


def test_a_page_without_cookies_stays_public(client, settings):
    settings.ROOT_URLCONF = __name__
    response = client.get("/plain")
    assert not response.cookies and response["Cache-Control"] == "public, max-age=60"


def test_the_guard_is_outside_the_middleware_that_set_cookies(settings):
    """Response middleware runs inside out: the guard must come before (outside) every cookie setter."""
    guard = settings.MIDDLEWARE.index(f"{CookieResponsesArePrivateMiddleware.__module__}.CookieResponsesArePrivateMiddleware")
    for setter in ("django.contrib.sessions.middleware.SessionMiddleware", "django.middleware.csrf.CsrfViewMiddleware",
                   "django.contrib.messages.middleware.MessageMiddleware"):
        assert guard < settings.MIDDLEWARE.index(setter), setter
