"""Predicted vs measured: run every scenario of a measurements file and compare row by row.

Every published row falls in one of three groups:

* ``fitted``: a train row that a fit group (``sdbench/data/fits/*.toml``) uses to calibrate card or host
  parameters; its agreement shows how well the fit converged, not what the model predicts;
* ``train-prediction``: a train row no fit group uses: a prediction checked against the published figure;
* ``withheld-prediction``: a withheld row (no measured value here): a prediction compared independently.

Simulated rows may carry ``time_ms_range`` (low and high of the mean ms per call, from the fitted
parameters' uncertainty); the comparison converts it to the row's unit and reports how often the measured
figure lies inside it (interval coverage) and how wide it is (high / low).

Cross-validation by host and by card, and the structural error it measures, are :mod:`sdbench.crossval`'s.
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from . import scenarios as scen
from .calibrate import FitGroup, Measurement, groups, row_level, row_value
from .errors import ConfigError, SdbenchError
from .protocols import run_scenarios
from .records import Row

FITTED = "fitted"
TRAIN_PREDICTION = "train-prediction"
WITHHELD_PREDICTION = "withheld-prediction"
#: the row groups, in the order they are reported
GROUPS = (FITTED, TRAIN_PREDICTION, WITHHELD_PREDICTION)
#: throughput units: a longer time is a smaller figure, so a range's ends swap
THROUGHPUT_UNITS = ("KiB/s", "KB/s", "MB/s", "MiB/s")
KNOWN_UNITS = ("ms", "us", "µs", *THROUGHPUT_UNITS)
SPLITS = ("train", "withheld")
#: share of a relative error that counts as close
CLOSE = 0.10
#: factor max(p/m, m/p) that counts as the right magnitude
FACTOR = 1.5


def _say(msg: str) -> None:
    print(msg, file=sys.stderr)


# ---- which rows are fitted -------------------------------------------------------------------------------

def fitted_rows(fit_groups: Iterable[FitGroup] | None = None) -> set[tuple[str, str]]:
    """(scenario, row label) of every row a fit group uses (default: the shipped groups)."""
    gs = groups().values() if fit_groups is None else fit_groups
    return {pair for g in gs for pair in g.rows}


def row_group(m: Measurement, fitted: set[tuple[str, str]]) -> str:
    """The group of a measured row: fitted, train-prediction or withheld-prediction."""
    if m.split != "train" or m.value is None:
        return WITHHELD_PREDICTION
    return FITTED if (m.scenario, m.row) in fitted else TRAIN_PREDICTION


def check_measurements(meas: list[Measurement], where: str = "measurements file") -> None:
    """Refuse a measurements file validate cannot compare (one line, ConfigError)."""
    if not meas:
        raise ConfigError(f"{where}: no rows")
    for m in meas:
        what = f"{where}: {m.scenario}: {m.row}"
        if m.split not in SPLITS:
            raise ConfigError(f"{what}: split {m.split!r:.40} is not one of {', '.join(SPLITS)}")
        if m.unit not in KNOWN_UNITS:
            raise ConfigError(f"{what}: unit {m.unit!r:.40} is not one of {', '.join(KNOWN_UNITS)}")
        if m.split == "train" and (m.value is None or not m.value > 0 or m.value == float("inf")):
            raise ConfigError(f"{what}: a train row needs a measured value above 0")
        if m.split == "withheld" and m.value is not None:
            raise ConfigError(f"{what}: withheld rows carry no measured value (it is compared independently)")


# ---- ranges ----------------------------------------------------------------------------------------------

def _value_at(row: Row, unit: str, time_ms: float) -> float:
    return row_value(dataclasses.replace(row, time_ms=time_ms), unit)


def row_range(row: Row, unit: str) -> tuple[float, float] | None:
    """The row's ``time_ms_range`` in ``unit`` as (low, high), or None when the row carries none (or a
    throughput range reaches a time of 0, which has no finite figure)."""
    rng = getattr(row, "time_ms_range", None)
    if rng is None:
        return None
    lo_ms, hi_ms = float(rng[0]), float(rng[1])
    if unit in THROUGHPUT_UNITS and min(lo_ms, hi_ms) <= 0:
        return None
    a, b = _value_at(row, unit, lo_ms), _value_at(row, unit, hi_ms)
    return (min(a, b), max(a, b))


def inside(measured: float | None, rng: Sequence[float] | None) -> bool | None:
    """Whether the measured figure lies in the range (ends included); None without either."""
    if measured is None or rng is None:
        return None
    return rng[0] <= measured <= rng[1]


def range_width(rng: Sequence[float] | None) -> float | None:
    """A range's width as the ratio high / low (None without a range or with low <= 0)."""
    if rng is None or not rng[0] > 0:
        return None
    return rng[1] / rng[0]


# ---- the comparison --------------------------------------------------------------------------------------

def compare_row(m: Measurement, r: Row | None, group: str) -> dict[str, Any]:
    """One measured row against the simulated row (None: the scenario did not emit it)."""
    pred = row_value(r, m.unit) if r is not None else None
    err = (pred - m.value) / m.value if (pred is not None and m.value) else None
    rng = row_range(r, m.unit) if r is not None else None
    return {"scenario": m.scenario, "row": m.row, "level": row_level(m), "split": m.split, "group": group,
            "unit": m.unit, "measured": m.value, "predicted": pred, "error": err,
            "range": None if rng is None else [rng[0], rng[1]], "inside": inside(m.value, rng),
            "emitted": r is not None, "op": r.op if r is not None else ""}


