"""NOR flash chip model: conformance, AND programming, strict mode, framing and busy timing."""
from __future__ import annotations

import math
import random
import re

import pytest

from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.media.sim import nor
from sdbench.media.sim.nor import (FlashChipProfile, NorChipConfig, NorCommandError, NorFlashChip, NorProgramError,
                                   list_chip_profiles, load_chip_profile)
from sdbench.options import option_info
from sdbench.testing import BlockDeviceSuite

SMALL = FlashChipProfile(name="small", capacity_bytes=256 * 1024)


def chip(**cfg) -> NorFlashChip:
    return NorFlashChip(SMALL, VirtualClock(), NorChipConfig(**cfg))


class TestNorChipConformance(BlockDeviceSuite):
    def make_device(self):
        return chip()


class TestNorChipStrictConformance(BlockDeviceSuite):
    """The suite erases before every write, so strict mode must pass it too."""

    def make_device(self):
        return chip(strict=True)


def program(c: NorFlashChip, addr: int, data: bytes) -> None:
    c.wait_ready()
    c.cmd_write_enable()
    c.cmd_page_program(addr, data)
    c.wait_ready()


def test_program_is_bitwise_and_and_counts_zero_to_one():
    c = chip()
    program(c, 10, b"\xf0\x0f")
    assert c.stats.zero_to_one_programs == 0
    program(c, 10, b"\x3c\xff")
    assert c.peek(10, 2) == b"\x30\x0f"
    # 0x3C over 0xF0 tries to set bits 2,3 (2 bits); 0xFF over 0x0F tries 4 bits
    assert c.stats.zero_to_one_programs == 1
    assert c.stats.zero_to_one_bytes == 2
    assert c.stats.zero_to_one_bits == 6
    # the SPIFFS flag-clearing pattern: 0x7E over 0xF8 is legal NOR use and just ANDs
    program(c, 100, b"\xf8")
    program(c, 100, b"\x7e")
    assert c.peek(100, 1) == b"\x78"


def test_strict_mode_names_the_address_of_a_zero_to_one_program():
    c = chip(strict=True)
    program(c, 0x123, b"\x00")
    with pytest.raises(NorProgramError, match=re.escape("0x000123")):
        program(c, 0x120, b"\x00\x00\x00\xff")
    assert c.peek(0x120, 4) == b"\xff\xff\xff\x00"  # nothing was programmed by the refused command
    program(c, 0x123, b"\x00")  # rewriting the same value is not a 0->1 attempt


def test_page_program_wraps_inside_the_page():
    c = chip()
    data = bytes(range(1, 17))
    program(c, 0x1000 + 250, data)
    assert c.peek(0x1000 + 250, 6) == data[:6]
    assert c.peek(0x1000, 10) == data[6:]
    assert c.peek(0x1100, 10) == b"\xff" * 10  # the next page is untouched


def test_page_program_longer_than_a_page_keeps_the_last_page_of_bytes():
    c = chip()
    data = bytes(i & 0xFF for i in range(300))
    program(c, 0x2000, data)
    # 300 bytes clocked in at offset 0: the buffer wrapped, the last 256 start at offset 44
    assert c.peek(0x2000 + 44, 212) == data[44:256]
    assert c.peek(0x2000, 44) == data[256:]


def test_commands_need_wren_and_an_idle_chip():
    c = chip()
    with pytest.raises(NorCommandError, match="WREN"):
        c.cmd_page_program(0, b"\x00")
    c.cmd_write_enable()
    assert c.cmd_read_status() & 0x02
    c.cmd_sector_erase(0)
    assert c.cmd_read_status() & 0x01  # WIP while erasing
    with pytest.raises(NorCommandError, match="busy"):
        c.cmd_read(0, 4)
    c.wait_ready()
    assert c.cmd_read_status() == 0  # WIP and WEL clear after the erase


