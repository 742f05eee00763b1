"""Run a scenario's protocol over its built stack and make a RunRecord.

With ``ranges=True`` a simulated run's rows also get ``time_ms_range``: the
10th-90th percentile over the card population or the fit's uncertainty
(:mod:`sdbench.population` says which members and how the range is taken).
The central run is the scenario as it is, in full; the members (and the
central once more) run afterwards with their runs option reduced.
"""
from __future__ import annotations

import datetime as _dt
import platform
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from . import __version__, population
from .errors import SdbenchError
from .parallel import run_pool
from .records import Row, RunRecord
from .progress import Progress
from .runner import Context
from .scenarios import Scenario
from .stack import Built
from .workloads.registry import protocol

UNSTABLE_CV = 0.10  # coefficient of variation above which a wall-clock row is flagged


def stability_warnings(rows: list[Row]) -> list[str]:
    """One line for the wall-clock rows whose stdev is above UNSTABLE_CV of their mean (each row's stdev is in
    its table), naming the worst."""
    cv = {r.label: (r.time_ms_stdev / r.time_ms, r.runs) for r in rows
          if r.runs >= 2 and r.time_ms > 0 and r.time_ms_stdev / r.time_ms > UNSTABLE_CV}
    if not cv:
        return []
    worst = max(cv, key=lambda k: cv[k][0])
    which = f"{len(cv)} of {len(rows)} rows are" if len(cv) > 1 else "1 row is"
    return [f"{which} unstable (stdev above {UNSTABLE_CV:.0%} of the mean; worst: {worst}, "
            f"{cv[worst][0]:.0%} over {cv[worst][1]} runs); use more runs or a quieter machine"]


def run_scenario(sc: Scenario, *, progress: bool = False, listeners: tuple = (),
                 on_row: Callable[[Row], None] | None = None,
                 on_built: Callable[[Built], None] | None = None, ranges: bool = False,
                 workers: int = 1) -> RunRecord:
    """Run ``sc``; ``on_built`` is called once the stack is built and checked, ``on_row`` with each finished row
    (without its range: ranges come once the whole run is done, in the returned record).

    ``ranges``: give simulated rows ``time_ms_range`` and say in ``metadata["range"]`` what it spans or why
    there is none (see :mod:`sdbench.population`); the central figures are the same either way.  The range's
    runs are independent and go to ``workers`` processes; the record does not depend on how many.
    """
    rec = _run_once(sc, progress=progress, listeners=listeners, on_row=on_row, on_built=on_built)
    return with_ranges(sc, rec, workers=workers, progress=progress) if ranges else rec


