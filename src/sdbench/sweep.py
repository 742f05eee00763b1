"""Sweeps: one scenario run per point of a grid of parameter values.

A sweep spec is TOML::

    base = "mpy-esp32s3-sdspi"            # built-in scenario name, or a scenario file (relative to the spec)
    name = "cache-size"                   # optional (default: the spec file's name)

    [fixed]                               # overrides applied to every configuration
    "fs_tests.workloads" = ["mixed"]

    [grid]                                # dotted scenario keys -> lists of values; the cartesian product
    "fs_tests.cache_blocks" = [0, 4, 16, 64]
    "fs_tests.filesystems" = ["fat", "littlefs"]

    [plot]                                # optional defaults for --plot
    x = "fs_tests.cache_blocks"
    series = "fs_tests.filesystems"
    y = "{fs_tests.filesystems} mixed read"   # a row label; {key} is replaced by the configuration's value

Keys are the same dotted paths as ``sdbench run --set`` (``sd.bus.clock_hz``,
``sd.cache.blocks``, ``sd.card``, ``sd_littlefs.block_size``, ...); TOML's own
dotted keys (``sd.cache.blocks = [..]`` unquoted) mean the same.

Configurations run in parallel on a local process pool or on a Dask
distributed cluster.  A configuration's record depends only on its scenario
and seed (simulated runs are deterministic), never on the worker count or
order; results are kept in grid order.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import time
from collections.abc import Callable
from importlib import resources
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError, SdbenchError
from .parallel import run_dask, run_pool
from .options import is_shipped_name, parse_toml, read_text_file, stat_or_none, toml_string
from .records import Results, RunRecord

DATA = resources.files("sdbench") / "data"


@dataclass(frozen=True)
class SweepSpec:
    name: str
    base: str
    grid: tuple[tuple[str, tuple[Any, ...]], ...]
    fixed: tuple[tuple[str, Any], ...] = ()
    description: str = ""
    plot: dict[str, str] = field(default_factory=dict)
    text: str = ""  # the spec as written (its hash names the sweep)

    @property
    def keys(self) -> list[str]:
        return [k for k, _ in self.grid]

    def configurations(self) -> list[dict[str, Any]]:
        """Every point of the grid, in order (the last key varies fastest)."""
        keys = self.keys
        return [dict(zip(keys, combo)) for combo in itertools.product(*[v for _, v in self.grid])]

    def overrides(self, params: dict[str, Any]) -> list[str]:
        return [f"{k}={toml_value(v)}" for k, v in (*self.fixed, *params.items())]


def toml_value(v: Any) -> str:
    """A value as a TOML literal, for ``key=value`` overrides."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_string(str(k))} = {toml_value(x)}" for k, x in v.items()) + "}"
    raise ConfigError(f"cannot use {v!r} as a parameter value")


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested tables (TOML dotted keys) -> dotted key paths; lists and scalars are values."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


_SPEC_KEYS = {"base", "name", "description", "grid", "fixed", "plot"}


def builtin_specs() -> list[str]:
    return sorted(p.name[:-5] for p in (DATA / "sweeps").iterdir() if p.name.endswith(".toml"))


def load_spec(path: str | Path) -> SweepSpec:
    """Read a sweep spec (a file, or the name of one shipped in sdbench/data/sweeps); every problem is a
    one-line ConfigError."""
    p = Path(path)
    if stat_or_none(p, "a sweep spec") is None and is_shipped_name(str(path)) and \
            (DATA / "sweeps" / f"{p.name}.toml").is_file():
        p = Path(str(DATA / "sweeps" / f"{p.name}.toml"))
    if stat_or_none(p, "a sweep spec") is None:
        known = ", ".join(builtin_specs())
        raise ConfigError(f"sweep spec not found: {p} (built-in: {known})")
    text = read_text_file(p, "sweep spec")
    data = parse_toml(text, f"sweep spec {p}")
    unknown = sorted(set(data) - _SPEC_KEYS)
    if unknown:
        raise ConfigError(f"sweep spec {p}: unknown key {unknown[0]!r} (known: {', '.join(sorted(_SPEC_KEYS))})")
    base = data.get("base")
    if not isinstance(base, str) or not base:
        raise ConfigError(f"sweep spec {p}: 'base' must name a scenario (a built-in name or a .toml file)")
    if base.endswith(".toml") and not Path(base).is_absolute():
        base = str((p.parent / base).resolve())
    for t in ("grid", "fixed", "plot"):
        if t in data and not isinstance(data[t], dict):
            raise ConfigError(f"sweep spec {p}: [{t}] must be a table")
    grid = _flatten(data.get("grid", {}))
    if not grid:
        raise ConfigError(f"sweep spec {p}: [grid] needs at least one key = [values, ...]")
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise ConfigError(f"sweep spec {p}: grid.{k} must be a non-empty list of values")
    fixed = _flatten(data.get("fixed", {}))
    both = sorted(set(grid) & set(fixed))
    if both:
        raise ConfigError(f"sweep spec {p}: {both[0]} is in both [grid] and [fixed]")
    plot = data.get("plot", {})
    bad_plot = sorted(set(plot) - {"x", "series", "y"})
    if bad_plot:
        raise ConfigError(f"sweep spec {p}: unknown plot key {bad_plot[0]!r} (x, series, y)")
    if any(not isinstance(v, str) for v in plot.values()):
        raise ConfigError(f"sweep spec {p}: plot.x, plot.series and plot.y must be strings")
    return SweepSpec(name=str(data.get("name", p.stem)), base=base,
                     grid=tuple((k, tuple(v)) for k, v in grid.items()), fixed=tuple(fixed.items()),
                     description=str(data.get("description", "")), plot=dict(plot), text=text)


