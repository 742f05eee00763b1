"""The esp_flash driver's fast paths against its reference (command-by-command) path.

Every workload runs twice on fresh, identically seeded stacks: once with the fast paths allowed and once with
``reference_path`` forced.  After every esp_flash call the clock (time, nanoseconds per category in table
order, command counts), the driver's counters, the chip's statistics and busy state are recorded; at the end
the chip's contents, wear, random-draw state and OS bookkeeping are compared too.  The two runs must agree
on all of it.  The last tests perturb the fast path in small ways and check that the comparison notices.
"""
from __future__ import annotations

import datetime
import random
import types
from dataclasses import fields, replace
from typing import Any

import pytest

from sdbench.clock import VirtualClock
from sdbench.media.base import BlockDeviceError
from sdbench.media.sim import esp_flash
from sdbench.stack import flash as flashtarget
from sdbench.media.sim.esp_flash import Esp32FlashDriver, EspFlashHostProfile, load_esp_flash_host
from sdbench.stack.flash import FlashTarget, SimFlashConfig
from sdbench.media.sim.nor import FlashChipProfile, NorChipConfig, NorFlashChip, load_chip_profile
from sdbench.media.wl import WearLevelling, WlConfig
from sdbench.protocols import run_scenario
from sdbench.scenarios import load


# ---- recording ------------------------------------------------------------------------------------------

class Recording:
    """What one run did: a log entry per esp_flash call, the drivers it built, fast-path use."""

    def __init__(self) -> None:
        self.log: list[tuple[Any, ...]] = []
        self.drivers: list[Esp32FlashDriver] = []
        self.fast_calls = 0     # calls into a fast path (none on the reference path)
        self.fast_hits = 0      # of those, the ones that did the work
        self.erase_hits = 0     # of those, erase sections
        self.run_hits = 0       # write sections summed from prefix sums (program_runs)


def recording_driver(rec: Recording) -> type[Esp32FlashDriver]:
    """An Esp32FlashDriver that logs the state after every API call into ``rec``."""

    class RecordingDriver(Esp32FlashDriver):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            rec.drivers.append(self)

        def _logged(self, what: tuple[Any, ...], call: Any) -> Any:
            try:
                result = call()
            except BlockDeviceError as e:
                rec.log.append(what + (("raised", type(e).__name__, str(e)),) + _snapshot(self))
                raise
            rec.log.append(what + (("returned", result),) + _snapshot(self))
            return result

        def flash_read(self, addr: int, size: int) -> bytes:
            return self._logged(("read", addr, size), lambda: super(RecordingDriver, self).flash_read(addr, size))

        def flash_write(self, addr: int, data: Any) -> None:
            return self._logged(("write", addr, bytes(data)),
                                lambda: super(RecordingDriver, self).flash_write(addr, data))

        def flash_erase_region(self, addr: int, size: int) -> None:
            return self._logged(("erase", addr, size),
                                lambda: super(RecordingDriver, self).flash_erase_region(addr, size))

        def _write_section_fast(self, start: int, smv: memoryview) -> bool:
            rec.fast_calls += 1
            done = super()._write_section_fast(start, smv)
            rec.fast_hits += bool(done)
            return done

        def _erase_fast(self, addr: int, block: bool) -> bool:
            rec.fast_calls += 1
            done = super()._erase_fast(addr, block)
            rec.fast_hits += bool(done)
            rec.erase_hits += bool(done)
            return done

        def _program_run(self, k: int, n: int, now0: int) -> list[int] | None:
            sums = super()._program_run(k, n, now0)
            rec.run_hits += sums is not None
            return sums

        def _read_fast(self, addr: int, size: int) -> bytes | None:
            rec.fast_calls += 1
            data = super()._read_fast(addr, size)
            rec.fast_hits += data is not None
            return data

    return RecordingDriver


