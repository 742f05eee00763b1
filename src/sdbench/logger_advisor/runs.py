"""The runs behind a decision table, on the process pool: a short pilot per configuration (does the writer keep
up?), then the full log, the range members over the card population (or the fit) and the power cuts."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import population
from ..errors import SdbenchError
from ..parallel import run_pool
from ..powerloss import Cell, log_replay, run_cell
from ..protocols import run_scenario
from ..records import RunRecord
from ..scenarios import load
from .question import PILOT_S, Config, Question, Stack


def figures(meta: dict[str, Any]) -> dict[str, float]:
    """The figures a decision reads from one logger run's metadata."""
    call = meta.get("call_latency_ms") or {}
    dist = (meta.get("buffer") or {}).get("distribution") or {}
    wear = meta.get("wear") or {}
    return {"stall_p99_ms": call.get("p99_ms", 0.0), "stall_p99_9_ms": call.get("p99_9_ms", 0.0),
            "stall_max_ms": call.get("max_ms", 0.0), "buffer_p99_bytes": dist.get("p99_bytes", 0),
            "buffer_p99_9_bytes": dist.get("p99_9_bytes", 0), "buffer_max_bytes": meta["buffer"]["needed_bytes"],
            "records_lost": meta["buffer"]["records_lost"], "busy_pct": meta["writer_busy_pct"],
            "lag_s": meta.get("lag_s", 0.0), "write_amplification": wear.get("write_amplification", 0.0)}


@dataclass(frozen=True)
class Job:
    index: int
    kind: str                        # "pilot", "central", "member", "powerloss"
    config: int                      # index into the configurations
    base: str
    overrides: tuple[str, ...]
    member: population.Member | None = None
    cuts: int = 0
    seed: int = 1


def _run_job(job: Job) -> tuple[int, Any]:
    """One job in a worker process; an SdbenchError comes back as the result (the caller says which failed)."""
    try:
        sc = load(job.base, list(job.overrides))
        if job.kind == "powerloss":
            cfg = sc.options["logger"]
            fs = cfg.part.split("_", 1)[1].replace("fatfs", "fat")
            cache = (sc.cache_config().write_mode if sc.cache_config() is not None else "none") if sc.sd else "none"
            return job.index, run_cell(sc, Cell(fs, cache), log_replay(sc, job.cuts, job.seed)).to_dict(job.seed)
        if job.member is not None:
            sc = population.member_scenario(sc, job.member)
        rec = run_scenario(sc)
        if job.kind == "member":
            return job.index, figures(rec.metadata["logger"])
        return job.index, rec.to_dict()
    except SdbenchError as e:
        return job.index, e


@dataclass
class Outcome:
    """What the runs gave for one configuration."""

    config: Config
    record: RunRecord | None = None
    pilot_only: bool = False          # the writer did not keep up in the pilot: the pilot is the run
    members: list[dict[str, float]] = field(default_factory=list)
    member_names: list[str] = field(default_factory=list)
    failed_members: list[str] = field(default_factory=list)
    powerloss: dict[str, Any] | None = None
    error: str = ""


@dataclass(frozen=True)
class Members:
    """Who the range is taken over (population.plan and its budget, as `sdbench run` chooses them)."""

    method: str
    chosen: tuple[population.Member, ...]
    band: tuple[float, float]
    planned: int
    reason: str = ""
    card: str = ""


def choose_members(sc: Any, want: int) -> Members:
    pl = population.plan(sc, simulated=True)
    if not pl.members:
        return Members(pl.method, (), population.PERCENTILES, 0, pl.reason)
    k = want or population.budget(sc, len(pl.members))[1]
    few = k < len(pl.members) // 2 and bool(pl.extremes)
    chosen = pl.extremes if few else population.select(pl.members, k)
    band = (0.0, 100.0) if few else population.PERCENTILES
    return Members(pl.method, tuple(chosen), band, len(pl.members), card=pl.card)


