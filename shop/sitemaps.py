"""The sitemap: the catalogue, every product page and every numbered comment page.

Newest-first numbering: every page of a product changes whenever a comment is added (each one
shifts all pages and the page count), so every page's lastmod is the product's: its newest
comment's SK (rank 0 of the index), the product row's update or its last moderation action
(Product.comments_changed_at), whichever is later.

Stable numbering (COMMENTS_PAGE_NUMBERING=stable): the sitemap lists the archive pages that are
served (full, not the landing list), and each one's lastmod is its own newest comment's SK (when it
got its comments) or the product's date as above: a post moves the product's lastmod only.
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
from comments.pager import archive_href, page_href
from comments.selectors import (
    archive_page_lastmods,
    newest_archive_page,
    numbering_is_stable,
    product_newest_sk,
    product_page_count,
)
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
        self.counts = index.count_many([product.sku for product in self.products])
        self.stable = numbering_is_stable()
        if self.stable:  # archive pages 1..newest of each product
            self.page_counts = [newest_archive_page(self.counts.get(p.sku, 0)) for p in self.products]
        else:  # pages 1..M; page 1 is the product's own URL
            self.page_counts = [product_page_count(self.counts.get(p.sku, 0)) for p in self.products]
        self._lastmods: dict[str, datetime] = {}
        self._page_lastmods: dict[tuple[str, int], str] = {}

    def lastmod(self, product: Product) -> datetime:
        if product.sku not in self._lastmods:
            self._lastmods[product.sku] = product_last_modified(product, product_newest_sk(product.sku))
        return self._lastmods[product.sku]

    def page_lastmod(self, page: ProductPage) -> datetime:
        """A numbered page's lastmod: the product's (newest first), or the archive page's own."""
        if not self.stable:
            return self.lastmod(page.product)
        sku = page.product.sku
        if (sku, page.number) not in self._page_lastmods:  # read this page and the next ones' at once
            last = min(page.number + ARCHIVE_LASTMOD_CHUNK - 1, newest_archive_page(self.counts.get(sku, 0)))
            found = archive_page_lastmods(sku, self.counts.get(sku, 0), page.number, last)
            self._page_lastmods.update({(sku, number): sk for number, sk in found.items()})
        sk = self._page_lastmods.get((sku, page.number))
        return product_last_modified(page.product, sk)

    def latest_lastmod(self) -> datetime | None:
        return max((self.lastmod(product) for product in self.products), default=None)


# Archive pages whose lastmods one index read fetches (stable numbering): 20,000 entries at 20 a page.
ARCHIVE_LASTMOD_CHUNK = 1000


class LaterPages(Sequence):
    """The numbered pages of every product as one lazily sliced sequence (a product with 100,000
    pages is never listed whole: Django's sitemap paginator asks for len() and one slice): pages 2..M
    newest first (page 1 is the product's URL), archive pages 1..newest in stable numbering."""

    def __init__(self, shop: ShopPages):
        self.shop = shop
        self.first = 1 if shop.stable else 2
        self.starts = [0]
        for pages in shop.page_counts:
            self.starts.append(self.starts[-1] + pages - self.first + 1)

    def __len__(self):
        return self.starts[-1]

    def __getitem__(self, position):
        if isinstance(position, slice):
            return [self[i] for i in range(*position.indices(len(self)))]
        if not 0 <= position < len(self):
            raise IndexError(position)
        which = bisect.bisect_right(self.starts, position) - 1
        return ProductPage(self.shop.products[which], position - self.starts[which] + self.first)


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
        """A QuerySet, so Django's sitemap paginator loads only one file's products (a LIMIT/OFFSET
        slice) and its lastmods cost one index read per product listed in that file."""
        return Product.objects.order_by("pk")

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
        if self.shop.stable:
            return archive_href(page.product.get_absolute_url(), page.number)
        return page_href(page.product.get_absolute_url(), page.number)

    def lastmod(self, page: ProductPage):
        return self.shop.page_lastmod(page)

    def get_latest_lastmod(self):
        if self.shop.stable:  # each product's newest archive page is its latest
            return max((self.shop.page_lastmod(ProductPage(product, pages))
                        for product, pages in zip(self.shop.products, self.shop.page_counts) if pages), default=None)
        with_pages = [p for p, pages in zip(self.shop.products, self.shop.page_counts) if pages > 1]
        return max((self.shop.lastmod(product) for product in with_pages), default=None)


SITEMAPS = {"catalogue": CatalogueSitemap, "products": ProductSitemap, "comment-pages": CommentPageSitemap}
