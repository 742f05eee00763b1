"""Fitting a group: the least-squares, grid, staged and sequential searches (fit, fit_all, fit_group) and
their result (FitResult)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.optimize import brentq, least_squares, lsq_linear, minimize, minimize_scalar

from ..errors import ConfigError
from ..media.sim.host import HostProfile
from ..parallel import run_pool
from ..records import Row
from ..scenarios import load as load_scenario
from .evaluation import _Evaluator, _sparsity
from .fit_groups import TARGETS, FitGroup, FitStep, _table, groups
from .measurements import Measurement, row_value
from .uncertainty import Uncertainty, _jacobian, _step_rows, _uncertainties


@dataclass
class FitResult:
    group: str
    card_params: dict[str, dict[str, float]]      # scenario -> fitted card fields
    card_names: dict[str, str]                    # scenario -> card profile name
    host_params: dict[str, float]
    residuals: list[tuple[str, str, float, float]]  # scenario, row, measured, predicted
    cost: float
    evaluations: int = 0
    other: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)  # (kind, profile) -> fields
    # σ / value of the fitted fields the fit can tell, in the shapes of card_params, host_params and other
    card_rel_sd: dict[str, dict[str, float]] = field(default_factory=dict)
    host_rel_sd: dict[str, float] = field(default_factory=dict)
    other_rel_sd: dict[tuple[str, str], dict[str, float]] = field(default_factory=dict)
    uncertainty: list[Uncertainty] = field(default_factory=list)  # every param, in the group's order
    host: str = ""                                # the group's host profile


def _initial(group: FitGroup) -> np.ndarray:
    x0 = []
    for p in group.params:
        if p.start is not None:
            x0.append(min(max(p.start, p.lo), p.hi))
            continue
        if p.target == "host":
            kind, name = "host", group.host
        else:
            kind, names = p.target.split(":", 1)
            section, key = TARGETS[kind][3]
            name = str(getattr(load_scenario(names.split(",")[0]), section).get(key))
        cls = TARGETS[kind][2]
        v = float(_table(kind, name).get(p.name, getattr(cls(), p.name)))
        x0.append(min(max(v, p.lo), p.hi))
    return np.array(x0)


def fit(group_name: str, meas: list[Measurement], progress: Callable[[str], None] | None = None) -> FitResult:
    """Fit shipped group ``group_name`` to the train rows of ``meas``."""
    gs = groups()
    if group_name not in gs:
        raise ConfigError(f"unknown fit group {group_name!r} (known: {', '.join(gs)})")
    return fit_group(gs[group_name], meas, progress)


def fit_all(names: list[str], meas: list[Measurement], workers: int = 1,
            done: Callable[[str], None] | None = None) -> list[FitResult]:
    """:func:`fit` of each shipped group of ``names``, in ``workers`` processes (the results in the order of
    ``names``; ``done(name)`` as each ends).  The groups are independent while they read the shipped profiles: a
    caller that writes each group's profiles into the data folder before the next group fits runs them one by
    one with :func:`fit`."""
    gs = groups()
    for name in names:
        if name not in gs:
            raise ConfigError(f"unknown fit group {name!r} (known: {', '.join(gs)})")
    jobs = [(i, name, meas) for i, name in enumerate(names)]
    got = run_pool(jobs, min(workers, len(jobs)), lambda i, _: done(names[i]) if done else None, _fit_job)
    return [got[i] for i in range(len(names))]


def _fit_job(job: tuple[int, str, list[Measurement]]) -> tuple[int, FitResult]:
    i, name, meas = job
    return i, fit(name, meas)


def fit_group(g: FitGroup, meas: list[Measurement], progress: Callable[[str], None] | None = None) -> FitResult:
    """Fit group ``g`` (shipped, or built in memory) to the train rows of ``meas``; the result carries every
    fitted field's standard deviation (see :func:`_uncertainties`)."""
    ev = _Evaluator(g, meas)
    x0 = _initial(g)
    lo = np.array([p.lo for p in g.params])
    hi = np.array([p.hi for p in g.params])
    # finite-difference steps are relative: a parameter at 0 would move by a hair that polling and SPI byte
    # quantisation cannot see, so every parameter is solved in units of at least 1 % of its range
    scale = np.maximum(np.abs(x0), (hi - lo) * 0.01)

    # the sparsity of the Jacobian saves runs when scenarios have fields of their own; scipy's sparse solver
    # (lsmr) needs two fields at least (with one, its 2-D trust-region step fails): one field is solved dense
    sparsity = _sparsity(g, ev) if len(g.params) > 1 else None

    def solve(fixed: dict[str, dict[str, float]], start: np.ndarray) -> tuple[np.ndarray, float]:
        # a few % steps: busy polling makes the model piecewise constant at the µs scale
        r = least_squares(lambda y: ev.residuals(y * scale, fixed), start / scale, bounds=(lo / scale, hi / scale),
                          jac_sparsity=sparsity, diff_step=0.03, xtol=1e-6, ftol=1e-8, max_nfev=60)
        return r.x * scale, float(np.sum(r.fun ** 2))

    predicted: dict[str, dict[str, Row]] | None = None
    jac: np.ndarray | None = None
    if g.steps:
        x, predicted, jac = _sequential(g, ev, x0, lo, hi, scale, progress)
        fixed = {}
    elif g.staged:
        x, fixed = _staged(g, ev, x0, lo, hi, scale, progress), {}
    elif g.grid:
        s = g.scenarios[0]
        names = [n for n, _ in g.grid]
        # 1. continuous fit with the card's current state parameters
        x, cost = solve({}, x0)
        # 2. grid over the discrete state; the linear costs solved exactly at every point
        lin_idx = [i for i, p in enumerate(g.params) if p.name in g.grid_linear]
        best = (cost, x, {})
        for combo in itertools.product(*[vals for _, vals in g.grid]):
            fixed = {s: dict(zip(names, combo))}
            if g.grid_max and fixed[s][g.grid_max[0]] >= fixed[s][g.grid_max[1]]:
                continue
            xb = x.copy()
            xb[lin_idx] = 0.0
            r0 = ev.residuals(xb, fixed)
            cols = []
            for i in lin_idx:
                xi = xb.copy()
                xi[i] = 1.0
                cols.append(ev.residuals(xi, fixed) - r0)
            a = np.array(cols).T
            sol = lsq_linear(a, -r0, bounds=(lo[lin_idx], hi[lin_idx]))
            xc = xb.copy()
            xc[lin_idx] = sol.x
            c = float(np.sum((r0 + a @ sol.x) ** 2))
            if progress:
                progress(f"{g.name}: {', '.join(f'{n}={_shown(v)}' for n, v in fixed[s].items())} -> cost {c:.4g}")
            if c < best[0]:
                best = (c, xc, fixed)
        # 3. polish everything continuous at the best grid point
        x, cost = solve(best[2], best[1])
        fixed = best[2]
    else:
        x, cost = solve({}, x0)
        fixed = {}
        # coupled parameters (host per-block cost vs card access) can leave a local minimum: restart
        # from the starting point scaled down and up, and keep the best
        for factor in (0.5, 2.0):
            if cost <= 1e-6:
                break
            xs, cs = solve({}, np.clip(x0 * factor, lo, hi))
            if cs < cost:
                x, cost = xs, cs
        if cost > 1e-4:
            # gradient steps can stall on models quantised by polling; a simplex search does not need gradients
            def sq(y: np.ndarray) -> float:
                return float(np.sum(ev.residuals(np.clip(y * scale, lo, hi), {}) ** 2))

            r = minimize(sq, x / scale, method="Nelder-Mead",
                         options={"maxfev": 60 * len(x), "xatol": 1e-4, "fatol": 1e-7})
            if r.fun < cost:
                x, cost = np.clip(r.x * scale, lo, hi), float(r.fun)
    # the final point: its rows, residuals and Jacobian (the fields' standard deviations)
    if predicted is None:
        predicted = ev.predict_all(x, fixed)
    r_final = ev.residual_vector(predicted, x)
    cost = float(np.sum(r_final ** 2))
    residuals = []
    for s in g.scenarios:
        if s not in ev.targets:
            continue
        for m in ev.targets[s]:
            model = row_value(predicted[s][m.row], m.unit)
            residuals.append((s, m.row, float(m.value), model))  # type: ignore[arg-type]
    if jac is None:
        if progress:
            progress(f"{g.name}: Jacobian at the solution ({len(g.params)} fields)")
        jac = _jacobian(g, ev, x, fixed, r_final, lo, hi)
    unc = _uncertainties(g, ev, x, jac, r_final, lo, hi)
    card_params: dict[str, dict[str, float]] = {s: dict(fixed.get(s, {})) for s in g.scenarios}
    card_sd: dict[str, dict[str, float]] = {s: {} for s in g.scenarios}
    host_params: dict[str, float] = {}
    host_sd: dict[str, float] = {}
    other: dict[tuple[str, str], dict[str, float]] = {}
    other_sd: dict[tuple[str, str], dict[str, float]] = {}
    for p, v, u in zip(g.params, x, unc):
        rel = u.rel_sd
        if p.target == "host":
            host_params[p.name] = float(v)
            if rel is not None:
                host_sd[p.name] = rel
        elif p.target.startswith("card:") and "," not in p.target:
            s = p.target.split(":", 1)[1]
            card_params[s][p.name] = float(v)
            if rel is not None:
                card_sd[s][p.name] = rel
        else:
            kind, s = p.target.split(":", 1)
            key = (kind, ev.profile_names[(kind, s)])
            other.setdefault(key, {})[p.name] = float(v)
            if rel is not None:
                other_sd.setdefault(key, {})[p.name] = rel
    return FitResult(g.name, card_params, ev.card_names, host_params, residuals, cost, ev.evals, other=other,
                     card_rel_sd=card_sd, host_rel_sd=host_sd, other_rel_sd=other_sd, uncertainty=unc, host=g.host)


