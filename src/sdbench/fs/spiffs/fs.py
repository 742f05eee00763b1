"""SpiffsFileSystem: the FileSystem interface over :mod:`.core`, as ESP-IDF's VFS drives SPIFFS."""
from __future__ import annotations

import struct
from typing import Any

from ...errors import ConfigError, FileSystemError
from ...media.base import BlockDevice
from ...options import to_mapping
from ..base import SEEK_CUR, SEEK_END, SEEK_SET, File, FileStat, FileSystem
from . import core as C
from .config import SpiffsConfig
from .errors import SpiffsError

# ESP-IDF vfs_spiffs open(): O_RDONLY, O_RDWR, O_CREAT|O_TRUNC, O_APPEND -> SPIFFS flags
_MODE_FLAGS = {
    "r": C.O_RDONLY,
    "r+": C.O_RDWR,
    "w": C.O_RDWR | C.O_CREAT | C.O_TRUNC,
    "a": C.O_RDWR | C.O_CREAT | C.O_APPEND,
}
_WHENCE = {SEEK_SET: C.SEEK_SET, SEEK_CUR: C.SEEK_CUR, SEEK_END: C.SEEK_END}


class SpiffsFile(File):
    """An open SPIFFS file (a descriptor of the C API)."""

    def __init__(self, fs: "SpiffsFileSystem", path: str, mode: str, fh: int) -> None:
        super().__init__(fs, path, mode)
        self._fs = fs
        self._fh = fh
        self._serial = fs.core.fds[fh - 1].serial
        self._mount_gen = fs._mount_gen

    def _live(self) -> bool:
        fs = self._fs
        if not fs.mounted or fs._mount_gen != self._mount_gen:
            return False
        fd = fs.core.fds[self._fh - 1]
        return fd.file_nbr == self._fh and fd.serial == self._serial

    def _check(self) -> None:
        if self.closed:
            raise FileSystemError(f"spiffs: {self.path} is closed")
        if not self._live():
            raise SpiffsError("FILE_CLOSED", self.path)

    def read(self, size: int = -1, *, buf_addr: int = 0) -> bytes:
        """SPIFFS_read of ``size`` bytes; ``-1`` reads to the end of the file."""
        self._check()
        core = self._fs.core
        if size is None or size < 0:
            core._flush_unchecked(self._fh)
            fd = core.fds[self._fh - 1]
            total = 0 if fd.size == C.UNDEFINED_LEN else fd.size
            size = max(0, total - fd.fdoffset)
            if size == 0:
                return b""
        return core.read(self._fh, size)

    def write(self, data: bytes, *, buf_addr: int = 0) -> int:
        self._check()
        return self._fs.core.write(self._fh, bytes(data))

    def seek(self, offset: int, whence: int = SEEK_SET) -> int:
        """SPIFFS_lseek; SPIFFS cannot seek past the end of a file (FileSystemError)."""
        self._check()
        if whence not in _WHENCE:
            raise FileSystemError(f"spiffs: bad whence {whence}")
        return self._fs.core.lseek(self._fh, offset, _WHENCE[whence])

    def tell(self) -> int:
        self._check()
        return self._fs.core.tell(self._fh)

    def flush(self) -> None:
        """SPIFFS_fflush: write the file's cached small writes to flash."""
        self._check()
        self._fs.core.fflush_cache(self._fh)

    def _file_size(self) -> int:
        """The size after flushing the write cache (SPIFFS_fstat flushes first too)."""
        self._check()
        core = self._fs.core
        core.fflush_cache(self._fh)
        size = core.fds[self._fh - 1].size
        return 0 if size == C.UNDEFINED_LEN else size

    def _truncate(self, size: int) -> None:
        """SPIFFS_ftruncate; every descriptor of the file past the new end moves back to it."""
        self._check()
        self._fs.core.ftruncate(self._fh, size)

    def _sync(self) -> None:
        """SPIFFS_fflush: SPIFFS writes data and size through to flash as it goes; only the write cache waits."""
        self.flush()

    def update_meta(self, meta: bytes) -> None:
        """SPIFFS_fupdate_meta: store ``meta`` (meta_len bytes) in the index header."""
        self._check()
        self._fs.core.fupdate_meta(self._fh, bytes(meta))

    def _close(self) -> None:
        # a file removed meanwhile (or a remount) already released the descriptor
        if self._live():
            self._fs.core.close(self._fh)


