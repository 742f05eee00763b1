"""Latency statistics: a log-linear histogram and a per-interval throughput timeline.

Histogram layout (as in HdrHistogram-style recorders): values are integer
nanoseconds.  With ``k`` sub-bucket bits there are ``2**k`` equal-width buckets
per power of two; values below ``2**(k+1)`` get a bucket each (exact).  A value
``v`` with ``bit_length(v) = b`` lands in bucket::

    shift = max(b - 1 - k, 0)
    index = 2**k * shift + (v >> shift)

so a bucket's width ``2**shift`` is at most ``1/2**k`` of its lower bound.
Percentiles use the nearest-rank definition (the ``ceil(p/100 * n)``-th
smallest sample) and report the middle of the bucket holding that sample,
hence **the reported value is within a relative error of 2**-(k+1) of the
exact percentile** (k = 7, the default: 0.39 %).  min, max and mean are exact.

Memory is fixed: ``64 * 2**k`` counters cover every 63-bit value.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

#: percentiles reported by :meth:`LatencyHistogram.summary_us`
SUMMARY_PERCENTILES = (50.0, 99.0, 99.9)


class LatencyHistogram:
    """Counts of nanosecond latencies in log-linear buckets."""

    def __init__(self, sub_bucket_bits: int = 7) -> None:
        if not 1 <= sub_bucket_bits <= 16:
            raise ValueError("sub_bucket_bits must be 1..16")
        self.k = sub_bucket_bits
        self.sub = 1 << sub_bucket_bits
        self.counts = np.zeros(self.sub * (64 - sub_bucket_bits + 1), dtype=np.int64)
        self.count = 0
        self.sum_ns = 0
        self.min_ns: int | None = None
        self.max_ns: int | None = None

    # ---- recording ------------------------------------------------------------------
    @property
    def relative_error(self) -> float:
        """Bound on |reported - exact| / exact for any percentile."""
        return 2.0 ** -(self.k + 1)

    def index_of(self, value_ns: int) -> int:
        shift = max(int(value_ns).bit_length() - 1 - self.k, 0)
        return self.sub * shift + (int(value_ns) >> shift)

    def bucket_bounds(self, index: int) -> tuple[int, int]:
        """[low, high) of a bucket, in ns."""
        shift = max(index // self.sub - 1, 0)
        low = (index - self.sub * shift) << shift
        return low, low + (1 << shift)

    def record(self, value_ns: int) -> None:
        v = int(value_ns)
        if v < 0:
            raise ValueError(f"negative latency {v} ns")
        self.counts[self.index_of(v)] += 1
        self.count += 1
        self.sum_ns += v
        self.min_ns = v if self.min_ns is None else min(self.min_ns, v)
        self.max_ns = v if self.max_ns is None else max(self.max_ns, v)

    def record_many(self, values_ns: Iterable[int] | np.ndarray) -> None:
        """Vectorised :meth:`record` (accepts arrays, array.array, lists)."""
        v = np.asarray(values_ns, dtype=np.int64)
        if v.size == 0:
            return
        if int(v.min()) < 0:
            raise ValueError("negative latency")
        # bit_length via frexp: exact for values below 2**53 ns (104 days)
        bl = np.frexp(v.astype(np.float64))[1].astype(np.int64)
        shift = np.maximum(bl - 1 - self.k, 0)
        idx = self.sub * shift + (v >> shift)
        self.counts += np.bincount(idx, minlength=self.counts.size)[: self.counts.size]
        self.count += int(v.size)
        self.sum_ns += int(v.sum(dtype=np.int64))
        lo, hi = int(v.min()), int(v.max())
        self.min_ns = lo if self.min_ns is None else min(self.min_ns, lo)
        self.max_ns = hi if self.max_ns is None else max(self.max_ns, hi)

    def merge(self, other: "LatencyHistogram") -> None:
        if other.k != self.k:
            raise ValueError("cannot merge histograms with different sub-bucket bits")
        self.counts += other.counts
        self.count += other.count
        self.sum_ns += other.sum_ns
        for name, pick in (("min_ns", min), ("max_ns", max)):
            o = getattr(other, name)
            if o is not None:
                s = getattr(self, name)
                setattr(self, name, o if s is None else pick(s, o))

    # ---- queries --------------------------------------------------------------------
    @property
    def mean_ns(self) -> float:
        return self.sum_ns / self.count if self.count else 0.0

    def percentile_ns(self, p: float) -> float:
        """Nearest-rank percentile, reported as the middle of its bucket."""
        if not 0.0 <= p <= 100.0:
            raise ValueError(f"percentile {p} outside 0..100")
        if self.count == 0:
            return 0.0
        rank = max(1, math.ceil(p / 100.0 * self.count))
        idx = int(np.searchsorted(np.cumsum(self.counts), rank))
        low, high = self.bucket_bounds(idx)
        value = low + (high - 1 - low) / 2.0
        # the extremes are known exactly; never report outside them
        return float(min(max(value, self.min_ns or 0), self.max_ns or 0))

    def summary_us(self) -> dict[str, float]:
        """min, max, mean, p50, p99, p99.9 in microseconds (JSON-ready)."""
        if self.count == 0:
            return {"count": 0}
        assert self.min_ns is not None and self.max_ns is not None
        out: dict[str, float] = {"count": self.count, "min_us": self.min_ns / 1e3, "max_us": self.max_ns / 1e3,
                                 "mean_us": self.mean_ns / 1e3}
        for p in SUMMARY_PERCENTILES:
            out[f"p{p:g}_us".replace(".", "_")] = self.percentile_ns(p) / 1e3
        return out

    def to_dict(self) -> dict[str, Any]:
        """Sparse buckets {index: count}, enough to rebuild and merge later."""
        nz = np.nonzero(self.counts)[0]
        return {"sub_bucket_bits": self.k, "count": self.count, "sum_ns": self.sum_ns, "min_ns": self.min_ns,
                "max_ns": self.max_ns, "buckets": {str(int(i)): int(self.counts[i]) for i in nz}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LatencyHistogram":
        h = cls(int(d["sub_bucket_bits"]))
        for i, c in d.get("buckets", {}).items():
            h.counts[int(i)] = int(c)
        h.count, h.sum_ns = int(d["count"]), int(d["sum_ns"])
        h.min_ns, h.max_ns = d.get("min_ns"), d.get("max_ns")
        return h


def exact_percentile(values: Iterable[int], p: float) -> int:
    """Nearest-rank percentile of raw samples (the reference the histogram approximates)."""
    s = sorted(values)
    if not s:
        return 0
    return s[max(1, math.ceil(p / 100.0 * len(s))) - 1]


def throughput_timeline(end_ns: Iterable[int] | np.ndarray, bytes_per_op: int, start_ns: int,
                        interval_s: float = 1.0, stop_ns: int | None = None) -> dict[str, list[float]]:
    """Per-interval throughput from op completion times.

    Returns ``{"t_s": [...], "mib_s": [...], "iops": [...]}`` where ``t_s`` is
    the end of each interval since ``start_ns``.  The last interval may be
    partial; its rates are divided by its real length.
    """
    ends = np.asarray(end_ns, dtype=np.int64)
    step = int(interval_s * 1e9)
    if step <= 0:
        raise ValueError("interval must be positive")
    last = int(stop_ns if stop_ns is not None else (ends.max() if ends.size else start_ns))
    total = max(last - start_ns, 0)
    n = max(1, -(-total // step))
    slots = np.clip((ends - start_ns) // step, 0, n - 1) if ends.size else np.zeros(0, dtype=np.int64)
    ops = np.bincount(slots, minlength=n)[:n] if ends.size else np.zeros(n, dtype=np.int64)
    lengths = np.full(n, step / 1e9)
    tail = total - (n - 1) * step
    if tail > 0:
        lengths[-1] = tail / 1e9
    iops = ops / lengths
    return {
        "t_s": [round(min((i + 1) * step, total) / 1e9, 6) for i in range(n)],
        "mib_s": [float(x) for x in iops * bytes_per_op / (1024 * 1024)],
        "iops": [float(x) for x in iops],
    }
