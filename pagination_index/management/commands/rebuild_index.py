import threading

from django.core.management.base import CommandError
from django.utils import timezone

from pagination_index import get_index, sources
from pagination_index.capacity import ReadBudget
from pagination_index.conf import index_settings
from pagination_index.management import ReportingCommand, chosen_sources, reports_unavailable, stream_arn
from pagination_index.rebuild import Rebuild, in_waves, note_unread_shards, pending_units, run_finished
from pagination_index.stale import stale_groups_clear
from pagination_index.stream import checkpoint_database

RUN = "rebuild_index"


def fence_seconds() -> float:
    """How long a rebuild's fences last unless renewed: several leases, at least a minute."""
    return max(4 * index_settings.SYNC["LEASE_SECONDS"], 60)


class Command(ReportingCommand):
    help = (
        "Refill index groups from the tables of PAGINATION_INDEX['SOURCES'], group by group: one Query of each "
        "group's partition streams it newest first into the index, and the group is swapped in atomically. "
        "The stream keeps flowing: only the groups being rebuilt at that moment have their writes held back, "
        "and replayed after their swap. Memory does not grow with the table or the group; --resume continues "
        "a run that was stopped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--source", action="append", default=[], metavar="NAME",
                            help="Rebuild only this source's groups (repeatable); default: every source.")
        parser.add_argument("--group", action="append", default=[], metavar="VALUE",
                            help="Rebuild only the groups this group key value names (repeatable), in each source "
                                 "chosen.")
        parser.add_argument("--if-empty", action="store_true",
                            help="Do nothing unless the index is empty while the tables are not.")
        parser.add_argument("--workers", type=int, default=1,
                            help="Groups rebuilt at once, each by its own thread (default: %(default)s).")
        parser.add_argument("--max-rcu", type=float, default=0, metavar="UNITS",
                            help="Read capacity units per second the whole run may use (0: no limit); "
                                 "throttled reads are retried by botocore's adaptive mode, which slows down.")
        parser.add_argument("--resume", action="store_true",
                            help="Skip the groups a stopped run of rebuild_index already finished.")
        parser.add_argument("--wave", type=int, default=50, metavar="N",
                            help="Groups fenced together (one settle wait each wave; default: %(default)s).")
        parser.add_argument("--settle-seconds", type=float, default=None,
                            help="Wait after fencing a wave before reading it, for writes on their way to the "
                                 "index and the GSI (default: PAGINATION_INDEX['REBUILD']['SETTLE_SECONDS']).")

    @reports_unavailable
    def handle(self, *args, source, group, workers, if_empty, max_rcu, resume, wave, settle_seconds, **options):
        index = get_index()
        chosen = chosen_sources(source)
        if workers < 1 or wave < 1:
            raise CommandError("--workers and --wave must be at least 1")
        if if_empty and (not index.is_empty() or not any(s.has_items() for s in chosen)):
            self.note("index already filled (or tables empty): nothing to rebuild", level=2)
            return
        started = timezone.now()
        database = checkpoint_database(index)
        for table in sorted({s.table for s in chosen}):
            note_unread_shards(index=index, stream_arn=stream_arn(sources.for_table(table)[0]),
                               lease_seconds=index_settings.SYNC["LEASE_SECONDS"], sources=sources.for_table(table))
        progress = self.progress(0 if group else sum(s.approximate_item_count() for s in chosen),
                                 "rebuilding (items)", estimated=True)
        lock = threading.Lock()

        def on_entries(amount):
            with lock:
                progress.advance(amount)

        budget = ReadBudget(max_rcu)
        settle = index_settings.REBUILD["SETTLE_SECONDS"] if settle_seconds is None else settle_seconds
        groups = entries = 0
        for chosen_source in chosen:
            # A run of some groups keeps a stopped full run's checkpoints.
            run = f"{RUN}:{chosen_source.name}" + (":groups" if group else "")
            rebuild = Rebuild(index=index, source=chosen_source, using=database, budget=budget,
                              settle_seconds=settle, run=run, fence_seconds=fence_seconds(),
                              on_entries=on_entries if progress else None)
            listed: set[str] = set()

            def listing(names):
                for name in names:
                    listed.add(name)
                    yield name

            names = ([name for value in group for name in chosen_source.named_groups(value)] if group
                     else chosen_source.groups(budget=budget, segments=max(workers, 4)))
            in_waves(pending_units(listing(names), run=run, resume=resume, using=database), rebuild.wave,
                     workers=workers, wave=wave)
            if not group:  # groups the index holds that the table no longer has: emptied
                orphans = sorted({g for g in index.groups() if chosen_source.owns(g)} - listed)
                in_waves(orphans, rebuild.wave, workers=workers, wave=wave)
            run_finished(run, using=database)
            groups += rebuild.groups
            entries += rebuild.entries
        if not group and len(chosen) == len(sources.names()):
            stale_groups_clear(groups=None, before=started, using=database)
        if progress:
            progress.finish()
        if not group:  # the files backend's packs, appended to in turn by every group: one piece each again
            packs = index.compact_packs()
            if packs:
                self.note(f"rewrote {packs} pack(s) in one piece, without superseded generations or directories")
        self.summary(f"rebuilt {groups} groups ({entries:,} entries); "
                     "writes made meanwhile were held for the groups being rebuilt and replayed after each swap")
