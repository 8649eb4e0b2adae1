import json
import threading

from botocore.exceptions import ClientError
from django.core.management.base import CommandError

from comments.store import rating_key_updates
from comments.table.client import dynamodb_bulk
from comments.table.keys import table_name
from pagination_index import ReadBudget
from pagination_index.management import ReportingCommand
from pagination_index.models import RebuildCheckpoint

RUN = "backfill_rating_keys"
CHECKPOINT_SECONDS = 1.0  # how often the segments' positions are saved


class Command(ReportingCommand):
    help = (
        "Give every comment written before the byRating GSI its PK2R (\"<SKU>/<rating>\"): a parallel Scan for "
        "items without it and one conditional UpdateItem each (never overwriting a PK2R written meanwhile), "
        "within read and write capacity budgets, checkpointed per page of each segment (--resume). The stream "
        "carries the changes to the index's rating groups; run sync_index afterwards (or let it run)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--segments", type=int, default=8, help="Parallel Scan segments (default: %(default)s).")
        parser.add_argument("--max-rcu", type=float, default=0, metavar="UNITS",
                            help="Read capacity units per second for the Scan (0: no limit).")
        parser.add_argument("--max-wcu", type=float, default=0, metavar="UNITS",
                            help="Write capacity units per second for the updates (0: no limit).")
        parser.add_argument("--resume", action="store_true",
                            help="Go on from where a stopped run left each segment (same --segments).")
        parser.add_argument("--dry-run", action="store_true", help="Count the items that lack PK2R; change nothing.")

    def handle(self, *args, segments, max_rcu, max_wcu, resume, dry_run, **options):
        if segments < 1:
            raise CommandError("--segments must be at least 1")
        try:
            approximate = dynamodb_bulk().describe_table(TableName=table_name())["Table"].get("ItemCount", 0)
        except ClientError as exc:
            raise CommandError(f"cannot read table {table_name()!r}: {exc}") from exc
        run = f"{RUN}:{segments}"  # a segment's position means nothing under another segment count
        checkpoints = RebuildCheckpoint.objects.filter(run=run)
        if not resume or dry_run:
            checkpoints.delete()
        saved = dict(checkpoints.values_list("unit", "position"))
        progress = self.progress(approximate, "scanning comments")
        reads, writes = ReadBudget(max_rcu), ReadBudget(max_wcu)
        lock = threading.Lock()
        results: list[tuple[int, int]] = []
        errors: list[BaseException] = []

        def segment(number: int) -> None:
            unit = str(number)
            if unit in saved and not saved[unit]:
                return  # finished by the run being resumed

            def on_page(scanned: int, next_start: dict | None) -> None:
                with lock:
                    positions[unit] = json.dumps(next_start) if next_start else ""
                    if progress:
                        progress.advance(scanned)

            try:
                start = json.loads(saved[unit]) if saved.get(unit) else None
                found = rating_key_updates(segment=number, segments=segments, dry_run=dry_run, start=start,
                                           reads=reads, writes=writes, on_page=on_page)
                with lock:
                    results.append(found)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        def save_positions() -> None:
            """The segments' positions, written by this thread (the Scan threads touch no database)."""
            with lock:
                pending = dict(positions)
                positions.clear()
            if dry_run:
                return
            for unit, position in pending.items():
                RebuildCheckpoint.objects.update_or_create(run=run, unit=unit, defaults={"position": position})

        positions: dict[str, str] = {}
        threads = [threading.Thread(target=segment, args=(n,), daemon=True) for n in range(segments)]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(CHECKPOINT_SECONDS)
                save_positions()
        save_positions()
        if errors:
            raise CommandError(f"backfill stopped ({errors[0]}); run it again with --resume to go on") from errors[0]
        if progress:
            progress.finish()
        if not dry_run:
            checkpoints.delete()
        missing = sum(found for found, _ in results)
        updated = sum(written for _, written in results)
        if dry_run:  # the count asked for: printed at every verbosity
            self.stdout.write(self.style.SUCCESS(f"{missing} comments lack PK2R (dry run: nothing changed)"))
        else:
            self.summary(f"{updated} of {missing} comments without PK2R updated")
