"""ESP32 SPI1 flash driver model (ESP-IDF ``esp_flash`` / ``esp_partition``) over a NOR chip.

What one API call turns into on the bus, following ESP-IDF v5's
``esp_flash_api.c``, ``spi_flash_chip_generic.c`` and the memspi host slicers:

* **read** (``esp_flash_read``): chunks of at most ``read_chunk_bytes``
  (16 KiB, MAX_READ_CHUNK), each inside one lock section (SPI1 lock + cache
  disable/enable: ``op_overhead_cycles``).  Inside, one read command per at
  most ``max_read_bytes`` (64 B: the SPI1 data buffer, SPI_FLASH_HAL_MAX_READ_BYTES),
  in the configured ``flash_mode``; each command costs ``cmd_overhead_cycles``
  of host software plus its bus clocks.
* **write** (``esp_flash_write``): chunks of at most ``write_chunk_bytes`` (8 KiB,
  MAX_WRITE_CHUNK), each a lock section preceded by the yield check.  Inside,
  one page program per at most ``max_write_bytes`` (64 B) that never crosses a
  256-byte page.  Per program: wait idle (RDSR), WREN, RDSR (WEL check),
  wait idle (RDSR), PP, then RDSR polling every ``poll_interval_us`` (20 µs,
  CHIP_WAIT_IDLE_INTERVAL_US) until WIP clears.
* **erase** (``esp_flash_erase_region``): per 64 KiB block where aligned and
  long enough, else per 4 KiB sector: yield check, lock section, RDSR, WREN,
  RDSR, SE/BE64, RDSR polling.
* **yield** (CONFIG_SPI_FLASH_YIELD_DURING_ERASE, default on; checked before
  every write chunk and erase command): when the flash has been held for
  ``erase_yield_duration_ms`` (20 ms) without a release of at least one tick,
  the task sleeps ``erase_yield_ticks`` (vTaskDelay: until the next tick boundary).

Time goes to the clock's ``host`` (software), ``bus`` (SPI transfers),
``flash`` (waiting for program/erase) and ``rtos`` (yields) categories.
Buffers are taken to be in internal RAM (direct read/write, no bounce copy).

Speed: reads and write lock sections are replayed arithmetically and charged to
the clock in one step (see "fast paths" below), with results identical to the
command-by-command path (the reference), which still runs whenever the replay
cannot be exact; callers that read very often take a fused read
(:meth:`Esp32FlashDriver.reader`).  ``reference_path=True`` (per driver, or
:data:`REFERENCE_PATH` for drivers built without the argument) makes every call
take the reference path: for anything that must see each command on its way to
the chip, and for the tests that hold the two paths to the same results.

The driver is a byte-addressed BlockDevice (sector_size 1, erase_size 4096,
erase_value 0xFF) over the whole chip or a partition window
(``offset_bytes``/``size_bytes``), which is what ``esp_partition_read/write/
erase_range`` offer to wear levelling, SPIFFS and littlefs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from ...clock import ClockDelta, VirtualClock
from ...errors import ConfigError
from ... import profiles
from ...profiles import FIT_REL_SD_HELP, UNFITTED_HELP, check_fit_rel_sd
from ...options import opt, to_mapping
from ..base import BlockDevice, Geometry
from .card import MAX_TIME_US
from .host import DESCRIPTION_RETIRED, STDIO_HELP, check_text_fields, host_metadata, mhz_text
from .newlib import NewlibStdio
from .program_runs import WINDOW as RUN_WINDOW, ProgramRuns, exact_below_ns
from .nor import ADDR_BITS, BLOCK64_BYTES, CMD_CLOCKS, READ_MODES, RDSR_CLOCKS, SECTOR_BYTES, NorFlashChip

FLASH_MODES = ("qio", "qout", "dio", "dout", "fastrd", "slowrd")
#: ledger keys (sdbench.clock.VirtualClock.ledger_ns) of the flash driver's time
CMD_KEY = "flash.host.cmd_overhead_cycles"
OP_KEY = "flash.host.op_overhead_cycles"
BUS_KEY = "flash.host.flash_clock_hz"
YIELD_KEY = "flash.host.rtos_tick_hz"
PROGRAM_KEY = "flash.chip.program"
ERASE_KEY = "flash.chip.erase"

#: default of ``Esp32FlashDriver(reference_path=...)``: True sends every read and write command by command
#: (the reference path) instead of replaying lock sections in one clock step; results are the same either way
REFERENCE_PATH = False
#: a write section of at least this many programs of one size is summed from prefix sums (program_runs), not
#: program by program (below it the loop costs less than the sums' lookups)
RUN_PROGRAMS = 8
#: ... unless a wait after one of its programs could take more poll intervals than this (a table per interval)
RUN_MAX_INTERVALS = 4096


@dataclass(frozen=True)
class EspFlashHostProfile:
    """ESP32 + ESP-IDF esp_flash driver: software costs in CPU cycles, SPI1 settings, FreeRTOS yield rules."""

    RETIRED_OPTIONS: ClassVar[dict[str, str]] = {"description": DESCRIPTION_RETIRED}

    name: str = opt("esp32-flash", help="host name")
    mcu: str = opt("", help="MCU or module, e.g. \"ESP32\"; no clock figures (the description adds cpu_hz)")
    software: str = opt("", help="flash driver and its build, e.g. \"ESP-IDF v5 esp_flash on SPI1\"; no clock figures "
                                 "(the description adds the clocks)")
    cpu_hz: int = opt(160_000_000, unit="Hz", min=1_000_000, help="CPU clock the cycle counts run at")
    flash_clock_hz: int = opt(40_000_000, unit="Hz", min=1_000_000,
                              help="SPI1 flash clock (CONFIG_ESPTOOLPY_FLASHFREQ)")
    flash_mode: str = opt("dio", choices=FLASH_MODES, help="read mode (CONFIG_ESPTOOLPY_FLASHMODE)")
    cmd_overhead_cycles: int = opt(400, unit="cycles", min=0,
                                   help="software cost of one SPI1 transaction (HAL register set-up, start, "
                                        "done polling, data register copy)")
    op_overhead_cycles: int = opt(3200, unit="cycles", min=0,
                                  help="software cost of one lock section (SPI1 lock, cache disable/enable on both "
                                       "CPUs, cache flush, partition checks)")
    max_read_bytes: int = opt(64, unit="B", min=1, help="bytes per read command (SPI_FLASH_HAL_MAX_READ_BYTES)")
    max_write_bytes: int = opt(64, unit="B", min=1, help="bytes per page program (SPI_FLASH_HAL_MAX_WRITE_BYTES)")
    read_chunk_bytes: int = opt(16384, unit="B", min=1, help="bytes per lock section of a read (MAX_READ_CHUNK)")
    write_chunk_bytes: int = opt(8192, unit="B", min=1,
                                 help="bytes per lock section of a write (MAX_WRITE_CHUNK, "
                                      "CONFIG_SPI_FLASH_WRITE_CHUNK_SIZE)")
    poll_interval_us: float = opt(20.0, unit="µs", min=0, max=MAX_TIME_US,
                                  help="delay between RDSR polls (CHIP_WAIT_IDLE_INTERVAL_US)")
    extra_dummy_clocks: int = opt(0, unit="clocks", min=0, max=16,
                                  help="extra read dummy clocks for GPIO-matrix input delay (0 on IOMUX pins)")
    rtos_tick_hz: int = opt(100, unit="Hz", min=1, max=1000, help="FreeRTOS tick (CONFIG_FREERTOS_HZ: 1..1000 Hz)")
    yield_during_erase: bool = opt(True, help="CONFIG_SPI_FLASH_YIELD_DURING_ERASE (also checked per write chunk)")
    erase_yield_duration_ms: float = opt(20.0, unit="ms", min=0, max=MAX_TIME_US / 1000,
                                         help="hold time before a yield (CONFIG_SPI_FLASH_ERASE_YIELD_DURATION_MS)")
    erase_yield_ticks: int = opt(1, unit="ticks", min=1,
                                 help="vTaskDelay of a yield (CONFIG_SPI_FLASH_ERASE_YIELD_TICKS)")
    max_flash_clock_hz: int = opt(0, unit="Hz", min=0,
                                  help="highest SPI1 flash clock the host can set (ESP32: 80 MHz); a faster "
                                       "flash_clock_hz is refused; 0 = no limit")
    # newlib's FILE layer above the VFS (fopen/fprintf/fgetc): one block of its own, see media/sim/newlib.py
    stdio: NewlibStdio = opt(factory=NewlibStdio, help=STDIO_HELP)
    fit_rel_sd: dict[str, float] = opt(factory=dict, help=FIT_REL_SD_HELP)
    unfitted: dict[str, float] = opt(factory=dict, help=UNFITTED_HELP)

    def __post_init__(self) -> None:
        check_fit_rel_sd(self)
        check_text_fields(self, ("mcu", "software"), "cpu_hz, flash_clock_hz, rtos_tick_hz")

    @property
    def description(self) -> str:
        """One line for readers: mcu and software, then the CPU clock, flash mode and clock and the tick from
        the parameters, so an override of any of them shows here too."""
        head = f"{self.mcu or 'host'} at {mhz_text(self.cpu_hz)}"
        if self.software:
            head += f", {self.software}"
        facts = [f"flash {self.flash_mode.upper()} at {mhz_text(self.flash_clock_hz)}"]
        if self.yield_during_erase:  # ticks are waited only by the yields of long writes and erases
            facts.append(f"RTOS tick {self.rtos_tick_hz} Hz (erase yields)")
        return f"{head}; {', '.join(facts)}"

    def cycles_ns(self, cycles: float) -> float:
        return cycles * 1e9 / self.cpu_hz




def load_esp_flash_host(name_or_path: str | Path = "esp32-flash",
                        overrides: dict[str, Any] | None = None) -> EspFlashHostProfile:
    """Load an ESP flash host profile by shipped name or from a TOML file path."""
    return profiles.load(EspFlashHostProfile, "hosts", str(name_or_path), overrides, what="ESP flash host profile")


@dataclass
class EspFlashCounters:
    """What the driver did, beyond the chip's command counts."""

    lock_sections: int = 0     # spiflash start/end pairs (cache disable/enable)
    transactions: int = 0      # SPI1 user transactions (reads, WREN, RDSR, PP, SE, BE)
    poll_waits: int = 0        # poll_interval delays while the chip was busy
    yields: int = 0            # vTaskDelay yields during long writes/erases
    yield_ns: int = 0


