"""FAT through ChaN's FatFs (the fatfs-ng package), as ESP-IDF and MicroPython use it.

FatFs is compiled in fatfs-ng with one volume and 512-byte sectors
(FF_VOLUMES=1, FF_MAX_SS=512, FF_FS_TINY=0).  Consequences here:

* one FAT volume can be mounted per process at a time (mounting a second one
  raises a clear error);
* 4096-byte-sector volumes (FAT on ESP-IDF wear levelling) run FatFs on
  512-byte logical sectors over a :class:`SectorSizeBridge` that
  read-modify-writes the 4096-byte sectors below; the layout is aligned to the
  big sectors so every FatFs sector write touches exactly one of them.

Buffer addresses.  FatFs moves whole sectors of a read()/write() straight
between the device and the user's buffer, at ``buf + (512 - off % 512) % 512``
for a call at file offset ``off``; partial sectors, FAT and directory sectors
go through FatFs' own (aligned) sector buffers.  :class:`_FatDisk` follows
FatFs' transfer loop to give each data transfer the address it really has,
so a driver model with alignment rules (ESP-IDF sdmmc) sees what the real
driver sees.
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fatfs import wrapper as _ff
from fatfs.diskio import Disk as _FfDisk

from ..errors import ConfigError, FileSystemError
from ..media.base import BlockDevice, BlockDeviceWrapper, Geometry
from ..options import opt, to_mapping
from . import fatformat, interrupts
from .base import SEEK_CUR, SEEK_END, SEEK_SET, File, FileStat, FileSystem
from .interrupts import DeferredSigint

T = TypeVar("T")

FF_SECTOR = 512  # FatFs' compiled sector size in fatfs-ng

_FR_NAMES = {
    1: "disk error", 2: "internal error", 3: "not ready", 4: "no such file", 5: "no such path",
    6: "invalid name", 7: "access denied (directory full or file read-only)", 8: "file exists",
    9: "invalid object", 10: "write protected", 11: "invalid drive", 12: "not enabled",
    13: "no FAT volume", 14: "mkfs aborted", 15: "timeout", 16: "locked", 17: "not enough memory",
    18: "too many open files", 19: "invalid parameter",
}
_FR_EXIST = 8
_FA_READ, _FA_WRITE, _FA_CREATE_ALWAYS, _FA_OPEN_ALWAYS = 0x01, 0x02, 0x08, 0x10
_MODE_FLAGS = {
    "r": _FA_READ,
    "r+": _FA_READ | _FA_WRITE,
    "w": _FA_READ | _FA_WRITE | _FA_CREATE_ALWAYS,
    "a": _FA_READ | _FA_WRITE | _FA_OPEN_ALWAYS,
}

_registry: dict[int, Any] = getattr(_ff, "__diskio_wrapper_disks")
_volume_lock = threading.Lock()
# the mounted volume, weakly: a FatFileSystem dropped without unmount frees the slot
_active: "weakref.ref[FatFileSystem] | None" = None
# FatFs keeps a pointer to the mounted FATFS object: hold the partition until f_mount(NULL) ran
_mounted_partition: Any = None


@dataclass(frozen=True)
class FatConfig:
    fat_type: str = opt("auto", choices=("auto", "fat12", "fat16", "fat32"),
                        help="FAT variant; auto = FAT12 below 4086 clusters, FAT16 up to 65525, else FAT32, "
                             "as FatFs' f_mkfs decides")
    allocation_unit_bytes: int = opt(0, unit="B", min=0,
                                     help="cluster size; 0 = FatFs default for the volume size (ESP-IDF: the target "
                                          "size clamped to [sector, 128 sectors])")
    n_fats: int = opt(2, min=1, max=2, help="number of FAT copies")
    partition_start_lba: int = opt(0, unit="sectors", min=0, max=fatformat.MAX_LBA32,
                                   help="0 = no partition table (SFD); else one MBR partition from this LBA "
                                        "(ESP-IDF's f_fdisk starts at 63)")
    sector_size_bytes: int = opt(512, unit="B", choices=(512, 4096),
                                 help="FAT sector size; 4096 over a 512-byte device goes through a sector-size bridge")
    root_entries: int = opt(512, min=16, max=32768,
                            help="FAT12/16 root directory entries (FatFs' f_mkfs: up to 32768, whole sectors)")
    trim_on_format: bool = opt(True, help="discard the whole volume before laying it out, as f_mkfs does when "
                                          "FatFs is built with FF_USE_TRIM (ESP-IDF: on)")
    trim_freed_clusters: bool = opt(True, help="discard the clusters a delete or truncation frees, one command per "
                                               "contiguous run (FatFs with FF_USE_TRIM; FAT16/32)")
    align_sectors: int = opt(1, unit="sectors", min=1, max=32768,
                             help="align the data area to this many sectors (FatFs: the device's erase block; "
                                  "ESP-IDF's SD driver reports none: 1)")
    max_transfer_sectors: int = opt(0, unit="sectors", min=0,
                                    help="largest transfer the file layer hands the driver; 0 = no limit (FatFs), "
                                         "1 = one sector per command (P2 driver's files)")

    def __post_init__(self) -> None:
        # what FatFs' f_mkfs accepts and mount_volume() requires of a boot sector; ValueError so the option
        # loader names the table
        ss = self.sector_size_bytes
        au = self.allocation_unit_bytes
        if au:
            if au % ss or (au // ss) & (au // ss - 1):
                raise ValueError(f"allocation_unit_bytes = {au} B is not a power-of-two multiple of "
                                 f"sector_size_bytes = {ss} B")
            if au > fatformat.MAX_CLUSTER_BYTES:   # BPB_SecPerClus: a power of two up to 128 of FatFs' sectors
                raise ValueError(f"allocation_unit_bytes = {au} B is above {fatformat.MAX_CLUSTER_BYTES} B, the "
                                 f"largest FAT cluster FatFs handles (128 sectors of {FF_SECTOR} B)")
        if self.root_entries % (ss // 32):   # BPB_RootEntCnt must fill whole sectors of 32-byte entries
            raise ValueError(f"root_entries = {self.root_entries} is not a multiple of {ss // 32} (one "
                             f"{ss} B sector of 32-byte entries)")
        a = self.align_sectors
        if a & (a - 1):   # f_mkfs: the block size is a power of two
            raise ValueError(f"align_sectors = {a} sectors is not a power of two")


def plan_volume(geometry: Geometry, config: FatConfig, *, where: str = "fat") -> fatformat.FatLayout:
    """The volume :meth:`FatFileSystem.format` lays out on a device of this geometry, in FatFs' 512-byte
    sectors; ConfigError (naming ``<where>.<field>``) when FatFs could not mount it.  No device I/O."""
    ss = geometry.sector_size
    if ss % FF_SECTOR:
        raise ConfigError(f"FAT needs 512-byte or larger power-of-two sectors, device has {ss} B")
    if config.sector_size_bytes != ss:
        raise ConfigError(f"{where}.sector_size_bytes = {config.sector_size_bytes} B but the device has {ss} B "
                          "sectors")
    c = config
    ratio = ss // FF_SECTOR
    big = fatformat.plan(
        geometry.sector_count, sector_size=ss, fat_type=c.fat_type, au_bytes=c.allocation_unit_bytes,
        n_fats=c.n_fats, partition_start_lba=c.partition_start_lba or None, root_entries=c.root_entries,
        align_sectors=c.align_sectors, where=where)
    if ratio == 1:
        return big
    # the same layout in FatFs' 512-byte sectors: every region starts on a big-sector boundary
    lay = fatformat.FatLayout(
        big.fat_type, FF_SECTOR, big.volume_start * ratio, big.volume_sectors * ratio,
        big.reserved_sectors * ratio, big.n_fats, big.fat_sectors * ratio, big.root_dir_sectors * ratio,
        big.sectors_per_cluster * ratio, big.cluster_count)
    fatformat.check_bpb(lay, where=where)
    return lay


def volume_capacity_bytes(lay: fatformat.FatLayout) -> int:
    """File data a fresh volume holds: its clusters, less FAT32's root directory cluster."""
    return (lay.cluster_count - (1 if lay.fat_type == 32 else 0)) * lay.cluster_bytes


