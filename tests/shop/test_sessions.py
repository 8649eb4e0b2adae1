"""Sessions when the shop's database fails (shop.sessions, SESSION_ENGINE): a post the store accepted
stays a 303 when the session cannot be written, a session row really deleted meanwhile keeps Django's
400, and a session that cannot be read is the 503 funnel's on a product page.

The faults are real. Writes: a second SQLite connection holds the write lock (`BEGIN EXCLUSIVE`; in
WAL mode readers go on), and the shop's connection gives up after a short busy timeout with
"database is locked". Reads: the sessions routed to the PostgreSQL test database, whose connection
is terminated server-side (`pg_terminate_backend`) before the request.
"""
import logging
import re
import sqlite3
from contextlib import contextmanager
from importlib import import_module

import psycopg
import pytest
from django.conf import settings
from django.contrib.sessions.backends.base import UpdateError
from django.core.cache import caches
from django.core.cache.backends.locmem import LocMemCache
from django.db import connection, connections
from django.http import HttpResponse
from django.test import Client
from django.urls import path

from comments.selectors import comments_query
from shop import urls as shop_urls
from tests import factories
from tests.conftest import TEST_POSTGRES_URL

SKU = "SESS-1"
URL = f"/products/{SKU}/"
POST_URL = f"/products/{SKU}/comments/"


def SessionStore(session_key=None):  # noqa: N802 (the engine's class, as SessionMiddleware loads it)
    return import_module(settings.SESSION_ENGINE).SessionStore(session_key)


def delete_then_write(request):
    """Loads the session, has it deleted as a concurrent logout would, then changes it."""
    request.session.get("seen")
    SessionStore(request.session.session_key).delete()
    request.session["seen"] = 2
    return HttpResponse("written")


urlpatterns = [path("delete-then-write", delete_then_write), *shop_urls.urlpatterns]  # the error pages link home


def form(body: str) -> dict:
    return {"author": "Ann", "rating": "4", "body": body}


@pytest.fixture
def client():
    return Client(headers={"Origin": "http://testserver"})


@pytest.fixture(autouse=True)
def _posting_limit_per_test():
    """A clean post count per test (LocMemCache only: never clear a shared Redis)."""
    if isinstance(caches["default"], LocMemCache):
        caches["default"].clear()


@pytest.fixture
def product(transactional_db, comments_table):
    return factories.product(SKU, "Kettle")


def stored_bodies() -> list[str]:
    return [comment.body for comment in comments_query(SKU)[0:100]]


@contextmanager
def sqlite_write_locked():
    """Another connection's write transaction on the shop's SQLite database, for the block."""
    if connection.vendor != "sqlite":
        pytest.skip("the write lock is SQLite's; the PostgreSQL tests below cover reads")
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout=100")  # the shop's connection gives up after 0.1 s, not 10 s
    other = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        yield
    finally:
        other.close()  # rolls the empty transaction back
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout=10000")


def test_a_post_stays_a_303_when_its_session_cannot_be_saved(client, product, caplog):
    """The chaos run's 400: the comment was stored, then saving the visitor's existing session failed
    (UpdateError -> SessionInterrupted). Now the 303 stands; the session keeps what it had."""
    assert client.post(POST_URL, form("First, with the database up.")).status_code == 303
    key = client.cookies["sessionid"].value
    before = SessionStore(key).load()

    with sqlite_write_locked(), caplog.at_level(logging.WARNING, logger="shop.sessions"):
        response = client.post(POST_URL, form("Second, while the database refuses writes."))
    assert response.status_code == 303 and response["Location"] == URL
    assert stored_bodies().count("Second, while the database refuses writes.") == 1
    assert SessionStore(key).load() == before  # the new pin is lost, nothing else
    [record] = [r for r in caplog.records if r.name == "shop.sessions"]
    assert "not saved" in record.getMessage() and "locked" in str(record.exc_info[1])

    # The database back: the page shows the comment (from the Query: the pin was not kept).
    html = client.get(URL).content.decode()
    assert "Second, while the database refuses writes." in html and "Thank you!" in html


