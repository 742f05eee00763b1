"""LittleFS through the littlefs C library (the littlefs-python package).

Device geometry and filesystem geometry are kept apart, as in lfs.h: the
block device has its sectors; :class:`LittleFsConfig` says how littlefs cuts
the medium into read/prog/erase blocks.  Each littlefs block op becomes one
BlockDevice op (reads of ``size`` bytes at ``block*block_size+off``), which is
how esp_littlefs drives an SD card (one CMD17/CMD24 per 512-byte block) and
flash (one read/program per request).
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import littlefs
from littlefs import lfs as _lfs

from ..errors import ConfigError, FileSystemError
from ..media.base import BlockDevice, Geometry
from ..options import opt, to_mapping
from . import interrupts
from .base import SEEK_CUR, SEEK_END, SEEK_SET, File, FileStat, FileSystem
from .interrupts import DeferredSigint

LFS_VERSION = ".".join(map(str, _lfs.__LFS_VERSION__))

# Limits of the littlefs build in littlefs-python (lfs.h types and the LFS_*_MAX values it was compiled with).
# lfs_init() asserts on them, and an assert aborts the whole process: every limit is checked here first.
LFS_NAME_MAX = 1022          # name_max <= LFS_NAME_MAX (littlefs-python builds with 1022, not lfs.h's 255)
LFS_ATTR_MAX = 1022          # attr_max <= LFS_ATTR_MAX
LFS_FILE_MAX = 2147483647    # file_max <= LFS_FILE_MAX
U32_MAX = 0xFFFFFFFF         # lfs_size_t / lfs_block_t fields
I32_MAX = 0x7FFFFFFF         # block_cycles is an int32_t
#: block numbers 0xFFFFFFFF and 0xFFFFFFFE mark "no block" and "inline file": a block count may not reach them
LFS_BLOCK_COUNT_MAX = 0xFFFFFFFE
#: the largest block: the largest erase unit of any medium sdbench has (an SD card's allocation unit is at most
#: 64 MiB, SD Physical Layer AU_SIZE; NOR erase blocks are 4-64 KiB). A larger block erases and compacts
#: gigabytes at a time, and a run with it never ends in practice
LFS_BLOCK_MAX = 64 << 20
#: the lookahead buffer is malloc'd and cleared at every mount and format; 1 MiB tracks 8 Mi blocks in one pass,
#: the most any esp_littlefs SD setup used (block_count_limit 8388607)
LOOKAHEAD_MAX = 1 << 20
_DISK_MAJOR, _DISK_MINOR = _lfs.__LFS_DISK_VERSION__
#: on-disk versions this littlefs can write (lfs_init asserts major == its own and minor <= its own)
DISK_VERSIONS = tuple((_DISK_MAJOR << 16) | m for m in range(_DISK_MINOR + 1))
#: smallest metadata block format can commit the superblock into (revision count, superblock entry and CRC;
#: on-disk 2.1 adds a forward CRC); below it lfs_format fails with "no space", measured on this littlefs
MIN_METADATA_BYTES = {0x00020000: 52, 0x00020001: 64}


@dataclass(frozen=True)
class LittleFsConfig:
    read_size: int = opt(512, unit="B", min=1, help="minimum read size (lfs_config.read_size)")
    prog_size: int = opt(512, unit="B", min=1, help="minimum program size (lfs_config.prog_size)")
    block_size: int = opt(512, unit="B", min=128, max=LFS_BLOCK_MAX,
                          help="erase block size (lfs_config.block_size); at most an SD card's largest "
                               "allocation unit")
    block_count: int = opt(0, unit="blocks", min=0, help="blocks used (lfs_config.block_count); 0 = the whole device")
    block_count_limit: int = opt(0, unit="blocks", min=0,
                                 help="cap on block_count (esp_littlefs <= 1.16.1 capped SD cards at 8388607 "
                                      "blocks); 0 = none")
    cache_size: int = opt(512, unit="B", min=1, help="read/prog cache size; multiple of read/prog size, "
                                                      "divides block_size")
    lookahead_size: int = opt(128, unit="B", min=8, max=LOOKAHEAD_MAX,
                              help="lookahead bitmap size (8 blocks per byte), multiple of 8")
    block_cycles: int = opt(512, unit="erase cycles", min=-1, max=I32_MAX,
                            help="metadata relocation period; -1 disables (0 is refused, as littlefs asserts)")
    name_max: int = opt(255, unit="B", min=1, max=LFS_NAME_MAX, help="longest file name")
    file_max: int = opt(0, unit="B", min=0, max=LFS_FILE_MAX, help="largest file; 0 = library default")
    attr_max: int = opt(0, unit="B", min=0, max=LFS_ATTR_MAX,
                        help="largest custom attribute; 0 = library default")
    metadata_max: int = opt(0, unit="B", min=0, help="metadata pair size limit; 0 = block_size")
    inline_max: int = opt(0, unit="B", min=-1, help="largest inline file; 0 = library default "
                                                    "(min(cache, attr_max, block/8)), -1 = disabled")
    disk_version: int = opt(0, min=0, help="on-disk version to write, as (major << 16) | minor, e.g. "
                                           "0x00020000 for 2.0; 0 = the library's newest")

    def __post_init__(self) -> None:
        # Each check mirrors an LFS_ASSERT in lfs_init() (littlefs 2.11, as built in littlefs-python), or a limit
        # of the binding's C types; ValueError so the option loader names the table.
        for name in ("read_size", "prog_size", "cache_size"):
            if getattr(self, name) < 1:   # read_size != 0, prog_size != 0, cache_size != 0
                raise ValueError(f"{name} = {getattr(self, name)} B must be at least 1 B")
        for name in ("read_size", "prog_size", "block_size", "cache_size", "block_count", "metadata_max"):
            if getattr(self, name) > U32_MAX:   # lfs_size_t
                raise ValueError(f"{name} = {getattr(self, name)} is above {U32_MAX}, the largest 32-bit value")
        rs, ps, bs, cs = self.read_size, self.prog_size, self.block_size, self.cache_size
        if bs < 128:  # block_size >= 128: room for the CTZ skip-list pointers
            raise ValueError(f"block_size = {bs} B is below littlefs' minimum of 128 B")
        if self.disk_version and self.disk_version not in DISK_VERSIONS:   # major == 2 && minor <= 1
            known = ", ".join(f"0x{v:08X} ({v >> 16}.{v & 0xFFFF})" for v in DISK_VERSIONS)
            raise ValueError(f"disk_version = 0x{self.disk_version:X} is not an on-disk version littlefs "
                             f"{LFS_VERSION} writes: 0 (newest), {known}")
        if cs % rs:   # cache_size % read_size == 0
            raise ValueError(f"cache_size = {cs} B is not a multiple of read_size = {rs} B")
        if cs % ps:   # cache_size % prog_size == 0
            raise ValueError(f"cache_size = {cs} B is not a multiple of prog_size = {ps} B")
        if bs % cs:   # block_size % cache_size == 0
            raise ValueError(f"block_size = {bs} B is not a multiple of cache_size = {cs} B")
        if self.block_cycles == 0 or self.block_cycles < -1:   # block_cycles != 0 (-1 disables)
            raise ValueError(f"block_cycles = {self.block_cycles} must be -1 (no wear levelling of metadata) "
                             f"or at least 1 erase cycle")
        if self.block_cycles > I32_MAX:   # int32_t
            raise ValueError(f"block_cycles = {self.block_cycles} erase cycles is above {I32_MAX}, the largest "
                             f"int32 value")
        if not 0 < self.lookahead_size <= LOOKAHEAD_MAX:   # lookahead_size > 0
            raise ValueError(f"lookahead_size = {self.lookahead_size} B must be 8..{LOOKAHEAD_MAX} B")
        if self.lookahead_size % 8:
            raise ValueError(f"lookahead_size = {self.lookahead_size} B is not a multiple of 8 B")
        if not 0 <= self.name_max <= LFS_NAME_MAX:   # name_max <= LFS_NAME_MAX
            raise ValueError(f"name_max = {self.name_max} B is above LFS_NAME_MAX = {LFS_NAME_MAX} B")
        if not 0 <= self.file_max <= LFS_FILE_MAX:   # file_max <= LFS_FILE_MAX
            raise ValueError(f"file_max = {self.file_max} B is above LFS_FILE_MAX = {LFS_FILE_MAX} B")
        if not 0 <= self.attr_max <= LFS_ATTR_MAX:   # attr_max <= LFS_ATTR_MAX
            raise ValueError(f"attr_max = {self.attr_max} B is above LFS_ATTR_MAX = {LFS_ATTR_MAX} B")
        mm = self.metadata_max
        if mm:
            if mm > bs:   # metadata_max <= block_size
                raise ValueError(f"metadata_max = {mm} B is above block_size = {bs} B")
            if mm % rs:   # !metadata_max || metadata_max % read_size == 0
                raise ValueError(f"metadata_max = {mm} B is not a multiple of read_size = {rs} B")
            if mm % ps:   # !metadata_max || metadata_max % prog_size == 0
                raise ValueError(f"metadata_max = {mm} B is not a multiple of prog_size = {ps} B")
            if bs % mm:   # !metadata_max || block_size % metadata_max == 0
                raise ValueError(f"metadata_max = {mm} B does not divide block_size = {bs} B")
            version = self.disk_version or DISK_VERSIONS[-1]
            least = MIN_METADATA_BYTES.get(version, max(MIN_METADATA_BYTES.values()))
            if mm < least:   # not an assert: format would fail with LFS_ERR_NOSPC
                raise ValueError(f"metadata_max = {mm} B is too small for the superblock commit format writes "
                                 f"(at least {least} B for on-disk version {version >> 16}.{version & 0xFFFF})")
        im = self.inline_max
        if im < -1:
            raise ValueError(f"inline_max = {im} B must be -1 (inline files off), 0 (library default) or positive")
        if im > 0:
            attr = self.attr_max or LFS_ATTR_MAX
            meta8 = (mm or bs) // 8
            if im > cs:   # inline_max <= cache_size
                raise ValueError(f"inline_max = {im} B is above cache_size = {cs} B")
            if im > attr:   # inline_max <= attr_max (0 = LFS_ATTR_MAX)
                raise ValueError(f"inline_max = {im} B is above attr_max = {attr} B")
            if im > meta8:   # inline_max <= (metadata_max or block_size) / 8
                what = "metadata_max" if mm else "block_size"
                raise ValueError(f"inline_max = {im} B is above {what} / 8 = {meta8} B")


#: config fields that name device granularities: the device's read, program and erase units
_GRANULARITY = {"read_size": "read_size", "prog_size": "prog_size", "block_size": "erase_size"}


def data_capacity_bytes(cfg: LittleFsConfig, geometry: Geometry, *, where: str = "littlefs") -> int:
    """Bytes of file data the filesystem holds at most on this device (checked as :func:`check_geometry`): every
    block but the superblock pair."""
    return (check_geometry(cfg, geometry, where=where) - 2) * cfg.block_size


def check_geometry(cfg: LittleFsConfig, geometry: Geometry, *, offset_bytes: int = 0, size_bytes: int | None = None,
                   sector_fields: tuple[str, ...] = ("read_size", "prog_size", "block_size"),
                   where: str = "littlefs") -> int:
    """Check a config against the device it will run on, without touching the device; returns the block count.

    ``sector_fields`` are the fields whose requests reach the device as whole sectors (one device op per
    littlefs request); the block size must always be whole erase units of the device, since littlefs erases
    block by block.  Raises ConfigError naming the field."""
    ss = geometry.sector_size
    for name in sector_fields:
        v = getattr(cfg, name)
        if v % ss:
            raise ConfigError(f"{where}.{name} = {v} B is not a multiple of the device's {ss} B sectors")
        unit_name = _GRANULARITY[name]
        unit = getattr(geometry, unit_name)
        if v % unit:
            raise ConfigError(f"{where}.{name} = {v} B is not a multiple of the device's {unit} B "
                              f"{unit_name.replace('_', ' ')}")
    if cfg.block_size % geometry.erase_size:   # littlefs erases whole blocks
        raise ConfigError(f"{where}.block_size = {cfg.block_size} B is not a multiple of the device's "
                          f"{geometry.erase_size} B erase size")
    if offset_bytes < 0 or offset_bytes % geometry.erase_size:
        raise ConfigError(f"{where}: the filesystem's start at {offset_bytes} B is not on a "
                          f"{geometry.erase_size} B erase boundary of the device")
    device_bytes = geometry.size_bytes
    avail = device_bytes - offset_bytes if size_bytes is None else size_bytes
    if avail <= 0 or offset_bytes + avail > device_bytes:
        raise ConfigError(f"{where}: {avail} B from {offset_bytes} B do not fit the {device_bytes} B device")
    bs = cfg.block_size
    fit = avail // bs
    blocks = cfg.block_count or fit
    if cfg.block_count_limit:
        blocks = min(blocks, cfg.block_count_limit)
    if cfg.block_count and cfg.block_count > fit:
        raise ConfigError(f"{where}.block_count = {cfg.block_count} blocks of {bs} B need {cfg.block_count * bs} B; "
                          f"the device offers {avail} B ({fit} blocks)")
    if blocks < 2:
        raise ConfigError(f"{where}: littlefs needs at least 2 blocks (the superblock pair); {avail} B of device "
                          f"hold {fit} block(s) of {bs} B (block_size)")
    if blocks > LFS_BLOCK_COUNT_MAX:
        raise ConfigError(f"{where}: {blocks} blocks of {bs} B exceed littlefs' 32-bit block numbers "
                          f"(at most {LFS_BLOCK_COUNT_MAX}); raise block_size or set block_count_limit")
    return blocks


#: littlefs' error code for a device that failed
LFS_ERR_IO = -5


class _Stop:
    """The KeyboardInterrupt (or SystemExit) a context's callbacks caught, in an object of its own: the context's
    fused read reads it without holding the context (which holds that function)."""

    __slots__ = ("exc",)

    def __init__(self) -> None:
        self.exc: BaseException | None = None


class _Context:
    """littlefs block callbacks -> BlockDevice ops (errors kept for a clear message)."""

    def __init__(self, device: BlockDevice, cfg: LittleFsConfig, base_bytes: int = 0) -> None:
        self.dev = device
        self.ss = device.geometry.sector_size
        self.block_size = cfg.block_size
        self.base = base_bytes
        self.error: BaseException | None = None
        self._stop = _Stop()
        if type(self).read_bytes is _Context.read_bytes and type(self).read is _Context.read:
            self.read = self._sector_read()  # type: ignore[method-assign]

    @property
    def stopped(self) -> BaseException | None:
        """A KeyboardInterrupt (or SystemExit) a callback caught: the run is to stop."""
        return self._stop.exc

    @stopped.setter
    def stopped(self, e: BaseException | None) -> None:
        self._stop.exc = e

    def _sector_read(self) -> Callable[[Any, int, int, int], bytes]:
        """:meth:`read` of a context that reads whole sectors, as one function of its own values (littlefs calls
        it a million times a protocol run; the binding looks ``read`` up on the instance).  It holds the context
        only weakly, so a dropped filesystem is freed at once, not left in a cycle for the collector."""
        # the device's read for many direct calls (a simulated driver fuses its layers for it)
        read, ss, block_size, base, flag, stop = self.dev.reader(), self.ss, self.block_size, self.base, \
            interrupts.FLAG, self._stop
        owner = weakref.ref(self)

        def sector_read(cfg: Any, block: int, off: int, size: int) -> bytes:
            try:
                if stop.exc is not None or flag.pending:
                    return bytes(size)
                return read((base + block * block_size + off) // ss, size // ss)
            except BaseException as e:
                ctx = owner()
                if ctx is not None:
                    ctx._failed(e)
                return bytes(size)
        return sector_read

    # byte access: one device op per callback (subclasses may address bytes differently)
    def read_bytes(self, addr: int, size: int) -> bytes:
        return self.dev.read(addr // self.ss, size // self.ss)

    def prog_bytes(self, addr: int, data: bytes) -> None:
        self.dev.write(addr // self.ss, data)

    # The binding cannot pass an exception through littlefs (it prints it and goes on), so a failed callback
    # keeps its cause for _ErrorScope and answers as a failed device does: LFS_ERR_IO, or for a read, zeros
    # that fail littlefs' checksums. After a Ctrl-C (deferred while littlefs runs, see fs/interrupts.py; or a
    # KeyboardInterrupt caught here) every callback fails at once, so littlefs unwinds and _ErrorScope raises
    # KeyboardInterrupt: the run stops.
    def _failed(self, e: BaseException) -> None:
        self.error = self.error or e
        if not isinstance(e, Exception):
            self.stopped = e

    def read(self, cfg: Any, block: int, off: int, size: int) -> bytes:
        try:
            if self.stopped is not None or interrupts.pending():
                return bytes(size)
            return self.read_bytes(self.base + block * self.block_size + off, size)
        except BaseException as e:
            self._failed(e)
            return bytes(size)

    def prog(self, cfg: Any, block: int, off: int, data: bytes) -> int:
        try:
            if self.stopped is not None or interrupts.pending():
                return LFS_ERR_IO
            self.prog_bytes(self.base + block * self.block_size + off, bytes(data))
        except BaseException as e:
            self._failed(e)
            return LFS_ERR_IO
        return 0

    def erase(self, cfg: Any, block: int) -> int:
        try:
            if self.stopped is not None or interrupts.pending():
                return LFS_ERR_IO
            self.dev.erase((self.base + block * self.block_size) // self.ss, self.block_size // self.ss)
        except BaseException as e:
            self._failed(e)
            return LFS_ERR_IO
        return 0

    def sync(self, cfg: Any) -> int:
        try:
            if self.stopped is not None or interrupts.pending():
                return LFS_ERR_IO
            self.dev.sync()
        except BaseException as e:
            self._failed(e)
            return LFS_ERR_IO
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

    def _file_size(self) -> int:
        return _lfs.file_size(self.fs._fs, self._h)

    def _truncate(self, size: int) -> None:
        """lfs_file_truncate (it keeps the position, which may now lie past the end: moved back to ``size``)."""
        with self.fs._errors(f"truncate {self.path}"):
            _lfs.file_truncate(self.fs._fs, self._h, size)
            if _lfs.file_tell(self.fs._fs, self._h) > size:
                _lfs.file_seek(self.fs._fs, self._h, size, SEEK_SET)

    def _sync(self) -> None:
        """lfs_file_sync: write out the file's cache and commit its metadata."""
        with self.fs._errors(f"sync {self.path}"):
            _lfs.file_sync(self.fs._fs, self._h)

    def _close(self) -> None:
        with self.fs._errors(f"close {self.path}"):
            _lfs.file_close(self.fs._fs, self._h)
        self.fs._open_files.discard(self)


