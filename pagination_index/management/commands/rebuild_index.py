import threading

from django.conf import settings
from django.core.management.base import CommandError
from django.utils import timezone

from pagination_index import get_index, get_source
from pagination_index.capacity import ReadBudget
from pagination_index.management import ReportingCommand, reports_unavailable, stream_arn
from pagination_index.rebuild import Rebuild, in_waves, note_unread_shards, pending_units, run_finished
from pagination_index.stale import stale_groups_clear
from pagination_index.stream import checkpoint_database

RUN = "rebuild_index"


class Command(ReportingCommand):
    help = (
        "Refill index groups from the comments table, product by product: one Query of each product's "
        "GSI partition streams its group newest first into the index (its rating groups with it), and the "
        "groups are swapped in atomically. The stream keeps flowing: only the products being rebuilt "
        "at that moment have their writes held back, and replayed after their swap. Memory does not "
        "grow with the table or the product; --resume continues a run that was stopped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--product", action="append", default=[], metavar="SKU",
                            help="Rebuild only this product's groups: its own and its rating groups (repeatable).")
        parser.add_argument("--if-empty", action="store_true",
                            help="Do nothing unless the index is empty while the table is not.")
        parser.add_argument("--workers", type=int, default=1,
                            help="Products rebuilt at once, each by its own thread (default: %(default)s).")
        parser.add_argument("--max-rcu", type=float, default=0, metavar="UNITS",
                            help="Read capacity units per second the whole run may use (0: no limit); "
                                 "a throttled read halves the rate for a while.")
        parser.add_argument("--resume", action="store_true",
                            help="Skip the products a stopped run of rebuild_index already finished.")
        parser.add_argument("--wave", type=int, default=50, metavar="N",
                            help="Products fenced together (one settle wait each wave; default: %(default)s).")
        parser.add_argument("--settle-seconds", type=float, default=None,
                            help="Wait after fencing a wave before reading it, for writes on their way to the "
                                 "index and the GSI (default: settings.REBUILD_SETTLE_SECONDS).")

    @reports_unavailable
    def handle(self, *args, product, workers, if_empty, max_rcu, resume, wave, settle_seconds, **options):
        index, source = get_index(), get_source()
        if workers < 1 or wave < 1:
            raise CommandError("--workers and --wave must be at least 1")
        if if_empty and (not index.is_empty() or not source.has_items()):
            self.note("index already filled (or table empty): nothing to rebuild", level=2)
            return
        started = timezone.now()
        database = checkpoint_database(index)
        note_unread_shards(index=index, stream_arn=stream_arn(source),
                           lease_seconds=settings.SYNC_INDEX_LEASE_SECONDS)
        progress = self.progress(0 if product else source.approximate_item_count(), "rebuilding (items)",
                                 estimated=True)
        lock = threading.Lock()

        def on_entries(amount):
            with lock:
                progress.advance(amount)

        run = f"{RUN}:products" if product else RUN  # a product run keeps a stopped full run's checkpoints
        rebuild = Rebuild(index=index, source=source, using=database, budget=ReadBudget(max_rcu),
                          settle_seconds=settings.REBUILD_SETTLE_SECONDS if settle_seconds is None else settle_seconds,
                          run=run,
                          fence_seconds=max(4 * settings.SYNC_INDEX_LEASE_SECONDS, 60),
                          on_entries=on_entries if progress else None)
        listed: set[str] = set()

        def listing(units):
            for unit in units:
                listed.add(unit)
                yield unit

        units = listing(product or source.units(budget=rebuild.budget, segments=max(workers, 4)))
        in_waves(pending_units(units, run=run, resume=resume, using=database), rebuild.wave,
                 workers=workers, wave=wave)
        if not product:  # groups the index holds for units the source no longer lists: emptied or refilled
            orphans = sorted({source.unit_of(group) for group in index.groups()} - listed)
            in_waves(orphans, rebuild.wave, workers=workers, wave=wave)
            stale_groups_clear(groups=None, before=started, using=database)
        run_finished(run, using=database)
        if progress:
            progress.finish()
        if not product:  # the files backend's packs, appended to in turn by every group: one piece each again
            packs = index.compact_packs()
            if packs:
                self.note(f"rewrote {packs} pack(s) in one piece, without superseded generations or directories")
        if rebuild.budget.throttles:
            self.warn(f"{rebuild.budget.throttles} read(s) throttled and retried at a lower rate")
        self.summary(f"rebuilt {rebuild.groups} groups ({rebuild.entries:,} entries); "
                     "writes made meanwhile were held for the groups being rebuilt and replayed after each swap")
