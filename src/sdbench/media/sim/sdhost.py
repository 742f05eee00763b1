"""Host-driver models: block requests -> SD commands, as the real drivers issue them.

:class:`SdHostDriver` is a BlockDevice on a :class:`~sdbench.clock.VirtualClock`.
It holds the card's data in a sparse store and prices every step:

* ``sdmmc`` (ESP-IDF SDMMC host): one CMD17/CMD18 or CMD24/CMD25 per request
  from a DMA-capable buffer, hardware auto-CMD12 after multi-block transfers,
  then CMD13 polled back to back until READY_FOR_DATA (after 100 ms of polling
  the task yields one RTOS tick, then at doubling intervals).  A buffer whose
  address is not DMA-aligned takes the slow path: per sector a bounce buffer,
  a single-block command, CMD13 polling and a memcpy.  Erase is CMD32, CMD33,
  CMD38 with busy waits in RTOS-tick steps.
* ``sdspi`` (ESP-IDF SDSPI): SPI mode; every block is its own SPI transaction
  with a software CRC16; reads are copied out of the driver's buffer; CMD12 to
  stop a multi-block read; busy polled on MISO; CMD13 after writes.
* ``p2spi`` (Propeller 2 smart-pin SPI): SPI mode with per-command, per-block
  and per-byte software costs in host cycles; CMD13 after every transfer.
* ``generic``: one command per request, no alignment rules, configurable costs.
* ``sdfat-spi`` (Bill Greiman's SdFat, ``SdSpiCard``): SPI mode, no CRC
  (``USE_SD_CRC`` 0).  Every command first ends an open transfer
  (``syncDevice``), then reads 0xFF bytes until the card is not busy
  (``waitReady``; not before CMD0 and CMD12), then sends its 6 bytes.  With
  ``keep_open = "all"`` (``DEDICATED_SPI``) a read is CMD18 and a write CMD25
  even for one block, and the transfer stays open: the next request at the
  following LBA only moves blocks (``DATA`` in the log, no command).  A read
  block: 0xFF bytes until the start token, 512 bytes, 2 CRC bytes.  A write
  block: 0xFF bytes until the previous block's busy ends, token, 512 bytes,
  CRC, data response.  A read stream ends with CMD12, a write stream with
  0xFF polling for the last block, the stop-tran token and CS high
  (``STOP_TRAN`` in the log): the card's flush busy after it is polled by the
  next command, not at the stop.  With ``keep_open = "none"`` (``SHARED_SPI``)
  a single block is CMD17, or CMD24 followed by busy polling and CMD13
  (``CHECK_FLASH_PROGRAMMING``); more blocks are CMD18 + CMD12 or CMD25 + stop
  token.  Every single-byte SPI call costs ``spi_byte_cycles`` on top of its 8
  clocks (command bytes, polls, tokens, CRC bytes); block data costs
  ``block_cycles`` + ``byte_cycles`` per byte (a byte loop) or only
  ``block_cycles`` (an array transfer or DMA).  Erase: CMD32, CMD33, CMD38 and
  busy polled with 0xFF bytes; no CMD13.
* ``sdio`` (an MCU's own SD-mode host, bare metal: STM32 HAL, SdFat on
  Teensy, no-OS-FatFS PIO SDIO on RP2040): CMD17/CMD18 or CMD24/CMD25 sent by
  the CPU (``transaction_cycles``), CMD12 sent by the CPU after multi-block
  transfers, no RTOS ticks.  ``keep_open``: ``none`` = one command per
  request; ``writes`` = a multi-block write leaves CMD25 open and the next
  multi-block write at the following LBA continues it, single blocks are
  CMD17/CMD24 (no-OS-FatFS); ``all`` = reads and writes of any size continue
  an open CMD18/CMD25 (SdFat ``FIFO_SDIO``).  Any other request, an erase or a
  sync first ends the open transfer with CMD12 (and, after writes, waits for
  the card's busy).  ``busy_wait``: ``cmd13`` = CMD13 polled back to back
  after every request until the card is ready (STM32 FatFs glue, also after
  reads); ``dat0`` = the host watches DAT0 after a write's end (no command).
  ``status_before_transfer`` adds one CMD13 before every data command (SdFat's
  Teensy driver).  A buffer not aligned to ``dma_align_bytes`` is moved one
  sector at a time with CMD17/CMD24 and a copy.

The card model prices a write command's merges, flush busy and random pause
at the end of the command; a CMD25 kept open over many requests is one write
command, priced when it is stopped.

Every command is counted on the clock and, when ``log_commands`` is set,
recorded with its argument, bytes and duration for ``sdbench trace``.
Blocks moved inside an open transfer (``DATA``) and the SPI stop-tran token
(``STOP_TRAN``) are logged but not counted as commands.

The driver's steps are split by concern over modules: this one holds
:class:`SdHostDriver` with what every kind uses, native SD mode, SPI mode and
card initialisation; ``sdhost_sdfat_spi`` the ``sdfat-spi`` kind's steps,
``sdhost_sdio`` the ``sdio`` kind's, ``sdhost_streaming`` what these two
share, ``sdhost_replay`` the replay of a recording (mixins of
:class:`SdHostDriver`); ``sdhost_common`` the constants they share;
``busclock`` the bus clock checks (:func:`check_bus_clock`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from ...clock import VirtualClock
from ...errors import ConfigError
from ...options import to_mapping
from ..base import BlockDevice, Geometry
from ..memory import CHUNK_BYTES, MemoryDevice
from .bus import SdBus
from .busclock import check_bus_clock
from .card import ERASE_ARGS, CardModel, CardProfile
from .host import HostProfile, host_metadata
from .sdhost_common import BUS, POLLING, SECTOR, STREAMING, TICKS, _Stream
from .sdhost_replay import ReplaySupport
from .sdhost_sdfat_spi import SdFatSpiSteps
from .sdhost_sdio import SdioSteps
from .sdhost_streaming import StreamingSteps

#: the key of a CMD13's recorded cost (:meth:`SdHostDriver._send_status`)
_STATUS_KEY = ("CMD13",)
#: CMD6 function group 1 (access mode) codes of the UHS-I modes (SD Physical Layer spec 4.3.10.4)
CMD6_ACCESS_MODE = {"sdr12": 0, "sdr25": 1, "sdr50": 2, "sdr104": 3, "ddr50": 4}
#: SdHostDriver._costs: a wait whose time was found to depend on the clock (it yielded), so it has no recorded cost
_STEP_BY_STEP: Any = object()


@dataclass(frozen=True)
class CommandEvent:
    t_ns: int          # start, on the virtual clock
    name: str          # CMD17, CMD25, ACMD41, ...
    arg: int
    nbytes: int        # data bytes moved
    dur_ns: int
    repeat: int = 1    # e.g. CMD13 polled n times back to back


class SdHostDriver(SdFatSpiSteps, SdioSteps, StreamingSteps, ReplaySupport, BlockDevice):
    """The simulated host driver of the kinds in MODELS (the module's docstring gives each kind's commands), a
    BlockDevice on a virtual clock; the steps of the sdfat-spi and sdio kinds and the replay of a recording come
    from its mixins (modules sdhost_sdfat_spi, sdhost_sdio, sdhost_streaming, sdhost_replay)."""

    kind = "sim-sd"
    #: the host driver kinds this class models; a kind with a class of its own is built by stack.sd.sd_driver
    MODELS: tuple[str, ...] = ("sdmmc", "sdspi", "p2spi", "generic", "sdfat-spi", "sdio")

    def __init__(self, host: HostProfile, bus: SdBus, card: CardProfile, clock: VirtualClock, *, seed: int = 1,
                 log_commands: bool = False) -> None:
        if host.driver not in self.MODELS:
            raise ConfigError(f"host driver kind {host.driver} is not modelled by {type(self).__name__} (its model "
                              f"is chosen by sdbench.stack.sd.sd_driver)")
        if host.driver in ("sdspi", "p2spi", "sdfat-spi") and not bus.is_spi:
            raise ConfigError(f"host driver {host.driver} needs bus.kind = \"spi\", not {bus.cfg.kind!r}")
        if host.driver == "sdmmc" and bus.is_spi:
            raise ConfigError("host driver sdmmc drives SD mode (sd1/sd4), not SPI; use sdspi")
        if host.driver == "sdio" and bus.is_spi:
            raise ConfigError("host driver sdio drives SD mode (sd1/sd4), not SPI; use sdfat-spi")
        check_bus_clock(host, bus, card)
        geometry = Geometry(sector_size=SECTOR, sector_count=card.capacity_bytes // SECTOR,
                            erase_value=card.erased_byte)
        super().__init__(geometry, clock)
        self.vclock = clock
        self.host, self.bus, self.profile = host, bus, card
        self.card = CardModel(card, seed)
        # SD-mode commands that address the card carry its RCA in bits 31:16; SPI mode has no addresses
        self._rca_arg = 0 if bus.is_spi else card.rca << 16
        self.store = MemoryDevice(geometry)
        self.log: list[CommandEvent] | None = [] if log_commands else None
        self.driver = host.driver
        # Reads, and the commands and data of a write or erase before the card's busy, cost the same wherever
        # and whenever they happen: their cost is recorded once by running the command-level path on a
        # scratch clock (_recorded), then charged in one step.  Busy waits depend on the card's state and the
        # RTOS tick phase, so they always run step by step.
        self._costs: dict[tuple[Any, ...], Any] = {}
        self._boundaries = bool(card.read_page_cross_us or card.read_au_cross_us)
        # set for the duration of read_multi/write_multi: multi-block commands even for one block
        self._multi = False
        # streaming kinds (STREAMING): the open CMD18/CMD25, if any
        self._stream: _Stream | None = None
        # sdfat-spi: the card is busy until this time (the next command polls it out); the SPI is selected
        self._ready_at_ns = 0.0
        self._ready_parts: tuple[tuple[str, float], ...] = ()
        self._spi_active = False
        # the clock's recording (sdbench.ledger): this driver reports every request to it, or, in a stack built to
        # replay another run's requests, only registers and moves no data
        rec = clock.recording
        self._rec = None if rec is None or rec.replaying else rec
        self._rec_id = rec.register(self) if rec is not None else -1
        # a stack built to replay a recording: only its clock's time counts (the replay reads nothing else)
        self._replaying = rec is not None and rec.replaying
        # replay_op's times of requests that continue an open transfer (the streaming kinds), by what they depend
        # on (this class's own paths only: a subclass may change a step)
        self._continuing: dict[tuple[Any, ...], int] | None = {} if self._replaying \
            and self.driver in STREAMING and type(self) is SdHostDriver else None

    # ---- time helpers -------------------------------------------------------------
    def _spend(self, ns: float, category: str, param: str | None = None) -> None:
        self.vclock.advance_ns(ns, category, param)

    def _sw(self, cycles: float, field: str) -> None:
        """Host software time: ``cycles`` of host profile field ``field``."""
        if cycles:
            self._spend(self.host.cycles_ns(cycles), "host", "sd.host." + field)

    def _sw_mix(self, parts: tuple[tuple[str, float], ...]) -> None:
        """Host software time of several host profile fields in one step: (field, cycles) pairs."""
        total = sum(c for _, c in parts)
        if total:
            self._spend(self.host.cycles_ns(total), "host", "")
            if not self._replaying:  # a replay reads the clock's time alone, not its ledger
                self.vclock.attribute(("sd.host." + f, self.host.cycles_ns(c)) for f, c in parts)

    def _waited(self, t0: int, busy_ns: float, parts: Any, ticked: bool = False) -> None:
        """The ledger of a wait charged with ``param=""`` since ``t0``: the busy's ``parts`` ((key, ns) pairs
        that sum to ``busy_ns``; a single key for all of it), and the time past it: RTOS tick rounding when the
        wait slept (``ticked``), polling otherwise.  (Nothing in a replay: it reads the clock's time alone.)"""
        if self._replaying:
            return
        total = self.vclock.now_ns() - t0
        if busy_ns > 0:
            if isinstance(parts, str):
                parts = ((parts, busy_ns),)
            self.vclock.attribute(parts)
        self.vclock.attribute(((TICKS if ticked else POLLING, total - max(busy_ns, 0.0)),))

    def _event(self, t0: int, name: str, arg: int, nbytes: int = 0, repeat: int = 1) -> None:
        if self._replaying and self.log is None:  # a replay reads the clock's time alone, not its counts
            return
        self.vclock.count_command(name, repeat)
        if self.log is not None:
            self._log_only(t0, name, arg, nbytes, repeat)

    def _log_only(self, t0: int, name: str, arg: int, nbytes: int = 0, repeat: int = 1) -> None:
        """Log without counting a command: blocks of an open transfer (DATA), the SPI stop-tran token."""
        if self.log is not None:
            self.log.append(CommandEvent(t0, name, arg, nbytes, self.vclock.now_ns() - t0, repeat))

    def _command(self, name: str, arg: int, response: str = "R1", *, transaction: bool = True) -> int:
        """Software transaction + the command/response on the bus.  Returns the start time."""
        t0 = self.vclock.now_ns()
        if transaction:
            self._sw(self.host.transaction_cycles, "transaction_cycles")
        self._spend(self.bus.command_ns(response), "bus", BUS)
        return t0

    def _tick_wait(self) -> None:
        tick = 1e9 / self.host.rtos_tick_hz
        now = self.vclock.now_ns()
        nxt = (math.floor(now / tick) + 1) * tick
        self._spend(nxt - now, "rtos", "")

    def _poll_cmd13(self, busy_ns: float, parts: Any = ()) -> None:
        """sdmmc: CMD13 back to back until the card is ready; yields a tick after 100 ms, then doubling.
        ``parts``: where the busy comes from, for the ledger (see :meth:`_waited`).

        A wait that does not yield depends on nothing but the busy and its parts: for a busy from one part (a
        write's own busy, not a merge or a pause, whose values seldom repeat) its cost is recorded once and
        charged after that (as a read's), unless a command log is kept."""
        if self.log is None and (isinstance(parts, str) or len(parts) < 2):
            key = ("cmd13", busy_ns, parts)
            cost = self._costs.get(key)
            if cost is None:
                ticked = []
                cost = self._recorded(key, lambda: ticked.append(self._poll_cmd13_steps(busy_ns, parts)))
                if ticked[0]:  # a yield: its time depends on the tick's phase, so it runs step by step
                    self._costs[key] = cost = _STEP_BY_STEP
            if cost is not _STEP_BY_STEP:
                self.vclock.charge(cost)
                return
        self._poll_cmd13_steps(busy_ns, parts)

    def _poll_cmd13_steps(self, busy_ns: float, parts: Any) -> bool:
        """:meth:`_poll_cmd13` command by command; returns whether the wait yielded."""
        t_start = self.vclock.now_ns()
        ticked = False
        host_ns = self.host.cycles_ns(self.host.transaction_cycles)
        bus_ns = self.bus.command_ns("R1")
        poll_ns = host_ns + bus_ns
        next_yield = self.host.poll_yield_after_us * 1e3
        elapsed = 0.0
        polls = 0
        while True:
            # back-to-back polls up to the first that ends with the card ready or past the yield point
            need_ready = max(1, math.ceil((busy_ns - elapsed) / poll_ns))
            need_yield = math.floor((next_yield - elapsed) / poll_ns) + 1
            n = max(1, min(need_ready, need_yield))
            elapsed += n * poll_ns
            polls += n
            if elapsed >= busy_ns:
                self._spend((n - 1) * poll_ns, "card", "")  # polls that saw the card busy
                self._spend(host_ns, "host", "")
                self._spend(bus_ns, "bus", "")
                break
            self._spend(n * poll_ns, "card", "")
            next_yield *= 2
            before = self.vclock.now_ns()
            self._tick_wait()  # vTaskDelay(1)
            elapsed += self.vclock.now_ns() - before
            ticked = True
        self._waited(t_start, busy_ns, parts, ticked)
        self._event(t_start, "CMD13", self._rca_arg, repeat=polls)
        return ticked

    def _wait_busy_ticks(self, busy_ns: float, parts: Any = ()) -> None:
        """Wait for DAT0 busy with vTaskDelay(1) steps (ESP32 SDMMC host, SCF_WAIT_BUSY)."""
        if busy_ns <= 0:
            return
        clock = self.vclock
        t0 = clock.now_ns()
        t_end = t0 + busy_ns
        clock.advance_ns(busy_ns, "card", "")
        tick = 1e9 / self.host.rtos_tick_hz
        nxt = math.ceil(t_end / tick) * tick
        clock.advance_ns(nxt - t_end, "rtos", "")
        self._waited(t0, busy_ns, parts, ticked=True)

    def _spi_wait(self, ns: float, parts: Any = ()) -> None:
        """SPI: the host clocks 0xFF bytes until a token or the end of busy; rounded up to whole bytes."""
        if ns <= 0:
            return
        t0 = self.vclock.now_ns()
        byte = self.bus.poll_byte_ns()
        self._spend(math.ceil(ns / byte) * byte, "card", "")
        self._waited(t0, ns, parts)

    def _repeated(self, n: int, step: Callable[[], None]) -> None:
        """``step`` ``n`` times: the blocks of a transfer after its first, whose time depends on the profiles alone
        (not on the clock or the card's state).  A replaying driver runs it once and moves its clock by the
        other n - 1 times in one step: the same time (whole ns), without the ledger a replay does not read."""
        if n <= 0:
            return
        if not self._replaying:
            for _ in range(n):
                step()
            return
        clock = self.vclock
        t0 = clock.now_ns()
        step()
        if n > 1:
            clock.advance_ns((clock.now_ns() - t0) * (n - 1), "other", "")

    def _data_cpu(self, nbytes: int, *, crc: bool = False, copy: bool = False) -> None:
        h = self.host
        parts = [("block_cycles", h.block_cycles * (nbytes // SECTOR)), ("byte_cycles", h.byte_cycles * nbytes)]
        if crc:
            parts.append(("crc_cycles_per_byte", h.crc_cycles_per_byte * nbytes))
        if copy:
            parts.append(("copy_cycles_per_byte", h.copy_cycles_per_byte * nbytes))
        self._sw_mix(tuple(parts))

    # ---- the driver's multi-block entry points ---------------------------------------
    def read_multi(self, lba: int, count: int, *, buf_addr: int = 0) -> bytes:
        """A read through the driver's multi-block entry: CMD18 and CMD12 even for one block (the P2 driver's
        raw API, readSectorsRaw)."""
        self._multi = True
        try:
            return self.read(lba, count, buf_addr=buf_addr)
        finally:
            self._multi = False

    def write_multi(self, lba: int, data: bytes, *, buf_addr: int = 0) -> None:
        """A write through the driver's multi-block entry: CMD25 and the stop token even for one block (the P2
        driver's raw API, writeSectorsRaw)."""
        self._multi = True
        try:
            self.write(lba, data, buf_addr=buf_addr)
        finally:
            self._multi = False

    # ---- BlockDevice primitives -------------------------------------------------------
    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        rec = self._rec
        if rec is None:
            self._read_time(lba, count, buf_addr)
        else:
            rec.depth += 1
            try:
                key = self._read_time(lba, count, buf_addr)
            finally:
                rec.depth -= 1
            if key is None:
                rec.op(self._rec_id, "read", (lba, count, buf_addr, self._multi))
            else:
                rec.read(self._rec_id, key, lba, count)
        return self.store.read_bytes(lba * SECTOR, count * SECTOR)  # checked by this device's read()

    def reader(self) -> Callable[..., bytes]:
        """:meth:`read` fused for a filesystem's block callbacks (see BlockDevice.reader; littlefs alone makes
        about a million block reads per protocol run): once a read of a size has taken the general path, the
        next ones of that size charge its recorded cost, report it to the recording, count it and copy the data
        in one function, with the same checks (anything else takes the general path: out of range, a command log
        kept, the multi-block entry).  Only for this class itself (a subclass may change a step) and the kinds
        whose reads have a recorded cost; tests/test_fused_read.py holds it to the general path."""
        if type(self) is not SdHostDriver or self.driver in STREAMING or self.geometry.read_size != SECTOR:
            return self.read
        return _fused_reader(self)

    def _read_time(self, lba: int, count: int, buf_addr: int) -> tuple[Any, ...] | None:
        """A read's time; returns the key of its recorded cost when its time depends on nothing but that key and
        where it lies (page and AU boundaries), else None (a command log is kept, or the driver keeps transfers
        open)."""
        key = None
        if self.log is None and self.driver not in STREAMING:
            unaligned = self.driver == "sdmmc" and buf_addr % self.host.dma_align_bytes != 0
            key = ("read", count, unaligned, self._multi)
            self.vclock.charge(self._recorded_cost(key, self._read_commands, 0, count, buf_addr))
        else:
            self._read_commands(lba, count, buf_addr)
        # boundaries depend on where the read lies, so they stay out of the per-size cost kept above
        if self._boundaries:
            self._boundary(lba, count)
        return key

    def _boundary(self, lba: int, count: int) -> None:
        """The extra time of a read over page and AU boundaries."""
        parts = self.card.read_boundary_parts(lba, count, SECTOR)
        self._spend(sum(ns for _, ns in parts), "card", "")
        self.vclock.attribute(parts)

    def _recorded_cost(self, key: tuple[Any, ...], run: Callable[..., Any], *args: Any) -> Any:
        """The cost kept under ``key``; the first time, ``run(*args)`` recorded (:meth:`_recorded`)."""
        cost = self._costs.get(key)
        if cost is None:
            cost = self._recorded(key, lambda: run(*args))
        return cost

    def _recorded(self, key: tuple[Any, ...], run: Callable[[], Any]) -> Any:
        """The cost of ``run`` (host, bus and fixed card time only: nothing that reads the card's state or the
        clock), recorded on a scratch clock and kept under ``key``."""
        real = self.vclock
        scratch = VirtualClock()
        self.vclock = scratch
        try:
            m = scratch.mark()
            run()
            cost = self._costs[key] = scratch.delta_since(m)
            return cost
        finally:
            self.vclock = real

    def _fast(self) -> bool:
        """Whether recorded costs may stand in for the command-by-command path: not while a command log is
        kept (it needs every command's time), not for drivers that keep transfers open (STREAMING)."""
        return self.log is None and self.driver not in STREAMING

    def _read_commands(self, lba: int, count: int, buf_addr: int) -> None:
        self._sw(self.host.call_cycles, "call_cycles")
        if self.driver == "sdmmc":
            if buf_addr % self.host.dma_align_bytes:
                for i in range(count):  # bounce buffer, one sector at a time
                    self._sdmmc_read(lba + i, 1)
                    self._sw(self.host.copy_cycles_per_byte * SECTOR, "copy_cycles_per_byte")
            else:
                self._sdmmc_read(lba, count)
        elif self.driver == "sdfat-spi":
            self._sf_read(lba, count)
        elif self.driver == "sdio":
            self._sdio_read(lba, count, buf_addr)
        elif self.bus.is_spi:
            self._spi_read(lba, count)
        else:
            self._sdmmc_read(lba, count, poll=False)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        count = len(data) // SECTOR
        if self._rec is None:  # (_recorded_op's first case, without the call: filesystems write a sector at a time)
            self._write_time(lba, count, buf_addr, self._multi)
        else:
            self._recorded_op("write", self._write_time, lba, count, buf_addr, self._multi)
        self.store.write_bytes(lba * SECTOR, data)  # checked by this device's write()

    def _recorded_op(self, name: str, timing: Callable[..., None], *args: Any) -> None:
        """Run ``timing(*args)`` (a request's time), reported to the clock's recording as request ``name``."""
        rec = self._rec
        if rec is None:
            timing(*args)
            return
        rec.depth += 1
        try:
            timing(*args)
        finally:
            rec.depth -= 1
        rec.op(self._rec_id, name, args)

    def _write_time(self, lba: int, count: int, buf_addr: int, multi_entry: bool | None = None) -> None:
        """A write's time (its data is the store's business); ``multi_entry``: the multi-block entry's flag as it
        was (None: as it is)."""
        if multi_entry is not None and multi_entry != self._multi:
            saved, self._multi = self._multi, multi_entry
            try:
                self._write_time(lba, count, buf_addr)
            finally:
                self._multi = saved
            return
        unaligned = self.driver == "sdmmc" and buf_addr % self.host.dma_align_bytes != 0
        if self._fast() and not unaligned:
            multi = count > 1 or self._multi
            cost = self._costs.get(("write", count, multi)) or \
                self._recorded_cost(("write", count, multi), self._write_commands, 0, count, multi)
            t0 = self.vclock.now_ns()
            self.vclock.charge(cost)
            self._write_done(t0, lba, count, multi)
        else:
            self._sw(self.host.call_cycles, "call_cycles")
            if unaligned:
                multi = self._multi
                bounce = None
                if self._fast():  # a sector's copy, command and data cost the same every time: recorded once
                    bounce = self._recorded_cost(("write-bounce", multi), self._bounce_write_data, 0, multi)
                for i in range(count):
                    if bounce is None:
                        self._bounce_write_data(lba + i, multi)
                    else:
                        self.vclock.charge(bounce)
                    self._sdmmc_write_done(lba + i, 1, multi)
            elif self.driver == "sdfat-spi":
                self._sf_write(lba, count)
            elif self.driver == "sdio":
                self._sdio_write(lba, count, buf_addr)
            else:
                self._sdmmc_write(lba, count) if not self.bus.is_spi else self._spi_write(lba, count)

    def _bounce_write_data(self, lba: int, multi: bool) -> None:
        """sdmmc, a buffer the DMA cannot take: one sector copied to the driver's buffer, its command and data."""
        self._sw(self.host.copy_cycles_per_byte * SECTOR, "copy_cycles_per_byte")
        self._sdmmc_write_data(lba, 1, multi)

    def _write_commands(self, lba: int, count: int, multi: bool) -> int:
        """A write up to the card's busy after the data (the driver entry, command, data, block busy in a
        CMD25); returns the command's start time."""
        self._sw(self.host.call_cycles, "call_cycles")
        if self.bus.is_spi:
            return self._spi_write_data(lba, count, multi)
        return self._sdmmc_write_data(lba, count, multi)

    def _write_done(self, t0: int, lba: int, count: int, multi: bool) -> None:
        """The rest of a write: the card's busy (its state decides it) and the status checks."""
        if self.bus.is_spi:
            self._spi_write_done(t0, lba, count, multi)
        else:
            self._sdmmc_write_done(lba, count, multi)

    def _sync(self) -> None:
        self._recorded_op("sync", self._sync_time)

    def _sync_time(self) -> None:
        # SdFat's syncDevice, no-OS-FatFS's sd_sync: end an open transfer (the other kinds keep nothing open)
        if self.driver == "sdfat-spi":
            self._sf_stop()
        elif self.driver == "sdio":
            self._sdio_stop()

    def _erase(self, lba: int, count: int) -> None:
        # an erase callback (esp_littlefs's sdmmc_erase_sectors(..., SDMMC_ERASE_ARG)): a full ERASE
        if self._rec is None:  # (as in _write)
            self._erase_cmds(lba, count, "erase")
        else:
            self._recorded_op("erase", self._erase_cmds, lba, count, "erase")
        self.store.erase_bytes(lba * SECTOR, count * SECTOR)  # checked by this device's erase()

    def _trim(self, lba: int, count: int) -> None:
        self._recorded_op("trim", self._trim_time, lba, count)

    def _trim_time(self, lba: int, count: int) -> None:
        # a filesystem's trim, as the host's disk glue treats it; the data may stay
        kind = self.host.trim_command
        if kind == "none":
            return  # e.g. ESP-IDF >= 5.3: FatFs CTRL_TRIM is refused for SD cards (MMC only), no command
        if kind == "discard" and (self.bus.is_spi or not self.profile.discard_support):
            kind = "erase"  # ESP-IDF sdmmc_can_discard: SD mode and SSR DISCARD_SUPPORT only
        self._erase_cmds(lba, count, kind)

    def _erase_cmds(self, lba: int, count: int, kind: str) -> None:
        if self.driver in STREAMING:
            self._sw(self.host.call_cycles, "call_cycles")
            self._stream_erase(lba, count, kind)
            return
        if self.log is None:  # _fast(): the streaming kinds went above
            cost = self._costs.get(("erase", kind)) or \
                self._recorded_cost(("erase", kind), self._erase_commands, 0, 0, kind)
            t0 = self.vclock.now_ns()
            self.vclock.charge(cost)
        else:
            t0 = self._erase_commands(lba, count, kind)
        self._erase_done(t0, lba, count, kind)

    def _erase_commands(self, lba: int, count: int, kind: str) -> int:
        """CMD32, CMD33 and CMD38 up to the card's busy; returns CMD38's start time."""
        self._sw(self.host.call_cycles, "call_cycles")
        for name, arg in (("CMD32", lba), ("CMD33", lba + count - 1)):
            t0 = self._command(name, arg)
            self._event(t0, name, arg)
        return self._command("CMD38", ERASE_ARGS[kind], "R1b")

    def _erase_done(self, t0: int, lba: int, count: int, kind: str) -> None:
        arg = ERASE_ARGS[kind]
        busy = self.card.erase_busy_ns(count, kind)
        parts = self.card.busy_parts
        spi = self.bus.is_spi
        if spi:
            self._spi_wait(busy, parts)
        elif self.driver == "sdmmc":
            self._wait_busy_ticks(busy, parts)
        else:
            self._spend(busy, "card", "")  # the controller watches DAT0 busy itself
            self.vclock.attribute(parts)
        self._event(t0, "CMD38", arg)
        if spi:
            self._send_status()
        self.card.discard(lba, count, SECTOR)

    def _send_status(self) -> None:
        """One CMD13 (SEND_STATUS, R2), as the SPI drivers issue after a transfer or an erase: the same time every
        time (a transaction, the command and its response), so its cost is recorded once, as a read's is."""
        if not self._fast():
            self._status_command()
            return
        self.vclock.charge(self._recorded_cost(_STATUS_KEY, self._status_command))

    def _status_command(self) -> None:
        t0 = self._command("CMD13", 0, "R2")
        self._event(t0, "CMD13", 0)

    # ---- native SD mode ---------------------------------------------------------------
    def _sdmmc_read(self, lba: int, count: int, *, poll: bool = True) -> None:
        multi = count > 1 or self._multi
        name = "CMD18" if multi else "CMD17"
        t0 = self._command(name, lba)
        self._spend(self.card.read_access_ns(), "card", "sd.card.read_access_us")
        self._spend(count * self.bus.read_block_ns(), "bus", BUS)
        if multi:
            self._spend((count - 1) * self.card.read_block_gap_ns(), "card", "sd.card.read_block_gap_us")
        self._sw(self.host.block_cycles * count, "block_cycles")
        self._event(t0, name, lba, count * SECTOR)
        if multi:  # auto-stop by the host controller
            t1 = self._command("CMD12", 0, "R1b", transaction=False)
            self._event(t1, "CMD12", 0)
        if poll:
            self._poll_cmd13(0.0)

    def _sdmmc_write(self, lba: int, count: int) -> None:
        multi = count > 1 or self._multi
        self._sdmmc_write_data(lba, count, multi)
        self._sdmmc_write_done(lba, count, multi)

    def _sdmmc_write_data(self, lba: int, count: int, multi: bool) -> int:
        name = "CMD25" if multi else "CMD24"
        t0 = self._command(name, lba)
        self._spend(count * self.bus.write_block_ns(), "bus", BUS)
        if multi:
            self._spend((count - 1) * self.card.write_block_busy_ns(True), "card", "sd.card.write_busy_block_us")
        self._sw(self.host.block_cycles * count, "block_cycles")
        self._event(t0, name, lba, count * SECTOR)
        if multi:
            t1 = self._command("CMD12", 0, "R1b", transaction=False)
            self._event(t1, "CMD12", 0)
        return t0

    def _sdmmc_write_done(self, lba: int, count: int, multi: bool) -> None:
        busy = self.card.write_done_busy_ns(lba, count, SECTOR, multi)
        if self.driver == "sdmmc":
            self._poll_cmd13(busy, self.card.busy_parts)
        else:
            self._spend(busy, "card", "")
            self.vclock.attribute(self.card.busy_parts)

    # ---- SPI mode -----------------------------------------------------------------------
    def _spi_read(self, lba: int, count: int) -> None:
        multi = count > 1 or self._multi
        name = "CMD18" if multi else "CMD17"
        t0 = self._command(name, lba)
        if count > 0:
            copy = self.driver == "sdspi"
            self._spi_wait(self.card.read_access_ns(), "sd.card.read_access_us")
            self._spend(self.bus.read_block_ns(), "bus", BUS)
            # sdspi: its own transaction per block, CRC16 in software, copy out of the driver buffer
            self._data_cpu(SECTOR, crc=True, copy=copy)
            gap = self.card.read_block_gap_ns()

            def block() -> None:  # each after the first
                self._spi_wait(gap, "sd.card.read_block_gap_us")
                self._spend(self.bus.read_block_ns(), "bus", BUS)
                self._data_cpu(SECTOR, crc=True, copy=copy)
            self._repeated(count - 1, block)
        self._event(t0, name, lba, count * SECTOR)
        if multi:
            t1 = self._command("CMD12", 0, "R1b")
            self._event(t1, "CMD12", 0)
        if self.driver == "p2spi":  # the P2 driver checks the card's status after every transfer
            self._send_status()

    def _spi_write(self, lba: int, count: int) -> None:
        multi = count > 1 or self._multi
        t0 = self._spi_write_data(lba, count, multi)
        self._spi_write_done(t0, lba, count, multi)

    def _spi_write_data(self, lba: int, count: int, multi: bool) -> int:
        t0 = self._command("CMD25" if multi else "CMD24", lba)
        if count > 0:
            busy = self.card.write_block_busy_ns(True) if multi else 0.0

            def block() -> None:  # one before the last: its busy follows (CMD25)
                self._data_cpu(SECTOR, crc=True)
                self._spend(self.bus.write_block_ns(), "bus", BUS)
                self._spi_wait(busy, "sd.card.write_busy_block_us")
            self._repeated(count - 1, block)
            self._data_cpu(SECTOR, crc=True)
            self._spend(self.bus.write_block_ns(), "bus", BUS)
        if multi:
            self._spend(self.bus.stop_tran_ns(), "bus", BUS)
        return t0

    def _spi_write_done(self, t0: int, lba: int, count: int, multi: bool) -> None:
        name = "CMD25" if multi else "CMD24"
        busy = self.card.write_done_busy_ns(lba, count, SECTOR, multi)
        self._spi_wait(busy, self.card.busy_parts)
        self._event(t0, name, lba, count * SECTOR)
        if self.driver in ("sdspi", "p2spi"):  # both check the result of programming with SEND_STATUS
            self._send_status()

    # ---- card initialisation (mount) ----------------------------------------------------
    def initialise(self) -> None:
        """Power-up sequence: CMD0, CMD8, ACMD41 until ready, CMD58/CMD2/CMD3, CSD, bus set-up."""
        self._recorded_op("initialise", self._initialise_time)

    def _initialise_time(self) -> None:
        spi = self.bus.is_spi
        seq = [("CMD0", "R1"), ("CMD8", "R7"), ("CMD55", "R1"), ("ACMD41", "R3")]
        for name, resp in seq:
            t0 = self._command(name, 0, resp)
            self._event(t0, name, 0)
        t0 = self.vclock.now_ns()
        self._spend(self.card.init_ns(), "card", "sd.card.init_ms")  # the ACMD41 loop until the card reports ready
        self._event(t0, "ACMD41-loop", 0)
        if self.bus.uhs:  # ACMD41 asked for 1.8 V (S18R) and the card accepted (S18A)
            self._voltage_switch()
        rca = self._rca_arg  # CMD7 and CMD9 address the card by the RCA CMD3 gave (SD mode)
        rest = [("CMD58", "R3", 0)] if spi else [("CMD2", "R2", 0), ("CMD3", "R1", 0), ("CMD7", "R1b", rca)]
        rest += [("CMD9", "R2", rca), ("CMD16", "R1", 512)]
        for name, resp, arg in rest:
            t0 = self._command(name, arg, resp)
            self._event(t0, name, arg)
        if self.bus.uhs:
            self._uhs_bus_setup()

    # ---- UHS-I: the 1.8 V switch, the bus speed switch, tuning (SD Physical Layer spec 4.2.4.1) ------------------
    def _voltage_switch(self) -> None:
        """CMD11, then the host stops the clock, switches its I/O to 1.8 V, restarts the clock and waits for the
        card to release DAT: one CMD11 entry lasting the whole switch."""
        t0 = self._command("CMD11", 0)
        self._spend(self.host.voltage_switch_us * 1e3, "host", "sd.host.voltage_switch_us")
        self._event(t0, "CMD11", 0)

    def _uhs_bus_setup(self) -> None:
        """ACMD6 (4-bit bus), CMD6 to the bus speed mode (its 64-byte status on DAT), then the host's tuning:
        CMD19 tuning blocks of 64 bytes where its driver tunes in this mode."""
        for name, arg in (("CMD55", self._rca_arg), ("ACMD6", 2)):
            t0 = self._command(name, arg)
            self._event(t0, name, arg)
        mode = self.bus.cfg.mode
        arg = 0x80FFFFF0 | CMD6_ACCESS_MODE[mode]  # mode 1 (switch), group 1 = the mode, others unchanged
        t0 = self._command("CMD6", arg)
        self._spend(self.bus.read_block_ns(64), "bus", BUS)
        self._event(t0, "CMD6", arg, 64)
        h = self.host
        if mode in h.tuning_modes and h.tuning_commands:
            t0 = self.vclock.now_ns()
            for _ in range(h.tuning_commands):
                self._command("CMD19", 0)
                self._spend(self.bus.read_block_ns(64), "bus", BUS)
                self._spend(h.tuning_gap_us * 1e3, "host", "sd.host.tuning_gap_us")
            self._event(t0, "CMD19", 0, 64 * h.tuning_commands, repeat=h.tuning_commands)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update(driver=self.driver, host=host_metadata(self.host), bus=to_mapping(self.bus.cfg),
                 card=to_mapping(self.profile))
        return d


def _fused_reader(drv: SdHostDriver) -> Callable[..., bytes]:
    """SdHostDriver.reader's fused path: BlockDevice.read, SdHostDriver._read and _read_time in one function for
    the reads whose time is a recorded cost (every kind but STREAMING, no command log, not the multi-block entry).
    Its tables hold, per count of sectors (a second one for buffers the SDMMC DMA cannot take), the clock's
    charger of the recorded cost, the recording's key and the bytes; a count enters them after its first read on
    the general path, which records the cost and puts its keys in the clock's tables where they belong."""
    end = drv.geometry.sector_count
    stats = drv.stats
    store_read = drv.store.read_bytes
    # within one written chunk (nearly every read): the slice read_bytes would take, without the call
    chunks = drv.store.chunk_map() if type(drv.store) is MemoryDevice else {}
    clock = drv.vclock  # replaced only while a cost is recorded, inside the driver
    rec, rec_id = drv._rec, drv._rec_id
    boundaries = drv._boundaries
    align = drv.host.dma_align_bytes if drv.driver == "sdmmc" else 0
    # per count: the charger, the recording's key, the bytes, and the recording's spans list for the key with
    # the epoch it is good for (Recording.read_slot)
    aligned: dict[int, tuple[Callable[[], None], tuple[Any, ...], int, list[Any]]] = {}
    bounced: dict[int, tuple[Callable[[], None], tuple[Any, ...], int, list[Any]]] = {}

    def read(lba: int, count: int, *, buf_addr: int = 0) -> bytes:
        known = bounced if buf_addr and align and buf_addr % align else aligned
        e = known.get(count)
        if e is None or lba < 0 or lba + count > end or drv.log is not None or drv._multi:
            data = drv.read(lba, count, buf_addr=buf_addr)
            if e is None and count > 0 and drv.log is None and not drv._multi:
                key = ("read", count, known is bounced, False)
                known[count] = (clock.charger(drv._costs[key]), key, count * SECTOR, [-1, None])
            return data
        charge, key, nbytes, spans = e
        charge()
        if boundaries:
            if rec is None:
                drv._boundary(lba, count)
            else:
                rec.depth += 1
                try:
                    drv._boundary(lba, count)
                finally:
                    rec.depth -= 1
        if rec is not None:
            if spans[0] == rec.epoch:
                spans[1] += (lba, count)
            else:
                rec.read_slot(spans, rec_id, key, lba, count)
        stats.reads += 1
        stats.bytes_read += nbytes
        off = lba * SECTOR
        co = off % CHUNK_BYTES
        if co + nbytes <= CHUNK_BYTES:
            chunk = chunks.get(off // CHUNK_BYTES)
            if chunk is not None:
                return chunk[co:co + nbytes].tobytes()
        return store_read(off, nbytes)
    return read
