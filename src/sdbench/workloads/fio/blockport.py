"""The region of a job on a generic :class:`~sdbench.media.base.BlockDevice`, checked before any I/O.

Any BlockDevice other than a :class:`~sdbench.media.linux.LinuxBlockDevice`
(a simulated card, a memory device, a cache or bridge around one) is driven
through its own ``read``/``write``, one request at a time, timed on its own
clock.  :func:`open_block_port` refuses what that cannot do -- a read-only
device for a writing job, a region past the end, sizes off the sector or
read/program granularity -- with one line, before the job touches the device.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...errors import ConfigError, SdbenchError
from ...media.base import BlockDevice, ReadOnlyError
from .jobs import JobConfig


@dataclass
class BlockPort:
    dev: BlockDevice
    first_lba: int     # first sector of the job region
    length: int        # region bytes (a whole number of blocks)
    warnings: list[str] = field(default_factory=list)

    def close(self) -> None:
        """Nothing to release: the device stays open for the next job."""


def check_block_region(dev: BlockDevice, offset_bytes: int, size_bytes: int, unit_bytes: int, *,
                       what: str, reads: bool, writes: bool) -> None:
    """Raise unless ``size_bytes`` from ``offset_bytes`` fits ``dev`` in whole ``unit_bytes`` transfers."""
    g = dev.geometry
    if writes and dev.read_only:
        raise ReadOnlyError(f"{dev.kind} is read-only; {what} writes")
    if size_bytes <= 0 or offset_bytes + size_bytes > g.size_bytes:
        raise SdbenchError(f"{dev.kind} is too small for {what}: region [{offset_bytes}, "
                           f"{offset_bytes + size_bytes}) B, device {g.size_bytes} B")
    align = max([g.sector_size] + ([g.read_size] if reads else []) + ([g.prog_size] if writes else []))
    if unit_bytes % align or offset_bytes % align:
        raise ConfigError(f"{what}: block size ({unit_bytes} B) and offset ({offset_bytes} B) must be multiples "
                          f"of the {align}-byte {'sector' if align == g.sector_size else 'transfer'} size of "
                          f"{dev.kind}")


def job_region(job: JobConfig, target_bytes: int, clone: int = 0, *, cap: bool = False) -> tuple[int, int]:
    """(offset, size) of a clone's region in a target of ``target_bytes``: shares of the target resolved, the
    clone's increment added.  ``cap``: a size past the end of the target is cut there, as fio cuts it (otherwise
    it stays, and the target is too small)."""
    align = job.offset_align_bytes or job.min_bs
    off = job.offset_bytes
    if job.offset_pct:
        off = int(target_bytes * job.offset_pct / 100) // align * align
    inc = job.offset_increment_bytes
    if job.offset_increment_pct:
        inc = int(target_bytes * job.offset_increment_pct / 100) // align * align
    off += clone * inc
    size = job.size_bytes
    if job.size_pct:
        size = int(target_bytes * job.size_pct / 100) // job.min_bs * job.min_bs
    if job.fill_device or not size:
        size = max(0, target_bytes - off)
    if cap:
        size = max(0, min(size, target_bytes - off))
    return off, size


def open_block_port(dev: BlockDevice, job: JobConfig, clone: int = 0) -> BlockPort:
    off, size = job_region(job, dev.geometry.size_bytes, clone)
    bs = job.min_bs
    size = size // bs * bs
    check_block_region(dev, off, size, bs, what=f"job {job.name}",
                       reads=job.reads or job.verify != "none", writes=job.writes or job.trims)
    warnings = []
    if job.iodepth > 1:
        warnings.append(f"job {job.name}: iodepth {job.iodepth} on {dev.kind}: requests are served one at a time")
    return BlockPort(dev, off // dev.geometry.sector_size, size, warnings)


def clock_fields(target: Any) -> dict[str, str]:
    """A record's ``clock`` and ``source``: virtual time on a simulated device, wall time otherwise."""
    kind = getattr(getattr(target, "clock", None), "kind", "wall")
    return {"clock": kind, "source": "simulated" if kind == "virtual" else "measured"}