def validate_rows(meas: list[Measurement], names: list[str] | None = None,
                  progress: bool = False, ranges: bool = True,
                  workers: int = 1) -> tuple[list[dict[str, Any]], list[str]]:
    """Run the scenarios named in ``meas`` (or ``names``, which must be among them) and compare every row;
    ``workers``: the scenarios run side by side in that many processes (the rows do not depend on it).

    Returns the rows (see :func:`compare_row`) and the scenarios of the data that are not built in."""
    in_data = sorted({m.scenario for m in meas})
    known = set(scen.builtin_names())
    if not known & set(in_data):
        shown = ", ".join(repr(n)[:60] for n in in_data[:3]) + (", ..." if len(in_data) > 3 else "")
        raise SdbenchError(f"the measurements file names no built-in scenario ({shown}): nothing to compare")
    for name in names or ():
        if name not in in_data:
            if name in known:
                raise SdbenchError(f"scenario {name!r:.80} has no rows in the measurements file")
            raise SdbenchError(f"unknown scenario {name!r:.80} (the measurements file names {len(in_data)}: "
                               f"see `sdbench validate` without arguments)")
    wanted = list(dict.fromkeys(names)) if names else in_data
    fitted = fitted_rows()
    missing = [n for n in wanted if n not in known]
    run = [n for n in wanted if n in known]
    records = _run_all(run, progress, ranges, workers)
    out: list[dict[str, Any]] = []
    for name in run:
        got = {r.label: r for r in records[name].rows}
        for m in meas:
            if m.scenario == name:
                out.append(compare_row(m, got.get(m.row), row_group(m, fitted)))
    return out, missing


def _run_all(names: list[str], progress: bool, ranges: bool, workers: int) -> dict[str, Any]:
    """Each scenario's record, one after another or in ``workers`` processes (:func:`run_scenarios`); the first
    that fails (in the order given) raises its error, as a run one by one would."""
    if progress:
        _say(f"simulating {len(names)} scenarios in {max(1, min(workers, len(names)))} process(es) ...")

    def done(i: int, res: Any) -> None:
        if progress:
            _say(f"  {names[i]}" + (f": {res}" if isinstance(res, SdbenchError) else " done"))
    results = run_scenarios([scen.load(n) for n in names], workers=workers, ranges=ranges, done=done,
                            progress=progress)
    for res in results:
        if isinstance(res, BaseException):
            raise res
    return dict(zip(names, results))


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def within_factor(measured: float, predicted: float, factor: float = FACTOR) -> bool:
    """max(p/m, m/p) <= factor (a prediction of 0 is never within)."""
    if not (measured > 0 and predicted > 0):
        return False
    return max(predicted / measured, measured / predicted) <= factor


def group_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Statistics of one group's rows: count, median |error|, share within 10 % and ×1.5, interval coverage
    (share of rows with a range whose measured figure is inside; None when no row has a range) and the median
    range width (high / low).  Rows without a measured value only count and add to the range width."""
    compared = [r for r in rows if r["measured"] is not None and r["predicted"] is not None]
    errs = [abs(r["error"]) for r in compared if r["error"] is not None]
    ranged = [r for r in compared if r["range"] is not None]
    widths = [w for w in (range_width(r["range"]) for r in rows) if w is not None]
    worst = max(compared, key=lambda r: abs(r["error"]), default=None) if errs else None
    return {
        "rows": len(rows),
        "compared": len(compared),
        "predicted": sum(1 for r in rows if r["predicted"] is not None),
        "median_abs_error": _median(errs),
        "worst_abs_error": max(errs) if errs else None,
        "worst_row": None if worst is None else f"{worst['scenario']}: {worst['row']}",
        "within_10pct": _share([e <= CLOSE for e in errs]),
        "within_x1_5": _share([within_factor(r["measured"], r["predicted"]) for r in compared]),
        "rows_with_range": sum(1 for r in rows if r["range"] is not None),
        "coverage": _share([bool(r["inside"]) for r in ranged]),
        "median_range_width": _median(widths),
    }


def summarise_groups(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`group_stats` per group (every group, in :data:`GROUPS` order, even when empty)."""
    return {g: group_stats([r for r in rows if r["group"] == g]) for g in GROUPS}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per level (raw ±10 %, bridge ±15 %, file ±20 %) over the train rows, fitted or not."""
    s: dict[str, Any] = {}
    for level, tol in (("raw", 0.10), ("bridge", 0.15), ("file", 0.20)):
        errs = [abs(r["error"]) for r in rows if r["split"] == "train" and r["level"] == level and r["error"] is not None]
        if errs:
            s[level] = {"rows": len(errs), "median_abs_error": statistics.median(errs), "worst_abs_error": max(errs),
                        "tolerance": tol, "within_tolerance": sum(e <= tol for e in errs)}
    s["not_emitted"] = [f"{r['scenario']}: {r['row']}" for r in rows if not r["emitted"]]
    s["withheld_predicted"] = sum(1 for r in rows if r["split"] == "withheld" and r["predicted"] is not None)
    return s