class SectorSizeBridge(BlockDeviceWrapper):
    """512-byte sectors over a device with bigger sectors (read-modify-write)."""

    kind = "sector-bridge"

    def __init__(self, inner: BlockDevice, logical_sector_bytes: int = FF_SECTOR) -> None:
        big = inner.geometry.sector_size
        if big % logical_sector_bytes:
            raise ConfigError(f"cannot bridge {logical_sector_bytes} B sectors over {big} B sectors")
        self.ratio = big // logical_sector_bytes
        geo = Geometry(sector_size=logical_sector_bytes, sector_count=inner.geometry.sector_count * self.ratio)
        super().__init__(inner, geo)

    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        r, ls = self.ratio, self.geometry.sector_size
        first, last = lba // r, (lba + count - 1) // r
        data = self.inner.read(first, last - first + 1)
        off = (lba - first * r) * ls
        return data[off:off + count * ls]

    def _whole(self, lba: int, count: int) -> tuple[int, int]:
        """The big sectors lying wholly inside a range of small ones."""
        first = -(-lba // self.ratio)
        end = (lba + count) // self.ratio
        return first, max(0, end - first)

    def _erase(self, lba: int, count: int) -> None:
        first, n = self._whole(lba, count)
        if n:
            self.inner.erase(first, n)

    def _trim(self, lba: int, count: int) -> None:
        first, n = self._whole(lba, count)
        if n:
            self.inner.trim(first, n)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        r, ls = self.ratio, self.geometry.sector_size
        count = len(data) // ls
        first, last = lba // r, (lba + count - 1) // r
        head, tail = lba % r, (lba + count) % r
        if head == 0 and tail == 0:
            self.inner.write(first, data, buf_addr=buf_addr)
            return
        old = bytearray(self.inner.read(first, last - first + 1))
        old[head * ls:head * ls + len(data)] = data
        self.inner.write(first, bytes(old))


class _FatDisk(_FfDisk):
    """fatfs-ng disk callbacks -> BlockDevice, with FatFs' buffer addresses."""

    def __init__(self, fs: "FatFileSystem") -> None:
        super().__init__()
        self._fs = weakref.ref(fs)
        self.dev = fs.volume_device
        self._read = self.dev.reader()  # the device's read for many direct calls (BlockDevice.reader)
        # transfer in progress: (op, file offset, length, user buf addr, user data for writes)
        self.xfer: tuple[str, int, int, int, bytes] | None = None
        self.pos = 0          # bytes of the user buffer consumed by direct transfers so far
        self.data_start = 0   # first LBA of the data area (set at mount)
        self.max_bytes = fs.config.max_transfer_sectors * FF_SECTOR  # 0 = no limit
        # FF_USE_TRIM emulation (fatfs-ng's FatFs is built without it): FAT sectors as last read or written, to
        # see which entries a write frees; set at mount when enabled
        self.fat1: tuple[int, int, int] | None = None   # first LBA, end LBA, bytes per entry
        self._fat_seen: dict[int, bytes] = {}
        self.freed: set[int] = set()
        #: the first failure of a disk callback in the FatFs call under way (FatFileSystem._lib raises it)
        self.failure: BaseException | None = None

    # fatfs-ng has no way for a callback to fail: an exception raised in one stays set while FatFs goes on,
    # and the Python code that runs next misbehaves (lookups fail, errors differ with the hash seed). So a
    # failed callback keeps its cause in ``failure``, and from then on the call's callbacks touch the device no
    # more (reads give zeros, writes are dropped): the medium holds what it held when the failure came.
    def _failed(self, e: BaseException) -> None:
        if self.failure is None:
            self.failure = e

    def _live(self) -> bool:
        if interrupts.pending():  # Ctrl-C: nothing more reaches the device; KeyboardInterrupt follows
            self._failed(KeyboardInterrupt())
        return self.failure is None

    def ioctl_get_sector_count(self) -> int:
        return self.dev.geometry.sector_count

    def ioctl_get_sector_size(self) -> int:
        return FF_SECTOR

    def ioctl_get_block_size(self) -> int:
        return 1

    def ioctl_sync(self) -> None:
        if self._live():
            try:
                self.dev.sync()
            except BaseException as e:
                self._failed(e)

    def begin(self, op: str, offset: int, length: int, buf_addr: int, data: bytes = b"") -> None:
        self.xfer = (op, offset, length, buf_addr, data)
        self.pos = (-offset) % FF_SECTOR  # head bytes go through the file's sector buffer
        if self.pos > length:
            self.pos = length

    def end(self) -> None:
        self.xfer = None

    def read(self, sector: int, count: int) -> bytes | list[int]:
        """The sectors' bytes as a list of ints: fatfs-ng's disk_read copies what this returns into FatFs' buffer
        one item at a time (``buff[i] = data[i]``), and a list's items are the cheapest to index (a FAT read
        of 64 KiB costs a quarter of the time it costs as bytes)."""
        if not self._live():
            return bytes(count)
        addr = 0
        x = self.xfer
        if x is not None and x[0] == "read" and sector >= self.data_start:
            remaining = x[2] - self.pos
            if remaining >= FF_SECTOR:  # FatFs reads whole sectors straight into the user buffer
                addr = x[3] + self.pos
                self.pos += count
        try:
            step = self.max_bytes or count
            if 0 < count <= step:  # one device read (FatFs' sector buffer: one sector)
                data = self._read(sector, count // FF_SECTOR, buf_addr=addr)
            else:
                data = b"".join(self._read(sector + off // FF_SECTOR, min(step, count - off) // FF_SECTOR,
                                          buf_addr=addr + off if addr else 0)
                                for off in range(0, count, step))
            if self._in_fat1(sector, count):
                self._fat_seen[sector] = data
            return list(data)
        except BaseException as e:
            self._failed(e)
            return bytes(count)

    def write(self, sector: int, count: int, buff: bytes) -> None:
        if not self._live():
            return
        if self._in_fat1(sector, count):
            self._note_fat_write(sector, buff)
        addr = 0
        x = self.xfer
        if x is not None and x[0] == "write" and sector >= self.data_start:
            p = self.pos
            if x[4][p:p + count] == buff:  # sectors taken straight from the user buffer
                addr = x[3] + p
                self.pos += count
        try:
            step = self.max_bytes or count
            for off in range(0, count, step):
                self.dev.write(sector + off // FF_SECTOR, buff[off:off + step], buf_addr=addr + off if addr else 0)
        except BaseException as e:
            self._failed(e)

    def _in_fat1(self, sector: int, count: int) -> bool:
        """A one-sector transfer of the first FAT while freed clusters are tracked (FatFs moves FAT sectors singly)."""
        return self.fat1 is not None and count == FF_SECTOR and self.fat1[0] <= sector < self.fat1[1]

    def _note_fat_write(self, sector: int, new: bytes) -> None:
        """Entries of the first FAT that go from in use to free: clusters a delete or truncation released."""
        old = self._fat_seen.get(sector)
        self._fat_seen[sector] = bytes(new)
        if old is None:
            return
        lo, _, width = self.fat1  # type: ignore[misc]
        mask = 0x0FFFFFFF if width == 4 else 0xFFFF
        first = (sector - lo) * (FF_SECTOR // width)
        for i in range(0, FF_SECTOR, width):
            if old[i:i + width] != new[i:i + width]:
                was = int.from_bytes(old[i:i + width], "little") & mask
                now = int.from_bytes(new[i:i + width], "little") & mask
                if was and not now and first + i // width >= 2:
                    self.freed.add(first + i // width)

    def take_freed_runs(self) -> list[tuple[int, int]]:
        """The freed clusters as (first cluster, count) runs, and forget them."""
        runs: list[tuple[int, int]] = []
        for c in sorted(self.freed):
            if runs and runs[-1][0] + runs[-1][1] == c:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((c, 1))
        self.freed.clear()
        return runs


def _release_volume() -> None:
    """f_mount(NULL) the mounted volume, if any, and free the slot (caller holds the lock)."""
    global _active, _mounted_partition
    part = _mounted_partition
    _mounted_partition = None
    _active = None
    if part is not None:
        try:
            part.unmount()
        except _ff.FatFSException:
            pass
    _registry.pop(0, None)


class FatFile(File):
    def __init__(self, fs: "FatFileSystem", path: str, mode: str, handle: Any, size: int) -> None:
        super().__init__(fs, path, mode)
        self._h = handle
        self._pos = 0
        self._size = size
        if mode == "a":
            self._seek_raw(size)

    def _seek_raw(self, offset: int) -> None:
        self.fs._call(f"seek in {self.path}", _ff.pyf_lseek, self._h, offset)
        self._pos = offset
        self._size = max(self._size, offset)

    def read(self, size: int = -1, *, buf_addr: int = 0) -> bytes:
        if self.closed:
            raise FileSystemError(f"{self.path}: file is closed")
        if size < 0:
            size = max(0, self._size - self._pos)
        if size == 0:
            return b""
        disk = self.fs._disk
        disk.begin("read", self._pos, size, buf_addr)
        try:
            ret, data = self.fs._lib(f"read {self.path}", _ff.pyf_read, self._h, size)
        finally:
            disk.end()
        self.fs._check(ret, f"read {self.path}")
        self._pos += len(data)
        return bytes(data)

    def write(self, data: bytes, *, buf_addr: int = 0) -> int:
        if self.closed:
            raise FileSystemError(f"{self.path}: file is closed")
        if self.mode == "r":
            raise FileSystemError(f"{self.path}: opened read-only")
        if self.mode == "a" and self._pos != self._size:
            self._seek_raw(self._size)
        if not data:
            return 0
        data = bytes(data)
        disk = self.fs._disk
        disk.begin("write", self._pos, len(data), buf_addr, data)
        try:
            ret, written = self.fs._lib(f"write {self.path}", _ff.pyf_write, self._h, data)
        except _ff.FatFSException as e:
            ret, written = e.code, 0
        finally:
            disk.end()
        self.fs._check(ret, f"write {self.path}")
        self._pos += written
        self._size = max(self._size, self._pos)
        if written < len(data):
            raise FileSystemError(f"write {self.path}: volume full ({written} of {len(data)} B written)")
        return written

    def seek(self, offset: int, whence: int = SEEK_SET) -> int:
        base = {SEEK_SET: 0, SEEK_CUR: self._pos, SEEK_END: self._size}[whence]
        target = base + offset
        if target < 0:
            raise FileSystemError(f"{self.path}: seek before the start of the file")
        if target > self._size and self.mode == "r":
            target = self._size
        self._seek_raw(target)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def _file_size(self) -> int:
        return self._size

    def _truncate(self, size: int) -> None:
        """f_lseek to ``size`` + f_truncate (FatFs cuts at the file pointer), then back to the old position if it
        is still inside the file; the freed clusters are discarded (FF_USE_TRIM), as after a remove."""
        pos = self._pos
        self._seek_raw(size)
        self.fs._call(f"truncate {self.path}", _ff.pyf_truncate, self._h)
        self._size = size
        self.fs._trim_freed()
        if pos < size:
            self._seek_raw(pos)

    def _sync(self) -> None:
        """f_sync: write back the file's sector buffer and its directory entry (size, first cluster)."""
        self.fs._call(f"sync {self.path}", _ff.pyf_sync, self._h)

    def _close(self) -> None:
        self.fs._call(f"close {self.path}", _ff.pyf_close, self._h)
        self.fs._open_files.discard(self)
        self.fs._trim_freed()  # frees whose FAT sector FatFs wrote back only now


class FatFileSystem(FileSystem):
    kind = "fat"
    file_class = FatFile

    def __init__(self, device: BlockDevice, config: FatConfig = FatConfig(), *, where: str = "fat") -> None:
        super().__init__(device)
        self.config = config
        self.where = where
        ss = device.geometry.sector_size
        if ss == FF_SECTOR:
            self.volume_device = device
        elif ss % FF_SECTOR == 0:
            self.volume_device = SectorSizeBridge(device)
        else:
            raise ConfigError(f"FAT needs 512-byte or larger power-of-two sectors, device has {ss} B")
        if config.sector_size_bytes != ss:
            raise ConfigError(f"{where}.sector_size_bytes = {config.sector_size_bytes} B but the device has {ss} B "
                              "sectors")
        self._disk = _FatDisk(self)
        self._partition: Any = None
        self._open_files: set[FatFile] = set()
        self._interrupted = False
        self.layout: fatformat.FatLayout | None = None

    # ---- format --------------------------------------------------------------------
    def plan_layout(self) -> fatformat.FatLayout:
        """The layout :meth:`format` writes, in FatFs' 512-byte sectors; computed without touching the device.

        Raises ConfigError, naming the field, for anything FatFs could not mount."""
        return plan_volume(self.device.geometry, self.config, where=self.where)

    def capacity_bytes(self) -> int:
        """Bytes of file data the formatted volume holds."""
        return volume_capacity_bytes(self.plan_layout())

    def _format(self) -> None:
        layout = self.plan_layout()
        if self.config.trim_on_format:
            self.volume_device.trim(layout.volume_start, layout.volume_sectors)
        fatformat.write_volume(self.volume_device, layout)

    # ---- mount ---------------------------------------------------------------------
    def _mount(self) -> None:
        global _active, _mounted_partition
        self.layout = fatformat.read_layout(self.volume_device)
        self._disk.data_start = self.layout.data_start
        lay = self.layout
        if self.config.trim_freed_clusters and lay.fat_type in (16, 32):
            self._disk.fat1 = (lay.fat_start, lay.fat_start + lay.fat_sectors, lay.fat_type // 8)
        self._disk._fat_seen.clear()
        self._disk.freed.clear()
        self._disk.failure = None  # mounted again: FatFs reads the volume afresh
        with _volume_lock:
            if _active is not None and _active() is not None and _active() is not self:
                raise FileSystemError("another FAT volume is mounted in this process (FatFs in fatfs-ng has "
                                      "one volume); unmount it first")
            _release_volume()  # a volume whose FatFileSystem was dropped without unmount
            self._partition = _ff.Partition(self._disk)
            try:
                self._lib("mount", self._partition.mount)
            except _ff.FatFSException as e:
                _registry.pop(0, None)
                raise FileSystemError(f"cannot mount FAT volume: {_FR_NAMES.get(e.code, e.code)}") from None
            _active = weakref.ref(self)
            _mounted_partition = self._partition

    def _unmount(self) -> None:
        if self._interrupted:
            raise KeyboardInterrupt
        if self._disk.failure is not None:  # after a disk error nothing more is written: let the volume go
            self._crash()
            self._disk.failure = None
            return
        for f in list(self._open_files):
            f.close()
        with _volume_lock:
            _release_volume()
        self.volume_device.sync()

    def _crash(self) -> None:
        # FatFs' f_mount(NULL) only unregisters the volume: nothing is written, open files are abandoned
        self._open_files.clear()
        with _volume_lock:
            if _active is not None and _active() is self:
                _release_volume()

    # ---- files ---------------------------------------------------------------------
    def _p(self, path: str) -> bytes:
        try:
            return self._partition._adjust_path(path)
        except UnicodeEncodeError:
            raise FileSystemError(f"FAT path {path!r} must be ASCII") from None

    def _lib(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """A call into FatFs. A disk callback that failed (its device raised) fails the call with that error; the
        volume in memory is then as FatFs left it after a disk it could not see fail, so every later call is
        refused until it is mounted again. A Ctrl-C meanwhile stops the callbacks and is raised when FatFs
        returns (fs/interrupts.py); every later call raises it again."""
        if self._interrupted:  # after a Ctrl-C the volume is left as FatFs left it: nothing more runs
            raise KeyboardInterrupt
        failed = self._disk.failure
        if failed is not None:
            raise FileSystemError(f"{what}: the volume had a disk error ({failed}); mount it again")
        try:
            with DeferredSigint():
                out = fn(*args)
        except KeyboardInterrupt:
            self._interrupted = True
            raise
        failed = self._disk.failure
        if failed is not None:
            if not isinstance(failed, Exception):  # a KeyboardInterrupt raised in a callback some other way
                self._interrupted = True
                raise failed
            raise FileSystemError(f"{what}: {failed}")
        return out

    def _call(self, what: str, fn: Callable[..., int], *args: Any) -> None:
        """A FatFs call that answers with a result code: FileSystemError naming ``what`` unless it is FR_OK."""
        self._check(self._lib(what, fn, *args), what)

    def _check(self, ret: int, what: str) -> None:
        if ret:
            raise FileSystemError(f"{what}: {_FR_NAMES.get(ret, f'FatFs error {ret}')}")

    def _open(self, path: str, mode: str) -> File:
        h = _ff.FIL_Handle()
        self._call(f"open {path}", _ff.pyf_open, h, self._p(path), _MODE_FLAGS[mode])
        if mode == "w":  # creating over an existing file frees its clusters
            self._trim_freed()
        size = 0 if mode == "w" else self._stat(path).size
        f = FatFile(self, path, mode, h, size)
        self._open_files.add(f)
        return f

    def _stat(self, path: str) -> FileStat:
        if path == "/":
            return FileStat("/", 0, True)
        info = _ff.FILINFO_Handle()
        self._call(f"stat {path}", _ff.pyf_stat, self._p(path), info)
        return FileStat(path, info.get_size(), info.is_directory())

    def _remove(self, path: str) -> None:
        self._call(f"remove {path}", _ff.pyf_unlink, self._p(path))
        self._trim_freed()

    def _trim_freed(self) -> None:
        """Discard what the last call freed, as FatFs' remove_chain does with FF_USE_TRIM (FAT12: not tracked)."""
        lay = self.layout
        if lay is None or self._disk.fat1 is None:
            return
        spc = lay.sectors_per_cluster
        for first, n in self._disk.take_freed_runs():
            self.volume_device.trim(lay.data_start + (first - 2) * spc, n * spc)

    def _listdir(self, path: str) -> list[str]:
        d, info = _ff.DIR_Handle(), _ff.FILINFO_Handle()
        self._call(f"list {path}", _ff.pyf_opendir, d, self._p(path))
        names = []
        try:
            while True:
                self._call(f"list {path}", _ff.pyf_readdir, d, info)
                name = info.get_name()
                if not name:
                    break
                names.append(name)
        finally:
            self._lib(f"list {path}", _ff.pyf_closedir, d)
        return names

    def _mkdir(self, path: str) -> None:
        self._call(f"mkdir {path}", _ff.pyf_mkdir, self._p(path))

    def _rename(self, old: str, new: str) -> None:
        """f_rename; where ``new`` is a file already (FR_EXIST), f_unlink it and f_rename again, as MicroPython's
        VFS does (ESP-IDF's returns EEXIST)."""
        ret = self._lib(f"rename {old} to {new}", _ff.pyf_rename, self._p(old), self._p(new))
        if ret == _FR_EXIST:
            if self._stat(old).is_dir or self._stat(new).is_dir:
                raise FileSystemError(f"rename {old} to {new}: {new} exists (a directory is never replaced, nor "
                                      f"replaces a file)")
            self._remove(new)
            ret = self._lib(f"rename {old} to {new}", _ff.pyf_rename, self._p(old), self._p(new))
        self._check(ret, f"rename {old} to {new}")

    def describe(self) -> dict[str, Any]:
        d = {"kind": self.kind, "config": to_mapping(self.config)}
        if self.layout is not None:
            lay = self.layout
            d["layout"] = {"fat_type": f"FAT{lay.fat_type}", "cluster_bytes": lay.cluster_bytes,
                           "volume_start_lba": lay.volume_start, "data_start_lba": lay.data_start,
                           "clusters": lay.cluster_count}
        return d
