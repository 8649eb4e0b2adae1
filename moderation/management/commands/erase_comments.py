from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from moderation import services
from pagination_index.management import ReportingCommand, reports_unavailable


class Command(ReportingCommand):
    help = (
        "Erase comments for an erasure request: every comment (shown or hidden) by an author name on a "
        "product (--product SKU --author NAME), and/or the comments with the given ids (--ids, --ids-file). "
        "Each is deleted from the table (the stream takes it out of the index), its copy in the moderation "
        "queue is blanked, the audit log records it, and the product's pages are purged. No match is an "
        "error that changes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--product", metavar="SKU", help="The product whose comments --author names.")
        parser.add_argument("--author", help="The author name, exactly as shown (needs --product).")
        parser.add_argument("--ids", nargs="+", default=[], metavar="ID", help="Comment ids.")
        parser.add_argument("--ids-file", help="A file of comment ids, one a line.")
        parser.add_argument("--reason", default="erasure request", help="Why, for the audit log (default: %(default)s).")
        parser.add_argument("--actor", metavar="USERNAME", help="The staff user the audit log names (default: system).")
        parser.add_argument("--dry-run", action="store_true", help="List what would be erased; change nothing.")

    @reports_unavailable
    def handle(self, *args, product, author, ids, ids_file, reason, actor, dry_run, **options):
        if author is not None and not product:
            raise CommandError("--author needs --product: an erasure by name is per product.")
        if ids_file:
            try:
                with open(ids_file) as lines:
                    ids = [*ids, *(line.strip() for line in lines if line.strip())]
            except OSError as exc:
                raise CommandError(f"cannot read --ids-file: {exc}") from exc
        if author is None and not ids:
            raise CommandError("Name the comments: --product SKU --author NAME, or --ids / --ids-file.")
        user = None
        if actor:
            user = get_user_model().objects.filter(username=actor).first()
            if user is None:
                raise CommandError(f"no user {actor!r}")
        erasure = services.erasure_matches(sku=product, author=author, comment_ids=ids)
        for missing in erasure.missing_ids:
            self.warn(f"no comment {missing}")
        if not erasure.found:
            raise CommandError("No comment matches: nothing was changed.")
        for comment in erasure.found:
            self.note(f"{comment.pk} {comment.sku} {comment.sk} {comment.author!r}"
                      f"{' (hidden)' if comment.hidden else ''}", level=2)
        if dry_run:  # the list asked for: printed at every verbosity
            self.stdout.write(self.style.SUCCESS(
                f"{len(erasure.found)} comment(s) on {len(erasure.skus)} product(s) would be erased "
                "(dry run: nothing changed)"))
            return
        progress = self.progress(len(erasure.found), "erasing")
        done = services.comments_erase(erasure=erasure, actor=user, reason=reason,
                                       on_deleted=progress.advance if progress else None)
        if progress:
            progress.finish()
        self.summary(f"{done.deleted} comment(s) erased on {len(done.skus)} product(s): {', '.join(done.skus)}")
