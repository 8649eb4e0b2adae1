"""What the index's management commands share."""
import functools

from django.core.management.base import BaseCommand, CommandError

from pagination_index import IndexUnavailable, NoStream, SourceUnavailable, sources
from pagination_index.progress import Progress, write_plain
from pagination_index.sources import BaseSource, InvalidSourceError


class ReportingCommand(BaseCommand):
    """A command that follows the output rule of docs/reference.md ("Command output"): stdout holds
    the result (reports asked for, and the closing summary line at -v 1 and above); stderr holds how
    the run is going (progress and notes at -v 1, detail at -v 2), warnings at -v 1, and errors always.
    -v 0 is quiet but for errors and the reports a flag asked for."""

    verbosity = 1

    def execute(self, *args, **options):
        self.verbosity = options.get("verbosity", 1)
        return super().execute(*args, **options)

    def progress(self, total: int, label: str, *, estimated: bool = False) -> Progress | None:
        """A progress bar (periodic lines when stderr is not a terminal), or None at -v 0."""
        return Progress(self.stderr, total, label, estimated=estimated) if self.verbosity >= 1 else None

    def note(self, text: str, *, level: int = 1, style_func=None) -> None:
        """A line about how the run is going, on stderr, at verbosity `level` and above."""
        if self.verbosity >= level:
            write_plain(self.stderr, text + "\n", style_func)

    def warn(self, text: str) -> None:
        self.note(text, style_func=self.style.WARNING)

    def summary(self, text: str) -> None:
        """The closing line that says what the command did, on stdout, at -v 1 and above."""
        if self.verbosity >= 1:
            self.stdout.write(self.style.SUCCESS(text))


def stream_arn(source: BaseSource) -> str:
    """The source's stream, or the command's error saying how to give the table one."""
    try:
        return source.stream_arn()
    except NoStream as exc:
        raise CommandError(str(exc)) from exc


def chosen_sources(names: list[str]) -> list[BaseSource]:
    """The sources a command's --source options name (every declared one when none), or its error."""
    try:
        chosen = [sources[name] for name in names] if names else list(sources)
    except InvalidSourceError as exc:
        raise CommandError(str(exc)) from exc
    if not chosen:
        raise CommandError("PAGINATION_INDEX['SOURCES'] declares no source.")
    return chosen


def reports_unavailable(handle):
    """A command's handle(): the table or the index being down is an error message, not a traceback."""
    @functools.wraps(handle)
    def wrapper(*args, **kwargs):
        try:
            return handle(*args, **kwargs)
        except SourceUnavailable as exc:
            raise CommandError(f"The table could not be read: {exc}") from exc
        except IndexUnavailable as exc:
            raise CommandError(f"The index is unavailable: {exc}") from exc

    return wrapper
