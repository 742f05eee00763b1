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

Every fit ends with the Jacobian at its solution, and each fitted field's standard deviation from it (the
residual scatter, or the stated uncertainty of the figures when the fit is exact or agrees better than that:
docs/calibration.md); the profiles record it as ``fit_rel_sd`` (σ / value).  ``sdbench calibrate --from``
(:mod:`sdbench.usercal`) builds a group in memory from a user's measurements and fits it field by field
(:class:`FitStep`).

The shipped profiles in ``sdbench/data/{cards,hosts}`` are this module's
output: ``sdbench calibrate -o src/sdbench/data``.
"""
from __future__ import annotations

import csv
import decimal
import functools
import itertools
import math
import re
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
from .options import from_mapping, opt, parse_toml, read_text_file, toml_string, type_hints
from .output_files import write_atomically
from .parallel import run_pool
from .ledger import Recording
from .protocols import protocol, run_scenario
from .repricing import ReplayMismatch, replayed_rows
from .records import Row
from .scenarios import load as load_scenario
from .stack.cardpop import card_population

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
    #: the figure as the source printed it (its last digit says how it was rounded); "" = unknown
    value_text: str = ""
    #: raw, bridge or file (see :func:`row_level`); "" = as sdbench/data/fits/levels.toml declares it
    level: str = ""


#: levels a measurement row may declare in its ``level`` column
LEVELS = ("raw", "bridge", "file")
#: the shipped measurement data: the seed's file, then every file of the published folder (same columns, and
#: a ``level`` column), in name order
PUBLISHED = "published"


def load_measurements(path: str | Path | None = None) -> list[Measurement]:
    """Read a measurements CSV (default: the data shipped with sdbench: ``measurements.csv`` and every CSV in
    ``published/``)."""
    if path:
        return _read_measurements(read_text_file(path, "measurements file"), str(path))
    out = _read_measurements((DATA / "measurements.csv").read_text(), "measurements.csv")
    folder = DATA / PUBLISHED
    if folder.is_dir():
        for f in sorted(folder.iterdir(), key=lambda p: p.name):
            if f.name.endswith(".csv"):
                out += _read_measurements(f.read_text(), f"{PUBLISHED}/{f.name}")
    return out


def _read_measurements(text: str, where: str) -> list[Measurement]:
    text = text.removeprefix("\ufeff")  # a spreadsheet's UTF-8 byte-order mark
    out = []
    reader = csv.DictReader(text.splitlines())
    need = {"scenario", "row", "op", "size_bytes", "runs", "value", "unit", "split"}
    i = 1
    try:
        if not reader.fieldnames or not need <= set(reader.fieldnames):
            raise SdbenchError(f"{where}: not a measurements file (needs columns {', '.join(sorted(need))})")
        for i, r in enumerate(reader, start=2):
            try:
                level = (r.get("level") or "").strip()
                if level and level not in LEVELS:
                    raise ValueError(f"level {level!r:.20} is not one of {', '.join(LEVELS)}")
                out.append(Measurement(r["scenario"], r["row"], r["op"], int(r["size_bytes"] or 0),
                                       int(r["runs"] or 0), float(r["value"]) if r["value"] else None, r["unit"],
                                       r["split"], r.get("source", ""), r.get("note", ""),
                                       (r["value"] or "").strip(), level))
            except (ValueError, TypeError, AttributeError) as e:  # a short line leaves cells None
                raise SdbenchError(f"{where} line {i}: {e}") from None
    except csv.Error as e:  # e.g. a cell beyond the csv module's field limit
        raise SdbenchError(f"{where} line {i + 1}: not CSV this reads ({e})") from None
    return out


def row_level(m: Measurement) -> str:
    """'raw' for sector I/O and card init, 'bridge' for sector I/O through a USB bridge, 'file' for rows
    through a filesystem, as the row's ``level`` column or else sdbench/data/fits/levels.toml declares per
    scenario and row (rows it does not name are file-level).  Calibration uses raw and bridge rows only."""
    return m.level or _levels().get((m.scenario, m.row), "file")


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
    if unit == "KB/s":  # SdFat's: 1000 bytes per second
        return row.bytes / 1000 / (t / 1000.0)
    if unit == "MB/s":
        return row.bytes / 1e6 / (t / 1000.0)
    if unit == "MiB/s":
        return row.bytes / 1048576 / (t / 1000.0)
    raise SdbenchError(f"unknown unit {unit!r} in measurements")


# ---- how well a published figure is known (docs/calibration.md) ---------------------------------------------

#: stated relative standard deviation of a published figure: the sources print means without a spread, so this
#: is a declared assumption, not a measurement; a fit never claims a field more precisely than its rows allow
MEASUREMENT_REL_SD = 0.01


def rounding_rel_sd(m: Measurement) -> float:
    """Relative standard deviation of the rounding of a figure as printed: half a unit of its last digit,
    spread evenly (σ = unit / √12), over the figure ("13.380" -> 0.001 / √12 / 13.38)."""
    if not m.value:
        return 0.0
    text = m.value_text or repr(float(m.value))
    try:
        exponent = decimal.Decimal(text).as_tuple().exponent
    except decimal.InvalidOperation:
        return 0.0
    if not isinstance(exponent, int):  # NaN or infinity: no digits
        return 0.0
    return 10.0 ** exponent / math.sqrt(12.0) / abs(m.value)


def measurement_rel_sd(m: Measurement) -> float:
    """The relative standard deviation a fit assumes for a measured figure: the stated
    :data:`MEASUREMENT_REL_SD`, or the figure's rounding where that is coarser."""
    return max(MEASUREMENT_REL_SD, rounding_rel_sd(m))


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
    # groups built in memory only (`sdbench calibrate --from`): card fields every run of a scenario starts from
    # (scenario -> field -> value; the params and grid points override them)
    base: dict[str, dict[str, Any]] = field(default_factory=dict)
    # in memory only: one scenario, each param solved in turn by a 1-D root search on the mean relative error
    # of its own rows, with the scenario cut to those rows (see FitStep); sweeps until nothing moves
    steps: tuple["FitStep", ...] = ()
    # in memory only, with steps: overrides of the search (e.g. fewer runs per row); the fit ends with Newton
    # steps at the group's own overrides from the point the search found
    search: tuple[str, ...] = ()

    def host_labels(self, scenario: str) -> tuple[str, ...]:
        """Labels of ``scenario``'s rows that only the host's remaining fields explain (staged fits)."""
        return tuple(r for s, r in self.host_rows if s == scenario)


