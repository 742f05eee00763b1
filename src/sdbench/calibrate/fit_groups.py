"""Fit groups as data: the profile kinds a fit sets (TARGETS), the groups (Param, FitGroup, FitStep) and the
option declarations they are read through from ``sdbench/data/fits/<group>.toml``, with the level of every
published row from ``sdbench/data/fits/levels.toml``."""
from __future__ import annotations

import functools
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from importlib import resources
from typing import Any

from .. import profiles
from ..errors import ConfigError
from ..media.sim.card import CardProfile
from ..media.sim.esp_flash import EspFlashHostProfile
from ..media.sim.host import HostProfile
from ..media.sim.nor import FlashChipProfile
from ..options import from_mapping, opt, parse_toml, type_hints


#: the data shipped with sdbench: fit groups, measurements, profiles
DATA = resources.files("sdbench") / "data"


# ---- fit groups ---------------------------------------------------------------------------

#: parameter target kind -> (scenario override prefix, profile folder, profile class, scenario key naming it)
TARGETS: dict[str, tuple[str, str, type, tuple[str, str]]] = {
    "card": ("sd.card_params", "cards", CardProfile, ("sd", "card")),
    "host": ("sd.host_params", "hosts", HostProfile, ("sd", "host")),
    "flash-chip": ("flash.chip_params", "flash", FlashChipProfile, ("flash", "chip")),
    "flash-host": ("flash.host_params", "hosts", EspFlashHostProfile, ("flash", "host")),
}

#: the integer fields of the profile kinds
_INT_FIELDS = {f.name for cls in (CardProfile, HostProfile, FlashChipProfile, EspFlashHostProfile)
               for f in fields(cls) if f.type in (int, "int")}


def _table(kind: str, name: str) -> dict[str, Any]:
    return profiles.load_table(TARGETS[kind][1], name, what=f"{kind} profile")


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
