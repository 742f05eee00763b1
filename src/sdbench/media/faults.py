"""A fault-injecting pass-through: power cuts, torn writes, bit flips and bad sectors, as SQLite's test VFS and
littlefs's emulated block device (its power-cycles knob) inject them.

Only operations that change the medium count towards a power cut: writes, erases and trims (``ops`` after a
workload says how many cut points it has).  At the cut operation the medium keeps what a real one may keep:

* a write programs a prefix of its sectors (``torn_sectors``; -1 draws it from the seed: anything from none
  to all but the last), in whole program units;
* an erase erases a prefix of its range in whole erase units, the same way; a trim is dropped.

Then the power is off: every call, reads too, raises :class:`PowerCut` until :meth:`FaultDevice.power_on`,
so nothing issued after the cut reaches the medium whoever catches the error.  What sits *above* this
wrapper (a block cache, a bridge's buffer) and was not written is lost with it.

``volatile_sectors`` models a card that acknowledges writes from a volatile cache and does not empty it
when the host syncs: at a cut, the newest that many sectors written return to what they held before
(their old contents are read through the device when written, so a simulated card charges that time).
Reads may flip one bit per sector with ``bitflip_probability`` (seeded), and ``bad_sectors`` fail every
read or write that touches them, as a card reports an error.
"""
from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..options import opt, to_mapping
from .base import BlockDevice, BlockDeviceError, BlockDeviceWrapper


class PowerCut(BlockDeviceError):
    """The power was cut: the operation did not complete, and the device is off until powered on."""


@dataclass(frozen=True)
class FaultConfig:
    cut_at_op: int = opt(0, unit="ops", min=0,
                         help="cut the power during this write, erase or trim (1 = the first); 0 = never")
    torn_sectors: int = opt(-1, unit="sectors", min=-1, help="sectors of the cut write or erase that reach the "
                                                              "medium; -1 = drawn from the seed")
    bitflip_probability: float = opt(0.0, min=0.0, max=1.0, help="chance per sector read of one flipped bit")
    bad_sectors: tuple[int, ...] = opt(factory=tuple, unit="LBA", help="sectors whose reads and writes fail (a "
                                                                         "card's reported error)")
    volatile_sectors: int = opt(0, unit="sectors", min=0, max=1 << 20,
                                help="the medium acknowledges writes from a volatile cache of this many sectors "
                                     "that sync does not flush; a cut loses them")
    seed: int = opt(1, help="seed of torn lengths and bit flips")


class FaultDevice(BlockDeviceWrapper):
    """``inner`` with the faults of ``config``; with the default config, a plain pass-through."""

    kind = "faults"

    def __init__(self, inner: BlockDevice, config: FaultConfig | None = None) -> None:
        super().__init__(inner)
        self.config = config or FaultConfig()
        self._rng = random.Random(f"faults:{self.config.seed}")
        self._bad = frozenset(self.config.bad_sectors)
        self.ops = 0             # writes, erases and trims issued so far (the cut points of a workload)
        self.powered = True
        self.cut: dict[str, Any] | None = None   # what the cut operation was and how much of it landed
        self.bitflips = 0
        self._volatile: deque[tuple[int, bytes]] = deque()   # (sector, what it held before), oldest first
        self.volatile_lost = 0   # sectors a cut returned to their old contents

    # ---- power -------------------------------------------------------------------------
    def power_on(self) -> None:
        """Power comes back: the device answers again (no further cut unless ``cut_at_op`` is ahead)."""
        self.powered = True

    def _check_power(self) -> None:
        if not self.powered:
            raise PowerCut(f"{self.kind}: the power is off (cut during operation {self.config.cut_at_op})")

    def _change(self) -> bool:
        """Count a medium-changing operation; True when the power is cut during it."""
        self._check_power()
        self.ops += 1
        return self.ops == self.config.cut_at_op

    def _torn(self, count: int, unit: int) -> int:
        """Sectors of a cut operation of ``count`` sectors that land, in whole ``unit``s."""
        units = count // unit
        k = self.config.torn_sectors // unit if self.config.torn_sectors >= 0 else self._rng.randrange(units)
        return min(k, units) * unit

    def _power_off(self, what: str, lba: int, count: int, landed: int) -> None:
        # the card's volatile cache is gone: newest first, so a sector written twice ends as it was before both
        while self._volatile:
            sector, old = self._volatile.pop()
            self.inner.write(sector, old)
            self.volatile_lost += 1
        self.powered = False
        self.cut = {"op": self.ops, "what": what, "lba": lba, "sectors": count, "landed_sectors": landed}
        raise PowerCut(f"{self.kind}: power cut during {what} of {count} sector(s) at LBA {lba} (operation "
                       f"{self.ops}); {landed} sector(s) landed")

    def _check_bad(self, what: str, lba: int, count: int) -> None:
        if self._bad and any(s in self._bad for s in range(lba, lba + count)):
            raise BlockDeviceError(f"{self.kind}: {what} of sectors {lba}..{lba + count - 1} failed (bad sector)")

    # ---- primitives --------------------------------------------------------------------
    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        self._check_power()
        self._check_bad("read", lba, count)
        data = self.inner.read(lba, count, buf_addr=buf_addr)
        p = self.config.bitflip_probability
        if not p:
            return data
        out = bytearray(data)
        ss = self.geometry.sector_size
        for i in range(count):
            if self._rng.random() < p:
                bit = self._rng.randrange(ss * 8)
                out[i * ss + bit // 8] ^= 1 << (bit % 8)
                self.bitflips += 1
        return bytes(out)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        ss = self.geometry.sector_size
        count = len(data) // ss
        cut = self._change()
        self._check_bad("write", lba, count)
        if not cut:
            if self.config.volatile_sectors:
                old = self.inner.read(lba, count)
                self._volatile.extend((lba + i, old[i * ss:(i + 1) * ss]) for i in range(count))
                while len(self._volatile) > self.config.volatile_sectors:
                    self._volatile.popleft()   # written through to the flash for good
            self.inner.write(lba, data, buf_addr=buf_addr)
            return
        landed = self._torn(count, self.geometry.prog_size // ss)
        if landed:
            self.inner.write(lba, data[:landed * ss], buf_addr=buf_addr)
        self._power_off("write", lba, count, landed)

    def _erase(self, lba: int, count: int) -> None:
        if not self._change():
            self.inner.erase(lba, count)
            return
        landed = self._torn(count, self.geometry.erase_size // self.geometry.sector_size)
        if landed:
            self.inner.erase(lba, landed)
        self._power_off("erase", lba, count, landed)

    def _trim(self, lba: int, count: int) -> None:
        if not self._change():
            self.inner.trim(lba, count)
            return
        self._power_off("trim", lba, count, 0)

    def _sync(self) -> None:
        self._check_power()
        self.inner.sync()

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d["faults"] = to_mapping(self.config)
        return d
