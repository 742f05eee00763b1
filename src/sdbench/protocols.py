"""Run a scenario's protocol over its built stack and make a RunRecord."""
from __future__ import annotations

import datetime as _dt
import platform
from collections.abc import Callable

from . import __version__
from .records import Row, RunRecord
from .runner import Context, WallProgress
from .scenarios import Scenario
from .stack import Built
from .workloads.registry import protocol

UNSTABLE_CV = 0.10  # coefficient of variation above which a wall-clock row is flagged


def stability_warnings(rows: list[Row]) -> list[str]:
    out = []
    for r in rows:
        if r.runs >= 2 and r.time_ms > 0 and r.time_ms_stdev / r.time_ms > UNSTABLE_CV:
            out.append(f"{r.label}: unstable (stdev {r.time_ms_stdev / r.time_ms:.0%} of the mean over {r.runs} "
                       "runs); use more runs or a quieter machine")
    return out


def run_scenario(sc: Scenario, *, progress: bool = False, listeners: tuple = (),
                 on_row: Callable[[Row], None] | None = None,
                 on_built: Callable[[Built], None] | None = None) -> RunRecord:
    spec = protocol(sc.protocol)
    built = sc.build()
    try:
        # refuse what cannot fit before the run begins (before on_built, so a refused run is never stored)
        spec.preflight(sc, built)
        if on_built is not None:
            on_built(built)
    except BaseException:
        built.discard()
        raise
    try:
        bar = WallProgress(spec.timed_calls(sc), sc.name, enabled=progress)
        ctx = Context(built.clock, tuple(listeners), bar)
        rows: list[Row] = []
        try:
            for row in spec.run(sc, built, ctx):
                rows.append(row)
                if on_row is not None:
                    on_row(row)
        finally:
            bar.close()
    finally:
        built.close()
    simulated = built.clock.kind == "virtual"
    warnings = [*built.warnings, *([] if simulated else stability_warnings(rows))]
    extra = spec.summarise(rows, built) if spec.summarise is not None else {}
    extra.update(built.metadata)
    meta = {"sdbench_version": __version__, "host": platform.node(), "python": platform.python_version(),
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **extra}
    if simulated:
        meta.pop("created_utc")  # simulated records are byte-identical for the same scenario and seed
        meta.pop("host")
        meta.pop("python")
    return RunRecord(scenario=sc.name, stack=built.stack, clock=built.clock.kind, rows=tuple(rows), seed=sc.seed,
                     protocol=sc.protocol, source="simulated" if simulated else "measured", metadata=meta,
                     warnings=tuple(warnings))
