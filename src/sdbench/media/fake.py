"""A counterfeit card: announces more capacity than its flash holds.

:class:`FakeCardDevice` wraps a real BlockDevice (``inner``: the flash that is
really there) and announces ``announced_bytes``.  Inside the real size it is
the inner device; past it, it does what fake cards do (f3's taxonomy):

* ``"wrap"``: the controller ignores high address bits, so LBA ``x`` lands on
  ``x mod real_sectors`` and overwrites low data (aliasing);
* ``"drop"``: writes past the real size are lost; reads there return zeros
  (``drop_reads="zeros"``) or unchanged old garbage (``drop_reads="old"``);
* ``"error"``: reads and writes past the real size fail with an I/O error.

Used by the capacity probe's tests (``sdbench capacity``), without root.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from .base import BlockDevice, BlockDeviceError, BlockDeviceWrapper

MODES = ("wrap", "drop", "error")


class FakeCardDevice(BlockDeviceWrapper):
    kind = "fakecard"

    def __init__(self, inner: BlockDevice, announced_bytes: int, mode: str = "wrap", *,
                 drop_reads: str = "zeros") -> None:
        if mode not in MODES:
            raise ValueError(f"fake card mode {mode!r} is not one of {', '.join(MODES)}")
        if drop_reads not in ("zeros", "old"):
            raise ValueError("drop_reads must be 'zeros' or 'old'")
        g = inner.geometry
        if announced_bytes % g.sector_size or announced_bytes < g.size_bytes:
            raise ValueError(f"announced size {announced_bytes} B must be a multiple of the {g.sector_size}-byte "
                             f"sector and at least the real size {g.size_bytes} B")
        super().__init__(inner, replace(g, sector_count=announced_bytes // g.sector_size))
        self.mode = mode
        self.drop_reads = drop_reads
        self.real_sectors = g.sector_count

    # ---- address mapping ------------------------------------------------------------
    def _segments(self, lba: int, count: int) -> Iterator[tuple[int, int, bool]]:
        """(lba, count, inside) pieces of [lba, lba+count) that do not cross a multiple of the real size."""
        r = self.real_sectors
        end = lba + count
        while lba < end:
            n = min(end, (lba // r + 1) * r) - lba
            yield lba, n, lba < r
            lba += n

    def _beyond(self, what: str, lba: int, n: int) -> None:
        raise BlockDeviceError(f"{self.kind}: I/O error: {what} of sectors {lba}..{lba + n - 1} (past the real "
                               f"{self.real_sectors} sectors)")

    def _old(self, lba: int, n: int) -> bytes:
        ss = self.geometry.sector_size
        out = bytearray()
        for s in range(lba, lba + n):
            seed = hashlib.blake2b(s.to_bytes(8, "little"), digest_size=32).digest()
            out += (seed * (ss // 32 + 1))[:ss]
        return bytes(out)

    # ---- primitives -----------------------------------------------------------------
    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        out = bytearray()
        ss = self.geometry.sector_size
        for s, n, inside in self._segments(lba, count):
            if inside or self.mode == "wrap":
                out += self.inner.read(s % self.real_sectors, n, buf_addr=buf_addr)
            elif self.mode == "error":
                self._beyond("read", s, n)
            else:
                out += bytes(n * ss) if self.drop_reads == "zeros" else self._old(s, n)
        return bytes(out)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        ss = self.geometry.sector_size
        pos = 0
        for s, n, inside in self._segments(lba, len(data) // ss):
            piece = data[pos:pos + n * ss]
            pos += n * ss
            if inside or self.mode == "wrap":
                self.inner.write(s % self.real_sectors, piece, buf_addr=buf_addr)
            elif self.mode == "error":
                self._beyond("write", s, n)
            # drop: lost

    def _erase(self, lba: int, count: int) -> None:
        for s, n, inside in self._segments(lba, count):
            if inside or self.mode == "wrap":
                self.inner.erase(s % self.real_sectors, n)
            elif self.mode == "error":
                self._beyond("erase", s, n)

    def _trim(self, lba: int, count: int) -> None:
        for s, n, inside in self._segments(lba, count):
            if inside or self.mode == "wrap":
                self.inner.trim(s % self.real_sectors, n)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update({"mode": self.mode, "real_bytes": self.real_sectors * self.geometry.sector_size})
        return d
