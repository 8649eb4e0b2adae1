"""Writes to the comments table (reads are in selectors.py)."""
from __future__ import annotations

import uuid

from comments import store
from comments.caching import product_caches_forget
from comments.store import Comment
from comments.table.keys import RATINGS

# uuid4 keys do not collide in practice; a few attempts turn "practically never" into "never fails".
CREATE_ATTEMPTS = 3


def new_comment_id() -> str:
    return uuid.uuid4().hex


def comment_create(*, sku: str, author: str, rating: int, body: str) -> Comment:
    """Put one new comment (PK random, SK = now in UTC to the microsecond, PK2 = SKU).

    The put is conditional, so it never overwrites another comment. What pages share of the product
    and of the comment's rating group is read again (product_caches_forget); the GSI itself may still
    lag (see selectors.product_comment_page's `pinned`).
    """
    if rating not in RATINGS:
        raise ValueError(f"rating must be 1..5, not {rating!r}")
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        comment = Comment(pk=new_comment_id(), sk=store.sk_now(), sku=sku, author=author, body=body, rating=rating)
        try:
            store.put_new_comment(comment)
            break
        except store.CommentExists:
            if attempt == CREATE_ATTEMPTS:
                raise
    product_caches_forget(sku)
    return comment
