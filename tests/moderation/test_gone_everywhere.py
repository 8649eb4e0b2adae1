"""A hidden comment is gone from every page of its product, through nginx (deploy/nginx/shop.conf.template)
in front of a live server on DynamoDB Local, with the caches on at their defaults' shape, within 60 s;
the index is clean afterwards; shown again, it is back in its place. Pages carry the product's
surrogate key and the purge hook is called with it."""
from __future__ import annotations

import http.client
import json
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command

from moderation import services
from moderation.purge import product_key
from stack.nginx import Nginx, NginxError, nginx_binary
from tests import factories
from tests.conftest import service_missing
from tests.config import set_cache_seconds, set_pages

SKU = "GONE-1"
PAGE = f"/products/{SKU}/"
API = f"/api/products/{SKU}/comments?offset=0&limit=100"
TOTAL = 32  # 7 pages of 5: pages 1-2 from the GSI, 3-7 through the index
DEADLINE = 60

purges: list[dict] = []


def record_purge(*, keys, paths):
    """MODERATION_PURGE_HOOK in these tests: what a CDN would have been asked to purge."""
    purges.append({"keys": keys, "paths": paths})


@pytest.fixture
def site(transactional_db, comments_table, live_server, settings, tmp_path, request):
    if not nginx_binary():
        service_missing("nginx is not installed (Debian: apt-get install nginx)")
    settings.COMMENTS_PAGE_NUMBERING = request.param
    set_pages(settings, 5, 2)
    # The caches a removal has to get through, on as in production.
    set_cache_seconds(settings, 2)
    settings.COMMENTS_RENDERED_CACHE_SECONDS = 60
    settings.RESPONSE_MICRO_CACHE_SECONDS = 1
    settings.MODERATION_PURGE_HOOK = f"{__name__}.record_purge"
    purges.clear()
    factories.product(SKU, "Enamel jug")
    comments = factories.seed(SKU, TOTAL, seed=11)
    call_command("rebuild_index", verbosity=0)
    static_root = tmp_path / "static"
    settings.STATIC_ROOT = static_root
    call_command("collectstatic", interactive=False, verbosity=0)
    try:
        with Nginx(tmp_path / "nginx", upstream=urlsplit(live_server.url).netloc, static_root=static_root) as nginx:
            yield nginx, comments, request.param
    except NginxError as exc:
        pytest.fail(str(exc))


def fetch(nginx: Nginx, path: str, headers: dict[str, str] | None = None):
    connection = http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=30)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response, response.read().decode()
    finally:
        connection.close()


def crawl(nginx: Nginx) -> dict[str, tuple[str, list[str]]]:
    """Every page of the product as a crawler finds it (following the pager), and the API:
    {url: (ETag, comment ids in order)}."""
    seen: dict[str, tuple[str, list[str]]] = {}
    queue = [PAGE]
    while queue:
        url = queue.pop()
        if url in seen:
            continue
        response, body = fetch(nginx, url)
        # A page gone with the removal (linked by a pager read before it): 404; stable numbering's
        # newest archive pages redirect to the landing page while their comments are all on it.
        if response.status in (302, 404) and url != PAGE:
            continue
        assert response.status == 200, (url, response.status)
        seen[url] = (response.getheader("ETag"), re.findall(r'id="comment-([0-9a-f]+)"', body))
        for link in re.findall(r'<nav class="pagination".*?</nav>', body, re.S):
            queue += [href.replace("&amp;", "&") for href in re.findall(r'href="([^"]+)"', link)
                      if href.startswith(PAGE) and "rating=" not in href]
    response, body = fetch(nginx, API)
    assert response.status == 200
    seen[API] = (None, [item["id"] for item in json.loads(body)["comments"]])
    return seen


def shown(pages) -> set[str]:
    """The comments the pages show (in stable numbering the landing page repeats the newest ones)."""
    return {pk for url, (_, ids) in pages.items() if url != API for pk in ids}


@pytest.mark.parametrize("site", ["newest", "stable"], indirect=True)
def test_a_hidden_comment_is_gone_through_nginx_within_a_minute_and_comes_back_in_place(site, admin_user):
    nginx, comments, numbering = site
    before = crawl(nginx)
    assert shown(before) == {c.pk for c in comments}
    response, _ = fetch(nginx, PAGE)
    assert response.getheader("Cache-Tag") == response.getheader("Surrogate-Key") == product_key(SKU)
    old_date = {"If-Modified-Since": response.getheader("Last-Modified")}  # a crawler's revalidation
    assert fetch(nginx, PAGE, old_date)[0].status == 304
    assert fetch(nginx, API)[0].getheader("Cache-Tag") == product_key(SKU)

    fast, deep = comments[2], comments[-8]  # on page 1, and on a page read through the index
    started = time.monotonic()
    for comment in (fast, deep):
        services.comment_hide(comment_id=comment.pk, actor=admin_user, reason="abuse")
    while True:
        call_command("sync_index", once=True, verbosity=0)  # the stream consumer, as it runs beside the site
        after = crawl(nginx)
        elapsed = time.monotonic() - started
        if not {fast.pk, deep.pk} & {pk for _, ids in after.values() for pk in ids}:
            break
        assert elapsed < DEADLINE, f"still shown after {elapsed:.0f} s"
        time.sleep(0.5)
    assert elapsed < DEADLINE
    remaining = [c.pk for c in comments if c.pk not in (fast.pk, deep.pk)]
    assert shown(after) == set(remaining)  # every other comment still shown
    assert after[API][1] == remaining
    response, body = fetch(nginx, PAGE, old_date)  # the removal is dated: the new page, not a 304
    assert response.status == 200 and fast.pk not in body
    call_command("verify_index", verbosity=0)
    assert purges and all(purge["keys"] == [product_key(SKU)] and PAGE in purge["paths"] for purge in purges)

    if numbering == "stable":
        # Archive pages are counted from the oldest: those older than the deep comment's page keep their
        # ETags (a crawler's or CDN's copy of them stays right); its own page and the newer ones change.
        [home] = [url for url, (_, ids) in before.items() if deep.pk in ids and url != API]
        number = int(home.rsplit("=", 1)[1])
        older = [url for url in before if url.startswith(PAGE + "?page=") and int(url.rsplit("=", 1)[1]) < number]
        assert older and all(after[url][0] == before[url][0] for url in older)
        assert after[home][0] != before[home][0]

    for comment in (fast, deep):
        services.comment_unhide(comment_id=comment.pk, actor=admin_user, reason="appeal")
    call_command("sync_index", once=True, verbosity=0)
    deadline = time.monotonic() + DEADLINE
    while crawl(nginx) != before:  # the same pages, ids and ETags as before the hide
        assert time.monotonic() < deadline, "not back in place"
        time.sleep(0.5)
    call_command("verify_index", verbosity=0)

