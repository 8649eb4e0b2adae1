import random
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from itertools import islice

from django.core.management.base import CommandError

from comments import demo
from comments.store import put_comments
from comments.table.keys import PRODUCTS, rating_group
from pagination_index import get_index, sources
from pagination_index.management import ReportingCommand
from shop.models import Product

CHUNK = 500


class Command(ReportingCommand):
    help = "Create demo products and write their comments to DynamoDB with BatchWriteItem."

    def add_arguments(self, parser):
        parser.add_argument("--big", type=int, default=12_000,
                            help="Comments on the flagship product (default: %(default)s).")
        parser.add_argument("--products", type=int, default=10, help="Products in all (default: %(default)s, max 10).")
        parser.add_argument("--comments", type=int, default=400,
                            help="Comments on the busiest of the other products (default: %(default)s).")
        parser.add_argument("--seed", type=int, default=2021, help="Random seed, for repeatable data.")
        parser.add_argument("--if-empty", action="store_true", help="Write comments only if the table is empty.")
        parser.add_argument("--threads", type=int, default=4, help="Parallel BatchWriteItem calls.")
        parser.add_argument("--index", action="store_true",
                            help="Also fill the pagination index from the comments written, instead of reading them "
                                 "back with rebuild_index (DynamoDB Local reads a partition of a million slowly). "
                                 "Stream positions are not noted: a consumer started later replays the seeding.")

    def handle(self, *args, big, products, comments, seed, if_empty, threads, index, **options):
        if min(big, products, comments) < 0 or threads < 1:
            raise CommandError("counts must be >= 0 and --threads >= 1")
        catalogue = demo.catalogue(big, products, comments)
        for item in catalogue:
            Product.objects.update_or_create(
                sku=item.sku, defaults={"name": item.name, "price": item.price, "description": item.description})
        if if_empty and sources[PRODUCTS].has_items():
            self.summary("comments table already has data: products updated, no comments written")
            return
        rng = random.Random(seed)
        total = sum(item.comments for item in catalogue)
        progress = self.progress(total, "seeding comments")
        stream = (comment for item in catalogue for comment in demo.comments_for(item, rng))
        groups: dict[str, list] = defaultdict(list)
        if index:
            stream = _noted(stream, groups)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            for written in pool.map(put_comments, iter(lambda: list(islice(stream, CHUNK)), [])):
                if progress:
                    progress.advance(written)
        if progress:
            progress.finish()
        if index:
            pagination = get_index()
            for group, entries in groups.items():
                pagination.replace(group, entries)  # in any order: replace() sorts
        self.summary(f"{len(catalogue)} products, {total} comments written"
                     + (f", {sum(map(len, groups.values()))} index entries in {len(groups)} groups" if index else ""))


def _noted(comments, groups: dict[str, list]):
    """The comments, each noted in its product's group and its rating group on the way."""
    for comment in comments:
        groups[comment.sku].append((comment.pk, comment.sk))
        groups[rating_group(comment.sku, comment.rating)].append((comment.pk, comment.sk))
        yield comment
