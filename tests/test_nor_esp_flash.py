"""ESP32 esp_flash driver model over the NOR chip: splitting, erase units, polling, yields, partitions."""
from __future__ import annotations

import math

import pytest

from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.media.base import OutOfRangeError
from sdbench.media.sim.esp_flash import Esp32FlashDriver, EspFlashHostProfile, load_esp_flash_host
from sdbench.media.sim.esp_flash_raw import RAW_READ_LABEL, RAW_WRITE_LABEL, run_spiflash_raw, simulate_spiflash_raw
from sdbench.media.sim.nor import FlashChipProfile, NorChipConfig, NorFlashChip, load_chip_profile
from sdbench.testing import BlockDeviceSuite

CHIP_1M = FlashChipProfile(name="chip-1m", capacity_bytes=1 << 20)


def make(host: EspFlashHostProfile | None = None, *, offset: int = 0x10000, size: int | None = 256 * 1024,
         timing: str = "random", profile: FlashChipProfile = CHIP_1M, strict: bool = False,
         reference_path: bool | None = None):
    c = NorFlashChip(profile, VirtualClock(), NorChipConfig(timing=timing, strict=strict))
    return c, Esp32FlashDriver(c, host, offset_bytes=offset, size_bytes=size, reference_path=reference_path)


class TestEspFlashPartitionConformance(BlockDeviceSuite):
    def make_device(self):
        return make()[1]


class TestEspFlashWholeChipConformance(BlockDeviceSuite):
    def make_device(self):
        return make(offset=0, size=None, strict=True)[1]


class _Spy:
    """Records page programs and erases the chip receives (the driver must be on its reference path, which
    sends every command to the chip)."""

    def __init__(self, chip: NorFlashChip) -> None:
        self.programs: list[tuple[int, int]] = []
        self.erases: list[tuple[str, int]] = []
        pp, se, be = chip.cmd_page_program, chip.cmd_sector_erase, chip.cmd_block_erase_64k

        def spy_pp(addr, data):
            self.programs.append((addr, len(data)))
            pp(addr, data)

        def spy_se(addr):
            self.erases.append(("SE", addr))
            se(addr)

        def spy_be(addr):
            self.erases.append(("BE64", addr))
            be(addr)

        chip.cmd_page_program, chip.cmd_sector_erase, chip.cmd_block_erase_64k = spy_pp, spy_se, spy_be


def test_programs_are_at_most_64_bytes_and_never_cross_a_page():
    chip, drv = make(reference_path=True)
    spy = _Spy(chip)
    data = bytes((i * 7) & 0xFF for i in range(1000))
    drv.write(0x3F1, data)
    assert all(n <= 64 for _, n in spy.programs)
    assert all(a % 256 + n <= 256 for a, n in spy.programs)
    base = drv.offset_bytes + 0x3F1
    covered = [a for a, _ in spy.programs]
    assert covered[0] == base and sum(n for _, n in spy.programs) == 1000
    assert all(a + n == b for (a, n), (b, _) in zip(spy.programs, spy.programs[1:]))
    assert drv.read(0x3F1, 1000) == data
    assert chip.vclock.commands["PP"] == len(spy.programs) == 17  # 15 to the page end, 15 x 64, 25
    assert chip.vclock.commands["WREN"] == 17


def test_erase_uses_64k_blocks_where_aligned():
    chip, drv = make(offset=0x10000, size=512 * 1024, reference_path=True)
    spy = _Spy(chip)
    drv.erase(0, 128 * 1024 + 8 * 1024)
    assert spy.erases == [("BE64", 0x10000), ("BE64", 0x20000), ("SE", 0x30000), ("SE", 0x31000)]
    spy.erases.clear()
    drv.erase(0xE000, 0x12000 + 0x1000)  # 0x1E000..0x31000: two sectors, one block, one sector
    assert spy.erases == [("SE", 0x1E000), ("SE", 0x1F000), ("BE64", 0x20000), ("SE", 0x30000)]
    assert chip.vclock.commands["BE64"] == 3 and chip.vclock.commands["SE"] == 5


def test_reads_are_64_byte_commands_in_16k_lock_sections():
    chip, drv = make(offset=0, size=None)
    drv.read(0, 65536)
    assert chip.vclock.commands["READ"] == 1024
    assert drv.counters.lock_sections == 4
    drv.read(5, 100)
    assert chip.vclock.commands["READ"] == 1026  # 64 + 36, no alignment


