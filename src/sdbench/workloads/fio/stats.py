"""What a job measured, gathered as it runs: per direction counts, latency histograms and time windows.

The engines hand over what they recorded in chunks (latency, completion time,
size and submission latency of each I/O); :class:`JobStats` folds them into
fixed-size histograms and per-window counters, so a long time-based job needs
no memory per I/O.  What fio reports is computed from these:

* latency (total ``lat``, completion ``clat``, submission ``slat``) in fio's
  histogram: 64 buckets per power of two, values below 128 ns exact, the
  percentile a bucket's middle (fio's ``plat`` layout, also json+'s ``bins``);
  mean and standard deviation exact;
* bandwidth and IOPS samples, one per ``bwavgtime``/``iopsavgtime`` window
  (min, max, mean, deviation, count), and a per-second timeline;
* I/Os completing before ``ramp_time`` (or ``ramp_size``) is over are not
  counted, as fio discards its ramp.

Logs (:mod:`.logs`) that need every I/O get their records here too.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...stats_latency import LatencyHistogram

#: fio's latency histogram: 6 sub-bucket bits, 29 groups (values past 2^34 ns share the last bucket)
PLAT_BITS = 6
PLAT_VAL = 1 << PLAT_BITS
PLAT_NR = 29 * PLAT_VAL
#: fio's latency tables: labels of latency_ns, latency_us, latency_ms; a label is its bucket's exclusive upper
#: end in that unit (latency_us "4" counts 2-3 µs), latency_ms has ">=2000" past the last
LAT_LABELS = {"latency_ns": ("2", "4", "10", "20", "50", "100", "250", "500", "750", "1000"),
              "latency_us": ("2", "4", "10", "20", "50", "100", "250", "500", "750", "1000"),
              "latency_ms": ("2", "4", "10", "20", "50", "100", "250", "500", "750", "1000", "2000", ">=2000")}
_STEPS = (2, 4, 10, 20, 50, 100, 250, 500, 750, 1000)
#: the upper ends of the tables' buckets in ns, in order (ns, then µs from 1 µs, then ms from 1 ms)
LAT_EDGES_NS = np.array([*_STEPS, *(s * 1000 for s in _STEPS), *(s * 1_000_000 for s in (*_STEPS, 2000))],
                        dtype=np.int64)
#: fio's iodepth tables
DEPTH_LEVELS = (1, 2, 4, 8, 16, 32, 64)
SUBMIT_LEVELS = (0, 4, 8, 16, 32, 64)


def plat_value(idx: int) -> int:
    """The latency fio reports for histogram bucket ``idx`` (its middle)."""
    if idx < PLAT_VAL << 1:
        return idx
    error_bits = (idx >> PLAT_BITS) - 1
    base = 1 << (error_bits + PLAT_BITS)
    return int(base + ((idx % PLAT_VAL) + 0.5) * (1 << error_bits))


class FioHist:
    """A latency histogram in fio's layout, with the exact mean and standard deviation."""

    __slots__ = ("h", "sumsq")

    def __init__(self) -> None:
        self.h = LatencyHistogram(PLAT_BITS)
        self.sumsq = 0.0

    def add(self, ns: np.ndarray) -> None:
        if ns.size:
            self.h.record_many(ns)
            f = ns.astype(np.float64)
            self.sumsq += float(np.square(f).sum())  # not np.dot: BLAS would wake its thread pool

    def merge(self, other: "FioHist") -> None:
        self.h.merge(other.h)
        self.sumsq += other.sumsq

    @property
    def n(self) -> int:
        return self.h.count

    @property
    def mean(self) -> float:
        return self.h.mean_ns

    @property
    def stddev(self) -> float:
        n = self.h.count
        if n < 2:
            return 0.0
        var = (self.sumsq - self.h.sum_ns * self.h.sum_ns / n) / (n - 1)
        return math.sqrt(max(var, 0.0))

    def _counts(self) -> np.ndarray:
        c = self.h.counts
        out = c[:PLAT_NR].copy()
        out[-1] += int(c[PLAT_NR:].sum())
        return out

    def percentiles(self, plist: tuple[float, ...]) -> dict[str, int]:
        """fio's percentile table: for each p, the bucket value where the running count reaches p % of all."""
        n = self.h.count
        if not n:
            return {}
        cum = np.cumsum(self._counts())
        out = {}
        for p in plist:
            idx = int(np.searchsorted(cum, p / 100.0 * n, side="left"))
            out[f"{p:.6f}"] = plat_value(min(idx, PLAT_NR - 1))
        return out

    def bins(self) -> dict[str, int]:
        """json+'s bins: bucket value -> count, for the buckets that have any."""
        c = self._counts()
        return {str(plat_value(int(i))): int(c[i]) for i in np.nonzero(c)[0]}

    def summary(self) -> dict[str, Any]:
        """min, max, mean, stddev and N as fio's JSON has them (ns)."""
        return {"min": self.h.min_ns or 0, "max": self.h.max_ns or 0, "mean": self.mean, "stddev": self.stddev,
                "N": self.n}


