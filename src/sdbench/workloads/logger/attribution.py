"""Why a call of the logger took long: what the stack counts around one call, split into shares by cause.

Nothing is added to the models: the clock's time breakdown (card, rtos, flash, host, bus), the card model's
pauses (exact time) and merges, the driver's commands (CMD38 = erase) and the block-op counters of the
filesystem's device.  The largest share names the stall (see the package's docstring for each cause).
"""
from __future__ import annotations

from typing import Any

from ...fs.base import FileSystem
from ...media.base import BlockDevice, bottom
from .config import ROTATE, SYNC

#: the names of stall causes, in the order ties are broken
CAUSES = ("card background pause", "card merge (garbage collection)", "erase wait", "FAT allocation",
          "LittleFS compaction", "flash program/erase busy", "other")


class Probe:
    """Snapshots of the counters the stack keeps (clock breakdown and commands, block-op counters of the
    filesystem's device and of the device at the bottom, the card model's pauses and merges)."""

    def __init__(self, clock: Any, fs: FileSystem) -> None:
        self.clock = clock
        dev = getattr(fs, "device", None)
        self.fs_dev: BlockDevice | None = dev if isinstance(dev, BlockDevice) else None
        low = bottom(self.fs_dev) if self.fs_dev is not None else None
        self.low: BlockDevice | None = low if low is not self.fs_dev else None
        card = getattr(low, "card", None)
        self.card = card if card is not None and hasattr(card, "pause_ns_total") else None
        self.profile = getattr(low, "profile", None) if self.card is not None else None
        self.fs_kind = getattr(fs, "kind", "")
        self.devices: tuple[BlockDevice, ...] = tuple(d for d in (self.fs_dev, self.low) if d is not None)

    def mark(self) -> tuple[Any, ...]:
        c = self.card
        return (self.clock.breakdown_ns(), self.clock.commands_snapshot(),
                self.fs_dev.stats.snapshot() if self.fs_dev is not None else None,
                self.low.stats.snapshot() if self.low is not None else None,
                (c.pauses, c.pause_ns_total, c.merges) if c is not None else None)

    def delta(self, m: tuple[Any, ...]) -> dict[str, Any]:
        bd0, cmd0, fs0, low0, card0 = m
        out: dict[str, Any] = {
            "breakdown_ns": _diff(self.clock.breakdown_ns(), bd0),
            "commands": _diff(self.clock.commands_snapshot(), cmd0),
            "fs_ops": _diff(self.fs_dev.stats.snapshot(), fs0) if self.fs_dev is not None else {},
            "device_ops": _diff(self.low.stats.snapshot(), low0) if self.low is not None else {},
        }
        if self.card is not None:
            c = self.card
            out["card"] = {"pauses": c.pauses - card0[0], "pause_ns": c.pause_ns_total - card0[1],
                           "merges": c.merges - card0[2]}
        return out


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


