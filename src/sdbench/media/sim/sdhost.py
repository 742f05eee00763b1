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

Every command is counted on the clock and, when ``log_commands`` is set,
recorded with its argument, bytes and duration for ``sdbench trace``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...clock import VirtualClock
from ...errors import ConfigError
from ...options import to_mapping
from ..base import BlockDevice, Geometry
from ..memory import MemoryDevice
from .bus import SdBus
from .card import CardModel, CardProfile
from .host import HostProfile

SECTOR = 512


@dataclass(frozen=True)
class CommandEvent:
    t_ns: int          # start, on the virtual clock
    name: str          # CMD17, CMD25, ACMD41, ...
    arg: int
    nbytes: int        # data bytes moved
    dur_ns: int
    repeat: int = 1    # e.g. CMD13 polled n times back to back


def check_bus_clock(host: HostProfile, bus: SdBus, card: CardProfile, *, where: str = "sd.bus") -> None:
    """Refuse a bus clock the host cannot generate or the card does not take in that mode (ConfigError naming
    the option and the limit)."""
    clk = bus.cfg.clock_hz
    if host.max_bus_clock_hz and clk > host.max_bus_clock_hz:
        raise ConfigError(f"{where}.clock_hz = {clk} Hz is above host {host.name}'s limit {host.max_bus_clock_hz} Hz "
                          f"(max_bus_clock_hz)")
    if host.min_clock_divider and clk * host.min_clock_divider > host.cpu_hz:
        raise ConfigError(f"{where}.clock_hz = {clk} Hz is above host {host.name}'s limit "
                          f"{host.cpu_hz // host.min_clock_divider} Hz (cpu_hz {host.cpu_hz} Hz / min_clock_divider "
                          f"{host.min_clock_divider})")
    limit = card.max_clock_hz(host.high_speed)
    if clk > limit:
        mode = "SPI mode" if bus.is_spi else "SD mode"
        if limit == card.high_speed_max_clock_hz:
            why = "High Speed"
        elif card.high_speed_max_clock_hz:
            why = f"Default Speed: host {host.name}'s driver does not switch cards to High Speed"
        else:
            why = "Default Speed: the card has no High Speed mode"
        raise ConfigError(f"{where}.clock_hz = {clk} Hz is above card {card.name}'s limit {limit} Hz in {mode} "
                          f"({why})")


