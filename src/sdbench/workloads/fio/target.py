"""Targets of a job: the descriptor and byte region the I/O loop works on.

A job runs on a :class:`~sdbench.media.linux.LinuxBlockDevice` (raw device or
image file) or a :class:`~sdbench.fs.hostdir.DirTarget` (a file in a
mounted directory); :func:`_open_port` turns either into a :class:`_Port`.
Any other :class:`~sdbench.media.base.BlockDevice` becomes a
:class:`~.blockport.BlockPort` (its region, no descriptor).
"""
from __future__ import annotations

import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import ConfigError, SdbenchError
from ...media.base import BlockDevice, ReadOnlyError
from ...fs.hostdir import DirTarget
from ...media.linux import AlignedBuffer, LinuxBlockDevice
from .blockport import BlockPort, open_block_port
from .jobs import JobConfig

#: LinuxBlockDevice and DirTarget run on descriptors; any other BlockDevice through its read/write
Target = LinuxBlockDevice | DirTarget | BlockDevice
#: progress callback: (what is running, fraction 0..1 of it)
ProgressFn = Callable[[str, float], None]


@dataclass
class _Port:
    fd: int
    base: int          # absolute byte offset of the job region in the descriptor
    length: int        # region bytes
    direct: bool
    owns_fd: bool
    drop: Callable[[], None]
    warnings: list[str] = field(default_factory=list)

    def close(self) -> None:
        if self.owns_fd:
            os.close(self.fd)


def _fill_random(buf: AlignedBuffer, seed: int) -> None:
    rng = random.Random(seed)
    step = 1 << 20
    for i in range(0, buf.size, step):
        n = min(step, buf.size - i)
        buf.view[i:i + n] = rng.randbytes(n)


def dir_file_name(job_name: str) -> str:
    return "/sdbench-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", job_name) + ".bin"


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


def _open_port(target: Target, job: JobConfig) -> _Port | BlockPort:
    bs = job.bs_bytes
    if isinstance(target, LinuxBlockDevice):
        if job.writes and target.read_only:
            raise ReadOnlyError(f"{target.path} is open read-only; writing needs allow_write (--allow-write)")
        size = job.size_bytes or (target.window_bytes - job.offset_bytes) // bs * bs
        if size <= 0 or job.offset_bytes + size > target.window_bytes:
            raise SdbenchError(f"{target.path} is too small for job {job.name}: region "
                               f"[{job.offset_bytes}, {job.offset_bytes + size}) B, target {target.window_bytes} B")
        target.check_region(job.offset_bytes, size)
        warnings = []
        if job.direct and not target.direct:
            fd, owns, direct = target.fd, False, False
            warnings.append(f"job {job.name}: O_DIRECT is not available on {target.path}; buffered I/O")
        elif job.direct == target.direct:
            fd, owns, direct = target.fd, False, target.direct
        else:
            fd, owns, direct = target.reopen_fd(direct=job.direct), True, job.direct
        align = target.logical_block_bytes
        if direct and (bs % align or job.offset_bytes % align or target.offset_bytes % align):
            if owns:
                os.close(fd)
            raise SdbenchError(f"bs and offset must be multiples of the {align}-byte logical block size of "
                               f"{target.path} for O_DIRECT")
        base = target.offset_bytes + job.offset_bytes

        def drop() -> None:
            try:
                os.posix_fadvise(fd, base, size, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
        return _Port(fd, base, size // bs * bs, direct, owns, drop, warnings)

    if isinstance(target, DirTarget):
        if not job.size_bytes:
            raise ConfigError(f"job {job.name}: size is needed on a directory target")
        size = job.size_bytes // bs * bs
        path = dir_file_name(job.name)
        lay_out_file(target, path, job.offset_bytes + size, job.seed)
        fd, direct = target.open_fd(path, write=job.writes, direct=job.direct)
        warnings = []
        if job.direct and not direct:
            warnings.append(f"job {job.name}: {target.root} refuses O_DIRECT; buffered I/O with fsync and "
                            f"posix_fadvise(DONTNEED)")
        align = target.direct_align_bytes
        if direct and (bs % align or job.offset_bytes % align):
            os.close(fd)
            raise SdbenchError(f"bs and offset must be multiples of {align} B for O_DIRECT in {target.root}")

        def drop_dir() -> None:
            target.drop_caches_now()
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
        return _Port(fd, job.offset_bytes, size, direct, True, drop_dir, warnings)

    if isinstance(target, BlockDevice):
        return open_block_port(target, job)
    raise SdbenchError(f"fio jobs run on a block device or a DirTarget, not on {type(target).__name__}")