class Windows:
    """Counts per fixed window of time since ``t0`` (bytes and I/Os), growing as needed."""

    __slots__ = ("t0", "step", "bytes", "ios")

    def __init__(self, t0: int, step_ns: int) -> None:
        self.t0, self.step = t0, max(1, step_ns)
        self.bytes = np.zeros(0, dtype=np.int64)
        self.ios = np.zeros(0, dtype=np.int64)

    def add(self, ends: np.ndarray, sizes: np.ndarray | int) -> None:
        if not ends.size:
            return
        idx = (ends - self.t0) // self.step
        n = int(idx.max()) + 1
        if n > self.bytes.size:
            self.bytes = np.concatenate([self.bytes, np.zeros(n - self.bytes.size, dtype=np.int64)])
            self.ios = np.concatenate([self.ios, np.zeros(n - self.ios.size, dtype=np.int64)])
        w = sizes if isinstance(sizes, np.ndarray) else None
        self.ios += np.bincount(idx, minlength=self.ios.size)[: self.ios.size]
        if w is None:
            self.bytes += np.bincount(idx, minlength=self.bytes.size)[: self.bytes.size] * int(sizes)
        else:
            self.bytes += np.bincount(idx, weights=w, minlength=self.bytes.size)[: self.bytes.size].astype(np.int64)

    def merge(self, other: "Windows") -> None:
        """Add ``other``'s counts, placing its windows at their absolute times."""
        if not other.ios.size:
            return
        shift = (other.t0 - self.t0) // self.step
        if shift < 0:  # other started first: rebase onto its start
            pad = -shift
            self.bytes = np.concatenate([np.zeros(pad, dtype=np.int64), self.bytes])
            self.ios = np.concatenate([np.zeros(pad, dtype=np.int64), self.ios])
            self.t0 -= pad * self.step
            shift = 0
        n = int(shift) + other.ios.size
        if n > self.ios.size:
            self.bytes = np.concatenate([self.bytes, np.zeros(n - self.bytes.size, dtype=np.int64)])
            self.ios = np.concatenate([self.ios, np.zeros(n - self.ios.size, dtype=np.int64)])
        self.bytes[shift:n] += other.bytes
        self.ios[shift:n] += other.ios

    def complete(self, stop_ns: int) -> int:
        """Windows that ended by ``stop_ns``."""
        return max(0, min(self.ios.size, (stop_ns - self.t0) // self.step))


@dataclass
class DirStats:
    """One direction of a job after its ramp."""
    ios: int = 0
    bytes: int = 0
    lat: FioHist = field(default_factory=FioHist)
    clat: FioHist = field(default_factory=FioHist)
    slat: FioHist = field(default_factory=FioHist)
    bw: Windows | None = None
    iops: Windows | None = None
    sec: Windows | None = None
    short_ios: int = 0

    def merge(self, other: "DirStats") -> None:
        self.ios += other.ios
        self.bytes += other.bytes
        self.short_ios += other.short_ios
        for name in ("lat", "clat", "slat"):
            getattr(self, name).merge(getattr(other, name))
        for name in ("bw", "iops", "sec"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is None:
                continue
            if mine is None:
                w = Windows(theirs.t0, theirs.step)
                w.merge(theirs)
                setattr(self, name, w)
            else:
                mine.merge(theirs)


@dataclass
class LogRecords:
    """Every I/O a per-I/O log needs: completion time, latencies, size, offset, priority (arrays, ns and B)."""
    end: list[np.ndarray] = field(default_factory=list)
    lat: list[np.ndarray] = field(default_factory=list)
    slat: list[np.ndarray] = field(default_factory=list)
    size: list[np.ndarray] = field(default_factory=list)
    offset: list[np.ndarray] = field(default_factory=list)
    prio: list[np.ndarray] = field(default_factory=list)


class JobStats:
    """A job's (or a group's) measurements: per direction :class:`DirStats`, depth tables, errors, CPU."""

    def __init__(self, start_ns: int, *, bw_ms: int = 500, iops_ms: int = 500, ramp_end_ns: int = 0,
                 ramp_bytes: int = 0, keep_logs: bool = False) -> None:
        self.start_ns = start_ns
        self.measure_from = max(start_ns, ramp_end_ns)
        self.ramp_bytes = ramp_bytes
        self.ramped_bytes = 0
        self.stop_ns = start_ns
        self.bw_ms, self.iops_ms = bw_ms, iops_ms
        self.dirs: dict[str, DirStats] = {}
        self.depth = np.zeros(len(DEPTH_LEVELS), dtype=np.int64)
        self.submit = np.zeros(len(SUBMIT_LEVELS) + 1, dtype=np.int64)
        self.complete = np.zeros(len(SUBMIT_LEVELS) + 1, dtype=np.int64)
        self.lat_table = np.zeros(LAT_EDGES_NS.size + 1, dtype=np.int64)
        self.errors = 0
        self.first_error = 0
        self.cpu = {"usr_s": 0.0, "sys_s": 0.0, "ctx": 0, "majf": 0, "minf": 0}
        self.logs: dict[str, LogRecords] | None = {} if keep_logs else None
        #: fio's latency target and steady state reports, when the job had them
        self.latency_target: dict[str, Any] | None = None
        self.steadystate: dict[str, Any] | None = None
        #: the job ended before its amount or time (steady, or its latency target found)
        self.ended = False

    def dir(self, kind: str) -> DirStats:
        d = self.dirs.get(kind)
        if d is None:
            t0 = self.measure_from
            d = self.dirs[kind] = DirStats(bw=Windows(t0, self.bw_ms * 1_000_000),
                                           iops=Windows(t0, self.iops_ms * 1_000_000), sec=Windows(t0, 1_000_000_000))
        return d

    def add(self, kind: str, lat: np.ndarray, ends: np.ndarray, sizes: np.ndarray | int, *,
            slat: np.ndarray | None = None, offsets: np.ndarray | None = None,
            prio: np.ndarray | None = None) -> None:
        """Fold in completed I/Os of one direction (ns; ``sizes`` an array or one size for all)."""
        if not ends.size:
            return
        keep = None
        if self.ramp_bytes and self.ramped_bytes < self.ramp_bytes:
            sz = sizes if isinstance(sizes, np.ndarray) else np.full(ends.size, sizes, dtype=np.int64)
            cum = self.ramped_bytes + np.cumsum(sz)
            keep = cum > self.ramp_bytes
            self.ramped_bytes = int(cum[-1])
            if not keep.any():
                return
            self.measure_from = max(self.measure_from, int(ends[keep].min()))
        if self.measure_from > self.start_ns:
            k2 = ends >= self.measure_from
            keep = k2 if keep is None else keep & k2
        if keep is not None and not keep.all():
            lat, ends = lat[keep], ends[keep]
            sizes = sizes[keep] if isinstance(sizes, np.ndarray) else sizes
            slat = slat[keep] if slat is not None else None
            offsets = offsets[keep] if offsets is not None else None
            prio = prio[keep] if prio is not None else None
        if not ends.size:
            return
        d = self.dir(kind)
        d.ios += int(ends.size)
        d.bytes += int(sizes.sum()) if isinstance(sizes, np.ndarray) else int(sizes) * int(ends.size)
        if slat is None:  # completion latency is the whole latency: one histogram made, counted twice
            h = FioHist()
            h.add(lat)
            d.lat.merge(h)
            d.clat.merge(h)
        else:
            d.lat.add(lat)
        self.lat_table += np.bincount(np.searchsorted(LAT_EDGES_NS, lat, side="right"),
                                      minlength=self.lat_table.size)[: self.lat_table.size]
        if slat is not None:
            d.slat.add(slat)
            d.clat.add(lat - slat)
        for w in (d.bw, d.iops, d.sec):
            assert w is not None
            w.add(ends, sizes)
        if self.logs is not None:
            rec = self.logs.setdefault(kind, LogRecords())
            rec.end.append(ends.copy())
            rec.lat.append(lat.copy())
            rec.slat.append(slat.copy() if slat is not None else np.zeros(ends.size, dtype=np.int64))
            rec.size.append(sizes.copy() if isinstance(sizes, np.ndarray) else np.full(ends.size, sizes,
                                                                                       dtype=np.int64))
            rec.offset.append(offsets.copy() if offsets is not None else np.zeros(ends.size, dtype=np.int64))
            rec.prio.append(prio.copy() if prio is not None else np.zeros(ends.size, dtype=np.int64))

    def reset(self, t: int) -> None:
        """Forget what was measured before ``t`` (the final window of a latency target, as fio resets)."""
        self.dirs.clear()
        self.measure_from = t
        self.lat_table[:] = 0
        self.depth[:] = 0
        if self.logs is not None:
            self.logs.clear()

    def count_depth(self, depth: int, n: int = 1) -> None:
        """``n`` I/Os submitted with ``depth`` in flight (fio's iodepth levels)."""
        i = 0
        while i < len(DEPTH_LEVELS) - 1 and depth > DEPTH_LEVELS[i] and depth >= DEPTH_LEVELS[i + 1]:
            i += 1
        self.depth[i] += n

    @staticmethod
    def _level(n: int) -> int:
        for i, edge in enumerate(SUBMIT_LEVELS):
            if n <= edge:
                return i
        return len(SUBMIT_LEVELS)

    def count_submit(self, n: int) -> None:
        self.submit[self._level(n)] += 1

    def count_complete(self, n: int) -> None:
        self.complete[self._level(n)] += 1

    def error(self, errno_value: int) -> None:
        self.errors += 1
        if not self.first_error:
            self.first_error = errno_value

    def merge(self, other: "JobStats") -> None:
        """Add another job's (or the same job's other process's) measurements."""
        self.start_ns = min(self.start_ns, other.start_ns)
        self.measure_from = min(self.measure_from, other.measure_from)
        self.stop_ns = max(self.stop_ns, other.stop_ns)
        for kind, d in other.dirs.items():
            if kind in self.dirs:
                self.dirs[kind].merge(d)
            else:
                mine = self.dir(kind)
                mine.merge(d)
        self.depth += other.depth
        self.lat_table += other.lat_table
        self.submit += other.submit
        self.complete += other.complete
        self.errors += other.errors
        self.first_error = self.first_error or other.first_error
        self.ended = self.ended or other.ended
        self.latency_target = self.latency_target or other.latency_target
        self.steadystate = self.steadystate or other.steadystate
        for k in self.cpu:
            self.cpu[k] += other.cpu[k]
        if self.logs is not None and other.logs is not None:
            for kind, rec in other.logs.items():
                mine_rec = self.logs.setdefault(kind, LogRecords())
                for name in ("end", "lat", "slat", "size", "offset", "prio"):
                    getattr(mine_rec, name).extend(getattr(rec, name))

    @property
    def runtime_ns(self) -> int:
        return max(0, self.stop_ns - self.measure_from)

    def latency_tables(self) -> dict[str, dict[str, float]]:
        """fio's latency_ns, latency_us and latency_ms: the share (%) of I/Os in each bucket."""
        total = int(self.lat_table.sum())
        pct = self.lat_table * (100.0 / total) if total else np.zeros(self.lat_table.size)
        out, i = {}, 0
        for name, labels in LAT_LABELS.items():
            out[name] = {lab: float(pct[i + j]) for j, lab in enumerate(labels)}
            i += len(labels)
        return out


def sample_stats(values: np.ndarray) -> dict[str, float]:
    """min, max, mean, sample standard deviation and count of bandwidth or IOPS samples."""
    if not values.size:
        return {"min": 0, "max": 0, "mean": 0.0, "dev": 0.0, "samples": 0}
    return {"min": float(values.min()), "max": float(values.max()), "mean": float(values.mean()),
            "dev": float(values.std(ddof=1)) if values.size > 1 else 0.0, "samples": int(values.size)}


def window_rates(w: Windows | None, stop_ns: int, *, per_bytes: bool) -> np.ndarray:
    """Per complete window, bytes/s (``per_bytes``) or I/Os per second."""
    if w is None:
        return np.zeros(0)
    n = w.complete(stop_ns)
    vals = (w.bytes if per_bytes else w.ios)[:n].astype(np.float64)
    return vals / (w.step / 1e9)


def timeline(d: DirStats | None, stop_ns: int) -> dict[str, Any]:
    """Per second: IOPS and MiB/s, the last (partial) second divided by its real length."""
    if d is None or d.sec is None or not d.sec.ios.size:
        return {"interval_s": 1.0, "t_s": [], "mib_s": [], "iops": []}
    w = d.sec
    total = max(0, stop_ns - w.t0)
    n = max(1, -(-total // w.step))
    ios = np.zeros(n)
    byts = np.zeros(n)
    m = min(n, w.ios.size)
    ios[:m] = w.ios[:m]
    byts[:m] = w.bytes[:m]
    if w.ios.size > n:  # completions stamped after the stop (clock granularity): the last interval keeps them
        ios[-1] += w.ios[n:].sum()
        byts[-1] += w.bytes[n:].sum()
    lengths = np.full(n, w.step / 1e9)
    tail = total - (n - 1) * w.step
    if tail > 0:
        lengths[-1] = tail / 1e9
    return {"interval_s": 1.0, "t_s": [round(min((i + 1) * w.step, total) / 1e9, 6) for i in range(n)],
            "mib_s": [float(x) for x in byts / lengths / (1 << 20)], "iops": [float(x) for x in ios / lengths]}