class SdHostDriver(BlockDevice):
    kind = "sim-sd"

    def __init__(self, host: HostProfile, bus: SdBus, card: CardProfile, clock: VirtualClock, *, seed: int = 1,
                 log_commands: bool = False) -> None:
        if host.driver in ("sdspi", "p2spi") and not bus.is_spi:
            raise ConfigError(f"host driver {host.driver} needs bus.kind = \"spi\", not {bus.cfg.kind!r}")
        if host.driver == "sdmmc" and bus.is_spi:
            raise ConfigError("host driver sdmmc drives SD mode (sd1/sd4), not SPI; use sdspi")
        check_bus_clock(host, bus, card)
        geometry = Geometry(sector_size=SECTOR, sector_count=card.capacity_bytes // SECTOR,
                            erase_value=card.erased_byte)
        super().__init__(geometry, clock)
        self.vclock = clock
        self.host, self.bus, self.profile = host, bus, card
        self.card = CardModel(card, seed)
        self.store = MemoryDevice(geometry)
        self.log: list[CommandEvent] | None = [] if log_commands else None
        self.driver = host.driver
        # reads cost the same wherever they happen (no busy, no tick waits): their cost is recorded once
        # by running the command-level path on a scratch clock, then applied in one step
        self._read_costs: dict[tuple[int, bool], Any] = {}

    # ---- time helpers -------------------------------------------------------------
    def _spend(self, ns: float, category: str) -> None:
        self.vclock.advance_ns(ns, category)

    def _sw(self, cycles: float) -> None:
        if cycles:
            self._spend(self.host.cycles_ns(cycles), "host")

    def _event(self, t0: int, name: str, arg: int, nbytes: int = 0, repeat: int = 1) -> None:
        self.vclock.count_command(name, repeat)
        if self.log is not None:
            self.log.append(CommandEvent(t0, name, arg, nbytes, self.vclock.now_ns() - t0, repeat))

    def _command(self, name: str, arg: int, response: str = "R1", *, transaction: bool = True) -> int:
        """Software transaction + the command/response on the bus.  Returns the start time."""
        t0 = self.vclock.now_ns()
        if transaction:
            self._sw(self.host.transaction_cycles)
        self._spend(self.bus.command_ns(response), "bus")
        return t0

    def _tick_wait(self) -> None:
        tick = 1e9 / self.host.rtos_tick_hz
        now = self.vclock.now_ns()
        nxt = (math.floor(now / tick) + 1) * tick
        self._spend(nxt - now, "rtos")

    def _poll_cmd13(self, busy_ns: float) -> None:
        """sdmmc: CMD13 back to back until the card is ready; yields a tick after 100 ms, then doubling."""
        t_start = self.vclock.now_ns()
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
                self._spend((n - 1) * poll_ns, "card")  # polls that saw the card busy
                self._spend(host_ns, "host")
                self._spend(bus_ns, "bus")
                break
            self._spend(n * poll_ns, "card")
            next_yield *= 2
            before = self.vclock.now_ns()
            self._tick_wait()  # vTaskDelay(1)
            elapsed += self.vclock.now_ns() - before
        self._event(t_start, "CMD13", 0, repeat=polls)

    def _wait_busy_ticks(self, busy_ns: float) -> None:
        """Wait for DAT0 busy with vTaskDelay(1) steps (ESP32 SDMMC host, SCF_WAIT_BUSY)."""
        if busy_ns <= 0:
            return
        t_end = self.vclock.now_ns() + busy_ns
        self._spend(busy_ns, "card")
        tick = 1e9 / self.host.rtos_tick_hz
        nxt = math.ceil(t_end / tick) * tick
        self._spend(nxt - t_end, "rtos")

    def _spi_wait(self, ns: float) -> None:
        """SPI: the host clocks 0xFF bytes until a token or the end of busy; rounded up to whole bytes."""
        if ns <= 0:
            return
        byte = self.bus.poll_byte_ns()
        self._spend(math.ceil(ns / byte) * byte, "card")

    def _data_cpu(self, nbytes: int, *, crc: bool = False, copy: bool = False) -> None:
        h = self.host
        cycles = h.block_cycles * (nbytes // SECTOR) + h.byte_cycles * nbytes
        if crc:
            cycles += h.crc_cycles_per_byte * nbytes
        if copy:
            cycles += h.copy_cycles_per_byte * nbytes
        self._sw(cycles)

    # ---- BlockDevice primitives -------------------------------------------------------
    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        if self.log is None:
            unaligned = self.driver == "sdmmc" and buf_addr % self.host.dma_align_bytes != 0
            key = (count, unaligned)
            cost = self._read_costs.get(key)
            if cost is None:
                cost = self._read_costs[key] = self._record_read_cost(count, buf_addr)
            self.vclock.apply(cost)
            return self.store.read(lba, count)
        self._read_commands(lba, count, buf_addr)
        return self.store.read(lba, count)

    def _record_read_cost(self, count: int, buf_addr: int) -> Any:
        real = self.vclock
        scratch = VirtualClock()
        self.vclock = scratch
        try:
            m = scratch.mark()
            self._read_commands(0, count, buf_addr)
            return scratch.delta_since(m)
        finally:
            self.vclock = real

    def _read_commands(self, lba: int, count: int, buf_addr: int) -> None:
        self._sw(self.host.call_cycles)
        if self.driver == "sdmmc":
            if buf_addr % self.host.dma_align_bytes:
                for i in range(count):  # bounce buffer, one sector at a time
                    self._sdmmc_read(lba + i, 1)
                    self._sw(self.host.copy_cycles_per_byte * SECTOR)
            else:
                self._sdmmc_read(lba, count)
        elif self.bus.is_spi:
            self._spi_read(lba, count)
        else:
            self._sdmmc_read(lba, count, poll=False)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        count = len(data) // SECTOR
        self._sw(self.host.call_cycles)
        if self.driver == "sdmmc":
            if buf_addr % self.host.dma_align_bytes:
                for i in range(count):
                    self._sw(self.host.copy_cycles_per_byte * SECTOR)
                    self._sdmmc_write(lba + i, 1)
            else:
                self._sdmmc_write(lba, count)
        elif self.bus.is_spi:
            self._spi_write(lba, count)
        else:
            self._sdmmc_write(lba, count)
        self.store.write(lba, data)

    def _erase(self, lba: int, count: int) -> None:
        self._erase_cmds(lba, count)
        self.store.erase(lba, count)

    def _trim(self, lba: int, count: int) -> None:
        # ESP-IDF's CTRL_TRIM: the same CMD32/33/38 sequence (discard argument); the data may stay
        self._erase_cmds(lba, count)

    def _erase_cmds(self, lba: int, count: int) -> None:
        self._sw(self.host.call_cycles)
        for name, arg in (("CMD32", lba), ("CMD33", lba + count - 1)):
            t0 = self._command(name, arg)
            self._event(t0, name, arg)
        t0 = self._command("CMD38", 0, "R1b")
        busy = self.card.erase_busy_ns(count)
        if self.bus.is_spi:
            self._spi_wait(busy)
        else:
            self._wait_busy_ticks(busy)
        self._event(t0, "CMD38", 0)
        if self.bus.is_spi:
            self._send_status()
        self.card.discard(lba, count, SECTOR)

    def _send_status(self) -> None:
        """One CMD13 (SEND_STATUS, R2), as the SPI drivers issue after a transfer or an erase."""
        t0 = self._command("CMD13", 0, "R2")
        self._event(t0, "CMD13", 0)

    # ---- native SD mode ---------------------------------------------------------------
    def _sdmmc_read(self, lba: int, count: int, *, poll: bool = True) -> None:
        multi = count > 1
        name = "CMD18" if multi else "CMD17"
        t0 = self._command(name, lba)
        self._spend(self.card.read_access_ns(), "card")
        self._spend(count * self.bus.read_block_ns(), "bus")
        if multi:
            self._spend((count - 1) * self.card.read_block_gap_ns(), "card")
        self._sw(self.host.block_cycles * count)
        self._event(t0, name, lba, count * SECTOR)
        if multi:  # auto-stop by the host controller
            t1 = self._command("CMD12", 0, "R1b", transaction=False)
            self._event(t1, "CMD12", 0)
        if poll:
            self._poll_cmd13(0.0)

    def _sdmmc_write(self, lba: int, count: int) -> None:
        multi = count > 1
        name = "CMD25" if multi else "CMD24"
        t0 = self._command(name, lba)
        self._spend(count * self.bus.write_block_ns(), "bus")
        if multi:
            self._spend((count - 1) * self.card.write_block_busy_ns(True), "card")
        self._sw(self.host.block_cycles * count)
        self._event(t0, name, lba, count * SECTOR)
        if multi:
            t1 = self._command("CMD12", 0, "R1b", transaction=False)
            self._event(t1, "CMD12", 0)
        busy = self.card.write_done_busy_ns(lba, count, SECTOR, multi)
        if self.driver == "sdmmc":
            self._poll_cmd13(busy)
        else:
            self._spend(busy, "card")

    # ---- SPI mode -----------------------------------------------------------------------
    def _spi_read(self, lba: int, count: int) -> None:
        multi = count > 1
        name = "CMD18" if multi else "CMD17"
        t0 = self._command(name, lba)
        for i in range(count):
            self._spi_wait(self.card.read_access_ns() if i == 0 else self.card.read_block_gap_ns())
            self._spend(self.bus.read_block_ns(), "bus")
            # sdspi: its own transaction per block, CRC16 in software, copy out of the driver buffer
            self._data_cpu(SECTOR, crc=True, copy=self.driver == "sdspi")
        self._event(t0, name, lba, count * SECTOR)
        if multi:
            t1 = self._command("CMD12", 0, "R1b")
            self._event(t1, "CMD12", 0)
        if self.driver == "p2spi":  # the P2 driver checks the card's status after every transfer
            self._send_status()

    def _spi_write(self, lba: int, count: int) -> None:
        multi = count > 1
        name = "CMD25" if multi else "CMD24"
        t0 = self._command(name, lba)
        for i in range(count):
            self._data_cpu(SECTOR, crc=True)
            self._spend(self.bus.write_block_ns(), "bus")
            if multi and i < count - 1:
                self._spi_wait(self.card.write_block_busy_ns(True))
        if multi:
            self._spend(self.bus.stop_tran_ns(), "bus")
        self._spi_wait(self.card.write_done_busy_ns(lba, count, SECTOR, multi))
        self._event(t0, name, lba, count * SECTOR)
        if self.driver in ("sdspi", "p2spi"):  # both check the result of programming with SEND_STATUS
            self._send_status()

    # ---- card initialisation (mount) ----------------------------------------------------
    def initialise(self) -> None:
        """Power-up sequence: CMD0, CMD8, ACMD41 until ready, CMD58/CMD2/CMD3, CSD, bus set-up."""
        spi = self.bus.is_spi
        seq = [("CMD0", "R1"), ("CMD8", "R7"), ("CMD55", "R1"), ("ACMD41", "R3")]
        for name, resp in seq:
            t0 = self._command(name, 0, resp)
            self._event(t0, name, 0)
        t0 = self.vclock.now_ns()
        self._spend(self.card.init_ns(), "card")  # the ACMD41 loop until the card reports ready
        self._event(t0, "ACMD41-loop", 0)
        rest = [("CMD58", "R3")] if spi else [("CMD2", "R2"), ("CMD3", "R1"), ("CMD7", "R1b")]
        rest += [("CMD9", "R2"), ("CMD16", "R1")]
        for name, resp in rest:
            t0 = self._command(name, 0, resp)
            self._event(t0, name, 0)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update(driver=self.driver, host=to_mapping(self.host), bus=to_mapping(self.bus.cfg),
                 card=to_mapping(self.profile))
        return d
