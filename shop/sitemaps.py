"""The sitemap: the catalogue, every product page and every numbered comment page.

Every page of a product changes whenever a comment is added (comments are newest first, so each
one shifts all pages and the page count), so every page's lastmod is the product's: its newest
comment's SK (rank 0 of the index) or the product row's update, whichever is later.
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from django.conf import settings
from django.contrib.sitemaps import Sitemap
from django.urls import reverse

from comments.caching import product_last_modified
from comments.pager import page_href
from comments.selectors import product_newest_sk, product_page_count
from pagination_index import index
from shop.models import Product


@dataclass(frozen=True, slots=True)
class ProductPage:
    product: Product
    number: int


class ShopPages:
    """Products and their page counts, read once per sitemap request; lastmods read per product on
    demand, so one sitemap file costs one index read per product it lists."""

    def __init__(self):
        self.products = list(Product.objects.order_by("pk"))
        counts = index.count_many([product.sku for product in self.products])
        self.page_counts = [product_page_count(counts.get(product.sku, 0)) for product in self.products]
        self._lastmods: dict[str, datetime] = {}

    def lastmod(self, product: Product) -> datetime:
        if product.sku not in self._lastmods:
            self._lastmods[product.sku] = product_last_modified(product, product_newest_sk(product.sku))
        return self._lastmods[product.sku]

    def latest_lastmod(self) -> datetime | None:
        return max((self.lastmod(product) for product in self.products), default=None)


class LaterPages(Sequence):
    """Pages 2.. of every product as one lazily sliced sequence (a product with 100,000 pages is
    never listed whole: Django's sitemap paginator asks for len() and one slice)."""

    def __init__(self, shop: ShopPages):
        self.shop = shop
        self.starts = [0]
        for pages in shop.page_counts:
            self.starts.append(self.starts[-1] + pages - 1)

    def __len__(self):
        return self.starts[-1]

    def __getitem__(self, position):
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        if not 0 <= position < len(self):
            raise IndexError(position)
        which = bisect.bisect_right(self.starts, position) - 1
        return ProductPage(self.shop.products[which], position - self.starts[which] + 2)


class ShopSitemap(Sitemap):
    """Shared by the sections: one ShopPages per request (sections are instantiated per request)."""

    @property
    def limit(self):
        return settings.SITEMAP_URLS_PER_FILE

    @cached_property
    def shop(self) -> ShopPages:
        return ShopPages()


class CatalogueSitemap(ShopSitemap):
    def items(self):
        return ["catalogue"]

    def location(self, item):
        return reverse(item)

    def lastmod(self, item):
        return self.shop.latest_lastmod()

    def get_latest_lastmod(self):
        return self.shop.latest_lastmod()


class ProductSitemap(ShopSitemap):
    def items(self):
        return self.shop.products

    def lastmod(self, product):
        return self.shop.lastmod(product)

    def get_latest_lastmod(self):
        return self.shop.latest_lastmod()


class CommentPageSitemap(ShopSitemap):
    @cached_property
    def pages(self) -> LaterPages:
        return LaterPages(self.shop)

    def items(self):
        return self.pages

    def location(self, page: ProductPage):
        return page_href(page.product.get_absolute_url(), page.number)

    def lastmod(self, page: ProductPage):
        return self.shop.lastmod(page.product)

    def get_latest_lastmod(self):
        with_pages = [p for p, pages in zip(self.shop.products, self.shop.page_counts) if pages > 1]
        return max((self.shop.lastmod(product) for product in with_pages), default=None)


SITEMAPS = {"catalogue": CatalogueSitemap, "products": ProductSitemap, "comment-pages": CommentPageSitemap}
