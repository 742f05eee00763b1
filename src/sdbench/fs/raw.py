"""Raw access (no filesystem) for sector-level protocols.

A :class:`RawVolume` moves whole sectors between a caller's buffer and the
device in one op per call, as ``sdmmc_read_sectors``/``sdmmc_write_sectors``
or ``wl_read``/``wl_write`` do on a target.
"""
from __future__ import annotations

from typing import Any

from ..errors import SdbenchError
from ..media.base import BlockDevice


class RawVolume:
    kind = "raw"

    def __init__(self, device: BlockDevice) -> None:
        self.device = device

    def _lba(self, offset_bytes: int, size_bytes: int) -> tuple[int, int]:
        ss = self.device.geometry.sector_size
        if offset_bytes % ss or size_bytes % ss:
            raise SdbenchError(f"raw access must be in whole {ss}-byte sectors (offset {offset_bytes}, "
                               f"size {size_bytes})")
        return offset_bytes // ss, size_bytes // ss

    def write(self, offset_bytes: int, data: bytes, *, buf_addr: int = 0) -> None:
        lba, _ = self._lba(offset_bytes, len(data))
        self.device.write(lba, data, buf_addr=buf_addr)

    def read(self, offset_bytes: int, size_bytes: int, *, buf_addr: int = 0) -> bytes:
        lba, count = self._lba(offset_bytes, size_bytes)
        return self.device.read(lba, count, buf_addr=buf_addr)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind}
