"""The fit's uncertainty: the Jacobian at a fit's solution and each fitted field's standard deviation from it
(Uncertainty, param_sd; docs/calibration.md)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .evaluation import _Evaluator, _sparsity
from .fit_groups import _INT_FIELDS, FitGroup


#: how a fitted field's standard deviation came about (Uncertainty.status)
SD_RESIDUALS = "residuals"          # s² from the scatter of the rows it fits (more rows than fields)
SD_MEASUREMENT = "measurement"      # the stated uncertainty of the figures (exact fit, or a scatter below it)
SD_AT_BOUND = "at a bound"          # the fit stopped at lo or hi: held there, no σ
SD_NOT_DETERMINED = "not determined"  # no fitted row depends on it, or only together with other fields
#: the stated uncertainty, but a row the field moves misses its figure by more than that: the model steps across
#: the figure there (busy polled in RTOS ticks, a staircase) and the slope a finite difference sees is a stair's
#: edge, so the σ is too small
SD_LOWER_BOUND = "measurement, a lower bound"


@dataclass(frozen=True)
class Uncertainty:
    """How well the fit tells one fitted field."""

    target: str             # Param.target
    name: str               # profile field
    value: float
    sd: float | None        # standard deviation in the field's unit; None when the fit cannot tell
    status: str             # one of SD_RESIDUALS, SD_MEASUREMENT, SD_AT_BOUND, SD_NOT_DETERMINED

    @property
    def rel_sd(self) -> float | None:
        """σ / value, as profiles record it (None: no σ, a value of 0, or beyond what a profile holds)."""
        if self.sd is None or not self.value:
            return None
        rel = self.sd / abs(self.value)
        return rel if math.isfinite(rel) and rel < MAX_REL_SD else None


#: largest σ / value a profile records: beyond it the rows fix the field only together with other fields (a
#: correlation one number per field cannot carry: drawn alone, such a field would swing by orders of magnitude),
#: and the report says so instead
MAX_REL_SD = 10.0


#: finite-difference step of the Jacobian at the solution, relative to max(|value|, 1 % of the field's range):
#: busy polling makes the model a staircase (an SDMMC host polls CMD13 about every 30 µs, so a 3 % step of an
#: 850 µs busy can fall within one poll and look like no effect at all); a step of several polls gives the
#: slope the σ is about
JAC_STEP = 0.1


def _colours(sparsity: np.ndarray, cols: list[int]) -> list[list[int]]:
    """Columns in groups whose rows do not overlap: one run of the group perturbs them all at once."""
    groups_: list[tuple[list[int], np.ndarray]] = []
    for j in cols:
        for members, used in groups_:
            if not np.any(used & sparsity[:, j]):
                members.append(j)
                used |= sparsity[:, j]
                break
        else:
            groups_.append(([j], sparsity[:, j].copy()))
    return [members for members, _ in groups_]


def _jacobian(g: FitGroup, ev: _Evaluator, x: np.ndarray, fixed: dict[str, dict[str, float]], r0: np.ndarray,
              lo: np.ndarray, hi: np.ndarray, extra: tuple[str, ...] = ()) -> np.ndarray:
    """d residual / d param at ``x`` by forward differences (towards the inside of the bounds), perturbing
    fields of different scenarios in the same runs; a column that comes out 0 (a step inside one polling
    interval) is tried again with a 10 times larger step."""
    sp = _sparsity(g, ev).astype(bool)
    jac = np.zeros(sp.shape)
    step = JAC_STEP * np.maximum(np.abs(x), (hi - lo) * 0.01)
    todo = [j for j in range(len(x)) if hi[j] > lo[j]]
    for _ in range(2):
        for cols in _colours(sp, todo):
            xs = x.copy()
            delta = {}
            for j in cols:
                h = step[j] if x[j] + step[j] <= hi[j] else -min(step[j], x[j] - lo[j])
                if h < 0 and x[j] - lo[j] < hi[j] - x[j]:
                    h = hi[j] - x[j]  # the range is narrower than a step: all of it, upwards
                xs[j] = x[j] + h
                name = g.params[j].name
                delta[j] = (round(xs[j]) - round(x[j])) if name in _INT_FIELDS else h
            delta = {j: d for j, d in delta.items() if d}
            if not delta:
                continue
            r = ev.residuals(xs, fixed, extra)
            for j, d in delta.items():
                jac[sp[:, j], j] = (r[sp[:, j]] - r0[sp[:, j]]) / d
        todo = [j for j in todo if not np.any(jac[:, j])]
        if not todo:
            break
        step = step * 10.0
    return jac


def _normal_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(AᵀA)⁺ of a matrix with unit-norm columns, which columns have a part in its null space (the rows cannot
    tell them from the others), and its rank."""
    u, s, vt = np.linalg.svd(a, full_matrices=False)
    keep = s > s[0] * 1e-9
    v = vt[keep].T
    inv = (v / s[keep] ** 2) @ v.T
    null = vt[~keep].T
    degenerate = np.linalg.norm(null, axis=1) > 1e-6 if null.size else np.zeros(a.shape[1], dtype=bool)
    return inv, degenerate, int(keep.sum())


