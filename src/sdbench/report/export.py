"""Stored runs as JSON, CSV, Markdown or ESP-IDF perf_benchmark lines."""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from ..errors import SdbenchError
from ..records import Results, RunRecord
from ..workloads.espidf import espidf_line

FORMATS = ("json", "csv", "md", "espidf")
CSV_COLUMNS = ("run", "scenario", "source", "clock", "label", "op", "bytes", "reported_bytes", "runs", "time_ms",
               "time_ms_median", "time_ms_min", "time_ms_max", "time_ms_stdev", "mib_s", "unit", "value",
               "samples", "time_ms_low", "time_ms_high")


def export(runs: Sequence[tuple[int, RunRecord]], fmt: str, infos: Sequence[object] = ()) -> str:
    if fmt == "json":
        return Results(runs=tuple(r for _, r in runs)).to_json()
    if fmt == "csv":
        return to_csv(runs)
    if fmt == "md":
        return to_markdown(runs, infos)
    if fmt == "espidf":
        return "".join(to_espidf(r) for _, r in runs)
    raise SdbenchError(f"unknown export format {fmt!r} (known: {', '.join(FORMATS)})")


def to_csv(runs: Sequence[tuple[int, RunRecord]]) -> str:
    """One line per row; empty cells where a figure is unknown; ``samples`` = number of per-call samples;
    ``time_ms_low``/``time_ms_high``: the row's range (empty without one)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for rid, rec in runs:
        for r in rec.rows:
            w.writerow([rid, rec.scenario, rec.source, rec.clock, r.label, r.op, r.bytes,
                        "" if r.reported_bytes is None else r.reported_bytes, r.runs,
                        *("" if v is None else repr(float(v)) for v in (
                            r.time_ms, r.time_ms_median, r.time_ms_min, r.time_ms_max, r.time_ms_stdev, r.mib_s)),
                        r.unit, "" if r.value is None else repr(float(r.value)), len(r.samples_ms),
                        *(("", "") if r.time_ms_range is None else (repr(float(v)) for v in r.time_ms_range))])
    return buf.getvalue()


def to_markdown(runs: Sequence[tuple[int, RunRecord]], infos: Sequence[object] = ()) -> str:
    from .tables import rows_table, run_summary

    parts = []
    for i, (rid, rec) in enumerate(runs):
        info = infos[i] if i < len(infos) else None
        parts.append(f"### Run {rid}: {rec.scenario}\n")
        parts.append("\n".join(f"- {k}: {v}" for k, v in run_summary(None, info, rec)) + "\n")  # type: ignore[arg-type]
        if rec.warnings:
            parts.append("\n".join(f"- warning: {w}" for w in rec.warnings) + "\n")
        parts.append(rows_table(rec).markdown())
    return "\n".join(parts)


def to_espidf(rec: RunRecord) -> str:
    """The example's printf lines (SD raw rows keep sdbench's labels, so re-importing them is exact)."""
    return "".join(espidf_line(r) + "\n" for r in rec.rows)
