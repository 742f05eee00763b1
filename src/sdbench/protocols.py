"""Run a scenario's protocol over its built stack and make a RunRecord."""
from __future__ import annotations

import datetime as _dt
import platform
from collections.abc import Callable, Iterator

from . import __version__
from .records import Row, RunRecord
from .runner import Context, WallProgress
from .scenarios import Built, Scenario
from .errors import ConfigError
from .workloads import espidf, fstests, p2, rawseq, usbmsc

def _run_p2(sc: Scenario, b: Built, ctx: Context) -> Iterator[Row]:
    return p2.run(_sd(sc, b), lambda: b.target.make_fs("sd_fatfs"), sc.p2, ctx, seed=sc.seed)


#: protocol name -> (rows generator, number of timed calls)
PROTOCOL_RUNNERS: dict[str, tuple[Callable[[Scenario, Built, Context], Iterator[Row]], Callable[[Scenario], int]]] = {
    "espidf": (lambda sc, b, ctx: espidf.run(b.target, sc.espidf, ctx, seed=sc.seed),
               lambda sc: sc.espidf.timed_calls()),
    "p2": (_run_p2, lambda sc: 8 * sc.p2.runs),
    "raw": (lambda sc, b, ctx: rawseq.run(_sd(sc, b), sc.raw_seq, ctx, seed=sc.seed),
            lambda sc: 2 * sc.raw_seq.passes * (sc.raw_seq.total_bytes // sc.raw_seq.chunk_bytes)),
    "fs_tests": (fstests.run, fstests.timed_calls),
    "usbmsc": (usbmsc.run, usbmsc.timed_calls),
}


def _sd(sc: Scenario, b: Built):
    if b.target.sd_device is None:
        raise ConfigError(f"scenario {sc.name}: protocol {sc.protocol} needs an [sd] device")
    return b.target.sd_device


#: the field ``--runs`` sets, per protocol
RUNS_OVERRIDE = {"espidf": "espidf.runs", "p2": "p2.runs", "raw": "raw.passes", "fs_tests": "fs_tests.repeats",
                 "usbmsc": "usbmsc.passes"}

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
    built = sc.build()
    if on_built is not None:
        on_built(built)
    try:
        gen, count = PROTOCOL_RUNNERS[sc.protocol]
        bar = WallProgress(count(sc), sc.name, enabled=progress)
        ctx = Context(built.clock, tuple(listeners), bar)
        rows: list[Row] = []
        try:
            for row in gen(sc, built, ctx):
                rows.append(row)
                if on_row is not None:
                    on_row(row)
        finally:
            bar.close()
    finally:
        built.close()
    simulated = built.clock.kind == "virtual"
    warnings = [] if simulated else stability_warnings(rows)
    extra = {}
    if sc.protocol == "p2":
        bus = built.stack.get("sd", {}).get("bus", {})
        extra["p2_summary"] = p2.summary(rows, float(bus.get("clock_hz", 25_000_000)))
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
