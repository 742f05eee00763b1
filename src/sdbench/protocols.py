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
from .stack.cardpop import card_population
from .errors import SdbenchError
from .ledger import Recording, compact
from .options import to_mapping
from .repricing import ReplayMismatch, member_unpriceable, replayed_rows
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
                 workers: int = 1, recording: Recording | None = None, structural: bool = True) -> RunRecord:
    """Run ``sc``; ``on_built`` is called once the stack is built and checked, ``on_row`` with each finished row
    (without its range: ranges come once the whole run is done, in the returned record).

    ``ranges``: give simulated rows ``time_ms_range`` and say in ``metadata["range"]`` what it spans or why
    there is none (see :mod:`sdbench.population`); the central figures are the same either way.  The range's
    runs are independent and go to ``workers`` processes; the record does not depend on how many.

    ``recording`` (without ranges): a :class:`sdbench.ledger.Recording` the run fills, to re-price it at other
    parameters later (sdbench.repricing).  ``structural=False``: the ranges hold the parameters' spread only,
    without the structural error (cross-validation measures that).
    """
    if ranges:
        recording = Recording() if _ranges_may_run_in_full(sc) else None
    loaded: list[tuple[Any, ...]] = []
    rec = _run_once(sc, progress=progress, listeners=listeners, on_row=on_row, on_built=on_built,
                    recording=recording, loaded_out=loaded)
    if not ranges:
        return rec
    return with_ranges(sc, rec, workers=workers, recording=recording, structural=structural,
                       profiles_=loaded[0] if loaded else None, progress=progress)


def _ranges_may_run_in_full(sc: Scenario) -> bool:
    """Whether the range of ``sc`` may take its members at the full runs (a protocol with few runs): then its
    central run is recorded for re-pricing rather than run again at the same runs.  Told from the budget alone
    (a fit's members or the card population's), before any profile is loaded."""
    spec = protocol(sc.protocol)
    if sc.clock_kind() != "virtual" or (spec.paced is not None and spec.paced(sc)):
        return False
    try:
        sizes = {population.FIT_MEMBERS, len(card_population().cards)}
        full = population.runs_of(sc)
        return any(population.budget(sc, n)[0] == full for n in sizes)
    except SdbenchError:
        return False


