"""Results of a job: per-loop raw figures and the rows and metadata made from them."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...records import MIB, Row, RunRecord, make_row
from ...stats_latency import LatencyHistogram, throughput_timeline
from .jobs import JobConfig


@dataclass
class LoopResult:
    start_ns: int
    stop_ns: int
    ops: dict[str, int]
    lat: dict[str, np.ndarray]      # per-op latency, ns
    ends: dict[str, np.ndarray]     # per-op completion time, ns

    @property
    def duration_ns(self) -> int:
        return self.stop_ns - self.start_ns


@dataclass
class JobResult:
    job: JobConfig
    loops: list[LoopResult]
    verify: dict[str, Any] | None
    warnings: list[str]
    ioengine: str | None = None     # the engine that did the I/O on a descriptor (None: a generic BlockDevice)


def _value_mb_s(row: Row) -> float:
    return row.bytes / 1e6 / (row.time_ms / 1e3) if row.time_ms > 0 else 0.0


def op_summary(job: JobConfig, loops: list[LoopResult], kind: str) -> dict[str, Any]:
    """IOPS, bandwidth, latency percentiles, per-loop figures and timeline of one direction."""
    hist = LatencyHistogram()
    for lp in loops:
        hist.record_many(lp.lat[kind])
    total_ns = sum(lp.duration_ns for lp in loops)
    ops = sum(lp.ops[kind] for lp in loops)
    nbytes = ops * job.bs_bytes
    # stitch the loops' timelines back to back
    shifted, t0 = [], 0
    for lp in loops:
        shifted.append(lp.ends[kind] - lp.start_ns + t0)
        t0 += lp.duration_ns
    tl = throughput_timeline(np.concatenate(shifted) if shifted else [], job.bs_bytes, 0, 1.0, t0)
    return {
        "ops": ops, "bytes": nbytes, "runtime_s": total_ns / 1e9,
        "iops": ops / (total_ns / 1e9) if total_ns else 0.0,
        "bw_bytes_s": nbytes / (total_ns / 1e9) if total_ns else 0.0,
        "lat": hist.summary_us(), "lat_relative_error": hist.relative_error,
        "loops": [{"ops": lp.ops[kind], "duration_s": lp.duration_ns / 1e9,
                   "mib_s": lp.ops[kind] * job.bs_bytes / MIB / (lp.duration_ns / 1e9) if lp.duration_ns else 0.0,
                   "iops": lp.ops[kind] / (lp.duration_ns / 1e9) if lp.duration_ns else 0.0} for lp in loops],
        "timeline": {"interval_s": 1.0, **tl},
    }


def job_rows(res: JobResult, *, label: str | None = None, best_loop: bool = False,
             unit: str | None = None) -> tuple[list[Row], dict[str, Any]]:
    """Rows (one per direction with I/O) and their metadata."""
    job = res.job
    rows, meta = [], {}
    for kind in ("read", "write"):
        ops = sum(lp.ops[kind] for lp in res.loops)
        if not ops:
            continue
        lab = f"{label or job.name} {kind}"
        summ = op_summary(job, res.loops, kind)
        if best_loop:
            best = max(res.loops, key=lambda lp: lp.ops[kind] / max(lp.duration_ns, 1))
            nbytes, samples = best.ops[kind] * job.bs_bytes, [best.duration_ns]
            summ["row_is"] = "best loop"
        else:
            nbytes, samples = ops * job.bs_bytes, [sum(lp.duration_ns for lp in res.loops)]
            summ["row_is"] = "all loops"
        u = unit or ("IOPS" if job.random else "MiB/s")
        iops = summ["iops"] if not best_loop else max(x["iops"] for x in summ["loops"])
        vfn = {"IOPS": lambda r, i=iops: i, "MiB/s": lambda r: r.mib_s, "MB/s": _value_mb_s}[u]
        rows.append(make_row(lab, kind, nbytes, samples, unit=u, value_fn=vfn))
        meta[lab] = summ
    return rows, meta


def _fio_direction(summ: dict[str, Any] | None) -> dict[str, Any]:
    """One direction of a job as fio's JSON output has it (zeros when the job did not move that way)."""
    if summ is None:
        return {"io_bytes": 0, "io_kbytes": 0, "bw_bytes": 0, "bw": 0, "iops": 0.0, "runtime": 0, "total_ios": 0,
                "lat_ns": {"min": 0, "max": 0, "mean": 0.0}, "clat_ns": {"min": 0, "max": 0, "mean": 0.0,
                                                                          "percentile": {}}}
    lat = summ["lat"]
    ns = {"min": round(lat.get("min_us", 0) * 1e3), "max": round(lat.get("max_us", 0) * 1e3),
          "mean": lat.get("mean_us", 0.0) * 1e3}
    pct = {f"{float(k[1:-3].replace('_', '.')):.6f}": round(v * 1e3) for k, v in lat.items()
           if k.startswith("p") and k.endswith("_us")}
    return {"io_bytes": summ["bytes"], "io_kbytes": summ["bytes"] // 1024, "bw_bytes": round(summ["bw_bytes_s"]),
            "bw": round(summ["bw_bytes_s"] / 1024), "iops": summ["iops"], "runtime": round(summ["runtime_s"] * 1e3),
            "total_ios": summ["ops"],
            # synchronous I/O: the completion latency is the whole latency
            "lat_ns": ns, "clat_ns": {**ns, "percentile": pct}}


def fio_json(rec: RunRecord, version: str) -> dict[str, Any]:
    """A fio run (sdbench fio) as fio's ``--output-format=json`` document: ``jobs`` with ``jobname``,
    ``read``/``write`` (bytes, bw in KiB/s, iops, runtime in ms, latencies in ns with percentiles), so tools
    that read fio's JSON (fio-plot and the like) read sdbench's."""
    rows = rec.metadata.get("rows", {})
    jobs = []
    for j in rec.metadata.get("jobs", []):
        name = j["name"]
        jobs.append({"jobname": name, "groupid": 0, "error": 0,
                     "job options": {"rw": j["rw"], "bs": str(j["bs_bytes"]), "size": str(j["size_bytes"]),
                                     "iodepth": str(j["iodepth"]), "direct": "1" if j["direct"] else "0"},
                     "read": _fio_direction(rows.get(f"{name} read")),
                     "write": _fio_direction(rows.get(f"{name} write"))})
    return {"fio version": f"sdbench-{version}", "timestamp": int(time.time()), "jobs": jobs}
