"""A sparse in-memory block device: only written chunks take memory.

A 64 GB card image costs nothing until sectors are written; unwritten sectors
read back as ``fill`` (the erase value, or 0x00).
"""
from __future__ import annotations

from typing import Any

from ..clock import Clock
from .base import BlockDevice, Geometry

CHUNK_BYTES = 64 * 1024  # allocation unit of the sparse store


class MemoryDevice(BlockDevice):
    kind = "memory"

    def __init__(self, geometry: Geometry, clock: Clock | None = None, *, read_only: bool = False,
                 program_and: bool = False) -> None:
        super().__init__(geometry, clock, read_only=read_only)
        #: NOR semantics: a program can only clear bits (new = old & data)
        self.program_and = program_and
        fill = geometry.erase_value
        self._fill = 0 if fill is None else fill
        #: written chunks, each a view of its own bytearray (a view's slice copies out once, a bytearray's twice)
        self._chunks: dict[int, memoryview] = {}
        self._fill_chunk = memoryview(bytes([self._fill]) * CHUNK_BYTES)

    @classmethod
    def of_size(cls, size_bytes: int, sector_size: int = 512, **kw: Any) -> "MemoryDevice":
        return cls(Geometry(sector_size=sector_size, sector_count=size_bytes // sector_size), **kw)

    @property
    def allocated_bytes(self) -> int:
        return len(self._chunks) * CHUNK_BYTES

    def snapshot(self) -> dict[int, bytes]:
        """The store's contents, to :meth:`restore` later (a power-loss run restarts from a formatted medium)."""
        return {ci: bytes(chunk) for ci, chunk in self._chunks.items()}

    def restore(self, snap: dict[int, bytes]) -> None:
        """Contents as :meth:`snapshot` took them (no stats, no checks)."""
        self._chunks.clear()  # in place: see chunk_map
        self._chunks.update((ci, memoryview(bytearray(chunk))) for ci, chunk in snap.items())

    def chunk_map(self) -> dict[int, memoryview]:
        """The written chunks by index (CHUNK_BYTES each), the same mapping for the store's life, to be read only:
        for a reader inlined in a simulated driver's fused path (an unwritten chunk is absent: it reads as the
        fill, which :meth:`read_bytes` gives)."""
        return self._chunks

    def read_bytes(self, offset: int, size: int) -> bytes:
        """Byte-addressed read of the backing store (no stats, no checks)."""
        # within one chunk: one slice (operators, not divmod: a simulated card's reads come here a million times)
        co = offset % CHUNK_BYTES
        if co + size <= CHUNK_BYTES:
            chunk = self._chunks.get(offset // CHUNK_BYTES)
            return chunk[co:co + size].tobytes() if chunk is not None else bytes([self._fill]) * size
        out = bytearray()
        while size > 0:
            ci, co = divmod(offset, CHUNK_BYTES)
            n = min(size, CHUNK_BYTES - co)
            chunk = self._chunks.get(ci)
            out += chunk[co:co + n] if chunk is not None else bytes([self._fill]) * n
            offset += n
            size -= n
        return bytes(out)

    def write_bytes(self, offset: int, data: bytes) -> None:
        """Byte-addressed overwrite of the backing store (no stats, no checks)."""
        n = len(data)
        co = offset % CHUNK_BYTES
        if co + n <= CHUNK_BYTES:  # within one chunk (a simulated card's usual write): no slice of the data
            self._chunk(offset // CHUNK_BYTES)[co:co + n] = data
            return
        pos = 0
        while pos < n:
            ci, co = divmod(offset + pos, CHUNK_BYTES)
            k = min(n - pos, CHUNK_BYTES - co)
            self._chunk(ci)[co:co + k] = data[pos:pos + k]
            pos += k

    def _chunk(self, ci: int) -> memoryview:
        """Chunk ``ci``, made (as the fill value) if it was never written."""
        chunk = self._chunks.get(ci)
        if chunk is None:
            chunk = self._chunks[ci] = memoryview(bytearray(self._fill_chunk))
        return chunk

    def erase_bytes(self, offset: int, size: int) -> None:
        """Byte-addressed erase of the backing store to the fill value (no stats, no checks).  Whole chunks are
        dropped and chunks never written are left alone (they read as the fill value), so erasing a card stays
        cheap."""
        end = offset + size
        chunks = self._chunks
        while offset < end:
            ci, co = divmod(offset, CHUNK_BYTES)
            if co == 0 and end - offset >= CHUNK_BYTES:  # whole chunks
                last = end // CHUNK_BYTES
                if last - ci > len(chunks):
                    for k in [k for k in chunks if ci <= k < last]:
                        del chunks[k]
                else:
                    for k in range(ci, last):
                        chunks.pop(k, None)
                offset = last * CHUNK_BYTES
                continue
            n = min(end - offset, CHUNK_BYTES - co)
            chunk = chunks.get(ci)
            if chunk is not None:
                chunk[co:co + n] = self._fill_chunk[:n]
            offset += n

    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        ss = self.geometry.sector_size
        return self.read_bytes(lba * ss, count * ss)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        off = lba * self.geometry.sector_size
        if self.program_and:
            old = self.read_bytes(off, len(data))
            data = (int.from_bytes(old, "little") & int.from_bytes(data, "little")).to_bytes(len(data), "little")
        self.write_bytes(off, data)

    def _erase(self, lba: int, count: int) -> None:
        ss = self.geometry.sector_size
        self.erase_bytes(lba * ss, count * ss)
