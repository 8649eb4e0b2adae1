"""The comments table's attributes, and which GSI partition (index group) holds which comments.

Table key: PK (comment id) HASH, SK (creation time, ISO-8601 UTC with microseconds) RANGE.
GSI byProduct: PK2 (SKU) HASH, SK RANGE. GSI byRating: PK2R ("<SKU>/<rating>") HASH, SK RANGE.
Each GSI partition is one group of the pagination index, so a group read from the index and a
Query of its partition agree.
"""
from __future__ import annotations

from django.conf import settings

MEMBER = "PK"  # comment id
SORT_KEY = "SK"  # creation time
GROUP = "PK2"  # product SKU
RATING_GROUP = "PK2R"  # "<SKU>/<rating>"
# An item is in one group per grouping attribute it carries: its product's and its product-and-rating's.
GROUP_ATTRIBUTES = (GROUP, RATING_GROUP)
RATINGS = (1, 2, 3, 4, 5)
RATING_SEPARATOR = "/"  # SKUs cannot contain it (shop.models.Product.sku's validator)


def rating_group(sku: str, rating: int) -> str:
    """The group (and PK2R value) of a product's comments with one rating."""
    return f"{sku}{RATING_SEPARATOR}{rating}"


def product_groups(sku: str) -> list[str]:
    """A product's group and its rating groups."""
    return [sku, *(rating_group(sku, rating) for rating in RATINGS)]


def group_attribute(group: str) -> str:
    """Which attribute (and so which GSI) holds a group: PK2R for "SKU/rating", else PK2."""
    return RATING_GROUP if RATING_SEPARATOR in group else GROUP


def table_name() -> str:
    return settings.DYNAMODB["TABLE"]


def product_index_name() -> str:
    return settings.DYNAMODB["GSI"]


def rating_index_name() -> str:
    return settings.DYNAMODB["RATING_GSI"]


def group_index_name(group: str) -> str:
    return rating_index_name() if group_attribute(group) == RATING_GROUP else product_index_name()
