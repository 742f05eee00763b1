"""Calibration: fit physical card and host parameters to published raw-level rows.

A *fit group* is a set of scenarios that share a host profile.  Each group
says which profile fields are free (with bounds) and which measured rows
(``split == train``, raw-level: raw sector rows, mount, file open) constrain
them, named by scenario and row label.  Groups are data, one TOML file each in
``sdbench/data/fits/`` (format: docs/calibration-groups.md), read through the
option declarations below; ``sdbench/data/fits/levels.toml`` declares the level
(raw, bridge, file) of every published row.  The simulator itself is the model: every evaluation runs the scenarios'
protocols on the virtual clock with the trial parameters, and
``scipy.optimize.least_squares`` minimises the relative errors.

Parameters that the rows cannot tell apart are pinned by a stated prior in
the group (e.g. card-side gaps between blocks of a multi-block read are pulled
towards zero, so the part common to every card is attributed to the host).
Discrete card state (update-block size, the fill it starts with) is searched
on a grid around the continuous fit.

The shipped profiles in ``sdbench/data/{cards,hosts}`` are this module's
output: ``sdbench calibrate --output-dir src/sdbench/data``.
"""
from __future__ import annotations

import csv
import functools
import itertools
import math
import tomllib
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy.optimize import brentq, least_squares, lsq_linear, minimize, minimize_scalar

from . import profiles
from .errors import ConfigError, SdbenchError
from .media.sim.card import CardProfile
from .media.sim.esp_flash import EspFlashHostProfile
from .media.sim.host import HostProfile
from .media.sim.nor import FlashChipProfile
from .options import from_mapping, opt, parse_toml, read_text_file
from .output_files import write_atomically
from .protocols import run_scenario
from .records import Row
from .scenarios import load as load_scenario

DATA = resources.files("sdbench") / "data"


@dataclass(frozen=True)
class Measurement:
    scenario: str
    row: str
    op: str
    size_bytes: int
    runs: int
    value: float | None
    unit: str
    split: str
    source: str
    note: str


def load_measurements(path: str | Path | None = None) -> list[Measurement]:
    """Read a measurements CSV (default: the copy shipped with sdbench)."""
    text = read_text_file(path, "measurements file") if path else (DATA / "measurements.csv").read_text()
    out = []
    reader = csv.DictReader(text.splitlines())
    need = {"scenario", "row", "op", "size_bytes", "runs", "value", "unit", "split"}
    if not reader.fieldnames or not need <= set(reader.fieldnames):
        raise SdbenchError(f"{path or 'measurements.csv'}: not a measurements file (needs columns "
                           f"{', '.join(sorted(need))})")
    for i, r in enumerate(reader, start=2):
        try:
            out.append(Measurement(r["scenario"], r["row"], r["op"], int(r["size_bytes"] or 0), int(r["runs"] or 0),
                                   float(r["value"]) if r["value"] else None, r["unit"], r["split"],
                                   r.get("source", ""), r.get("note", "")))
        except ValueError as e:
            raise SdbenchError(f"{path or 'measurements.csv'} line {i}: {e}") from None
    return out


def row_level(m: Measurement) -> str:
    """'raw' for sector I/O and card init, 'bridge' for sector I/O through a USB bridge, 'file' for rows
    through a filesystem, as sdbench/data/fits/levels.toml declares per scenario and row (rows it does not
    name are file-level).  Calibration uses raw and bridge rows only."""
    return _levels().get((m.scenario, m.row), "file")


def row_value(row: Row, unit: str) -> float:
    """A row's figure in a measurement's unit."""
    t = row.time_ms
    if unit == "ms":
        return t
    if unit in ("us", "µs"):
        return t * 1000.0
    if t <= 0:
        return 0.0
    if unit == "KiB/s":
        return row.bytes / 1024 / (t / 1000.0)
    if unit == "MB/s":
        return row.bytes / 1e6 / (t / 1000.0)
    if unit == "MiB/s":
        return row.bytes / 1048576 / (t / 1000.0)
    raise SdbenchError(f"unknown unit {unit!r} in measurements")


# ---- fit groups ---------------------------------------------------------------------------

#: parameter target kind -> (scenario override prefix, profile folder, profile class, scenario key naming it)
TARGETS: dict[str, tuple[str, str, type, tuple[str, str]]] = {
    "card": ("sd.card_params", "cards", CardProfile, ("sd", "card")),
    "host": ("sd.host_params", "hosts", HostProfile, ("sd", "host")),
    "flash-chip": ("flash.chip_params", "flash", FlashChipProfile, ("flash", "chip")),
    "flash-host": ("flash.host_params", "hosts", EspFlashHostProfile, ("flash", "host")),
}


