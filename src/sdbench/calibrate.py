"""Calibration: fit physical card and host parameters to published raw-level rows.

A *fit group* is a set of scenarios that share a host profile.  Each group
says which profile fields are free (with bounds) and which measured rows
(``split == train``, raw-level: raw sector rows, mount, file open) constrain
them.  The simulator itself is the model: every evaluation runs the scenarios'
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
import itertools
import math
import tomllib
from dataclasses import dataclass, field, fields
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
    try:
        text = Path(path).read_text() if path else (DATA / "measurements.csv").read_text()
    except OSError as e:
        raise SdbenchError(f"cannot read measurements file {path}: {e.strerror}") from None
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
    """'raw' for sector I/O and card init, 'bridge' for sector I/O through the USB bridge, 'file' for rows
    through a filesystem.  Calibration uses raw and bridge rows only."""
    if m.row.startswith("USB MSC"):
        return "bridge"
    if "raw" in m.row.lower() or m.op == "mount":
        return "raw"
    return "file"


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
    rows: tuple[str, ...] = ()  # labels used (train rows of these scenarios with these labels)
    grid: tuple[tuple[str, tuple[float, ...]], ...] = ()  # card fields searched on a grid (single-scenario groups)
    # with a grid: card fields whose effect on the rows is linear (costs of events the grid places);
    # solved exactly for every grid point from three simulations
    grid_linear: tuple[str, ...] = ()
    grid_max: tuple[str, str] | None = None  # (field, limit field): skip grid points where field >= limit
    # staged fit for many cards sharing a host: per-card fits with the host fixed, then the host's per-block
    # cost takes the part of the card-side read gap that every card shows (the fastest card then has none)
    staged: bool = False
    host_rows: tuple[str, ...] = ()  # staged: rows that only the host's remaining fields explain
    # staged: per card, (field, row) pairs solved in this order, each by a 1-D root search (the model is
    # monotone in each and quantised by polling, which stalls gradient steps)
    sequence: tuple[tuple[str, str], ...] = ()


P2_CARDS = ("sandisk-industrial-16gb", "lexar-v30-64gb", "lexar-blue-128gb", "samsung-evo-128gb",
            "sandisk-switch-128gb", "sandisk-extreme-64gb", "samsung-pro-endurance-128gb", "amazon-basics-64gb",
            "pny-16gb")
P2_ROWS = ("Mount", "File Open", "Raw Read 1x512B", "Raw Read 64x (32KB)", "Raw Write 1x512B", "Raw Write 64x (32KB)")


def _p2_group() -> FitGroup:
    scen = tuple(f"p2-spi25-350mhz-{c}" for c in P2_CARDS)
    params: list[Param] = [Param("host", "block_cycles", 0, 60000), Param("host", "fs_open_cycles", 0, 2_000_000)]
    for s in scen:
        params += [
            Param(f"card:{s}", "init_ms", 0, 5000),
            Param(f"card:{s}", "read_access_us", 0, 20000),
            Param(f"card:{s}", "read_block_gap_us", 0, 2000),
            Param(f"card:{s}", "write_busy_single_us", 0, 100000),
            Param(f"card:{s}", "write_busy_end_us", 0, 100000),
        ]
    return FitGroup("p2", "Propeller 2 benchmark cards, SPI 25 MHz (host p2-350mhz shared)", scen, "p2-350mhz",
                    tuple(params), restrict=("p2.metrics=" + repr(list(P2_ROWS)),), rows=P2_ROWS, staged=True,
                    host_rows=("File Open",),
                    sequence=(("init_ms", "Mount"), ("read_access_us", "Raw Read 1x512B"),
                              ("read_block_gap_us", "Raw Read 64x (32KB)"),
                              ("write_busy_single_us", "Raw Write 1x512B"),
                              ("write_busy_end_us", "Raw Write 64x (32KB)")))


def _espidf_group() -> FitGroup:
    s = "espidf-esp32-sdmmc4-40mhz"
    c = f"card:{s}"
    return FitGroup(
        "espidf-esp32", "ESP-IDF perf_benchmark card on ESP32 SDMMC 4-bit 40 MHz (SD raw rows)", (s,), "esp32-sdmmc",
        (Param(c, "read_access_us", 0, 5000), Param(c, "write_busy_end_us", 0, 20000),
         Param(c, "merge_base_ms", 0, 2000), Param(c, "merge_copy_us_per_kib", 0, 2000),
         Param(c, "first_write_ms", 0, 2000)),
        restrict=("espidf.parts=['sd_raw']",),
        rows=tuple(f"SD raw {op} [{k} kB label]" for k in (16, 32, 48, 64) for op in ("write", "read")),
        grid=(("update_block_bytes", tuple(float(m << 20) for m in (4, 6, 8, 10, 12, 16))),
              ("initial_update_fill_bytes", tuple(float(k * 65536) for k in range(0, 256, 8)))),
        grid_linear=("merge_base_ms", "merge_copy_us_per_kib", "first_write_ms"),
        grid_max=("initial_update_fill_bytes", "update_block_bytes"))


def _s3_group(name: str, scenario: str, host: str) -> FitGroup:
    c = f"card:{scenario}"
    return FitGroup(name, f"{scenario}: raw sector read/write", (scenario,), host,
                    (Param(c, "read_access_us", 0, 20000, start=250),
                     Param(c, "write_busy_end_us", 0, 100000, start=1500)),
                    rows=("raw sectors write", "raw sectors read"))


def _flash_group() -> FitGroup:
    s = "espidf-esp32-spiflash"
    return FitGroup(
        "espidf-esp32-flash", "ESP32 internal SPI flash through wear levelling (SPI Flash raw rows)", (s,),
        "esp32-flash",
        (Param(f"flash-chip:{s}", "byte_program_next_typ_us", 0, 50),
         Param(f"flash-host:{s}", "cmd_overhead_cycles", 0, 100000)),
        restrict=("espidf.parts=['flash_raw']",), rows=("SPI Flash raw write", "SPI Flash raw read"))


def _s3_spi_group() -> FitGroup:
    both = "esp32s3-spi20mhz,esp32s3-usbmsc-spi20mhz"
    c = f"card:{both}"
    return FitGroup(
        "esp32s3-spi", "ESP32-S3 SDSPI 20 MHz card: board raw rows and the bridge's single-sector rows (one card)",
        ("esp32s3-spi20mhz", "esp32s3-usbmsc-spi20mhz"), "esp32s3-sdspi",
        (Param("host", "block_cycles", 0, 100000, start=8000), Param(c, "read_access_us", 0, 20000, start=250),
         Param(c, "write_busy_single_us", 0, 100000, start=1000),
         Param(c, "write_busy_end_us", 0, 100000, start=1500)),
        restrict=("usbmsc.rows=['single-sector write', 'single-sector read']",),
        rows=("raw sectors write", "raw sectors read", "USB MSC single-sector write", "USB MSC single-sector read"))


def groups() -> dict[str, FitGroup]:
    gs = [_espidf_group(), _flash_group(), _p2_group(), _s3_spi_group(),
          _s3_group("esp32s3-sdmmc", "esp32s3-sdmmc4-40mhz", "esp32s3-sdmmc")]
    return {g.name: g for g in gs}


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
                    and (not group.rows or m.row in group.rows)]
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
                res = ev.scenario_residuals(x, s, skip=g.host_rows)
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
                res = [ev.scenario_residuals(xx, s, only=g.host_rows) for s in g.scenarios
                       if any(m.row in g.host_rows for m in ev.targets.get(s, []))]
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