def test_read_timing_arithmetic_dio_40mhz():
    host = EspFlashHostProfile(cpu_hz=160_000_000, flash_clock_hz=40_000_000, flash_mode="dio",
                               cmd_overhead_cycles=320, op_overhead_cycles=1600)
    chip, drv = make(host)
    t0 = chip.vclock.now_ns()
    drv.read(0, 4096)
    per_cmd_bus_ns = (8 + (24 + 8) // 2 + 64 * 8 // 2) * 25       # 280 clocks = 7 µs
    expected = 1600 / 160e6 * 1e9 + 64 * (320 / 160e6 * 1e9 + per_cmd_bus_ns)
    assert chip.vclock.now_ns() - t0 == pytest.approx(expected, abs=64)
    bd = chip.vclock.breakdown_ns()
    assert bd["bus"] == 64 * per_cmd_bus_ns


def test_program_wait_is_polled_every_20_us():
    host = EspFlashHostProfile(flash_clock_hz=40_000_000, cmd_overhead_cycles=320, op_overhead_cycles=0,
                               yield_during_erase=False)
    chip, drv = make(host, timing="typ")
    drv.write(0, bytes(64))
    busy_ns = CHIP_1M.program_time_us(64) * 1000
    h = 320 / 160e6 * 1e9
    rdsr = 16 * 25
    period = h + rdsr + 20_000
    waits = math.ceil((busy_ns - (h + rdsr)) / period)
    # RDSR (idle), WREN, RDSR (WEL), RDSR (idle), PP, then RDSR polls: waits + 1
    assert chip.vclock.commands["RDSR"] == 3 + waits + 1
    assert drv.counters.poll_waits == waits
    assert chip.vclock.breakdown_ns()["flash"] == pytest.approx(waits * 20_000, abs=2)
    pp_bus = (8 + 24 + 64 * 8) * 25
    total = 3 * (h + rdsr) + (h + 8 * 25) + h + pp_bus + (waits + 1) * (h + rdsr) + waits * 20_000
    assert chip.vclock.now_ns() == pytest.approx(total, abs=10)
    assert not chip.is_busy()


def test_long_erases_yield_to_the_rtos_tick():
    chip, drv = make(offset=0, size=None, timing="typ")
    drv.erase(0x1000, 8 * 4096)  # 8 sector erases of 45 ms: held > 20 ms before each but the first
    assert drv.counters.yields == 7
    assert chip.vclock.breakdown_ns()["rtos"] == drv.counters.yield_ns > 0
    chip2, drv2 = make(EspFlashHostProfile(yield_during_erase=False), offset=0, size=None, timing="typ")
    drv2.erase(0x1000, 8 * 4096)
    assert drv2.counters.yields == 0 and "rtos" not in chip2.vclock.breakdown_ns()


def test_partition_window_is_its_own_device():
    chip, drv = make(offset=0x10000, size=64 * 1024)
    drv.erase(0, 64 * 1024)
    drv.write(0, b"hello")
    assert chip.peek(0x10000, 5) == b"hello"
    with pytest.raises(OutOfRangeError):
        drv.write(64 * 1024 - 2, b"abc")
    assert chip.peek(0x20000, 1) == b"\xff"
    sub = drv.partition(0x8000, 0x4000)
    sub.write(0, b"xy")
    assert chip.peek(0x18000, 2) == b"xy"
    assert sub.geometry.size_bytes == 0x4000


def test_bad_driver_config_is_a_config_error():
    c = NorFlashChip(CHIP_1M, VirtualClock())
    with pytest.raises(ConfigError, match="4 KiB"):
        Esp32FlashDriver(c, offset_bytes=100)
    with pytest.raises(ConfigError, match="does not fit"):
        Esp32FlashDriver(c, offset_bytes=0x80000, size_bytes=0x100000)
    with pytest.raises(ConfigError, match="above"):
        Esp32FlashDriver(c, EspFlashHostProfile(flash_clock_hz=160_000_000))
    with pytest.raises(ConfigError, match="flash_mode"):
        load_esp_flash_host("esp32-flash", {"flash_mode": "octal"})


def test_shipped_host_profile_is_the_perf_benchmark_build():
    h = load_esp_flash_host()
    assert (h.flash_mode, h.flash_clock_hz, h.cpu_hz) == ("qio", 80_000_000, 160_000_000)
    assert h.max_write_bytes == 64 and h.poll_interval_us == 20.0


def test_simulate_spiflash_raw_is_deterministic_and_overridable():
    a = simulate_spiflash_raw({}, runs=2)
    assert set(a) == {RAW_WRITE_LABEL, RAW_READ_LABEL}
    assert a == simulate_spiflash_raw(None, runs=2)
    assert a[RAW_WRITE_LABEL] > a[RAW_READ_LABEL] > 0
    slower = simulate_spiflash_raw({"host.cmd_overhead_cycles": 4000}, runs=2)
    assert slower[RAW_READ_LABEL] > a[RAW_READ_LABEL]
    dio = simulate_spiflash_raw({"flash_mode": "dio", "flash_clock_hz": 40_000_000}, runs=2)
    assert dio[RAW_READ_LABEL] > a[RAW_READ_LABEL]
    winbond = simulate_spiflash_raw({"chip_profile": "w25q32jv"}, runs=2)
    assert winbond[RAW_READ_LABEL] == a[RAW_READ_LABEL] and winbond[RAW_WRITE_LABEL] != a[RAW_WRITE_LABEL]
    other_seed = simulate_spiflash_raw({"nor.seed": 99}, runs=2)
    assert other_seed[RAW_WRITE_LABEL] != a[RAW_WRITE_LABEL]
    with pytest.raises(ConfigError, match="section"):
        simulate_spiflash_raw({"no_such_field": 1}, runs=1)
    with pytest.raises(ConfigError, match="below the minimum"):
        simulate_spiflash_raw({"chip.page_program_typ_us": -1}, runs=1)


def test_raw_write_is_16_sector_writes_of_64_programs_without_erase():
    r = run_spiflash_raw({}, runs=1)
    assert "SE" not in r.write_commands and "BE64" not in r.write_commands
    assert r.write_commands["PP"] == 1024 and "READ" not in r.write_commands
    assert r.read_commands == {"READ": 1024}
    assert r.wl_moves == 0
    assert set(r.write_breakdown_ns) <= {"host", "bus", "flash", "rtos"}
    assert set(r.read_breakdown_ns) == {"host", "bus"}
    assert sum(r.write_breakdown_ns.values()) == pytest.approx(r.write_ms[0] * 1e6, abs=2)


def test_chip_profiles_feed_the_driver():
    p = load_chip_profile("gd25q32c")
    c = NorFlashChip(p, VirtualClock())
    drv = Esp32FlashDriver(c, load_esp_flash_host(), offset_bytes=0x110000, size_bytes=2 << 20)
    assert drv.geometry.size_bytes == 2 << 20 and drv.geometry.erase_size == 4096
    assert c.bus_clock_hz == 80_000_000