# as flags, not the binding's mode strings: its "a"/"a+" leave out LFS_O_CREAT, and "a" must create (fs/base.py)
_F = _lfs.LFSFileFlag
_FLAGS = {"r": _F.rdonly, "r+": _F.rdwr, "w": _F.rdwr | _F.creat | _F.trunc, "a": _F.rdwr | _F.creat | _F.append}


class LittleFsFileSystem(FileSystem):
    kind = "littlefs"
    file_class = LittleFsFile
    #: callbacks to the device; subclasses for devices with byte-level access replace it
    context_class: type[_Context] = _Context
    #: config fields that must be whole device sectors (one device op per littlefs request)
    sector_fields: tuple[str, ...] = ("read_size", "prog_size", "block_size")

    def __init__(self, device: BlockDevice, config: LittleFsConfig = LittleFsConfig(), *,
                 offset_bytes: int = 0, size_bytes: int | None = None, where: str = "littlefs") -> None:
        super().__init__(device)
        self.config = config
        # everything lfs_init() and the binding would assert on or overflow is refused here, before any C call
        blocks = check_geometry(config, device.geometry, offset_bytes=offset_bytes, size_bytes=size_bytes,
                                sector_fields=self.sector_fields, where=where)
        self.block_count = blocks
        self._ctx = self.context_class(device, config, offset_bytes)
        self._cfg = _lfs.LFSConfig(
            context=self._ctx, block_size=config.block_size, block_count=blocks, read_size=config.read_size,
            prog_size=config.prog_size, block_cycles=config.block_cycles, cache_size=config.cache_size,
            lookahead_size=config.lookahead_size, name_max=config.name_max, file_max=config.file_max,
            attr_max=config.attr_max, metadata_max=config.metadata_max,
            # -1 (inline files off) is (lfs_size_t)-1 in C; the binding takes the unsigned value
            inline_max=U32_MAX if config.inline_max == -1 else config.inline_max,
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

    def _mkdir(self, path: str) -> None:
        with self._errors(f"mkdir {path}"):
            _lfs.mkdir(self._fs, path)

    def _rename(self, old: str, new: str) -> None:
        """lfs_rename: replaces a file ``new`` (a directory only by a directory, and only when empty)."""
        with self._errors(f"rename {old} to {new}"):
            _lfs.rename(self._fs, old, new)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "littlefs_version": LFS_VERSION, "block_count": self.block_count,
                "config": to_mapping(self.config)}


class _ErrorScope:
    def __init__(self, fs: LittleFsFileSystem, what: str) -> None:
        self.fs, self.what = fs, what

    def __enter__(self) -> None:
        ctx = self.fs._ctx
        if ctx.stopped is not None:  # after a Ctrl-C nothing more runs on this filesystem
            raise ctx.stopped
        ctx.error = None
        self.sigint = DeferredSigint().__enter__()

    def __exit__(self, et: Any, e: Any, tb: Any) -> bool:
        ctx = self.fs._ctx
        try:
            self.sigint.__exit__()  # a Ctrl-C while littlefs ran: KeyboardInterrupt, whatever littlefs made of it
        except KeyboardInterrupt as stop:
            ctx.stopped = stop
        if ctx.stopped is not None:  # or a KeyboardInterrupt a callback caught
            raise ctx.stopped
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
