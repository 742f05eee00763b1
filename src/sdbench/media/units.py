"""A byte-addressed device (NOR flash) seen in units of several bytes.

A block cache holds whole sectors of the device below it; on a NOR partition, whose sectors are bytes, that
would be one byte per cache block. :class:`UnitView` groups the bytes into units (e.g. littlefs's program
size), so a cache in front of it holds what the filesystem reads and programs at a time.
"""
from __future__ import annotations

from .base import BlockDevice, BlockDeviceWrapper, Geometry


class UnitView(BlockDeviceWrapper):
    """``inner`` (1-byte sectors) in sectors of ``unit_bytes``; its erase unit stays (a multiple of the unit)."""

    kind = "unit-view"

    def __init__(self, inner: BlockDevice, unit_bytes: int) -> None:
        g = inner.geometry
        if g.sector_size != 1:
            raise ValueError(f"a unit view goes over a byte-addressed device, not {g.sector_size}-byte sectors")
        if unit_bytes < 1 or g.erase_size % unit_bytes or g.sector_count % unit_bytes:
            raise ValueError(f"{unit_bytes}-byte units do not divide the device's {g.erase_size} B erase unit and "
                             f"{g.sector_count} B")
        self.unit = unit_bytes
        super().__init__(inner, Geometry(sector_size=unit_bytes, sector_count=g.sector_count // unit_bytes,
                                         erase_size=g.erase_size, erase_value=g.erase_value))

    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        return self.inner.read(lba * self.unit, count * self.unit, buf_addr=buf_addr)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        self.inner.write(lba * self.unit, data, buf_addr=buf_addr)

    def _erase(self, lba: int, count: int) -> None:
        self.inner.erase(lba * self.unit, count * self.unit)

    def _trim(self, lba: int, count: int) -> None:
        self.inner.trim(lba * self.unit, count * self.unit)
