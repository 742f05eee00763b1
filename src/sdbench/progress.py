"""Progress of long work, on stderr.

On a terminal: a bar that appears once the work has lasted a second, with as many columns as the terminal's
width leaves room for (description, bar, count, elapsed, ETA; the bar, then the elapsed time, go first). Elsewhere
(CI logs, pipes, files): a plain line every few seconds, and one at the end, so that a long command is never
silent. Disabled (``--quiet``): nothing.

Work is counted (``advance``: n of a total), measured as a fraction (``update`` or calling the object, as the
real-media runners and the probes report), or of unknown length (``total`` None: elapsed time and the last
thing said). Off a terminal a thread of its own (:data:`THREAD_NAME`) prints the lines, also while the work
reports nothing for minutes (a power-loss cell, a range member in another process).
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

#: seconds between two progress lines when stderr is not a terminal
LINE_INTERVAL_S = 5.0
#: seconds before a bar appears on a terminal (short work shows none)
BAR_DELAY_S = 1.0
#: steps of a fraction-measured bar
_FRACTION_STEPS = 1000
#: the name of the thread that prints progress lines (process pools may still fork beside it: it holds no lock
#: but its own while it prints)
THREAD_NAME = "sdbench-progress"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """``total``: how many steps (``advance``), or None for work of unknown length; ``fraction``: the work
    reports the fraction done instead (``update``); ``unit``: what a step is ("cells"), shown after the count."""

    def __init__(self, total: float | None, description: str = "", *, enabled: bool = True, unit: str = "",
                 fraction: bool = False, stream: TextIO | None = None, interval_s: float | None = None) -> None:
        self.fraction = fraction
        self.total = 1.0 if fraction else total
        self.description = description
        self.label = description
        self.unit = unit
        self.done: float = 0
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.tty = enabled and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.interval_s = LINE_INTERVAL_S if interval_s is None else interval_s
        self.t0 = time.monotonic()
        self._last_line = self.t0
        self._lines = 0
        self._bar: Any = None
        self._task: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if enabled and not self.tty:
            self._thread = threading.Thread(target=self._lines_while_working, name=THREAD_NAME, daemon=True)
            self._thread.start()

    # ---- what the work reports ---------------------------------------------------------------
    def advance(self, label: str = "", n: float = 1) -> None:
        """``n`` more steps done; ``label``: what is being done now."""
        self.done += n
        self._show(label)

    def update(self, label: str, fraction: float) -> None:
        """Fraction-measured work: ``fraction`` (0..1) of it done."""
        self.done = max(0.0, min(1.0, fraction)) * (self.total or 1.0)
        self._show(label)

    __call__ = update

    def say(self, label: str) -> None:
        """What is being done now (work of unknown length: the last thing said)."""
        self._show(label)

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self._lines:  # a log that had progress lines gets the last one
            self._line(final=True)

    def _lines_while_working(self) -> None:
        while not self._stop.wait(min(self.interval_s, 1.0) or 0.01):
            if time.monotonic() - self._last_line >= self.interval_s:
                self._line()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- showing it ----------------------------------------------------------------------------
    def _show(self, label: str) -> None:
        if label:
            self.label = label
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            if self._bar is None and now - self.t0 >= BAR_DELAY_S:
                self._start_bar()
            if self._bar is not None:
                self._bar.update(self._task, completed=self._steps(), description=self._short(self.label))
        elif now - self._last_line >= self.interval_s:
            self._line()

    def _steps(self) -> float:
        return self.done * _FRACTION_STEPS if self.fraction else self.done

    def text(self, *, final: bool = False) -> str:
        """The progress line: what, how far, elapsed, and the time left at the rate so far."""
        elapsed = time.monotonic() - self.t0
        parts = [self.description]
        if self.fraction:
            parts.append(f"{self.done:.0%}")
        elif self.total is not None:
            unit = f" {self.unit}" if self.unit else ""
            parts.append(f"{self.done:g}/{self.total:g}{unit}")
        if self.label != self.description:
            parts.append(self.label)
        parts.append(f"elapsed {_clock(elapsed)}")
        if not final and self.total and 0 < self.done < self.total:
            parts.append(f"ETA {_clock(elapsed * (self.total - self.done) / self.done)}")
        return ", ".join(p for p in parts if p)

    def _line(self, final: bool = False) -> None:
        with self._lock:
            self._last_line = time.monotonic()
            self._lines += 1
            print(f"progress: {self.text(final=final)}", file=self.stream, flush=True)

    def _short(self, label: str) -> str:
        width = self._label_width
        return label if len(label) <= width else label[:width - 1] + "…"

    def _start_bar(self) -> None:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress, TaskProgressColumn,
                                   TextColumn, TimeElapsedColumn, TimeRemainingColumn)

        console = Console(file=self.stream)
        width = console.width
        count: Any = TaskProgressColumn() if self.fraction else MofNCompleteColumn()
        # what a column needs; on a narrow terminal the bar goes first, then the elapsed time: the label, the
        # count and the ETA stay whole rather than all being squeezed ("408/... ETA 0:00:...")
        if self.total is None:  # unknown length: what is being done and for how long
            columns: list[Any] = [TimeElapsedColumn()]
            fixed = 10
        else:
            columns = [count, TextColumn("ETA"), TimeRemainingColumn()]
            fixed = 30
            if width >= fixed + 40:
                columns.insert(1, TimeElapsedColumn())
                fixed += 10
        if self.total is not None and width >= fixed + 50:
            columns.insert(0, BarColumn(bar_width=max(10, min(40, width - fixed - 48))))
            fixed += min(40, width - fixed - 48) + 1
        self._label_width = max(12, min(48, width - fixed))
        self._bar = RichProgress(TextColumn(f"{{task.description:<{self._label_width}}}"), *columns,
                                 console=console, transient=True)
        self._bar.start()
        total = _FRACTION_STEPS if self.fraction else self.total
        self._task = self._bar.add_task(self._short(self.label), total=total, completed=self._steps())

    _label_width = 48
