"""Comparing runs: side by side per row label, with ratios and significance.

Rows are matched by label.  The first run is the baseline; for every other run
a row gets ``speed_x`` = baseline mean time / this mean time (> 1: faster) and,
when both rows carry per-call samples, two tests of "same distribution":
Welch's t-test (means, unequal variances) and the Mann-Whitney U test (ranks,
robust to outliers).  The verdict is only "faster"/"slower" when both tests find a difference,
"not significant" when neither does and "unclear" when they disagree.
Rows imported from tools that print only means have no samples: they get a
ratio but no verdict.

:func:`card_table` is the other view: metrics as rows, runs as columns, the best
value per metric marked, as published card comparisons are laid out.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from .records import Row, RunRecord

ALPHA = 0.05
UNSTABLE_CV = 0.10       # coefficient of variation above which a row is flagged unstable
FEW_SAMPLES = 5          # fewer per-call samples than this make a test weak
TIME_UNITS = {"ms": 1.0, "us": 1e-3, "µs": 1e-3, "s": 1000.0}  # lower is better
#: a row of op "figure" holds a quantity other than a time in its value (time_ms 0): RAM needed (B), records
#: lost, a busy share (%), bytes programmed per byte (B/B): lower is better for all of them
FIGURE_OP = "figure"
LOWER_BETTER_UNITS = frozenset({"B", "records", "%", "B/B"})


@dataclass(frozen=True)
class Significance:
    welch_p: float | None
    mannwhitney_p: float | None
    verdict: str              # faster, slower, not significant, same (identical samples), unclear, n/a
    note: str = ""            # why n/a, or "no spread" for deterministic samples

    def short(self) -> str:
        if self.verdict == "n/a":
            return "n/a"
        if self.welch_p is None:
            return f"{self.verdict} ({self.note})" if self.note else self.verdict
        ps = [p for p in (self.welch_p, self.mannwhitney_p) if p is not None]
        p = max(ps)  # the weaker of the two tests
        ptxt = "p<0.001" if p < 0.001 else f"p={p:.3f}"
        return f"{self.verdict} ({ptxt})"


@dataclass(frozen=True)
class Cell:
    row: Row | None
    speed_x: float | None = None           # baseline time / this time; None for the baseline
    test: Significance | None = None


@dataclass(frozen=True)
class Line:
    label: str
    cells: tuple[Cell, ...]


@dataclass(frozen=True)
class Comparison:
    names: tuple[str, ...]
    lines: tuple[Line, ...]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class Rank:
    """One run's place: the geometric mean of its speed against the baseline over the rows every run has."""

    name: str
    speed_x: float            # > 1: faster than the baseline overall
    rows: int                 # rows the mean is over
    faster: int               # rows whose verdict is "faster"
    slower: int


def ranking(cmp: Comparison) -> list[Rank]:
    """Runs from fastest to slowest: per run, the geometric mean of baseline time / its time over the rows that
    every run has with the same bytes per call (per-byte time, so rows of different sizes weigh alike)."""
    shared = [ln for ln in cmp.lines
              if all(c.row is not None and c.row.time_ms > 0 for c in ln.cells)
              and len({c.row.bytes for c in ln.cells if c.row is not None}) == 1]
    if not shared:
        return []
    out = []
    for i, name in enumerate(cmp.names):
        logs = [0.0 if i == 0 else math.log(ln.cells[i].speed_x) for ln in shared
                if i == 0 or (ln.cells[i].speed_x or 0) > 0]
        verdicts = [ln.cells[i].test.verdict for ln in shared if i and ln.cells[i].test is not None]
        out.append(Rank(name, math.exp(math.fsum(logs) / len(logs)) if logs else 1.0, len(logs),
                        verdicts.count("faster"), verdicts.count("slower")))
    return sorted(out, key=lambda r: -r.speed_x)


def cv(row: Row) -> float | None:
    """Coefficient of variation of the per-call times (None when unknown)."""
    if row.samples_ms and len(row.samples_ms) >= 2:
        n = len(row.samples_ms)
        mean = math.fsum(row.samples_ms) / n
        if mean <= 0:
            return None
        var = math.fsum((s - mean) ** 2 for s in row.samples_ms) / (n - 1)
        return math.sqrt(var) / mean
    if row.time_ms_stdev is not None and row.runs >= 2 and row.time_ms > 0:
        return row.time_ms_stdev / row.time_ms
    return None


def significance(base: Row, other: Row, alpha: float = ALPHA) -> Significance:
    """Do ``other``'s per-call times differ from ``base``'s?  (faster = lower times)"""
    a, b = list(base.samples_ms), list(other.samples_ms)
    if len(a) < 2 or len(b) < 2:
        why = "no per-call samples" if not a or not b else "fewer than 2 samples"
        return Significance(None, None, "n/a", why)
    direction = "faster" if math.fsum(b) / len(b) < math.fsum(a) / len(a) else "slower"
    if min(a) == max(a) and min(b) == max(b):
        # deterministic (virtual clock) samples: any difference is exact
        if a[0] == b[0]:
            return Significance(None, None, "same", "no spread")
        return Significance(None, None, direction, "no spread")
    from scipy import stats

    with warnings.catch_warnings():
        # one side without spread (e.g. a simulated run) makes scipy warn about precision; the result stands
        warnings.simplefilter("ignore", RuntimeWarning)
        welch = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
        try:
            mwu: float | None = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
        except ValueError:
            mwu = None
    welch_p = None if math.isnan(welch) else welch
    mwu_p = None if mwu is None or math.isnan(mwu) else mwu
    sig = [p < alpha for p in (welch_p, mwu_p) if p is not None]
    if not sig:
        return Significance(welch_p, mwu_p, "n/a", "tests undefined")
    if all(sig):
        verdict = direction
    elif not any(sig):
        verdict = "not significant"
    else:
        verdict = "unclear"
    return Significance(welch_p, mwu_p, verdict)


