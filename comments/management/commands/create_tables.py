from django.core.management import call_command

from comments.table.keys import rating_index_name, table_name
from comments.table.schema import add_rating_index, create_tables
from pagination_index import get_index
from pagination_index.management import ReportingCommand


class Command(ReportingCommand):
    help = (
        "Create the DynamoDB comments table (keys, byProduct and byRating GSIs, stream) if it does not exist, "
        "or add the byRating GSI to an older table and wait until it is active; deletion protection and "
        "point-in-time recovery are turned on either way; and the index backend's own storage where it has "
        "one (PAGINATION_INDEX_BACKEND=dynamodb: its table). Idempotent."
    )

    def add_arguments(self, parser):
        parser.add_argument("--backfill", action="store_true",
                            help="When the byRating GSI had to be added, run backfill_rating_keys right away.")

    def handle(self, *args, backfill, verbosity, **options):
        created = create_tables()
        added = add_rating_index(on_wait=self._waiting)
        self.summary(f"table {table_name()!r} {'created' if created else 'already exists'}")
        storage = get_index().create_storage()
        if storage:
            self.summary(f"{storage} ready")
        if added:
            self.summary(f"GSI {rating_index_name()!r} added to the table")
        if added and backfill:
            call_command("backfill_rating_keys", verbosity=verbosity, stdout=self.stdout, stderr=self.stderr)
        elif added:
            self.note("run `manage.py backfill_rating_keys` to give older comments their PK2R")

    def _waiting(self, gsi: dict) -> None:
        """One line per look at a GSI being built: AWS backfills a new GSI on a large table for hours.
        ItemCount and IndexSizeBytes are refreshed by DynamoDB about every six hours."""
        state = gsi.get("IndexStatus", "not listed yet")
        if gsi.get("Backfilling"):
            state += ", backfilling"
        self.note(f"waiting for GSI {rating_index_name()!r}: {state}; {gsi.get('ItemCount', 0):,} items, "
                  f"{gsi.get('IndexSizeBytes', 0):,} bytes so far")
