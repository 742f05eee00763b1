"""Flash-work fidelity check: replay the SPIFFS half of ESP-IDF's perf_benchmark and compare
the flash operations with a trace recorded from the reference C library.

The protocol (examples/storage/perf_benchmark, SPIFFS, "new file" mode, one run,
max_files 5): mount (fails on a blank chip), format, mount; then for each size:
open ``/test.bin`` with O_CREAT|O_TRUNC|O_RDWR (the VFS then stores the mtime),
one timed write() of the whole size from one random buffer, close; open
read-only, one timed read(), close, unlink.  Every size uses the same path,
which matters: SPIFFS's temporal descriptor cache then starts the name search
where the previous (removed) file's header was.
"""
from __future__ import annotations

import csv
import random
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable

from ...media.base import Geometry
from ...media.memory import MemoryDevice
from ...media.trace import TraceDevice
from .config import SpiffsConfig
from .errors import SpiffsError
from .fs import SpiffsFileSystem

PROTOCOL_SIZES = (("target", 65536), ("more", 78643), ("less", 54613), ("tiny", 255))
OPS = ("read", "write", "erase")


@dataclass(frozen=True)
class TraceRow:
    step: str
    phase: str      # "timed" or "untimed"
    op: str         # read, write, erase
    addr: int       # byte address in the partition
    size: int       # bytes


@dataclass(frozen=True)
class ProtocolStepComparison:
    step: str
    phase: str
    op: str
    ref_count: int
    count: int
    ref_bytes: int
    bytes: int

    @staticmethod
    def _dev(ours: int, ref: int) -> float:
        if ref == 0:
            return 0.0 if ours == 0 else float("inf")
        return ours / ref - 1.0

    @property
    def count_dev(self) -> float:
        """Relative deviation of the operation count (0.05 = 5 % more than the reference)."""
        return self._dev(self.count, self.ref_count)

    @property
    def bytes_dev(self) -> float:
        return self._dev(self.bytes, self.ref_bytes)

    def within(self, tolerance: float) -> bool:
        return abs(self.count_dev) <= tolerance and abs(self.bytes_dev) <= tolerance


def replay_espidf_protocol(config: SpiffsConfig | None = None, *, partition_bytes: int = 2 << 20,
                           sizes: Iterable[tuple[str, int]] = PROTOCOL_SIZES, seed: int = 1) -> list[TraceRow]:
    """Run the protocol on a traced, blank 2 MiB NOR flash model; every flash op, tagged."""
    cfg = config if config is not None else SpiffsConfig()
    flash = MemoryDevice(Geometry(sector_size=1, sector_count=partition_bytes, erase_size=cfg.block_size_bytes,
                                  erase_value=0xFF), program_and=True)
    trace = TraceDevice(flash)
    fs = SpiffsFileSystem(trace, cfg)
    rows: list[TraceRow] = []

    def tag(step: str, phase: str, start: int) -> None:
        for e in trace.entries[start:]:
            if e.op in OPS:
                rows.append(TraceRow(step, phase, e.op, e.lba, e.count))
        trace.clear()

    try:
        fs.mount()
    except SpiffsError:
        pass
    tag("mount", "untimed", 0)
    fs.format()
    tag("format", "untimed", 0)
    fs.mount()
    tag("mount", "untimed", 0)
    sizes = list(sizes)
    buf = random.Random(seed).randbytes(max(size for _label, size in sizes))
    path = "/test.bin"
    for label, size in sizes:
        data = buf[:size]
        f = fs.open(path, "w")
        tag(f"write {label}", "untimed", 0)
        f.write(data)
        tag(f"write {label}", "timed", 0)
        f.close()
        tag(f"write {label}", "untimed", 0)
        f = fs.open(path, "r")
        tag(f"read {label}", "untimed", 0)
        got = f.read(size)
        tag(f"read {label}", "timed", 0)
        f.close()
        fs.remove(path)
        tag(f"read {label}", "untimed", 0)
        if got != data:
            raise SpiffsError("CORRUPT", f"read back of {path} differs")
    fs.unmount()
    return rows


def load_trace(path: str | Path) -> list[TraceRow]:
    with open(path, newline="") as fh:
        return [TraceRow(r["step"], r["phase"], r["op"], int(r["addr"]), int(r["size"]))
                for r in csv.DictReader(fh)]


def _aggregate(rows: Iterable[TraceRow]) -> tuple[list[tuple[str, str]], dict[tuple[str, str, str], list[int]]]:
    order: list[tuple[str, str]] = []
    agg: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        k = (r.step, r.phase)
        if k not in order:
            order.append(k)
        a = agg[(r.step, r.phase, r.op)]
        a[0] += 1
        a[1] += r.size
    return order, agg


def compare_traces(reference: Iterable[TraceRow], ours: Iterable[TraceRow]) -> list[ProtocolStepComparison]:
    ref_order, ref = _aggregate(reference)
    our_order, mine = _aggregate(ours)
    order = ref_order + [k for k in our_order if k not in ref_order]
    out = []
    for step, phase in order:
        for op in OPS:
            r = ref.get((step, phase, op), [0, 0])
            m = mine.get((step, phase, op), [0, 0])
            if r == [0, 0] and m == [0, 0]:
                continue
            out.append(ProtocolStepComparison(step, phase, op, r[0], m[0], r[1], m[1]))
    return out


def format_comparison(rows: list[ProtocolStepComparison], tolerance: float = 0.10) -> str:
    def pct(x: float) -> str:
        return "   n/a" if x == float("inf") else f"{x * 100:+6.1f}%"

    lines = [f"| {'step':<13} | {'phase':<7} | {'op':<5} | {'ref ops':>7} | {'ops':>7} | {'Δops':>7} | "
             f"{'ref bytes':>9} | {'bytes':>9} | {'Δbytes':>7} | ok |",
             "|" + "|".join("-" * w for w in (15, 9, 7, 9, 9, 9, 11, 11, 9, 4)) + "|"]
    for c in rows:
        lines.append(f"| {c.step:<13} | {c.phase:<7} | {c.op:<5} | {c.ref_count:>7} | {c.count:>7} | "
                     f"{pct(c.count_dev):>7} | {c.ref_bytes:>9} | {c.bytes:>9} | {pct(c.bytes_dev):>7} | "
                     f"{'✓' if c.within(tolerance) else '✗':^2} |")
    return "\n".join(lines)


def protocol_trace_compare(reference_csv: str | Path, config: SpiffsConfig | None = None, *,
                           tolerance: float = 0.10, file: IO[str] | None = sys.stdout
                           ) -> list[ProtocolStepComparison]:
    """Replay the protocol, compare per step/phase/op with ``reference_csv`` and print the table.

    Returns the comparison rows; ``row.within(tolerance)`` tells whether counts
    and byte totals are within the tolerance of the reference.  ``file=None``
    prints nothing.
    """
    rows = compare_traces(load_trace(reference_csv), replay_espidf_protocol(config))
    if file is not None:
        print(format_comparison(rows, tolerance), file=file)
    return rows
