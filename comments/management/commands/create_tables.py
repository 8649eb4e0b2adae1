from django.core.management.base import BaseCommand

from comments.schema import add_rating_index, create_tables
from pagination_index import aws


class Command(BaseCommand):
    help = (
        "Create the DynamoDB comments table (keys, byProduct and byRating GSIs, stream) if it does not exist, "
        "or add the byRating GSI to an older table and wait until it is active. Idempotent."
    )

    def handle(self, *args, verbosity, **options):
        created = create_tables()
        added = add_rating_index()
        if verbosity >= 1:
            state = "created" if created else "already exists"
            self.stdout.write(self.style.SUCCESS(f"table {aws.table_name()!r} {state}"))
            if added:
                self.stdout.write(self.style.SUCCESS(
                    f"GSI {aws.rating_index_name()!r} added; run `manage.py backfill_rating_keys` for older comments"))