def test_erase_counts_wear_per_sector():
    c = chip()
    c.erase(0, 64 * 1024)           # one 64 KiB block
    c.erase(64 * 1024, 32 * 1024)   # one 32 KiB block
    c.erase(4096, 4096)             # one sector
    assert c.stats.block64_erases == 1 and c.stats.block32_erases == 1 and c.stats.sector_erases == 1
    assert list(c.erase_counts[:3]) == [1, 2, 1]
    assert int(c.erase_counts[16:24].sum()) == 8 and int(c.erase_counts[24]) == 0
    assert c.stats.erase_counts is c.erase_counts
    c.stats.reset()
    assert int(c.erase_counts[0]) == 1 and c.stats.sector_erases == 0  # wear survives a stats reset
    w = c.wear()
    assert w["max_erases"] == 2 and w["total_erases"] == 16 + 8 + 1
    assert c.vclock.commands["BE64"] == 1 and c.vclock.commands["BE32"] == 1 and c.vclock.commands["SE"] == 1


@pytest.mark.parametrize("mode, clocks", [
    ("qout", (8 + 24 + 8) // 1 + 256 * 8 // 4),
    ("dio", 8 + (24 + 8) // 2 + 256 * 8 // 2),
    ("qio", 8 + (24 + 8) // 4 + 4 + 256 * 8 // 4),
    ("dout", 8 + 24 + 8 + 256 * 8 // 2),
    ("fastrd", 8 + 24 + 8 + 256 * 8),
    ("slowrd", 8 + 24 + 256 * 8),
])
def test_read_command_framing_at_40_mhz(mode, clocks):
    c = chip(bus_clock_hz=40_000_000)
    t0 = c.vclock.now_ns()
    c.cmd_read(0, 256, mode)
    assert c.vclock.now_ns() - t0 == clocks * 25  # 25 ns per clock
    assert NorFlashChip.read_clocks(256, mode) == clocks
    assert c.vclock.breakdown_ns() == {"bus": clocks * 25}


def test_quad_read_256_bytes_is_552_clocks_and_dio_1048():
    assert NorFlashChip.read_clocks(256, "qout") == 552
    assert NorFlashChip.read_clocks(256, "dio") == 1048


def test_clock_limits_are_config_errors():
    with pytest.raises(ConfigError, match="above"):
        NorFlashChip(SMALL, VirtualClock(), NorChipConfig(bus_clock_hz=200_000_000))
    c = chip(bus_clock_hz=80_000_000)
    with pytest.raises(ConfigError, match="03h"):
        c.check_read_mode("slowrd")
    no_quad = FlashChipProfile(name="dual-only", capacity_bytes=64 * 1024, quad_io=False)
    with pytest.raises(ConfigError, match="quad"):
        NorFlashChip(no_quad, VirtualClock()).check_read_mode("qio")


def test_program_time_follows_the_datasheet_figures():
    p = load_chip_profile("w25q32jv")
    assert p.program_time_us(1) == 30.0
    assert p.program_time_us(256) == pytest.approx(400.0)
    # 64 bytes: the per-byte rule (30 + 63*2.5 = 187.5) is bounded by the line to tPP (30 + 370*63/255)
    assert p.program_time_us(64) == pytest.approx(30 + 370 * 63 / 255)
    fast_bytes = FlashChipProfile(byte_program_next_typ_us=1.0)  # here the per-byte rule is the lower bound
    assert fast_bytes.program_time_us(8) == pytest.approx(30 + 7 * 1.0)
    c = NorFlashChip(p, VirtualClock(), NorChipConfig(timing="typ"))
    c.cmd_write_enable()
    t0 = c.vclock.now_ns()
    c.cmd_page_program(0, bytes(64))
    assert c.busy_until_ns - c.vclock.now_ns() == round(p.program_time_us(64) * 1000)
    assert c.vclock.now_ns() - t0 == (8 + 24 + 64 * 8) * 25


def _busy_times(seed: int, timing: str = "random") -> list[int]:
    c = NorFlashChip(SMALL, VirtualClock(), NorChipConfig(seed=seed, timing=timing))
    out = []
    for i in range(20):
        c.cmd_write_enable()
        c.cmd_page_program(i * 256, bytes(256))
        out.append(c.busy_until_ns - c.vclock.now_ns())
        c.wait_ready()
    c.cmd_write_enable()
    c.cmd_sector_erase(0)
    out.append(c.busy_until_ns - c.vclock.now_ns())
    return out


def test_busy_times_are_seeded_and_clipped():
    a, b, other = _busy_times(7), _busy_times(7), _busy_times(8)
    assert a == b
    assert a != other
    assert len(set(a[:20])) > 10  # spread, not a constant
    assert max(a[:20]) <= SMALL.page_program_max_us * 1000
    assert set(_busy_times(1, "typ")[:20]) == {round(SMALL.page_program_typ_us * 1000)}
    assert set(_busy_times(1, "max")[:20]) == {round(SMALL.page_program_max_us * 1000)}


def test_busy_factor_streams_are_the_gauss_draws_of_the_seed(monkeypatch):
    # a chip's busy factors exp(σ z) are those of random.Random(seed).gauss, in order: shared by the chips of one
    # seed up to the stream's cap, then each chip's own from where the shared stream stopped
    monkeypatch.setattr(nor, "FACTOR_STREAM_CAP", 4099)  # odd: the cap leaves a pair's second half behind
    nor.forget_busy_factors()
    sigma = SMALL.busy_time_sigma
    rng = random.Random("nor-busy:5")
    expected = [math.exp(sigma * rng.gauss(0.0, 1.0)) for _ in range(10_000)]
    chips = [chip(seed=5), chip(seed=5)]
    for c, sizes in zip(chips, ([1, 2, 4096, 3, 5000, 1], [9000, 1, 1])):
        got = []
        for n in sizes:
            values, i = c.busy_factors(n)
            got += values[i:i + n]
            c._draws += n
        assert got == expected[:len(got)]
    assert list(nor.shared_busy_factors(5, sigma).values) == expected[:4099]
    nor.forget_busy_factors()
    assert _busy_times(7) == _busy_times(7)


def test_shipped_profiles_load_with_units_in_names():
    names = list_chip_profiles()
    assert {"w25q32jv", "gd25q32c"} <= set(names)
    for n in names:
        p = load_chip_profile(n)
        assert p.capacity_bytes == 4 * 1024 * 1024
        assert p.page_program_typ_us <= p.page_program_max_us
        assert p.sector_erase_typ_ms <= p.sector_erase_max_ms
    units = {o.name: o.unit for o in option_info(FlashChipProfile)}
    assert units["sector_erase_max_ms"] == "ms" and units["page_program_typ_us"] == "µs"


def test_bad_profiles_are_one_line_config_errors():
    with pytest.raises(ConfigError, match="sector_erase_max_ms"):
        load_chip_profile("w25q32jv", {"sector_erase_max_ms": 10.0})
    with pytest.raises(ConfigError, match="unknown option"):
        load_chip_profile("w25q32jv", {"sector_erase_ms": 10.0})
    with pytest.raises(ConfigError, match="unknown flash chip profile"):
        load_chip_profile("no-such-chip")
    with pytest.raises(ConfigError, match="64 KiB"):
        FlashChipProfile(capacity_bytes=100_000)


@pytest.mark.parametrize("timing,sigma", [("random", 0.3), ("random", 2.0), ("random", 0.0), ("typ", 0.3),
                                          ("max", 0.3)])
def test_program_busy_ns_draws_as_programs_one_by_one_do(timing, sigma):
    """A run of programs' busy times at once (a driver's fast path) equals what programs one by one draw: the
    same values, the chip as far along its busy-time stream, then the same next draw (σ = 2: many clipped at
    the maximum)."""
    from dataclasses import replace
    profile = replace(SMALL, busy_time_sigma=sigma)
    rng = random.Random(5)
    shapes = [(64,) * 64, (1,), (200, 56), tuple(rng.choice((1, 7, 64, 256)) for _ in range(40)), (256,) * 3]
    batch = NorFlashChip(profile, VirtualClock(), NorChipConfig(seed=9, timing=timing))
    single = NorFlashChip(profile, VirtualClock(), NorChipConfig(seed=9, timing=timing))
    clipped = 0
    for ks in shapes:
        got = batch.program_busy_ns(ks)
        want = [int(round(single._draw_ns(single._prog_typ_ns[k], single._prog_max_ns[k]))) for k in ks]
        assert got == want
        assert batch._draws == single._draws
        clipped += sum(v == round(single._prog_max_ns[k]) for k, v in zip(ks, want))
    assert batch._draw_ns(1e5, 1e6) == single._draw_ns(1e5, 1e6)
    assert (clipped > 0) == (sigma > 1 or timing == "max")