def _data_sector_writes(op: int, offset: int, nbytes: int, sector: int = 512) -> int:
    """Sector writes FatFs makes for the file's own data in a call: a write() flushes the buffered sector at
    each sector boundary it starts or crosses; a sync writes the buffered (partial) sector."""
    if op == SYNC:
        return 1 if offset > 0 else 0
    if op == ROTATE:
        return 1
    first = max(offset, 1)
    return max(0, (offset + nbytes - 1) // sector - (first - 1) // sector)


def attribute(d: dict[str, Any], dur_ns: int, *, op: int, offset: int, nbytes: int, fs_kind: str,
              profile: Any = None) -> tuple[str, dict[str, float]]:
    """The cause of one call and its time by cause (ns) from the counters of :meth:`Probe.delta`."""
    shares = dict.fromkeys(CAUSES, 0.0)
    bd = d["breakdown_ns"]
    if not bd:  # the wall clock accounts for nothing
        shares["other"] = float(dur_ns)
        return "other", shares
    cmds, fs_ops, low_ops = d["commands"], d["fs_ops"], d["device_ops"]
    card = d.get("card")
    rtos = float(bd.get("rtos", 0))
    busy_pool = 0.0   # ordinary busy: program, read access (SD card or NOR flash)
    if card is not None:  # a simulated SD card: its busy is "card", the tick waits of a long busy "rtos"
        wait = float(bd.get("card", 0)) + rtos
        pause = min(float(card["pause_ns"]), wait)
        shares["card background pause"] = pause
        rest = wait - pause
        n38 = cmds.get("CMD38", 0)
        if n38:
            erase_est = n38 * (profile.erase_busy_us if profile is not None else 0.0) * 1e3
            erase = min(rest, erase_est + (rtos if pause == 0 else 0.0))
            shares["erase wait"] = erase
            rest -= erase
        if card["merges"] and profile is not None:
            merge = max(0.0, rest - _program_estimate_ns(cmds, low_ops or fs_ops, profile))
            shares["card merge (garbage collection)"] = merge
            rest -= merge
        busy_pool = rest
    else:  # NOR flash (or a device without a card model): "flash" waits, "rtos" yields
        flash = float(bd.get("flash", 0)) + float(bd.get("card", 0))
        erases = (low_ops or fs_ops).get("erases", 0)
        if erases and rtos:
            shares["erase wait"] = rtos
            busy_pool = flash
        else:
            busy_pool = flash + rtos
    other_pool = float(sum(v for k, v in bd.items() if k not in ("card", "rtos", "flash")))
    frac = _fs_share(fs_ops, op=op, offset=offset, nbytes=nbytes, fs_kind=fs_kind)
    fs_name = {"fat": "FAT allocation", "littlefs": "LittleFS compaction"}.get(fs_kind, "other")
    shares[fs_name] += (busy_pool + other_pool) * frac
    shares["flash program/erase busy"] += busy_pool * (1 - frac)
    shares["other"] += other_pool * (1 - frac)
    cause = max(CAUSES, key=lambda c: (shares[c], -CAUSES.index(c)))
    return cause, shares


def _program_estimate_ns(cmds: dict[str, int], ops: dict[str, int], p: Any) -> float:
    """Busy the card profile predicts for the commands of a call without merges or pauses (ns)."""
    w24, w25 = cmds.get("CMD24", 0), cmds.get("CMD25", 0)
    r17, r18 = cmds.get("CMD17", 0), cmds.get("CMD18", 0)
    blocks_w = ops.get("bytes_written", 0) // 512
    blocks_r = ops.get("bytes_read", 0) // 512
    us = (w24 * p.write_busy_single_us + w25 * p.write_busy_end_us
          + max(0, blocks_w - w24 - w25) * p.write_busy_block_us
          + (r17 + r18) * p.read_access_us + max(0, blocks_r - r17 - r18) * p.read_block_gap_us
          + cmds.get("CMD38", 0) * p.erase_busy_us)
    return us * 1e3


def _fs_share(fs_ops: dict[str, int], *, op: int, offset: int, nbytes: int, fs_kind: str) -> float:
    """The share of a call's device operations that are the filesystem's own (not the record's data)."""
    reads, writes, erases = fs_ops.get("reads", 0), fs_ops.get("writes", 0), fs_ops.get("erases", 0)
    total = reads + writes + erases
    if not total:
        return 0.0
    if fs_kind == "fat":
        if op == ROTATE:
            return 1.0
        data_w = _data_sector_writes(op, offset, nbytes)
        # FAT on 4096-byte sectors (wear levelling) reads each big sector before writing it
        data_r = data_w if fs_ops.get("bytes_written", 0) > 512 * max(writes, 1) else 0
        own = max(0, reads - data_r) + max(0, writes - data_w) + erases
        return min(1.0, own / total)
    if fs_kind == "littlefs":
        return (reads + erases) / total
    return 0.0
