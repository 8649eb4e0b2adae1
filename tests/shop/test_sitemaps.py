"""The sitemap index: every product and comment page, split into files, with the products' lastmod."""
import re
from datetime import datetime, timezone

import pytest
from django.core.management import call_command

from comments.store import parse_sk
from pagination_index import BaseIndex, IndexUnavailable
from shop.models import Product
from tests import factories
from tests.crawler import path_and_query
from tests.config import index_config

OLD = datetime(2019, 1, 1, tzinfo=timezone.utc)
COUNTS = {"MAP-A": 130, "MAP-B": 41, "MAP-C": 0}  # 7, 3 and 1 pages


@pytest.fixture(scope="module")
def map_comments(module_table):
    return {sku: factories.seed(sku, count, seed=9) for sku, count in COUNTS.items() if count}


@pytest.fixture
def map_products(db, map_comments):
    for sku in COUNTS:
        factories.product(sku)
    Product.objects.update(updated_at=OLD)
    call_command("rebuild_index", group=list(map_comments), verbosity=0)


def entries(client, url):
    response = client.get(path_and_query(url.replace("&amp;", "&")))
    assert response.status_code == 200, url
    return re.findall(r"<loc>(.*?)</loc>(?:\s*<lastmod>(.*?)</lastmod>)?", response.content.decode())


def test_sitemap_is_split_and_lists_every_page_once(client, map_products, settings):
    settings.SITEMAP_URLS_PER_FILE = 4
    files = [loc for loc, _ in entries(client, "/sitemap.xml")]
    assert files == ["http://testserver/sitemap-catalogue.xml", "http://testserver/sitemap-products.xml",
                     "http://testserver/sitemap-comment-pages.xml",
                     "http://testserver/sitemap-comment-pages.xml?p=2"]
    urls = [loc for file in files for loc, _ in entries(client, file)]
    assert len(urls) == len(set(urls)) == 1 + 3 + 6 + 2
    assert "http://testserver/products/MAP-A/?page=7" in urls and "http://testserver/products/MAP-C/" in urls
    assert "http://testserver/products/MAP-C/?page=2" not in urls
    assert [len(entries(client, file)) for file in files] == [1, 3, 4, 4]
    assert client.get("/sitemap-comment-pages.xml?p=3").status_code == 404
    assert client.get("/sitemap-comment-pages.xml?p=x").status_code == 404
    assert client.get("/sitemap-nothing.xml").status_code == 404


def test_lastmod_is_the_newest_comment_or_the_product_edit(client, map_products, map_comments):
    lastmods = dict(entries(client, "/sitemap-comment-pages.xml") + entries(client, "/sitemap-products.xml"))
    newest_a = parse_sk(map_comments["MAP-A"][0].sk)
    assert lastmods["http://testserver/products/MAP-A/?page=5"] == newest_a.isoformat()
    assert lastmods["http://testserver/products/MAP-A/"] == newest_a.isoformat()
    assert lastmods["http://testserver/products/MAP-C/"] == OLD.isoformat()
    product = Product.objects.get(sku="MAP-B")
    product.save()  # an edit now is later than any comment
    lastmods = dict(entries(client, "/sitemap-comment-pages.xml"))
    assert lastmods["http://testserver/products/MAP-B/?page=3"] == product.updated_at.isoformat()
    index = client.get("/sitemap.xml")
    assert index["Last-Modified"]


class DownIndex(BaseIndex):
    """An index whose store cannot be reached."""

    def count(self, group):
        raise IndexUnavailable("down")

    def at(self, group, rank):
        raise IndexUnavailable("down")


def test_sitemap_without_the_index_is_503(client, db, settings):
    factories.product("MAP-D")
    settings.PAGINATION_INDEX = index_config(**{"BACKEND": "tests.shop.test_sitemaps.DownIndex"})
    for url in ("/sitemap.xml", "/sitemap-comment-pages.xml", "/sitemap-products.xml"):
        response = client.get(url)
        assert response.status_code == 503 and response["Retry-After"], url
    assert client.get("/robots.txt").status_code == 200