# ---- running one configuration (in any process) --------------------------------------------------

def check_configuration(base: str, overrides: list[str]) -> Any:
    """Load the scenario, build and close a simulated stack once, and parse the protocol's table: bad values
    fail here, before any run."""
    from . import scenarios as scen

    sc = scen.load(base, overrides)  # checks every protocol table too
    if sc.clock_kind() == "virtual":  # building real media would open (and maybe ask about) devices
        built = sc.build()
        built.close()
    return sc


def run_configuration(base: str, overrides: list[str]) -> dict[str, Any]:
    """Run one configuration; returns its RunRecord as a dict (cheap to send between processes)."""
    from . import scenarios as scen
    from .protocols import run_scenario

    return run_scenario(scen.load(base, overrides)).to_dict()


def _run_indexed(args: tuple[int, str, list[str]]) -> tuple[int, dict[str, Any]]:
    i, base, overrides = args
    return i, run_configuration(base, overrides)


# ---- the sweep ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SweepResult:
    spec: SweepSpec
    sweep_id: str
    params: tuple[dict[str, Any], ...]
    records: tuple[RunRecord, ...]
    wall_s: float = 0.0
    workers: int = 1
    executor: str = "local"


def sweep_id(spec: SweepSpec) -> str:
    digest = hashlib.sha1(spec.text.encode()).hexdigest()[:8]
    return f"{spec.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{digest}"


def check_sweep(spec: SweepSpec) -> None:
    """Refuse, before anything runs, a configuration that would not load or build (one line naming it)."""
    for i, p in enumerate(spec.configurations()):
        try:
            check_configuration(spec.base, spec.overrides(p))
        except SdbenchError as e:
            where = ", ".join(f"{k}={toml_value(v)}" for k, v in p.items())
            raise ConfigError(f"sweep {spec.name}: configuration {i + 1} ({where}): {e}") from None


def run_sweep(spec: SweepSpec, *, workers: int | None = None, dask: str | None = None, dask_processes: bool = True,
              progress: Callable[[str], None] | None = None, check: bool = True) -> SweepResult:
    """Run every configuration of ``spec``; records come back in grid order with their parameters.
    ``progress(parameters)`` as each configuration finishes."""
    configs = spec.configurations()
    jobs = [(i, spec.base, spec.overrides(p)) for i, p in enumerate(configs)]
    if check:
        check_sweep(spec)
    n_workers = max(1, workers or os.cpu_count() or 1)
    n_workers = min(n_workers, len(jobs))
    sid = sweep_id(spec)

    def done(i: int, _rec: Any = None) -> None:
        if progress is not None:
            progress(", ".join(f"{k}={toml_value(v)}" for k, v in configs[i].items()))

    t0 = time.perf_counter()
    if dask:
        out = run_dask(jobs, dask, n_workers, dask_processes, done, _run_indexed)
        executor = "dask-local" if dask == "local" else f"dask {dask}"
    else:
        out = run_pool(jobs, n_workers, done, _run_indexed)
        executor = "local"
    wall = time.perf_counter() - t0
    records = []
    for i, p in enumerate(configs):
        rec = RunRecord.from_dict(out[i])
        meta = {**rec.metadata, "sweep": {"id": sid, "name": spec.name, "base": spec.base, "index": i,
                                          "params": p, "fixed": dict(spec.fixed)}}
        records.append(replace(rec, metadata=meta))
    return SweepResult(spec, sid, tuple(configs), tuple(records), wall, n_workers, executor)


# ---- output -------------------------------------------------------------------------------------------

def _fmt(v: float) -> str:
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.0f}"


def _labels(res: SweepResult, rows: list[str] | None) -> list[str]:
    labels: dict[str, None] = {}
    for rec in res.records:
        for r in rec.rows:
            if not rows or r.label in rows:
                labels[r.label] = None
    if rows:
        missing = [r for r in rows if r not in labels]
        if missing:
            raise SdbenchError(f"no configuration has a row labelled {missing[0]!r}")
    return list(labels)


