"""Predicted vs measured: run every scenario of a measurements file and compare row by row.

Every published row falls in one of three groups:

* ``fitted``: a train row that a fit group (``sdbench/data/fits/*.toml``) uses to calibrate card or host
  parameters; its agreement shows how well the fit converged, not what the model predicts;
* ``train-prediction``: a train row no fit group uses: a prediction checked against the published figure;
* ``withheld-prediction``: a withheld row (no measured value here): a prediction compared independently.

Simulated rows may carry ``time_ms_range`` (low and high of the mean ms per call, from the fitted
parameters' uncertainty); the comparison converts it to the row's unit and reports how often the measured
figure lies inside it (interval coverage) and how wide it is (high / low).

:func:`cross_validate` is leave-one-card-out cross-validation over the cards of one fit group (the P2
benchmark's): each card in turn gets the median of the other cards' fitted values, and its rows are
predicted with those.
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import scenarios as scen
from .calibrate import FitGroup, Measurement, groups, row_level, row_value
from .errors import ConfigError, SdbenchError
from .options import toml_string
from .protocols import run_scenario
from .records import Row
from .stack.sd import load_card

FITTED = "fitted"
TRAIN_PREDICTION = "train-prediction"
WITHHELD_PREDICTION = "withheld-prediction"
#: the row groups, in the order they are reported
GROUPS = (FITTED, TRAIN_PREDICTION, WITHHELD_PREDICTION)
#: throughput units: a longer time is a smaller figure, so a range's ends swap
THROUGHPUT_UNITS = ("KiB/s", "MB/s", "MiB/s")
KNOWN_UNITS = ("ms", "us", "µs", *THROUGHPUT_UNITS)
SPLITS = ("train", "withheld")
#: share of a relative error that counts as close
CLOSE = 0.10
#: factor max(p/m, m/p) that counts as the right magnitude
FACTOR = 1.5
#: leave-one-card-out target: median |error| over every held-out row
CROSS_TARGET = 0.15


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
                  progress: bool = False, ranges: bool = True) -> tuple[list[dict[str, Any]], list[str]]:
    """Run the scenarios named in ``meas`` (or ``names``, which must be among them) and compare every row.

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
    out: list[dict[str, Any]] = []
    missing = []
    for name in wanted:
        if name not in known:
            missing.append(name)
            continue
        if progress:
            _say(f"simulating {name} ...")
        rec = run_scenario(scen.load(name), ranges=ranges, progress=progress)
        got = {r.label: r for r in rec.rows}
        for m in meas:
            if m.scenario == name:
                out.append(compare_row(m, got.get(m.row), row_group(m, fitted)))
    return out, missing


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


# ---- leave-one-card-out cross-validation -----------------------------------------------------------------

CROSS_GROUP = "p2"
#: the fit group's scenarios' family: every scenario named <prefix><clock>-<card> runs that card
CROSS_PREFIX = "p2-spi25-"


@dataclasses.dataclass(frozen=True)
class CrossCard:
    card: str                          # card profile name
    fit_scenario: str                  # the group's scenario that fits it
    fields: tuple[str, ...]            # card fields the fit constrains for this card
    scenarios: tuple[str, ...]         # every scenario of the family running this card


def cross_cards(group: FitGroup, prefix: str = CROSS_PREFIX) -> dict[str, CrossCard]:
    """The group's cards by profile name, with the fields their fit constrains and all their scenarios.

    A field counts for a card only when the card's rows constrain it: in a staged fit, the row its sequence
    step solves against must be one of the card's fitted rows (a card without published raw writes keeps its
    write fields at their starting values, which are not fitted values)."""
    steps = dict(group.sequence)
    names = [n for n in scen.builtin_names() if n.startswith(prefix)]
    out: dict[str, CrossCard] = {}
    for s in group.scenarios:
        rows = {r for sc, r in group.rows if sc == s}
        fields = tuple(p.name for p in group.params if p.target == f"card:{s}"
                       and (p.name not in steps or steps[p.name] in rows))
        if not fields:
            continue
        card = str(scen.load(s).sd.get("card"))
        runs = tuple(n for n in names if n.endswith(f"-{card}") and str(scen.load(n).sd.get("card")) == card)
        out[card] = CrossCard(card, s, fields, runs or (s,))
    return out


