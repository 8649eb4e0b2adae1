from django.core.management.base import BaseCommand, CommandError

from pagination_index import get_index
from pagination_index.management import reports_unavailable
from pagination_index.progress import Progress


class Command(BaseCommand):
    help = (
        "Fold write-ahead logs into new generations now (PAGINATION_INDEX_BACKEND=files): every group "
        "with a log, or the groups named. sync_index commits on its own once a log holds "
        "PAGINATION_INDEX_COMMIT_ENTRIES changes or is PAGINATION_INDEX_COMMIT_SECONDS old."
    )

    def add_arguments(self, parser):
        parser.add_argument("--group", action="append", default=[], metavar="GROUP",
                            help="Commit only this group (repeatable), e.g. a SKU or SKU/5.")
        parser.add_argument("--compact", action="store_true",
                            help="Then rewrite in one piece every pack taking more disk blocks than its live "
                                 "generations need (after a bulk load or a full rebuild_index: about 0.7 bytes "
                                 "an entry), or with no directory (written by an older version).")

    @reports_unavailable
    def handle(self, *args, group, verbosity, compact=False, **options):
        index = get_index()
        if not index.write_ahead_log:
            raise CommandError(f"{type(index).__name__} has no write-ahead log to commit (the files backend has)")
        groups = group or index.pending_groups()
        progress = Progress(self.stdout, len(groups), "committing groups") if verbosity >= 1 and groups else None
        committed = 0
        for name in groups:
            committed += index.commit(name)
            if progress:
                progress.advance()
        if progress:
            progress.finish()
        self.stdout.write(self.style.SUCCESS(f"committed {committed} group(s); {len(groups) - committed} had nothing pending"))
        if compact:
            folders = len(index.journal.folders())
            progress = Progress(self.stdout, folders, "compacting packs") if verbosity >= 1 and folders else None
            packs = index.compact_packs(progress=progress)
            if progress:
                progress.finish()
            self.stdout.write(self.style.SUCCESS(f"rewrote {packs} pack(s) in one piece"))
