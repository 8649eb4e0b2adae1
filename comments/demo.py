"""Demo data that shows the point of numbered pages: one product with many thousands of comments."""
from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Iterator

from comments.store import Comment, format_sk


@dataclass(frozen=True)
class DemoProduct:
    sku: str
    name: str
    price: Decimal
    description: str
    comments: int


FIRST_NAMES = ["Ana", "Ben", "Chloé", "Dmitri", "Emeka", "Fatima", "Giulia", "Hiro", "Ingrid", "Jamal", "Kofi",
               "Lena", "Mateo", "Nadia", "Oskar", "Priya", "Quinn", "Rosa", "Sven", "Tomás", "Uma", "Viktor",
               "Wen", "Ximena", "Yusuf", "Zoë", "Aiko", "Björn", "Camille", "Diego"]
LAST_INITIALS = "ABCDEFGHIJKLMNOPRSTVWZ"
OPENINGS = {
    5: ["Absolutely love it.", "Best purchase this year.", "Exceeded my expectations.", "Five stars, no doubt."],
    4: ["Very good overall.", "Solid and well made.", "Happy with it.", "Does what it promises."],
    3: ["It's okay.", "Decent for the price.", "Mixed feelings.", "Average, nothing special."],
    2: ["Somewhat disappointed.", "Not as described.", "Expected more.", "Had some problems."],
    1: ["Would not buy again.", "Broke within a week.", "Very poor quality.", "Returned it."],
}
DETAILS = ["Shipping was quick.", "The packaging was a bit excessive.", "Customer service answered within a day.",
           "My partner uses it every morning.", "Setup took five minutes.", "The colour is slightly darker than in the photos.",
           "Cleaning it is easy.", "It's quieter than my old one.", "The manual could be clearer.",
           "Works fine after three months of daily use.", "Bought a second one as a gift.", "A little heavier than expected."]
RATING_WEIGHTS = [(5, 45), (4, 25), (3, 13), (2, 8), (1, 9)]

START = datetime(2019, 1, 1, tzinfo=timezone.utc)


def catalogue(big: int, products: int, comments: int) -> list[DemoProduct]:
    """The flagship product with `big` comments, then products with hundreds, a few dozen or none."""
    items = [DemoProduct("KETTLE-2000", "Kettle 2000, 1.7 l stainless steel", Decimal("49.90"),
                         "The kettle everyone talks about.", big)]
    names = [("TOASTER-4S", "Four-slice toaster", "39.00"), ("GRINDER-PRO", "Burr coffee grinder", "89.50"),
             ("MUG-SET-6", "Stoneware mugs, set of six", "24.00"), ("FRENCH-PRESS", "French press, 1 l", "29.95"),
             ("SCALE-01", "Kitchen scale", "19.99"), ("TEAPOT-JP", "Cast-iron teapot", "59.00"),
             ("MILK-FROTH", "Milk frother", "34.90"), ("FILTER-100", "Paper filters, 100 pack", "4.50"),
             ("CAFE-SIGN", "Café sign (new)", "12.00")]
    for position, (sku, name, price) in enumerate(names[: max(products - 1, 0)]):
        if position < 4:
            count = comments - 60 * position  # a few with hundreds
        elif position < 6:
            count = 25 + 10 * position  # a few dozen
        else:
            count = 0  # and some with none yet
        items.append(DemoProduct(sku, name, Decimal(price), f"Our {name.lower()}.", max(count, 0)))
    return items


def comments_for(product: DemoProduct, rng: random.Random) -> Iterator[Comment]:
    """Realistic comments with distinct timestamps spread over years, at microsecond precision."""
    span = int((datetime.now(timezone.utc) - START).total_seconds() * 1_000_000)
    offsets = rng.sample(range(span), product.comments) if product.comments else []
    ratings, weights = zip(*RATING_WEIGHTS)
    for offset in offsets:
        rating = rng.choices(ratings, weights)[0]
        body = " ".join([rng.choice(OPENINGS[rating])] + rng.sample(DETAILS, rng.randint(0, 3)))
        yield Comment(
            pk=uuid.UUID(int=rng.getrandbits(128), version=4).hex,
            sk=format_sk(START + timedelta(microseconds=offset)),
            sku=product.sku,
            author=f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_INITIALS)}.",
            body=body,
            rating=rating,
        )
