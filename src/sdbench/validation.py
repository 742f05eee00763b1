"""Predicted vs measured: run every scenario of a measurements file and compare row by row."""
from __future__ import annotations

import statistics
import sys
from typing import Any

from . import scenarios as scen
from .calibrate import Measurement, row_level, row_value
from .protocols import run_scenario


def _say(msg: str) -> None:
    print(msg, file=sys.stderr)


def validate_rows(meas: list[Measurement], names: list[str] | None = None,
                  progress: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    wanted = names or sorted({m.scenario for m in meas})
    known = set(scen.builtin_names())
    out: list[dict[str, Any]] = []
    missing = []
    for name in wanted:
        rows = [m for m in meas if m.scenario == name]
        if name not in known:
            missing.append(name)
            continue
        if progress:
            _say(f"simulating {name} ...")
        rec = run_scenario(scen.load(name))
        got = {r.label: r for r in rec.rows}
        for m in rows:
            r = got.get(m.row)
            pred = row_value(r, m.unit) if r is not None else None
            err = (pred - m.value) / m.value if (pred is not None and m.value) else None
            out.append({"scenario": name, "row": m.row, "level": row_level(m), "split": m.split, "unit": m.unit,
                        "measured": m.value, "predicted": pred, "error": err, "emitted": r is not None})
    return out, missing


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    s: dict[str, Any] = {}
    for level, tol in (("raw", 0.10), ("bridge", 0.15), ("file", 0.20)):
        errs = [abs(r["error"]) for r in rows if r["split"] == "train" and r["level"] == level and r["error"] is not None]
        if errs:
            s[level] = {"rows": len(errs), "median_abs_error": statistics.median(errs), "worst_abs_error": max(errs),
                        "tolerance": tol, "within_tolerance": sum(e <= tol for e in errs)}
    s["not_emitted"] = [f"{r['scenario']}: {r['row']}" for r in rows if not r["emitted"]]
    s["withheld_predicted"] = sum(1 for r in rows if r["split"] == "withheld" and r["predicted"] is not None)
    return s


