"""Replay (sdbench.ledger) on the SD host driver: another run's recorded requests timed again, no data moved.

A request that continues an open transfer (the streaming kinds: an SdFat file read or written a call at a time)
takes the time the same request took before from the same state, and runs of such requests are charged in one
step; the reads of a recorded cost are charged at once.
"""
from __future__ import annotations

import math
from typing import Any

from ...clock import VirtualClock
from ...errors import InternalError
from .card import CardModel, CardProfile
from .host import HostProfile
from .sdhost_common import _Stream


class ReplaySupport:
    """Replay of a recording, a mixin of :class:`sdbench.media.sim.sdhost.SdHostDriver`: the profiles its charges
    may be priced in, one recorded request, a run of them, the reads recorded under one key.

    Relies on the driver's attributes annotated below (``_continuing``: the times of requests that continued an
    open transfer, by what they depend on, or None where they are not kept; ``_boundaries``: reads over page and
    AU boundaries cost extra), its request timings ``_read_time``, ``_read_commands``, ``_write_time``,
    ``_erase_cmds``, ``_trim_time``, ``_sync_time`` and ``_initialise_time``, ``_boundary``, its recorded costs
    (``_recorded``, ``_costs``) and ``_continues`` (:class:`~.sdhost_streaming.StreamingSteps`)."""

    host: HostProfile
    profile: CardProfile
    card: CardModel
    vclock: VirtualClock
    driver: str
    log: list[Any] | None
    _costs: dict[tuple[Any, ...], Any]
    _multi: bool
    _stream: _Stream | None
    _boundaries: bool
    _continuing: dict[tuple[Any, ...], int] | None

    def priced_profiles(self) -> dict[str, Any]:
        """The profiles a recorded charge above this driver may be priced in (sdbench.ledger.Price.section)."""
        return {"sd.host": self.host, "sd.card": self.profile}

    def replay_op(self, name: str, args: tuple[Any, ...]) -> None:
        """Time one recorded request (no data moves)."""
        if self._continuing is not None and (name == "read" or name == "write") and self._replay_continuing(
                name, args):
            return
        if name == "read":
            lba, count, buf_addr, multi = args
            saved, self._multi = self._multi, multi
            try:
                self._read_time(lba, count, buf_addr)
            finally:
                self._multi = saved
        elif name == "write":  # (a fit replays a million of these: no table of bound methods per call)
            self._write_time(*args)
        elif name == "erase":
            self._erase_cmds(*args)
        elif name == "trim":
            self._trim_time(*args)
        elif name == "sync":
            self._sync_time(*args)
        elif name == "initialise":
            self._initialise_time(*args)
        else:
            raise InternalError(f"replay of an unknown request {name!r}")

    def _replay_continuing(self, name: str, args: tuple[Any, ...]) -> bool:
        """Replay a read or write that continues the open transfer (sdio, sdfat-spi: an SdFat file read or written
        a call at a time) from the time such a request took before, when it depends on nothing else; False (nothing done)
        for any other request.

        Such a request takes the host's per-call time, what is left of the card's gap or busy since the
        transfer's last block (``ready_ns`` less the clock), then its blocks, each a fixed time; it moves the
        transfer on and sets ``ready_ns`` from the clock.  What is left is ``ready_ns - now`` in floating point:
        exact (Sterbenz) while ``ready_ns`` is at most twice the clock, so within that bound its value at the
        request's start, with the request's size and flags, fixes the request's time."""
        key = self._continuing_key(name, args)
        if key is None:
            return False
        lba, count, buf_addr, multi = args
        kind, st, clock = key[0], self._stream, self.vclock
        assert st is not None
        now = clock.now_ns()
        took = self._continuing.get(key)  # type: ignore[union-attr]
        if took is None:
            saved, self._multi = self._multi, multi
            try:
                if kind == "write":
                    self._write_time(lba, count, buf_addr)
                else:
                    self._read_commands(lba, count, buf_addr)
            finally:
                self._multi = saved
            self._continuing[key] = clock.now_ns() - now  # type: ignore[index]
        else:
            clock.advance_ns(took, "other", "")
            st.next_lba, st.blocks = lba + count, st.blocks + count
            st.ready_ns = clock.now_ns() + self._after_block_ns(kind)
        if kind == "read" and self._boundaries:
            self._boundary(lba, count)
        return True

    def _after_block_ns(self, kind: str) -> float:
        """The card's time after a block of an open transfer before the next: a write's busy, a read's gap."""
        return self.card.write_block_busy_ns(True) if kind == "write" else self.card.read_block_gap_ns()

    def _continuing_key(self, name: str, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """What the time of a replayed request that continues the open transfer depends on (see
        :meth:`_replay_continuing`), or None for any other request."""
        lba, count, buf_addr, multi = args
        kind = "write" if name == "write" else "read"
        if count <= 0 or self.log is not None or not self._continues(kind, lba, count, multi) \
                or (self.driver == "sdio" and buf_addr % self.host.dma_align_bytes):
            return None  # (sdio: a buffer its DMA cannot take ends the transfer)
        st = self._stream
        assert st is not None
        now = self.vclock.now_ns()
        if not 0 < st.ready_ns <= 2 * now:
            return None
        # nothing left (the card was ready when the request started) waits nothing, however long ago
        return (kind, count, multi, st.blocks > 0, max(0.0, st.ready_ns - now))

    def replay_run(self, name: str, args: tuple[Any, ...], n: int, between: int) -> None:
        """Replay ``n`` requests ``name`` of one size at consecutive LBAs from ``args`` (sdbench.ledger.RUN), the
        charges above the driver after each taking ``between`` ns.

        Where two requests in a row continue the open transfer (sdio, sdfat-spi) from the same state (the same key of
        :meth:`_continuing_key`), each one after them does too, and takes the same time: the request leaves
        ``ready_ns`` = the clock + a fixed gap or busy, so the next starts with the same ``ready_ns - now``,
        the fixed part rounded to the floating-point grid of ``ready_ns``'s binade.  The requests up to the
        last whose ``ready_ns`` stays in that binade are then charged in one step, with the transfer moved on
        as they would move it; past a binade's end the requests go one by one until the state repeats again.
        A read over page or AU boundaries depends on where it lies: such reads go one by one."""
        lba, count, rest = args[0], args[1], args[2:]
        clock = self.vclock
        foldable = self._continuing is not None and (name == "write" or not self._boundaries)
        last_key: tuple[Any, ...] | None = None
        last_start = 0
        k = 0
        while k < n:
            a = (lba + k * count, count, *rest)
            start = clock.now_ns()
            key = self._continuing_key(name, a) if foldable else None
            if key is not None and key == last_key:
                st = self._stream
                assert st is not None
                period = start - last_start
                gap = self._after_block_ns(name)
                binade = math.frexp(st.ready_ns)[1]
                m = n - k
                if period > 0:
                    m = min(m, max(0, int((2.0 ** binade - gap - (start - between)) // period) + 1))
                while m > 0 and math.frexp((start + m * period - between) + gap)[1] != binade:
                    m -= 1
                if m > 0:
                    clock.advance_ns(m * period, "other", "")
                    st.next_lba, st.blocks = st.next_lba + m * count, st.blocks + m * count
                    st.ready_ns = (clock.now_ns() - between) + gap
                    k += m
                    last_key = None
                    continue
            self.replay_op(name, a)
            if between:
                clock.advance_ns(between, "other", "")
            last_key, last_start = key, start
            k += 1

    def replay_reads(self, key: tuple[Any, ...], spans: list[int]) -> None:
        """Time the reads recorded under ``key`` (``spans``: LBA and count of each, flattened)."""
        _, count, unaligned, multi = key
        cost = self._costs.get(key)
        if cost is None:
            saved, self._multi = self._multi, multi
            try:
                # the key's path: an address the DMA cannot take when the read was unaligned
                addr = 1 if unaligned else 0
                cost = self._recorded(key, lambda: self._read_commands(0, count, addr))
            finally:
                self._multi = saved
        self.vclock.charge(cost, len(spans) // 2)
        if self._boundaries:
            for i in range(0, len(spans), 2):
                self._boundary(spans[i], spans[i + 1])
