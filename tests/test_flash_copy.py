"""The ESP32 flash driver's copy in pieces (Esp32FlashDriver.copy_pieces: wear levelling's dummy move) against
the reads and writes it stands for (BlockDevice.copy_pieces): after every wear-levelling call of a workload that
moves the window many times, the clock (time, categories, commands, ledger, in table order), the chip (cells,
wear, stats, busy state, its place in the busy-time stream) and the driver (counters, stats, lock times) must
be the same either way."""
from __future__ import annotations

import random
from dataclasses import fields, replace
from typing import Any

import pytest

from sdbench.clock import VirtualClock
from sdbench.media.base import BlockDevice
from sdbench.media.sim.esp_flash import Esp32FlashDriver, load_esp_flash_host
from sdbench.media.sim.nor import NorChipConfig, NorFlashChip, load_chip_profile
from sdbench.media.wl import WearLevelling, WlConfig


def _fields(obj: Any) -> tuple[tuple[str, Any], ...]:
    return tuple((f.name, getattr(obj, f.name)) for f in fields(obj))


def _state(drv: Esp32FlashDriver) -> tuple[Any, ...]:
    chip, clock = drv.chip, drv.vclock
    return (clock.now_ns(), tuple(clock.breakdown_ns().items()), tuple(clock.commands_snapshot().items()),
            tuple(clock.ledger_ns().items()), _fields(chip.stats), chip.busy_until_ns, chip._busy, chip._wel,
            chip.busy_key, chip._draws, _fields(drv.counters), _fields(drv.stats), drv._os.acquired_since_ns,
            drv._os.released_since_ns)


def _run(host: Any, timing: str, seed: int, wl_cfg: WlConfig) -> tuple[list[Any], bytes, list[int], int]:
    chip = NorFlashChip(load_chip_profile("gd25q32c"), VirtualClock(), NorChipConfig(seed=seed, timing=timing))
    drv = Esp32FlashDriver(chip, host, offset_bytes=0x110000, size_bytes=1 << 20)
    wl = WearLevelling(drv, wl_cfg)
    rnd = random.Random(seed)
    states = [_state(drv)]
    for s in range(300):  # erases and writes enough to move the window (a dummy move per `updaterate` erases)
        sector = rnd.randrange(0, 12)
        wl.erase_sector(sector)
        wl.wl_write(sector * 4096 + rnd.choice((0, 100, 4000)), rnd.randbytes(rnd.choice((1, 96, 4096 - 4000))))
        if s % 7 == 0:
            states.append(wl.wl_read(rnd.randrange(0, 12 * 4096 - 600), 600))
        states.append(_state(drv))
    return states, chip.peek(0, chip.profile.capacity_bytes), chip.erase_counts.tolist(), wl.moves


SHIPPED = load_esp_flash_host()
CASES = {
    "shipped": (SHIPPED, "random", WlConfig()),
    # a yield every few pieces: the copy hands the clock what went before and yields as the calls would
    "yields-inside-a-copy": (replace(SHIPPED, erase_yield_duration_ms=0.05, erase_yield_ticks=1), "random",
                             WlConfig()),
    "yield-ticks-zero": (replace(SHIPPED, erase_yield_duration_ms=0.05, erase_yield_ticks=0), "random", WlConfig()),
    # a command time of no power of two of a ns, another poll interval, 16-byte pieces
    "odd-host": (replace(SHIPPED, cmd_overhead_cycles=333, poll_interval_us=7.5), "random",
                 WlConfig(temp_buff_bytes=16)),
    # no poll interval: a program's wait never charges the chip's key, so the sections' sums never start
    "no-poll-interval": (replace(SHIPPED, poll_interval_us=0.0), "random", WlConfig()),
    # pieces larger than one program: the reads and writes themselves
    "pieces-of-two-programs": (replace(SHIPPED, max_write_bytes=16), "random", WlConfig()),
    "typical-times": (SHIPPED, "typ", WlConfig()),
}
#: the cases whose moves take the one-step copy
FAST = {"shipped", "yields-inside-a-copy", "yield-ticks-zero", "odd-host"}


@pytest.mark.parametrize("case", list(CASES))
def test_a_copy_in_one_step_is_its_reads_and_writes(monkeypatch, case):
    host, timing, wl_cfg = CASES[case]
    taken = []
    real = Esp32FlashDriver._copy_fast

    def counted(self, *args):
        done = real(self, *args)
        taken.append(done)
        return done
    monkeypatch.setattr(Esp32FlashDriver, "_copy_fast", counted)
    fast = _run(host, timing, 3, wl_cfg)
    monkeypatch.setattr(Esp32FlashDriver, "copy_pieces", BlockDevice.copy_pieces)
    calls = _run(host, timing, 3, wl_cfg)
    assert fast[3] == calls[3] >= 10  # dummy moves
    assert fast[1] == calls[1] and fast[2] == calls[2]
    for i, (a, b) in enumerate(zip(fast[0], calls[0])):
        assert a == b, f"step {i} differs"
    assert len(fast[0]) == len(calls[0])
    if case in FAST:
        assert sum(taken) >= 10, "the moves did not take the one-step copy"
    else:
        assert not any(taken)
