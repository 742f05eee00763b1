"""Real media on Linux: a block device (SD card reader, loop device) or an image file.

:class:`LinuxBlockDevice` opens the target with ``O_DIRECT`` so every read and
write reaches the medium instead of the page cache.  O_DIRECT needs buffers,
offsets and lengths aligned to the logical block size; buffers here come from
anonymous ``mmap`` (page aligned).  Where a filesystem refuses O_DIRECT
(``EINVAL`` on open or on the first read), the device falls back to buffered
I/O and says so in :attr:`LinuxBlockDevice.warnings`.

Safety: read-only unless ``allow_write``; with ``allow_write`` the target is
checked by :func:`sdbench.media.safety.check_writable_target` (mounted, root,
swap, held by LVM/RAID...) and block devices are opened with ``O_EXCL`` so the
kernel refuses one it has claimed.  All access is confined to the window
``[offset_bytes, offset_bytes + size_bytes)``; LBA 0 is the window's first
sector.
"""
from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import struct
import threading
from typing import Any

from ..clock import WallClock
from ..errors import SdbenchError
from .base import BlockDevice, BlockDeviceError, Geometry, OutOfRangeError
from .safety import TargetCheck, check_opened, check_writable_target, stat_target

# <linux/fs.h> ioctls
BLKSSZGET = 0x1268          # logical block size (int)
BLKPBSZGET = 0x127B         # physical block size (unsigned int)
BLKGETSIZE64 = 0x80081272   # size in bytes (u64)
BLKDISCARD = 0x1277         # discard a byte range (u64 start, u64 length)

PAGE_BYTES = mmap.PAGESIZE


