from django.core.management.base import CommandError

from pagination_index import get_index
from pagination_index.backends.files import FileIndex
from pagination_index.management import ReportingCommand, reports_unavailable


class Command(ReportingCommand):
    help = (
        "Move a files index kept in the older layout (a folder per group, PATH/ab/cd/<digest>/) into "
        "packs (PATH/ab/abcd.pack: many groups' generations a file), in place, keeping every group's "
        "generation and log. The site refuses the older layout (deep pages answer 503) until this has run. "
        "Stop sync_index first; run it again if it is interrupted: it goes on with the groups left."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="Count the groups to move; write nothing.")

    @reports_unavailable
    def handle(self, *args, dry_run, **options):
        index = get_index()
        if not isinstance(index, FileIndex):
            raise CommandError("PAGINATION_INDEX is not the files backend (PAGINATION_INDEX_BACKEND=files).")
        groups = sum(1 for _ in index.old_layout_groups())  # counted first, for the progress bar's total
        if dry_run:
            self.stdout.write(f"would move {groups:,} groups into packs; nothing written")
            return
        progress = self.progress(groups, "moving groups into packs") if groups else None
        entries = moved = 0
        for name_file in index.old_layout_groups():
            entries += index.upgrade_group(name_file)
            moved += 1
            if progress:
                progress.advance()
        if progress:
            progress.finish()
        index.finish_upgrade()
        self.stdout.write(self.style.SUCCESS(
            f"moved {moved:,} groups ({entries:,} entries in their generations) into packs"))