def param_sd(jac: np.ndarray, res: np.ndarray, row_sd: np.ndarray) -> tuple[list[float | None], list[str]]:
    """Standard deviation and its source for every column of ``jac`` (d residual / d field, at the solution),
    from the residuals ``res`` (relative errors) and the stated relative σ of each row's figure:

    * cov_fit = s² (JᵀJ)⁻¹ with s² = Σr² / (n - k) when there are more rows n than determined fields k;
    * cov_meas = (Jᵀ W J)⁻¹ with W = diag(1 / row_sd²), the stated measurement uncertainty;
    * σ = √max(cov_fit, cov_meas) per field: the residual scatter when the rows disagree more than their
      stated uncertainty, the stated uncertainty when the fit is exact (n = k) or its scatter is below it.

    A column of zeros, or one the rows cannot tell from the others (the null space of J), has no σ."""
    n, k = jac.shape
    sds: list[float | None] = [None] * k
    status = [SD_NOT_DETERMINED] * k
    norms = np.linalg.norm(jac, axis=0)
    live = [j for j in range(k) if norms[j] > 0 and np.isfinite(norms[j])]
    if not live or n == 0:
        return sds, status
    a = jac[:, live] / norms[live]
    inv, degenerate, rank = _normal_inverse(a)
    inv_w, _, _ = _normal_inverse(a / row_sd[:, None])
    dof = n - rank
    s2 = float(res @ res) / dof if dof > 0 else 0.0
    for i, j in enumerate(live):
        if degenerate[i]:
            continue
        var_fit = s2 * inv[i, i] / norms[j] ** 2
        var_meas = inv_w[i, i] / norms[j] ** 2
        sds[j] = math.sqrt(max(var_fit, var_meas))
        status[j] = SD_RESIDUALS if var_fit > var_meas else SD_MEASUREMENT
    return sds, status


def _held_apart_sd(jac: np.ndarray, res: np.ndarray, row_sd: np.ndarray, values: np.ndarray,
                   cols: list[int]) -> dict[int, tuple[float | None, str]]:
    """:func:`param_sd` of a block's columns (``cols``, their fitted ``values``), then again without each column
    whose σ / value reaches :data:`MAX_REL_SD`, until none does.

    Such a field is told only together with others (e.g. a merge's fixed part against its per-KiB copy when
    every merge copies the same amount): its profile records no σ and the ranges hold it at its value, so the
    σ of the fields left must be conditional on it too; taken marginally, the confound would inflate theirs
    (the copy cost to σ 120 % where, with the fixed part held, the rows tell it within about 1 %).  The field
    held apart keeps the σ it had for the report."""
    keep = list(range(len(cols)))
    out: dict[int, tuple[float | None, str]] = {}
    while keep:
        s, st = param_sd(jac[:, keep], res, row_sd)
        weak = []
        for i, k in enumerate(keep):
            out[cols[k]] = (s[i], st[i])
            v = float(values[k])
            if s[i] is not None and v and s[i] / abs(v) >= MAX_REL_SD:
                weak.append(k)
        if not weak or len(weak) == len(keep):
            break
        keep = [k for k in keep if k not in weak]
    return out


