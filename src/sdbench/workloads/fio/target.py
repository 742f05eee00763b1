"""Targets of a job: the descriptor(s) and byte region the I/O loop works on.

A job runs on a :class:`~sdbench.media.linux.LinuxBlockDevice` (raw device or
image file) or a :class:`~sdbench.fs.hostdir.DirTarget` (files in a mounted
directory); :func:`_open_port` turns either into a :class:`_Port`.  Any other
:class:`~sdbench.media.base.BlockDevice` becomes a :class:`~.blockport.BlockPort`
(its region, no descriptor).

Regions: ``offset`` (plus ``offset_increment`` per clone of ``numjobs``) and
``size`` of the device's window, or of each file in a directory.  On a
directory a job's files are named after it (``sdbench-<job>.bin``, with the
clone's and the file's number when there are several) unless ``filename``
names one; sdbench removes the files it created when the run ends (``unlink``:
when the job ends), and never writes a file it did not create.
"""
from __future__ import annotations

import errno
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import ConfigError, SdbenchError
from ...fs.hostdir import DirTarget
from ...media.base import BlockDevice, ReadOnlyError
from ...media.linux import AlignedBuffer, LinuxBlockDevice
from .blockport import BlockPort, job_region, open_block_port
from .jobs import JobConfig

#: LinuxBlockDevice and DirTarget run on descriptors; any other BlockDevice through its read/write
Target = LinuxBlockDevice | DirTarget | BlockDevice
#: progress callback: (what is running, fraction 0..1 of it)
ProgressFn = Callable[[str, float], None]

_O_SYNC = {"none": 0, "sync": os.O_SYNC, "dsync": os.O_DSYNC}
_WRITE_HINTS = {"none": 0, "short": 2, "medium": 3, "long": 4, "extreme": 5}
F_SET_RW_HINT = 1036


@dataclass
class FilePort:
    """One file of a job on a directory: its descriptor and length."""
    fd: int
    base: int
    length: int
    path: str


@dataclass
class _Port:
    fd: int
    base: int          # absolute byte offset of the job region in the descriptor
    length: int        # region bytes
    direct: bool
    owns_fd: bool
    drop: Callable[[], None]
    warnings: list[str] = field(default_factory=list)
    files: list[FilePort] = field(default_factory=list)
    on_close: Callable[[], None] | None = None

    def sync(self) -> None:
        """fsync the job's file(s) (fio's fsync_on_close)."""
        for fd in [f.fd for f in self.files] or [self.fd]:
            os.fsync(fd)

    def close(self) -> None:
        if self.owns_fd and not self.files:
            os.close(self.fd)
        for f in self.files:
            os.close(f.fd)
        if self.on_close is not None:
            self.on_close()


def _fill_random(buf: AlignedBuffer, seed: int) -> None:
    rng = random.Random(seed)
    step = 1 << 20
    for i in range(0, buf.size, step):
        n = min(step, buf.size - i)
        buf.view[i:i + n] = rng.randbytes(n)


def dir_file_name(job_name: str, clone: int = 0, filenum: int | None = None) -> str:
    """A job's file in a directory: ``/sdbench-<job>.bin`` (``.<clone>`` and ``.<file>`` when several)."""
    stem = "/sdbench-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", job_name)
    if clone or filenum is not None:
        stem += f".{clone}"
    if filenum is not None:
        stem += f".{filenum}"
    return stem + ".bin"


def lay_out_file(target: DirTarget, path: str, size_bytes: int, seed: int = 0) -> None:
    """Make ``path`` at least ``size_bytes`` long with random data, synced and out of the cache (untimed)."""
    host = target.host_path(path)
    have = os.path.getsize(host) if os.path.exists(host) else 0
    if have >= size_bytes:
        return
    st = os.statvfs(target.root)
    if (size_bytes - have) > st.f_bavail * st.f_frsize:
        raise SdbenchError(f"not enough free space in {target.root}: need {size_bytes - have} B more, "
                           f"{st.f_bavail * st.f_frsize} B free")
    fd, direct = target.open_fd(path, write=True, direct=True, create=True)
    chunk = 1 << 20
    buf = AlignedBuffer(chunk)
    _fill_random(buf, seed ^ 0x5DB)
    try:
        pos = have // chunk * chunk if direct else have
        while pos < size_bytes:
            n = min(chunk, size_bytes - pos)
            if direct and n % target.direct_align_bytes:
                os.close(fd)
                fd, direct = target.open_fd(path, write=True, direct=False)
            try:
                w = os.pwritev(fd, [buf.view[:n]], pos)
            except OSError as e:
                raise SdbenchError(f"cannot lay out {host}: {e.strerror}") from None
            pos += w
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
        buf.close()


