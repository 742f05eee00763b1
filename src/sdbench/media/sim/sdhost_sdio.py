"""The ``sdio`` host driver kind: an MCU's own SD-mode host on bare metal (STM32 HAL, SdFat on Teensy,
no-OS-FatFS PIO SDIO on RP2040), step by step.

Its command sequence is in :mod:`sdbench.media.sim.sdhost`'s overview: commands sent by the CPU, no RTOS ticks,
CMD13 polled back to back or DAT0 watched for the card's busy, transfers kept open (``keep_open``) until CMD12,
and a block's data phase by the mechanism the host uses.
"""
from __future__ import annotations

import math
from typing import Any

from ...clock import VirtualClock
from .bus import SdBus
from .card import CardModel
from .host import HostProfile
from .sdhost_common import BUS, SECTOR, _Stream


class SdioSteps:
    """An MCU's SD-mode host driver, a mixin of :class:`sdbench.media.sim.sdhost.SdHostDriver`: CMD13 polling, the
    wait for the card's busy (``busy_wait``), the start and end of a request and of an open transfer, reads and
    writes (a buffer the DMA cannot take moves a sector at a time) and a block's data phase.

    Relies on the driver's attributes annotated below (``_rca_arg``: the card's address in a command's
    argument), its time helpers ``_spend``, ``_sw``, ``_sw_mix``, ``_waited``, ``_repeated``, ``_command``,
    ``_event`` and ``_log_only``, its recorded costs (``_recorded_cost``) and the streaming steps
    ``_streams``, ``_continues``, ``_stream_left`` and ``_fifo_overrun_cycles``
    (:class:`~.sdhost_streaming.StreamingSteps`)."""

    host: HostProfile
    bus: SdBus
    card: CardModel
    vclock: VirtualClock
    _multi: bool
    _stream: _Stream | None
    _rca_arg: int

    def _poll_status(self, busy_ns: float, parts: Any = ()) -> None:
        """CMD13 polled back to back until the card is ready (no RTOS ticks)."""
        t0 = self.vclock.now_ns()
        host_ns = self.host.cycles_ns(self.host.transaction_cycles)
        bus_ns = self.bus.command_ns("R1")
        polls = max(1, math.ceil(busy_ns / (host_ns + bus_ns)))
        self._spend((polls - 1) * (host_ns + bus_ns), "card", "")  # polls that saw the card busy
        self._spend(host_ns, "host", "")
        self._spend(bus_ns, "bus", "")
        self._waited(t0, busy_ns, parts)
        self._event(t0, "CMD13", self._rca_arg, repeat=polls)

    def _sdio_wait_busy(self, busy_ns: float, parts: Any = ()) -> None:
        if self.host.busy_wait == "cmd13":
            self._poll_status(busy_ns, parts)
        elif busy_ns > 0:
            self._spend(busy_ns, "card", "")  # the host watches DAT0
            self.vclock.attribute(parts)

    def _sdio_stop(self) -> None:
        """End an open CMD18/CMD25: CMD12, then after writes the card's busy."""
        st = self._stream
        if st is None:
            return
        self._stream = None
        t0 = self._command("CMD12", 0, "R1b")
        self._event(t0, "CMD12", 0)
        if st.kind == "write":
            busy = self.card.write_done_busy_ns(st.start_lba, st.blocks, SECTOR, True)
            self._sdio_wait_busy(busy, self.card.busy_parts)

    def _sdio_read(self, lba: int, count: int, buf_addr: int) -> None:
        if buf_addr % self.host.dma_align_bytes:
            self._sdio_stop()
            for i in range(count):  # one sector at a time through the driver's aligned buffer
                self._sdio_read_req(lba + i, 1, single=True)
                self._sw(self.host.copy_cycles_per_byte * SECTOR, "copy_cycles_per_byte")
        else:
            self._sdio_read_req(lba, count)

    def _sdio_begin(self, kind: str, lba: int, count: int, single: bool) -> tuple[int, str, bool, _Stream | None]:
        """Start a request: continue the open transfer, or end it and send CMD17/CMD18 (reads) or CMD24/CMD25
        (writes), opening a stream where the host keeps such transfers open. Returns (start time, the command,
        or "DATA" for a continued transfer, multi-block or not, the open stream or None)."""
        if not single and self._continues(kind, lba, count):
            return self.vclock.now_ns(), "DATA", True, self._stream
        self._sdio_stop()
        if self.host.status_before_transfer:
            self._poll_status(0.0)
        stream = not single and self._streams(kind, count)
        multi = not single and (stream or count > 1 or self._multi)
        name = {"read": ("CMD17", "CMD18"), "write": ("CMD24", "CMD25")}[kind][multi]
        t0 = self._command(name, lba)
        self._stream = _Stream(kind, lba, lba) if stream else None
        return t0, name, multi, self._stream

    def _sdio_end(self, t0: int, name: str, lba: int, count: int, st: _Stream | None, multi: bool) -> bool:
        """Record the data transfer; a stream stays open (True); otherwise a multi-block one stops with CMD12
        (False: the caller waits for the card)."""
        if name == "DATA":
            self._log_only(t0, name, lba, count * SECTOR)
        else:
            self._event(t0, name, lba, count * SECTOR)
        if st is not None:
            st.next_lba, st.blocks = lba + count, st.blocks + count
            return True
        if multi:  # by the CPU, or by the controller itself (auto_stop)
            t1 = self._command("CMD12", 0, "R1b", transaction=not self.host.auto_stop)
            self._event(t1, "CMD12", 0)
        return False

    def _sdio_read_req(self, lba: int, count: int, *, single: bool = False) -> None:
        t0, name, multi, st = self._sdio_begin("read", lba, count, single)
        h = self.host
        gap = self.card.read_block_gap_ns()
        if count > 0:
            if name != "DATA":
                self._spend(self.card.read_access_ns(), "card", "sd.card.read_access_us")
            else:
                self._spend(self._stream_left(), "card", "sd.card.read_block_gap_us")
            bus_ns = self.bus.read_block_ns() / h.read_clock_ratio
            self._sdio_block(bus_ns)

            def block() -> None:
                self._spend(gap, "card", "sd.card.read_block_gap_us")
                self._sdio_block(bus_ns)
            self._repeated(count - 1, block)
        if st is not None:
            st.ready_ns = self.vclock.now_ns() + gap
        if not self._sdio_end(t0, name, lba, count, st, multi) and h.busy_wait == "cmd13":
            self._poll_status(0.0)  # the glue checks the card's state after every transfer

    def _sdio_write(self, lba: int, count: int, buf_addr: int) -> None:
        if buf_addr % self.host.dma_align_bytes:
            self._sdio_stop()
            for i in range(count):
                self._sw(self.host.copy_cycles_per_byte * SECTOR, "copy_cycles_per_byte")
                self._sdio_write_req(lba + i, 1, single=True)
        else:
            self._sdio_write_req(lba, count)

    def _sdio_write_req(self, lba: int, count: int, *, single: bool = False) -> None:
        t0, name, multi, st = self._sdio_begin("write", lba, count, single)
        if count > 0:
            if st is not None and st.blocks:  # the previous block's busy, waited by the controller
                self._spend(self._stream_left(), "card", "sd.card.write_busy_block_us")
            bus_ns = self.bus.write_block_ns()
            self._sdio_block(bus_ns)
            busy = self.card.write_block_busy_ns(True)

            def block() -> None:
                self._spend(busy, "card", "sd.card.write_busy_block_us")
                self._sdio_block(bus_ns)
            self._repeated(count - 1, block)
        if st is not None:
            st.ready_ns = self.vclock.now_ns() + self.card.write_block_busy_ns(True)
        if not self._sdio_end(t0, name, lba, count, st, multi):
            busy = self.card.write_done_busy_ns(lba, count, SECTOR, multi)
            self._sdio_wait_busy(busy, self.card.busy_parts)

    def _sdio_block(self, bus_ns: float) -> None:
        """:meth:`_sdio_block_steps`, its cost recorded once per driver and bus time (reads, writes)."""
        self.vclock.charge(self._recorded_cost(("sdio-block", bus_ns), self._sdio_block_steps, bus_ns))

    def _sdio_block_steps(self, bus_ns: float) -> None:
        """One block on the bus (``bus_ns``: reads at ``read_clock_ratio`` of the bus clock) and the CPU's work
        on it: per block and per byte, and a CPU-fed FIFO where the CPU is slower than the bus."""
        h = self.host
        self._spend(bus_ns, "bus", BUS)
        self._sw_mix((("block_cycles", h.block_cycles), ("byte_cycles", h.byte_cycles * SECTOR),
                      ("crc_cycles_per_byte", h.crc_cycles_per_byte * SECTOR),
                      ("fifo_cycles_per_byte", self._fifo_overrun_cycles(bus_ns))))
