"""What a product page tells search engines: title, description, canonical, prev/next, JSON-LD."""
import json
import re
from html.parser import HTMLParser
from urllib.parse import urlencode

import pytest
from django.core.management import call_command
from hypothesis import given
from hypothesis import strategies as st

from comments import cursors
from comments.seo import SCRIPT_ESCAPES, script_safe
from comments.store import Comment, put_comments
from tests import factories
from tests.pages import JSON_LD, json_ld, parse


def head_links(html: str) -> dict:
    return {link["rel"]: link["href"] for link in parse(html)["links"] if link["tag"] == "link" and link.get("rel")}


@pytest.fixture(scope="module")
def seo_comments(module_table):
    return {"SEO-SMALL": factories.seed("SEO-SMALL", 45, seed=1), "SEO-BIG": factories.seed("SEO-BIG", 230, seed=2)}


@pytest.fixture
def seo_products(db, seo_comments):
    products = {sku: factories.product(sku, f"Tea & cakes {sku}") for sku in seo_comments}
    call_command("rebuild_index", group=list(seo_comments), verbosity=0)
    return products


def test_first_page_head(client, seo_products, seo_comments):
    html = client.get("/products/SEO-SMALL/").content.decode()
    assert "<title>Tea &amp; cakes SEO-SMALL · Corner Shop</title>" in html
    assert re.search(r'<meta name="description" content="45 customer comments on Tea &amp; cakes SEO-SMALL\. Page 1 of 3\.', html)
    assert head_links(html) == {"canonical": "http://testserver/products/SEO-SMALL/",
                                "next": "http://testserver/products/SEO-SMALL/?page=2", "icon": "/static/favicon.ico",
                                "stylesheet": "/static/css/shop.css"}


class Outline(HTMLParser):
    """The page's headings in order, and the heading levels inside each comment's <article>."""

    def __init__(self):
        super().__init__()
        self.headings: list[int] = []
        self.comments: list[list[int]] = []
        self.open: list[bool] = []  # the <article>s we are in: is each one a comment?

    def handle_starttag(self, tag, attrs):
        if tag == "article":
            is_comment = "comment" in (dict(attrs).get("class") or "").split()
            self.open.append(is_comment)
            if is_comment:
                self.comments.append([])
        elif re.fullmatch(r"h[1-6]", tag):
            self.headings.append(int(tag[1]))
            if self.open and self.open[-1]:
                self.comments[-1].append(int(tag[1]))

    def handle_endtag(self, tag):
        if tag == "article":
            self.open.pop()


@pytest.mark.parametrize("path", ["/products/SEO-SMALL/", "/products/SEO-BIG/?page=11"])
def test_every_comment_has_a_heading_and_the_outline_skips_no_level(client, seo_products, path):
    """The Nu HTML checker warns "Article lacks heading" for an <article> without one."""
    outline = Outline()
    outline.feed(client.get(path).content.decode())
    assert len(outline.comments) == 20
    assert all(levels == [3] for levels in outline.comments), outline.comments
    assert outline.headings[0] == 1 and outline.headings.count(1) == 1
    assert all(later <= earlier + 1 for earlier, later in zip(outline.headings, outline.headings[1:])), outline.headings


def test_second_page_points_back_to_the_bare_url(client, seo_products):
    html = client.get("/products/SEO-SMALL/?page=2").content.decode()
    assert "<title>Tea &amp; cakes SEO-SMALL – page 2 · Corner Shop</title>" in html
    links = head_links(html)
    assert links["canonical"] == "http://testserver/products/SEO-SMALL/?page=2"
    assert links["prev"] == "http://testserver/products/SEO-SMALL/"
    assert links["next"] == "http://testserver/products/SEO-SMALL/?page=3"
    assert "next" not in head_links(client.get("/products/SEO-SMALL/?page=3").content.decode())


MORE = re.compile(r'<a class="more" rel="nofollow" href="([^"]+)"')


@pytest.mark.parametrize("query", ["", "rating=4&rating=5"])
def test_cursor_pages_are_their_own_canonical(client, seo_products, query):
    """A cursor page is noindex; a canonical naming a numbered, indexable page would contradict that."""
    first = client.get(f"/products/SEO-BIG/?{query}")
    if query:  # filtered pages link their "Load more" cursor
        url = MORE.search(first.content.decode()).group(1).replace("&amp;", "&")
    else:  # unfiltered pages link none: make the one such a link would carry
        url = "/products/SEO-BIG/?" + urlencode({"cursor": cursors.encode("SEO-BIG", (), first.context_data["page_obj"].resume)})
    response = client.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert '<meta name="robots" content="noindex,follow">' in html
    assert head_links(html)["canonical"] == "http://testserver" + url
    assert "page=" not in head_links(html)["canonical"]


def test_json_ld_has_the_reviews_of_the_page_and_an_exact_aggregate(client, seo_products, seo_comments):
    data = json_ld(client.get("/products/SEO-SMALL/?page=2").content.decode())
    comments = seo_comments["SEO-SMALL"]
    assert data["@type"] == "Product" and data["name"] == "Tea & cakes SEO-SMALL"
    assert data["url"] == "http://testserver/products/SEO-SMALL/"
    assert data["offers"]["price"] == "9.99"
    assert [r["reviewBody"] for r in data["review"]] == [c.body for c in comments[20:40]]
    assert data["review"][0]["reviewRating"]["ratingValue"] == comments[20].rating
    assert data["aggregateRating"]["ratingCount"] == 45
    assert data["aggregateRating"]["ratingValue"] == round(sum(c.rating for c in comments) / 45, 2)


@pytest.mark.parametrize("number", [1, 12])
def test_aggregate_from_the_index_rating_groups_when_not_every_rating_is_at_hand(client, seo_products, seo_comments,
                                                                                  number):
    """230 comments: more than one Query of the fast path reads; the aggregate comes from the five
    rating groups' counts in the index (issue 9), still with no scan per page view."""
    data = json_ld(client.get(f"/products/SEO-BIG/?page={number}" if number > 1 else "/products/SEO-BIG/").content.decode())
    comments = seo_comments["SEO-BIG"]
    assert len(data["review"]) == (20 if number == 1 else 10)
    assert data["aggregateRating"]["ratingCount"] == 230
    assert data["aggregateRating"]["ratingValue"] == round(sum(c.rating for c in comments) / 230, 2)


def test_json_ld_survives_script_breaking_text(client, comments_table, db):
    body = 'Great </script><script>alert(1)</script> <!-- & "quotes" \u2028 ünïcode'
    factories.product("SEO-EVIL", "</script>Evil")
    put_comments([Comment(pk="evil1", sk="2024-01-01T00:00:00.000000Z", sku="SEO-EVIL", author="<b>x</b>", body=body, rating=5)])
    html = client.get("/products/SEO-EVIL/").content.decode()
    script = JSON_LD.search(html).group(1)
    assert "<" not in script and ">" not in script
    data = json.loads(script)
    assert data["name"] == "</script>Evil" and data["review"][0]["reviewBody"] == body
    assert data["review"][0]["author"]["name"] == "<b>x</b>"
    assert "<script>alert(1)" not in html


@given(st.text(alphabet=st.sampled_from("<>&/!-\"'aé★ \\u"), max_size=40) | st.text(max_size=40))
def test_script_escapes_as_translate_did(text):
    """seo.script_safe replaces what a str.translate of the same table replaced, and nothing else."""
    table = {ord(character): escape for character, escape in SCRIPT_ESCAPES}
    assert script_safe(text) == text.translate(table)
    assert "<" not in script_safe(text) and ">" not in script_safe(text) and "&" not in script_safe(text)
