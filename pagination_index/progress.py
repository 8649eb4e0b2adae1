"""Progress for long commands: a redrawn bar on a terminal, plain periodic lines otherwise.

Commands write progress to stderr (their stdout is the result: reports and the closing summary), and
only at verbosity 1 or more (docs/reference.md, "Command output").
"""
from __future__ import annotations

import time

from django.core.management.base import OutputWrapper


def _unstyled(text: str) -> str:
    return text


def write_plain(stream, text: str, style_func=None) -> None:
    """Write `text` as it is: through a command's OutputWrapper, no line ending added and not in the
    error colour Django gives a command's stderr on a terminal (unless `style_func` is given)."""
    if isinstance(stream, OutputWrapper):
        stream.write(text, style_func=style_func or _unstyled, ending="")
    else:
        stream.write(text)
    stream.flush()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    """`estimated`: the total is a guess (DynamoDB's ItemCount is refreshed every few hours), shown
    as ~N; once the work passes it the bar says so instead of a percentage over 100 and an ETA."""

    def __init__(self, stream, total: int, label: str, *, every_seconds: float = 5.0, width: int = 30,
                 estimated: bool = False):
        self.stream = stream
        self.total = max(total, 0)
        self.estimated = estimated
        self.label = label
        self.done = 0
        self.every_seconds = every_seconds
        self.width = width
        self.started = self._last = time.monotonic()
        self.tty = bool(getattr(stream, "isatty", lambda: False)())

    def advance(self, amount: int = 1) -> None:
        self.done += amount
        now = time.monotonic()
        if self.tty:
            if now - self._last >= 0.1 or self.done >= self.total:
                self._last = now
                self._draw()
        elif now - self._last >= self.every_seconds:
            self._last = now
            write_plain(self.stream, f"{self.label}: {self._figures()}\n")

    def _figures(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        if self.estimated and self.total and self.done > self.total:
            return f"{self.done:,}, past the estimate of ~{self.total:,} ({rate:,.0f}/s)"
        percent = f"{100 * self.done / self.total:5.1f}% " if self.total else ""
        eta = ""
        if self.total and self.done and self.done < self.total:
            eta = f", ETA {_duration((self.total - self.done) / rate)}"
        about = "~" if self.estimated else ""
        done = f"{self.done:,}/{about}{self.total:,}" if self.total else f"{self.done:,}"
        return f"{percent}{done} ({rate:,.0f}/s{eta})"

    def _draw(self) -> None:
        filled = min(int(self.width * self.done / self.total), self.width) if self.total else self.width
        bar = "#" * filled + "-" * (self.width - filled)
        write_plain(self.stream, f"\r{self.label} [{bar}] {self._figures()}")

    def finish(self) -> None:
        if self.tty:
            self._draw()
            write_plain(self.stream, "\n")
        else:
            write_plain(self.stream, f"{self.label}: done, {self._figures()}\n")