def _step_means(g: FitGroup, ev: _Evaluator, predicted: dict[str, dict[str, Row]]) -> np.ndarray:
    s = g.scenarios[0]
    return np.array([float(np.mean(ev.errors(s, predicted[s], only=st.rows))) for st in g.steps])


def _sequential(g: FitGroup, ev: _Evaluator, x0: np.ndarray, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray,
                progress: Callable[[str], None] | None) -> tuple[np.ndarray, dict[str, dict[str, Row]], np.ndarray]:
    """A sequential fit: (solution, its predicted rows, the Jacobian).

    1. With the search overrides (``g.search``: e.g. fewer runs per row), each step's param is solved in turn
       (1-D root of the mean relative error of its rows, the others held), sweeping until no param moves by more
       than 1e-4 of its scale (at most SWEEPS sweeps); a step is solved again only when another param moved.
    2. The Jacobian there, with the search overrides (a derivative barely depends on how many calls a mean is
       over; the runs cost the time).
    3. Newton steps on the steps' mean errors with the group's own overrides (full runs), from that point, while
       they shrink (at most NEWTON_STEPS)."""
    s = g.scenarios[0]
    x = x0.copy()
    search = tuple(g.search)
    last: dict[int, np.ndarray] = {}
    for sweep in range(SWEEPS):
        moved = False
        for k, st in enumerate(g.steps):
            j = st.param
            if k in last:
                others = np.delete(np.abs(x - last[k]) / scale, j)
                if not others.size or float(others.max()) <= 1e-4:
                    continue
            memo: dict[float, float] = {}

            def mean_error(v: float, j: int = j, st: FitStep = st) -> float:
                if v not in memo:
                    xx = x.copy()
                    xx[j] = v
                    rows = ev.predict(s, ev.overrides(xx, {}, restrict=st.restrict, extra=search)[s], st.rows)
                    memo[v] = float(np.mean(ev.errors(s, rows, only=st.rows)))
                return memo[v]

            old = x[j]
            x[j] = _root(mean_error, old, lo[j], hi[j], scale[j])
            moved |= abs(x[j] - old) > 1e-4 * scale[j]
            last[k] = x.copy()
            if progress:
                progress(f"{g.name}: sweep {sweep + 1}: {g.params[j].name} = {_shown(x[j])} "
                         f"(mean error of its {len(st.rows)} rows {mean_error(x[j]) * 100:+.2f} %)")
        if not moved:
            break
    if progress:
        progress(f"{g.name}: Jacobian ({len(g.params)} fields)")
    ids = ev.row_ids()
    r_search = ev.residual_vector(ev.predict_all(x, {}, search), x) if search else None
    predicted = ev.predict_all(x, {})
    if r_search is None:
        r_search = ev.residual_vector(predicted, x)
    jac = _jacobian(g, ev, x, {}, r_search, lo, hi, search)
    a = np.array([[jac[rows, st.param].mean() if rows else 0.0 for st in g.steps] for rows in _step_rows(g, ids)])
    m = _step_means(g, ev, predicted)
    cols = [st.param for st in g.steps]
    for _ in range(NEWTON_STEPS):
        if float(np.max(np.abs(m))) <= NEWTON_TOL:
            break
        dx = np.linalg.lstsq(a, -m, rcond=None)[0]
        t = 1.0
        for _ in range(3):
            xn = x.copy()
            xn[cols] = np.clip(x[cols] + t * dx, lo[cols], hi[cols])
            pn = ev.predict_all(xn, {})
            mn = _step_means(g, ev, pn)
            if float(mn @ mn) < float(m @ m):
                x, predicted, m = xn, pn, mn
                if progress:
                    progress(f"{g.name}: Newton step: largest mean error {float(np.max(np.abs(m))) * 100:.2f} %")
                break
            t /= 2.0
        else:
            break
    return x, predicted, jac


