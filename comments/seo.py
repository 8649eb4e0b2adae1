"""What a product page tells search engines beyond its HTML: description and schema.org JSON-LD."""
from __future__ import annotations

import json

from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from comments.paging import RatingSummary
from comments.store import Comment
from comments.table.keys import RATINGS
from shop.models import Product

DESCRIPTION_CHARS = 155  # what result pages show of a meta description
# Inside <script>, "</script>" or "<!--" in a comment body would end or hide the script: escape the
# characters that can start them, as django.utils.html.json_script does (its <script> is JSON, not JSON-LD).
SCRIPT_ESCAPES = (("<", "\\u003C"), (">", "\\u003E"), ("&", "\\u0026"))


def meta_description(product: Product, count: int, number: int, num_pages: int) -> str:
    about = f" {product.description}" if product.description else ""
    where = f" Page {number} of {num_pages}." if num_pages > 1 else ""
    noun = "comment" if count == 1 else "comments"
    return Truncator(f"{count:,} customer {noun} on {product.name}.{where}{about}").chars(DESCRIPTION_CHARS)


def archive_description(product: Product, page) -> str:
    """A stable archive page's description: which comments it holds, and nothing a new post changes."""
    about = f" {product.description}" if product.description else ""
    span = f"{page.oldest_number:,}-{page.newest_number:,}"
    return Truncator(f"Customer comments {span} on {product.name}, counted from the first.{about}").chars(
        DESCRIPTION_CHARS)


def _review(comment: Comment, page_url: str) -> dict:
    review = {
        "@type": "Review",
        "@id": f"{page_url}#comment-{comment.pk}",
        "author": {"@type": "Person", "name": comment.author or "Anonymous"},
        "datePublished": comment.sk[:10],
        "reviewBody": comment.body,
    }
    if comment.rating in RATINGS:
        review["reviewRating"] = {"@type": "Rating", "ratingValue": comment.rating, "bestRating": 5, "worstRating": 1}
    return review


def product_json_ld(*, product: Product, url: str, page_url: str, comments: list[Comment], ratings: RatingSummary | None) -> SafeString:
    """The Product, its offer, its AggregateRating when known, and the Reviews shown on this page,
    as the body of a <script type="application/ld+json">."""
    data = {
        "@context": "https://schema.org",
        "@type": "Product",
        "@id": f"{url}#product",
        "name": product.name,
        "sku": product.sku,
        "url": url,
        "offers": {"@type": "Offer", "price": f"{product.price:.2f}", "priceCurrency": "USD", "url": url},
    }
    if product.description:
        data["description"] = product.description
    if ratings is not None:
        data["aggregateRating"] = {"@type": "AggregateRating", "ratingValue": ratings.average,
                                   "ratingCount": ratings.count, "bestRating": 5, "worstRating": 1}
    if comments:
        data["review"] = [_review(comment, page_url) for comment in comments]
    return mark_safe(script_safe(json.dumps(data, ensure_ascii=False, separators=(",", ":"))))


def script_safe(text: str) -> str:
    """`text` with SCRIPT_ESCAPES applied. Three str.replace calls, not str.translate: translate with a
    dict walks a non-ASCII string (any accented name on the page) one character at a time
    (bench/notes/performance.md has the measurement)."""
    for character, escape in SCRIPT_ESCAPES:
        text = text.replace(character, escape)
    return text
