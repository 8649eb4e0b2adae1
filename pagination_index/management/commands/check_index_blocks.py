from django.core.management.base import BaseCommand, CommandError

from pagination_index import get_index
from pagination_index.progress import Progress


class Command(BaseCommand):
    help = (
        "Validate the relational index's counted blocks against its entries: every block's count, "
        "the nesting of the levels and each group's count. --repair rebuilds the groups found wrong."
    )

    def add_arguments(self, parser):
        parser.add_argument("--group", action="append", default=[], metavar="SKU",
                            help="Check only this group (repeatable); default: every non-empty group.")
        parser.add_argument("--repair", action="store_true",
                            help="Rebuild the blocks and count of each group found wrong, then check it again.")

    def handle(self, *args, group, repair, verbosity, **options):
        index = get_index()
        if not hasattr(index, "check_blocks"):
            raise CommandError(f"{type(index).__name__} keeps no blocks: nothing to check.")
        groups = group or index.groups()
        progress = Progress(self.stderr, len(groups), "checking blocks") if verbosity >= 1 else None
        wrong = {}
        for name in groups:
            problems = index.check_blocks(name)
            if problems and repair:
                index.rebuild_blocks(name)
                self.stdout.write(f"{name}: repaired ({len(problems)} problems)")
                problems = index.check_blocks(name)
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
        if wrong:
            raise CommandError(f"{len(wrong)} of {len(groups)} groups have wrong blocks"
                               + ("" if repair else "; run with --repair to rebuild them"))
        self.stdout.write(self.style.SUCCESS(f"blocks of {len(groups)} groups match their entries"))
