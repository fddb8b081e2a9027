"""What the command line shows a person: tables with headers, JSON, a progress bar.

Our own small module rather than a terminal library (rich and the like): embedlog is
embedded in applications, and every application would install the library's
dependencies for the benefit of a handful of admin commands. Tables here are plain
aligned text (they read the same in a terminal, a log or a pipe), and the progress bar
draws itself only on a terminal, falling back to a line now and then elsewhere.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

GAP = "  "


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """``rows`` under ``headers``, each column as wide as its widest cell; numbers to the
    right, text to the left. No rows still prints the headers: an empty listing is clear."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        bool(rows) and all(isinstance(r[i], int | float) or r[i] is None for r in rows)
        for i in range(len(headers))
    ]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if right else cell.ljust(width)
            for cell, width, right in zip(row, widths, numeric, strict=True)
        ]
        lines.append(GAP.join(parts).rstrip())
    return "\n".join(lines)


def fail(message: str) -> int:
    """A command's one-line error on stderr; the exit status of a usage error (2)."""
    print(message, file=sys.stderr)
    return 2


def print_json(value: Any, stream: TextIO | None = None) -> None:
    """One JSON document on stdout, nothing else: what ``--json`` promises."""
    print(json.dumps(value, indent=2, sort_keys=True), file=stream or sys.stdout)


def duration(seconds: float) -> str:
    """``75.0`` -> ``"1:15"``; ``3725.0`` -> ``"1:02:05"``."""
    s = max(0, round(seconds))
    hours, rest = divmod(s, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_line(done: int, total: int | None, unit: str, elapsed: float, width: int = 24) -> str:
    """The text of a progress bar: ``[#####.....] 120/400 ledgers 60.0/s 0:04 left``.

    Without a total (work of unknown size) there is no bar and no time left, only the
    count and the rate.
    """
    rate = done / elapsed if elapsed > 0 else 0.0
    rate_text = f"{rate:,.1f}/s"
    if total is None:
        return f"{done:,} {unit} {rate_text}"
    fraction = min(1.0, done / total) if total else 1.0
    filled = int(fraction * width)
    bar = "#" * filled + "." * (width - filled)
    if done >= total:
        left = f"done in {duration(elapsed)}"
    elif rate > 0:
        left = f"{duration((total - done) / rate)} left"
    else:
        left = "time left unknown"
    return f"[{bar}] {done:,}/{total:,} {unit} {rate_text} {left}"


class Progress:
    """A progress bar on ``stream`` (stderr), so stdout stays the command's output.

    On a terminal it redraws one line in place at most ``redraw`` times a second; on
    anything else (a log, a pipe) it writes a full line at most every ``every`` seconds,
    and always the last one.
    """

    def __init__(
        self,
        unit: str,
        total: int | None = None,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        every: float = 1.0,
        redraw: float = 10.0,
    ) -> None:
        self.unit = unit
        self.total = total
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.interval = 1.0 / redraw if self.tty else every
        self.start = time.monotonic()
        self.last = float("-inf")
        self.drawn = False
        self.done = 0
        self.shown = -1  # the count last drawn: a finished bar is drawn once

    def update(
        self, done: int, total: int | None = None, note: str = "", *, force: bool = False
    ) -> None:
        """``force``: draw now whatever the interval (the last count of work that
        stopped early, say)."""
        if total is not None:
            self.total = total
        self.done = done
        now = time.monotonic()
        finished = self.total is not None and done >= self.total
        due = force or finished or now - self.last >= self.interval
        if not self.enabled or not due or (finished and self.shown == done):
            return
        self.last = now
        self.shown = done
        text = progress_line(done, self.total, self.unit, now - self.start)
        if note:
            text += f" ({note})"
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
            self.drawn = True
            if finished:
                self.close()
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def advance(self, n: int = 1, note: str = "") -> None:
        self.update(self.done + n, note=note)

    def close(self) -> None:
        """End the bar's line on a terminal (the next output starts on its own line)."""
        if self.tty and self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False

    def say(self, message: str) -> None:
        """A message of its own line, above the bar."""
        if not self.enabled:
            return
        if self.tty and self.drawn:
            self.stream.write("\r\x1b[K")
            self.drawn = False
        print(message, file=self.stream, flush=True)


__all__ = ["Progress", "duration", "print_json", "progress_line", "table"]