STATX_WRITE_ATOMIC = 0x10000


def atomic_write_units(path: str) -> tuple[int, int] | None:
    """(smallest, largest) write the kernel can do atomically on ``path`` (statx), or None where it says nothing
    (an older kernel)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(256)
        if libc.statx(-100, os.fsencode(path), 0, STATX_WRITE_ATOMIC, buf) != 0:
            return None
    except (OSError, AttributeError):
        return None
    import struct

    mask = struct.unpack_from("<I", buf, 0)[0]
    if not mask & STATX_WRITE_ATOMIC:
        return (0, 0)
    return struct.unpack_from("<II", buf, 168)


def check_atomic(job: JobConfig, path: str) -> None:
    """atomic=1: refused before any I/O where the target cannot write the job's blocks atomically."""
    if not (job.atomic and job.writes):
        return
    units = atomic_write_units(path)
    bs = job.bs_for("write")
    if units is not None and not (units[0] and units[0] <= bs <= units[1]):
        have = "no atomic writes" if not units[1] else f"atomic writes of {units[0]}-{units[1]} B"
        raise SdbenchError(f"job {job.name}: atomic=1: {path} cannot write {bs} B atomically (the kernel reports "
                           f"{have})")


def check_hipri(job: JobConfig, path: str) -> None:
    """hipri (polled completions): refused before any I/O unless the target is a block device whose queue polls."""
    if not job.hipri:
        return
    import stat as stat_mod

    st = os.stat(path)
    poll = ""
    if stat_mod.S_ISBLK(st.st_mode):
        for q in (f"/sys/dev/block/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}/queue/io_poll",
                  f"/sys/dev/block/{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}/../queue/io_poll"):
            try:
                poll = open(q).read().strip()
                break
            except OSError:
                continue
    if poll != "1":
        raise ConfigError(f"job {job.name}: hipri: {path} cannot poll for completions (a block device whose queue "
                          f"has io_poll, e.g. NVMe with poll queues, can)")


def _apply_hints(fd: int, job: JobConfig, length: int, base: int) -> None:
    """posix_fadvise by the job's pattern (fadvise_hint) and the write-life hint (write_hint)."""
    if job.fadvise_hint != "off":
        advice = {"sequential": os.POSIX_FADV_SEQUENTIAL, "random": os.POSIX_FADV_RANDOM}.get(
            job.fadvise_hint, os.POSIX_FADV_RANDOM if job.random else os.POSIX_FADV_SEQUENTIAL)
        try:
            os.posix_fadvise(fd, base, length, advice)
        except OSError:
            pass
    if job.write_hint != "none" and job.writes:
        import fcntl
        import struct

        try:
            fcntl.fcntl(fd, F_SET_RW_HINT, struct.pack("Q", _WRITE_HINTS[job.write_hint]))
        except OSError as e:
            raise ConfigError(f"job {job.name}: write_hint: the target refuses it ({e.strerror})") from None


def _pre_read(fd: int, base: int, length: int) -> None:
    buf = AlignedBuffer(1 << 20)
    try:
        pos = 0
        while pos < length:
            got = os.preadv(fd, [buf.view[: min(1 << 20, length - pos)]], base + pos)
            if got <= 0:
                break
            pos += got
    finally:
        buf.close()


