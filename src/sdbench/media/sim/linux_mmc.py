"""The Linux MMC block driver over an SD host controller: host profiles with ``driver = "linux-mmc"``.

What a Linux computer (Raspberry Pi OS on a Pi 2, 4 or 5) does with a block request, as the kernel's MMC
block driver (``drivers/mmc/core/block.c``, ``queue.c``, ``core.c``) and its host controller drivers do it
(``sdhci.c`` with ``sdhci-iproc.c`` on the Pi 4 and ``sdhci-brcmstb.c`` on the Pi 5, ``bcm2835-sdhost.c`` on
the Pi 1 to 3):

* The block layer splits a request larger than the queue's max_sectors (the host's ``max_req_size``:
  ``max_request_bytes``, 512 KiB on SDHCI and on bcm2835-sdhost) and hands the pieces to the MMC block driver
  one at a time: without command queueing one request is on the bus at a time (``mmc_mq_queue_rq`` refuses
  parallel dispatch), so a queue depth above one changes nothing on the bus.
* Each request costs the CPU ``call_cycles``: the software path of one block-layer request (the system call
  or the writeback above it, blk-mq dispatch, ``mmc_blk_mq_issue_rq``, the host driver's request set-up and
  DMA mapping, its command and transfer interrupts, the threaded completion, the wake-up of the waiting task).
* One block is CMD17 or CMD24.  More are CMD18 or CMD25, preceded by CMD23 SET_BLOCK_COUNT where the host
  driver sends it (``cmd23``: SDHCI for reads and writes, bcm2835-sdhost for reads only) and the card takes it
  (SCR CMD_SUPPORT, card ``cmd23``); otherwise CMD12 stops the transfer.  The controller sends CMD23 and
  CMD12 itself or from its interrupt handler: they cost bus time, no request of their own.
* Writes: the controller watches DAT0 for the card's busy (hardware busy detection: the transfer-complete or
  busy interrupt comes when it ends); then the block driver asks for the card's status with CMD13 in a request
  of its own (``mmc_blk_card_busy``), which costs ``transaction_cycles``.
* With the command queueing engine on (host ``cmdq``: the Pi 5's CQHCI) and a card with a command queue
  (card ``cmdq``), a request is a task: CMD44 and CMD45 queue it, CMD13 reads the queue status, CMD46 (read)
  or CMD47 (write) runs it; no CMD23, CMD12 or status request; the engine sends the commands.  Requests reach
  this model one at a time, so the card's queue holds one task at a time (the Raspberry Pi kernel also allows
  one posted write at a time on a removable card).
* The card was initialised when the kernel found it (``[sd] initialise = true``): in a UHS-I mode with the
  1.8 V switch (CMD11) and, where the host tunes in that mode, CMD19 tuning.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...clock import VirtualClock
from ...errors import ConfigError
from .bus import SdBus
from .card import CardProfile
from .host import HostProfile
from .sdhost import BUS, SECTOR, SdHostDriver


class LinuxMmcDriver(SdHostDriver):
    """A simulated card behind the Linux MMC block driver (host driver kind ``linux-mmc``)."""

    kind = "sim-sd-linux"
    MODELS = ("linux-mmc",)

    def __init__(self, host: HostProfile, bus: SdBus, card: CardProfile, clock: VirtualClock, *, seed: int = 1,
                 log_commands: bool = False) -> None:
        if bus.is_spi:
            raise ConfigError("host driver linux-mmc drives SD mode (sd1/sd4), not SPI")
        super().__init__(host, bus, card, clock, seed=seed, log_commands=log_commands)
        #: every request is a command queue task
        self.queued = host.cmdq and card.cmdq
        self._max_blocks = host.max_request_bytes // SECTOR

    def _pieces(self, lba: int, count: int) -> Sequence[tuple[int, int]]:
        """The block layer's split of a request at max_sectors: (first sector, sectors) of each piece."""
        step = self._max_blocks
        if 0 < count <= step:  # one piece: most requests (a fit replays a million 4 KiB writes)
            return ((lba, count),)
        return [(lba + first, min(step, count - first)) for first in range(0, count, step)]

    def _sbc(self, kind: str) -> bool:
        """Whether a multi-block ``kind`` ("read", "write") transfer is preceded by CMD23."""
        use = self.host.cmd23
        return self.profile.cmd23 and (use == "all" or (use == "reads" and kind == "read"))

    def _charged(self, key: tuple[Any, ...], run: Callable[[int, int], Any], lba: int, count: int) -> None:
        """``run(lba, count)``, a request's fixed part (host, bus and the card's fixed times), charged at its
        recorded cost where no command log is kept; step by step otherwise."""
        if self.log is not None:
            run(lba, count)
            return
        self.vclock.charge(self._recorded_cost(key, run, 0, count))

    def _bus_command(self, name: str, arg: int, response: str = "R1") -> None:
        """A command the controller sends within a request: bus time, no software transaction."""
        t0 = self._command(name, arg, response, transaction=False)
        self._event(t0, name, arg)

    def _task(self, name: str, lba: int, count: int) -> int:
        """CMD44 and CMD45 queue the task, CMD13 (task status) finds it ready, then ``name`` (CMD46/CMD47)
        starts it; returns the start of ``name``."""
        write = name == "CMD47"
        self._bus_command("CMD44", (1 << 30 if write else 0) | count)  # direction, task 0, block count
        self._bus_command("CMD45", lba)
        self._bus_command("CMD13", self._rca_arg | 1 << 15)  # SEND_TASK_STATUS: the queue status register
        return self._command(name, 0, transaction=False)

    def _start(self, kind: str, lba: int, count: int) -> tuple[int, str, bool]:
        """A request's software cost and its commands up to the data: a task's (CMD44, CMD45, CMD13, then CMD46
        or CMD47), or CMD23 where it is sent and CMD17/CMD18 (``kind`` "read") or CMD24/CMD25 ("write").
        Returns the start of the data command, its name, and whether CMD12 must stop the transfer."""
        self._sw(self.host.call_cycles, "call_cycles")
        if self.queued:
            name = "CMD46" if kind == "read" else "CMD47"
            return self._task(name, lba, count), name, False
        multi = count > 1
        sbc = multi and self._sbc(kind)
        if sbc:
            self._bus_command("CMD23", count)
        name = {"read": ("CMD17", "CMD18"), "write": ("CMD24", "CMD25")}[kind][multi]
        return self._command(name, lba, transaction=False), name, multi and not sbc

    def _end(self, t0: int, name: str, lba: int, count: int, stop: bool) -> None:
        self._event(t0, name, lba, count * SECTOR)
        if stop:
            self._bus_command("CMD12", 0, "R1b")

    # ---- reads ---------------------------------------------------------------------------------------------
    def _read_time(self, lba: int, count: int, buf_addr: int) -> None:
        for first, n in self._pieces(lba, count):
            self._charged(("linux-read", n), self._read_request, first, n)
            if self._boundaries:
                self._boundary(first, n)
        return None  # recorded as a request of its own (sdbench.ledger replays it through this method)

    def _read_request(self, lba: int, count: int) -> None:
        t0, name, stop = self._start("read", lba, count)
        self._spend(self.card.read_access_ns(), "card", "sd.card.read_access_us")
        self._spend(count * self.bus.read_block_ns(), "bus", BUS)
        if count > 1:
            self._spend((count - 1) * self.card.read_block_gap_ns(), "card", "sd.card.read_block_gap_us")
        self._end(t0, name, lba, count, stop)

    # ---- writes --------------------------------------------------------------------------------------------
    def _write_time(self, lba: int, count: int, buf_addr: int, multi_entry: bool | None = None) -> None:
        for first, n in self._pieces(lba, count):
            self._charged(("linux-write", n), self._write_request, first, n)
            self._write_busy(first, n)

    def _write_request(self, lba: int, count: int) -> None:
        """A write up to the card's busy after its last block."""
        t0, name, stop = self._start("write", lba, count)
        self._spend(count * self.bus.write_block_ns(), "bus", BUS)
        if count > 1:  # the controller holds each next block while the card signals busy on DAT0
            self._spend((count - 1) * self.card.write_block_busy_ns(True), "card", "sd.card.write_busy_block_us")
        self._end(t0, name, lba, count, stop)

    def _write_busy(self, lba: int, count: int) -> None:
        """The card's busy after the write, watched on DAT0 by the controller, then the block driver's CMD13."""
        busy = self.card.write_done_busy_ns(lba, count, SECTOR, count > 1)
        self._spend(busy, "card", "")
        if not self._replaying:  # a replay reads the clock's time alone, not its ledger
            self.vclock.attribute(self.card.busy_parts)
        if not self.queued:
            self._charged(("linux-status",), self._status_request, 0, 0)

    def _status_request(self, lba: int, count: int) -> None:
        """CMD13 in a request of its own: the card is ready, one poll."""
        t0 = self._command("CMD13", self._rca_arg)
        self._event(t0, "CMD13", self._rca_arg)
