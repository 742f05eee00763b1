"""Sequential raw sector throughput: the board-level figure behind many blog
posts ("raw sectors write/read, MB/s").

``total_bytes`` are written in calls of ``chunk_bytes`` (one driver request
each, e.g. ``sdmmc_write_sectors``), starting at ``start_lba``, then read
back the same way; ``passes`` repeats both.  Figures are MB/s with
MB = 10^6 bytes (the unit such posts use), per call averaged.
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import ConfigError
from ..fs.raw import RawVolume
from ..media.base import BlockDevice
from ..options import opt
from ..records import Row
from ..runner import Context


@dataclass(frozen=True)
class RawSeqConfig:
    chunk_bytes: int = opt(4096, unit="B", min=512, max=16 << 20,
                           help="bytes per driver request (multiple of the sector size; held in memory)")
    total_bytes: int = opt(1 << 20, unit="B", min=512, help="bytes written and read per pass")
    passes: int = opt(1, min=1, max=1000, help="write+read passes")
    start_lba: int = opt(0, unit="sector", min=0, help="first sector; 0 = the middle of the card")
    label_prefix: str = opt("raw sectors", help="row labels: '<prefix> write' and '<prefix> read'")


def mb_per_s(nbytes: int):
    return lambda row: (nbytes / 1e6) / (row.time_ms / 1000.0) if row.time_ms > 0 else 0.0


def start_lba(device: BlockDevice, cfg: RawSeqConfig) -> int:
    """First sector of the test: ``start_lba``, or the middle of the card (8192-sector aligned)."""
    return cfg.start_lba or (device.geometry.sector_count // 2) // 8192 * 8192


def preflight(device: BlockDevice, cfg: RawSeqConfig) -> None:
    """Refuse, before any I/O, requests the device cannot take: ConfigError naming the option."""
    g = device.geometry
    ss = g.sector_size
    if cfg.chunk_bytes % ss:
        raise ConfigError(f"raw.chunk_bytes = {cfg.chunk_bytes} B is not a whole number of the device's {ss} B "
                          f"sectors")
    if cfg.total_bytes % cfg.chunk_bytes:
        raise ConfigError(f"raw.total_bytes = {cfg.total_bytes} B is not a multiple of raw.chunk_bytes = "
                          f"{cfg.chunk_bytes} B")
    start = start_lba(device, cfg)
    if start >= g.sector_count:
        raise ConfigError(f"raw.start_lba = {start} is past the end of the device ({g.sector_count} sectors of "
                          f"{ss} B)")
    room = (g.sector_count - start) * ss
    if cfg.total_bytes > room:
        where = "raw.start_lba" if cfg.start_lba else "the middle of the device"
        raise ConfigError(f"raw.total_bytes = {cfg.total_bytes} B does not fit: from sector {start} ({where}) "
                          f"the {g.size_bytes} B device has {room} B left")


def run(device: BlockDevice, cfg: RawSeqConfig, ctx: Context, *, seed: int = 1) -> Iterator[Row]:
    preflight(device, cfg)
    ss = device.geometry.sector_size
    vol = RawVolume(device)
    start = start_lba(device, cfg)
    calls = cfg.total_bytes // cfg.chunk_bytes
    data = random.Random(seed).randbytes(cfg.chunk_bytes)
    w = ctx.row(f"{cfg.label_prefix} write", "write", cfg.chunk_bytes, (device,), unit="MB/s",
                value_fn=mb_per_s(cfg.chunk_bytes))
    r = ctx.row(f"{cfg.label_prefix} read", "read", cfg.chunk_bytes, (device,), unit="MB/s",
                value_fn=mb_per_s(cfg.chunk_bytes))
    for _ in range(cfg.passes):
        for i in range(calls):
            off = start * ss + i * cfg.chunk_bytes
            w.time(lambda: vol.write(off, data))
        for i in range(calls):
            off = start * ss + i * cfg.chunk_bytes
            r.time(lambda: vol.read(off, cfg.chunk_bytes))
    yield w.finish()
    yield r.finish()
