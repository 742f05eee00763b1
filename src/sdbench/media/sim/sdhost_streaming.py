"""What the SD host driver kinds that keep a transfer open share (``sdfat-spi``, ``sdio``: STREAMING).

Such a driver may leave a CMD18 or CMD25 open after a request (``keep_open``); the next request at the
following LBA continues it, and the card's gap or busy after the last block runs on while the host is away.
"""
from __future__ import annotations

from ...clock import VirtualClock
from .card import ERASE_ARGS, CardModel
from .host import HostProfile
from .sdhost_common import SECTOR, _Stream


class StreamingSteps:
    """The steps the streaming kinds share, a mixin of :class:`sdbench.media.sim.sdhost.SdHostDriver`: whether a
    request opens or continues the open transfer, what is left of the card's gap or busy when it continues it, an
    erase (which ends it first), and the CPU time a CPU-fed FIFO adds to a block's data phase.

    Relies on the driver's attributes annotated below, its methods ``_command`` and ``_event``, the SdFat SPI
    steps ``_sf_command``, ``_sf_poll`` and ``_sf_release`` (:class:`~.sdhost_sdfat_spi.SdFatSpiSteps`) and the
    SDIO steps ``_sdio_stop`` and ``_sdio_wait_busy`` (:class:`~.sdhost_sdio.SdioSteps`)."""

    host: HostProfile
    card: CardModel
    vclock: VirtualClock
    driver: str
    _multi: bool
    _stream: _Stream | None

    def _streams(self, kind: str, count: int, multi: bool | None = None) -> bool:
        """Whether a request of this kind and size opens (or continues) a transfer left open (keep_open);
        ``multi``: the multi-block entry's flag the request comes with (None: as it is now)."""
        mode = self.host.keep_open
        if mode == "all":
            return True
        return mode == "writes" and kind == "write" and (count > 1 or (self._multi if multi is None else multi))

    def _continues(self, kind: str, lba: int, count: int, multi: bool | None = None) -> bool:
        st = self._stream
        return st is not None and st.kind == kind and st.next_lba == lba and self._streams(kind, count, multi)

    def _stream_left(self) -> float:
        """What is left of the open transfer's block gap (reads) or block busy (writes) when a request continues
        it: the card worked on it while the host was away."""
        st = self._stream
        return max(0.0, st.ready_ns - self.vclock.now_ns()) if st is not None else 0.0

    def _stream_erase(self, lba: int, count: int, kind: str) -> None:
        arg = ERASE_ARGS[kind]
        busy = self.card.erase_busy_ns(count, kind)
        parts = self.card.busy_parts
        if self.driver == "sdfat-spi":
            for name, a in (("CMD32", lba), ("CMD33", lba + count - 1)):
                t0 = self._sf_command(name, a)
                self._event(t0, name, a)
            t0 = self._sf_command("CMD38", arg, "R1b")
            self._sf_poll(busy, parts, at_least=1)  # waitReady(SD_ERASE_TIMEOUT)
            self._event(t0, "CMD38", arg)
            self._sf_release()
        else:
            self._sdio_stop()
            for name, a in (("CMD32", lba), ("CMD33", lba + count - 1)):
                t0 = self._command(name, a)
                self._event(t0, name, a)
            t0 = self._command("CMD38", arg, "R1b")
            self._event(t0, "CMD38", arg)
            self._sdio_wait_busy(busy, parts)
        self.card.discard(lba, count, SECTOR)

    def _fifo_overrun_cycles(self, bus_ns: float) -> float:
        """The CPU cycles a CPU-fed FIFO (``fifo_cycles_per_byte``) adds to a block whose data take ``bus_ns`` on
        the bus: what the CPU's loop takes beyond the bus time."""
        h = self.host
        if not h.fifo_cycles_per_byte:
            return 0.0
        return max(0.0, h.fifo_cycles_per_byte * SECTOR - bus_ns * h.cpu_hz / 1e9)
