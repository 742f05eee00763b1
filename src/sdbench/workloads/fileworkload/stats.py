"""A step's row as its repetitions fill it, and the per-step summary stored with the run (calls, bytes, latency
percentiles)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...records import Row
from ...runner import RowTimer
from .steps import StepConfig


@dataclass
class StepRun:
    """A step's row as it fills: its timer, bytes moved and entries listed."""

    timer: RowTimer
    bytes_total: int = 0
    calls: int = 0
    entries: int | None = None


def finish(sr: StepRun, s: StepConfig, k: int, summary: list[dict[str, Any]]) -> Row:
    """The step's row; its summary (calls, bytes, p50/p99/max/mean ms, entries listed) goes to ``summary``."""
    t = sr.timer
    t.nbytes = sr.bytes_total // sr.calls if sr.calls else 0
    row = t.finish()
    ms = sorted(row.samples_ms)
    info: dict[str, Any] = {"step": k, "label": s.label, "op": s.op, "calls": row.runs,
                            "bytes_total": sr.bytes_total, "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99),
                            "max_ms": ms[-1], "mean_ms": row.time_ms}
    if sr.entries is not None:
        info["entries"] = sr.entries
    summary.append(info)
    return row


def percentile(sorted_ms: list[float], p: float) -> float:
    """Nearest-rank percentile: the ceil(p/100 * n)-th smallest sample."""
    return sorted_ms[max(0, math.ceil(p / 100 * len(sorted_ms)) - 1)]
