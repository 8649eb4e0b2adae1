from django.core.management.base import BaseCommand

from comments.schema import create_tables
from pagination_index import aws


class Command(BaseCommand):
    help = "Create the DynamoDB comments table (keys, byProduct GSI, stream) if it does not exist. Idempotent."

    def handle(self, *args, verbosity, **options):
        created = create_tables()
        if verbosity >= 1:
            state = "created" if created else "already exists"
            self.stdout.write(self.style.SUCCESS(f"table {aws.table_name()!r} {state}"))
