"""flatfs: a flat filesystem small enough to read in one sitting, as an example of a FileSystem plugin.

On-disk layout, in *blocks* of the device's read/program unit (one 512-byte sector on SD cards)::

    block 0            superblock: magic, block size, table geometry, volume size
    blocks 1 .. T      the file table: max_files fixed-size entries (name, first block, length in bytes)
    blocks T+1 ..      file data; each file is one contiguous run of blocks

There are no directories: every file is ``/name``.  A file's first write takes the first free run of
blocks that holds it (first fit).  A file that grows into its neighbour moves to the first free run
that holds it whole (the copy goes to a run disjoint from the old one).  The table entry of a file is
written when the file is created or truncated, when it is removed, and when it is closed after
writing; the rest of the table is never rewritten.

Not a real filesystem: no power-loss safety, no wear levelling, whole table in memory.  It exists to
show what sdbench asks of a filesystem: subclass :class:`sdbench.fs.base.FileSystem` and
:class:`sdbench.fs.base.File`, declare the options with ``opt()``, and pass
:class:`sdbench.testing.FileSystemSuite`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from sdbench.errors import ConfigError, FileSystemError
from sdbench.fs.base import SEEK_CUR, SEEK_END, SEEK_SET, File, FileStat, FileSystem
from sdbench.media.base import BlockDevice
from sdbench.options import opt

MAGIC = b"FLATFS01"
SUPERBLOCK = struct.Struct("<8sIIIQQ")  # magic, block_bytes, max_files, name_bytes, table_blocks, volume_blocks
COPY_BLOCKS = 128                       # blocks moved per request when a file moves


@dataclass(frozen=True)
class FlatFsConfig:
    max_files: int = opt(64, unit="files", min=1, max=65536, help="entries of the file table (fixed at format)")
    name_bytes: int = opt(32, unit="B", min=4, max=255, help="longest file name, in UTF-8 bytes (fixed at format)")
    volume_bytes: int = opt(0, unit="B", min=0, help="bytes used from the start of the device; 0 = all of it")


@dataclass
class _Entry:
    slot: int     # index in the file table
    name: str
    start: int    # first data block (meaningless while length is 0)
    length: int   # bytes


class FlatFile(File):
    def __init__(self, fs: "FlatFs", path: str, mode: str, entry: _Entry) -> None:
        super().__init__(fs, path, mode)
        self._fs, self._entry, self._pos, self._dirty = fs, entry, 0, False

    def read(self, size: int = -1, *, buf_addr: int = 0) -> bytes:
        self._check_open()
        e, B = self._entry, self._fs.block_bytes
        n = e.length - self._pos if size is None or size < 0 else min(size, e.length - self._pos)
        if n <= 0:
            return b""
        first, last = self._pos // B, -(-(self._pos + n) // B)
        raw = self._fs._read_blocks(e.start + first, last - first)
        off = self._pos - first * B
        self._pos += n
        return bytes(raw[off:off + n])

    def write(self, data: bytes, *, buf_addr: int = 0) -> int:
        self._check_open()
        if self.mode == "r":
            raise FileSystemError(f"{self.path}: opened for reading only")
        fs, e, B = self._fs, self._entry, self._fs.block_bytes
        if self.mode == "a":
            self._pos = e.length
        if not data:
            return 0
        count = len(data)
        if self._pos > e.length:  # written past the end: the gap reads back as zeros
            data, self._pos = bytes(self._pos - e.length) + bytes(data), e.length
        end = self._pos + len(data)
        fs._make_room(e, max(end, e.length))
        # one device write of whole blocks: keep the old bytes around the new ones in the first and last block
        first, last = self._pos // B, -(-end // B)
        old: dict[int, bytes] = {}

        def old_block(b: int) -> bytes:
            if b not in old:
                old[b] = fs._read_blocks(e.start + b, 1) if b * B < e.length else bytes(B)
            return old[b]

        head, tail = self._pos - first * B, last * B - end
        buf = (old_block(first)[:head] if head else b"") + bytes(data)
        buf += old_block(last - 1)[B - tail:] if tail else b""
        fs._write_blocks(e.start + first, buf)
        e.length = max(e.length, end)
        self._pos = end
        self._dirty = True
        return count

    def seek(self, offset: int, whence: int = SEEK_SET) -> int:
        self._check_open()
        base = {SEEK_SET: 0, SEEK_CUR: self._pos, SEEK_END: self._entry.length}[whence]
        if base + offset < 0:
            raise FileSystemError(f"{self.path}: seek before the start of the file")
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def _close(self) -> None:
        if self._dirty and self._fs._slots.get(self._entry.slot) is self._entry:  # not removed meanwhile
            self._fs._write_entry(self._entry)

    def _check_open(self) -> None:
        if self.closed:
            raise FileSystemError(f"{self.path}: file is closed")


class FlatFs(FileSystem):
    """A flat filesystem over any block device that rewrites blocks in place (SD cards, images, RAM)."""

    kind = "flatfs"

    def __init__(self, device: BlockDevice, cfg: FlatFsConfig | None = None) -> None:
        super().__init__(device)
        self.cfg = cfg or FlatFsConfig()
        g = device.geometry
        self.block_bytes = max(g.read_size, g.prog_size)
        self._sectors_per_block = self.block_bytes // g.sector_size
        if g.erase_value is not None and g.erase_size > self.block_bytes:
            raise ConfigError(f"flatfs rewrites blocks in place; this device erases {g.erase_size} B units before "
                              f"programming (NOR flash): use a filesystem for flash")
        self._files: dict[str, _Entry] = {}
        self._slots: dict[int, _Entry] = {}

    # ---- layout -----------------------------------------------------------------------------------
    def _layout(self, max_files: int, name_bytes: int) -> None:
        self._entry = struct.Struct(f"<{name_bytes}sQQ")
        self.max_files, self.name_bytes = max_files, name_bytes
        self.table_blocks = -(-max_files * self._entry.size // self.block_bytes)
        self.data_start = 1 + self.table_blocks

    def _read_blocks(self, block: int, count: int) -> bytes:
        return self.device.read(block * self._sectors_per_block, count * self._sectors_per_block)

    def _write_blocks(self, block: int, data: bytes) -> None:
        self.device.write(block * self._sectors_per_block, data)

    # ---- FileSystem primitives --------------------------------------------------------------------
    def _format(self) -> None:
        cfg, device_bytes = self.cfg, self.device.geometry.size_bytes
        if cfg.volume_bytes > device_bytes:
            raise ConfigError(f"flatfs volume_bytes = {cfg.volume_bytes} B is larger than the {device_bytes} B device")
        volume_blocks = (cfg.volume_bytes or device_bytes) // self.block_bytes
        self._layout(cfg.max_files, cfg.name_bytes)
        if volume_blocks <= self.data_start:
            raise ConfigError(f"flatfs: {volume_blocks} blocks of {self.block_bytes} B hold no data after the "
                              f"{self.table_blocks}-block table of {cfg.max_files} files")
        sb = SUPERBLOCK.pack(MAGIC, self.block_bytes, cfg.max_files, cfg.name_bytes, self.table_blocks, volume_blocks)
        self._write_blocks(0, sb.ljust(self.block_bytes, b"\0"))
        self._write_blocks(1, bytes(self.table_blocks * self.block_bytes))

    def _mount(self) -> None:
        raw = self._read_blocks(0, 1)
        magic, block_bytes, max_files, name_bytes, table_blocks, volume_blocks = SUPERBLOCK.unpack_from(raw)
        if magic != MAGIC:
            raise FileSystemError("no flatfs volume on this device (format it first)")
        if block_bytes != self.block_bytes:
            raise FileSystemError(f"flatfs volume made with {block_bytes} B blocks; this device reads and "
                                  f"programs {self.block_bytes} B")
        self._layout(max_files, name_bytes)
        self.volume_blocks = volume_blocks
        self._table = bytearray(self._read_blocks(1, table_blocks))
        self._files, self._slots = {}, {}
        for slot in range(max_files):
            name, start, length = self._entry.unpack_from(self._table, slot * self._entry.size)
            if name[0]:
                e = _Entry(slot, name.rstrip(b"\0").decode(), start, length)
                self._files[e.name], self._slots[slot] = e, e

    def _unmount(self) -> None:
        self._files, self._slots = {}, {}

    def _open(self, path: str, mode: str) -> File:
        name = self._name(path)
        e = self._files.get(name)
        if e is None:
            if mode in ("r", "r+"):
                raise FileSystemError(f"no such file: {path}")
            e = self._create(name)
        elif mode == "w" and e.length:
            e.length = 0
            self._write_entry(e)
        return FlatFile(self, path, mode, e)

    def _stat(self, path: str) -> FileStat:
        if path == "/":
            return FileStat("/", 0, is_dir=True)
        e = self._files.get(self._name(path))
        if e is None:
            raise FileSystemError(f"no such file: {path}")
        return FileStat(path, e.length)

    def _remove(self, path: str) -> None:
        e = self._files.pop(self._name(path), None)
        if e is None:
            raise FileSystemError(f"no such file: {path}")
        del self._slots[e.slot]
        self._write_entry(_Entry(e.slot, "", 0, 0))

    def _listdir(self, path: str) -> list[str]:
        if path != "/":
            raise FileSystemError(f"flatfs has no directories: {path}")
        return list(self._files)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "block_bytes": self.block_bytes, "max_files": self.cfg.max_files,
                "name_bytes": self.cfg.name_bytes, "volume_bytes": self.cfg.volume_bytes}

    # ---- table and allocation ---------------------------------------------------------------------
    def _name(self, path: str) -> str:
        name = path[1:]
        if not name:
            raise FileSystemError("/ is the root, not a file")
        if "/" in name:
            raise FileSystemError(f"flatfs has no directories: {path}")
        if "\0" in name or len(name.encode()) > self.name_bytes:
            raise FileSystemError(f"file name {name!r:.60} is not {self.name_bytes} B of UTF-8 or fewer")
        return name

    def _create(self, name: str) -> _Entry:
        slot = next((s for s in range(self.max_files) if s not in self._slots), None)
        if slot is None:
            raise FileSystemError(f"flatfs: the file table is full ({self.max_files} files)")
        e = self._files[name] = self._slots[slot] = _Entry(slot, name, 0, 0)
        self._write_entry(e)
        return e

    def _write_entry(self, e: _Entry) -> None:
        """Patch entry ``e`` into the table and write the blocks that hold it."""
        size, B = self._entry.size, self.block_bytes
        self._entry.pack_into(self._table, e.slot * size, e.name.encode(), e.start, e.length)
        first, last = e.slot * size // B, -(-(e.slot + 1) * size // B)
        self._write_blocks(1 + first, bytes(self._table[first * B:last * B]))

    def _is_free(self, start: int, count: int, owner: _Entry) -> bool:
        if start < self.data_start or start + count > self.volume_blocks:
            return False
        for o in self._slots.values():
            if o is not owner and o.length and o.start < start + count and start < o.start + self._blocks(o.length):
                return False
        return True

    def _blocks(self, nbytes: int) -> int:
        return -(-nbytes // self.block_bytes)

    def _make_room(self, e: _Entry, length: int) -> None:
        """Make ``e``'s run of blocks hold ``length`` bytes: grow it in place, or move it (first fit)."""
        have, need = self._blocks(e.length), self._blocks(length)
        if need <= have or (e.length and self._is_free(e.start + have, need - have, e)):
            return
        start = self.data_start
        for o in sorted((o for o in self._slots.values() if o.length), key=lambda o: o.start):
            if o.start - start >= need:  # a gap before o holds it (o may be e itself: the runs stay disjoint)
                break
            start = max(start, o.start + self._blocks(o.length))
        if start + need > self.volume_blocks:
            raise FileSystemError(f"flatfs: no free run of {need} blocks for {e.name} ({length} B): the volume is full "
                                  f"or too fragmented")
        for i in range(0, have, COPY_BLOCKS):
            self._write_blocks(start + i, self._read_blocks(e.start + i, min(COPY_BLOCKS, have - i)))
        e.start = start
        if have:
            self._write_entry(e)  # the table points at the new run before the old one is reused
