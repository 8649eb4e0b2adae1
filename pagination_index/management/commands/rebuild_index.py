from django.core.management.base import BaseCommand, CommandError

from pagination_index import get_index, source


class Command(BaseCommand):
    help = (
        "Refill index groups from the comments table: one Query per product with --product, "
        "else a parallel Scan of the whole table. Each group is swapped in atomically."
    )

    def add_arguments(self, parser):
        parser.add_argument("--product", action="append", default=[], metavar="SKU",
                            help="Rebuild only this product's groups: its own and its rating groups (repeatable).")
        parser.add_argument("--segments", type=int, default=4, help="Parallel Scan segments for a full rebuild.")
        parser.add_argument("--if-empty", action="store_true",
                            help="Do nothing unless the index is empty while the table is not.")

    def handle(self, *args, product, segments, if_empty, verbosity, **options):
        index = get_index()
        if if_empty and (index.groups() or not source.table_has_items()):
            if verbosity >= 2:
                self.stdout.write("index already filled (or table empty): nothing to rebuild")
            return
        if segments < 1:
            raise CommandError("--segments must be at least 1")
        if product:
            groups = {group: entries for sku in product for group, entries in source.product_entries(sku).items()}
        else:
            groups = source.all_entries(segments=segments)
            for stale in set(index.groups()) - set(groups):
                groups[stale] = []
        for number, (group, entries) in enumerate(sorted(groups.items()), start=1):
            index.replace(group, entries)
            if verbosity >= 1:
                self.stdout.write(f"[{number}/{len(groups)}] {group}: {len(entries)} entries")
        self.stdout.write(self.style.SUCCESS(f"rebuilt {len(groups)} groups"))
