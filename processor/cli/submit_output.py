"""How `dispersion submit` speaks: its exit codes, progress on standard error, and the report of an export's
problems (every one of them, up to `SHOWN_PROBLEMS`, then a summary)."""

from __future__ import annotations

import sys
import time
from typing import IO, Final

from processor.exports.checks import SHOWN_PROBLEMS, problem_summary
from processor.exports.layout import Problem

EXIT_INVALID: Final = 1
EXIT_USAGE: Final = 2
EXIT_KAFKA: Final = 3


class Progress:
    """Progress on standard error: one updating line on a terminal, a line every few seconds otherwise."""

    def __init__(self, stream: IO[str] | None = None, *, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0
        self._pending = False

    def update(self, text: str, *, force: bool = False) -> None:
        """Show `text` if enough time passed since the last update (always with `force`)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < (0.2 if self.tty else 3.0):
            return
        self._last = now
        if self.tty:
            self.stream.write(f"\r\x1b[K{text}")
            self._pending = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def done(self, text: str) -> None:
        """Finish the current line with `text`."""
        if not self.enabled:
            return
        if self.tty and self._pending:
            self.stream.write("\r\x1b[K")
        self.stream.write(text + "\n")
        self.stream.flush()
        self._pending = False


def report(problems: list[Problem], progress: Progress) -> None:
    """Every problem (up to `SHOWN_PROBLEMS`) and the closing summary, on standard error."""
    progress.done("")
    for problem in problems[:SHOWN_PROBLEMS]:
        print(str(problem), file=sys.stderr)
    for line in problem_summary(problems):
        print(line, file=sys.stderr)