@dataclass(frozen=True)
class Param:
    target: str          # "<kind>:<scenario>" (per scenario) or "host" (shared by the group's scenarios)
    name: str            # profile field
    lo: float
    hi: float
    prior_weight: float = 0.0   # > 0: residual pulling the value towards lo (scaled by prior_scale)
    prior_scale: float = 1.0
    start: float | None = None  # where the search starts (None: the profile's current value)


@dataclass(frozen=True)
class FitGroup:
    name: str
    description: str
    scenarios: tuple[str, ...]
    host: str
    params: tuple[Param, ...]
    # protocol overrides that restrict runs to the rows being fitted
    restrict: tuple[str, ...] = ()
    rows: tuple[tuple[str, str], ...] = ()  # (scenario, row label): the train rows fitted
    grid: tuple[tuple[str, tuple[float, ...]], ...] = ()  # card fields searched on a grid (single-scenario groups)
    # with a grid: card fields whose effect on the rows is linear (costs of events the grid places);
    # solved exactly for every grid point from three simulations
    grid_linear: tuple[str, ...] = ()
    grid_max: tuple[str, str] | None = None  # (field, limit field): skip grid points where field >= limit
    # staged fit for many cards sharing a host: per-card fits with the host fixed, then the host's per-block
    # cost takes the part of the card-side read gap that every card shows (the fastest card then has none)
    staged: bool = False
    host_rows: tuple[tuple[str, str], ...] = ()  # staged: (scenario, row) pairs only the host's other fields explain
    # staged: per card, (field, row) pairs solved in this order, each by a 1-D root search (the model is
    # monotone in each and quantised by polling, which stalls gradient steps)
    sequence: tuple[tuple[str, str], ...] = ()
    order: int = 0  # position in `sdbench calibrate --list` and in a run of every group

    def host_labels(self, scenario: str) -> tuple[str, ...]:
        """Labels of ``scenario``'s rows that only the host's remaining fields explain (staged fits)."""
        return tuple(r for s, r in self.host_rows if s == scenario)


# ---- fit groups as data: sdbench/data/fits/<group>.toml, levels in sdbench/data/fits/levels.toml ----------

FITS = "fits"
LEVELS_FILE = "levels.toml"
METHODS = ("least-squares", "grid", "staged")


def _profile_fields(kind: str) -> set[str]:
    return {f.name for f in fields(TARGETS[kind][2])}


@dataclass(frozen=True)
class ParamDecl:
    """One free profile field: ``{ field = "read_access_us", lo = 0, hi = 20000 }``."""

    field: str = opt(help="profile field fitted; lo, hi, start and prior_scale are in its unit (its name's suffix)")
    lo: float = opt(help="lower bound; a prior pulls towards it")
    hi: float = opt(help="upper bound, above lo")
    kind: str = opt("card", choices=tuple(TARGETS), help="kind of profile the field belongs to")
    start: float | None = opt(None, help="where the search starts, within lo..hi (none: the profile's current value)")
    prior_weight: float = opt(0.0, min=0.0, help="> 0: one more residual, prior_weight * (value - lo) / prior_scale")
    prior_scale: float = opt(1.0, help="the prior's scale, above 0")

    def __post_init__(self) -> None:
        if self.kind in TARGETS and self.field not in _profile_fields(self.kind):
            raise ValueError(f"{self.field!r:.60} is not a field of a {self.kind} profile")
        if not self.lo < self.hi:
            raise ValueError(f"{self.field}: lo {self.lo:g} must be below hi {self.hi:g}")
        if self.start is not None and not self.lo <= self.start <= self.hi:
            raise ValueError(f"{self.field}: start {self.start:g} is outside [{self.lo:g}, {self.hi:g}]")
        if not self.prior_scale > 0:
            raise ValueError(f"{self.field}: prior_scale must be above 0")


