import random
import threading
import time

from django.conf import settings
from django.core.management.base import CommandError
from django.utils import timezone

from pagination_index import get_index, get_source
from pagination_index.management import ReportingCommand, reports_unavailable, stream_arn
from pagination_index.stale import stale_groups, stale_groups_clear
from pagination_index.stream import checkpoint_database, stream_paused
from pagination_index.verify import group_drift


class Command(ReportingCommand):
    help = (
        "Compare the index with the comments table in full order and print, per group: table count, "
        "index count, missing, extra, misordered. Exits non-zero on any drift, or while groups are marked "
        "as having lost stream records; --repair swaps drifted groups for the table's entries."
    )

    def add_arguments(self, parser):
        parser.add_argument("--product", action="append", default=[], metavar="SKU",
                            help="Verify only this product's group (repeatable); default: every group.")
        parser.add_argument("--sample", type=int, metavar="K",
                            help="Verify K groups picked at random from the index (a quick spot check).")
        parser.add_argument("--repair", action="store_true",
                            help="Replace each drifted group with the table's entries (stream paused meanwhile).")
        parser.add_argument("--segments", type=int, default=4, help="Parallel Scan segments when reading every group.")
        parser.add_argument(
            "--recheck-seconds", type=float, default=2.0,
            help="Wait this long and compare a drifted group again before reporting it, so entries sync_index "
                 "is about to apply are not called drift (default: %(default)s; 0 disables).",
        )

    @reports_unavailable
    def handle(self, *args, product, sample, repair, segments, recheck_seconds, verbosity, **options):
        index, source = get_index(), get_source()
        if sample is not None and sample < 1:
            raise CommandError("--sample must be at least 1")
        if product:
            table = {sku: list(source.group_entries(sku)) for sku in product}
        elif sample:
            chosen = random.sample(index.groups(), min(sample, len(index.groups())))
            table = {group: list(source.group_entries(group)) for group in chosen}
        else:
            table = self._read_all(source, segments)
            table.update({group: [] for group in index.groups() if group not in table})
        drifted, pending = [], {}
        for group in sorted(table):
            drift = group_drift(index, group, table[group])
            if not drift.ok and recheck_seconds > 0:
                time.sleep(recheck_seconds)
                drift = group_drift(index, group, list(source.group_entries(group)))
            if not drift.ok:
                drifted.append(group)
            if drift.pending:
                pending[group] = drift.pending
            if verbosity >= 2 or not drift.ok:
                self._report(drift)
        full = not product and not sample
        database = checkpoint_database(index)
        marks = stale_groups(None if full else list(table), using=database)
        if repair and (drifted or marks):
            marked = (set(marks) - {"*"}) & set(table)
            self._repair(index, source, sorted(set(drifted) | marked), full=full)
            drifted, marks = [], stale_groups(None if full else list(table), using=database)
        for group, reason in marks.items():
            self.stderr.write(self.style.ERROR(f"needs rebuild: {group}: {reason}"))
        checked = f"{len(table)} group(s), {sum(map(len, table.values())):,} table entries"
        if drifted or marks:
            raise CommandError(
                f"drift in {len(drifted)} of {checked}; {len(marks)} group mark(s) from lost stream records. "
                "Run `verify_index --repair` or `rebuild_index`."
            )
        if pending:  # the files backend's write-ahead log: already in every read, folded in by a commit
            checked += (f"; {len(pending)} group(s) hold {sum(pending.values()):,} change(s) pending commit "
                        "(read already, not drift)")
        self.summary(f"index matches the table: {checked}")

    def _read_all(self, source, segments):
        progress = self.progress(source.approximate_item_count(), "scanning table")
        if progress is None:
            return source.all_entries(segments=segments)
        lock = threading.Lock()

        def on_item():
            with lock:
                progress.advance()

        table = source.all_entries(segments=segments, on_item=on_item)
        progress.finish()
        return table

    def _report(self, drift):
        line = (f"{drift.group}: table {drift.table_count}, index {drift.index_count}, missing {drift.missing}, "
                f"extra {drift.extra}, misordered {drift.misordered}")
        if drift.pending:  # in the index's reads already, waiting for a commit: not drift
            line += f", pending commit {drift.pending}"
        for problem in drift.problems:
            line += f"; {problem}"
        self.stdout.write(self.style.SUCCESS(line) if drift.ok else self.style.ERROR(line))

    def _repair(self, index, source, groups, *, full):
        """Rebuild the drifted groups the way rebuild_index does: stream paused, table re-read."""
        started = timezone.now()
        arn = stream_arn(source)
        with stream_paused(index=index, stream_arn=arn, lease_seconds=settings.SYNC_INDEX_LEASE_SECONDS):
            for group in groups:
                index.replace(group, list(source.group_entries(group)))
                if self.verbosity >= 1:
                    self.stdout.write(f"repaired {group}")
            stale_groups_clear(groups=None if full else groups, before=started, using=checkpoint_database(index))