def _labels(runs: Sequence[RunRecord]) -> list[str]:
    seen: dict[str, None] = {}
    for r in runs:
        for row in r.rows:
            seen.setdefault(row.label, None)
    return list(seen)


def _row(run: RunRecord, label: str) -> Row | None:
    try:
        return run.row(label)
    except KeyError:
        return None


def compare_runs(runs: Sequence[tuple[str, RunRecord]], *, alpha: float = ALPHA) -> Comparison:
    """Compare runs (``(name, record)`` pairs, baseline first) row label by row label.

    A run that is not complete (its record's status) gets a warning.
    """
    names = tuple(n for n, _ in runs)
    recs = [r for _, r in runs]
    lines = []
    for label in _labels(recs):
        rows = [_row(r, label) for r in recs]
        base = rows[0]
        cells = [Cell(base)]
        for row in rows[1:]:
            if row is None or base is None:
                cells.append(Cell(row))
                continue
            if base.op == FIGURE_OP and row.op == FIGURE_OP:
                b_v, r_v = base.reported_value, row.reported_value   # lower is better: baseline / this
                ratio = b_v / r_v if r_v > 0 and b_v > 0 else None
            else:
                ratio = base.time_ms / row.time_ms if row.time_ms > 0 and base.time_ms > 0 else None
            cells.append(Cell(row, ratio, significance(base, row, alpha)))
        lines.append(Line(label, tuple(cells)))
    return Comparison(names, tuple(lines), tuple(comparison_warnings(runs)))


def comparison_warnings(runs: Sequence[tuple[str, RunRecord]], *, max_listed: int = 5) -> list[str]:
    out = []
    for name, rec in runs:
        if rec.status == "failed":
            out.append(f"{name} failed ({rec.status_reason or 'no reason recorded'}): rows it did not reach are "
                       "missing")
        elif rec.status != "complete":
            out.append(f"{name} is {rec.status} (interrupted): rows it did not reach are missing")
    clocks = {r.clock for _, r in runs}
    if len(clocks) > 1:
        sim = ", ".join(n for n, r in runs if r.clock == "virtual")
        out.append(f"simulated and measured runs are mixed ({sim} simulated): differences include model error")
    for name, rec in runs:
        unstable = []
        few = no = 0
        for row in rec.rows:
            c = cv(row)
            if c is not None and c > UNSTABLE_CV and rec.clock == "wall":
                unstable.append(f"'{row.label}' (CV {c:.0%} over {row.runs} calls)")
            if not row.samples_ms:
                no += 1
            elif len(row.samples_ms) < FEW_SAMPLES:
                few += 1
        if unstable:
            more = f" and {len(unstable) - max_listed} more" if len(unstable) > max_listed else ""
            out.append(f"{name}: unstable rows (CV > {UNSTABLE_CV:.0%}): {', '.join(unstable[:max_listed])}{more}")
        if no:
            out.append(f"{name}: {no} of {len(rec.rows)} rows have no per-call samples "
                       f"({rec.source}): no significance test for them")
        if few:
            out.append(f"{name}: {few} rows have fewer than {FEW_SAMPLES} samples: their tests are weak")
    if len(runs) >= 2:
        base_name, base = runs[0]
        for name, rec in runs[1:]:
            differ = [row.label for row in rec.rows
                      if (b := _row(base, row.label)) is not None and b.bytes != row.bytes]
            if differ:
                out.append(f"{name}: {len(differ)} rows move a different number of bytes than in {base_name} "
                           f"(e.g. '{differ[0]}')")
    return out


# -- the card-comparison table -----------------------------------------------------------------

@dataclass(frozen=True)
class Metric:
    label: str
    unit: str
    values: tuple[float | None, ...]
    best: int | None          # index of the best run, None if fewer than two values


def metric_value(row: Row, metric: str) -> tuple[float, str]:
    """The figure shown for a row: ``reported`` (what its protocol prints), ``ms`` or ``mib_s``."""
    if metric == "ms":
        return row.time_ms, "ms"
    if metric == "mib_s":
        return row.mib_s, "MiB/s"
    return row.reported_value, row.unit


def lower_is_better(unit: str) -> bool:
    return unit in TIME_UNITS or unit in LOWER_BETTER_UNITS


def card_table(runs: Sequence[RunRecord], metric: str = "reported") -> list[Metric]:
    out = []
    for label in _labels(runs):
        rows = [_row(r, label) for r in runs]
        figures = [None if row is None else metric_value(row, metric) for row in rows]
        units = {f[1] for f in figures if f is not None}
        if len(units) > 1:
            # the same label reported in different units: fall back to time, which every row has
            figures = [None if row is None else metric_value(row, "ms") for row in rows]
        unit = next(f[1] for f in figures if f is not None)
        vals = tuple(None if f is None else f[0] for f in figures)
        # a zero (a time not measured, a rate of nothing) is never the best of anything
        present = [(v, i) for i, v in enumerate(vals) if v is not None and not math.isnan(v) and v > 0]
        best = None
        if len(present) >= 2:
            best = (min(present) if lower_is_better(unit) else max(present))[1]
        out.append(Metric(label, unit, vals, best))
    return out