@dataclass(frozen=True)
class ScenarioDecl:
    """One scenario of a group: ``[[scenario]]``."""

    name: str = opt(help="a shipped scenario, as named in measurements.csv")
    rows: tuple[str, ...] = opt(help="labels of its train rows that the fit uses (not empty)")
    host_rows: tuple[str, ...] = opt((), help="method staged: those of rows that only the host's other fields explain")
    params: tuple[ParamDecl, ...] = opt((), help="free fields of this scenario's own profiles (any kind but host)")

    def __post_init__(self) -> None:
        if not self.rows:
            raise ValueError(f"{self.name}: rows must not be empty")
        for what, items in (("rows", self.rows), ("host_rows", self.host_rows)):
            dup = _first_duplicate(items)
            if dup is not None:
                raise ValueError(f"{self.name}: {what} names {dup!r:.60} twice")
        extra = [r for r in self.host_rows if r not in self.rows]
        if extra:
            raise ValueError(f"{self.name}: host row {extra[0]!r:.60} is not one of its rows")
        if any(p.kind == "host" for p in self.params):
            raise ValueError(f"{self.name}: kind host is the group's host: declare it in the group's params")


@dataclass(frozen=True)
class GridDecl:
    """A card field searched on a grid: ``[[grid]]`` (method grid)."""

    field: str = opt(help="card profile field searched (discrete card state)")
    values: tuple[float, ...] = opt(help="values tried, in the field's unit, in this order")
    below: str = opt("", help="another grid field: skip points where this field is not below it (one grid table at most)")

    def __post_init__(self) -> None:
        if self.field not in _profile_fields("card"):
            raise ValueError(f"{self.field!r:.60} is not a field of a card profile")
        if not self.values:
            raise ValueError(f"{self.field}: values must not be empty")


@dataclass(frozen=True)
class StepDecl:
    """One step of a staged fit: ``{ field = "init_ms", row = "Mount" }``."""

    field: str = opt(help="a per-scenario card field solved in this step")
    row: str = opt(help="label of the row it is solved against; scenarios without that train row skip the step")


@dataclass(frozen=True)
class GroupDecl:
    """A fit group file, sdbench/data/fits/<group>.toml."""

    order: int = opt(min=1, help="position in `sdbench calibrate --list` and in a run of every group")
    description: str = opt(help="one line shown by `sdbench calibrate --list`")
    host: str = opt(help="host profile the group's scenarios share (kind host params are its fields)")
    scenario: tuple[ScenarioDecl, ...] = opt(help="[[scenario]] tables: the scenarios in order, their rows and own fields")
    params: tuple[ParamDecl, ...] = opt((), help="group-wide fields: kind host = the group's host; other kinds = "
                                                 "the one profile every scenario of the group names")
    restrict: tuple[str, ...] = opt((), help="scenario overrides (KEY=VALUE) that limit runs to the fitted rows")
    method: str = opt("least-squares", choices=METHODS, help="how the fields are searched")
    grid: tuple[GridDecl, ...] = opt((), help="method grid: the discrete card state searched")
    grid_linear: tuple[str, ...] = opt((), help="method grid: card fields solved exactly at every grid point")
    sequence: tuple[StepDecl, ...] = opt((), help="method staged: per card, fields solved one row at a time")


@dataclass(frozen=True)
class ScenarioLevels:
    """Measured rows of one scenario that are not file-level: ``[[scenario]]`` in levels.toml."""

    name: str = opt(help="scenario, as named in measurements.csv")
    raw: tuple[str, ...] = opt((), help="rows of sector I/O or card init without a filesystem (tolerance ±10 %)")
    bridge: tuple[str, ...] = opt((), help="rows of sector I/O through a USB mass-storage bridge (±15 %)")

    def __post_init__(self) -> None:
        dup = _first_duplicate(self.raw + self.bridge)
        if dup is not None:
            raise ValueError(f"{self.name}: row {dup!r:.60} is listed twice")


@dataclass(frozen=True)
class LevelsDecl:
    scenario: tuple[ScenarioLevels, ...] = opt((), help="[[scenario]] tables: per scenario, its raw and bridge rows")


def _first_duplicate(items: Any) -> Any:
    seen = set()
    for x in items:
        if x in seen:
            return x
        seen.add(x)
    return None


def _require(cls: type, data: Any, where: str) -> None:
    """Name the first required key missing from ``data`` or its lists of tables (from_mapping checks the rest)."""
    if not isinstance(data, dict):
        return
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        w = f"{where}.{f.name}" if where else f.name
        if f.name not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(f"{w} is required")
            continue
        args = typing.get_args(hints[f.name])
        if typing.get_origin(hints[f.name]) is tuple and args and is_dataclass(args[0]) \
                and isinstance(data[f.name], list):
            for i, item in enumerate(data[f.name]):
                _require(args[0], item, f"{w}[{i}]")