def _num(v: float) -> str:
    return repr(round(float(v), 6))


def cross_overrides(held_out: str, values: dict[str, dict[str, float]],
                    fields: Sequence[str]) -> dict[str, float]:
    """The held-out card's ``fields`` set to the median of the other cards' fitted values.

    ``values``: card -> field -> fitted value, for the cards whose fit constrains that field."""
    out = {}
    for f in fields:
        others = [v[f] for c, v in values.items() if c != held_out and f in v]
        if not others:
            raise SdbenchError(f"cross-validation: no other card has a fitted {f}")
        out[f] = float(statistics.median(others))
    return out


def cross_validate(meas: list[Measurement], cards: Sequence[str] | None = None, group: str = CROSS_GROUP,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Leave-one-card-out over the cards of fit group ``group`` (or the pool ``cards``, at least two of them).

    For each card: its fitted card fields are replaced by the median of the other cards' values (read from the
    shipped card profiles; everything else of the card, e.g. capacity and clock limits, stays), every scenario
    of the family that runs it is simulated, and its train rows are compared with the measured values."""
    gs = groups()
    if group not in gs:
        raise ConfigError(f"unknown fit group {group!r} (known: {', '.join(gs)})")
    g = gs[group]
    known = cross_cards(g)
    pool = list(dict.fromkeys(cards)) if cards else list(known)
    for c in pool:
        if c not in known:
            raise SdbenchError(f"card {c!r:.80} is not a card of fit group {group} (known: {', '.join(known)})")
    if len(pool) < 2:
        raise SdbenchError("cross-validation needs at least two cards")
    fitted = {c: {f: float(getattr(load_card(c), f)) for f in known[c].fields} for c in pool}
    by_scen: dict[str, list[Measurement]] = {}
    for m in meas:
        if m.split == "train" and m.value is not None:
            by_scen.setdefault(m.scenario, []).append(m)
    rows: list[dict[str, Any]] = []
    per_card = []
    for i, c in enumerate(pool, start=1):
        over = cross_overrides(c, fitted, known[c].fields)
        sets = [f"sd.card_params.{f}={_num(v)}" for f, v in over.items()]
        mine: list[dict[str, Any]] = []
        for s in known[c].scenarios:
            want = by_scen.get(s, [])
            if not want:  # no measured rows (withheld only): nothing to compare
                continue
            rec = run_scenario(scen.load(s, sets))
            got = {r.label: r for r in rec.rows}
            for m in want:
                row = compare_row(m, got.get(m.row), "held-out")
                row["card"] = c
                mine.append(row)
        errs = [abs(r["error"]) for r in mine if r["error"] is not None]
        worst = max((r for r in mine if r["error"] is not None), key=lambda r: abs(r["error"]), default=None)
        per_card.append({
            "card": c, "scenarios": list(known[c].scenarios), "overrides": over,
            "own": fitted[c], "rows": len(errs), "median_abs_error": _median(errs),
            "worst_abs_error": max(errs) if errs else None,
            "worst_row": None if worst is None else f"{worst['scenario']}: {worst['row']}",
            "worst_error": None if worst is None else worst["error"],
        })
        rows += mine
        if progress:
            med = per_card[-1]["median_abs_error"]
            progress(f"[{i}/{len(pool)}] {c}: {len(errs)} rows, median |error| "
                     f"{'n/a' if med is None else f'{med * 100:.1f} %'}")
    errs = [abs(r["error"]) for r in rows if r["error"] is not None]
    by_level = {}
    for level in ("raw", "bridge", "file"):
        le = [abs(r["error"]) for r in rows if r["level"] == level and r["error"] is not None]
        if le:
            by_level[level] = {"rows": len(le), "median_abs_error": statistics.median(le), "worst_abs_error": max(le)}
    overall = _median(errs)
    return {
        "group": group, "cards": per_card, "rows": rows, "target_median_abs_error": CROSS_TARGET,
        "overall": {"rows": len(errs), "median_abs_error": overall, "worst_abs_error": max(errs) if errs else None,
                    "meets_target": overall is not None and overall <= CROSS_TARGET, "by_level": by_level},
        "not_emitted": [f"{r['scenario']}: {r['row']}" for r in rows if not r["emitted"]],
    }


# ---- model error -----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ModelError:
    """The error of the model's predictions on train rows no fit group uses, per kind of row (read, write:
    :func:`sdbench.population.error_kind`)."""

    log_rel_sd: dict[str, float]                             # kind -> root mean square of log(predicted / measured)
    rows: tuple[tuple[str, str, str, float, float], ...]     # (kind, scenario, row, measured, predicted)
    #: share of the rows inside ±t·σ of their kind, σ taken from the other rows of that kind only and t the
    #: Student-t 90th percentile for their number (:func:`range_quantile`)
    loo_coverage: float
    #: kind -> the multiple of σ a range spans on each side (:func:`range_quantile` of the kind's row count)
    z: dict[str, float]


#: fewest rows of a kind its model error is measured from
MIN_ERROR_ROWS = 3


def range_quantile(n: int) -> float:
    """The multiple of a model error σ measured from ``n`` rows that a 10–90 % range spans on each side.

    σ is a root mean square over few rows, so it is itself uncertain: if the log errors are normal around 0, a
    new row's error over σ follows Student's t with ``n`` degrees of freedom, whose 90th percentile (1.53 for
    4 rows, 1.44 for 6) is wider than the normal's 1.28 that a known σ would give."""
    from scipy.special import stdtrit

    return float(stdtrit(n, 0.9))


