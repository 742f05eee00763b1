"""The ``sdfat-spi`` host driver kind: Bill Greiman's SdFat in SPI mode (``SdSpiCard``), step by step.

Its command sequence is in :mod:`sdbench.media.sim.sdhost`'s overview: every command after ``syncDevice`` and
``waitReady``, 0xFF bytes read one call at a time until a token or the end of busy, a block's data phase by the
mechanism the driver uses, and transfers kept open (``keep_open``) until CMD12 or the stop-tran token ends them.
"""
from __future__ import annotations

import math
from typing import Any

from ...clock import VirtualClock
from .bus import SdBus
from .card import CardModel
from .host import HostProfile
from .sdhost_common import BUS, POLLING, SECTOR, _Stream


class SdFatSpiSteps:
    """SdFat's SPI card driver, a mixin of :class:`sdbench.media.sim.sdhost.SdHostDriver`: its commands
    (``cardCommand``), polling, block transfers, the end of an open transfer (``syncDevice``), reads and writes.

    Relies on the driver's attributes annotated below (``_ready_at_ns``, ``_ready_parts``: the busy the last write
    stream's stop began, polled out by the next command; ``_spi_active``: the card is selected), its time helpers
    ``_spend``, ``_sw``, ``_sw_mix``, ``_waited``, ``_repeated``, ``_event`` and ``_log_only``, its recorded costs
    (``_recorded_cost``) and the streaming steps ``_streams``, ``_continues``, ``_stream_left`` and
    ``_fifo_overrun_cycles`` (:class:`~.sdhost_streaming.StreamingSteps`)."""

    host: HostProfile
    bus: SdBus
    card: CardModel
    vclock: VirtualClock
    _multi: bool
    _stream: _Stream | None
    _ready_at_ns: float
    _ready_parts: tuple[tuple[str, float], ...]
    _spi_active: bool

    def _sf_byte_ns(self) -> float:
        """One pass of a polling loop: a spiReceive() of a single byte (8 clocks plus the call) and the timeout
        check (poll_cycles)."""
        h = self.host
        return self.bus.poll_byte_ns() + h.cycles_ns(h.spi_byte_cycles + h.poll_cycles)

    def _sf_poll(self, wait_ns: float, parts: Any = (), *, at_least: int = 0) -> None:
        """0xFF bytes read one call at a time until a token arrives or busy ends (at least ``at_least``);
        ``parts``: where the wait comes from, for the ledger (see :meth:`_waited`)."""
        if wait_ns > 0:
            t0 = self.vclock.now_ns()
            byte = self._sf_byte_ns()
            self._spend(max(at_least, math.ceil(wait_ns / byte)) * byte, "card", "")
            self._waited(t0, wait_ns, parts)
        elif at_least:
            self._spend(at_least * self.bus.poll_byte_ns(), "bus", POLLING)
            self._sw_mix((("spi_byte_cycles", at_least * self.host.spi_byte_cycles),
                          ("poll_cycles", at_least * self.host.poll_cycles)))

    def _sf_single_bytes(self, n: int) -> None:
        """n single-byte SPI calls outside a block (CS high + 0xFF, the dummy byte after select)."""
        self._spend(n * self.bus.poll_byte_ns(), "bus", BUS)
        self._sw(n * self.host.spi_byte_cycles, "spi_byte_cycles")

    def _sf_release(self) -> None:
        """spiStop: CS high and one 0xFF byte; the next command selects the card again."""
        if self._spi_active:
            self._sf_single_bytes(1)
            self._spi_active = False

    def _sf_command(self, name: str, arg: int, response: str = "R1") -> int:
        """cardCommand: syncDevice, select, waitReady (not for CMD0/CMD12), the command bytes and the response.
        Returns the start time for the command's log entry (after the sync, before the ready wait)."""
        self._sf_stop()
        t0 = self.vclock.now_ns()
        if not self._spi_active:  # spiStart: activate, select, one dummy 0xFF byte
            self._sf_single_bytes(1)
            self._spi_active = True
        if name not in ("CMD0", "CMD12"):
            left = self._ready_at_ns - self.vclock.now_ns()
            # what is left of the busy the last write stream's stop began: its parts in proportion
            total = sum(ns for _, ns in self._ready_parts)
            share = left / total if left > 0 and total > 0 else 0.0
            self._sf_poll(left, tuple((k, ns * share) for k, ns in self._ready_parts), at_least=1)
        clocks = self.bus.command_clocks(response)
        self._sw_mix((("transaction_cycles", self.host.transaction_cycles),
                      ("spi_byte_cycles", self.host.spi_byte_cycles * (clocks // 8))))
        self._spend(self.bus.ns(clocks), "bus", BUS)
        return t0

    def _sf_block(self, single_bytes: int) -> None:
        """:meth:`_sf_block_steps`, its cost recorded once per driver (it depends on the profiles only)."""
        self.vclock.charge(self._recorded_cost(("sf-block", single_bytes), self._sf_block_steps, single_bytes))

    def _sf_block_steps(self, single_bytes: int) -> None:
        """One block's transfer after its wait: ``single_bytes`` single-byte calls (token, CRC, data response)
        and the 512 data bytes as the driver moves them: on the bus at its clock with ``spi_frame_gap_clocks``
        between bytes; a byte loop's CPU time per byte (``byte_cycles``) after each byte's clocks; chunks
        (``spi_chunk_bytes``) each with the bus idle while the CPU sets the next up (``spi_chunk_cycles``); a
        CPU-fed FIFO (``fifo_cycles_per_byte``) that holds the bus back only where the CPU is the slower; and
        the block's set-up (``block_cycles``: DMA channels, a memset, the call chain)."""
        h = self.host
        wire = self.bus.ns(SECTOR * 8)
        gap = self.bus.ns(SECTOR * h.spi_frame_gap_clocks)
        self._spend(self.bus.ns(single_bytes * 8) + wire, "bus", BUS)
        if gap:
            self._spend(gap, "bus", "sd.host.spi_frame_gap_clocks")
        chunks = -(-SECTOR // h.spi_chunk_bytes) if h.spi_chunk_bytes else 0
        self._sw_mix((("block_cycles", h.block_cycles), ("byte_cycles", h.byte_cycles * SECTOR),
                      ("crc_cycles_per_byte", h.crc_cycles_per_byte * SECTOR),
                      ("spi_chunk_cycles", h.spi_chunk_cycles * chunks),
                      ("fifo_cycles_per_byte", self._fifo_overrun_cycles(wire + gap)),
                      ("spi_byte_cycles", h.spi_byte_cycles * single_bytes)))

    def _sf_stop(self) -> None:
        """syncDevice: end an open CMD18 (CMD12) or CMD25 (busy of the last block, stop-tran token, CS high)."""
        st = self._stream
        if st is None:
            return
        self._stream = None
        if st.kind == "read":
            t0 = self._sf_command("CMD12", 0, "R1b")
            self._event(t0, "CMD12", 0)
        else:
            t0 = self.vclock.now_ns()
            self._sf_poll(max(0.0, st.ready_ns - t0), "sd.card.write_busy_block_us", at_least=1)
            self._spend(self.bus.stop_tran_ns(), "bus", BUS)  # STOP_TRAN_TOKEN, then CS high and one 0xFF byte
            self._sw(2 * self.host.spi_byte_cycles, "spi_byte_cycles")
            self._spi_active = False
            self._log_only(t0, "STOP_TRAN", st.start_lba, 0)
            # the card flushes now; SdFat returns and the next command's waitReady polls this out
            self._ready_at_ns = self.vclock.now_ns() + self.card.write_done_busy_ns(st.start_lba, st.blocks, SECTOR,
                                                                                     True)
            self._ready_parts = self.card.busy_parts
            return
        self._sf_release()

    def _sf_read(self, lba: int, count: int) -> None:
        if self._continues("read", lba, count):
            t0, name, first_wait = self.vclock.now_ns(), "DATA", self._stream_left()
            multi = True
        else:
            stream = self._streams("read", count)
            multi = stream or count > 1 or self._multi
            name = "CMD18" if multi else "CMD17"
            t0 = self._sf_command(name, lba)
            first_wait = self.card.read_access_ns()
            if stream:
                self._stream = _Stream("read", lba, lba)
        first_key = "sd.card.read_block_gap_us" if name == "DATA" else "sd.card.read_access_us"
        if count > 0:
            self._sf_poll(first_wait, first_key)  # 0xFF until the start token
            self._sf_block(3)  # the token and the two CRC bytes are single-byte calls
            gap = self.card.read_block_gap_ns()

            def block() -> None:
                self._sf_poll(gap, "sd.card.read_block_gap_us")
                self._sf_block(3)
            self._repeated(count - 1, block)
        if name == "DATA":
            self._log_only(t0, name, lba, count * SECTOR)
        else:
            self._event(t0, name, lba, count * SECTOR)
        st = self._stream
        if st is not None:
            st.next_lba, st.blocks = lba + count, st.blocks + count
            st.ready_ns = self.vclock.now_ns() + self.card.read_block_gap_ns()
        elif multi:
            t1 = self._sf_command("CMD12", 0, "R1b")  # readStop
            self._event(t1, "CMD12", 0)
            self._sf_release()
        else:
            self._sf_release()

    def _sf_write(self, lba: int, count: int) -> None:
        cont = self._continues("write", lba, count)
        if cont:
            t0, name, multi = self.vclock.now_ns(), "DATA", True
            st = self._stream
        else:
            stream = self._streams("write", count)
            multi = stream or count > 1 or self._multi
            name = "CMD25" if multi else "CMD24"
            t0 = self._sf_command(name, lba)
            st = _Stream("write", lba, lba) if multi else None
            self._stream = st
        if count > 0:
            if st is not None:  # writeData: waitReady for the previous block's busy first
                self._sf_poll(self._stream_left() if st.blocks else 0.0, "sd.card.write_busy_block_us", at_least=1)
                st.blocks += 1
            self._sf_block(4)  # token, two CRC bytes, data response
            busy = self.card.write_block_busy_ns(True) if st is not None else 0.0

            def block() -> None:
                if st is not None:
                    self._sf_poll(busy, "sd.card.write_busy_block_us", at_least=1)
                self._sf_block(4)
            self._repeated(count - 1, block)
            if st is not None:
                st.blocks += count - 1
        if st is not None:
            st.ready_ns = self.vclock.now_ns() + self.card.write_block_busy_ns(True)
        if name == "DATA":
            self._log_only(t0, name, lba, count * SECTOR)
        else:
            self._event(t0, name, lba, count * SECTOR)
        if st is not None:
            st.next_lba = lba + count
            if not self._streams("write", count):
                self._sf_stop()  # writeStop
            return
        # CMD24 (SHARED_SPI): CHECK_FLASH_PROGRAMMING waits for programming, then CMD13 (R2)
        busy = self.card.write_done_busy_ns(lba, 1, SECTOR, False)
        self._sf_poll(busy, self.card.busy_parts, at_least=1)
        t1 = self._sf_command("CMD13", 0, "R2")
        self._event(t1, "CMD13", 0)
        self._sf_release()
