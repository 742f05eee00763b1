"""Recorded costs stand in for the command-by-command path without changing anything a run reports.

The simulated SD driver charges a read, and the commands and data of a write or an erase before the card's
busy, as a cost recorded once (VirtualClock.charge); with a command log it runs every command instead.  Both
must leave the same clock (time, breakdown and command tables in the same order), the same card state and
the same data.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdbench.clock import ClockDelta, VirtualClock
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.stack.sd import load_card, load_host
from sdbench.media.sim.sdhost import SdHostDriver

# (host, bus kind, clock): every driver kind the shipped hosts use
SETUPS = [("esp32-sdmmc", "sd4", 40_000_000), ("esp32s3-sdspi", "spi", 20_000_000),
          ("p2-350mhz", "spi", 25_000_000), ("usb2-card-reader", "sd4", 50_000_000),
          ("rp2040-sdfat-spi", "spi", 24_000_000), ("teensy41-sdio", "sd4", 45_000_000)]


def _pair(host_name: str, bus: str, clock_hz: int) -> list[SdHostDriver]:
    host = load_host(host_name)
    # a card that merges, pauses and has read boundary costs, so the state-dependent parts all run
    card = load_card("generic-sdhc", {"capacity_bytes": 256 << 20, "pause_probability": 0.05,
                                      "read_page_cross_us": 3.0, "read_au_cross_us": 40.0})
    return [SdHostDriver(host, SdBus(BusConfig(bus, clock_hz)), card, VirtualClock(), seed=3, log_commands=log)
            for log in (True, False)]


def _ops(seed: int, n: int) -> list[tuple]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        kind = rng.choice(["read", "read", "write", "write", "erase", "trim", "read_multi", "write_multi", "sync"])
        lba = rng.randrange(0, (64 << 20) // 512 - 64)
        count = rng.choice([1, 1, 2, 8, 33])
        buf = rng.choice([0, 0, 4096, 2])  # 2: a buffer the SDMMC DMA cannot use (bounce path)
        out.append((kind, lba, count, buf))
    return out


def _apply(dev: SdHostDriver, ops: list[tuple]) -> list[bytes]:
    got = []
    for kind, lba, count, buf in ops:
        if kind == "read":
            got.append(dev.read(lba, count, buf_addr=buf))
        elif kind == "read_multi":
            got.append(dev.read_multi(lba, count, buf_addr=buf))
        elif kind == "write":
            dev.write(lba, bytes([lba & 0xFF]) * (512 * count), buf_addr=buf)
        elif kind == "write_multi":
            dev.write_multi(lba, bytes([count]) * (512 * count), buf_addr=buf)
        elif kind == "erase":
            dev.erase(lba, count)
        elif kind == "trim":
            dev.trim(lba, count)
        else:
            dev.sync()
    return got


@pytest.mark.parametrize("host,bus,clock_hz", SETUPS)
def test_recorded_costs_match_the_command_path(host, bus, clock_hz):
    ref, fast = _pair(host, bus, clock_hz)
    ops = _ops(hash(host) & 0xFFFF, 400)
    assert _apply(ref, ops) == _apply(fast, ops)
    assert fast.vclock.now_ns() == ref.vclock.now_ns()
    # the tables in the same order too: reports list categories and commands as they first appeared
    assert list(fast.vclock.breakdown_ns().items()) == list(ref.vclock.breakdown_ns().items())
    assert list(fast.vclock.commands_snapshot().items()) == list(ref.vclock.commands_snapshot().items())
    assert fast.stats.snapshot() == ref.stats.snapshot()
    assert (fast.card.merges, fast.card.pauses) == (ref.card.merges, ref.card.pauses)
    assert ref.log and not fast.log  # the reference really ran command by command


_step = st.one_of(
    st.tuples(st.just("apply"), st.integers(0, 2)),
    st.tuples(st.just("charge"), st.integers(0, 2)),
    st.tuples(st.just("advance"), st.sampled_from(["host", "bus", "rtos", "usb"]), st.integers(0, 10_000)),
    st.tuples(st.just("count"), st.sampled_from(["CMD17", "CMD13", "CMD55"])),
    st.tuples(st.just("read")),
)
_COSTS = [ClockDelta(320, (("host", 62), ("card", 226)), (("CMD17", 1), ("CMD13", 1))),
          ClockDelta(50, (("bus", 50),), (("CMD12", 1),)),
          ClockDelta(7, (("flash", 7),), ())]


def _both(a: VirtualClock, b: VirtualClock, step: tuple) -> None:
    """A step the two clocks take alike ("advance", "count"), or ("read",): their tables compared, key order
    included."""
    if step[0] == "advance":
        a.advance_ns(step[2], step[1])
        b.advance_ns(step[2], step[1])
    elif step[0] == "count":
        a.count_command(step[1])
        b.count_command(step[1])
    else:
        assert list(b.breakdown_ns().items()) == list(a.breakdown_ns().items())
        assert list(b.ledger_ns().items()) == list(a.ledger_ns().items())


@settings(max_examples=150, deadline=None)
@given(st.lists(_step, max_size=40))
def test_charge_is_apply_summed_later(steps):
    """charge() gives the clock apply() would: same time, same tables, same key order, read at any point."""
    a, b = VirtualClock(), VirtualClock()
    for step in steps:
        if step[0] in ("apply", "charge"):
            a.apply(_COSTS[step[1]])
            (b.charge if step[0] == "charge" else b.apply)(_COSTS[step[1]])
        else:
            _both(a, b, step)
    assert b.now_ns() == a.now_ns()
    assert list(b.breakdown_ns().items()) == list(a.breakdown_ns().items())
    assert list(b.commands_snapshot().items()) == list(a.commands_snapshot().items())
    ma, mb = a.mark(), b.mark()
    a.apply(_COSTS[0])
    b.charge(_COSTS[0])
    assert b.delta_since(mb) == a.delta_since(ma)


_PARTS = (("host", "bus", "flash"), ("RDSR", "PP"), ("flash.host.cmd", "flash.chip.program"))
_summed_step = st.one_of(
    st.tuples(st.just("summed"), st.lists(st.integers(0, 5_000), min_size=7, max_size=7)),
    st.tuples(st.just("advance"), st.sampled_from(["host", "bus", "rtos"]), st.integers(0, 10_000)),
    st.tuples(st.just("count"), st.sampled_from(["RDSR", "CMD13"])),
    st.tuples(st.just("read")),
)


def _as_parts(v: list[int]) -> tuple[int, tuple, tuple, tuple]:
    spent, commands, params = _PARTS
    return (sum(v[:3]), tuple(zip(spent, v[:3])), tuple(zip(commands, v[3:5])), tuple(zip(params, v[5:7])))


@settings(max_examples=150, deadline=None)
@given(st.lists(_summed_step, max_size=40))
def test_a_summer_gives_the_clock_apply_parts_would(steps):
    """Parts added to a summer's list (with advance_summed) give the same time and tables as apply_parts, key
    order included, read at any point."""
    a, b = VirtualClock(), VirtualClock()
    assert b.summer(*_PARTS) is None  # no key in its table yet: the first charge puts it there
    for clock in (a, b):
        clock.advance_ns(5, "usb")
        clock.apply_parts(*_as_parts([1, 2, 3, 4, 5, 6, 7]))
    sums = b.summer(*_PARTS)
    assert sums == [0] * 7
    for step in steps:
        if step[0] == "summed":
            a.apply_parts(*_as_parts(step[1]))
            b.advance_summed(sum(step[1][:3]))
            for i, v in enumerate(step[1]):
                sums[i] += v
        else:
            _both(a, b, step)
    assert b.now_ns() == a.now_ns()
    assert list(b.breakdown_ns().items()) == list(a.breakdown_ns().items())
    assert list(b.commands_snapshot().items()) == list(a.commands_snapshot().items())
    assert list(b.ledger_ns().items()) == list(a.ledger_ns().items())
