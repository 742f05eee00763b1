"""Results of a job: per-loop figures, what the job measured, and the rows and metadata made from them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...records import MIB, Row, make_row
from .jobs import DIRECTIONS, JobConfig
from .stats import JobStats, timeline

#: latency percentiles of a row's summary (µs), as the tables print them
SUMMARY_PERCENTILES = (50.0, 99.0, 99.9)


@dataclass
class LoopResult:
    start_ns: int
    stop_ns: int
    ops: dict[str, int]
    bytes: dict[str, int] = field(default_factory=dict)

    @property
    def duration_ns(self) -> int:
        return self.stop_ns - self.start_ns

    @classmethod
    def of(cls, start_ns: int, stop_ns: int, stats: JobStats) -> "LoopResult":
        """A loop's result from what it measured (every direction present, 0 where it moved nothing)."""
        return cls(start_ns, stop_ns, {k: (stats.dirs[k].ios if k in stats.dirs else 0) for k in DIRECTIONS},
                   {k: (stats.dirs[k].bytes if k in stats.dirs else 0) for k in DIRECTIONS})

    def merged(self, other: "LoopResult") -> "LoopResult":
        """This loop and a later one as one (a job with more loops than a result keeps apart)."""
        ops = {k: self.ops.get(k, 0) + other.ops.get(k, 0) for k in {*self.ops, *other.ops}}
        nb = {k: self.bytes.get(k, 0) + other.bytes.get(k, 0) for k in {*self.bytes, *other.bytes}}
        return LoopResult(self.start_ns, self.start_ns + self.duration_ns + other.duration_ns, ops, nb)


@dataclass
class JobResult:
    job: JobConfig
    loops: list[LoopResult]
    verify: dict[str, Any] | None
    warnings: list[str]
    ioengine: str | None = None     # the engine that did the I/O on a descriptor (None: a generic BlockDevice)
    stats: JobStats | None = None
    clone: int = 0


def _value_mb_s(row: Row) -> float:
    return row.bytes / 1e6 / (row.time_ms / 1e3) if row.time_ms > 0 else 0.0


def lat_summary_us(stats: JobStats, kind: str) -> dict[str, float]:
    """min, max, mean, p50, p99, p99.9 of a direction's total latency, µs (JSON-ready)."""
    d = stats.dirs.get(kind)
    if d is None or not d.lat.n:
        return {"count": 0}
    h = d.lat.h
    out: dict[str, float] = {"count": h.count, "min_us": (h.min_ns or 0) / 1e3, "max_us": (h.max_ns or 0) / 1e3,
                             "mean_us": h.mean_ns / 1e3}
    for p in SUMMARY_PERCENTILES:
        out[f"p{p:g}_us".replace(".", "_")] = h.percentile_ns(p) / 1e3
    return out


def op_summary(job: JobConfig, loops: list[LoopResult], kind: str, stats: JobStats | None = None) -> dict[str, Any]:
    """IOPS, bandwidth, latency percentiles, per-loop figures and timeline of one direction."""
    total_ns = stats.runtime_ns if stats is not None else sum(lp.duration_ns for lp in loops)
    d = stats.dirs.get(kind) if stats is not None else None
    ops = d.ios if d is not None else sum(lp.ops.get(kind, 0) for lp in loops)
    nbytes = d.bytes if d is not None else sum(lp.bytes.get(kind, 0) for lp in loops)
    secs = total_ns / 1e9
    return {
        "ops": ops, "bytes": nbytes, "runtime_s": secs,
        "iops": ops / secs if total_ns else 0.0,
        "bw_bytes_s": nbytes / secs if total_ns else 0.0,
        "lat": lat_summary_us(stats, kind) if stats is not None else {"count": 0},
        "lat_relative_error": 2.0 ** -7,
        "loops": [{"ops": lp.ops.get(kind, 0), "duration_s": lp.duration_ns / 1e9,
                   "mib_s": lp.bytes.get(kind, 0) / MIB / (lp.duration_ns / 1e9) if lp.duration_ns else 0.0,
                   "iops": lp.ops.get(kind, 0) / (lp.duration_ns / 1e9) if lp.duration_ns else 0.0} for lp in loops],
        "timeline": timeline(d, stats.stop_ns) if stats is not None else {"interval_s": 1.0, "t_s": [], "mib_s": [],
                                                                          "iops": []},
    }


def job_rows(res: JobResult, *, label: str | None = None, best_loop: bool = False,
             unit: str | None = None) -> tuple[list[Row], dict[str, Any]]:
    """Rows (one per direction with I/O) and their metadata."""
    job = res.job
    stats = res.stats
    rows, meta = [], {}
    for kind in ("read", "write", "trim"):
        d = stats.dirs.get(kind) if stats is not None else None
        ops = d.ios if d is not None else sum(lp.ops.get(kind, 0) for lp in res.loops)
        if not ops:
            continue
        lab = f"{label or job.name} {kind}"
        summ = op_summary(job, res.loops, kind, stats)
        if best_loop:
            best = max(res.loops, key=lambda lp: lp.ops.get(kind, 0) / max(lp.duration_ns, 1))
            nbytes, samples = best.bytes.get(kind, 0), [best.duration_ns]
            summ["row_is"] = "best loop"
        else:
            nbytes = summ["bytes"]
            samples = [max(stats.runtime_ns if stats is not None else sum(lp.duration_ns for lp in res.loops), 1)]
            summ["row_is"] = "all loops"
        u = unit or ("IOPS" if job.random else "MiB/s")
        iops = summ["iops"] if not best_loop else max(x["iops"] for x in summ["loops"])
        vfn = {"IOPS": lambda r, i=iops: i, "MiB/s": lambda r: r.mib_s, "MB/s": _value_mb_s}[u]
        rows.append(make_row(lab, kind, nbytes, samples, unit=u, value_fn=vfn))
        meta[lab] = summ
    return rows, meta
