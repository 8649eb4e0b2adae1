"""The comments table's attributes, and which GSI partition (index group) holds which comments.

Table key: PK (comment id) HASH, SK (creation time, ISO-8601 UTC with microseconds) RANGE.
GSI byProduct: PK2 (SKU) HASH, SK RANGE. GSI byRating: PK2R ("<SKU>/<rating>") HASH, SK RANGE.
Each GSI is one source of the pagination index (settings.PAGINATION_INDEX["SOURCES"]: "comments" and
"comment_ratings"), and each of its partitions one group, so a group read from the index and a Query
of its partition agree.
"""
from __future__ import annotations

from django.conf import settings

MEMBER = "PK"  # comment id
SORT_KEY = "SK"  # creation time
GROUP = "PK2"  # product SKU
RATING_GROUP = "PK2R"  # "<SKU>/<rating>"
RATINGS = (1, 2, 3, 4, 5)
RATING_SEPARATOR = "/"  # SKUs cannot contain it (shop.models.Product.sku's validator)
# The pagination index's sources (shop/settings.py declares them).
PRODUCTS = "comments"
PRODUCT_RATINGS = "comment_ratings"


def rating_group(sku: str, rating: int) -> str:
    """The group (and PK2R value) of a product's comments with one rating."""
    return f"{sku}{RATING_SEPARATOR}{rating}"


def rating_groups(sku: str) -> list[str]:
    return [rating_group(sku, rating) for rating in RATINGS]


def table_name() -> str:
    return settings.COMMENTS_TABLE


def product_index_name() -> str:
    return settings.PAGINATION_INDEX["SOURCES"][PRODUCTS]["INDEX"]


def rating_index_name() -> str:
    return settings.PAGINATION_INDEX["SOURCES"][PRODUCT_RATINGS]["INDEX"]
