"""ProgramRuns (a flash write section's programs summed from prefix sums) against the program-by-program loop
of Esp32FlashDriver._write_section_fast, written out here with absolute clock times, as the driver runs it."""
from __future__ import annotations

import math
import random
from array import array

import pytest

from sdbench.media.sim.program_runs import ProgramRuns, exact_limit_ns


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
    limit = exact_limit_ns(h, b)
    assert limit > 0
    for _ in range(60):
        i = rnd.randrange(0, 2900)
        n = rnd.randint(1, 100)
        lo = rnd.randint(max(0, i + n - 2000), i)
        if not runs.covers(values, i, n):
            runs.take(values, lo, min(len(values), lo + 2000))
        assert runs.covers(values, i, n)
        now = rnd.choice((0, rnd.randrange(limit // 2), limit - 10**10))  # (a section ends below the limit)
        assert runs.sums(i, n) == _loop(values[i:i + n], typ, mx, h, b, poll, now)


def test_a_new_stream_or_a_section_past_the_window_needs_a_new_window():
    values = array("d", [1.0] * 100)
    runs = ProgramRuns(100.0, 200.0, 10.0, 30.0, _wait_parts(5.0, 5.0, 20.0))
    runs.take(values, 10, 50)
    assert runs.covers(values, 10, 40) and not runs.covers(values, 9, 2) and not runs.covers(values, 45, 6)
    assert not runs.covers(array("d", [1.0] * 100), 10, 5)  # equal values, another stream


def test_exactness_needs_steps_in_powers_of_two_of_a_ns():
    assert exact_limit_ns(3612.5, 200.0) == 1 << 52
    assert exact_limit_ns(1000.0, 0.0625) == 1 << 49
    assert exact_limit_ns(1000 / 3, 200.0) == 0       # 333.33.. ns: the loop's sums depend on where it starts
    assert exact_limit_ns(0.1, 200.0) == 0


def _write_near_the_limit(monkeypatch, run_programs: int, before_limit_ns: int):
    """A 64-program section starting ``before_limit_ns`` below the clock time up to which a host with 0.5 ns
    commands sums exactly (a 2 GHz CPU, one cycle)."""
    from dataclasses import fields, replace

    from sdbench.clock import VirtualClock
    from sdbench.media.sim import esp_flash_fast
    from sdbench.media.sim.esp_flash import Esp32FlashDriver, load_esp_flash_host
    from sdbench.media.sim.nor import NorChipConfig, NorFlashChip, load_chip_profile

    monkeypatch.setattr(esp_flash_fast, "RUN_PROGRAMS", run_programs)
    chip_p = replace(load_chip_profile("gd25q32c"), byte_program_first_typ_us=1000.0, byte_program_first_max_us=1500.0,
                     byte_program_next_typ_us=0.0, byte_program_next_max_us=0.0, page_program_typ_us=1000.0,
                     page_program_max_us=1500.0)
    host = replace(load_esp_flash_host(), cpu_hz=2_000_000_000, cmd_overhead_cycles=1, op_overhead_cycles=0,
                   max_write_bytes=1, yield_during_erase=False)
    clock = VirtualClock()
    chip = NorFlashChip(chip_p, clock, NorChipConfig(seed=5))
    drv = Esp32FlashDriver(chip, host)
    drv.erase(0, 1 << 16)
    drv.write(0, bytes(64))  # the clock's tables primed
    limit = exact_limit_ns(drv._cmd_ns, chip.rdsr_ns)
    assert limit == 1 << 52
    clock.advance_ns(limit - before_limit_ns - clock.now_ns(), "other")
    drv.write(4096, bytes(64))
    return (clock.now_ns(), tuple(clock.breakdown_ns().items()), tuple(clock.ledger_ns().items()),
            tuple(clock.commands_snapshot().items()), tuple((f.name, getattr(chip.stats, f.name))
                                                            for f in fields(chip.stats)), chip.busy_until_ns)


@pytest.mark.parametrize("before_limit_ns,summed", [(10**6, False), (10**12, True)])
def test_a_section_that_could_end_past_the_exact_limit_goes_program_by_program(monkeypatch, before_limit_ns, summed):
    """64 programs of about a millisecond: 1 ms before the limit the section could end past it, where a clock
    time plus half a ns is no longer exact (the loop runs); 1000 s before, it is summed.  Either way the result
    is the loop's."""
    sums = []
    real = ProgramRuns.sums
    monkeypatch.setattr(ProgramRuns, "sums", lambda self, i, n: sums.append(n) or real(self, i, n))
    fast = _write_near_the_limit(monkeypatch, 8, before_limit_ns)
    assert (64 in sums) is summed
    assert fast == _write_near_the_limit(monkeypatch, 10**9, before_limit_ns)