def run_scenarios(scs: list[Scenario], *, workers: int, ranges: bool = False, structural: bool = True,
                  done: Callable[[int, Any], None] | None = None, progress: bool = False) -> list[Any]:
    """Run simulated scenarios side by side in ``workers`` processes; each record depends only on its scenario
    and seed, never on the worker.  Returns, in the order given, each RunRecord or the SdbenchError that
    refused or failed it; ``done(index, result)`` as each finishes.  ``ranges``, ``structural``: as for
    :func:`run_scenario`.

    With one worker (or one scenario) they run here, one after another, up to the first that fails: the list
    then ends with its error; ``progress``: each one's range bar, as :func:`run_scenario` shows it."""
    if workers <= 1 or len(scs) <= 1:
        here: list[Any] = []
        for i, sc in enumerate(scs):
            try:
                here.append(run_scenario(sc, ranges=ranges, structural=structural, progress=progress))
            except SdbenchError as e:
                here.append(e)
            if done is not None:
                done(i, here[-1])
            if isinstance(here[-1], SdbenchError):
                break
        return here
    # spare workers (more than scenarios) take the scenarios' range runs
    inner = max(1, workers // max(1, len(scs))) if ranges else 1
    jobs = [(i, sc, ranges, inner, structural) for i, sc in enumerate(scs)]
    out = run_pool(jobs, min(workers, len(scs)), done or (lambda i, res: None), _scenario_job)
    return [out[i] for i in range(len(scs))]


def _rows_job(job: tuple[int, Scenario]) -> tuple[int, Any]:
    i, sc = job
    try:
        return i, _run_once(sc).rows
    except SdbenchError as e:
        return i, e


def _scenario_job(job: tuple[int, Scenario, bool, int, bool]) -> tuple[int, Any]:
    i, sc, ranges, workers, structural = job
    try:
        return i, run_scenario(sc, ranges=ranges, workers=workers, structural=structural)
    except SdbenchError as e:
        return i, e


def _run_once(sc: Scenario, *, progress: bool = False, listeners: tuple = (),
              on_row: Callable[[Row], None] | None = None,
              on_built: Callable[[Built], None] | None = None, recording: Recording | None = None,
              loaded_out: list[tuple[Any, ...]] | None = None) -> RunRecord:
    """One run of ``sc``; ``recording``: what its driver models were asked and what was charged above them
    (sdbench.ledger), for re-pricing; ``loaded_out`` receives the stack's profiles as the build loaded them
    (``Built.profiles``), for the range."""
    spec = protocol(sc.protocol)
    built = sc.build(recording)
    if loaded_out is not None:
        loaded_out.append(built.profiles)
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
    if simulated and ctx.ledger:
        # where each row's time went, by the profile parameter it comes from (ms per call; sdbench.ledger)
        extra["ledger"] = {label: compact(v) for label, v in ctx.ledger.items()}
    meta = {"sdbench_version": __version__, "host": platform.node(), "python": platform.python_version(),
            "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **extra}
    if simulated:
        meta.pop("created_utc")  # simulated records are byte-identical for the same scenario and seed
        meta.pop("host")
        meta.pop("python")
    # the protocol's options belong to what was measured (docs/results-format.md): a --set of one tells runs apart
    stack = {**built.stack, **{t: to_mapping(o) for t, o in sc.options.items() if t not in built.stack}}
    return RunRecord(scenario=sc.name, stack=stack, clock=built.clock.kind, rows=tuple(rows), seed=sc.seed,
                     protocol=sc.protocol, source="simulated" if simulated else "measured", metadata=meta,
                     warnings=tuple(warnings))


def with_ranges(sc: Scenario, rec: RunRecord, *, workers: int = 1, recording: Recording | None = None,
                structural: bool = True, profiles_: tuple[Any, ...] | None = None,
                progress: bool = False) -> RunRecord:
    """``rec`` (the full run of ``sc``) with the range of each simulated row and ``metadata["range"]``: the
    parameters' spread (:func:`_param_ranges`) widened by the structural error `sdbench calibrate
    --model-error` recorded for what is uncalibrated in the stack (:func:`sdbench.population.structural_error`,
    :func:`sdbench.population.widen`; not with ``structural=False``).  ``recording``: of the run that made
    ``rec`` (sdbench.ledger), when there is one, to re-price the members from at the full runs; ``profiles_``:
    the stack's profiles as that run loaded them (else they are loaded again); ``progress``: a bar for the
    members that run."""
    out = _param_ranges(sc, rec, workers, recording, profiles_, progress)
    if rec.clock != "virtual" or not structural:
        return out
    klass = out.metadata.get("range", {}).get("structural_class", "neither")
    log_sd, z, source = population.structural_error(klass)
    if not log_sd:
        return out
    info = dict(out.metadata.get("range", {}))
    info["model_log_sd"] = log_sd
    info["model_z"] = z
    info["structural"] = {"class": klass, "measured_on": source}
    if info.get("method") == "none":
        info["method"] = "model-error"
    return replace(out, rows=population.widen(out.rows, log_sd, z),
                   metadata={**out.metadata, "range": info})


def _member_rows(reduced: Scenario, runs_reduced: bool, full_rows: tuple[Row, ...], members: tuple[Any, ...],
                 workers: int, full_recording: Recording | None,
                 progress: bool = False) -> tuple[Any, list[Any], dict[str, Any]]:
    """The central scenario's rows at the reduced runs (or the SdbenchError that stopped it), each member's rows
    (or its SdbenchError), and how they were made (the range's ``pricing`` metadata).

    The reduced central run is recorded (sdbench.ledger; at the full runs, ``full_recording`` is the central
    run's own); when the recording can be re-priced, each member is re-priced from it (sdbench.repricing);
    otherwise, and for a member that changes what the layers above the drivers read, the member runs."""
    spec = protocol(reduced.protocol)
    why = spec.paced(reduced) if spec.paced is not None else ""
    rec: Recording | None = None
    central: Any = None
    if not why:
        if runs_reduced:
            rec = Recording()
            try:
                central = _run_once(reduced, recording=rec).rows
            except SdbenchError as e:
                return e, [], {"method": "none"}
        elif full_recording is not None:
            rec, central = full_recording, full_rows
        else:
            why = "the central run was not recorded"
        if rec is not None and not rec.repriceable:
            why = rec.reasons[0]
    results: list[Any] = [None] * len(members)
    rerun: list[int] = []
    reasons: list[str] = []
    for i, m in enumerate(members):
        reason = why or member_unpriceable(m.overrides)
        if not reason:
            try:
                results[i] = replayed_rows(population.member_scenario(reduced, m), rec, central)
                continue
            except ReplayMismatch as e:
                reason = str(e)
            except SdbenchError as e:  # a profile value the model refuses: as a run would be
                results[i] = e
                continue
        rerun.append(i)
        if reason not in reasons:
            reasons.append(reason)
    scs = [reduced] if central is None and runs_reduced else []
    scs += [population.member_scenario(reduced, members[i]) for i in rerun]
    if scs:
        with Progress(len(scs), f"{reduced.name}: range", enabled=progress, unit="runs") as bar:
            ran = run_pool(list(enumerate(scs)), min(workers, len(scs)), lambda i, res: bar.advance(), _rows_job)
        out = [ran[i] for i in range(len(scs))]
        if central is None and runs_reduced:
            central = out.pop(0)
        for i, res in zip(rerun, out):
            results[i] = res
    if central is None:
        central = full_rows
    pricing: dict[str, Any] = {"re-priced": len(members) - len(rerun), "re-run": len(rerun)}
    if reasons:
        pricing["re-run because"] = reasons[0]
    return central, results, pricing


def _param_ranges(sc: Scenario, rec: RunRecord, workers: int = 1, recording: Recording | None = None,
                  profiles_: tuple[Any, ...] | None = None, progress: bool = False) -> RunRecord:
    """``rec`` with the range of each simulated row from its parameters' spread and ``metadata["range"]``.

    The central figures stay as they are.  The central scenario and every member then run with the protocol's
    runs option reduced (:func:`sdbench.population.budget`), and each row's range is the central figure times
    the 10th and 90th percentile of member / central at those reduced runs (:func:`sdbench.population.ranges`).
    A member that cannot run (a profile value the model refuses) is left out and named in the metadata.
    """
    lo_p, hi_p = population.PERCENTILES
    pl = population.plan(sc, simulated=rec.clock == "virtual", profiles_=profiles_)
    info: dict[str, Any] = {"method": pl.method, "percentiles": [lo_p, hi_p], "structural_class": pl.structural_class}
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
    central_res, results, pricing = _member_rows(reduced, runs != full_runs, rec.rows, members, workers,
                                                 None if runs != full_runs else recording, progress)
    info["pricing"] = pricing
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
