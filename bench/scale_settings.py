"""The settings bench.scale's processes run with: the shop's, with the bench's synthetic table as the
index's sources in place of the comments table's two GSIs (bench/scale.py)."""
from shop.settings import *  # noqa: F401,F403
from shop.settings import PAGINATION_INDEX

_synthetic = {"TABLE": "bench-scale", "GROUP_KEY": "PK2", "SORT_KEY": "SK", "GROUP_PREFIX": ""}
PAGINATION_INDEX = {
    **PAGINATION_INDEX,
    "SOURCES": {
        "products": {**_synthetic, "CLASS": "bench.scale.SyntheticProducts"},
        "ratings": {**_synthetic, "CLASS": "bench.scale.SyntheticRatings"},
    },
}