def run_all(q: Question, stack: Stack, configs: list[Config], length: tuple[str, ...], duration_s: float,
            members: Members, *, workers: int, progress: Callable[[str], None]) -> list[Outcome]:
    """Pilots first, then for each configuration its full log (``length``: the overrides that make it
    ``duration_s`` long; the pilot when the writer did not keep up), its members and its power cuts, longest
    first so that the workers stay busy."""
    out = [Outcome(c) for c in configs]
    pilot_len = (f"logger.duration_s={PILOT_S!r}",)
    pilot_needed = duration_s > PILOT_S
    done_count = [0]

    def tick(total: int, label: Callable[[int], str]) -> Callable[[int, Any], None]:
        def done(i: int, res: Any) -> None:
            done_count[0] += 1
            progress(f"[{done_count[0]}/{total}] {label(i)}" + (f": {res}" if isinstance(res, SdbenchError) else ""))
        return done

    pilots: dict[int, dict[str, Any] | SdbenchError] = {}
    if pilot_needed:
        jobs = [Job(i, "pilot", i, stack.base, (*stack.overrides, *c.overrides, *length, *pilot_len))
                for i, c in enumerate(configs)]
        progress(f"pilot: {len(jobs)} configurations, {PILOT_S:g} s of log each (does the writer keep up?)")
        done_count[0] = 0
        pilots = run_pool(jobs, min(workers, len(jobs)), tick(len(jobs), lambda i: f"pilot {configs[i].name}"),
                          _run_job)
    jobs: list[Job] = []
    for i, c in enumerate(configs):
        base_over = (*stack.overrides, *c.overrides, *length)
        p = pilots.get(i)
        if isinstance(p, SdbenchError):
            out[i].error = str(p)
            continue
        behind = p is not None and RunRecord.from_dict(p).metadata["logger"]["throughput_margin_x"] < 1.0
        run_over = (*base_over, *pilot_len) if behind else base_over
        if behind:
            out[i].pilot_only = True
            out[i].record = RunRecord.from_dict(p)   # type: ignore[arg-type]
        else:
            jobs.append(Job(len(jobs), "central", i, stack.base, run_over))
        for m in members.chosen:
            jobs.append(Job(len(jobs), "member", i, stack.base, run_over, member=m))
        if q.cuts:
            jobs.append(Job(len(jobs), "powerloss", i, stack.base, base_over, cuts=q.cuts, seed=q.seed))
    rank = {"powerloss": 0, "central": 1, "member": 2}
    order = sorted(jobs, key=lambda j: (rank[j.kind], out[j.config].pilot_only))
    progress(f"runs: {len(jobs)} (full logs, {len(members.chosen)} range members each, power cuts) on "
             f"{min(workers, max(len(jobs), 1))} processes")
    done_count[0] = 0
    got = run_pool(order, min(workers, max(len(order), 1)),
                   tick(len(order), lambda i: f"{jobs[i].kind} {configs[jobs[i].config].name}"), _run_job) \
        if order else {}
    for j in jobs:
        res = got[j.index]
        o = out[j.config]
        if j.kind == "member":
            name = j.member.name if j.member is not None else "?"
            if isinstance(res, SdbenchError):
                o.failed_members.append(f"{name}: {res}")
            else:
                o.members.append(res)
                o.member_names.append(name)
        elif isinstance(res, SdbenchError):
            o.error = o.error or f"{j.kind}: {res}"
        elif j.kind == "central":
            o.record = RunRecord.from_dict(res)
        else:
            o.powerloss = res
    return out


def band_of(central: float, values: list[float], band: tuple[float, float]) -> list[float] | None:
    """The members' band of a figure, widened to hold the central figure (None with fewer than two members)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if len(vals) < 2:
        return None
    lo, hi = population.percentile(vals, band[0]), population.percentile(vals, band[1])
    return [min(lo, central), max(hi, central)]
