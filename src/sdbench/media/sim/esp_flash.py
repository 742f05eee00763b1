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
the clock in one step (esp_flash_fast.py), with results identical to the
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

from ...clock import ClockDelta, VirtualClock
from ...errors import ConfigError
from ... import profiles
from ...profiles import FIT_REL_SD_HELP, UNFITTED_HELP, check_fit_rel_sd
from ...options import opt, to_mapping
from ..base import BlockDevice, Geometry
from .card import MAX_TIME_US
from .host import DESCRIPTION_RETIRED, STDIO_HELP, check_text_fields, host_metadata, mhz_text
from .newlib import NewlibStdio
from .esp_flash_fast import BUS_KEY, CMD_KEY, OP_KEY, YIELD_KEY, FastPaths, fused_reader
from .program_runs import ProgramRuns
from .nor import BLOCK64_BYTES, SECTOR_BYTES, NorFlashChip

FLASH_MODES = ("qio", "qout", "dio", "dout", "fastrd", "slowrd")

#: default of ``Esp32FlashDriver(reference_path=...)``: True sends every read and write command by command
#: (the reference path) instead of replaying lock sections in one clock step (esp_flash_fast); results are the
#: same either way
REFERENCE_PATH = False


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


class Esp32FlashDriver(FastPaths, BlockDevice):
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
        self._exact_limit = 0  # the clock time up to which they may be (exact_limit_ns)
        self._run_spans: dict[int, int] = {}  # by program size: the longest a program takes in a section
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


    # ---- BlockDevice (partition-relative, as esp_partition_*) ------------------------
    def reader(self) -> Callable[..., bytes]:
        """:meth:`read` fused for callers that read very often (littlefs' callbacks, wear levelling; see
        BlockDevice.reader): once a read of a size has taken the fast path (_read_fast), the next ones of that
        size count, charge and copy in one function.  Anything else takes the general path: the reference path,
        a busy chip, a new SCLK, a read out of range.  Only for this class itself (a subclass may hook a step);
        tests/test_fused_read.py holds it to the general path."""
        if type(self) is not Esp32FlashDriver:
            return self.read
        return fused_reader(self)

    def copy_pieces(self, src_lba: int, dst_lba: int, count: int, piece: int) -> None:
        """BlockDevice.copy_pieces: a read of each piece, then its write (one lock section of one page program),
        worked out piece by piece with the same steps as those calls and given to the clock, the counters and
        the cells once for all the pieces, when nothing can come between (see _copy_fast); otherwise those calls."""
        if type(self) is not Esp32FlashDriver or not self._copy_fast(src_lba, dst_lba, count, piece):
            super().copy_pieces(src_lba, dst_lba, count, piece)  # (a subclass may hook a step)

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


