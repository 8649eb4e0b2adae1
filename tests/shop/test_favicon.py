"""The favicon: a static file served by WhiteNoise, linked from every page, and /favicon.ico (which
browsers ask for whatever the page links) answering with it instead of a 404."""
import re

import pytest
from django.contrib.staticfiles import finders
from django.templatetags.static import static

pytestmark = pytest.mark.django_db


def test_favicon_ico_redirects_to_the_static_file(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == static("favicon.ico")
    assert "public" in response["Cache-Control"] and "max-age=86400" in response["Cache-Control"]
    assert client.head("/favicon.ico").status_code == 302
    assert client.post("/favicon.ico").status_code == 405


def test_the_static_file_is_an_icon_served_by_whitenoise(client):
    with open(finders.find("favicon.ico"), "rb") as icon:
        data = icon.read()
    assert data[:4] == b"\x00\x00\x01\x00"  # ICONDIR: reserved 0, type 1 (icon)
    assert int.from_bytes(data[4:6], "little") == 3  # 16, 32 and 48 px images
    response = client.get("/favicon.ico", follow=True)
    assert response.status_code == 200
    assert response["Content-Type"] in {"image/x-icon", "image/vnd.microsoft.icon"}
    assert b"".join(response.streaming_content) == data


def test_every_page_links_the_icon(client):
    for path in ["/", "/no-such-page/"]:
        html = client.get(path).content.decode()
        assert re.search(rf'<link rel="icon" href="{re.escape(static("favicon.ico"))}"', html), path
