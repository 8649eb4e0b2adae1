import random
import threading
import time

from django.core.management.base import CommandError
from django.utils import timezone

from pagination_index import get_index, sources
from pagination_index.capacity import ReadBudget
from pagination_index.conf import index_settings
from pagination_index.management import ReportingCommand, chosen_sources, reports_unavailable
from pagination_index.management.commands.rebuild_index import fence_seconds
from pagination_index.rebuild import Rebuild, in_waves, pending_units, run_finished, unit_done
from pagination_index.stale import stale_groups, stale_groups_clear
from pagination_index.stream import checkpoint_database
from pagination_index.verify import stream_drift

RUN = "verify_index"


class Command(ReportingCommand):
    help = (
        "Compare the index with the tables of PAGINATION_INDEX['SOURCES'] in full order, group by group, and "
        "print, per group: table count, index count, missing, extra, misordered. Exits non-zero on any drift, "
        "or while groups are marked as having lost stream records; --repair rebuilds the drifted groups (the "
        "stream keeps flowing). Memory does not grow with the table or the group."
    )

    def add_arguments(self, parser):
        parser.add_argument("--source", action="append", default=[], metavar="NAME",
                            help="Verify only this source's groups (repeatable); default: every source.")
        parser.add_argument("--group", action="append", default=[], metavar="VALUE",
                            help="Verify only the groups this group key value names (repeatable), in each source "
                                 "chosen; default: every group.")
        parser.add_argument("--sample", type=int, metavar="K",
                            help="Verify K groups picked at random from the index (a spot check).")
        parser.add_argument("--repair", action="store_true",
                            help="Rebuild each drifted group from the table, as rebuild_index does.")
        parser.add_argument("--workers", type=int, default=1, help="Groups compared at once (default: %(default)s).")
        parser.add_argument("--max-rcu", type=float, default=0, metavar="UNITS",
                            help="Read capacity units per second the run may use (0: no limit).")
        parser.add_argument("--resume", action="store_true",
                            help="Skip the groups a stopped full run of verify_index already compared.")
        parser.add_argument(
            "--recheck-seconds", type=float, default=2.0,
            help="Wait this long and compare a drifted group again before reporting it, so entries sync_index "
                 "is about to apply are not called drift (default: %(default)s; 0 disables).",
        )

    @reports_unavailable
    def handle(self, *args, source, group, sample, repair, workers, max_rcu, resume, recheck_seconds, verbosity,
               **options):
        index = get_index()
        chosen = chosen_sources(source)
        if sample is not None and sample < 1:
            raise CommandError("--sample must be at least 1")
        if workers < 1:
            raise CommandError("--workers must be at least 1")
        self.index, self.recheck_seconds = index, recheck_seconds
        self.budget = ReadBudget(max_rcu)
        self.lock = threading.Lock()
        self.drifted, self.pending, self.groups, self.entries = {}, {}, 0, 0
        full = not group and not sample
        database = checkpoint_database(index)
        if sample:
            held = [g for g in index.groups() if any(s.owns(g) for s in chosen)]
            picked = set(random.sample(held, min(sample, len(held))))
        self.progress_bar = self.progress(sum(s.approximate_item_count() for s in chosen) if full else 0,
                                          "verifying (items)", estimated=True)
        checked: list[str] = []
        for chosen_source in chosen:
            if group:
                names = [name for value in group for name in chosen_source.named_groups(value)]
            elif sample:
                names = sorted(g for g in picked if chosen_source.owns(g))
            else:
                listed = chosen_source.groups(budget=self.budget, segments=max(workers, 4))
                orphans = {g for g in index.groups() if chosen_source.owns(g)} - set(listed)
                names = sorted(set(listed) | orphans)
            checked += names
            run = f"{RUN}:{chosen_source.name}" if full else None
            todo = pending_units(names, run=run, resume=resume, using=database) if run else names
            in_waves(todo, lambda wave, s=chosen_source, r=run: self._verify(s, wave, r, database),
                     workers=workers, wave=1)
            if run:
                run_finished(run, using=database)
        if self.progress_bar:
            self.progress_bar.finish()
        every = full and len(chosen) == len(sources.names())
        checked_groups = None if every else checked
        marks = stale_groups(checked_groups, using=database)
        if repair and (self.drifted or marks):
            for chosen_source in chosen:
                marked = {g for g in marks if g != "*" and chosen_source.owns(g)}
                if checked_groups is not None:
                    marked &= set(checked_groups)
                drifted = {g for g, owner in self.drifted.items() if owner is chosen_source}
                self._repair(chosen_source, sorted(drifted | marked), database=database)
            if every:
                stale_groups_clear(groups=None, before=self.repair_started, using=database)
            self.drifted, marks = {}, stale_groups(checked_groups, using=database)
        for name, reason in marks.items():
            self.stderr.write(self.style.ERROR(f"needs rebuild: {name}: {reason}"))
        summary = f"{self.groups} group(s), {self.entries:,} table entries"
        if self.drifted or marks:
            raise CommandError(
                f"drift in {len(self.drifted)} of {summary}; {len(marks)} group mark(s) from lost stream records. "
                "Run `verify_index --repair` or `rebuild_index`."
            )
        if self.pending:  # the files backend's write-ahead log: already in every read, folded in by a commit
            summary += (f"; {len(self.pending)} group(s) hold {sum(self.pending.values()):,} change(s) pending "
                        "commit (read already, not drift)")
        self.summary(f"index matches the table: {summary}")

    def _verify(self, source, groups, run, database):
        for group in groups:
            drift = stream_drift(self.index, group, self._ticking(source.group_entries(group, budget=self.budget)))
            if not drift.ok and self.recheck_seconds > 0:
                time.sleep(self.recheck_seconds)
                drift = stream_drift(self.index, group, source.group_entries(group, budget=self.budget))
            with self.lock:
                self.groups += 1
                self.entries += drift.table_count
                if not drift.ok:
                    self.drifted[group] = source
                if drift.pending:
                    self.pending[group] = drift.pending
                if self.verbosity >= 2 or not drift.ok:
                    self._report(drift)
            if run:
                unit_done(group, run=run, using=database)

    def _ticking(self, entries):
        """The entries, advancing the progress bar as they pass."""
        if not self.progress_bar:
            yield from entries
            return
        number = 0
        for number, entry in enumerate(entries, start=1):
            if number % 1000 == 0:
                with self.lock:
                    self.progress_bar.advance(1000)
            yield entry
        with self.lock:
            self.progress_bar.advance(number % 1000)

    def _report(self, drift):
        line = (f"{drift.group}: table {drift.table_count}, index {drift.index_count}, missing {drift.missing}, "
                f"extra {drift.extra}, misordered {drift.misordered}")
        if drift.pending:  # in the index's reads already, waiting for a commit: not drift
            line += f", pending commit {drift.pending}"
        for problem in drift.problems:
            line += f"; {problem}"
        self.stdout.write(self.style.SUCCESS(line) if drift.ok else self.style.ERROR(line))

    def _repair(self, source, groups, *, database):
        """Rebuild the drifted groups the way rebuild_index does: fenced, read afresh, swapped."""
        self.repair_started = getattr(self, "repair_started", None) or timezone.now()
        rebuild = Rebuild(index=self.index, source=source, using=database, budget=self.budget,
                          settle_seconds=index_settings.REBUILD["SETTLE_SECONDS"], fence_seconds=fence_seconds())
        in_waves(groups, rebuild.wave, workers=1, wave=50)
        if self.verbosity >= 1:
            for group in groups:
                self.stdout.write(f"repaired {group}")