class AlignedBuffer:
    """Page-aligned memory from an anonymous mapping, as O_DIRECT needs.

    ``view`` is a writable memoryview over the whole buffer; ``iov(n)`` a
    one-element list usable with ``os.preadv``/``os.pwritev`` (build them once
    and reuse them in hot loops: no per-call allocation).
    """

    def __init__(self, size_bytes: int) -> None:
        if size_bytes <= 0:
            raise ValueError("buffer size must be positive")
        self.size = size_bytes
        self._map = mmap.mmap(-1, -(-size_bytes // PAGE_BYTES) * PAGE_BYTES)
        self.view = memoryview(self._map)[:size_bytes]

    def iov(self, n: int | None = None, start: int = 0) -> list[memoryview]:
        end = self.size if n is None else start + n
        return [self.view[start:end]]

    def close(self) -> None:
        if self._map is not None:
            self.view.release()
            try:
                self._map.close()
            except BufferError:  # someone still holds a slice; the GC frees it later
                pass
            self._map = None  # type: ignore[assignment]


def _ioctl_int(fd: int, req: int, fmt: str) -> int:
    buf = bytearray(struct.calcsize(fmt))
    fcntl.ioctl(fd, req, buf)
    return struct.unpack(fmt, buf)[0]


def _open_error(path: str, e: OSError, writing: bool) -> SdbenchError:
    if e.errno in (errno.EACCES, errno.EPERM):
        return SdbenchError(f"no permission to open {path} for {'writing' if writing else 'reading'} "
                            f"(run as root or join the 'disk' group)")
    if e.errno == errno.EBUSY:
        return SdbenchError(f"{path} is busy: the kernel has claimed it (mounted, part of LVM/RAID, or opened "
                            f"exclusively by another program)")
    if e.errno == errno.EROFS:
        return SdbenchError(f"cannot write to {path}: read-only (write-protect switch or ro flag)")
    if e.errno in (errno.ENXIO, errno.ENOMEDIUM):
        return SdbenchError(f"{path}: no medium (is the card inserted?)")
    if e.errno == errno.ENOENT:
        return SdbenchError(f"no such device or file: {path}")
    return SdbenchError(f"cannot open {path}: {e.strerror}")


class LinuxBlockDevice(BlockDevice):
    kind = "linux"

    def __init__(self, path: str | os.PathLike[str], *, allow_write: bool = False, offset_bytes: int = 0,
                 size_bytes: int | None = None, direct: bool = True, sector_size: int | None = None) -> None:
        self.path = os.fspath(path)
        self.warnings: list[str] = []
        self.safety: TargetCheck | None = None
        self._fd = -1
        self._local = threading.local()
        self._stats_lock = threading.Lock()
        p = self.path
        st = stat_target(p)
        if stat.S_ISDIR(st.st_mode):
            raise SdbenchError(f"{p} is a directory, not a block device or image file (run, stream, preset and fio "
                               f"take a mounted filesystem's directory with --dir)")
        self.is_block = stat.S_ISBLK(st.st_mode)
        if not (self.is_block or stat.S_ISREG(st.st_mode)):
            raise SdbenchError(f"{p} is neither a block device nor a regular file")
        if allow_write:
            self.safety = check_writable_target(p)

        flags = (os.O_RDWR if allow_write else os.O_RDONLY) | os.O_CLOEXEC
        if self.is_block and allow_write:
            flags |= os.O_EXCL  # on a block device: fail with EBUSY if the kernel has claimed it
        self.direct = bool(direct)
        self._flags = flags
        self._fd = self._open(flags, allow_write)
        if self.safety is not None:
            try:
                check_opened(self._fd, self.safety)
            except BaseException:
                self._close_fd()
                raise

        if self.is_block:
            self.device_size_bytes = _ioctl_int(self._fd, BLKGETSIZE64, "Q")
            self.logical_block_bytes = _ioctl_int(self._fd, BLKSSZGET, "i")
            self.physical_block_bytes = _ioctl_int(self._fd, BLKPBSZGET, "I")
        else:
            self.device_size_bytes = os.fstat(self._fd).st_size
            self.logical_block_bytes = 512
            self.physical_block_bytes = 512
        ss = sector_size or self.logical_block_bytes
        if ss <= 0 or ss % self.logical_block_bytes:
            self._close_fd()
            raise SdbenchError(f"sector size {ss} B is not a multiple of the logical block size "
                               f"{self.logical_block_bytes} B of {p}")
        if offset_bytes < 0 or offset_bytes % ss:
            self._close_fd()
            raise SdbenchError(f"offset {offset_bytes} B is not a non-negative multiple of the {ss}-byte sector")
        if size_bytes is None:
            size_bytes = max(self.device_size_bytes - offset_bytes, 0) // ss * ss
            if size_bytes <= 0:
                self._close_fd()
                raise SdbenchError(f"{p} is too small: {self.device_size_bytes} B, nothing left after "
                                   f"offset {offset_bytes} B (need at least one {ss}-byte sector)")
        if size_bytes <= 0 or size_bytes % ss:
            self._close_fd()
            raise SdbenchError(f"size {size_bytes} B is not a positive multiple of the {ss}-byte sector")
        if offset_bytes + size_bytes > self.device_size_bytes:
            self._close_fd()
            raise SdbenchError(f"{p} is too small: the range [{offset_bytes}, {offset_bytes + size_bytes}) B needs "
                               f"{offset_bytes + size_bytes} B but it has {self.device_size_bytes} B")
        self.offset_bytes = offset_bytes
        self.window_bytes = size_bytes

        if self.direct:
            self._probe_direct(ss)
        super().__init__(Geometry(sector_size=ss, sector_count=size_bytes // ss), WallClock(),
                         read_only=not allow_write)

    # ---- opening ----------------------------------------------------------------------
    def _open(self, flags: int, writing: bool) -> int:
        if self.direct:
            try:
                return os.open(self.path, flags | os.O_DIRECT)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise _open_error(self.path, e, writing) from None
                self._fall_back("the filesystem refuses O_DIRECT on open")
        try:
            return os.open(self.path, flags)
        except OSError as e:
            raise _open_error(self.path, e, writing) from None

    def _fall_back(self, why: str) -> None:
        self.direct = False
        self.warnings.append(f"{self.path}: {why}; using buffered I/O (page cache dropped with "
                             f"posix_fadvise, results may still include caching)")

    def _probe_direct(self, ss: int) -> None:
        """Some filesystems accept O_DIRECT on open and fail the first transfer: try one."""
        buf = AlignedBuffer(ss)
        try:
            os.preadv(self._fd, buf.iov(), self.offset_bytes)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise BlockDeviceError(f"cannot read {self.path}: {e.strerror}") from None
            os.close(self._fd)
            self._fall_back("O_DIRECT reads fail with EINVAL")
            self._fd = self._open(self._flags, bool(self._flags & os.O_RDWR))
        finally:
            buf.close()

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # ---- fast paths for benchmark loops -------------------------------------------------
    @property
    def fd(self) -> int:
        """The open descriptor (absolute offsets: add :attr:`offset_bytes`)."""
        return self._fd

    @property
    def alignment_bytes(self) -> int:
        """Offset/length/buffer alignment every transfer must keep."""
        return self.logical_block_bytes if self.direct else 1

    def check_region(self, offset_bytes: int, size_bytes: int) -> None:
        """Raise unless [offset, offset+size) (relative to the window) lies inside the window."""
        if offset_bytes < 0 or size_bytes < 0 or offset_bytes + size_bytes > self.window_bytes:
            raise OutOfRangeError(f"{self.path}: range [{offset_bytes}, {offset_bytes + size_bytes}) B is outside "
                                  f"the {self.window_bytes}-byte window")

    def _count(self, kind: str, nbytes: int) -> None:
        with self._stats_lock:
            if kind == "r":
                self.stats.reads += 1
                self.stats.bytes_read += nbytes
            else:
                self.stats.writes += 1
                self.stats.bytes_written += nbytes

    def read_into(self, lba: int, buf: memoryview) -> int:
        """Read ``len(buf)`` bytes at ``lba`` into an aligned buffer (no copy)."""
        ss = self.geometry.sector_size
        n = len(buf)
        if n % ss:
            raise BlockDeviceError(f"read of {n} B is not a whole number of {ss}-byte sectors")
        self._check_range(lba, n // ss)
        self._transfer(os.preadv, buf, lba * ss, "read")
        self._count("r", n)
        return n

    def write_from(self, lba: int, buf: memoryview) -> int:
        """Write an aligned buffer at ``lba`` (no copy)."""
        ss = self.geometry.sector_size
        n = len(buf)
        self._check_writable()
        if n % ss:
            raise BlockDeviceError(f"write of {n} B is not a whole number of {ss}-byte sectors")
        self._check_range(lba, n // ss)
        self._transfer(os.pwritev, buf, lba * ss, "write")
        self._count("w", n)
        return n

    def _transfer(self, fn: Any, buf: memoryview, rel_off: int, what: str) -> None:
        off = self.offset_bytes + rel_off
        done = 0
        n = len(buf)
        while done < n:
            try:
                got = fn(self._fd, [buf[done:]], off + done)
            except OSError as e:
                raise BlockDeviceError(f"{what} of {n} B at byte {off} of {self.path} failed: {e.strerror}") from None
            if got <= 0:
                raise BlockDeviceError(f"short {what} at byte {off + done} of {self.path} (end of device?)")
            done += got

    def _scratch(self, n: int) -> AlignedBuffer:
        b = getattr(self._local, "buf", None)
        if b is None or b.size < n:
            if b is not None:
                b.close()
            b = AlignedBuffer(max(n, 64 * 1024))
            self._local.buf = b
        return b

    # ---- BlockDevice primitives ---------------------------------------------------------
    def _read(self, lba: int, count: int, buf_addr: int) -> bytes:
        n = count * self.geometry.sector_size
        b = self._scratch(n)
        self._transfer(os.preadv, b.view[:n], lba * self.geometry.sector_size, "read")
        return bytes(b.view[:n])

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        n = len(data)
        b = self._scratch(n)
        b.view[:n] = data
        self._transfer(os.pwritev, b.view[:n], lba * self.geometry.sector_size, "write")

    def _trim(self, lba: int, count: int) -> None:
        # a hint: discard on block devices that support it, nothing on files
        if not self.is_block:
            return
        ss = self.geometry.sector_size
        try:
            fcntl.ioctl(self._fd, BLKDISCARD, struct.pack("QQ", self.offset_bytes + lba * ss, count * ss))
        except OSError:
            pass

    def _sync(self) -> None:
        try:
            os.fdatasync(self._fd)
        except OSError as e:
            raise BlockDeviceError(f"fdatasync of {self.path} failed: {e.strerror}") from None

    def drop_cache(self) -> bool:
        """Ask the kernel to forget cached pages of the window (buffered mode). True if it worked."""
        try:
            os.posix_fadvise(self._fd, self.offset_bytes, self.window_bytes, os.POSIX_FADV_DONTNEED)
            return True
        except OSError:
            return False

    def _close(self) -> None:
        b = getattr(self._local, "buf", None)
        if b is not None:
            b.close()
            self._local.buf = None
        self._close_fd()

    def reopen_fd(self, *, direct: bool, extra_flags: int = 0) -> int:
        """A second descriptor on the same target with/without O_DIRECT (caller closes it); ``extra_flags``:
        more open flags (O_SYNC, O_DSYNC).

        Never O_EXCL: this object's own descriptor already holds the claim.
        """
        flags = (self._flags & ~os.O_EXCL) | extra_flags
        try:
            return os.open(self.path, flags | (os.O_DIRECT if direct else 0))
        except OSError as e:
            raise _open_error(self.path, e, bool(flags & os.O_RDWR)) from None

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update({
            "path": self.path, "target": "block device" if self.is_block else "image file",
            "direct": self.direct, "offset_bytes": self.offset_bytes, "window_bytes": self.window_bytes,
            "device_size_bytes": self.device_size_bytes, "logical_block_bytes": self.logical_block_bytes,
            "physical_block_bytes": self.physical_block_bytes,
        })
        if self.warnings:
            d["warnings"] = list(self.warnings)
        return d

    def __del__(self) -> None:  # pragma: no cover - safety net for forgotten close()
        try:
            if self._fd >= 0:
                os.close(self._fd)
        except Exception:
            pass