def _declared(cls: type[Any], table: Any, where: str) -> Any:
    """``cls`` from a TOML table; any problem is one ConfigError line starting with ``where``."""
    try:
        _require(cls, table, "")
        return from_mapping(cls, table)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None


def parse_group(name: str, table: dict[str, Any], where: str | None = None) -> FitGroup:
    """A fit group from the table of its file (``name``: the file's name without .toml)."""
    where = where or f"{FITS}/{name}.toml"
    d: GroupDecl = _declared(GroupDecl, table, where)

    def bad(msg: str) -> ConfigError:
        return ConfigError(f"{where}: {msg}")

    scen = tuple(s.name for s in d.scenario)
    if not scen:
        raise bad("scenario: a group needs at least one scenario")
    dup = _first_duplicate(scen)
    if dup is not None:
        raise bad(f"scenario {dup!r:.60} is listed twice")
    params: list[Param] = []
    for p in d.params:  # group-wide: the group's host, or the one profile all its scenarios name
        target = "host" if p.kind == "host" else f"{p.kind}:{','.join(scen)}"
        params.append(Param(target, p.field, p.lo, p.hi, p.prior_weight, p.prior_scale, p.start))
    for s in d.scenario:
        params += [Param(f"{p.kind}:{s.name}", p.field, p.lo, p.hi, p.prior_weight, p.prior_scale, p.start)
                   for p in s.params]
    dup = _first_duplicate((p.target, p.name) for p in params)
    if dup is not None:
        raise bad(f"field {dup[1]} of {dup[0]} is declared twice")
    if not params:
        raise bad("no params: a group fits at least one field")
    grid_fields = [g.field for g in d.grid]
    if (d.method == "grid") != bool(d.grid):
        raise bad("grid tables belong to method = \"grid\", and that method needs them")
    if d.grid:
        if len(scen) != 1:
            raise bad("method grid fits one scenario")
        if _first_duplicate(grid_fields) is not None:
            raise bad(f"grid field {_first_duplicate(grid_fields)} is listed twice")
        limits = [(g.field, g.below) for g in d.grid if g.below]
        if len(limits) > 1:
            raise bad("at most one grid table may have below")
        if limits and (limits[0][1] not in grid_fields or limits[0][1] == limits[0][0]):
            raise bad(f"grid {limits[0][0]}: below = {limits[0][1]!r:.60} is not another grid field")
    card_fields = {p.name for p in params if p.target.startswith("card:")}
    for n in d.grid_linear:
        if not d.grid:
            raise bad("grid_linear belongs to method = \"grid\"")
        if n not in card_fields:
            raise bad(f"grid_linear: {n!r:.60} is not a fitted card field of the group")
    staged = d.method == "staged"
    if staged != bool(d.sequence):
        raise bad("sequence belongs to method = \"staged\", and that method needs it")
    if any(s.host_rows for s in d.scenario) and not staged:
        raise bad("host_rows belong to method = \"staged\"")
    if staged:
        if not any(p.target == "host" and p.name == "block_cycles" for p in params):
            raise bad("method staged moves the common read gap into the host's block_cycles: declare it")
        need = {st.field for st in d.sequence} | {"read_block_gap_us"}
        for s in d.scenario:
            own = {p.field for p in s.params if p.kind == "card"}
            if own and not need <= own:
                raise bad(f"scenario {s.name}: method staged needs its card fields {', '.join(sorted(need - own))}")
        rows = {r for s in d.scenario for r in s.rows}
        for st in d.sequence:
            if st.row not in rows:
                raise bad(f"sequence: row {st.row!r:.60} is not a row of any scenario of the group")
    return FitGroup(
        name, d.description, scen, d.host, tuple(params), restrict=d.restrict,
        rows=tuple((s.name, r) for s in d.scenario for r in s.rows),
        grid=tuple((g.field, g.values) for g in d.grid), grid_linear=d.grid_linear,
        grid_max=next(((g.field, g.below) for g in d.grid if g.below), None), staged=staged,
        host_rows=tuple((s.name, r) for s in d.scenario for r in s.host_rows),
        sequence=tuple((st.field, st.row) for st in d.sequence), order=d.order)


@functools.cache
def _shipped_groups() -> dict[str, FitGroup]:
    found = []
    for res in sorted((DATA / FITS).iterdir(), key=lambda r: r.name):
        if not res.name.endswith(".toml") or res.name == LEVELS_FILE:
            continue
        where = f"{FITS}/{res.name}"
        found.append(parse_group(res.name[:-len(".toml")], parse_toml(res.read_text(), where), where))
    found.sort(key=lambda g: g.order)
    for a, b in zip(found, found[1:]):
        if a.order == b.order:
            raise ConfigError(f"fit groups {a.name} and {b.name} have the same order {a.order}")
    return {g.name: g for g in found}


