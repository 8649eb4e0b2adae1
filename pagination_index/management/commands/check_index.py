from django.core.management.base import CommandError

from pagination_index import get_index
from pagination_index.management import ReportingCommand, reports_unavailable


class Command(ReportingCommand):
    help = (
        "Check the index backend's own structures for each group (the relational backend's counted "
        "blocks and counts; backends without such structures have nothing to check), and the store's "
        "format (the Redis backend's members written by older releases, which `rebuild_index` "
        "rewrites). --repair rebuilds the groups found wrong from their own entries."
    )

    def add_arguments(self, parser):
        parser.add_argument("--group", action="append", default=[], metavar="SKU",
                            help="Check only this group (repeatable); default: every non-empty group.")
        parser.add_argument("--repair", action="store_true",
                            help="Rebuild the structures of each group found wrong, then check it again.")

    @reports_unavailable
    def handle(self, *args, group, repair, verbosity, **options):
        index = get_index()
        formats = index.check_format()
        for problem in formats:
            self.stdout.write(f"format: {problem}")
        groups = group or index.groups()
        progress = self.progress(len(groups), "checking groups")
        wrong = {}
        for name in groups:
            problems = index.check_integrity(name)
            if problems and repair:
                index.repair_group(name)
                if verbosity >= 1:
                    self.stdout.write(f"{name}: repaired ({len(problems)} problems)")
                problems = index.check_integrity(name)
            if problems:
                wrong[name] = problems
            if progress:
                progress.advance()
        if progress:
            progress.finish()
        for name, problems in wrong.items():
            for problem in problems if verbosity >= 2 else problems[:5]:
                self.stdout.write(f"{name}: {problem}")
            if verbosity < 2 and len(problems) > 5:
                self.stdout.write(f"{name}: ... {len(problems) - 5} more (-v 2 lists them all)")
        failures = []
        if wrong:
            failures.append(f"{len(wrong)} of {len(groups)} groups have problems"
                            + ("" if repair else "; run with --repair to rebuild them"))
        if formats:
            failures.append("the index's format needs `manage.py rebuild_index` (see above)")
        if failures:
            raise CommandError("; ".join(failures))
        self.summary(f"{type(index).__name__}: {len(groups)} groups pass their integrity checks")
