"""fio's log files: ``<prefix>_lat.N.log``, ``_clat``, ``_slat``, ``_bw``, ``_iops`` (``write_lat_log`` ...).

One line per entry: ``time (ms), value, direction (0 read, 1 write, 2 trim),
block size (B)[, offset (B)], priority`` -- fio's layout, which fio-plot and
fio's own plotting scripts read.  Without ``log_avg_msec`` every I/O is a line
(latency in ns; bandwidth in KiB/s as the I/O's size over its completion
latency; IOPS 1); with it, one line per direction and window with the mean
(or maximum, ``log_window_value``) and block size and offset 0.  Times count
from the job's start (``log_unix_epoch``: Unix time in ms).  ``N`` is the job's
number in the run, from 1 (left out with ``per_job_logs=0``).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ...output_files import check_writable_output
from .jobs import JobConfig
from .stats import JobStats

_DIR_CODE = {"read": 0, "write": 1, "trim": 2}


def log_paths(job: JobConfig, number: int) -> list[Path]:
    """The files a job's logs go to."""
    out = []
    suffix = f".{number}.log" if job.per_job_logs else ".log"
    if job.write_lat_log:
        out += [Path(f"{job.write_lat_log}_{t}{suffix}") for t in ("lat", "clat", "slat")]
    if job.write_bw_log:
        out.append(Path(f"{job.write_bw_log}_bw{suffix}"))
    if job.write_iops_log:
        out.append(Path(f"{job.write_iops_log}_iops{suffix}"))
    if job.write_hist_log:
        out.append(Path(f"{job.write_hist_log}_clat_hist{suffix}"))
    return out


def wants_logs(job: JobConfig) -> bool:
    return bool(job.write_lat_log or job.write_bw_log or job.write_iops_log or job.write_hist_log)


def _plat_index(ns: np.ndarray) -> np.ndarray:
    """fio's latency histogram bucket of each latency (the layout of :class:`~.stats.FioHist`)."""
    from .stats import PLAT_BITS, PLAT_NR

    v = np.maximum(ns.astype(np.int64), 0)
    bl = np.frexp(v.astype(np.float64))[1].astype(np.int64)
    shift = np.maximum(bl - 1 - PLAT_BITS, 0)
    return np.minimum((1 << PLAT_BITS) * shift + (v >> shift), PLAT_NR - 1)


def check_log_paths(jobs: list[JobConfig]) -> None:
    """Every log file's place can take a file (before any job runs)."""
    for i, job in enumerate(jobs, 1):
        for p in log_paths(job, i):
            check_writable_output(p)


