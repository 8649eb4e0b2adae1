"""Test data written to the real DynamoDB Local table."""
from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta, timezone

from comments.store import Comment, format_sk, put_comments
from shop.models import Product

BASE = datetime(2020, 1, 1, tzinfo=timezone.utc)


def make_comments(sku: str, count: int, *, seed: int = 0, ties: list[tuple[int, int]] = (),
                  rating_weights: list[int] | None = None) -> list[Comment]:
    """`count` comments with distinct SKs, then each (first, last) rank range in `ties` (newest-first
    ranks) made to share one SK, so runs of equal sort keys straddle chosen page boundaries. Ratings
    cycle 1..5, or are drawn with `rating_weights` (for ratings 1..5)."""
    rng = random.Random(seed)
    micros = sorted(rng.sample(range(10**14), count), reverse=True)
    sks = [format_sk(BASE + timedelta(microseconds=m)) for m in micros]
    for first, last in ties:
        for rank in range(first, last + 1):
            sks[rank] = sks[first]
    ratings = ([1 + i % 5 for i in range(count)] if rating_weights is None
               else rng.choices(range(1, 6), rating_weights, k=count))
    return [
        Comment(pk=uuid.UUID(int=rng.getrandbits(128), version=4).hex, sk=sk, sku=sku,
                author=f"Author {i}", body=f"Comment body {i} <b>not bold</b>", rating=rating)
        for i, (sk, rating) in enumerate(zip(sks, ratings))
    ]


def newest_first(comments: list[Comment]) -> list[Comment]:
    return sorted(comments, key=lambda c: c.order_key, reverse=True)


def seed(sku: str, count: int, **kwargs) -> list[Comment]:
    """Write comments for `sku`; returns them in index order (newest first)."""
    comments = make_comments(sku, count, **kwargs)
    put_comments(comments)
    return newest_first(comments)


def product(sku: str, name: str | None = None) -> Product:
    return Product.objects.create(sku=sku, name=name or f"Product {sku}", price="9.99")
