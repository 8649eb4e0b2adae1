import threading
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connections
from django.utils import timezone

from pagination_index import get_index, get_source
from pagination_index.management import ReportingCommand, reports_unavailable, stream_arn
from pagination_index.stale import stale_groups_clear
from pagination_index.stream import checkpoint_database, stream_paused


class Command(ReportingCommand):
    help = (
        "Refill index groups from the comments table: one Query per product with --product, "
        "else a parallel Scan of the whole table. Each group is swapped in atomically. The stream "
        "consumers are paused (their shard leases taken) from before the read to the swap, and resume "
        "from where they were, so writes made meanwhile reach the rebuilt groups."
    )

    def add_arguments(self, parser):
        parser.add_argument("--product", action="append", default=[], metavar="SKU",
                            help="Rebuild only this product's groups: its own and its rating groups (repeatable).")
        parser.add_argument("--segments", type=int, default=4, help="Parallel Scan segments for a full rebuild.")
        parser.add_argument("--if-empty", action="store_true",
                            help="Do nothing unless the index is empty while the table is not.")
        parser.add_argument("--workers", type=int, default=1,
                            help="Groups swapped in at once (each group is independent; the files and Redis "
                                 "backends build several in parallel).")

    @reports_unavailable
    def handle(self, *args, product, segments, workers, if_empty, **options):
        index, source = get_index(), get_source()
        if workers < 1:
            raise CommandError("--workers must be at least 1")
        if if_empty and (index.groups() or not source.has_items()):
            self.note("index already filled (or table empty): nothing to rebuild", level=2)
            return
        if segments < 1:
            raise CommandError("--segments must be at least 1")
        started = timezone.now()
        arn = stream_arn(source)
        with stream_paused(index=index, stream_arn=arn, lease_seconds=settings.SYNC_INDEX_LEASE_SECONDS):
            groups = self._read(source, product, segments)
            if not product:
                for stale in set(index.groups()) - set(groups):
                    groups[stale] = []
            progress = self.progress(len(groups), "swapping groups")
            lock = threading.Lock()

            def swap(item):
                index.replace(*item)
                if progress:
                    with lock:
                        progress.advance()

            if workers == 1:
                for item in sorted(groups.items()):
                    swap(item)
            else:
                def swap_in_thread(item):
                    try:
                        swap(item)
                    finally:
                        connections.close_all()  # the thread's own (relational backend)

                with ThreadPoolExecutor(max_workers=workers) as pool:
                    list(pool.map(swap_in_thread, sorted(groups.items())))  # list(): raises the first error
            if progress:
                progress.finish()
            stale_groups_clear(groups=list(groups) if product else None, before=started,
                               using=checkpoint_database(index))
        self.summary(f"rebuilt {len(groups)} groups ({sum(map(len, groups.values())):,} entries); "
                     "sync_index resumes from the stream position noted before the read")

    def _read(self, source, products, segments):
        if products:
            progress = self.progress(len(products), "reading products")
            groups = {}
            for sku in products:
                groups.update(source.related_entries(sku))  # the product's group and its rating groups
                if progress:
                    progress.advance()
        else:
            progress = self.progress(source.approximate_item_count(), "scanning table")
            lock = threading.Lock()

            def on_item():
                with lock:
                    progress.advance()

            groups = source.all_entries(segments=segments, on_item=on_item if progress else None)
        if progress:
            progress.finish()
        return groups