#: Newton steps of a sequential fit at full runs, and the largest mean error of a step that needs none
NEWTON_STEPS = 3
NEWTON_TOL = 1e-4


#: most sweeps of a sequential fit
SWEEPS = 4


def _root(f: Callable[[float], float], v0: float, lo: float, hi: float, scale: float) -> float:
    """Where the increasing function ``f`` crosses 0 in [lo, hi], starting at ``v0``: the bracket grows by
    doubling away from v0 (down when f(v0) > 0), then Brent's method; the bound that comes closest when f
    keeps its sign (a row that the field cannot bring to the measured figure)."""
    a, fa = v0, f(v0)
    if fa == 0:
        return v0
    step = max(abs(v0), scale) * 0.25
    while True:
        b = max(lo, a - step) if fa > 0 else min(hi, a + step)
        fb = f(b)
        if fa * fb <= 0:
            if fb == 0:
                return b
            left, right = (a, b) if a < b else (b, a)
            return float(brentq(f, left, right, xtol=1e-4 * scale, rtol=1e-6, maxiter=60))
        if b in (lo, hi):
            return b if abs(fb) <= abs(fa) else a
        a, fa = b, fb
        step *= 2.0


def _staged(g: FitGroup, ev: _Evaluator, x0: np.ndarray, lo: np.ndarray, hi: np.ndarray, scale: np.ndarray,
            progress: Callable[[str], None] | None) -> np.ndarray:
    x = x0.copy()
    idx = {p.target: [] for p in g.params}  # type: dict[str, list[int]]
    for i, p in enumerate(g.params):
        idx[p.target].append(i)
    host_block = next(i for i, p in enumerate(g.params) if p.target == "host" and p.name == "block_cycles")
    host_open = [i for i, p in enumerate(g.params) if p.target == "host" and p.name != "block_cycles"]
    cpu_hz = float(_table("host", g.host).get("cpu_hz", HostProfile().cpu_hz))
    for stage in range(2):
        gaps = {}
        for s in g.scenarios:
            cols = idx.get(f"card:{s}", [])
            if not cols or s not in ev.targets:
                continue
            have = {m.row for m in ev.targets[s]}
            for _ in range(2):  # twice: later fields shift earlier rows a little (e.g. gap and access)
                for name, row in g.sequence:
                    if row not in have:
                        continue
                    k = next(i for i in cols if g.params[i].name == name)

                    def r1(v: float, k: int = k, row: str = row, s: str = s) -> float:
                        xx = x.copy()
                        xx[k] = v
                        return float(ev.scenario_residuals(xx, s, only=(row,))[0])

                    a, b = lo[k], hi[k]
                    fa, fb = r1(a), r1(b)
                    if fa * fb < 0:
                        x[k] = brentq(r1, a, b, xtol=1e-3 * max(1.0, scale[k] * 1e-3), maxiter=60)
                    else:  # no sign change: the bound that comes closest
                        x[k] = a if abs(fa) <= abs(fb) else b
            gi = next(i for i in cols if g.params[i].name == "read_block_gap_us")
            gaps[s] = x[gi]
            if progress:
                res = ev.scenario_residuals(x, s, skip=g.host_labels(s))
                progress(f"{g.name}: stage {stage + 1}: {s}: cost {float(np.sum(res ** 2)):.4g}")
        if not gaps:
            break
        shift_us = min(gaps.values())  # the per-block time every card shows is the host's
        x[host_block] = min(hi[host_block], x[host_block] + shift_us * cpu_hz / 1e6)
        for s in gaps:
            gi = next(i for i in idx[f"card:{s}"] if g.params[i].name == "read_block_gap_us")
            x[gi] = max(lo[gi], x[gi] - shift_us)
    if host_open and g.host_rows:
        # host-only rows (e.g. File Open) fit the remaining host fields one at a time, the cards fixed
        for k in host_open:
            def sq(v: float, k: int = k) -> float:
                xx = x.copy()
                xx[k] = v
                res = [ev.scenario_residuals(xx, s, only=g.host_labels(s)) for s in g.scenarios
                       if any((s, m.row) in g.host_rows for m in ev.targets.get(s, []))]
                return float(sum(np.sum(r ** 2) for r in res))

            r = minimize_scalar(sq, bounds=(lo[k], hi[k]), method="bounded",
                                options={"xatol": max(1.0, 1e-4 * (hi[k] - lo[k]))})
            x[k] = r.x
    return x


def _shown(v: float) -> str:
    """A field's value in a progress line: whole numbers in full with separators (16,777,216, not 1.67772e+07;
    the field's name carries its unit), others to six digits."""
    return f"{int(v):,}" if float(v).is_integer() and abs(v) < 1e15 else f"{v:.6g}"