def _fields(obj: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((f.name, getattr(obj, f.name)) for f in fields(obj))


def _snapshot(drv: Esp32FlashDriver) -> tuple[Any, ...]:
    clock, chip = drv.vclock, drv.chip
    return (("now_ns", clock.now_ns()),
            ("breakdown_ns", tuple(clock.breakdown_ns().items())),   # table order matters to reports
            ("ledger_ns", tuple(clock.ledger_ns().items())),
            ("commands", tuple(clock.commands_snapshot().items())),
            ("driver_counters", _fields(drv.counters)),
            ("driver_stats", _fields(drv.stats)),
            ("chip_stats", _fields(chip.stats)),
            ("chip_busy", (chip.busy_until_ns, chip._busy, chip._wel)),
            ("os", (drv._os.acquired_since_ns, drv._os.released_since_ns)))


def final_state(rec: Recording) -> dict[str, Any]:
    chip = rec.drivers[0].chip
    clock = chip.vclock
    return {
        "now_ns": clock.now_ns(),
        "breakdown_ns": tuple(clock.breakdown_ns().items()),
        "ledger_ns": tuple(clock.ledger_ns().items()),
        "commands": tuple(clock.commands_snapshot().items()),
        "contents": chip.peek(0, chip.profile.capacity_bytes),
        "erase_counts": chip.erase_counts.tolist(),
        "chip_stats": _fields(chip.stats),
        "chip_busy": (chip.busy_until_ns, chip._busy, chip._wel),
        "busy_draws": chip._draws,  # how far along its busy-time stream the chip is
        "drivers": [(d.offset_bytes, _fields(d.counters), _fields(d.stats), d._os.acquired_since_ns,
                     d._os.released_since_ns) for d in rec.drivers],
    }


def differences(fast: Recording, ref: Recording, extra: tuple[Any, Any] | None = None) -> list[str]:
    """Where two runs differ: the first differing call (which field), then the final state; [] if identical."""
    out: list[str] = []
    for i, (a, b) in enumerate(zip(fast.log, ref.log)):
        if a != b:
            names = [x[0] if isinstance(x, tuple) and x and isinstance(x[0], str) else f"arg{j}"
                     for j, x in enumerate(a)]
            which = [names[j] if j < len(names) else f"arg{j}"
                     for j in range(max(len(a), len(b))) if j >= min(len(a), len(b)) or a[j] != b[j]]
            out.append(f"call {i} ({a[0]} at 0x{a[1]:X}): {', '.join(which)} differ")
            break
    if len(fast.log) != len(ref.log):
        out.append(f"{len(fast.log)} calls on the fast path, {len(ref.log)} on the reference path")
    fa, fb = final_state(fast), final_state(ref)
    out += [f"final {k} differs" for k in fa if fa[k] != fb[k]]
    if extra is not None and extra[0] != extra[1]:
        out.append("results differ")
    return out


def assert_same(fast: Recording, ref: Recording, extra: tuple[Any, Any] | None = None) -> None:
    assert ref.fast_calls == 0, "the reference run went through a fast path"
    assert fast.fast_hits > 0, "the fast run never took a fast path: the comparison would prove nothing"
    assert len(fast.log) == len(ref.log) > 0
    found = differences(fast, ref, extra)
    assert not found, "fast and reference paths differ: " + "; ".join(found)


# ---- workloads ------------------------------------------------------------------------------------------

CHIP_1M = FlashChipProfile(name="chip-1m", capacity_bytes=1 << 20)
PART_OFFSET = 0x1F000          # not 64 KiB aligned: erases mix sectors and blocks
PART_SIZE = 0x90000

#: hosts far from the shipped one: odd chunk/command sizes, other modes, clocks, tick and yield rules
ODD_HOST = EspFlashHostProfile(name="odd", cpu_hz=240_000_000, flash_clock_hz=26_000_000, flash_mode="qout",
                               cmd_overhead_cycles=333, op_overhead_cycles=1111, max_read_bytes=48,
                               max_write_bytes=100, read_chunk_bytes=5000, write_chunk_bytes=3000,
                               poll_interval_us=7.5, extra_dummy_clocks=2, rtos_tick_hz=1000,
                               erase_yield_duration_ms=3.0, erase_yield_ticks=2)
SLOW_HOST = EspFlashHostProfile(name="slow", flash_clock_hz=20_000_000, flash_mode="slowrd", max_write_bytes=256,
                                max_read_bytes=256, poll_interval_us=0.0, yield_during_erase=False)

SIZES = (1, 2, 63, 64, 65, 200, 255, 256, 257, 1000, 3001, 4095, 4096, 4097, 8191, 8192, 8193, 16384, 16385,
         20000, 65536, 70001)
ALIGNS = (0, 1, 0x3F, 0xFF, 0x3F1, 0x800)


def raw_workload(chip: NorFlashChip, drv: Esp32FlashDriver) -> list[Any]:
    """Reads, writes and erases of many sizes and alignments on a partition, plus the odd corners."""
    rnd = random.Random(1234)
    size = drv.geometry.size_bytes
    results: list[Any] = []

    def attempt(fn: Any, *args: Any) -> None:
        try:
            results.append(fn(*args))
        except BlockDeviceError as e:
            results.append((type(e).__name__, str(e)))

    attempt(drv.read, 5, 1000)                       # a read on a fresh clock (before the fast path may run)
    attempt(drv.write, 0x10, rnd.randbytes(300))     # a write on a fresh clock
    attempt(drv.erase, 0, size)                      # sectors up to a 64 KiB boundary, blocks, sectors
    addr = 0
    for i, n in enumerate(SIZES):                    # writes of every size at rotating alignments
        addr += ALIGNS[i % len(ALIGNS)]
        if addr + n > size:
            addr = ALIGNS[i % len(ALIGNS)]
        attempt(drv.write, addr, rnd.randbytes(n))
        addr += n
    for i, n in enumerate(SIZES + (32768 + 5, 100_000)):
        a = (i * 0x1357 + ALIGNS[i % len(ALIGNS)]) % (size - n)
        attempt(drv.read, a, n)
    attempt(drv.write, 0x100, rnd.randbytes(5000))   # over programmed cells: 0->1 attempts (not strict)
    attempt(drv.write, 0x100, drv.read(0x100, 5000))  # the same data again: nothing to set
    attempt(drv.write, 0x3000, b"\xff" * 777)
    for a, n in ((0x1000, 0x1000), (0x3000, 0x23000), (0x21000, 0x10000), (0x40000, 0x20000)):
        attempt(drv.erase, a, n)
    attempt(drv.write, size - 3000, rnd.randbytes(3000))  # up to the end of the partition
    attempt(drv.read, size - 20000, 20000)
    # the chip left busy by someone else (a program sent straight to it): the next section waits it out
    chip.cmd_write_enable()
    chip.cmd_page_program(drv.offset_bytes + 0x50000, b"\x00" * 32)
    attempt(drv.write, 0x50100, rnd.randbytes(600))
    chip.cmd_write_enable()
    # an erase keeps the chip busy for milliseconds, longer than any host's per-call overhead
    chip.cmd_sector_erase(drv.offset_bytes + 0x5F000)
    attempt(drv.read, 0x50000, 64)                   # a read while busy is refused, on both paths
    chip.wait_ready()
    attempt(drv.read, 0x50000, 64)
    # another window sharing the OS state, and a slower SCLK (the fast path's constants must follow it)
    sub = drv.partition(0x60000, 0x20000)
    attempt(sub.write, 0x7F, rnd.randbytes(9000))
    attempt(drv.write, 0x61000, rnd.randbytes(1500))
    chip.set_bus_clock(chip.bus_clock_hz // 2)
    attempt(sub.read, 0, 20000)
    attempt(drv.write, 0x62000, rnd.randbytes(70000))
    attempt(drv.read, 0x62000, 70000)
    return results


def run_raw(reference: bool, host: EspFlashHostProfile, profile: FlashChipProfile, timing: str, seed: int = 3,
            *, clock: VirtualClock | None = None) -> tuple[Recording, list[Any]]:
    rec = Recording()
    chip = NorFlashChip(profile, clock or VirtualClock(), NorChipConfig(seed=seed, timing=timing))
    drv = recording_driver(rec)(chip, host, offset_bytes=PART_OFFSET, size_bytes=PART_SIZE, reference_path=reference)
    return rec, raw_workload(chip, drv)


RAW_CASES = {
    "shipped-host-gd25q32c-random": (load_esp_flash_host(), load_chip_profile("gd25q32c"), "random"),
    "default-host-1m-typ": (EspFlashHostProfile(), CHIP_1M, "typ"),
    "odd-host-64b-pages-max": (ODD_HOST, replace(CHIP_1M, page_size_bytes=64), "max"),
    "slow-host-512b-pages-random": (SLOW_HOST, replace(CHIP_1M, page_size_bytes=512), "random"),
    "shipped-host-no-spread": (load_esp_flash_host(), replace(CHIP_1M, busy_time_sigma=0.0), "random"),
    # 12.5 ns clocks and an odd dummy count: every read's bus time ends in half a nanosecond (rounding ties)
    "half-ns-reads": (load_esp_flash_host("esp32-flash", {"extra_dummy_clocks": 1}), CHIP_1M, "random"),
}

#: the cases whose sections of many programs are summed (busy times drawn, host steps in powers of two of a ns)
RUN_CASES = ("shipped-host-gd25q32c-random", "half-ns-reads")


@pytest.mark.parametrize("case", list(RAW_CASES))
def test_raw_driver_calls_charge_the_same_on_both_paths(case):
    host, profile, timing = RAW_CASES[case]
    fast, fast_results = run_raw(False, host, profile, timing)
    ref, ref_results = run_raw(True, host, profile, timing)
    assert_same(fast, ref, (fast_results, ref_results))
    assert fast.erase_hits > 0, "no erase took the fast path"
    if case in RUN_CASES:
        assert fast.run_hits > 0, "no write section was summed from its programs' prefix sums"
    assert any(isinstance(r, tuple) and r[0] == "NorCommandError" for r in ref_results)  # the busy read


def test_strict_chip_refuses_at_the_same_program_on_both_paths():
    runs = []
    for reference in (False, True):
        rec = Recording()
        chip = NorFlashChip(CHIP_1M, VirtualClock(), NorChipConfig(strict=True))
        drv = recording_driver(rec)(chip, EspFlashHostProfile(), offset_bytes=0x10000, size_bytes=0x40000,
                                    reference_path=reference)
        drv.erase(0, 0x20000)
        drv.write(0, bytes(range(256)) * 40)
        drv.write(0x5000, b"\x0f" * 3000)
        with pytest.raises(BlockDeviceError, match="0->1"):
            drv.write(0x5000 + 1900, b"\xf0" * 3000)   # the first 1100 bytes are fine, then cells are 0x0F
        drv.write(0x9000, b"\x55" * 9000)              # the driver carries on after the refusal
        runs.append((rec, drv.read(0, 0x12000)))
    (fast, fast_data), (ref, ref_data) = runs
    assert_same(fast, ref, (fast_data, ref_data))


SIZES_WL = (1, 100, 511, 512, 4095, 4096, 4097, 10000, 65536)
ALIGNS_WL = (0, 1, 0x1FF, 0x200, 0xFFF, 0x1003)


def wl_workload(wl: WearLevelling) -> list[Any]:
    rnd = random.Random(99)
    out: list[Any] = []
    for i, n in enumerate(SIZES_WL):
        a = (i * 0x4321 + ALIGNS_WL[i % len(ALIGNS_WL)]) % (wl.wl_size() - n)
        wl.wl_write(a, rnd.randbytes(n))
        out.append(wl.wl_read(a, n))
    for i, n in enumerate(SIZES_WL):
        out.append(wl.wl_read((i * 0x2468 + ALIGNS_WL[-1 - i % len(ALIGNS_WL)]) % (wl.wl_size() - n), n))
    wl.wl_erase_range(0x3000, 0x5000)
    buf = rnd.randbytes(65536)
    for _ in range(3):                                # the raw test: write then read the target size at 0
        wl.wl_write(0, buf)
    for _ in range(3):
        out.append(wl.wl_read(0, 65536))
    for s in range(40):                               # enough erases to move the wear-levelling window
        wl.erase_sector(s % 8)
        wl.wl_write(s % 8 * 4096, rnd.randbytes(4096))
    out.append(wl.wl_read(0, 8 * 4096))
    return out


@pytest.mark.parametrize("seed", [1, 7])
def test_wear_levelling_calls_charge_the_same_on_both_paths(seed):
    runs = []
    for reference in (False, True):
        rec = Recording()
        chip = NorFlashChip(load_chip_profile("gd25q32c"), VirtualClock(), NorChipConfig(seed=seed))
        drv = recording_driver(rec)(chip, load_esp_flash_host(), offset_bytes=0x110000, size_bytes=2 << 20,
                                    reference_path=reference)
        wl = WearLevelling(drv, WlConfig(device_id_seed=seed))
        runs.append((rec, wl_workload(wl), wl.moves))
    (fast, fast_out, fast_moves), (ref, ref_out, ref_moves) = runs
    assert fast_moves == ref_moves > 0
    assert_same(fast, ref, (fast_out, ref_out))


# ---- the flash target: filesystems and the espidf scenario ---------------------------------------------

class _FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz: Any = None) -> "_FixedDatetime":
        return cls(2024, 6, 1, 12, 0, 0, tzinfo=tz)


@pytest.fixture(autouse=True)
def fixed_fat_timestamps(monkeypatch):
    """FatFs stamps directory entries with the wall clock's time of day; two runs compared byte for byte must
    see the same time."""
    from fatfs import wrapper

    shim = types.SimpleNamespace(**{k: getattr(datetime, k) for k in dir(datetime) if not k.startswith("__")})
    shim.datetime = _FixedDatetime
    monkeypatch.setattr(wrapper, "datetime", shim)


@pytest.fixture
def recorded_target(monkeypatch):
    """Build flash targets whose drivers record, on the path asked for (through the module switch)."""

    def build(reference: bool, seed: int) -> tuple[Recording, FlashTarget]:
        rec = Recording()
        monkeypatch.setattr(esp_flash, "REFERENCE_PATH", reference)
        monkeypatch.setattr(flashtarget, "Esp32FlashDriver", recording_driver(rec))
        return rec, FlashTarget(SimFlashConfig(), VirtualClock(), seed)

    return build


FILE_SIZES = (255, 4096, 54613, 65536, 78643)


def fs_workload(fs: Any) -> list[Any]:
    rnd = random.Random(5)
    out: list[Any] = []
    fs.format()
    fs.mount()
    for i, n in enumerate(FILE_SIZES):
        data = rnd.randbytes(n)
        with fs.open(f"/f{i}.bin", "w") as f:
            f.write(data[:n // 3])
            f.write(data[n // 3:])
        with fs.open(f"/f{i}.bin", "r") as f:
            out.append(f.read(n) == data)
    with fs.open("/f1.bin", "a") as f:              # append, then read across the old end
        f.write(rnd.randbytes(3000))
    with fs.open("/f1.bin", "r") as f:
        f.seek(4000)
        out.append(f.read(2000))
    fs.remove("/f3.bin")
    with fs.open("/f3.bin", "w") as f:              # rewrite after a delete (reused space)
        f.write(rnd.randbytes(30000))
    out.append(sorted(fs.listdir("/")))
    fs.unmount()
    fs.mount()                                       # a remount reads the metadata back
    with fs.open("/f3.bin", "r") as f:
        out.append(f.read())
    fs.unmount()
    return out


@pytest.mark.parametrize("part", ["flash_fatfs", "flash_littlefs", "flash_spiffs"])
def test_file_system_io_on_the_flash_target_charges_the_same_on_both_paths(recorded_target, part):
    runs = []
    for reference in (False, True):
        rec, target = recorded_target(reference, seed=2)
        if part not in target.fs_factories:
            pytest.skip(f"{part} is not available in this build")
        fs = target.fs_factories[part]()
        runs.append((rec, fs_workload(fs)))
    (fast, fast_out), (ref, ref_out) = runs
    assert all(x is True for x in fast_out[:len(FILE_SIZES)])
    assert_same(fast, ref, (fast_out, ref_out))


@pytest.mark.parametrize("seed", [1, 5])
def test_espidf_spiflash_scenario_gives_the_same_rows_on_both_paths(monkeypatch, seed):
    over = [f"seed={seed}", "espidf.runs=3", "espidf.spiffs_runs=1"]
    runs = []
    for reference in (False, True):
        rec = Recording()
        monkeypatch.setattr(esp_flash, "REFERENCE_PATH", reference)
        monkeypatch.setattr(flashtarget, "Esp32FlashDriver", recording_driver(rec))
        record = run_scenario(load("espidf-esp32-spiflash", over))
        runs.append((rec, [r.to_dict() for r in record.rows]))
    (fast, fast_rows), (ref, ref_rows) = runs
    assert {r["label"].split(" (")[0].split(":")[0] for r in fast_rows} >= {
        "SPI Flash raw write", "SPI Flash raw read", "SPI FATFS", "SPI LittleFS"}
    assert all(r["breakdown_ms"] and r["commands"] for r in fast_rows if "raw" in r["label"])
    assert_same(fast, ref, (fast_rows, ref_rows))


def test_the_switch_reaches_drivers_built_without_the_argument(monkeypatch):
    chip = NorFlashChip(CHIP_1M, VirtualClock())
    assert Esp32FlashDriver(chip).reference_path is False
    monkeypatch.setattr(esp_flash, "REFERENCE_PATH", True)
    drv = Esp32FlashDriver(chip)
    assert drv.reference_path is True and drv.partition(0, 0x10000).reference_path is True
    assert Esp32FlashDriver(chip, reference_path=False).partition(0, 0x10000).reference_path is False


# ---- the comparison notices a fast path that charges differently ----------------------------------------

def _shift_host_to_bus(self, total, spent, commands, params=()):
    spent = dict(spent)
    spent["host"] -= 1
    spent["bus"] += 1
    return _APPLY_PARTS(self, total, tuple(spent.items()), commands, params)


def _one_more_rdsr(self, total, spent, commands, params=()):
    cmds = dict(commands)
    if "RDSR" in cmds:
        cmds["RDSR"] += 1
    return _APPLY_PARTS(self, total, spent, tuple(cmds.items()), params)


def _one_ns_more_per_lock_section(self):
    c = list(_CONSTS(self))
    c[6] += 1
    self._fast = tuple(c)  # where the write section reads them
    return self._fast


def _clear_a_bit(self, addr, data, clean):
    data = bytearray(data)
    data[0] &= 0xFE
    return _AND_SPAN(self, addr, bytes(data), False)


def _one_program_more(self, addr, data, clean):
    self.stats.page_programs += 1
    return _AND_SPAN(self, addr, data, clean)


class _SkewedSums(list):
    """A write section's parts as the clock sums them (VirtualClock.summer), each added with ``skew``
    (index -> ns) on top."""

    skew: dict[int, int] = {}

    def __setitem__(self, i, v):
        if isinstance(i, int):
            v += self.skew.get(i, 0)
        super().__setitem__(i, v)


def _skewed_summer(skew: dict[int, int]):
    def summer(self, spent, commands, params):
        sums = _SUMMER(self, spent, commands, params)
        if sums is None:
            return None
        skewed = _SkewedSums(sums)
        skewed.skew = skew
        self._sums[-1] = (skewed, *self._sums[-1][1:])
        return skewed
    return summer


_APPLY_PARTS = VirtualClock.apply_parts
_SUMMER = VirtualClock.summer
_ADVANCE_SUMMED = VirtualClock.advance_summed
_CONSTS = Esp32FlashDriver._fast_consts
_AND_SPAN = NorFlashChip.and_span

PERTURBATIONS = {
    "one ns more per lock section": (Esp32FlashDriver, "_fast_consts", _one_ns_more_per_lock_section, "now_ns"),
    "one ns moved from host to bus": (VirtualClock, "apply_parts", _shift_host_to_bus, "breakdown_ns"),
    "one RDSR too many": (VirtualClock, "apply_parts", _one_more_rdsr, "commands"),
    # the write sections' parts summed by the clock (VirtualClock.summer): host and bus, then RDSR commands
    "summed: one ns moved from host to bus": (VirtualClock, "summer", _skewed_summer({0: -1, 1: 1}),
                                              "breakdown_ns"),
    "summed: one RDSR too many": (VirtualClock, "summer", _skewed_summer({3: 1}), "commands"),
    "one bit not programmed": (NorFlashChip, "and_span", _clear_a_bit, "returned"),
    "one page program too many": (NorFlashChip, "and_span", _one_program_more, "chip_stats"),
}


@pytest.mark.parametrize("what", list(PERTURBATIONS))
def test_a_fast_path_that_charges_differently_is_caught(monkeypatch, what):
    host, profile, timing = RAW_CASES["default-host-1m-typ"]
    ref, _ = run_raw(True, host, profile, timing)
    owner, name, replacement, field = PERTURBATIONS[what]
    monkeypatch.setattr(owner, name, replacement)
    fast, _ = run_raw(False, host, profile, timing)
    found = differences(fast, ref)
    assert found, f"{what}: the comparison saw no difference"
    assert field in found[0], found


def test_one_late_nanosecond_in_a_single_section_is_caught(monkeypatch):
    """The smallest error: one nanosecond, once, in one fast section of the whole workload (an erase's, whose
    parts the clock applies at once)."""
    host, profile, timing = RAW_CASES["default-host-1m-typ"]
    ref, _ = run_raw(True, host, profile, timing)
    state = {"left": 5}

    def late_once(self, total, spent, commands, params=()):
        if dict(commands).get("SE") or dict(commands).get("BE64"):
            state["left"] -= 1
        if state["left"] == 0:
            state["left"] = -1
            spent = dict(spent)
            spent["flash"] = spent.get("flash", 0) + 1
            total, spent = total + 1, tuple(spent.items())
        return _APPLY_PARTS(self, total, spent, commands, params)

    monkeypatch.setattr(VirtualClock, "apply_parts", late_once)
    fast, _ = run_raw(False, host, profile, timing)
    assert state["left"] < 0
    found = differences(fast, ref)
    # (the erase's next wait ends when the chip is ready, so the time catches up: the tables say it)
    assert found and "breakdown_ns" in found[0]


def test_one_late_nanosecond_in_a_single_summed_write_section_is_caught(monkeypatch):
    """The same in a write section whose parts the clock sums when its tables are read (VirtualClock.summer)."""
    host, profile, timing = RAW_CASES["default-host-1m-typ"]
    ref, _ = run_raw(True, host, profile, timing)
    state = {"left": 5}

    def late_once(self, total):
        state["left"] -= 1
        if state["left"] == 0:
            total += 1
            self._spent["flash"] += 1  # the section's wait for the chip one ns longer
        return _ADVANCE_SUMMED(self, total)

    monkeypatch.setattr(VirtualClock, "advance_summed", late_once)
    fast, _ = run_raw(False, host, profile, timing)
    assert state["left"] < 0
    found = differences(fast, ref)
    assert found and "now_ns" in found[0] and "breakdown_ns" in found[0]
