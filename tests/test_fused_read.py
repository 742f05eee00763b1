"""The fused read paths (BlockDevice.reader) against the general path, BlockDevice.read.

A simulated SD driver and the ESP32 flash driver give the filesystems' block callbacks and wear levelling a read
function that does in one step what read() does through its layers.  Every run here builds two identical stacks
and drives them with the same operations, one reading through read() and one through reader(); everything a run
reports must come out the same: the data and errors, the clock (time, breakdown, commands and ledger, in table
order), the device's and the models' counters and state, and a recording of the run for re-pricing.  Each run
also checks that the fused path did the work (the general path's own steps ran far fewer times).
"""
from __future__ import annotations

import random
from dataclasses import fields
from typing import Any

import pytest

from sdbench.clock import VirtualClock
from sdbench.ledger import Recording
from sdbench.media.base import BlockDeviceError
from sdbench.media.sim import esp_flash
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.esp_flash import Esp32FlashDriver, load_esp_flash_host
from sdbench.media.sim.nor import NorChipConfig, NorFlashChip, load_chip_profile
from sdbench.media.sim.sdhost import SdHostDriver
from sdbench.stack.sd import load_card, load_host


def _clock_state(clock: VirtualClock) -> tuple[Any, ...]:
    return (clock.now_ns(), tuple(clock.breakdown_ns().items()), tuple(clock.commands_snapshot().items()),
            tuple(clock.ledger_ns().items()))