def markdown(res: SweepResult, rows: list[str] | None = None, *, wide_limit: int = 6) -> str:
    """One line per configuration (columns: parameters, then each row's figure), or one line per
    configuration and row when there are more than ``wide_limit`` labels."""
    keys = res.spec.keys
    labels = _labels(res, rows)
    units = {}
    for rec in res.records:
        for r in rec.rows:
            units.setdefault(r.label, r.unit)
    lines = []
    if len(labels) <= wide_limit:
        head = ["#", *keys, *(f"{lb} ({units[lb]})" for lb in labels)]
        lines += ["| " + " | ".join(head) + " |", "|" + "|".join(["---:"] + ["---"] * len(keys)
                                                                 + ["---:"] * len(labels)) + "|"]
        for i, (p, rec) in enumerate(zip(res.params, res.records)):
            by = {r.label: r for r in rec.rows}
            cells = [str(i + 1), *(_key_text(p[k]) for k in keys),
                     *(_fmt(by[lb].reported_value) if lb in by else "" for lb in labels)]
            lines.append("| " + " | ".join(cells) + " |")
    else:
        head = ["#", *keys, "row", "figure", "unit"]
        lines += ["| " + " | ".join(head) + " |",
                  "|" + "|".join(["---:"] + ["---"] * len(keys) + ["---", "---:", "---"]) + "|"]
        for i, (p, rec) in enumerate(zip(res.params, res.records)):
            for r in rec.rows:
                if r.label in labels:
                    lines.append("| " + " | ".join([str(i + 1), *(_key_text(p[k]) for k in keys), r.label,
                                                    _fmt(r.reported_value), r.unit]) + " |")
    return "\n".join(lines) + "\n"


def _key_text(v: Any) -> str:
    return v if isinstance(v, str) else toml_value(v)


def fill_label(template: str, params: dict[str, Any]) -> str:
    """``{key}`` in a row label template -> that configuration's value of grid key ``key``."""
    out = template
    for k, v in params.items():
        out = out.replace("{" + k + "}", _key_text(v))
    if "{" in out and "}" in out[out.index("{"):]:
        bad = out[out.index("{") + 1:out.index("}", out.index("{"))]
        raise SdbenchError(f"row label {template!r}: {{{bad}}} is not a grid key")
    return out


def plot_png(res: SweepResult, *, x: str, y: str, series: str | None = None) -> bytes:
    """A row's figure against parameter ``x``, one line per value of ``series``, as PNG bytes.

    ``y`` is a row label; ``{key}`` in it is replaced by each configuration's value of that parameter."""
    keys = res.spec.keys
    for k, what in ((x, "--x"), (series, "--series")):
        if k is not None and k not in keys:
            raise SdbenchError(f"{what} {k!r} is not a grid key of sweep {res.spec.name} ({', '.join(keys)})")
    if series == x:
        raise SdbenchError("--x and --series must be different grid keys")
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(dict(res.spec.grid)[x])
    groups: dict[str, dict[int, list[float]]] = {}
    unit = ""
    found = 0
    for p, rec in zip(res.params, res.records):
        label = fill_label(y, p)
        row = next((r for r in rec.rows if r.label == label), None)
        if row is None:
            continue
        found += 1
        unit = row.unit
        name = _key_text(p[series]) if series else y
        groups.setdefault(name, {}).setdefault(xs.index(p[x]), []).append(row.reported_value)
    if not found:
        raise SdbenchError(f"--y {y!r}: no configuration has a row with that label")
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for name, pts in groups.items():
        idx = sorted(pts)
        ax.plot(idx, [sum(pts[i]) / len(pts[i]) for i in idx], marker="o", label=f"{series}={name}" if series else name)
    ax.set_xticks(range(len(xs)), [_key_text(v) for v in xs])
    ax.set_xlabel(x)
    ax.set_ylabel(f"{y} ({unit})" if unit else y)
    ax.set_title(f"sweep {res.spec.name}: {res.spec.base}")
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=0)
    if series or len(groups) > 1:
        ax.legend(fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def results_json(res: SweepResult) -> str:
    doc = Results(runs=res.records).to_dict()
    doc["sweep"] = {"id": res.sweep_id, "name": res.spec.name, "base": res.spec.base,
                    "grid": {k: list(v) for k, v in res.spec.grid}, "fixed": dict(res.spec.fixed)}
    return json.dumps(doc, indent=2) + "\n"


def save(res: SweepResult, db: str | Path | None) -> list[int] | None:
    """Store every record with the sweep id; None when this sdbench has no results store."""
    try:
        from .store import open_store
    except ImportError:
        return None
    store = open_store(db)
    try:
        return store.save_many(res.records, sweep_id=res.sweep_id)
    finally:
        store.close()

