"""A flash write section's programs of one size, summed in one step from prefix sums over the chip's busy draws.

A write lock section of the ESP32 flash driver is a run of page programs; after each, the driver polls RDSR
until the chip is idle.  How long that wait takes, and what it is made of (commands, bus, the intervals
between polls), depends on the program's busy time alone: on ``busy - (h + b)``, where ``h`` is a command's host
time and ``b`` an RDSR's bus time (Esp32FlashDriver._write_section_fast).  When ``now + h + b`` is exact in
floating point for every ``now`` of the run (``h`` and ``b`` are multiples of a power of two and the clock is
far enough below 2**53 ns), that difference is the same wherever the program starts, so the section's time is
a sum over its programs of a function of each busy time.  :class:`ProgramRuns` keeps the prefix sums of those
functions over a window of the chip's stream of busy factors, so a section of any length costs two row lookups.

Each value is the one the program-by-program loop works out: the busy time as the chip draws it
(NorFlashChip.program_busy_ns: typical x factor, clipped to the maximum, rounded to whole ns), the number of
poll intervals of the wait after it (the loop's own floating-point expression decides each threshold), the
wait's integer host and flash steps (Esp32FlashDriver._wait_parts).  tests/test_esp_flash_paths.py holds the
sections to the command-by-command path.
"""
from __future__ import annotations

from array import array
from fractions import Fraction
from typing import Callable

import numpy as np

#: busy factors a window covers past the section that needed it (one window serves many sections)
WINDOW = 4096


def exact_limit_ns(h: float, b: float) -> int:
    """The clock time up to which ``now + h + b`` (``now`` a whole ns) is exact in doubles, and ``h + b`` too:
    0 when ``h`` or ``b`` is not a multiple of a power of two (then no time is).  A section may be summed only
    if it ends below it (Esp32FlashDriver checks that from the section's longest possible time)."""
    fh, fb = Fraction(h), Fraction(b)
    den = max(fh.denominator, fb.denominator)
    if den & (den - 1) or Fraction(h + b) != fh + fb:
        return 0
    # an integer plus a multiple of 1/den is exact below 2**53 / den
    return (1 << 53) // den


class ProgramRuns:
    """Prefix sums, over a window of a chip's busy factors, of what each program of ``k`` bytes adds to a write
    section: its busy time, its time from the PP to the end of the wait after it (the longer of the wait's
    steps and the busy), the part of that past the wait's last poll, the wait's host and flash steps and its
    number of poll intervals.

    ``typ_ns``, ``max_ns``: the chip's typical and maximum program time of ``k`` bytes; ``hb``: ``h + b``;
    ``period``: the poll period the loop divides by; ``wait_parts(w)``: the integer (host, bus, flash) steps
    of a wait of ``w`` intervals (``w = 0``: one poll that finds the chip idle)."""

    __slots__ = ("typ_ns", "max_ns", "hb", "period", "wait_parts", "values", "lo", "hi", "rows", "starts",
                 "steps", "hosts", "flashes")

    def __init__(self, typ_ns: float, max_ns: float, hb: float, period: float,
                 wait_parts: Callable[[int], tuple[int, int, int]]) -> None:
        self.typ_ns, self.max_ns, self.hb, self.period = typ_ns, max_ns, hb, period
        self.wait_parts = wait_parts
        self.values: array | None = None  # the stream the window was taken from
        self.lo = self.hi = 0              # the window: values[lo:hi]
        self.rows = np.zeros((1, 8), dtype=np.int64)
        #: starts[w - 1]: the least busy time (whole ns) whose wait takes w poll intervals or more
        self.starts: list[int] = []
        self.steps: list[int] = []         # by number of intervals: the wait's time, host and flash steps
        self.hosts: list[int] = []
        self.flashes: list[int] = []

    def covers(self, values: array, i: int, n: int) -> bool:
        return values is self.values and self.lo <= i and i + n <= self.hi

    def sums(self, i: int, n: int) -> list[int]:
        """Over the programs of stream positions ``i..i+n``: [busy, time, late, host, flash, intervals] summed,
        then the last program's busy and time (its busy ends at the section's end minus its time plus its busy)."""
        end = self.rows[i + n - self.lo].tolist()
        start = self.rows[i - self.lo].tolist()
        return [end[0] - start[0], end[1] - start[1], end[2] - start[2], end[3] - start[3], end[4] - start[4],
                end[5] - start[5], end[6], end[7]]

    def take(self, values: array, lo: int, hi: int) -> None:
        """The window ``values[lo:hi]``."""
        f = np.frombuffer(values[lo:hi], dtype=np.float64)  # a copy: the stream may grow meanwhile
        # typical x factor, clipped to the maximum, rounded half to even: program_busy_ns's round(min(..))
        busy = np.rint(np.minimum(f * self.typ_ns, self.max_ns)).astype(np.int64)
        top = int(busy.max()) if len(busy) else 0
        self._grow(top)
        waits = np.searchsorted(np.array(self.starts, dtype=np.int64), busy, side="right")
        step = np.array(self.steps, dtype=np.int64)[waits]
        time = np.maximum(step, busy)
        rows = np.zeros((len(busy) + 1, 8), dtype=np.int64)
        for col, v in enumerate((busy, time, time - step, np.array(self.hosts, dtype=np.int64)[waits],
                                 np.array(self.flashes, dtype=np.int64)[waits], waits)):
            np.cumsum(v, out=rows[1:, col])
        rows[1:, 6] = busy
        rows[1:, 7] = time
        self.values, self.lo, self.hi, self.rows = values, lo, hi, rows

    def _intervals(self, busy: int) -> int:
        """The loop's number of poll intervals after a program of ``busy`` ns (0: the first poll finds it idle)."""
        hb = self.hb
        return -int((hb - busy) // self.period) if busy > hb else 0

    def _grow(self, top: int) -> None:
        """Thresholds and steps up to the number of intervals of a busy of ``top`` ns."""
        if not self.steps:
            self._add_step(0)
        while not self.starts or self.starts[-1] <= top:
            w = len(self.starts) + 1
            # the least whole ns past hb + (w - 1) period, then moved to where the loop's expression turns
            c = max(int(self.hb + (w - 1) * self.period) + 1, self.starts[-1] if self.starts else 0)
            intervals = self._intervals
            while intervals(c) < w:
                c += 1
            while c > (self.starts[-1] if self.starts else 0) and intervals(c - 1) >= w:
                c -= 1
            self.starts.append(c)
            self._add_step(w)

    def _add_step(self, w: int) -> None:
        host, bus, flash = self.wait_parts(w)
        self.steps.append(host + bus + flash)
        self.hosts.append(host)
        self.flashes.append(flash)