def write_logs(job: JobConfig, number: int, stats: JobStats, *, epoch_offset_ns: int | None = None) -> list[Path]:
    """Write a job's logs from its per-I/O records; returns the files written."""
    if stats.logs is None or not wants_logs(job):
        return []
    t0 = stats.start_ns
    if job.log_unix_epoch:
        epoch = epoch_offset_ns if epoch_offset_ns is not None else time.time_ns() - time.perf_counter_ns()
    else:
        epoch = None
    recs: dict[str, dict[str, np.ndarray]] = {}
    for kind, r in stats.logs.items():
        if not r.end:
            continue
        recs[kind] = {name: np.concatenate(getattr(r, name)) for name in ("end", "lat", "slat", "size", "offset",
                                                                          "prio")}
    written = []
    mode = "w" if job.per_job_logs else "a"
    suffix = f".{number}.log" if job.per_job_logs else ".log"

    def emit(path: Path, kind_lines: list[str]) -> None:
        with open(path, mode) as f:
            f.write("".join(kind_lines))
        written.append(path)

    def per_io(value_of: str) -> list[str]:
        rows = []
        for kind, r in recs.items():
            t = r["end"] - t0
            ms = (t // 1_000_000) if epoch is None else (t0 + epoch + t) // 1_000_000
            clat = r["lat"] - r["slat"]
            if value_of == "lat":
                vals = r["lat"]
            elif value_of == "clat":
                vals = clat
            elif value_of == "slat":
                if not r["slat"].any():
                    continue
                vals = r["slat"]
            elif value_of == "bw":
                vals = (r["size"] * 1_000_000) // np.maximum(clat, 1)
            else:
                vals = np.ones_like(r["end"])
            cols = [ms, vals, np.full(ms.size, _DIR_CODE[kind]), r["size"]]
            if job.log_offset:
                cols.append(r["offset"])
            cols.append(r["prio"])
            if job.log_issue_time:  # clat and slat logs: when the I/O was issued (ns since the job started)
                cols.append(r["end"] - r["lat"] - t0 if value_of in ("clat", "slat")
                            else np.zeros(ms.size, dtype=np.int64))
            rows.append(np.stack([np.asarray(c, dtype=np.int64) for c in cols], axis=1))
        if not rows:
            return []
        allrows = np.concatenate(rows)
        allrows = allrows[np.argsort(allrows[:, 0], kind="stable")]
        fmt = ", ".join(["%d"] * allrows.shape[1])
        return [fmt % tuple(row) + "\n" for row in allrows.tolist()]

    def windowed(value_of: str) -> list[str]:
        step = job.log_avg_msec * 1_000_000
        rows: list[tuple[int, int, list[int]]] = []
        for kind, r in recs.items():
            t = r["end"] - t0
            idx = t // step
            n = int(idx.max()) + 1 if idx.size else 0
            clat = r["lat"] - r["slat"]
            for w in range(n):
                sel = idx == w
                if not sel.any():
                    continue
                end_ms = (w + 1) * job.log_avg_msec
                if epoch is not None:
                    end_ms = (t0 + epoch) // 1_000_000 + end_ms
                if value_of in ("lat", "clat", "slat"):
                    v = {"lat": r["lat"], "clat": clat, "slat": r["slat"]}[value_of][sel]
                    if value_of == "slat" and not v.any():
                        continue
                    vals = {"avg": [int(v.mean())], "max": [int(v.max())], "both": [int(v.mean()), int(v.max())]}[
                        job.log_window_value]
                elif value_of == "bw":
                    vals = [int(r["size"][sel].sum() * 1000 // 1024 // job.log_avg_msec)]
                else:
                    vals = [int(sel.sum() * 1000 // job.log_avg_msec)]
                rows.append((end_ms, _DIR_CODE[kind], vals))
        rows.sort(key=lambda x: (x[0], x[1]))
        out = []
        for end_ms, d, vals in rows:
            cols = [end_ms, *vals, d, 0] + ([0] if job.log_offset else []) + [0] + ([0] if job.log_issue_time else [])
            out.append(", ".join(str(c) for c in cols) + "\n")
        return out

    def hist_lines() -> list[str]:
        """One line per direction and log_hist_msec window: time, direction, 0, then the window's count in each
        of fio's completion latency buckets."""
        from .stats import PLAT_NR

        if not job.log_hist_msec:
            return []
        step = job.log_hist_msec * 1_000_000
        rows = []
        for kind, r in recs.items():
            idx = (r["end"] - t0) // step
            plat = _plat_index(r["lat"] - r["slat"])
            for w in np.unique(idx):
                counts = np.bincount(plat[idx == w], minlength=PLAT_NR)
                rows.append((int(w + 1) * job.log_hist_msec, _DIR_CODE[kind],
                             ", ".join(map(str, counts.tolist()))))
        rows.sort(key=lambda x: (x[0], x[1]))
        return [f"{t}, {d}, 0, {bins}\n" for t, d, bins in rows]

    make = windowed if job.log_avg_msec else per_io
    if job.write_lat_log:
        for t in ("lat", "clat", "slat"):
            emit(Path(f"{job.write_lat_log}_{t}{suffix}"), make(t))
    if job.write_bw_log:
        emit(Path(f"{job.write_bw_log}_bw{suffix}"), make("bw"))
    if job.write_iops_log:
        emit(Path(f"{job.write_iops_log}_iops{suffix}"), make("iops"))
    if job.write_hist_log:
        emit(Path(f"{job.write_hist_log}_clat_hist{suffix}"), hist_lines())
    return written
