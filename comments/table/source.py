"""The comments table's two sources, as settings declare them (shop/settings.py), told apart by
their groups: a product's SKU holds no "/", a rating group always does. Both keep the index's
groups unprefixed, as indexes built before sources had names hold them."""
from __future__ import annotations

from pagination_index import TableSource

from comments.table.keys import RATING_SEPARATOR, RATINGS, rating_group


class ProductComments(TableSource):
    """Every comment of a product (GSI byProduct, group = SKU)."""

    def owns(self, group: str) -> bool:
        return RATING_SEPARATOR not in group


class ProductRatingComments(TableSource):
    """A product's comments with one rating (GSI byRating, group = "<SKU>/<rating>")."""

    def owns(self, group: str) -> bool:
        return RATING_SEPARATOR in group

    def named_groups(self, value: str) -> list[str]:
        """A SKU names the product's five rating groups (`rebuild_index --group SKU` rebuilds a product
        whole); "SKU/4" names that one."""
        if RATING_SEPARATOR in value:
            return [value]
        return [rating_group(value, rating) for rating in RATINGS]

    def cache_scope(self, group: str) -> str:
        """The product's: a write to a product's comments invalidates its groups with one number."""
        return group.partition(RATING_SEPARATOR)[0]
