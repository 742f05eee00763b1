"""LittleFS through the littlefs C library (the littlefs-python package).

Device geometry and filesystem geometry are kept apart, as in lfs.h: the
block device has its sectors; :class:`LittleFsConfig` says how littlefs cuts
the medium into read/prog/erase blocks.  Each littlefs block op becomes one
BlockDevice op (reads of ``size`` bytes at ``block*block_size+off``), which is
how esp_littlefs drives an SD card (one CMD17/CMD24 per 512-byte block) and
flash (one read/program per request).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import littlefs
from littlefs import lfs as _lfs

from ..errors import ConfigError, FileSystemError
from ..media.base import BlockDevice
from ..options import opt, to_mapping
from .base import SEEK_CUR, SEEK_END, SEEK_SET, File, FileStat, FileSystem

LFS_VERSION = ".".join(map(str, _lfs.__LFS_VERSION__))


@dataclass(frozen=True)
class LittleFsConfig:
    read_size: int = opt(512, unit="B", min=1, help="minimum read size (lfs_config.read_size)")
    prog_size: int = opt(512, unit="B", min=1, help="minimum program size (lfs_config.prog_size)")
    block_size: int = opt(512, unit="B", min=128, help="erase block size (lfs_config.block_size)")
    block_count: int = opt(0, unit="blocks", min=0, help="0 = the whole device")
    block_count_limit: int = opt(0, unit="blocks", min=0,
                                 help="cap on block_count (esp_littlefs <= 1.16.1 capped SD cards at 8388607 "
                                      "blocks); 0 = none")
    cache_size: int = opt(512, unit="B", min=1, help="read/prog cache size; multiple of read/prog size, "
                                                      "divides block_size")
    lookahead_size: int = opt(128, unit="B", min=8, help="lookahead bitmap size (8 blocks per byte), multiple of 8")
    block_cycles: int = opt(512, unit="erase cycles", min=-1, help="metadata relocation period; -1 disables")
    name_max: int = opt(255, unit="B", min=1, max=1022, help="longest file name")
    file_max: int = opt(0, unit="B", min=0, help="largest file; 0 = library default")
    attr_max: int = opt(0, unit="B", min=0, help="largest custom attribute; 0 = library default")
    metadata_max: int = opt(0, unit="B", min=0, help="metadata pair size limit; 0 = block_size")
    inline_max: int = opt(0, unit="B", min=-1, help="largest inline file; 0 = library default "
                                                    "(min(cache, attr_max, block/8)), -1 = disabled")
    disk_version: int = opt(0, min=0, help="on-disk version to write; 0 = the library's newest")


class _Context:
    """littlefs block callbacks -> BlockDevice ops (errors kept for a clear message)."""

    def __init__(self, device: BlockDevice, cfg: LittleFsConfig, base_bytes: int = 0) -> None:
        self.dev = device
        self.ss = device.geometry.sector_size
        self.block_size = cfg.block_size
        self.base = base_bytes
        self.error: Exception | None = None

    # byte access: one device op per callback (subclasses may address bytes differently)
    def read_bytes(self, addr: int, size: int) -> bytes:
        return self.dev.read(addr // self.ss, size // self.ss)

    def prog_bytes(self, addr: int, data: bytes) -> None:
        self.dev.write(addr // self.ss, data)

    def read(self, cfg: Any, block: int, off: int, size: int) -> bytes:
        try:
            return self.read_bytes(self.base + block * self.block_size + off, size)
        except Exception as e:
            self.error = e
            raise

    def prog(self, cfg: Any, block: int, off: int, data: bytes) -> int:
        try:
            self.prog_bytes(self.base + block * self.block_size + off, bytes(data))
        except Exception as e:
            self.error = e
            raise
        return 0

    def erase(self, cfg: Any, block: int) -> int:
        try:
            self.dev.erase((self.base + block * self.block_size) // self.ss, self.block_size // self.ss)
        except Exception as e:
            self.error = e
            raise
        return 0

    def sync(self, cfg: Any) -> int:
        self.dev.sync()
        return 0


class LittleFsFile(File):
    def __init__(self, fs: "LittleFsFileSystem", path: str, mode: str, handle: Any) -> None:
        super().__init__(fs, path, mode)
        self._h = handle

    def read(self, size: int = -1, *, buf_addr: int = 0) -> bytes:
        with self.fs._errors(f"read {self.path}"):
            if size < 0:
                return _lfs.file_read(self.fs._fs, self._h, _lfs.file_size(self.fs._fs, self._h))
            return _lfs.file_read(self.fs._fs, self._h, size)

    def write(self, data: bytes, *, buf_addr: int = 0) -> int:
        if self.mode == "r":
            raise FileSystemError(f"{self.path}: opened read-only")
        with self.fs._errors(f"write {self.path}"):
            return _lfs.file_write(self.fs._fs, self._h, bytes(data))

    def seek(self, offset: int, whence: int = SEEK_SET) -> int:
        if whence not in (SEEK_SET, SEEK_CUR, SEEK_END):
            raise FileSystemError(f"bad whence {whence}")
        with self.fs._errors(f"seek {self.path}"):
            return _lfs.file_seek(self.fs._fs, self._h, offset, whence)

    def tell(self) -> int:
        return _lfs.file_tell(self.fs._fs, self._h)

    def _close(self) -> None:
        with self.fs._errors(f"close {self.path}"):
            _lfs.file_close(self.fs._fs, self._h)
        self.fs._open_files.discard(self)


_FLAGS = {"r": "r", "r+": "r+", "w": "w+", "a": "a+"}


class LittleFsFileSystem(FileSystem):
    kind = "littlefs"
    #: callbacks to the device; subclasses for devices with byte-level access replace it
    context_class: type[_Context] = _Context
    #: config fields that must be whole device sectors (one device op per littlefs request)
    sector_fields: tuple[str, ...] = ("read_size", "prog_size", "block_size")

    def __init__(self, device: BlockDevice, config: LittleFsConfig = LittleFsConfig(), *,
                 offset_bytes: int = 0, size_bytes: int | None = None) -> None:
        super().__init__(device)
        self.config = config
        ss = device.geometry.sector_size
        for name in self.sector_fields:
            v = getattr(config, name)
            if v % ss:
                raise ConfigError(f"littlefs.{name} = {v} B is not a multiple of the device's {ss} B sectors")
        if config.block_size % config.cache_size or config.cache_size % config.read_size \
                or config.cache_size % config.prog_size:
            raise ConfigError("littlefs.cache_size must be a multiple of read_size and prog_size and divide "
                              "block_size")
        if config.lookahead_size % 8:
            raise ConfigError("littlefs.lookahead_size must be a multiple of 8 B")
        avail = (size_bytes if size_bytes is not None else device.geometry.size_bytes - offset_bytes)
        blocks = config.block_count or avail // config.block_size
        if config.block_count_limit:
            blocks = min(blocks, config.block_count_limit)
        if blocks * config.block_size > avail or blocks < 2:
            raise ConfigError(f"littlefs needs {blocks} blocks of {config.block_size} B; the device offers "
                              f"{avail // config.block_size}")
        self.block_count = blocks
        self._ctx = self.context_class(device, config, offset_bytes)
        self._cfg = _lfs.LFSConfig(
            context=self._ctx, block_size=config.block_size, block_count=blocks, read_size=config.read_size,
            prog_size=config.prog_size, block_cycles=config.block_cycles, cache_size=config.cache_size,
            lookahead_size=config.lookahead_size, name_max=config.name_max, file_max=config.file_max,
            attr_max=config.attr_max, metadata_max=config.metadata_max, inline_max=config.inline_max,
            disk_version=config.disk_version)
        self._fs = _lfs.LFSFilesystem()
        self._open_files: set[LittleFsFile] = set()

    def _errors(self, what: str) -> "_ErrorScope":
        return _ErrorScope(self, what)

    def _format(self) -> None:
        with self._errors("format"):
            _lfs.format(self._fs, self._cfg)

    def _mount(self) -> None:
        with self._errors("mount"):
            _lfs.mount(self._fs, self._cfg)

    def _unmount(self) -> None:
        for f in list(self._open_files):
            f.close()
        with self._errors("unmount"):
            _lfs.unmount(self._fs)

    def _open(self, path: str, mode: str) -> File:
        with self._errors(f"open {path}"):
            h = _lfs.file_open(self._fs, path, _FLAGS[mode])
        f = LittleFsFile(self, path, mode, h)
        self._open_files.add(f)
        return f

    def _stat(self, path: str) -> FileStat:
        with self._errors(f"stat {path}"):
            st = _lfs.stat(self._fs, path)
        return FileStat(path, st.size, st.type == _lfs.LFSStat.TYPE_DIR)

    def _remove(self, path: str) -> None:
        with self._errors(f"remove {path}"):
            _lfs.remove(self._fs, path)

    def _listdir(self, path: str) -> list[str]:
        out = []
        with self._errors(f"list {path}"):
            dh = _lfs.dir_open(self._fs, path)
            try:
                while (st := _lfs.dir_read(self._fs, dh)) is not None:
                    if st.name not in (".", ".."):
                        out.append(st.name)
            finally:
                _lfs.dir_close(self._fs, dh)
        return out

    def mkdir(self, path: str) -> None:
        self._need_mount()
        with self._errors(f"mkdir {path}"):
            _lfs.mkdir(self._fs, path)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "littlefs_version": LFS_VERSION, "block_count": self.block_count,
                "config": to_mapping(self.config)}


class _ErrorScope:
    def __init__(self, fs: LittleFsFileSystem, what: str) -> None:
        self.fs, self.what = fs, what

    def __enter__(self) -> None:
        self.fs._ctx.error = None

    def __exit__(self, et: Any, e: Any, tb: Any) -> bool:
        if e is None:
            return False
        cause = self.fs._ctx.error
        self.fs._ctx.error = None
        if cause is not None:
            raise FileSystemError(f"{self.what}: {cause}") from None
        if isinstance(e, littlefs.errors.LittleFSError):
            raise FileSystemError(f"{self.what}: {_describe(e)}") from None
        return False


def _describe(e: Exception) -> str:
    code = getattr(e, "code", None)
    names = {-2: "no such file or directory", -5: "I/O error", -84: "corrupt filesystem", -17: "exists",
             -20: "not a directory", -21: "is a directory", -39: "directory not empty", -9: "bad file",
             -27: "file too large", -22: "invalid parameter", -28: "no space left", -12: "out of memory",
             -61: "no attribute", -36: "name too long"}
    return names.get(code, str(e))
