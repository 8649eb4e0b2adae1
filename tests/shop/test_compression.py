"""gzip for clients that accept it (GZipMiddleware), through the whole middleware stack on DynamoDB
Local: compressed pages keep working validators, the micro-cache keeps compressed and plain copies
apart, and no compressed page carries a secret beside reflected input (BREACH, docs/architecture.md)."""
import gzip

import pytest
from django.test import Client

from tests import factories
from tests.comments.test_posting import _clean_rate_limit  # noqa: F401 (autouse)

SKU = "GZIP-1"
URL = f"/products/{SKU}/"
GZIP = {"Accept-Encoding": "gzip, deflate, br"}


@pytest.fixture
def product(db, comments_table):
    factories.seed(SKU, 25, seed=8)
    return factories.product(SKU, "Squeezed kettle")


@pytest.mark.parametrize("url", ["/", URL, URL + "?page=2"])
def test_pages_are_gzipped_for_clients_that_accept_it(client, product, url):
    plain = client.get(url)
    squeezed = client.get(url, headers=GZIP)
    assert plain.status_code == squeezed.status_code == 200
    assert "Content-Encoding" not in plain and "Accept-Encoding" in plain["Vary"]
    assert squeezed["Content-Encoding"] == "gzip" and "Accept-Encoding" in squeezed["Vary"]
    assert gzip.decompress(squeezed.content) == plain.content
    assert len(squeezed.content) < len(plain.content) / (3 if "products" in url else 1)


def test_a_compressed_page_revalidates(client, product):
    first = client.get(URL, headers=GZIP)
    assert first["ETag"].startswith('W/"')  # the same content, another encoding: a weak validator
    assert client.get(URL, headers={**GZIP, "If-None-Match": first["ETag"]}).status_code == 304
    assert client.get(URL, headers={"If-None-Match": first["ETag"]}).status_code == 304


def test_the_micro_cache_keeps_compressed_and_plain_copies_apart(product, settings):
    settings.RESPONSE_MICRO_CACHE_SECONDS = 30
    process = Client()  # one Client is one handler: one process's micro-cache
    squeezed = process.get(URL, headers=GZIP)
    plain = process.get(URL)  # a client without gzip, within the second
    assert squeezed["Content-Encoding"] == "gzip" and "Content-Encoding" not in plain
    assert gzip.decompress(squeezed.content) == plain.content
    again = process.get(URL, headers=GZIP)
    assert again["Content-Encoding"] == "gzip" and gzip.decompress(again.content) == plain.content


def test_compressed_pages_carry_no_secret_beside_reflected_input(product):
    """The form's error page compresses what the visitor typed: it must hold no CSRF token or other
    secret, nor set one, or BREACH could read it out byte by byte from the compressed lengths."""
    browser = Client(headers={"Origin": "http://testserver"})
    page = browser.get(URL, headers=GZIP)
    error = browser.post(f"/products/{SKU}/comments/", {"author": "csrfmiddlewaretoken=", "rating": "4", "body": ""},
                         headers=GZIP)
    assert error.status_code == 400 and error["Content-Encoding"] == "gzip"
    for response in (page, error):
        html = gzip.decompress(response.content).decode()
        assert 'name="csrfmiddlewaretoken"' not in html
        assert not response.cookies  # no csrftoken or session cookie handed out with it