class _OsState:
    """Per-chip OS bookkeeping shared by all partitions of a chip (spi1 os_func context)."""

    def __init__(self, now_ns: int) -> None:
        self.acquired_since_ns = now_ns
        self.released_since_ns = now_ns


def _charged(parts: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...]:
    """A fast path's (table key, ns) pairs without those of no time: the steps the command-by-command path takes
    one by one never enter a key for a step of 0 ns (VirtualClock.advance_ns)."""
    for _, v in parts:
        if not v:
            return tuple(kv for kv in parts if kv[1])
    return parts


class Esp32FlashDriver(BlockDevice):
    """esp_flash on SPI1 over a :class:`NorFlashChip`, byte-addressed, optionally a partition window."""

    kind = "esp32-flash"

    def __init__(self, chip: NorFlashChip, profile: EspFlashHostProfile | None = None, *, offset_bytes: int = 0,
                 size_bytes: int | None = None, read_only: bool = False, reference_path: bool | None = None,
                 _os: _OsState | None = None) -> None:
        prof = profile or EspFlashHostProfile()
        cap = chip.profile.capacity_bytes
        size = cap - offset_bytes if size_bytes is None else size_bytes
        if offset_bytes < 0 or offset_bytes % SECTOR_BYTES or size <= 0 or size % SECTOR_BYTES:
            raise ConfigError(f"flash partition must be whole 4 KiB sectors: offset 0x{offset_bytes:X}, "
                              f"size 0x{size:X}")
        if offset_bytes + size > cap:
            raise ConfigError(f"flash partition 0x{offset_bytes:X}+0x{size:X} does not fit the "
                              f"{cap // 1024} KiB chip {chip.profile.name}")
        super().__init__(Geometry(sector_size=1, sector_count=size, read_size=1, prog_size=1,
                                  erase_size=SECTOR_BYTES, erase_value=0xFF), chip.clock, read_only=read_only)
        if prof.max_flash_clock_hz and prof.flash_clock_hz > prof.max_flash_clock_hz:
            raise ConfigError(f"flash host {prof.name}: flash_clock_hz = {prof.flash_clock_hz} Hz is above the host's "
                              f"limit {prof.max_flash_clock_hz} Hz (max_flash_clock_hz)")
        chip.set_bus_clock(prof.flash_clock_hz)
        chip.check_read_mode(prof.flash_mode)
        self.chip = chip
        self.profile = prof
        self.offset_bytes = offset_bytes
        self.vclock: VirtualClock = chip.vclock
        self.counters = EspFlashCounters()
        self._os = _os or _OsState(self.vclock.now_ns())
        self._cmd_ns = prof.cycles_ns(prof.cmd_overhead_cycles)
        self._op_ns = prof.cycles_ns(prof.op_overhead_cycles)
        self._poll_ns = prof.poll_interval_us * 1e3
        self._tick_ns = 1e9 / prof.rtos_tick_hz
        self._mode = prof.flash_mode
        self._page = chip.profile.page_size_bytes
        #: True: every read and write goes command by command (see REFERENCE_PATH)
        self.reference_path = REFERENCE_PATH if reference_path is None else bool(reference_path)
        # fast paths (see _write_section_fast): integer clock steps, recomputed if the chip's SCLK changes
        self._fast_npc = -1.0
        self._fast: tuple[Any, ...] = ()
        self._read_costs: dict[int, ClockDelta] = {}  # _read_cost by size
        self._program_shapes: dict[tuple[int, int], tuple[int, ...]] = {}  # _programs by page offset and size
        # sections of many programs of one size, summed from their busy draws (program_runs), by program size
        self._runs: dict[int, ProgramRuns | None] = {}
        self._exact_below = 0  # the clock time below which they may be (exact_below_ns)
        self._write_primed = False
        self._write_sums: list[int] | None = None  # _summer
        self._read_primed = False
        self._erase_primed: set[str] = set()  # the erase commands _erase_fast may replay
        # the clock's recording (sdbench.ledger): requests reported to it, or, when replaying, registered only
        rec = self.vclock.recording
        self._rec = None if rec is None or rec.replaying else rec
        self._rec_id = rec.register(self) if rec is not None else -1
        #: replaying another run's requests: the write sections keep the time and the chip's timing state only
        #: (a replay reads the clock's time alone and programs zeros, whose cells it never reads)
        self._time_only = rec is not None and rec.replaying
        self._zeros = b""

    def partition(self, offset_bytes: int, size_bytes: int) -> "Esp32FlashDriver":
        """Another window on the same chip, sharing the driver's OS state (as esp_partition does) and its
        choice of path."""
        return type(self)(self.chip, self.profile, offset_bytes=self.offset_bytes + offset_bytes,
                          size_bytes=size_bytes, read_only=self.read_only, reference_path=self.reference_path,
                          _os=self._os)

    # ---- time helpers ----------------------------------------------------------------
    def _host(self, ns: float) -> None:
        self.vclock.advance_ns(ns, "host", CMD_KEY)

    def _lock_section(self) -> None:
        """spiflash start + end: SPI1 lock, caches off and on again (charged once, up front)."""
        self.counters.lock_sections += 1
        self.vclock.advance_ns(self._op_ns, "host", OP_KEY)

    def _release(self) -> None:
        self._os.released_since_ns = self.vclock.now_ns()

    def _yield_check(self) -> None:
        """chip_drv->yield before a write chunk / erase command (spi_flash_os_check_yield)."""
        prof = self.profile
        if not prof.yield_during_erase:
            return
        os_ = self._os
        now = self.vclock.now_ns()
        if now - os_.released_since_ns >= prof.erase_yield_ticks * self._tick_ns:
            os_.acquired_since_ns = now  # released long enough: as if it had just yielded
        elif now - os_.acquired_since_ns >= prof.erase_yield_duration_ms * 1e6:
            tick = self._tick_ns
            wake = (int(now // tick) + prof.erase_yield_ticks) * tick  # vTaskDelay wakes on a tick
            self.vclock.advance_ns(wake - now, "rtos", YIELD_KEY)
            self.counters.yields += 1
            self.counters.yield_ns += int(round(wake - now))
            os_.acquired_since_ns = self.vclock.now_ns()

    def _wait_idle(self) -> None:
        """spi_flash_chip_generic_wait_idle: RDSR, and while WIP: delay poll_interval, RDSR again.

        Computed in closed form (one erase is thousands of polls): the k-th RDSR
        samples the status at t0 + (k+1)*(cmd + rdsr) + k*interval.
        """
        chip = self.chip
        h = self._cmd_ns
        b = chip.rdsr_ns
        now = self.vclock.now_ns()
        first = now + h + b
        busy_until = chip.busy_until_ns
        waits = 0
        if busy_until > first:
            period = h + b + self._poll_ns
            waits = int(-(-(busy_until - first) // period)) if period > 0 else 0
        polls = waits + 1
        self.vclock.advance_ns(polls * h, "host", CMD_KEY)
        self.vclock.advance_ns(polls * b, "bus", BUS_KEY)
        if waits:
            self.vclock.advance_ns(waits * self._poll_ns, "flash", chip.busy_key)
        # rounding of the steps to whole ns must not leave the chip busy at the last poll
        late = chip.busy_until_ns - self.vclock.now_ns()
        if late > 0:
            self.vclock.advance_ns(late, "flash", chip.busy_key)
        self.counters.transactions += polls
        self.counters.poll_waits += waits
        chip.note_status_reads(polls)

    def _write_enable(self) -> None:
        """set_chip_write_protect(false): wait idle, WREN, RDSR to check WEL."""
        self._wait_idle()
        self._host(self._cmd_ns)
        self.chip.cmd_write_enable()
        self._host(self._cmd_ns)
        self.chip.cmd_read_status()
        self.counters.transactions += 2

    # ---- fast paths --------------------------------------------------------------------
    # A lock section (and a whole esp_flash_read) is atomic for everything above the driver: nothing else
    # reads the clock or the chip between its commands.  The fast paths therefore replay a section (a write's,
    # an erase's) arithmetically and move the clock once (VirtualClock.apply_parts; a read's cost, the same for
    # every read of its size, with VirtualClock.charge), with exactly the integer steps the command-by-command
    # path takes (advance_ns rounds every step on its own; those rounded steps are summed here), the same random
    # busy draws in the same order, and the same counters and chip state.  They are used only when
    #  * the driver is not set to the reference path (reference_path / REFERENCE_PATH),
    #  * the clock already has every time category, command name and ledger key the section can add, so a
    #    one-step apply_parts() cannot change the insertion order of the tables (an erase: but its wait's flash
    #    time, which comes last on both paths), and no key of a zero step enters them (_charged),
    #  * the section does not wrap at the chip end, and (writes) strict mode has nothing to refuse.
    # Replaying another run (sdbench.ledger.replay: a clock that keeps the time alone, zeros programmed), the
    # sections keep the time and the chip's timing state only (_time_only).
    # Otherwise the command-by-command path (the reference) runs.  Since the fast paths never call the
    # driver's per-command steps or the chip's command methods, anything that hooks those (a spy, a trace)
    # needs reference_path=True.  tests/test_esp_flash_paths.py holds the two paths to identical results.

    def _fast_consts(self) -> tuple[Any, ...]:
        chip = self.chip
        npc = chip._ns_per_clock
        if npc != self._fast_npc:
            h = self._cmd_ns
            b = RDSR_CLOCKS * npc          # chip.rdsr_ns
            poll = self._poll_ns
            f = READ_MODES[self._mode]
            read_hdr = f.header_clocks + self.profile.extra_dummy_clocks
            H1, B1, W = int(h + 0.5), int(b + 0.5), int(CMD_CLOCKS * npc + 0.5)
            P = [int((CMD_CLOCKS + ADDR_BITS + 8 * k) * npc + 0.5) for k in range(self._page + 1)]
            # a program of k bytes from the end of the previous one's wait up to its own busy: the idle wait
            # before WREN (one RDSR), WREN, RDSR (WEL check), the idle wait after it (one RDSR), PP
            program = [H1 + B1 + 4 * H1 + W + 2 * B1 + P[k] for k in range(self._page + 1)]
            self._fast = (
                h, b, poll, h + b + poll,
                H1,                                             # one cmd_overhead step (host)
                B1,                                             # one RDSR (bus)
                int(self._op_ns + 0.5),                         # one lock section (host)
                W,                                              # WREN (bus)
                P,                                              # PP (bus), by its bytes
                read_hdr, f.data_lanes, npc,
                {},                                             # _wait_step by number of waits
                {},                                             # _wait_parts by number of waits
                program,                                        # see above, by the program's bytes
            )
            self._fast_npc = npc
            self._read_costs.clear()
            self._runs = {}
            self._exact_below = exact_below_ns(h, b)
        return self._fast

    def _host_keys(self) -> tuple[str, ...]:
        """The host's ledger keys a fast section charges (but the chip's busy, which comes last on both paths):
        the lock's when it takes time, the commands' when they do (a command overhead below half a ns still adds
        up over a wait's polls, after a program's busy: its key must be there first), the bus's."""
        return tuple(k for k, v in ((OP_KEY, int(self._op_ns + 0.5)), (CMD_KEY, self._cmd_ns), (BUS_KEY, 1)) if v)

    def _primed(self, spent: tuple[str, ...], commands: tuple[str, ...], params: tuple[str, ...] = ()) -> bool:
        """Whether the clock's tables hold these categories, commands and ledger keys (a replay's clock keeps no
        tables: nothing to keep in order)."""
        if self._time_only:
            return True
        bd = self.vclock.breakdown_ns()
        cmds = self.vclock.commands_snapshot()
        ledger = self.vclock.ledger_ns() if params else {}
        return all(k in bd for k in spent) and all(k in cmds for k in commands) and all(k in ledger for k in params)

    def _write_section_fast(self, start: int, smv: memoryview) -> bool:
        """One write lock section (lock, then per program: wait idle, WREN, RDSR, wait idle, PP, wait idle)
        replayed in one clock step.  Returns False (nothing done) when the exact path must run instead.

        The chip draws the programs' busy times as it would one by one (NorFlashChip.program_busy_ns); one pass
        over them moves the section's time forward (the polls of a busy wait depend on where in the ns grid it
        starts); the busy waits are kept by their number of waits, whose integer steps are the same each time
        (_wait_step)."""
        chip = self.chip
        if not self._write_primed:
            if not self._primed(("host", "bus", "flash"), ("RDSR", "WREN", "PP"), self._host_keys()):
                return False
            self._write_primed = True
        size = len(smv)
        if start < 0 or start + size > chip.profile.capacity_bytes or smv.format != "B" or not smv.contiguous:
            return False
        time_only = self._time_only
        up = None if time_only else chip.span_zero_to_one(start, smv)
        if up is not None and chip.config.strict:
            return False  # the exact path raises at the right program, with the right state
        now0 = self.vclock.now_ns()
        if chip._busy_until_ns > now0 and chip.busy_key != PROGRAM_KEY and not time_only:
            return False  # still busy with an erase (a chip command sent directly): the exact path says so
        if chip._ns_per_clock != self._fast_npc:
            self._fast_consts()
        h, b, _, period, H1, B1, OP1, _, _, _, _, _, wait_steps, wait_parts, program = self._fast
        HB = H1 + B1                 # an idle _wait_idle: one RDSR
        ks = self._program_shapes.get((start % self._page, size)) or self._programs(start, size)
        nprog = len(ks)
        k = ks[0]
        run = None
        if nprog >= RUN_PROGRAMS and now0 < self._exact_below and ks.count(k) == nprog:
            run = self._program_run(k, nprog)
        busies = chip.program_busy_ns(ks) if run is None else ()  # drawn in program order as the chip does

        now = now0 + OP1
        waited: list[int] = []       # the waits of each busy _wait_idle (the others poll once: 2 nprog - len)
        wait = waited.append
        late = 0                     # waits past the last poll (rounding of the steps to whole ns)
        # _wait_idle before the first WREN: the chip may still be busy when the section starts
        bu = chip._busy_until_ns
        first = now + h + b
        if bu > first:
            waits = -int((first - bu) // period)
            now += wait_steps.get(waits) or self._wait_step(waits)
            wait(waits)
        else:
            now += HB
        if bu > now:
            late += bu - now
            now = bu
        now -= HB  # the first program has no idle wait before its WREN but that one
        if run is not None:
            # the programs' sums (ProgramRuns): each adds its step up to the PP and the longer of its wait and busy
            now += nprog * program[k] + run[1]
            bu = now - run[7] + run[6]
            late += run[2]
        for k, busy in zip(ks, busies):
            now += program[k]
            bu = now + busy
            # _wait_idle after PP
            first = now + h + b
            if bu > first:
                waits = -int((first - bu) // period)  # ceil((bu - first) / period)
                now += wait_steps.get(waits) or self._wait_step(waits)
                wait(waits)
            else:
                now += HB
            if bu > now:
                late += bu - now
                now = bu
        chip.polled_idle(bu, PROGRAM_KEY)
        if time_only:
            self.vclock.move_ns(now - now0)
            return True
        # the waits not in `waited` poll once (the run's waits after a PP are in its sums, idle ones included)
        n_idle = (2 * nprog if run is None else nprog) - len(waited)
        polls_total = n_idle
        waits_total = host = 0
        flash = late
        for waits in set(waited):
            n = waited.count(waits)
            hs, _, fs = wait_parts[waits]
            host += n * hs
            flash += n * fs
            polls_total += n * (waits + 1)
            waits_total += n * waits
        host += OP1 + n_idle * H1 + nprog * 4 * H1  # before WREN, before RDSR, the idle wait's RDSR, before PP
        if run is not None:
            host += run[3]
            flash += run[4]
            polls_total += run[5] + nprog
            waits_total += run[5]
        chip.and_span(start, smv, up is None)
        st = chip.stats
        st.page_programs += nprog
        st.bytes_programmed += size
        st.status_reads += polls_total + 2 * nprog
        st.busy_ns += sum(busies) if run is None else run[0]
        if up is not None:
            self._count_zero_to_one(ks, up)
        c = self.counters
        c.lock_sections += 1
        c.transactions += polls_total + 4 * nprog
        c.poll_waits += waits_total
        sums = self._write_sums or self._summer()
        if sums is None:
            self._apply_section(now - now0, OP1, host, flash, PROGRAM_KEY,
                                (("RDSR", polls_total + 2 * nprog), ("WREN", nprog), ("PP", nprog)))
            return True
        # the parts _apply_section gives the clock, summed when its tables are read
        total = now - now0
        bus = total - host - flash
        self.vclock.advance_summed(total)
        sums[0] += host
        sums[1] += bus
        sums[2] += flash
        sums[3] += polls_total + 2 * nprog
        sums[4] += nprog
        sums[5] += nprog
        sums[6] += OP1
        sums[7] += host - OP1
        sums[8] += bus
        sums[9] += flash
        return True

    def _summer(self) -> list[int] | None:
        """The clock's sums of the write sections' parts (VirtualClock.summer), once every key is in its table."""
        self._write_sums = self.vclock.summer(("host", "bus", "flash"), ("RDSR", "WREN", "PP"),
                                              (OP_KEY, CMD_KEY, BUS_KEY, PROGRAM_KEY))
        return self._write_sums

    def _apply_section(self, total: int, op: int, host: int, flash: int, flash_key: str,
                       commands: tuple[tuple[str, int], ...]) -> None:
        """A fast section's one step on the clock: ``total`` ns, of which ``op`` the lock, ``host`` all host time
        (the lock's included), ``flash`` the waits past the chip's busy (to ``flash_key``), the rest bus time
        (every step of a section is one of the three)."""
        bus = total - host - flash
        self.vclock.apply_parts(
            total, _charged((("host", host), ("bus", bus), ("flash", flash))), commands,
            _charged(((OP_KEY, op), (CMD_KEY, host - op), (BUS_KEY, bus), (flash_key, flash))))

    def _program_run(self, k: int, n: int) -> list[int] | None:
        """The sums of a section's ``n`` programs of ``k`` bytes (ProgramRuns.sums), their busy times drawn; None
        (nothing drawn) when the chip does not draw them or the waits would need too many thresholds."""
        runs = self._runs.get(k)
        if runs is None:
            if k in self._runs:
                return None
            chip = self.chip
            typ, mx = chip.program_times_ns(k)
            f = self._fast
            hb, period = f[0] + f[1], f[3]  # the loop's h + b and poll period
            if (mx - hb) / period > RUN_MAX_INTERVALS:
                self._runs[k] = None
                return None
            runs = self._runs[k] = ProgramRuns(typ, mx, hb, period, self._wait_parts)
        drawn = self.chip.program_run_draws(k, n, RUN_WINDOW)
        if drawn is None:
            self._runs[k] = None
            return None
        values, i = drawn
        if not runs.covers(values, i, n):
            runs.take(values, i, i + max(n, RUN_WINDOW))
        return runs.sums(i, n)

    def _programs(self, start: int, size: int) -> tuple[int, ...]:
        """The byte counts of the page programs of a write at ``start``: at most max_write_bytes, never across a
        page (kept per page offset and size: a run writes few shapes)."""
        key = (start % self._page, size)
        ks = self._program_shapes.get(key)
        if ks is None:
            page, step = self._page, self.profile.max_write_bytes
            out = []
            a, end = start, start + size
            while a < end:
                k = min(page - a % page, step, end - a)
                out.append(k)
                a += k
            if len(self._program_shapes) >= 256:
                self._program_shapes.clear()
            ks = self._program_shapes[key] = tuple(out)
        return ks

    def _wait_step(self, waits: int) -> int:
        """The time of a _wait_idle that waited ``waits`` poll intervals, kept in _fast_consts' tables with its
        integer host, bus and flash steps (_wait_parts)."""
        parts = self._fast[13][waits] = self._wait_parts(waits)
        step = self._fast[12][waits] = sum(parts)
        return step

    def _wait_parts(self, waits: int) -> tuple[int, int, int]:
        """The integer host, bus and flash steps of a _wait_idle that waited ``waits`` poll intervals: its polls'
        commands, their RDSRs, the intervals (each rounded as advance_ns rounds it)."""
        h, b, poll = self._fast[0], self._fast[1], self._fast[2]
        polls = waits + 1
        return int(polls * h + 0.5), int(polls * b + 0.5), int(waits * poll + 0.5)

    def _count_zero_to_one(self, ks: tuple[int, ...], up: Any) -> None:
        """The chip's counts of programs that tried to set bits 0->1 (``up``: span_zero_to_one of the section)."""
        st = self.chip.stats
        o = 0
        for k in ks:
            u = up[o:o + k]
            if u.any():
                st.zero_to_one_programs += 1
                st.zero_to_one_bytes += int(np.count_nonzero(u))
                st.zero_to_one_bits += int(np.unpackbits(u).sum())
            o += k

    def _read_cost(self, size: int) -> ClockDelta:
        """The time of an esp_flash_read of ``size`` bytes while the chip is idle: lock sections of
        read_chunk_bytes, READ commands of max_read_bytes (it does not depend on the address)."""
        c = self._fast_consts()  # before the cache: a new SCLK empties it
        cost = self._read_costs.get(size)
        if cost is not None:
            return cost
        H1, OP1, hdr, lanes, npc = c[4], c[6], c[9], c[10], c[11]
        prof = self.profile
        step = prof.max_read_bytes
        chunk_max = prof.read_chunk_bytes
        full_bus = int((hdr + -(-step * 8 // lanes)) * npc + 0.5)  # one READ of `step` bytes (bus)
        host = bus = ncmd = 0
        left = size
        while left > 0:
            chunk = chunk_max if chunk_max < left else left
            nfull, rem = divmod(chunk, step)
            host += OP1 + nfull * H1
            bus += nfull * full_bus
            ncmd += nfull
            if rem:
                host += H1
                bus += int((hdr + -(-rem * 8 // lanes)) * npc + 0.5)
                ncmd += 1
            left -= chunk
        spent = tuple((cat, v) for cat, v in (("host", host), ("bus", bus)) if v)
        nsec = -(-size // chunk_max)
        cost = self._read_costs[size] = ClockDelta(host + bus, spent, (("READ", ncmd),),
                                                   _charged(((OP_KEY, nsec * OP1), (CMD_KEY, host - nsec * OP1),
                                                             (BUS_KEY, bus))))
        return cost

    def _read_fast(self, addr: int, size: int) -> bytes | None:
        """flash_read replayed in one clock step (see the fast-path notes above); None: use the exact path."""
        chip = self.chip
        if not self._read_primed:
            if not self._primed(("host", "bus"), ("READ",)):
                return None
            self._read_primed = True
        if size <= 0 or addr < 0 or addr + size > chip.profile.capacity_bytes:
            return None
        if chip._busy:
            chip._settle()  # what the first READ does
            if chip._busy:
                return None  # the exact path raises (after the host time it charges first)
        cost = self._read_cost(size)
        data = chip.mem_view(addr, size)
        ncmd = cost.commands[0][1]
        chip.stats.read_commands += ncmd
        cnt = self.counters
        cnt.lock_sections += -(-size // self.profile.read_chunk_bytes)
        cnt.transactions += ncmd
        self.vclock.charge(cost)  # the same cost object per size: summed into the tables when they are read
        self._os.released_since_ns = self.vclock.now_ns()  # _release after the last chunk
        return data

    # ---- esp_flash API (absolute chip addresses) ------------------------------------
    def flash_read(self, addr: int, size: int) -> bytes:
        """esp_flash_read."""
        if not self.reference_path:
            data = self._read_fast(addr, size)
            if data is not None:
                return data
        chip = self.chip
        out = bytearray()
        step = self.profile.max_read_bytes
        chunk_max = self.profile.read_chunk_bytes
        mode, dummy, cmd_ns = self._mode, self.profile.extra_dummy_clocks, self._cmd_ns
        adv = self.vclock.advance_ns  # (ns, category, ledger key)
        while size > 0:
            chunk = min(chunk_max, size)
            self._lock_section()
            a, left = addr, chunk
            while left > 0:
                k = step if left > step else left
                adv(cmd_ns, "host", CMD_KEY)
                out += chip.cmd_read(a, k, mode, dummy)
                self.counters.transactions += 1
                a += k
                left -= k
            self._release()
            addr += chunk
            size -= chunk
        return bytes(out)

    def flash_write(self, addr: int, data: bytes | memoryview) -> None:
        """esp_flash_write: lock sections of write_chunk_bytes, programs of <= max_write_bytes within a page."""
        mv = memoryview(data)
        n = len(mv)
        chunk_max = self.profile.write_chunk_bytes
        fast = not self.reference_path
        if 0 < n <= chunk_max and fast:  # one section (nearly every write): the loop below, without its slice
            self._yield_check()
            if not self._write_section_fast(addr, mv):
                self._write_section(addr, mv)
            self._release()
            return
        pos = 0
        while pos < n:
            chunk = min(chunk_max, n - pos)
            self._yield_check()
            section = mv[pos:pos + chunk]
            if not (fast and self._write_section_fast(addr + pos, section)):
                self._write_section(addr + pos, section)
            self._release()
            pos += chunk

    def _write_section(self, start: int, smv: memoryview) -> None:
        """One write lock section, command by command (the reference for _write_section_fast)."""
        chip = self.chip
        page = self._page
        step = self.profile.max_write_bytes
        cmd_ns = self._cmd_ns
        self._lock_section()
        a, end = start, start + len(smv)
        while a < end:
            k = min(page - a % page, step, end - a)
            self._write_enable()
            self._wait_idle()
            self._host(cmd_ns)
            chip.cmd_page_program(a, smv[a - start:a - start + k])
            self.counters.transactions += 1
            self._wait_idle()
            a += k

    def flash_erase_region(self, addr: int, size: int) -> None:
        """esp_flash_erase_region: 64 KiB blocks where aligned, else 4 KiB sectors, one lock section each."""
        chip = self.chip
        fast = not self.reference_path
        end = addr + size
        while addr < end:
            self._yield_check()
            block = addr % BLOCK64_BYTES == 0 and end - addr >= BLOCK64_BYTES
            if not (fast and self._erase_fast(addr, block)):
                self._lock_section()
                self._write_enable()
                self._wait_idle()  # erase_sector/erase_block wait once more after enabling writes
                self._host(self._cmd_ns)
                if block:
                    chip.cmd_block_erase_64k(addr)
                else:
                    chip.cmd_sector_erase(addr)
                self.counters.transactions += 1
                self._wait_idle()
            addr += BLOCK64_BYTES if block else SECTOR_BYTES
            self._release()

    def _erase_fast(self, addr: int, block: bool) -> bool:
        """One erase lock section (lock, wait idle, WREN, RDSR, wait idle, SE or BE64 (``block``), wait idle) in one
        clock step, as _write_section_fast replays a write's; False (nothing done) when the exact path must run:
        the reference path's tables not primed yet, or the chip busy when the section starts."""
        chip = self.chip
        name = "BE64" if block else "SE"
        if chip._ns_per_clock != self._fast_npc:
            self._fast_consts()
        h, b, _, period, H1, B1, OP1, W = self._fast[:8]
        if name not in self._erase_primed:
            # the tables' keys as the exact path leaves them, so the one step enters none in another order; the
            # flash time of the erase's wait may still be new (none so far): it comes last in both
            if not self._primed(("host", "bus"), ("RDSR", "WREN", name), self._host_keys()):
                return False
            self._erase_primed.add(name)
        now0 = self.vclock.now_ns()
        if chip._busy_until_ns > now0 or not period > 0:
            return False
        # OP1, the idle wait (one RDSR), WREN, RDSR (WEL check), the idle wait again, the command's header
        now = now0 + OP1 + (H1 + B1) + (H1 + W) + (H1 + B1) + (H1 + B1) + H1
        cmd_bus = int((CMD_CLOCKS + ADDR_BITS) * chip._ns_per_clock + 0.5)
        now += cmd_bus
        p = chip.profile
        if block:
            typ_ms, max_ms, size = p.block64_erase_typ_ms, p.block64_erase_max_ms, BLOCK64_BYTES
        else:
            typ_ms, max_ms, size = p.sector_erase_typ_ms, p.sector_erase_max_ms, SECTOR_BYTES
        busy = int(round(chip._draw_ns(typ_ms * 1e6, max_ms * 1e6)))  # NorFlashChip._set_busy
        bu = now + busy
        # the wait for the erase (_wait_idle)
        first = now + h + b
        waits = -int((first - bu) // period) if bu > first else 0
        polls = waits + 1
        host_w, bus_w, flash_w = self._wait_parts(waits)  # (not kept: an erase's waits seldom repeat)
        now += host_w + bus_w + flash_w
        late = bu - now if bu > now else 0
        now += late
        chip.polled_idle(bu, ERASE_KEY)
        if self._time_only:
            self.vclock.move_ns(now - now0)
            return True
        chip.erase_cells(addr, size)
        st = chip.stats
        st.busy_ns += busy
        st.status_reads += 3 + polls
        if block:
            st.block64_erases += 1
        else:
            st.sector_erases += 1
        c = self.counters
        c.lock_sections += 1
        c.transactions += 5 + polls
        c.poll_waits += waits
        self._apply_section(now - now0, OP1, OP1 + 5 * H1 + host_w, flash_w + late, ERASE_KEY,
                            (("RDSR", 3 + polls), ("WREN", 1), (name, 1)))
        return True

    # ---- BlockDevice (partition-relative, as esp_partition_*) ------------------------
    def reader(self) -> Callable[..., bytes]:
        """:meth:`read` fused for callers that read very often (littlefs' callbacks, wear levelling; see
        BlockDevice.reader): once a read of a size has taken the fast path (_read_fast), the next ones of that
        size count, charge and copy in one function.  Anything else takes the general path: the reference path,
        a busy chip, a new SCLK, a read out of range.  Only for this class itself (a subclass may hook a step);
        tests/test_fused_read.py holds it to the general path."""
        if type(self) is not Esp32FlashDriver:
            return self.read
        return _fused_reader(self)

    def copy_pieces(self, src_lba: int, dst_lba: int, count: int, piece: int) -> None:
        """BlockDevice.copy_pieces: a read of each piece, then its write (one lock section of one page program),
        worked out piece by piece with the same steps as those calls and given to the clock, the counters and
        the cells once for all the pieces, when nothing can come between (see _copy_fast); otherwise those calls."""
        if not self._copy_fast(src_lba, dst_lba, count, piece):
            super().copy_pieces(src_lba, dst_lba, count, piece)

    def _copy_fast(self, src_lba: int, dst_lba: int, count: int, piece: int) -> bool:
        """copy_pieces in one step; False (nothing done) unless each piece is a read that takes its size's recorded
        cost and a write of one program into erased cells of a page, nothing is recorded or hooked, the chip is
        idle and its busy times are drawn.  Each piece's write section takes the steps of _write_section_fast
        for one program (the time is the loop's, from the absolute time); a yield check that yields gives the
        clock what went before and takes the exact path's _yield_check."""
        chip = self.chip
        clock = self.vclock
        end = self.geometry.sector_count
        if (type(self) is not Esp32FlashDriver or self.reference_path or self._rec is not None or self._time_only
                or self.read_only or piece <= 0 or count <= 0 or count % piece or not self._write_primed
                or not self._read_primed or chip._ns_per_clock != self._fast_npc or not chip._drawn
                or min(src_lba, dst_lba) < 0 or max(src_lba, dst_lba) + count > end
                or src_lba < dst_lba + count and dst_lba < src_lba + count):
            return False
        src, dst = self.offset_bytes + src_lba, self.offset_bytes + dst_lba
        page, prof = self._page, self.profile
        if (piece > prof.max_write_bytes or piece > prof.write_chunk_bytes or dst % piece or page % piece
                or count > len(chip._erased) or not chip._erased.startswith(chip._mv[dst:dst + count])):
            return False
        sums = self._write_sums or self._summer()
        read_cost = self._read_costs.get(piece)
        typ, mx = chip.program_times_ns(piece)
        now = clock.now_ns()
        if sums is None or read_cost is None or typ <= 0.0 or chip._busy or chip._busy_until_ns > now:
            return False
        h, b, _, period, H1, B1, OP1, _, _, _, _, _, wait_steps, wait_parts, program = self._fast
        HB = H1 + B1
        step_k = program[piece]
        R = read_cost.total_ns
        n = count // piece
        values, i0 = chip.program_run_draws(piece, n, n)
        os_ = self._os
        yields = prof.yield_during_erase
        released_long = prof.erase_yield_ticks * self._tick_ns
        held_long = prof.erase_yield_duration_ms * 1e6
        ncmd = read_cost.commands[0][1]
        reads = writes = total = host = flash = polls = waits_all = busy_all = 0
        bu = 0
        for i in range(i0, i0 + n):
            now += R                 # the piece's read (its size's recorded cost), then its lock released
            reads += 1
            os_.released_since_ns = now
            if yields:               # _yield_check before the write's section
                if now - os_.released_since_ns >= released_long:
                    os_.acquired_since_ns = now
                elif now - os_.acquired_since_ns >= held_long:
                    self._apply_copied(reads, writes, total, host, flash, polls, waits_all, read_cost, sums)
                    reads = writes = total = host = flash = polls = waits_all = 0
                    self._yield_check()
                    now = clock.now_ns()
            now0 = now
            # the section (_write_section_fast, one program): lock, an idle wait (the chip finished the last
            # program), WREN, RDSR, PP, then its wait
            now += OP1 + step_k
            ns = typ * values[i]
            busy = round(mx if mx < ns else ns)
            busy_all += busy
            bu = now + busy
            first = now + h + b
            if bu > first:
                w = -int((first - bu) // period)
                now += wait_steps.get(w) or self._wait_step(w)
                hs, _, fs = wait_parts[w]
                host += OP1 + 5 * H1 + hs
                flash += fs
                polls += w + 2
                waits_all += w
            else:
                now += HB
                host += OP1 + 6 * H1
                polls += 2
            if bu > now:
                flash += bu - now
                now = bu
            writes += 1
            total += now - now0
            os_.released_since_ns = now  # _release after the write
        self._apply_copied(reads, writes, total, host, flash, polls, waits_all, read_cost, sums)
        chip.polled_idle(bu, PROGRAM_KEY)
        chip._mv[dst:dst + count] = chip._mv[src:src + count]
        st = chip.stats
        st.read_commands += n * ncmd
        st.page_programs += n
        st.bytes_programmed += count
        st.busy_ns += busy_all
        c = self.counters
        c.lock_sections += n * -(-piece // prof.read_chunk_bytes)
        c.transactions += n * ncmd
        ds = self.stats
        ds.reads += n
        ds.bytes_read += count
        ds.writes += n
        ds.bytes_written += count
        return True

    def _apply_copied(self, reads: int, writes: int, total: int, host: int, flash: int, polls: int, waits: int,
                      read_cost: ClockDelta, sums: list[int]) -> None:
        """_copy_fast's pieces so far to the clock and the write sections' counters: ``reads`` reads of
        ``read_cost``, ``writes`` one-program sections of ``total`` ns (``host``, ``flash`` and the rest bus; their
        status polls and poll intervals), summed as _write_section_fast sums a section's parts."""
        if reads:
            self.vclock.charge(read_cost, reads)
        if not writes:
            return
        self.vclock.advance_summed(total)
        op = writes * self._fast[6]
        bus = total - host - flash
        for j, v in enumerate((host, bus, flash, polls + 2 * writes, writes, writes, op, host - op, bus, flash)):
            sums[j] += v
        self.chip.stats.status_reads += polls + 2 * writes
        c = self.counters
        c.lock_sections += writes
        c.transactions += polls + 4 * writes
        c.poll_waits += waits

    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        rec = self._rec
        if rec is None:
            return self.flash_read(self.offset_bytes + lba, count)
        rec.depth += 1
        try:
            data = self.flash_read(self.offset_bytes + lba, count)
        finally:
            rec.depth -= 1
        # every write and erase waits for the chip before it returns, so a read finds it idle: its time is
        # its size's (_read_cost)
        rec.read(self._rec_id, count, lba, count)
        return data

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        if self._rec is None:  # (_reported's first case, without the call: a write is often one small section)
            self.flash_write(self.offset_bytes + lba, data)
        else:
            self._reported("write", self.flash_write, lba, len(data), data)

    def _erase(self, lba: int, count: int) -> None:
        self._reported("erase", self.flash_erase_region, lba, count, count)

    def _reported(self, name: str, call: Any, lba: int, n: int, arg: Any) -> None:
        """``call(chip address, arg)``, reported to the clock's recording as request ``name`` of ``n`` bytes."""
        rec = self._rec
        if rec is None:
            call(self.offset_bytes + lba, arg)
            return
        rec.depth += 1
        try:
            call(self.offset_bytes + lba, arg)
        finally:
            rec.depth -= 1
        rec.op(self._rec_id, name, (lba, n))

    # ---- replay (sdbench.ledger): another run's requests, timing only --------------------------
    def priced_profiles(self) -> dict[str, Any]:
        """The profiles a recorded charge above this driver may be priced in (sdbench.ledger.Price.section)."""
        return {"flash.host": self.profile, "flash.chip": self.chip.profile}

    def replay_op(self, name: str, args: tuple[int, int]) -> None:
        """Time one recorded request; a write programs zeros (a NOR program's time does not depend on the
        data, and zeros never set a bit an erase did not)."""
        lba, n = args
        if name == "read":
            self.flash_read(self.offset_bytes + lba, n)
        elif name == "write":
            if len(self._zeros) < n:
                self._zeros = bytes(n)
            self.flash_write(self.offset_bytes + lba, memoryview(self._zeros)[:n])
        else:
            self.flash_erase_region(self.offset_bytes + lba, n)

    def replay_reads(self, key: Any, spans: list[int]) -> None:
        """Time the reads of ``key`` bytes recorded (``spans``: offset and size of each, flattened); the last
        ends the lock hold as flash_read does (the recording puts the charges after it after this)."""
        self.vclock.charge(self._read_cost(key), len(spans) // 2)
        self._os.released_since_ns = self.vclock.now_ns()

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["host"] = host_metadata(self.profile)
        d["partition"] = {"offset_bytes": self.offset_bytes, "size_bytes": self.geometry.size_bytes}
        d["chip"] = {"kind": self.chip.kind, "profile": to_mapping(self.chip.profile),
                     "config": to_mapping(self.chip.config)}
        return d


def _fused_reader(drv: Esp32FlashDriver) -> Callable[..., bytes]:
    """Esp32FlashDriver.reader's fused path: BlockDevice.read, _read, flash_read and _read_fast in one function.
    Its table holds, per size, the clock's charger of the size's recorded cost (_read_cost), its READ commands
    and lock sections, and the SCLK it was made for; a size enters it after a read of it took _read_fast."""
    end = drv.geometry.sector_count  # bytes (sector_size 1)
    base = drv.offset_bytes
    chip = drv.chip
    mem = chip._mem
    stats, chip_stats, cnt, os_ = drv.stats, chip.stats, drv.counters, drv._os
    clock = drv.vclock
    rec, rec_id = drv._rec, drv._rec_id
    chunk = drv.profile.read_chunk_bytes
    # per size: the charger, READ commands, lock sections, SCLK, and the recording's spans list for the size with
    # the epoch it is good for (Recording.read_spans)
    known: dict[int, tuple[Callable[[], None], int, int, float, list[Any]]] = {}

    def read(lba: int, count: int, *, buf_addr: int = 0) -> bytes:
        e = known.get(count)
        if (e is None or lba < 0 or lba + count > end or chip._busy or e[3] != chip._ns_per_clock
                or drv.reference_path):
            data = drv.read(lba, count, buf_addr=buf_addr)
            # the size's cost as _read_fast takes it now (the costs kept are those of the SCLK _fast_npc says)
            npc = chip._ns_per_clock
            cost = drv._read_costs.get(count) if drv._fast_npc == npc else None
            if drv._read_primed and not drv.reference_path and cost is not None:
                known[count] = (clock.charger(cost), cost.commands[0][1], -(-count // chunk), npc, [-1, None])
            return data
        charge, ncmd, nsec, _, spans = e
        addr = base + lba
        data = mem[addr:addr + count].tobytes()
        chip_stats.read_commands += ncmd
        cnt.lock_sections += nsec
        cnt.transactions += ncmd
        charge()
        os_.released_since_ns = clock.now_ns()  # _release after the last chunk
        if rec is not None:
            if spans[0] == rec.epoch:
                spans[1] += (lba, count)
            else:
                spans[1] = rec.read_spans(rec_id, count, lba, count)
                spans[0] = rec.epoch if spans[1] is not None else -1
        stats.reads += 1
        stats.bytes_read += count
        return data
    return read
