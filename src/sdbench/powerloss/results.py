"""The cells of a power-loss matrix and what their runs find: the filesystems, caches and bridges a cell
combines (:class:`Cell`), the classes a cut is sorted into, and the records of a cut and of a cell."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FILESYSTEMS = ("fat", "littlefs", "spiffs", "raw")
CACHES = ("none", "write-through", "write-back")
BRIDGES = ("none", "single-sector", "multi-sector", "background")
CLASSES = ("clean", "lost_unacknowledged", "lost_acknowledged", "corrupted", "needs_repair", "unmountable")
#: filesystem -> the stack part that mounts it, per medium section
PARTS = {"sd": {"fat": "sd_fatfs", "littlefs": "sd_littlefs"},
         "flash": {"fat": "flash_fatfs", "littlefs": "flash_littlefs", "spiffs": "flash_spiffs"}}


@dataclass(frozen=True)
class Cell:
    fs: str
    cache: str = "none"
    bridge: str = "none"

    @property
    def name(self) -> str:
        return f"{self.fs} / cache {self.cache} / bridge {self.bridge}"


@dataclass
class CutResult:
    op: int
    cls: str
    lost_acknowledged_bytes: int = 0
    lost_bytes: int = 0              # written (acknowledged or not) and not read back intact
    corrupted_files: int = 0
    detail: str = ""
    layer: str = ""


@dataclass
class CellResult:
    cell: Cell
    section: str
    ops: int = 0                     # medium operations of the workload (the cut points there are)
    workload_ms: float = 0.0         # the clean run's time, virtual clock
    data_bytes: int = 0
    cuts: list[CutResult] = field(default_factory=list)
    skipped: str = ""                # why the cell does not apply to this target
    files: int = 0                   # files of the workload (grown until it has enough cut points)
    workload: dict[str, Any] = field(default_factory=dict)   # the workload as sized for this cell
    cache_config: dict[str, Any] = field(default_factory=dict)  # the block cache's size and policy (none: empty)

    def count(self, cls: str) -> int:
        return sum(c.cls == cls for c in self.cuts)

    @property
    def throughput_kib_s(self) -> float:
        return self.data_bytes / 1024 / (self.workload_ms / 1e3) if self.workload_ms else 0.0

    @property
    def first_loss(self) -> CutResult | None:
        return next((c for c in self.cuts if CLASSES.index(c.cls) >= CLASSES.index("lost_acknowledged")), None)

    def to_dict(self, seed: int) -> dict[str, Any]:
        d: dict[str, Any] = {"fs": self.cell.fs, "cache": self.cell.cache, "bridge": self.cell.bridge}
        if self.skipped:
            return {**d, "skipped": self.skipped}
        first = self.first_loss
        d.update({"cuts": len(self.cuts), "cut_points": self.ops, "files": self.files,
                  **{c: self.count(c) for c in CLASSES},
                  "lost_acknowledged_bytes": sum(c.lost_acknowledged_bytes for c in self.cuts),
                  "lost_acknowledged_bytes_max": max((c.lost_acknowledged_bytes for c in self.cuts), default=0),
                  "lost_bytes": sum(c.lost_bytes for c in self.cuts),
                  "lost_bytes_max": max((c.lost_bytes for c in self.cuts), default=0),
                  "workload": self.workload, **({"cache_config": self.cache_config} if self.cache_config else {}),
                  "corrupted_files": sum(c.corrupted_files for c in self.cuts),
                  "throughput_kib_s": round(self.throughput_kib_s, 3),
                  "first_loss": None if first is None else {"op": first.op, "seed": seed, "class": first.cls,
                                                            "layer": first.layer, "detail": first.detail}})
        return d
