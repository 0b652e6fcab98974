"""One progress display for the long runs (the runner's points, the federated harness's rounds).

At a terminal it is one line redrawn in place (a carriage return, then the line padded over
the last one; no ANSI codes), as wide as the terminal, or 80 columns where the terminal
reports fewer than 20 (a terminal of zero columns still shows it). Anywhere else (a file, a
pipe, CI) it writes one plain line per finished unit, at most one every ``every_s``
seconds, and the last one always: no carriage return, no colour, so a log reads line by line.

The time left is estimated from the steady units: the first one finished in this run is
left out of the rate (it carries the loading, the caches warming and, in the harness, a
round 1 that later methods share), so one slow start does not double the estimate. Until a
second unit has finished it is ``?``. Units may be weighted (the runner counts each point's
estimated cost): the rate is seconds per unit of weight.

tqdm is not used: its time left weighs the first, slow unit like every other, it writes
carriage returns into files, and it hides its bar in a zero-column terminal.
"""

from __future__ import annotations

import shutil
import sys
import time

__all__ = ["Progress", "clock"]

EVERY_S = 10.0
"""Seconds between two lines in a file: a log of a run of hours stays readable, one of
seconds still shows every unit of the first ten seconds."""


def clock(seconds: float) -> str:
    """``seconds`` as h:mm:ss or m:ss."""
    s = int(round(seconds))
    h, m = divmod(s, 3600)
    m, s = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """Progress over ``total`` units of weight, ``done`` of them finished before this run.

    ``update(amount, label)`` after each finished unit; ``label(text)`` names the one under
    way; ``write(line)`` prints a line without breaking the display; ``close()`` at the end.
    ``count`` formats the position shown (default ``n/total unit``). ``stream`` defaults to
    stderr; ``tty`` (default: whether ``stream`` is a terminal) picks the display.
    """

    def __init__(self, total: float, *, done: float = 0, desc: str = "", unit: str = "", stream=None,
                 tty: bool | None = None, every_s: float = EVERY_S, count=None):
        self.stream = sys.stderr if stream is None else stream
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty and isatty()) if tty is None else tty
        self.total, self.done, self.desc, self.unit, self.every_s = float(total), float(done), desc, unit, every_s
        self.count = count or (lambda n, total: f"{n:g}/{total:g} {unit}".rstrip())
        self.t0 = time.perf_counter()
        self.first: tuple[float, float] | None = None  # (time, done) when the first unit of this run finished
        self.last_line = -float("inf")
        self.text, self.width_drawn = "", 0

    # --- the numbers ------------------------------------------------------------------------------
    def left_s(self) -> float | None:
        """Seconds left at the steady rate, None before two units have finished."""
        if self.first is None:
            return None
        t, d = self.first
        steady = self.done - d
        if steady <= 0:
            return None
        return (time.perf_counter() - t) / steady * max(self.total - self.done, 0.0)

    def line(self) -> str:
        left = self.left_s()
        pct = 100.0 * self.done / self.total if self.total else 100.0
        head = f"{self.desc}: " if self.desc else ""
        return (f"{head}{pct:3.0f}% {self.count(self.done, self.total)} [{clock(time.perf_counter() - self.t0)} "
                f"elapsed, {'?' if left is None else clock(left)} left]" + (f" {self.text}" if self.text else ""))

    # --- the display ------------------------------------------------------------------------------
    def _columns(self) -> int:
        cols = shutil.get_terminal_size((80, 24)).columns
        return cols if cols >= 20 else 80

    def _draw(self) -> None:
        if not self.tty:
            return
        text = self.line()[: self._columns() - 1]
        self.stream.write("\r" + text.ljust(self.width_drawn))
        self.stream.flush()
        self.width_drawn = len(text)

    def _erase(self) -> None:
        if self.tty and self.width_drawn:
            self.stream.write("\r" + " " * self.width_drawn + "\r")
            self.width_drawn = 0

    def label(self, text: str) -> None:
        """Name the unit under way."""
        self.text = text
        self._draw()

    def update(self, amount: float = 1) -> None:
        """One unit of weight ``amount`` finished."""
        self.done += amount
        now = time.perf_counter()
        if self.first is None:
            self.first = (now, self.done)
        if self.tty:
            self._draw()
        elif now - self.last_line >= self.every_s or self.done >= self.total * (1 - 1e-9):
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self.last_line = now

    def write(self, text: str) -> None:
        """Print ``text`` on a line of its own, the display redrawn below it."""
        self._erase()
        self.stream.write(f"{text}\n")
        self._draw()

    def close(self) -> None:
        if self.tty and self.width_drawn:
            self.stream.write("\n")
            self.width_drawn = 0
        self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
