import threading
from concurrent.futures import ThreadPoolExecutor

from botocore.exceptions import ClientError
from django.core.management.base import CommandError

from comments.store import rating_key_updates
from comments.table.client import dynamodb_bulk
from comments.table.keys import table_name
from pagination_index.management import ReportingCommand


class Command(ReportingCommand):
    help = (
        "Give every comment written before the byRating GSI its PK2R (\"<SKU>/<rating>\"): a Scan for items "
        "without it and one conditional UpdateItem each (never overwriting a PK2R written meanwhile). "
        "The stream carries the changes to the index's rating groups; run sync_index afterwards (or let it run)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--segments", type=int, default=2, help="Parallel Scan segments (default: %(default)s).")
        parser.add_argument("--dry-run", action="store_true", help="Count the items that lack PK2R; change nothing.")

    def handle(self, *args, segments, dry_run, **options):
        if segments < 1:
            raise CommandError("--segments must be at least 1")
        client = dynamodb_bulk()
        try:
            approximate = client.describe_table(TableName=table_name())["Table"].get("ItemCount", 0)
        except ClientError as exc:
            raise CommandError(f"cannot read table {table_name()!r}: {exc}") from exc
        progress = self.progress(approximate, "scanning comments")
        lock = threading.Lock()

        def scanned(count: int) -> None:
            with lock:
                progress.advance(count)

        def segment(number: int) -> tuple[int, int]:
            return rating_key_updates(segment=number, segments=segments, dry_run=dry_run,
                                      on_scanned=scanned if progress else None)

        with ThreadPoolExecutor(max_workers=segments) as pool:
            results = list(pool.map(segment, range(segments)))
        if progress:
            progress.finish()
        missing = sum(found for found, _ in results)
        updated = sum(written for _, written in results)
        if dry_run:  # the count asked for: printed at every verbosity
            self.stdout.write(self.style.SUCCESS(f"{missing} comments lack PK2R (dry run: nothing changed)"))
        else:
            self.summary(f"{updated} of {missing} comments without PK2R updated")
