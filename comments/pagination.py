"""How a product page numbers its comments, one class per scheme in DRF's style
(rest_framework/pagination.py): the knobs are class attributes, `paginate(request, product)` returns
the page (after reading the query string once), `get_links()` its canonical, previous, next and pager
links, `get_html_context()` what else the template shows of it. product_detail picks a class with
pagination_for() and renders."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from django.conf import settings
from django.core.paginator import InvalidPage
from django.http import Http404

from comments import cursors, seo
from comments.pager import (
    PagerLink,
    archive_href,
    archive_pager_links,
    cursor_href,
    page_href,
    pager_links,
)
from comments.paging import CommentPage
from comments.params import InvalidFilter, parse_page_number, parse_ratings
from comments.recent import posted_keys
from comments.selectors import (
    ArchiveOnLandingPage,
    newest_archive_page,
    numbering_is_stable,
    product_archive_page,
    product_comment_cursor_page,
    product_comment_page,
)
from comments.table.keys import RATINGS
from shop.models import Product


class Redirect(Exception):
    """The page lives at another URL: permanently (one URL per page), or for now (an archive page
    whose comments are all on the landing page)."""

    def __init__(self, url: str, *, permanent: bool):
        super().__init__(url)
        self.url, self.permanent = url, permanent


class BadPageRequest(Exception):
    """A query string no page answers: a 400 page saying why."""


@dataclass(frozen=True)
class PageLinks:
    canonical: str  # absolute
    previous: str | None  # relative to the site, like the pager's
    next: str | None
    pager: list[list[PagerLink]]
    more: str | None = None  # "Load more" (filters and cursors only)


class NewestFirstPagination:
    """`?page=N`, page 1 holding the newest comments, optionally only some ratings (`?rating=3&rating=5`,
    noindex). Every post shifts every page."""

    page_query_param = "page"
    rating_query_param = "rating"
    cursor_query_param = "cursor"

    def paginate(self, request, product: Product) -> CommentPage:
        """The page the request asks for. Http404 for no such page, Redirect, BadPageRequest."""
        self.request, self.product = request, product
        try:
            self.ratings = parse_ratings(request.GET.getlist(self.rating_query_param))
        except InvalidFilter as exc:
            raise Http404(str(exc)) from exc
        self.numbers = request.GET.getlist(self.page_query_param)
        try:
            self.page = self.read_page()
        except cursors.InvalidCursor as exc:
            raise BadPageRequest(str(exc)) from exc
        except InvalidPage as exc:
            raise Http404(str(exc)) from exc
        return self.page

    @cached_property
    def path(self) -> str:
        return self.product.get_absolute_url()

    def read_page(self) -> CommentPage:
        if self.numbers == ["1"]:
            raise Redirect(page_href(self.path, 1, self.ratings), permanent=True)
        number = parse_page_number(self.numbers)
        # Pins show on the first pages only: a deep page never reads the session.
        pinned = posted_keys(self.request, self.product.sku) if number <= settings.COMMENTS_FAST_PAGES else ()
        return product_comment_page(sku=self.product.sku, number=number, ratings=self.ratings, pinned=pinned)

    @property
    def has_form(self) -> bool:
        """The comment form shows on the first unfiltered page only (deeper pages link to it)."""
        return self.page.number == 1 and not self.ratings

    @property
    def max_age(self) -> int:
        return settings.COMMENTS_PAGE_MAX_AGE

    @property
    def noindex(self) -> bool:
        """Filters only re-slice the product's numbered pages: crawlers may follow their links but
        not index them (robots.txt keeps them out too)."""
        return bool(self.ratings)

    def get_links(self) -> PageLinks:
        page, number = self.page, self.page.number
        return PageLinks(
            canonical=self.request.build_absolute_uri(page_href(self.path, number, self.ratings)),
            previous=page_href(self.path, number - 1, self.ratings) if page.has_previous() else None,
            next=page_href(self.path, number + 1, self.ratings) if page.has_next() else None,
            pager=pager_links(self.path, number, page.paginator.num_pages, self.ratings),
            more=self.more_link(),
        )

    @property
    def offers_more(self) -> bool:
        """"Load more" only where robots.txt already keeps crawlers out (filters, cursors): unfiltered
        pages link numbered pages only, so a crawler never meets a disallowed link."""
        return bool(self.ratings)

    def more_link(self) -> str | None:
        if not self.offers_more or not self.page.has_more():
            return None
        return cursor_href(self.path, cursors.encode(self.product.sku, self.ratings, self.page.resume), self.ratings)

    def get_html_context(self, links: PageLinks) -> dict:
        page, product = self.page, self.product
        product_url = self.request.build_absolute_uri(self.path)
        return {
            "page_obj": page,
            "comments": page.object_list,
            "archive": page.archive,
            "landing": False,
            "pager": links.pager,
            "previous_url": links.previous,
            "next_url": links.next,
            "previous_absolute_url": self.request.build_absolute_uri(links.previous) if links.previous else None,
            "next_absolute_url": self.request.build_absolute_uri(links.next) if links.next else None,
            "more_url": links.more,
            # A filtered or cursor page's canonical is its own URL: pointing it at another page while
            # saying noindex would send search engines two contradicting signals.
            "canonical_url": links.canonical,
            "noindex": self.noindex,
            "ratings": self.ratings,
            "rating_choices": [(rating, rating in self.ratings) for rating in RATINGS],
            "rating_stats": page.rating_stats,
            "meta_description": self.meta_description(),
            "json_ld": seo.product_json_ld(product=product, url=product_url, page_url=links.canonical,
                                           comments=page.object_list, ratings=page.ratings),
        }

    def meta_description(self) -> str:
        return seo.meta_description(self.product, self.page.paginator.count, self.page.number,
                                    self.page.paginator.num_pages)


class CursorPagination(NewestFirstPagination):
    """`?cursor=...`: "Load more" from where the previous slice stopped (comments/cursors.py). Its
    page is its own canonical and noindex; it continues with its cursor, not numbered neighbours."""

    has_form = False
    noindex = True
    offers_more = True

    def read_page(self) -> CommentPage:
        cursor = self.request.GET.getlist(self.cursor_query_param)
        if self.numbers == ["1"]:
            raise Redirect(page_href(self.path, 1, self.ratings), permanent=True)
        if self.numbers or len(cursor) != 1:
            raise BadPageRequest("A cursor link takes no page number.")
        self.cursor = cursor[0]
        return product_comment_cursor_page(sku=self.product.sku, ratings=self.ratings,
                                           position=cursors.decode(self.cursor, self.product.sku, self.ratings))

    def get_links(self) -> PageLinks:
        links = super().get_links()
        return PageLinks(
            canonical=self.request.build_absolute_uri(cursor_href(self.path, self.cursor, self.ratings)),
            previous=links.previous, next=None, pager=links.pager, more=self.more_link())


class StablePagination(NewestFirstPagination):
    """COMMENTS_PAGE_NUMBERING=stable, unfiltered pages: the landing page (the bare URL) holds the
    newest comments; `?page=N` is archive page N counted from the oldest comment, served only while
    full, so no post changes it (docs/architecture.md, "Stable page numbers"). Its links name only
    pages that exist as long as it does; "Previous" is the newer neighbour, "Next" the older one."""

    def read_page(self) -> CommentPage:
        if not self.numbers:
            return product_comment_page(sku=self.product.sku, number=1,
                                        pinned=posted_keys(self.request, self.product.sku))
        try:
            return product_archive_page(sku=self.product.sku, number=parse_page_number(self.numbers))
        except ArchiveOnLandingPage:
            raise Redirect(self.path, permanent=False) from None

    @property
    def has_form(self) -> bool:
        return not self.page.archive

    @property
    def max_age(self) -> int:
        # An archive page looked up while posts kept arriving may be off by one: the short max-age then.
        if self.page.archive and self.page.settled:
            return settings.COMMENTS_ARCHIVE_MAX_AGE
        return settings.COMMENTS_PAGE_MAX_AGE

    def get_links(self) -> PageLinks:
        number = self.page.number
        if self.page.archive:
            return PageLinks(canonical=self.request.build_absolute_uri(archive_href(self.path, number)),
                             previous=archive_href(self.path, number + 1),
                             next=archive_href(self.path, number - 1) if number > 1 else None,
                             pager=archive_pager_links(self.path, number, 0))
        newest = newest_archive_page(self.page.paginator.count)
        return PageLinks(canonical=self.request.build_absolute_uri(self.path), previous=None,
                         next=archive_href(self.path, newest) if newest else None,
                         pager=archive_pager_links(self.path, None, newest))

    def get_html_context(self, links: PageLinks) -> dict:
        context = super().get_html_context(links)
        if self.page.archive:  # product-wide figures change with every post: archive pages show none
            context.update(rating_stats=None, json_ld=seo.product_json_ld(
                product=self.product, url=self.request.build_absolute_uri(self.path),
                page_url=links.canonical, comments=self.page.object_list, ratings=None))
        context["landing"] = not self.page.archive
        return context

    def meta_description(self) -> str:
        if self.page.archive:
            return seo.archive_description(self.product, self.page)
        return seo.meta_description(self.product, self.page.paginator.count, 1, 1)


def pagination_for(request) -> NewestFirstPagination:
    """Stable numbering covers the unfiltered numbered pages; filters and cursors stay newest first."""
    if request.GET.getlist(NewestFirstPagination.cursor_query_param):
        return CursorPagination()
    if numbering_is_stable() and not request.GET.getlist(NewestFirstPagination.rating_query_param):
        return StablePagination()
    return NewestFirstPagination()
