"""/readyz's database probe: a PostgreSQL connection of its own with DATABASE_CONNECT_TIMEOUT, so a server
that accepts and never answers is a quick 503, not a hung probe."""
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from django.db import connections

from ops.selectors import probe_database


@pytest.fixture
def silent_postgres():
    """A TCP port that accepts connections (the kernel completes the handshake) and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield {"ENGINE": "django.db.backends.postgresql", "HOST": "127.0.0.1", "PORT": listener.getsockname()[1],
           "NAME": "shop", "USER": "postgres", "PASSWORD": "", "OPTIONS": {}}
    listener.close()


def test_the_probe_gives_up_on_a_server_that_never_answers(silent_postgres):
    started = time.monotonic()
    pool = ThreadPoolExecutor(1)  # without a timeout the probe would wait forever: bound the test
    try:
        probe = pool.submit(probe_database, silent_postgres, connect_timeout=2)
        with pytest.raises(psycopg.errors.ConnectionTimeout):
            probe.result(timeout=15)
    finally:
        pool.shutdown(wait=False)
    assert time.monotonic() - started < 8  # libpq's smallest connect_timeout is 2 s


@pytest.mark.django_db
@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_readyz_is_a_quick_503_naming_the_database(client, settings, silent_postgres):
    settings.DATABASE_CONNECT_TIMEOUT = 2
    settings.DATABASES = {**settings.DATABASES, "default": silent_postgres}  # read by the probe only
    started = time.monotonic()
    response = client.get("/readyz")
    assert time.monotonic() - started < 12
    assert response.status_code == 503 and response["Retry-After"]
    assert response.json()["checks"]["database"] == "failed: ConnectionTimeout"


@pytest.mark.django_db(databases="__all__")
def test_the_probe_answers_on_a_real_postgresql(postgres_database):
    probe_database(connections[postgres_database].settings_dict, connect_timeout=2)
