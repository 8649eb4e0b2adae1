"""Progress for long commands: a redrawn bar on a terminal, plain periodic lines otherwise."""
from __future__ import annotations

import time


class Progress:
    def __init__(self, stream, total: int, label: str, *, every_seconds: float = 5.0, width: int = 30):
        self.stream = stream
        self.total = max(total, 0)
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
            self.stream.write(f"{self.label}: {self._figures()}\n")
            self.stream.flush()

    def _figures(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        percent = f"{100 * self.done / self.total:5.1f}% " if self.total else ""
        return f"{percent}{self.done:,}/{self.total:,} ({self.done / elapsed:,.0f}/s)"

    def _draw(self) -> None:
        filled = int(self.width * self.done / self.total) if self.total else self.width
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {self._figures()}")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty:
            self._draw()
            self.stream.write("\n")
        else:
            self.stream.write(f"{self.label}: done, {self._figures()}\n")
        self.stream.flush()