class SpiffsFileSystem(FileSystem):
    """SPIFFS on byte-addressed NOR flash (sector_size 1, erase value 0xFF, AND programming).

    ``offset_bytes``/``size_bytes`` select the partition inside the device
    (default: from ``offset_bytes`` to the end).  Opening for writing also
    stores the modification time in the metadata, as ESP-IDF's VFS does, unless
    ``config.use_mtime`` is off.
    """

    kind = "spiffs"
    has_directories = False
    file_class = SpiffsFile

    def __init__(self, device: BlockDevice, config: SpiffsConfig | None = None, *, offset_bytes: int = 0,
                 size_bytes: int | None = None) -> None:
        super().__init__(device)
        cfg = config if config is not None else SpiffsConfig()
        self.config = cfg
        g = device.geometry
        if g.sector_size != 1 or g.prog_size != 1 or g.read_size != 1:
            raise ConfigError(f"spiffs needs a byte-addressed flash device (sector/read/prog size 1 B), "
                              f"got sector {g.sector_size} B, read {g.read_size} B, prog {g.prog_size} B")
        if g.erase_value != 0xFF:
            raise ConfigError("spiffs needs NOR flash that erases to 0xFF")
        if cfg.block_size_bytes % g.erase_size:
            raise ConfigError(f"spiffs block_size_bytes {cfg.block_size_bytes} B is not a multiple of the device "
                              f"erase size {g.erase_size} B")
        if offset_bytes < 0 or offset_bytes % g.erase_size:
            raise ConfigError(f"spiffs offset_bytes {offset_bytes} must be a multiple of the erase size "
                              f"{g.erase_size} B")
        avail = g.size_bytes - offset_bytes
        size = avail if size_bytes is None else size_bytes
        if size <= 0 or size > avail:
            raise ConfigError(f"spiffs partition of {size} B at {offset_bytes} does not fit the {g.size_bytes} B device")
        blocks = size // cfg.block_size_bytes
        if blocks < 3:
            raise ConfigError(f"spiffs needs at least 3 blocks of {cfg.block_size_bytes} B, the partition has {blocks}")
        self.offset_bytes = offset_bytes
        self.size_bytes = blocks * cfg.block_size_bytes
        self.core = C.SpiffsCore(device, cfg, offset_bytes, self.size_bytes)
        self._mount_gen = 0

    # ---- FileSystem primitives -----------------------------------------------------------
    def _format(self) -> None:
        self.core.format()

    def _mount(self) -> None:
        self._mount_gen += 1
        self.core.mount()

    def _unmount(self) -> None:
        self.core.unmount()

    def _open(self, path: str, mode: str) -> File:
        flags = _MODE_FLAGS[mode]
        core = self.core
        fh = core.open(_name(path), flags)
        if flags & C.O_WRONLY and self.config.use_mtime and self.config.meta_len >= 4:
            self._update_mtime(fh)
        return SpiffsFile(self, path, mode, fh)

    def _update_mtime(self, fh: int) -> None:
        """vfs_spiffs_update_mtime: a failure only costs the time stamp, as in ESP-IDF."""
        core = self.core
        t = struct.pack("<I", (self.device.clock.now_ns() // 1_000_000_000) & 0xFFFFFFFF)
        try:
            if self.config.meta_len > 4:
                meta = t + core.fstat(fh)[4][4:]
            else:
                meta = t
            core.fupdate_meta(fh, meta)
        except SpiffsError:
            pass

    def _stat(self, path: str) -> FileStat:
        if path == "/":
            return FileStat("/", 0, is_dir=True)
        size, obj_type, _name_b, _oid, _meta = self.core.stat(_name(path))
        return FileStat(path, size, is_dir=obj_type == 2)

    def _remove(self, path: str) -> None:
        self.core.remove(_name(path))

    def _rename(self, old: str, new: str) -> None:
        """SPIFFS_rename; an existing file ``new`` (CONFLICTING_NAME) is SPIFFS_remove'd first and the rename
        tried again, so the name ends up on ``old``'s data as POSIX rename does."""
        core = self.core
        try:
            core.rename(_name(old), _name(new))
        except SpiffsError as e:
            if e.code != "CONFLICTING_NAME":
                raise
            core.remove(_name(new))
            core.rename(_name(old), _name(new))

    def _listdir(self, path: str) -> list[str]:
        # as ESP-IDF's readdir: names below ``path`` with the prefix stripped ("dir/b.bin" for "/")
        out = []
        for name_b, _size, _type in self.core.readdir():
            name = name_b.decode("utf-8", "replace")
            if path == "/":
                out.append(name[1:] if name.startswith("/") else name)
            elif name.lower().startswith(path.lower() + "/") and len(name) > len(path) + 1:
                out.append(name[len(path) + 1:])
        return out

    # ---- extras ------------------------------------------------------------------------------
    def info(self) -> tuple[int, int]:
        """(total, used) bytes as SPIFFS_info reports them."""
        self._need_mount()
        return self.core.info()

    def stat_meta(self, path: str) -> bytes:
        """The metadata bytes of a file (ESP-IDF keeps the mtime in the first 4)."""
        self._need_mount()
        return self.core.stat(_name(path))[4]

    def gc(self, size_bytes: int) -> None:
        """SPIFFS_gc / esp_spiffs_gc: collect garbage until ``size_bytes`` fit."""
        self._need_mount()
        self.core.gc.check(size_bytes)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "config": to_mapping(self.config), "offset_bytes": self.offset_bytes,
                "size_bytes": self.size_bytes, "block_count": self.core.block_count}


def _name(path: str) -> bytes:
    return path.encode("utf-8")