@dataclass(frozen=True)
class FitStep:
    """One step of a sequential fit: parameter ``param`` (index into FitGroup.params) is solved so that the mean
    relative error of ``rows`` (labels of the group's one scenario) is 0, running the scenario with
    ``restrict`` (overrides that keep the rows the step needs and everything before them) instead of the
    group's."""

    param: int
    rows: tuple[str, ...]
    restrict: tuple[str, ...] = ()


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
    hints = type_hints(cls)
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
        for s in d.scenario:
            # a field whose row the scenario lacks need not be declared (the card may hold it: timing_from)
            need = {st.field for st in d.sequence if st.row in s.rows} | {"read_block_gap_us"}
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


def _table(kind: str, name: str) -> dict[str, Any]:
    return profiles.load_table(TARGETS[kind][1], name, what=f"{kind} profile")


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
                progress(f"{g.name}: {', '.join(f'{n}={v:g}' for n, v in fixed[s].items())} -> cost {c:.4g}")
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


# ---- the fit's uncertainty ----------------------------------------------------------------------------------

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
                progress(f"{g.name}: sweep {sweep + 1}: {g.params[j].name} = {x[j]:.6g} "
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


# ---- writing profiles ---------------------------------------------------------------------

_INT_FIELDS = {f.name for cls in (CardProfile, HostProfile, FlashChipProfile, EspFlashHostProfile)
               for f in fields(cls) if f.type in (int, "int")}

#: the words that start the header block `sdbench calibrate` writes into a profile it fitted; the group follows
FITTED_BY = profiles.FITTED_MARK
_FITTED_RE = re.compile(r"fitted by `sdbench calibrate ([^`\s]*)")
_KEY_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*=")


def _fmt(name: str, v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, dict) and name == "unfitted":  # field -> its value before any fit
        return "{ " + ", ".join(f"{k} = {_fmt(k, x)}" for k, x in v.items()) + " }" if v else "{}"
    if isinstance(v, dict):  # fit_rel_sd: field -> σ / value, three significant digits
        return "{ " + ", ".join(f"{k} = {_fmt_sd(x)}" for k, x in v.items()) + " }" if v else "{}"
    if name in _INT_FIELDS:
        return str(int(round(v)))
    return repr(round(float(v), 3))


def _comment_text(text: str) -> str:
    """``text`` fit for a TOML comment line: characters that would end the line or that TOML refuses in a
    comment (control characters, line and paragraph separators) escaped."""
    if all(c == "\t" or c.isprintable() for c in text):
        return text
    return "".join(c if c == "\t" or c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


def _fmt_sd(v: float) -> str:
    text = f"{float(v):.3g}"
    return text if any(c in text for c in ".en") else text + ".0"


@dataclass
class ProfileLayout:
    """The comments of a profile file, kept when the file is written again with new values."""

    header: list[tuple[str | None, list[str]]] = field(default_factory=list)  # (fit group or None, comment lines)
    before: dict[str, list[str]] = field(default_factory=dict)  # comment lines right above a field's line
    lines: dict[str, str] = field(default_factory=dict)          # each field's own line, as written
    tail: list[str] = field(default_factory=list)                 # comments after the last field


def profile_layout(text: str) -> ProfileLayout:
    """The layout of a profile's text: the comment blocks above its first field (a block starts at a line
    saying which `sdbench calibrate` group fitted it), the comments above each field, each field's line."""
    out = ProfileLayout()
    pending: list[str] = []
    seen_key = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if not seen_key:
                m = _FITTED_RE.search(stripped)
                if m or not out.header:
                    out.header.append((m.group(1) if m else None, [stripped]))
                else:
                    out.header[-1][1].append(stripped)
            else:
                pending.append(stripped)
            continue
        m = _KEY_RE.match(line)
        if m:
            seen_key = True
            out.before[m.group(1)] = pending
            out.lines[m.group(1)] = line.rstrip()
            pending = []
    out.tail = pending
    return out


def profile_text(kind: str, table: dict[str, Any], header: list[str], layout: ProfileLayout | None = None,
                 changed: set[str] | frozenset[str] = frozenset()) -> str:
    """A profile's TOML: the header comment blocks (``header``, the block of this fit, replaces the layout's
    block of the same fit group or comes after the others), then the table's fields in declaration order,
    each below the comments the layout had above it and on the line it had unless it is in ``changed``."""
    layout = layout or ProfileLayout()
    cls = TARGETS[kind][2]
    mine = _FITTED_RE.search(header[0]) if header else None
    group = mine.group(1) if mine else None
    blocks = [(g, lines) for g, lines in layout.header if g is not None]
    plain = [lines for g, lines in layout.header if g is None]
    new = [f"# {_comment_text(h)}" for h in header]
    if new:
        at = next((i for i, (g, _) in enumerate(blocks) if g == group), None)
        if at is None:
            blocks.append((group, new))
        else:
            blocks[at] = (group, new)
    lines = [ln for _, block in blocks for ln in block] + [ln for block in plain for ln in block]
    for k in (f.name for f in fields(cls)):
        if k not in table or (k in ("fit_rel_sd", "unfitted") and not table[k]):
            continue
        lines += layout.before.get(k, [])
        old = layout.lines.get(k)
        if old is not None and k not in changed and k not in ("fit_rel_sd", "unfitted") \
                and _line_value(old, k) == table[k]:
            lines.append(old)
        else:
            lines.append(f"{k} = {_fmt(k, table[k])}")
    lines += layout.tail
    text = "\n".join(lines) + "\n"
    tomllib.loads(text)  # never write a profile that does not load
    return text


def _line_value(line: str, key: str) -> Any:
    try:
        return tomllib.loads(line).get(key, MISSING)
    except tomllib.TOMLDecodeError:
        return MISSING


def write_profile(kind: str, name: str, updates: dict[str, float], out_dir: Path, header: list[str],
                  rel_sd: dict[str, float] | None = None) -> Path:
    """Write profile ``name`` = the profile with ``updates`` applied, to out_dir/<folder>/<name>.toml.

    The profile starts from out_dir's copy when there is one (a run of several groups fills in one file), else
    from the shipped one; its comments stay. ``fit_rel_sd`` gets ``rel_sd`` (σ / value of the fields this fit
    tells) for the fields in ``updates``; what it records for other fields (fitted by other groups) stays.
    ``unfitted`` keeps, for each field a fit ever changed, the value it had before the first fit: for a card
    that took the field from the population (``timing_from``), the population's value then."""
    _, folder, _, _ = TARGETS[kind]
    path = out_dir / folder / f"{name}.toml"
    if path.is_file():
        text = read_text_file(path, f"{kind} profile")
        table = parse_toml(text, str(path))
    else:
        table = _table(kind, name)
        res = DATA / folder / f"{name}.toml"
        text = res.read_text() if res.is_file() else ""
    unfitted = dict(table.get("unfitted") or {})
    fitted_before = table.get("fit_rel_sd") if isinstance(table.get("fit_rel_sd"), dict) else {}
    # a group that fitted this profile before names itself in its header: its fields hold that fit's values
    # (those it fitted without a σ too), not the sources'
    group = re.match(r"fitted by `sdbench calibrate [^`]+`", header[0]) if header else None
    refit = group is not None and group.group(0) in text
    held = card_population().medians if kind == "card" and table.get("timing_from") == "population" else {}
    for k in updates:
        # only a first fit records: a card that took the field from the population had the population's value
        before = table.get(k, held.get(k))
        if k not in unfitted and k not in fitted_before and not refit and isinstance(before, (int, float)) \
                and not isinstance(before, bool):
            unfitted[k] = before
    table["unfitted"] = {k: unfitted[k] for k in (f.name for f in fields(TARGETS[kind][2])) if k in unfitted}
    table.update(updates)
    old_sd = table.get("fit_rel_sd") if isinstance(table.get("fit_rel_sd"), dict) else {}
    sd = {k: v for k, v in old_sd.items() if k not in updates}
    sd.update({k: v for k, v in (rel_sd or {}).items() if k in updates})
    order = [f.name for f in fields(TARGETS[kind][2])]
    table["fit_rel_sd"] = {k: sd[k] for k in order if k in sd}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, profile_text(kind, table, header, profile_layout(text), set(updates)))
    return path


def describe_sd(u: Uncertainty) -> str:
    """A field's σ as the reports say it: "σ 1.53 % of 226.1 (from the measurement)", or why there is none."""
    rel = u.rel_sd
    if rel is not None:
        return f"σ {rel * 100:.3g} % of {u.value:.6g} (from the {u.status})"
    if u.sd is not None and u.value:
        return (f"σ {u.sd / abs(u.value) * 100:.3g} % of {u.value:.6g}, not recorded: the rows tell it only "
                f"together with other fields")
    if u.sd is not None:
        return f"σ {u.sd:.3g} at 0 (from the {u.status}; a relative σ of 0 is not defined)"
    return f"no σ ({u.status})"


def sd_cells(u: Uncertainty) -> tuple[str, str]:
    """(σ / value, where it comes from) of a field for a report table."""
    rel = u.rel_sd
    if rel is not None:
        return f"{rel * 100:.3g} %", u.status
    if u.sd is not None and u.value:
        return f"{u.sd / abs(u.value) * 100:.3g} %", f"{u.status}; above {MAX_REL_SD * 100:.0f} %: not recorded"
    return "-", u.status


def _sd_lines(uncertainty: list[Uncertainty], target: str | None = None,
              names: set[str] | None = None) -> list[str]:
    """Header lines: each fitted field's σ and where it comes from."""
    out = []
    for u in uncertainty:
        if (target is not None and u.target != target) or (names is not None and u.name not in names):
            continue
        out.append(f"  {u.name}: {describe_sd(u)}")
    return out


def write_results(res: FitResult, out_dir: Path) -> list[Path]:
    paths = []
    by_scen: dict[str, list[tuple[str, float, float]]] = {}
    for s, row, m, p in res.residuals:
        by_scen.setdefault(s, []).append((row, m, p))
    for s, params in res.card_params.items():
        if not params:
            continue
        hdr = [f"{FITTED_BY} {res.group}` from the train rows of {s}:"]
        hdr += [f"  {row}: measured {m:g}, model {p:.4g} ({(p - m) / m * 100:+.1f} %)" for row, m, p in
                by_scen.get(s, [])]
        sd_lines = _sd_lines(res.uncertainty, f"card:{s}")
        if sd_lines:
            hdr += ["standard deviations (fit_rel_sd; docs/calibration.md):", *sd_lines]
        paths.append(write_profile("card", res.card_names[s], params, out_dir, hdr, res.card_rel_sd.get(s, {})))
    if res.host_params:
        host = res.host or groups()[res.group].host
        hdr = [f"fields {', '.join(sorted(res.host_params))} {FITTED_BY} {res.group}`"]
        sd_lines = _sd_lines(res.uncertainty, "host")
        if sd_lines:
            hdr += ["standard deviations (fit_rel_sd; docs/calibration.md):", *sd_lines]
        paths.append(write_profile("host", host, res.host_params, out_dir, hdr, res.host_rel_sd))
    for (kind, name), params in res.other.items():
        hdr = [f"fields {', '.join(sorted(params))} {FITTED_BY} {res.group}` from:"]
        hdr += [f"  {s}: {row}: measured {m:g}, model {p:.4g} ({(p - m) / m * 100:+.1f} %)"
                for s, row, m, p in res.residuals]
        sd_lines = _sd_lines([u for u in res.uncertainty if u.target.startswith(f"{kind}:")], None, set(params))
        if sd_lines:
            hdr += ["standard deviations (fit_rel_sd; docs/calibration.md):", *sd_lines]
        paths.append(write_profile(kind, name, params, out_dir, hdr, res.other_rel_sd.get((kind, name), {})))
    return paths


def relative_error(measured: float, predicted: float) -> float:
    return (predicted - measured) / measured if measured else math.inf
