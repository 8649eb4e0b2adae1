"""What the index's management commands share."""
import functools

from django.core.management.base import CommandError

from pagination_index import IndexUnavailable, NoStream, SourceUnavailable
from pagination_index.sources import BaseSource


def stream_arn(source: BaseSource) -> str:
    """The source's stream, or the command's error saying how to give the table one."""
    try:
        return source.stream_arn()
    except NoStream as exc:
        raise CommandError(str(exc)) from exc


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