def groups() -> dict[str, FitGroup]:
    """The shipped fit groups (sdbench/data/fits/*.toml), in their declared order."""
    return dict(_shipped_groups())


@functools.cache
def _levels() -> dict[tuple[str, str], str]:
    where = f"{FITS}/{LEVELS_FILE}"
    d: LevelsDecl = _declared(LevelsDecl, parse_toml((DATA / FITS / LEVELS_FILE).read_text(), where), where)
    out: dict[tuple[str, str], str] = {}
    for s in d.scenario:
        for level, rows in (("raw", s.raw), ("bridge", s.bridge)):
            for r in rows:
                if (s.name, r) in out:
                    raise ConfigError(f"{where}: {s.name}: row {r!r:.60} is declared twice")
                out[(s.name, r)] = level
    return out


# ---- evaluation ---------------------------------------------------------------------------

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

    def overrides(self, x: np.ndarray, fixed: dict[str, dict[str, float]]) -> dict[str, list[str]]:
        per: dict[str, list[str]] = {s: list(self.g.restrict) for s in self.g.scenarios}
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

    def predict(self, scenario: str, overrides: list[str]) -> dict[str, Row]:
        self.evals += 1
        rec = run_scenario(load_scenario(scenario, overrides))
        return {r.label: r for r in rec.rows}

    def scenario_residuals(self, x: np.ndarray, scenario: str, *, skip: tuple[str, ...] = (),
                           only: tuple[str, ...] = ()) -> np.ndarray:
        """Relative errors of one scenario's rows (no priors), leaving out ``skip`` or keeping ``only``."""
        rows = self.predict(scenario, self.overrides(x, {})[scenario])
        return np.array([(row_value(rows[m.row], m.unit) - m.value) / m.value  # type: ignore[operator]
                         for m in self.targets[scenario]
                         if m.row not in skip and (not only or m.row in only)])

    def residuals(self, x: np.ndarray, fixed: dict[str, dict[str, float]]) -> np.ndarray:
        per = self.overrides(x, fixed)
        res = []
        for s in self.g.scenarios:
            if s not in self.targets:
                continue
            rows = self.predict(s, per[s])
            for m in self.targets[s]:
                if m.row not in rows:
                    raise SdbenchError(f"scenario {s} did not emit row {m.row!r}")
                res.append((row_value(rows[m.row], m.unit) - m.value) / m.value)  # type: ignore[operator]
        for p, v in zip(self.g.params, x):
            if p.prior_weight:
                res.append(p.prior_weight * (v - p.lo) / p.prior_scale)
        return np.array(res)


def _num(name: str, v: float) -> str:
    if name in _INT_FIELDS:
        return str(int(round(v)))
    return repr(round(float(v), 6))


def _table(kind: str, name: str) -> dict[str, Any]:
    return profiles.load_table(TARGETS[kind][1], name, what=f"{kind} profile")


def _initial(group: FitGroup) -> np.ndarray:
    x0 = []
    for p in group.params:
        if p.target == "host":
            kind, name = "host", group.host
        else:
            kind, names = p.target.split(":", 1)
            section, key = TARGETS[kind][3]
            name = str(getattr(load_scenario(names.split(",")[0]), section).get(key))
        cls = TARGETS[kind][2]
        v = float(_table(kind, name).get(p.name, getattr(cls(), p.name))) if p.start is None else p.start
        x0.append(min(max(v, p.lo), p.hi))
    return np.array(x0)


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


