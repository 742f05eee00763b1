"""The simulator's hot path: one 512-byte block read through the simulated ESP32 SDMMC host, bus and card.

A block read is what littlefs' cache does on a miss (about a million times per ESP-IDF protocol run): its
callback reads one block through the host driver, the SD 4-bit bus and the card.  It is timed on the fused path
the filesystem adapters take (BlockDevice.reader: the driver's checks, request and costs in one function) and on
the general path (BlockDevice.read: checks, _read, _read_time), side by side in the same run, alone and with a
recording on the clock (as a run with ranges has).  Both paths charge the same clock (tests/test_fused_read.py);
this measures what the fusing saves: the best of a few repeats, each timed between two passes of the reference
loop (benchmarks/reference.py, :func:`timed`) so that it compares across loads.
"""
from __future__ import annotations

from typing import Callable

from reference import timed

from sdbench.clock import VirtualClock
from sdbench.fs.littlefs import LittleFsConfig, _Context
from sdbench.ledger import Recording
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.sdhost import SdHostDriver
from sdbench.stack.sd import load_card, load_host

BLOCKS = 100_000
REPEATS = 3


def _driver(recording: bool) -> SdHostDriver:
    clock = VirtualClock()
    rec = Recording() if recording else None
    clock.recording = rec
    dev = SdHostDriver(load_host("esp32-sdmmc"), SdBus(BusConfig("sd4", 40_000_000)),
                       load_card("esp32-perfbench-card"), clock, seed=1)
    if rec is not None:
        rec.start()
    dev.write(0, bytes(range(256)) * 2 * 64)  # 64 blocks of data to read back
    return dev


def _reads(ctx: _Context) -> Callable[[], None]:
    read = ctx.read

    def run() -> None:
        for i in range(BLOCKS):
            read(None, i & 63, 0, 512)
    return run


def run() -> str:
    rows = []
    for recording in (False, True):
        times = {}
        for path in ("general", "fused"):
            dev = _driver(recording)
            ctx = _Context(dev, LittleFsConfig())
            if path == "general":  # littlefs' callback as a method, on BlockDevice.read: the path before the fused one
                ctx.read = _Context.read.__get__(ctx)  # type: ignore[method-assign]
            wall, norm, _ = timed(_reads(ctx), repeats=REPEATS)
            times[path] = (wall, norm)
        how = " with a recording" if recording else ""
        for path in ("general", "fused"):
            t, norm = times[path]
            rows.append(f"| block read, {path} path{how} | {t / BLOCKS * 1e6:.2f} µs | {norm / BLOCKS * 1e6:.2f} µs | |")
        rows.append(f"| fused against general{how} | | | **{times['general'][1] / times['fused'][1]:.2f}x** faster |")
    head = ["## Hot path: a 512-byte block read", "",
            f"littlefs' read callback -> ESP32 SDMMC host driver -> SD 4-bit bus at 40 MHz -> card (the ESP-IDF "
            f"protocol's card), {BLOCKS:,} reads per repeat, best of {REPEATS}; wall time per read, and normalised "
            f"to the reference machine (benchmarks/reference.py).", "",
            "| what | wall per read | normalised | ratio (same run) |", "|---|---:|---:|---|"]
    return "\n".join(head + rows + [""])


if __name__ == "__main__":
    print(run())
