"""What the SD host driver (:mod:`sdbench.media.sim.sdhost`) and its mixins share: the sector size, the ledger
keys its time is charged to, the driver kinds that keep a transfer open, and an open transfer's state."""
from __future__ import annotations

from dataclasses import dataclass

SECTOR = 512
#: ledger keys (VirtualClock.ledger_ns): time on the bus at its clock; time a wait ran past the busy it waited
#: for (polls that found the card ready, the rounding of SPI polling to whole bytes); RTOS tick rounding
BUS = "sd.bus.clock_hz"
POLLING = "sd.wait.polling"
TICKS = "sd.host.rtos_tick_hz"
#: driver kinds that keep a multi-block transfer open between requests: their reads depend on the driver's
#: state, so read costs are not cached
STREAMING = ("sdfat-spi", "sdio")


@dataclass
class _Stream:
    """An open CMD18 (``read``) or CMD25 (``write``) transfer of a streaming driver kind."""

    kind: str
    start_lba: int
    next_lba: int
    blocks: int = 0
    #: when the card has the next block ready (a read's gap) or is done programming the last one (a write's
    #: busy): it works on that while the host is away between requests, so the next request waits only for what
    #: is left
    ready_ns: float = 0.0
