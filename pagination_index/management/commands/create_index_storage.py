from pagination_index import get_index
from pagination_index.management import ReportingCommand, reports_unavailable


class Command(ReportingCommand):
    help = (
        "Make what the index backend stores its entries in outside Django's database, if missing, and wait "
        "until it can be used: the DynamoDB backend's table. Other backends have nothing to make (their "
        "tables come with `migrate`). Idempotent; the running site never creates anything."
    )

    @reports_unavailable
    def handle(self, *args, **options):
        made = get_index().create_storage()
        self.summary(f"{made} ready" if made else f"{type(get_index()).__name__}: nothing to make")