def test_a_first_post_stays_a_303_when_its_new_session_cannot_be_created(client, product, caplog):
    """No session cookie yet: the session row is inserted at the end of the request (a 500 before)."""
    with sqlite_write_locked(), caplog.at_level(logging.WARNING, logger="shop.sessions"):
        response = client.post(POST_URL, form("A first post while the database refuses writes."))
    assert response.status_code == 303
    assert stored_bodies() == ["A first post while the database refuses writes."]
    assert [r.name for r in caplog.records if r.name == "shop.sessions"] == ["shop.sessions"]
    # The cookie names a session that was never written: the next request starts a fresh one.
    page = client.get(URL)
    assert page.status_code == 200 and "A first post while the database refuses writes." in page.content.decode()


def test_a_product_page_stays_a_200_when_expiring_pins_cannot_be_saved(client, product):
    """A product page that drops expired pins from the session writes it at the end: locked, a 200."""
    session = client.session
    session["comments_posted"] = [[SKU, "a" * 32, "2020-01-01T00:00:00.000000Z"]]
    session.save()
    with sqlite_write_locked():
        response = client.get(URL)
    assert response.status_code == 200
    assert client.session["comments_posted"] == [[SKU, "a" * 32, "2020-01-01T00:00:00.000000Z"]]


def test_a_session_deleted_meanwhile_still_fails_as_django_has_it(product):
    """Not a connection failure: the row is gone (a logout in a concurrent request). Writing it back
    would resurrect a session the visitor ended, so the save raises UpdateError (the middleware's 400)."""
    session = SessionStore()
    session["comments_posted"] = []
    session.save()
    concurrent = SessionStore(session.session_key)
    concurrent["comments_posted"] = [[SKU, "b" * 32, "2999-01-01T00:00:00.000000Z"]]  # loaded, then changed
    SessionStore(session.session_key).delete()
    with pytest.raises(UpdateError) as raised:
        concurrent.save()
    assert "did not affect any rows" in str(raised.value.__context__)
    assert not SessionStore().exists(session.session_key)


def test_a_session_deleted_meanwhile_is_still_a_400_through_the_middleware(client, product, settings):
    """The same through a request: the session's row is deleted while the view runs."""
    settings.ROOT_URLCONF = "tests.shop.test_sessions"
    session = client.session
    session["seen"] = 1
    session.save()
    response = client.get("/delete-then-write")
    assert response.status_code == 400


# --- Reads: the sessions on PostgreSQL, its connection terminated ------------------------------

class SessionsOn:
    """A router sending the sessions app to one database alias."""

    alias = "postgres"

    def db_for_read(self, model, **hints):
        return self.alias if model._meta.app_label == "sessions" else None

    db_for_write = db_for_read


@pytest.fixture
def sessions_on_postgres(postgres_database, settings):
    settings.DATABASE_ROUTERS = ["tests.shop.test_sessions.SessionsOn"]
    yield connections[postgres_database]
    connections[postgres_database].close()


def terminate(alias_connection) -> None:
    """End the Django connection's PostgreSQL backend from the server side, as a restart would."""
    alias_connection.ensure_connection()
    pid = alias_connection.connection.info.backend_pid
    with psycopg.connect(TEST_POSTGRES_URL, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_session_that_cannot_be_read_is_a_503_on_a_product_page(client, comments_table, sessions_on_postgres):
    factories.product(SKU, "Kettle")
    assert client.post(POST_URL, form("Posted with the database up.")).status_code == 303
    terminate(sessions_on_postgres)
    page = client.get(URL)
    assert page.status_code == 503 and page["Retry-After"]
    assert b"the shop&#39;s database" in page.content or b"the shop's database" in page.content


@pytest.mark.django_db(transaction=True, databases="__all__")
def test_a_post_stays_a_303_when_its_session_cannot_be_read(client, comments_table, sessions_on_postgres, caplog):
    """The comment is stored before the session is first read (to pin it): a read failure then must
    not answer 503 ("not saved, post it again"), which would make the shopper post it twice."""
    factories.product(SKU, "Kettle")
    assert client.post(POST_URL, form("Posted with the database up.")).status_code == 303
    sessions_on_postgres.close()
    terminate(sessions_on_postgres)
    with caplog.at_level(logging.WARNING, logger="comments.views"):
        response = client.post(POST_URL, form("Posted while the session cannot be read."))
    assert response.status_code == 303
    assert stored_bodies().count("Posted while the session cannot be read.") == 1
    assert any(re.search("session", r.getMessage()) for r in caplog.records if r.name == "comments.views")
