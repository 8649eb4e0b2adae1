import random
import threading
import time

from django.conf import settings
from django.core.management.base import CommandError
from django.utils import timezone

from pagination_index import get_index, get_source
from pagination_index.capacity import ReadBudget
from pagination_index.management import ReportingCommand, reports_unavailable
from pagination_index.rebuild import Rebuild, in_waves, pending_units, run_finished, unit_done
from pagination_index.stale import stale_groups, stale_groups_clear
from pagination_index.stream import checkpoint_database
from pagination_index.verify import stream_drift

RUN = "verify_index"


class Command(ReportingCommand):
    help = (
        "Compare the index with the comments table in full order, product by product, and print, per "
        "group: table count, index count, missing, extra, misordered. Exits non-zero on any drift, or while "
        "groups are marked as having lost stream records; --repair rebuilds the drifted products (the "
        "stream keeps flowing). Memory does not grow with the table or the product."
    )

    def add_arguments(self, parser):
        parser.add_argument("--product", action="append", default=[], metavar="SKU",
                            help="Verify only this product's groups (repeatable); default: every product.")
        parser.add_argument("--sample", type=int, metavar="K",
                            help="Verify the products of K groups picked at random from the index (a spot check).")
        parser.add_argument("--repair", action="store_true",
                            help="Rebuild each product with a drifted group from the table, as rebuild_index does.")
        parser.add_argument("--workers", type=int, default=1, help="Products compared at once (default: %(default)s).")
        parser.add_argument("--max-rcu", type=float, default=0, metavar="UNITS",
                            help="Read capacity units per second the run may use (0: no limit).")
        parser.add_argument("--resume", action="store_true",
                            help="Skip the products a stopped full run of verify_index already compared.")
        parser.add_argument(
            "--recheck-seconds", type=float, default=2.0,
            help="Wait this long and compare a drifted group again before reporting it, so entries sync_index "
                 "is about to apply are not called drift (default: %(default)s; 0 disables).",
        )

    @reports_unavailable
    def handle(self, *args, product, sample, repair, workers, max_rcu, resume, recheck_seconds, verbosity, **options):
        index, source = get_index(), get_source()
        if sample is not None and sample < 1:
            raise CommandError("--sample must be at least 1")
        if workers < 1:
            raise CommandError("--workers must be at least 1")
        self.index, self.source, self.recheck_seconds = index, source, recheck_seconds
        self.budget = ReadBudget(max_rcu)
        self.lock = threading.Lock()
        self.drifted, self.pending, self.groups, self.entries = {}, {}, 0, 0
        full = not product and not sample
        database = checkpoint_database(index)
        if product:
            units = product
        elif sample:
            groups = index.groups()
            units = sorted({source.unit_of(group) for group in random.sample(groups, min(sample, len(groups)))})
        else:
            listed = source.units(budget=self.budget, segments=max(workers, 4))
            orphans = {source.unit_of(group) for group in index.groups()} - set(listed)
            units = sorted(set(listed) | orphans)
        self.progress_bar = self.progress(source.approximate_item_count() if full else 0, "verifying (items)",
                                          estimated=True)
        run = RUN if full else None
        todo = pending_units(units, run=RUN, resume=resume, using=database) if full else units
        in_waves(todo, lambda wave: self._verify(wave, run, database), workers=workers, wave=1)
        if self.progress_bar:
            self.progress_bar.finish()
        checked_groups = None if full else [g for unit in units for g in source.unit_groups(unit)]
        marks = stale_groups(checked_groups, using=database)
        if repair and (self.drifted or marks):
            marked = {source.unit_of(group) for group in marks if group != "*"}
            if checked_groups is not None:
                marked &= set(units)
            self._repair(sorted(set(self.drifted) | marked), full=full, database=database)
            self.drifted, marks = {}, stale_groups(checked_groups, using=database)
        if run:
            run_finished(run, using=database)
        for group, reason in marks.items():
            self.stderr.write(self.style.ERROR(f"needs rebuild: {group}: {reason}"))
        checked = f"{self.groups} group(s), {self.entries:,} table entries"
        drifted_groups = sum(len(groups) for groups in self.drifted.values())
        if self.drifted or marks:
            raise CommandError(
                f"drift in {drifted_groups} of {checked}; {len(marks)} group mark(s) from lost stream records. "
                "Run `verify_index --repair` or `rebuild_index`."
            )
        if self.pending:  # the files backend's write-ahead log: already in every read, folded in by a commit
            checked += (f"; {len(self.pending)} group(s) hold {sum(self.pending.values()):,} change(s) pending "
                        "commit (read already, not drift)")
        self.summary(f"index matches the table: {checked}")

    def _verify(self, units, run, database):
        for unit in units:
            for group, entries in self.source.unit_entries(unit, budget=self.budget):
                drift = stream_drift(self.index, group, self._ticking(entries, group == unit))
                if not drift.ok and self.recheck_seconds > 0:
                    time.sleep(self.recheck_seconds)
                    drift = self._again(unit, group)
                with self.lock:
                    self.groups += 1
                    self.entries += drift.table_count
                    if not drift.ok:
                        self.drifted.setdefault(unit, []).append(group)
                    if drift.pending:
                        self.pending[group] = drift.pending
                    if self.verbosity >= 2 or not drift.ok:
                        self._report(drift)
            if run:
                unit_done(unit, run=run, using=database)

    def _again(self, unit, group):
        """Compare one group again, reading its unit afresh (other groups' streams are drained)."""
        found = None
        for name, entries in self.source.unit_entries(unit, budget=self.budget):
            if name == group:
                found = stream_drift(self.index, group, entries)
            else:
                for _ in entries:
                    pass
        return found

    def _ticking(self, entries, counted):
        """The entries, advancing the progress bar (by the product groups' items) as they pass."""
        if not (counted and self.progress_bar):
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

    def _repair(self, units, *, full, database):
        """Rebuild the drifted products the way rebuild_index does: fenced, read afresh, swapped."""
        started = timezone.now()
        rebuild = Rebuild(index=self.index, source=self.source, using=database, budget=self.budget,
                          settle_seconds=settings.REBUILD_SETTLE_SECONDS,
                          fence_seconds=max(4 * settings.SYNC_INDEX_LEASE_SECONDS, 60))
        in_waves(units, rebuild.wave, workers=1, wave=50)
        if self.verbosity >= 1:
            for unit in units:
                self.stdout.write(f"repaired {unit}")
        if full:
            stale_groups_clear(groups=None, before=started, using=database)