def _open_port(target: Target, job: JobConfig, clone: int = 0) -> _Port | BlockPort:
    if isinstance(target, LinuxBlockDevice):
        return _device_port(target, job, clone)
    if isinstance(target, DirTarget):
        return _dir_port(target, job, clone)
    if isinstance(target, BlockDevice):
        return open_block_port(target, job, clone)
    raise SdbenchError(f"fio jobs run on a block device or a DirTarget, not on {type(target).__name__}")


def _device_port(target: LinuxBlockDevice, job: JobConfig, clone: int) -> _Port:
    if job.writes and target.read_only:
        raise ReadOnlyError(f"{target.path} is open read-only; writing needs allow_write (--allow-write)")
    if job.trims and target.read_only:
        raise ReadOnlyError(f"{target.path} is open read-only; trimming needs allow_write (--allow-write)")
    check_atomic(job, target.path)
    check_hipri(job, target.path)
    if job.nrfiles > 1:
        raise ConfigError(f"job {job.name}: nrfiles = {job.nrfiles} needs a directory target (--dir); a device is "
                          f"one file")
    bs = job.min_bs
    off, size = job_region(job, target.window_bytes, clone)
    size = size // bs * bs
    if size < job.max_bs or off + size > target.window_bytes:
        raise SdbenchError(f"{target.path} is too small for job {job.name}: region [{off}, "
                           f"{off + max(size, job.max_bs)}) B, target {target.window_bytes} B")
    target.check_region(off, size)
    warnings = []
    flags = _O_SYNC[job.sync_mode]
    if job.direct and not target.direct:
        fd, owns, direct = target.fd, False, False
        warnings.append(f"job {job.name}: O_DIRECT is not available on {target.path}; buffered I/O")
        if flags:
            fd, owns = target.reopen_fd(direct=False, extra_flags=flags), True
    elif job.direct == target.direct and not flags:
        fd, owns, direct = target.fd, False, target.direct
    else:
        fd, owns, direct = target.reopen_fd(direct=job.direct and target.direct, extra_flags=flags), True, \
            job.direct and target.direct
    align = target.logical_block_bytes
    if direct and (bs % align or off % align or target.offset_bytes % align):
        if owns:
            os.close(fd)
        raise SdbenchError(f"bs and offset must be multiples of the {align}-byte logical block size of "
                           f"{target.path} for O_DIRECT")
    base = target.offset_bytes + off

    def drop() -> None:
        try:
            os.posix_fadvise(fd, base, size, os.POSIX_FADV_DONTNEED)
        except OSError:
            pass
    if job.invalidate and not direct:
        drop()
    _apply_hints(fd, job, size, base)
    if job.pre_read and not direct:
        _pre_read(fd, base, size)
    return _Port(fd, base, size, direct, owns, drop, warnings)