def fit(group_name: str, meas: list[Measurement], progress: Callable[[str], None] | None = None) -> FitResult:
    gs = groups()
    if group_name not in gs:
        raise ConfigError(f"unknown fit group {group_name!r} (known: {', '.join(gs)})")
    g = gs[group_name]
    ev = _Evaluator(g, meas)
    x0 = _initial(g)
    lo = np.array([p.lo for p in g.params])
    hi = np.array([p.hi for p in g.params])
    # finite-difference steps are relative: a parameter at 0 would move by a hair that polling and SPI byte
    # quantisation cannot see, so every parameter is solved in units of at least 1 % of its range
    scale = np.maximum(np.abs(x0), (hi - lo) * 0.01)

    def solve(fixed: dict[str, dict[str, float]], start: np.ndarray) -> tuple[np.ndarray, float]:
        # a few % steps: busy polling makes the model piecewise constant at the µs scale
        r = least_squares(lambda y: ev.residuals(y * scale, fixed), start / scale, bounds=(lo / scale, hi / scale),
                          jac_sparsity=_sparsity(g, ev), diff_step=0.03, xtol=1e-6, ftol=1e-8, max_nfev=60)
        return r.x * scale, float(np.sum(r.fun ** 2))

    if g.staged:
        x, fixed = _staged(g, ev, x0, lo, hi, scale, progress), {}
        cost = float(np.sum(ev.residuals(x, fixed) ** 2))
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
                progress(f"{group_name}: {', '.join(f'{n}={v:g}' for n, v in fixed[s].items())} -> cost {c:.4g}")
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
    per = ev.overrides(x, fixed)
    residuals = []
    for s in g.scenarios:
        if s not in ev.targets:
            continue
        rows = ev.predict(s, per[s])
        for m in ev.targets[s]:
            residuals.append((s, m.row, float(m.value), row_value(rows[m.row], m.unit)))  # type: ignore[arg-type]
    card_params: dict[str, dict[str, float]] = {s: dict(fixed.get(s, {})) for s in g.scenarios}
    host_params: dict[str, float] = {}
    other: dict[tuple[str, str], dict[str, float]] = {}
    for p, v in zip(g.params, x):
        if p.target == "host":
            host_params[p.name] = float(v)
        elif p.target.startswith("card:") and "," not in p.target:
            card_params[p.target.split(":", 1)[1]][p.name] = float(v)
        else:
            kind, s = p.target.split(":", 1)
            other.setdefault((kind, ev.profile_names[(kind, s)]), {})[p.name] = float(v)
    return FitResult(g.name, card_params, ev.card_names, host_params, residuals, cost, ev.evals, other=other)


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


# ---- writing profiles ---------------------------------------------------------------------

_INT_FIELDS = {f.name for cls in (CardProfile, HostProfile, FlashChipProfile, EspFlashHostProfile)
               for f in fields(cls) if f.type in (int, "int")}


def _fmt(name: str, v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if name in _INT_FIELDS:
        return str(int(round(v)))
    return repr(round(float(v), 3))


def write_profile(kind: str, name: str, updates: dict[str, float], out_dir: Path, header: list[str]) -> Path:
    """Write profile ``name`` = the current profile with ``updates`` applied, to out_dir/<folder>/<name>.toml."""
    table = _table(kind, name)
    table.update(updates)
    _, folder, cls, _ = TARGETS[kind]
    order = [f.name for f in fields(cls)]
    lines = [f"# {h}" for h in header]
    for k in order:
        if k in table:
            lines.append(f"{k} = {_fmt(k, table[k])}")
    path = out_dir / folder / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(lines) + "\n"
    tomllib.loads(text)  # never write a profile that does not load
    write_atomically(path, text)
    return path


def write_results(res: FitResult, out_dir: Path) -> list[Path]:
    paths = []
    by_scen: dict[str, list[tuple[str, float, float]]] = {}
    for s, row, m, p in res.residuals:
        by_scen.setdefault(s, []).append((row, m, p))
    for s, params in res.card_params.items():
        if not params:
            continue
        hdr = [f"fitted by `sdbench calibrate {res.group}` from the train rows of {s}:"]
        hdr += [f"  {row}: measured {m:g}, model {p:.4g} ({(p - m) / m * 100:+.1f} %)" for row, m, p in
                by_scen.get(s, [])]
        paths.append(write_profile("card", res.card_names[s], params, out_dir, hdr))
    if res.host_params:
        host = groups()[res.group].host
        hdr = [f"fields {', '.join(sorted(res.host_params))} fitted by `sdbench calibrate {res.group}`"]
        paths.append(write_profile("host", host, res.host_params, out_dir, hdr))
    for (kind, name), params in res.other.items():
        hdr = [f"fields {', '.join(sorted(params))} fitted by `sdbench calibrate {res.group}` from:"]
        hdr += [f"  {s}: {row}: measured {m:g}, model {p:.4g} ({(p - m) / m * 100:+.1f} %)"
                for s, row, m, p in res.residuals]
        paths.append(write_profile(kind, name, params, out_dir, hdr))
    return paths


def relative_error(measured: float, predicted: float) -> float:
    return (predicted - measured) / measured if measured else math.inf