def model_error(rows: list[dict[str, Any]]) -> ModelError:
    """The model error from :func:`validate_rows`' rows (their train-prediction group); ConfigError when a kind
    of row has fewer than :data:`MIN_ERROR_ROWS` compared rows."""
    import math

    from .population import ERROR_KINDS, error_kind

    used = [r for r in rows if r["group"] == TRAIN_PREDICTION and r["measured"] and r["predicted"]
            and r["measured"] > 0 and r["predicted"] > 0]
    sd: dict[str, float] = {}
    z: dict[str, float] = {}
    inside_: list[bool] = []
    out = []
    for kind in ERROR_KINDS:
        mine = [r for r in used if error_kind(r["op"]) == kind]
        if len(mine) < MIN_ERROR_ROWS:
            raise ConfigError(f"the model error of {kind}s needs at least {MIN_ERROR_ROWS} train rows that no fit "
                              f"group uses; {len(mine)} were compared")
        logs = [math.log(r["predicted"] / r["measured"]) for r in mine]
        sd[kind] = math.sqrt(math.fsum(x * x for x in logs) / len(logs))
        z[kind] = range_quantile(len(logs))
        t_loo = range_quantile(len(logs) - 1)
        for i, x in enumerate(logs):
            others = logs[:i] + logs[i + 1:]
            inside_.append(abs(x) <= t_loo * math.sqrt(math.fsum(y * y for y in others) / len(others)))
        out += [(kind, r["scenario"], r["row"], r["measured"], r["predicted"]) for r in mine]
    return ModelError(sd, tuple(out), sum(inside_) / len(inside_), z)


def model_error_toml(me: ModelError) -> str:
    """The text of ``data/model-error.toml``."""
    import math

    lines = ["# fitted by `sdbench calibrate --model-error`: the error of predictions on the train rows no fit group",
             "# uses, as the root mean square of log(predicted / measured), for rows that read and rows that write;",
             "# every simulated range adds z σ in quadrature on each side (sdbench.population.widen), z being the",
             "# Student-t 90th percentile for the kind's number of rows (sdbench.validation.range_quantile).",
             *(f"log_rel_sd_{k} = {v:.4f}" for k, v in me.log_rel_sd.items()),
             *(f"rows_{k} = {sum(1 for r in me.rows if r[0] == k)}" for k in me.log_rel_sd),
             *(f"z_{k} = {v:.4f}" for k, v in me.z.items()),
             "# share of the rows inside ±z σ when σ and z come from the other rows of their kind only",
             f"leave_one_out_coverage = {me.loo_coverage:.3f}",
             ""]
    for kind, s, row, m, p in me.rows:
        lines += ["[[row]]", f"kind = {toml_string(kind)}", f"scenario = {toml_string(s)}", f"row = {toml_string(row)}",
                  f"measured = {m:.6g}", f"predicted = {p:.6g}", f"log_error = {math.log(p / m):+.4f}", ""]
    return "\n".join(lines)