def _file_sizes(job: JobConfig, clone: int, region: int) -> list[int]:
    n = job.nrfiles
    if job.filesize_bytes:
        if job.filesize_max_bytes:
            rng = random.Random(job.seed * 7919 + clone)
            step = job.min_bs
            return [rng.randrange(job.filesize_bytes, job.filesize_max_bytes + 1) // step * step for _ in range(n)]
        return [job.filesize_bytes] * n
    return [region // n // job.min_bs * job.min_bs] * n


def _dir_names(target: DirTarget, job: JobConfig, clone: int) -> list[str]:
    if job.filename:
        names = [x for x in job.filename.split(":") if x]
        out = []
        for name in names:
            if os.path.isabs(name):
                rel = os.path.relpath(name, target.root)
                if rel.startswith(".."):
                    raise ConfigError(f"job {job.name}: filename = {name} is outside --dir {target.root}")
                name = rel
            if ".." in name.split("/"):
                raise ConfigError(f"job {job.name}: filename = {name}: '..' leaves the directory")
            out.append("/" + name)
        return out
    if job.nrfiles > 1:
        return [dir_file_name(job.name, clone, i) for i in range(job.nrfiles)]
    return [dir_file_name(job.name, clone)]


def _dir_port(target: DirTarget, job: JobConfig, clone: int) -> _Port:
    if not job.size_bytes and not job.filesize_bytes and not job.size_pct and not job.fill_device:
        raise ConfigError(f"job {job.name}: size is needed on a directory target")
    names = _dir_names(target, job, clone)
    if job.fill_device:
        st = os.statvfs(target.root)
        free = st.f_bavail * st.f_frsize * 9 // 10 // len(names)
        sizes = [free // job.min_bs * job.min_bs] * len(names)
    elif job.size_pct:
        st = os.statvfs(target.root)
        total = st.f_blocks * st.f_frsize
        sizes = _file_sizes(job, clone, int(total * job.size_pct / 100))
    else:
        sizes = _file_sizes(job, clone, job.size_bytes) if not job.filename or len(names) > 1 or \
            job.filesize_bytes else [job.size_bytes]
    if len(sizes) != len(names):
        sizes = [sizes[0]] * len(names)
    files: list[FilePort] = []
    warnings: list[str] = []
    direct_all = True
    flags = _O_SYNC[job.sync_mode]
    try:
        for name, size in zip(names, sizes):
            host = target.host_path(name)
            exists = os.path.exists(host)
            if exists and job.writes and host not in target.created:
                raise SdbenchError(f"job {job.name}: {name.lstrip('/')} exists in {target.root}, and this run did not "
                                   f"create it: a job writes only files its run creates (remove it, e.g. after a run "
                                   f"with --keep, or name another with filename=)")
            if not exists and not job.allow_file_create:
                raise SdbenchError(f"job {job.name}: {name.lstrip('/')} does not exist in {target.root} "
                                   f"(allow_file_create=0)")
            off = job.offset_bytes + clone * job.offset_increment_bytes
            if job.file_append and exists:
                off = os.path.getsize(host)
            length = size // job.min_bs * job.min_bs
            if length < job.max_bs:
                raise SdbenchError(f"job {job.name}: a file of {length} B is smaller than one block")
            if not exists or os.path.getsize(host) < off + length:
                if exists and not job.writes and host not in target.created:
                    raise SdbenchError(f"job {job.name}: {name.lstrip('/')} in {target.root} is shorter than the "
                                       f"region [{off}, {off + length}) B the job reads")
                if job.fill_device and job.writes:
                    fd0, _ = target.open_fd(name, write=True, direct=False, create=True)
                    os.close(fd0)
                else:
                    lay_out_file(target, name, off + length, job.seed + clone)
            fd, direct = target.open_fd(name, write=job.writes or job.trims, direct=job.direct)
            if flags:
                os.close(fd)
                fd, direct = target.open_fd(name, write=job.writes or job.trims, direct=job.direct,
                                            extra_flags=flags)
            direct_all = direct_all and direct
            check_atomic(job, host)
            check_hipri(job, host)
            align = target.direct_align_bytes
            if direct and (job.min_bs % align or off % align):
                os.close(fd)
                raise SdbenchError(f"bs and offset must be multiples of {align} B for O_DIRECT in {target.root}")
            _apply_hints(fd, job, length, off)
            files.append(FilePort(fd, off, length, host))
    except BaseException:
        for f in files:
            os.close(f.fd)
        raise
    if job.direct and not direct_all:
        warnings.append(f"job {job.name}: {target.root} refuses O_DIRECT; buffered I/O with fsync and "
                        f"posix_fadvise(DONTNEED)")

    def drop_dir() -> None:
        target.drop_caches_now()
        for f in files:
            try:
                os.posix_fadvise(f.fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
    if job.pre_read and not direct_all:
        for f in files:
            _pre_read(f.fd, f.base, f.length)

    def unlink() -> None:
        if job.unlink:
            for f in files:
                if f.path in target.created:
                    try:
                        os.unlink(f.path)
                    except OSError:
                        pass
                    target.created.discard(f.path)
    first = files[0]
    if len(files) == 1:
        port = _Port(first.fd, first.base, first.length, direct_all, True, drop_dir, warnings, [], unlink)
        port.files = []
        return port
    return _Port(first.fd, 0, sum(f.length for f in files), direct_all, True, drop_dir, warnings, files, unlink)


def enospc(e: OSError) -> bool:
    return e.errno in (errno.ENOSPC, errno.EDQUOT)