def _fields(obj: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((f.name, getattr(obj, f.name)) for f in fields(obj))


def _attempt(fn: Any, *args: Any, **kw: Any) -> Any:
    try:
        return fn(*args, **kw)
    except BlockDeviceError as e:
        return (type(e).__name__, str(e))


class _Counted:
    """Counts the calls of a method on its class (both runs of a comparison)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, owner: type, name: str) -> None:
        self.calls = 0
        original = getattr(owner, name)

        def counted(*args: Any, **kw: Any) -> Any:
            self.calls += 1
            return original(*args, **kw)
        monkeypatch.setattr(owner, name, counted)


# ---- SD -------------------------------------------------------------------------------------------------

#: (host, bus kind, clock): the driver kinds with recorded read costs, and one that keeps transfers open
SD_SETUPS = [("esp32-sdmmc", "sd4", 40_000_000), ("esp32s3-sdspi", "spi", 20_000_000),
             ("p2-350mhz", "spi", 25_000_000), ("usb2-card-reader", "sd4", 50_000_000),
             ("teensy41-sdio", "sd4", 45_000_000)]


def _sd_run(host_name: str, bus: str, clock_hz: int, fused: bool, *, boundaries: bool,
            recording: bool) -> tuple[list[Any], Any, int]:
    over: dict[str, Any] = {"capacity_bytes": 256 << 20, "pause_probability": 0.05}
    if boundaries:
        over.update(read_page_cross_us=3.0, read_au_cross_us=40.0)
    clock = VirtualClock()
    rec = Recording() if recording else None
    clock.recording = rec
    dev = SdHostDriver(load_host(host_name), SdBus(BusConfig(bus, clock_hz)), load_card("generic-sdhc", over), clock,
                       seed=5)
    if rec is not None:
        rec.start()
    read = dev.reader() if fused else dev.read
    rng = random.Random(11)
    end = dev.geometry.sector_count
    out: list[Any] = []
    for i in range(1500):
        kind = rng.choice(["read"] * 12 + ["write", "erase", "read_multi", "log", "edge"])
        lba = rng.randrange(0, 64 << 11)
        count = rng.choice([1, 1, 1, 1, 2, 8, 33])
        buf = rng.choice([0, 0, 0, 4096, 2])  # 2: a buffer the SDMMC DMA cannot take
        if kind == "read":
            out.append(_attempt(read, lba, count, buf_addr=buf))
        elif kind == "write":
            dev.write(lba, bytes([i & 0xFF]) * (512 * count), buf_addr=buf)
        elif kind == "erase":
            dev.erase(lba, count)
        elif kind == "read_multi":
            out.append(dev.read_multi(lba, count))
        elif kind == "log":  # a command log kept for a while (sdbench trace): every read runs command by command
            dev.log = []
            out.append([_attempt(read, lba + j, count, buf_addr=buf) for j in range(3)])
            dev.log = None
        else:  # reads the checks refuse, and the last sectors
            out.append(_attempt(read, rng.choice([-1, end - count + 1, end]), count))
            out.append(_attempt(read, end - count, count))
            if not boundaries:  # (a read of no sectors over boundary costs trips the card model: not this test's)
                out.append(_attempt(read, lba, 0))
    state = (_clock_state(clock), _fields(dev.stats), dev.card.merges, dev.card.pauses, len(dev.log or ()),
             rec.items if rec is not None else None)
    return out, state, dev.geometry.sector_count


@pytest.mark.parametrize("host,bus,clock_hz", SD_SETUPS)
@pytest.mark.parametrize("boundaries,recording", [(False, False), (True, True)])
def test_sd_fused_reads_match_the_general_path(monkeypatch, host, bus, clock_hz, boundaries, recording):
    steps = _Counted(monkeypatch, SdHostDriver, "_read_time")
    general = _sd_run(host, bus, clock_hz, False, boundaries=boundaries, recording=recording)
    general_steps, steps.calls = steps.calls, 0
    fused = _sd_run(host, bus, clock_hz, True, boundaries=boundaries, recording=recording)
    assert fused[0] == general[0]
    assert fused[1] == general[1]
    if host == "teensy41-sdio":  # a kind that keeps transfers open: no recorded read cost, nothing to fuse
        assert steps.calls == general_steps
    else:
        assert steps.calls < general_steps / 3, "the fused path hardly ran"


def test_sd_reader_is_the_general_read_for_subclasses_and_streaming_kinds():
    class Spied(SdHostDriver):
        pass

    parts = (load_host("esp32-sdmmc"), SdBus(BusConfig("sd4", 40_000_000)), load_card("generic-sdhc"))
    assert Spied(*parts, VirtualClock()).reader().__func__ is SdHostDriver.read
    streaming = SdHostDriver(load_host("teensy41-sdio"), SdBus(BusConfig("sd4", 45_000_000)),
                             load_card("generic-sdhc"), VirtualClock())
    assert streaming.reader().__func__ is SdHostDriver.read
    assert SdHostDriver(*parts, VirtualClock()).reader() is not None


# ---- flash ----------------------------------------------------------------------------------------------

def _flash_run(fused: bool, *, recording: bool, seed: int) -> tuple[list[Any], Any]:
    clock = VirtualClock()
    rec = Recording() if recording else None
    clock.recording = rec
    chip = NorFlashChip(load_chip_profile("gd25q32c"), clock, NorChipConfig(seed=seed))
    drv = Esp32FlashDriver(chip, load_esp_flash_host(), offset_bytes=0x110000, size_bytes=0x200000)
    if rec is not None:
        rec.start()
    read = drv.reader() if fused else drv.read
    rng = random.Random(seed)
    size = drv.geometry.size_bytes
    out: list[Any] = []
    for i in range(1200):
        kind = rng.choice(["read"] * 10 + ["write", "erase", "program", "busy", "clock", "reference", "edge"])
        n = rng.choice([32, 128, 128, 512, 512, 4096, 70001])
        a = rng.randrange(0, size - n)
        if kind == "read":
            out.append(_attempt(read, a, n))
        elif kind == "write":
            drv.write(a, rng.randbytes(min(n, 5000)))
        elif kind == "erase":
            drv.erase(a - a % 4096, 4096)
        elif kind == "program":  # a program the driver did not send: the read's first lock section outlasts it
            chip.cmd_write_enable()
            chip.cmd_page_program(drv.offset_bytes + a, b"\x00" * 16)
            out.append(_attempt(read, a, n))
        elif kind == "busy":  # an erase the driver did not send: the read is refused
            chip.cmd_write_enable()
            chip.cmd_sector_erase(drv.offset_bytes + a)
            out.append(_attempt(read, a, n))
            chip.wait_ready()
        elif kind == "clock":  # a new SCLK: the recorded costs of every size change
            chip.set_bus_clock(rng.choice([40_000_000, 80_000_000]))
        elif kind == "reference":
            drv.reference_path = not drv.reference_path
        else:
            out.append(_attempt(read, rng.choice([-1, size - 10]), 64))
            out.append(_attempt(read, a, 0))
    state = (_clock_state(clock), _fields(drv.stats), _fields(drv.counters), _fields(chip.stats),
             (chip.busy_until_ns, chip._busy, chip._wel), (drv._os.acquired_since_ns, drv._os.released_since_ns),
             rec.items if rec is not None else None)
    return out, state


@pytest.mark.parametrize("recording,seed", [(False, 1), (True, 2)])
def test_flash_fused_reads_match_the_general_path(monkeypatch, recording, seed):
    steps = _Counted(monkeypatch, Esp32FlashDriver, "_read_fast")
    general = _flash_run(False, recording=recording, seed=seed)
    general_steps, steps.calls = steps.calls, 0
    fused = _flash_run(True, recording=recording, seed=seed)
    assert fused[0] == general[0]
    assert fused[1] == general[1]
    assert any(isinstance(r, tuple) and r[0] == "NorCommandError" for r in fused[0])  # the busy reads
    assert steps.calls < general_steps / 2, "the fused path hardly ran"


def test_flash_reader_is_the_general_read_for_subclasses():
    class Spied(Esp32FlashDriver):
        pass

    chip = NorFlashChip(load_chip_profile("gd25q32c"), VirtualClock())
    assert Spied(chip).reader().__func__ is Esp32FlashDriver.read
    assert esp_flash.Esp32FlashDriver(chip).reader() is not None