def _uncertainties(g: FitGroup, ev: _Evaluator, x: np.ndarray, jac: np.ndarray, res: np.ndarray,
                   lo: np.ndarray, hi: np.ndarray) -> list[Uncertainty]:
    """Every param's σ (see :func:`param_sd`), from the rows and fields of the block of the fit that solved it.

    A field the fit left at a bound is held there (no σ). A sequential fit (steps) has σ from its estimating
    equations (:func:`_sequential_sd`); a staged fit solves the cards and the host's per-block cost from every row
    but the host rows, then the host's other fields from the host rows with the cards held (their σ is
    conditional on the cards); every other method fits all rows and fields together (a grid fit at its best grid
    point, the discrete card state held)."""
    ids = ev.row_ids()
    row_sd = ev.row_sd()
    free = [j for j in range(len(x)) if not (x[j] - lo[j] <= 1e-6 * (hi[j] - lo[j])
                                             or hi[j] - x[j] <= 1e-6 * (hi[j] - lo[j]))]
    all_rows = list(range(len(ids)))
    blocks: list[tuple[list[int], list[int]]] = []
    sd: dict[int, tuple[float | None, str]] = {}
    if g.steps:
        sd = _sequential_sd(g, ids, jac, res, row_sd, free)
    elif g.staged:
        host_open = {j for j, p in enumerate(g.params) if p.target == "host" and p.name != "block_cycles"}
        host_rows = set(g.host_rows)
        blocks = [([i for i in all_rows if ids[i] not in host_rows], [j for j in free if j not in host_open]),
                  ([i for i in all_rows if ids[i] in host_rows], [j for j in free if j in host_open])]
    else:
        blocks = [(all_rows, free)]
    for rows, cols in blocks:
        if not rows or not cols:
            continue
        sd.update(_held_apart_sd(jac[np.ix_(rows, cols)], res[rows], row_sd[rows], x[cols], cols))
    # the rows that fit each param: a sequential fit's step rows, else the rows of its block that it moves
    own = {j: np.zeros(len(ids), dtype=bool) for j in range(len(x))}
    for rows, cols in blocks:
        for j in cols:
            own[j][rows] = jac[rows, j] != 0
    if g.steps:
        for st, rows in zip(g.steps, _step_rows(g, ids)):
            own[st.param] = np.isin(np.arange(len(ids)), rows)
    out = []
    for j, p in enumerate(g.params):
        if j not in free:
            out.append(Uncertainty(p.target, p.name, float(x[j]), None, SD_AT_BOUND))
            continue
        s_j, st_j = sd.get(j, (None, SD_NOT_DETERMINED))
        moved = own[j]
        if st_j == SD_MEASUREMENT and np.any(np.abs(res[moved]) > row_sd[moved]):
            st_j = SD_LOWER_BOUND
        out.append(Uncertainty(p.target, p.name, float(x[j]), s_j, st_j))
    return out


def _step_rows(g: FitGroup, ids: list[tuple[str, str]]) -> list[list[int]]:
    """Per step of a sequential fit, the indices of its rows among the residuals."""
    s = g.scenarios[0]
    return [[i for i, (sc, label) in enumerate(ids) if sc == s and label in st.rows] for st in g.steps]


def _sequential_sd(g: FitGroup, ids: list[tuple[str, str]], jac: np.ndarray, res: np.ndarray, row_sd: np.ndarray,
                   free: list[int]) -> dict[int, tuple[float | None, str]]:
    """σ of a sequential fit's params from its estimating equations: step k sets the mean relative error of
    its rows to 0, so cov = A⁻¹ B A⁻ᵀ with A[k, j] = d(mean error of step k) / d param j and B diagonal,
    B[k] = Σ v_i / n_k² over its n_k rows, v_i = max(stated σ_i², the scatter of the step's rows about their
    mean, Σ (r - r̄)² / (n_k - 1), when it has more than one row). A step's rows inform its own param; how the
    params move each other's rows is in A."""
    steps = [(st, rows) for st, rows in zip(g.steps, _step_rows(g, ids)) if st.param in free and rows]
    if not steps:
        return {}
    cols = [st.param for st, _ in steps]
    a = np.array([[jac[rows, j].mean() for j in cols] for _, rows in steps])
    b, b_meas = [], []
    for _, rows in steps:
        n = len(rows)
        r = res[rows]
        stated = row_sd[rows] ** 2
        scatter = float(np.sum((r - r.mean()) ** 2)) / (n - 1) if n > 1 else 0.0
        b.append(float(np.maximum(stated, scatter).sum()) / n ** 2)
        b_meas.append(float(stated.sum()) / n ** 2)
    u, sv, vt = np.linalg.svd(a)
    if not sv.size or sv[0] <= 0:
        return {j: (None, SD_NOT_DETERMINED) for j in cols}
    keep = sv > sv[0] * 1e-9
    a_inv = (vt[keep].T / sv[keep]) @ u[:, keep].T
    null = vt[~keep].T
    degenerate = np.linalg.norm(null, axis=1) > 1e-6 if null.size else np.zeros(len(cols), dtype=bool)
    cov = a_inv @ np.diag(b) @ a_inv.T
    cov_meas = a_inv @ np.diag(b_meas) @ a_inv.T
    out: dict[int, tuple[float | None, str]] = {}
    for i, j in enumerate(cols):
        if degenerate[i]:
            out[j] = (None, SD_NOT_DETERMINED)
        else:
            out[j] = (math.sqrt(max(cov[i, i], 0.0)),
                      SD_RESIDUALS if cov[i, i] > cov_meas[i, i] * (1 + 1e-9) else SD_MEASUREMENT)
    return out
