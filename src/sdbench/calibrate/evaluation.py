"""Evaluating a fit group at trial values: its scenarios run (or re-priced) with the values as overrides, and
their measured rows' relative errors (_Evaluator)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError, SdbenchError
from ..ledger import Recording
from ..protocols import protocol, run_scenario
from ..repricing import ReplayMismatch, replayed_rows
from ..records import Row
from ..scenarios import load as load_scenario
from .fit_groups import TARGETS, _INT_FIELDS, FitGroup
from .measurements import MEASUREMENT_REL_SD, Measurement, measurement_rel_sd, row_value


class _Evaluator:
    def __init__(self, group: FitGroup, meas: list[Measurement]) -> None:
        self.g = group
        self.targets: dict[str, list[Measurement]] = {}
        for s in group.scenarios:
            rows = [m for m in meas if m.scenario == s and m.split == "train" and m.value is not None
                    and (s, m.row) in group.rows]
            if rows:
                self.targets[s] = rows
        if not self.targets:
            raise SdbenchError(f"no train rows for fit group {group.name} in the measurements file")
        self.card_names = {s: str(load_scenario(s).sd.get("card")) for s in group.scenarios}
        self.profile_names: dict[tuple[str, str], str] = {}
        for p in group.params:
            if p.target != "host":
                kind, names = p.target.split(":", 1)
                section, key = TARGETS[kind][3]
                found = {str(getattr(load_scenario(s), section).get(key)) for s in names.split(",")}
                if len(found) != 1:
                    raise ConfigError(f"fit group {group.name}: {p.target} names different profiles {sorted(found)}")
                self.profile_names[(kind, names)] = found.pop()
        self.evals = 0
        #: (scenario, overrides that are not profile fields) -> its recorded run (recording, rows), or None
        #: where it cannot be re-priced: evaluations at other profile values re-price it (sdbench.repricing)
        self._recorded: dict[tuple[str, tuple[str, ...]], tuple[Recording, tuple[Row, ...]] | None] = {}
        #: (scenario, overrides) -> its rows: a solver comes back to points it has tried (its start, a restart,
        #: the solution it returns, the Jacobian's base point), and a simulation is deterministic
        self._rows: dict[tuple[str, tuple[str, ...]], dict[str, Row]] = {}

    def overrides(self, x: np.ndarray, fixed: dict[str, dict[str, float]],
                  restrict: tuple[str, ...] | None = None, extra: tuple[str, ...] = ()) -> dict[str, list[str]]:
        """Per scenario, the overrides of a run at ``x``: the restriction (the group's, or ``restrict``) and
        ``extra``, the group's base card fields, the ``fixed`` card fields (grid points), then the params."""
        per: dict[str, list[str]] = {s: [*(self.g.restrict if restrict is None else restrict), *extra]
                                     for s in self.g.scenarios}
        for s, kv in self.g.base.items():
            per[s] += [f"sd.card_params.{k}={_num(k, v)}" for k, v in kv.items()]
        for s, kv in fixed.items():
            per[s] += [f"sd.card_params.{k}={_num(k, v)}" for k, v in kv.items()]
        for p, v in zip(self.g.params, x):
            if p.target == "host":
                for s in per:
                    per[s].append(f"sd.host_params.{p.name}={_num(p.name, v)}")
            else:
                kind, names = p.target.split(":", 1)
                for s in names.split(","):  # one profile shared by several scenarios
                    per[s].append(f"{TARGETS[kind][0]}.{p.name}={_num(p.name, v)}")
        return per

    def predict(self, scenario: str, overrides: list[str], only: tuple[str, ...] = ()) -> dict[str, Row]:
        """The rows of ``scenario`` with ``overrides`` (``only``: at least these, where re-pricing can stop
        after them): re-priced from its recorded run where the overrides differ from it in profile fields only
        (the same rows a run gives: sdbench.repricing), else run; the rows of a point already simulated are not
        simulated again."""
        point = (scenario, tuple(overrides))
        rows = self._rows.get(point)
        if rows is None and only:
            rows = self._rows.get((*point, only))
        if rows is None:
            rows = self._simulate(scenario, overrides, only)
            self._rows[point if len(rows) > len(only) or not only else (*point, only)] = rows
        return dict(rows)

    def _simulate(self, scenario: str, overrides: list[str], only: tuple[str, ...] = ()) -> dict[str, Row]:
        self.evals += 1
        sc = load_scenario(scenario, overrides)
        key = (scenario, tuple(o for o in overrides if not o.startswith(_PROFILE_OVERRIDES)
                               or o.partition("=")[0].endswith(".cpu_hz")))
        if key in self._recorded:
            recorded = self._recorded[key]
            if recorded is not None:
                try:
                    rows = replayed_rows(sc, *recorded, labels=only or None)
                    return {r.label: r for r in rows}
                except ReplayMismatch:
                    self._recorded[key] = None
            return {r.label: r for r in run_scenario(sc).rows}
        spec = protocol(sc.protocol)
        paced = spec.paced is not None and spec.paced(sc)
        rec = None if paced or sc.clock_kind() != "virtual" else Recording()
        out = run_scenario(sc, recording=rec)
        self._recorded[key] = (rec, out.rows) if rec is not None and rec.repriceable else None
        return {r.label: r for r in out.rows}

    def errors(self, scenario: str, rows: dict[str, Row], *, skip: tuple[str, ...] = (),
               only: tuple[str, ...] = ()) -> np.ndarray:
        """Relative errors of one scenario's measured rows against its predicted ``rows``."""
        out = []
        for m in self.targets[scenario]:
            if m.row in skip or (only and m.row not in only):
                continue
            if m.row not in rows:
                raise SdbenchError(f"scenario {scenario} did not emit row {m.row!r}")
            out.append((row_value(rows[m.row], m.unit) - m.value) / m.value)  # type: ignore[operator]
        return np.array(out)

    def scenario_residuals(self, x: np.ndarray, scenario: str, *, skip: tuple[str, ...] = (),
                           only: tuple[str, ...] = ()) -> np.ndarray:
        """Relative errors of one scenario's rows (no priors), leaving out ``skip`` or keeping ``only``."""
        rows = self.predict(scenario, self.overrides(x, {})[scenario], only)
        return self.errors(scenario, rows, skip=skip, only=only)

    def predict_all(self, x: np.ndarray, fixed: dict[str, dict[str, float]],
                    extra: tuple[str, ...] = ()) -> dict[str, dict[str, Row]]:
        """The measured rows of every scenario of the group at ``x`` (the rows after them are not needed)."""
        per = self.overrides(x, fixed, extra=extra)
        return {s: self.predict(s, per[s], self.target_rows(s)) for s in self.g.scenarios if s in self.targets}

    def target_rows(self, scenario: str) -> tuple[str, ...]:
        """The labels of ``scenario``'s measured rows."""
        return tuple(dict.fromkeys(m.row for m in self.targets[scenario]))

    def residual_vector(self, predicted: dict[str, dict[str, Row]], x: np.ndarray) -> np.ndarray:
        """The residuals of a fit: relative errors of every measured row, scenario by scenario, then the
        priors (row order of :meth:`row_ids`)."""
        res = [e for s in self.g.scenarios if s in self.targets for e in self.errors(s, predicted[s])]
        for p, v in zip(self.g.params, x):
            if p.prior_weight:
                res.append(p.prior_weight * (v - p.lo) / p.prior_scale)
        return np.array(res)

    def residuals(self, x: np.ndarray, fixed: dict[str, dict[str, float]], extra: tuple[str, ...] = ()) -> np.ndarray:
        return self.residual_vector(self.predict_all(x, fixed, extra), x)

    def row_ids(self) -> list[tuple[str, str]]:
        """(scenario, row label) of every residual; a prior is ("", its param's target:name)."""
        ids = [(s, m.row) for s in self.g.scenarios for m in self.targets.get(s, [])]
        return ids + [("", f"{p.target}:{p.name}") for p in self.g.params if p.prior_weight]

    def row_sd(self) -> np.ndarray:
        """Stated relative standard deviation of every residual's figure (measurement_rel_sd); a prior
        counts as one figure of :data:`MEASUREMENT_REL_SD`."""
        sd = [measurement_rel_sd(m) for s in self.g.scenarios for m in self.targets.get(s, [])]
        return np.array(sd + [MEASUREMENT_REL_SD for p in self.g.params if p.prior_weight])


#: scenario overrides that set a profile field (what a fit varies): a run that differs from a recorded one in
#: these only is re-priced from it
_PROFILE_OVERRIDES = tuple(f"{prefix}." for prefix, *_ in TARGETS.values())


def _num(name: str, v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if name in _INT_FIELDS:
        return str(int(round(v)))
    return repr(round(float(v), 6))


def _sparsity(group: FitGroup, ev: _Evaluator) -> np.ndarray:
    rows: list[str] = []
    for s in group.scenarios:
        rows += [s] * len(ev.targets.get(s, []))
    n_prior = sum(1 for p in group.params if p.prior_weight)
    m = np.zeros((len(rows) + n_prior, len(group.params)), dtype=int)
    k = len(rows)
    for j, p in enumerate(group.params):
        for i, s in enumerate(rows):
            if p.target == "host" or s in p.target.split(":", 1)[1].split(","):
                m[i, j] = 1
        if p.prior_weight:
            m[k, j] = 1
            k += 1
    return m
