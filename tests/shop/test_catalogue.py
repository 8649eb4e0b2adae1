"""The catalogue is paged: CATALOGUE_PAGE_SIZE products a page in name order, numbered like comment pages."""
import re

import pytest

from pagination_index import get_index
from shop.models import Product


@pytest.fixture
def products(settings):
    settings.CATALOGUE_PAGE_SIZE = 4
    Product.objects.bulk_create(Product(sku=f"CAT-{n:02d}", name=f"Product {n:02d}", price="1.00") for n in range(10))
    get_index().replace("CAT-05", [("c1", "2024-01-01T00:00:00.000000Z"), ("c2", "2024-01-02T00:00:00.000000Z")])


def names(html):
    return re.findall(r'<a href="/products/[^"]+">(Product \d+)</a>', html)


@pytest.mark.django_db
def test_catalogue_pages_in_name_order_with_index_counts(client, products):
    first = client.get("/").content.decode()
    assert names(first) == ["Product 00", "Product 01", "Product 02", "Product 03"]
    assert "Page 1 of 3" in first and 'rel="next" href="/?page=2"' in first and 'rel="prev"' not in first
    second = client.get("/?page=2").content.decode()
    assert names(second) == ["Product 04", "Product 05", "Product 06", "Product 07"]
    assert '<link rel="canonical" href="http://testserver/?page=2">' in second
    assert re.search(r'Product 05</a></td>\s*<td class="num">\$1.00</td>\s*<td class="num">2</td>', second)
    assert 'rel="prev" href="/"' in second and 'rel="next" href="/?page=3"' in second
    assert names(client.get("/?page=3").content.decode()) == ["Product 08", "Product 09"]


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["?page=4", "?page=0", "?page=x", "?page=02", "?page=2&page=3"])
def test_a_page_that_does_not_exist_is_a_404(client, products, query):
    assert client.get(f"/{query}").status_code == 404


@pytest.mark.django_db
def test_page_one_redirects_to_the_bare_url(client, products):
    response = client.get("/?page=1")
    assert response.status_code == 301 and response["Location"] == "/"


@pytest.mark.django_db
def test_a_page_lists_its_products_in_name_order_whatever_their_ids(client, settings):
    """A page's ids come from the (name, id) index and its rows after, by id: the order is the index's."""
    settings.CATALOGUE_PAGE_SIZE = 3
    Product.objects.bulk_create(Product(sku=f"REV-{n}", name=f"Product {9 - n:02d}", price="1.00") for n in range(6))
    assert names(client.get("/").content.decode()) == ["Product 04", "Product 05", "Product 06"]
    assert names(client.get("/?page=2").content.decode()) == ["Product 07", "Product 08", "Product 09"]
