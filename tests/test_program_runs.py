"""ProgramRuns (a flash write section's programs summed from prefix sums) against the program-by-program loop
of Esp32FlashDriver._write_section_fast, written out here with absolute clock times, as the driver runs it."""
from __future__ import annotations

import math
import random
from array import array

import pytest

from sdbench.media.sim.program_runs import ProgramRuns, exact_below_ns


def _wait_parts(h: float, b: float, poll: float):
    def parts(waits: int) -> tuple[int, int, int]:  # as Esp32FlashDriver._wait_parts
        polls = waits + 1
        return int(polls * h + 0.5), int(polls * b + 0.5), int(waits * poll + 0.5)
    return parts


def _loop(factors, typ, mx, h, b, poll, now):
    """The driver's loop over the programs after a PP (their busies drawn as program_busy_ns draws them):
    [busy, time, late, host, flash, intervals, last busy, last time], the time from ``now``."""
    parts = _wait_parts(h, b, poll)
    period = h + b + poll
    busy_sum = late = host = flash = intervals = 0
    start = now
    busy = add = 0
    for f in factors:
        busy = round(mx if mx < (ns := typ * f) else ns)
        busy_sum += busy
        before = now
        bu = now + busy
        first = now + h + b
        waits = -int((first - bu) // period) if bu > first else 0
        hs, bs, fs = parts(waits)
        now += hs + bs + fs
        host += hs
        flash += fs
        intervals += waits
        if bu > now:
            late += bu - now
            now = bu
        add = now - before
    return [busy_sum, now - start, late, host, flash, intervals, busy, add]


CASES = {
    # typ ns, max ns, host h ns, RDSR b ns, poll interval ns
    "shipped": (150_000.0, 700_000.0, 3612.5, 200.0, 20_000.0),
    "clipped": (150_000.0, 160_000.0, 3643.75, 200.0, 20_000.0),
    "no-poll-interval": (40_000.0, 90_000.0, 417.0, 100.0, 0.0),
    "sub-ns-steps": (900.0, 5_000.0, 0.0625, 0.5, 0.25),
    "busy-within-one-poll": (300.0, 1_000.0, 2_000.0, 200.0, 20_000.0),
}


@pytest.mark.parametrize("case", list(CASES))
def test_sums_are_the_loops_wherever_the_section_starts(case):
    typ, mx, h, b, poll = CASES[case]
    rnd = random.Random(case)
    values = array("d", (math.exp(0.4 * rnd.gauss(0.0, 1.0)) for _ in range(3000)))
    runs = ProgramRuns(typ, mx, h + b, h + b + poll, _wait_parts(h, b, poll))
    below = exact_below_ns(h, b)
    assert below > 0
    for _ in range(60):
        i = rnd.randrange(0, 2900)
        n = rnd.randint(1, 100)
        lo = rnd.randint(max(0, i + n - 2000), i)
        if not runs.covers(values, i, n):
            runs.take(values, lo, min(len(values), lo + 2000))
        assert runs.covers(values, i, n)
        now = rnd.choice((0, rnd.randrange(below // 2), below - 10**10))
        assert runs.sums(i, n) == _loop(values[i:i + n], typ, mx, h, b, poll, now)


def test_a_new_stream_or_a_section_past_the_window_needs_a_new_window():
    values = array("d", [1.0] * 100)
    runs = ProgramRuns(100.0, 200.0, 10.0, 30.0, _wait_parts(5.0, 5.0, 20.0))
    runs.take(values, 10, 50)
    assert runs.covers(values, 10, 40) and not runs.covers(values, 9, 2) and not runs.covers(values, 45, 6)
    assert not runs.covers(array("d", [1.0] * 100), 10, 5)  # equal values, another stream


def test_exactness_needs_steps_in_powers_of_two_of_a_ns():
    assert exact_below_ns(3612.5, 200.0) == (1 << 52) - (1 << 40)
    assert exact_below_ns(1000.0, 0.0625) == (1 << 49) - (1 << 40)
    assert exact_below_ns(1000 / 3, 200.0) == 0       # 333.33.. ns: the loop's sums depend on where it starts
    assert exact_below_ns(0.1, 200.0) == 0
