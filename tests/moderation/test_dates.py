"""A moderation action dates the product's pages (Product.comments_changed_at): after a hide, a client
revalidating its old copy with If-Modified-Since or If-None-Match gets the new page, not a 304, and the
sitemap's lastmod for the product and its pages moves, with the caches on (the product row cached)."""
from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest
from django.core.management import call_command
from django.utils.http import parse_http_date

from comments.store import parse_sk
from moderation import services
from shop.models import Product
from tests import factories
from tests.config import set_cache_seconds, set_pages

SKU = "DATED-1"
URL = f"/products/{SKU}/"


@pytest.fixture
def seeded(db, comments_table, settings, request):
    settings.COMMENTS_PAGE_NUMBERING = request.param
    set_pages(settings, 5, 2)
    set_cache_seconds(settings, 60)  # the product row is cached: the hide must drop it
    settings.COMMENTS_RENDERED_CACHE_SECONDS = 60
    factories.product(SKU, "Dated dish")
    Product.objects.filter(sku=SKU).update(updated_at=datetime(2019, 1, 1, tzinfo=timezone.utc))  # older than comments
    comments = factories.seed(SKU, 17, seed=5)
    call_command("rebuild_index", group=[SKU], verbosity=0)
    return comments


def lastmods(client) -> dict[str, datetime]:
    """This product's sitemap entries (the product and its numbered pages): {url: lastmod}."""
    found = {}
    for section in ("products", "comment-pages"):
        response = client.get(f"/sitemap-{section}.xml")
        assert response.status_code == 200
        found |= {loc: datetime.fromisoformat(lastmod) for loc, lastmod in re.findall(
            r"<loc>(.*?)</loc>\s*<lastmod>(.*?)</lastmod>", response.content.decode()) if f"/{SKU}/" in loc}
    return found


def page_ids(response) -> list[str]:
    return re.findall(r'id="comment-([0-9a-f]+)"', response.content.decode())


@pytest.mark.parametrize("seeded", ["newest", "stable"], indirect=True)
def test_a_hide_moves_last_modified_and_the_sitemap_lastmod(client, seeded, admin_user):
    comments = seeded
    newest = parse_sk(comments[0].sk)
    old = client.get(URL)
    assert old.status_code == 200 and comments[1].pk in page_ids(old)
    etag, last_modified = old["ETag"], old["Last-Modified"]
    assert parse_http_date(last_modified) == int(newest.timestamp())  # dated by its newest comment
    # The old validators match while nothing changed: the checks below can fail.
    assert client.get(URL, HTTP_IF_MODIFIED_SINCE=last_modified).status_code == 304
    assert client.get(URL, HTTP_IF_NONE_MATCH=etag).status_code == 304
    before = lastmods(client)
    assert before and all(lastmod <= newest for lastmod in before.values())

    assert services.comment_hide(comment_id=comments[1].pk, actor=admin_user, reason="abuse")
    call_command("sync_index", once=True, verbosity=0)

    for headers in ({"HTTP_IF_MODIFIED_SINCE": last_modified}, {"HTTP_IF_NONE_MATCH": etag},
                    {"HTTP_IF_MODIFIED_SINCE": last_modified, "HTTP_IF_NONE_MATCH": etag}):
        response = client.get(URL, **headers)
        assert response.status_code == 200, headers
        assert comments[1].pk not in page_ids(response) and comments[0].pk in page_ids(response)
        assert parse_http_date(response["Last-Modified"]) > parse_http_date(last_modified)
        assert response["ETag"] != etag
    changed_at = Product.objects.get(sku=SKU).comments_changed_at
    assert changed_at is not None and changed_at > newest

    after = lastmods(client)
    assert after.keys() == before.keys()  # 16 comments left: as many pages
    assert all(after[url] > before[url] for url in after.keys() & before.keys())