def run_scenarios(scs: list[Scenario], *, workers: int, ranges: bool = False,
                  done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """Run simulated scenarios side by side in ``workers`` processes; each record depends only on its scenario
    and seed, never on the worker.  Returns, in the order given, each RunRecord or the SdbenchError that
    refused or failed it; ``done(index, result)`` as each finishes."""
    # spare workers (more than scenarios) take the scenarios' range runs
    inner = max(1, workers // max(1, len(scs))) if ranges else 1
    jobs = [(i, sc, ranges, inner) for i, sc in enumerate(scs)]
    out = run_pool(jobs, min(workers, len(scs)), done or (lambda i, res: None), _scenario_job)
    return [out[i] for i in range(len(scs))]


def _rows_job(job: tuple[int, Scenario]) -> tuple[int, Any]:
    i, sc = job
    try:
        return i, _run_once(sc).rows
    except SdbenchError as e:
        return i, e


def _scenario_job(job: tuple[int, Scenario, bool, int]) -> tuple[int, Any]:
    i, sc, ranges, workers = job
    try:
        return i, run_scenario(sc, ranges=ranges, workers=workers)
    except SdbenchError as e:
        return i, e


def _run_once(sc: Scenario, *, progress: bool = False, listeners: tuple = (),
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
        bar = Progress(spec.timed_calls(sc), sc.name, enabled=progress, unit="calls")
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


def with_ranges(sc: Scenario, rec: RunRecord, *, workers: int = 1, progress: bool = False) -> RunRecord:
    """``rec`` (the full run of ``sc``) with the range of each simulated row and ``metadata["range"]``: the
    parameters' spread (:func:`_param_ranges`) widened by the model error `sdbench calibrate` recorded
    (:func:`sdbench.population.widen`)."""
    out = _param_ranges(sc, rec, workers, progress)
    log_sd = population.model_error()
    if rec.clock != "virtual" or not log_sd:
        return out
    info = dict(out.metadata.get("range", {}))
    z = population.model_error_z()
    info["model_log_sd"] = log_sd
    info["model_z"] = z
    if info.get("method") == "none":
        info["method"] = "model-error"
    return replace(out, rows=population.widen(out.rows, log_sd, z),
                   metadata={**out.metadata, "range": info})


def _param_ranges(sc: Scenario, rec: RunRecord, workers: int = 1, progress: bool = False) -> RunRecord:
    """``rec`` with the range of each simulated row from its parameters' spread and ``metadata["range"]``.

    The central figures stay as they are.  The central scenario and every member then run with the protocol's
    runs option reduced (:func:`sdbench.population.budget`), and each row's range is the central figure times
    the 10th and 90th percentile of member / central at those reduced runs (:func:`sdbench.population.ranges`).
    A member that cannot run (a profile value the model refuses) is left out and named in the metadata.
    """
    lo_p, hi_p = population.PERCENTILES
    pl = population.plan(sc, simulated=rec.clock == "virtual")
    info: dict[str, Any] = {"method": pl.method, "percentiles": [lo_p, hi_p]}
    if not pl.members:
        info["reason"] = pl.reason
        return replace(rec, metadata={**rec.metadata, "range": info})
    spec = protocol(sc.protocol)
    full_runs = population.runs_of(sc)
    runs, k = population.budget(sc, len(pl.members))
    band = population.PERCENTILES
    if k < len(pl.members) // 2 and pl.extremes:
        # too few draws for a percentile: a fit's two extremes, each field at its 10th or 90th percentile
        members, band = pl.extremes, (0, 100)
    else:
        members = population.select(pl.members, k)
    reduced = population.with_runs(sc, runs)
    # the central scenario at the reduced runs (unless that is the full run) and every member: independent runs
    scs = [reduced] if runs != full_runs else []
    scs += [population.member_scenario(reduced, m) for m in members]
    with Progress(len(scs), f"{sc.name}: range", enabled=progress, unit="runs") as bar:
        ran = run_pool(list(enumerate(scs)), min(workers, len(scs)), lambda i, res: bar.advance(), _rows_job)
    results = [ran[i] for i in range(len(scs))]
    central_res = results.pop(0) if runs != full_runs else rec.rows
    if isinstance(central_res, SdbenchError):
        info.update(method="none", reason=f"the central scenario does not run with {spec.runs_option} = {runs}: "
                                          f"{central_res}")
        return replace(rec, metadata={**rec.metadata, "range": info})
    central = central_res
    member_rows: list[tuple[Row, ...]] = []
    used: list[str] = []
    failed: list[str] = []
    for m, res in zip(members, results):
        if isinstance(res, SdbenchError):
            failed.append(f"{m.name}: {res}")
        else:
            member_rows.append(res)
            used.append(m.name)
    warnings: list[str] = []
    if failed:
        info["failed"] = failed
        warnings.append(f"range: {len(failed)} of {len(members)} members could not run and are left out "
                        f"({failed[0]})")
    if len(used) < 2:
        info.update(method="none", reason=f"fewer than two of the {len(members)} members ran")
        return replace(rec, warnings=(*rec.warnings, *warnings), metadata={**rec.metadata, "range": info})
    got = population.ranges(rec.rows, central, member_rows, band)
    info.update({"members": len(used), "runs": {"option": spec.runs_option, "central": full_runs, "members": runs},
                 "rows": sum(r.time_ms_range is not None for r in got.rows)})
    if len(members) < len(pl.members):
        info["budget_limited"] = True  # fewer members than planned: the protocol's runs cannot be cut enough
    if pl.method == "population":
        info.update({"card": pl.card, "population": list(pl.population), "cards": used,
                     "fields": list(pl.fields)})
        warnings.insert(0, population.describe(pl, len(used), len(members)))
        for side, word in (("optimistic", "faster"), ("pessimistic", "slower")):
            labels = [label for label, s in got.outside.items() if s == side]
            if labels:
                warnings.append(f"card profile {pl.card} is more {side} than the population on {len(labels)} of "
                                f"{len(got.rows)} rows ({word} than its {lo_p}–{hi_p} % band, e.g. "
                                f"'{labels[0]}'): those ranges are widened to include it")
    else:
        info["draws"] = used
        if band != population.PERCENTILES:
            warnings.insert(0, population.describe(pl, len(used), len(members)))
    if pl.varied:
        info["fit_rel_sd"] = {name: dict(v) for name, v in pl.varied.items()}
    if pl.held:
        # the card's fields held at the population's value: the span of the fitted cards' values the draws took
        info["population_fields"] = {f: [v[0], v[-1]] for f, v in pl.held.items()}
    return replace(rec, rows=got.rows, warnings=(*rec.warnings, *warnings),
                   metadata={**rec.metadata, "range": info})
