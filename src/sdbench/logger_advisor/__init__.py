"""The data-logger question in one command (``sdbench logger``): which filesystem, cache and sync policy, how much
RAM for the record buffer, what a power cut loses, how long the medium lasts.

For every configuration (filesystem x block cache x sync policy) on the stack asked about, the logger protocol
runs (:mod:`sdbench.workloads.logger`):

1. a **pilot** of :data:`~.question.PILOT_S` s of log: a writer busy 100 % of the time or more does not keep up,
   and its pilot is its run (the buffer it would need grows without bound: the table gives the rate);
2. the **full log**, long enough for the medium (:func:`~.question.run_length`: three allocation units of an SD
   card, whose merges cause the longest stalls; the filesystem's capacity once on SPI flash, through a ring of
   files); a length the user gives that is shorter is said to be too short;
3. the **range members**: the card population for an uncalibrated card, or the fit's draws
   (:func:`sdbench.population.plan`, chosen within the same time budget as ``sdbench run``), each the same log;
   every stall and buffer figure gets the 10–90 % band of the members (their span with two members),
   widened to hold the central figure;
4. the **power cuts**: the same log, cache and sync policy cut at >= 200 points
   (:func:`sdbench.powerloss.cell.run_cell` with the logger workload);
5. **wear**: bytes the medium programs per byte logged (NAND bytes of the card's FTL, NOR bytes programmed and
   sector erases) and the time until a stated endurance is used (given, the chip profile's, or an estimate
   for an SD card that states none).

All runs go to the process pool (:func:`sdbench.parallel.run_pool`); every figure is deterministic for a seed.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import ConfigError
from ..workloads.registry import fs_capacity, protocol
from .answer import config_result, markdown, recommend, table
from .question import (DEFAULT_SCENARIO, PILOT_S, Config, Question, RunLength, Stack, configurations,
                       endurance_of, medium_of, run_length, sync_name)
from .runs import Outcome, choose_members, run_all

__all__ = ["DEFAULT_SCENARIO", "Question", "Stack", "advise", "check", "markdown", "medium_of", "table"]


def check(q: Question, stack: Stack) -> tuple[list[Config], RunLength, Any]:
    """Everything refused before any run: each configuration loads, builds and fits its medium.  Returns the
    configurations, the run length and the first configuration's scenario."""
    configs = configurations(q, stack)
    caps = []
    first = None
    for c in configs:
        with _named(c):
            sc = stack.load(c.overrides)
            first = first or sc
            built = sc.build()
            try:
                caps.append(fs_capacity(sc, built)(sc.options["logger"].part))
            finally:
                built.close()
    known = [c for c in caps if c is not None]
    length = run_length(q, stack, first, min(known) if known else None)
    for c in configs:   # the log as it will run: preflight of every configuration
        with _named(c):
            sc = stack.load((*c.overrides, *_length_overrides(length)))
            built = sc.build()
            try:
                protocol("logger").preflight(sc, built)
            finally:
                built.close()
    return configs, length, first


@contextmanager
def _named(c: Config) -> Iterator[None]:
    """A configuration's refusal says which configuration it was, and how to leave it out."""
    try:
        yield
    except ConfigError as e:
        raise ConfigError(f"configuration {c.name}: {e} (--fs, --cache and --sync choose the configurations "
                          f"compared)") from None


def _length_overrides(length: RunLength) -> tuple[str, ...]:
    out = [f"logger.duration_s={length.duration_s!r}"]
    if length.rotate_bytes:
        out += [f"logger.rotate_bytes={length.rotate_bytes}", f"logger.keep_files={length.keep_files}"]
    return tuple(out)


def advise(q: Question, stack: Stack, *, workers: int, progress: Callable[[str], None]) -> tuple[dict[str, Any],
                                                                                                 list[Outcome]]:
    """Run every configuration and answer: the JSON document of the decision and the outcomes (records).  Every
    refusal (:func:`check`) comes before any run and any progress line."""
    configs, length, first = check(q, stack)
    members = choose_members(first, q.members)
    chip = None
    if stack.medium == "flash":
        _, fcfg = first.media_config("flash")
        from ..media.sim.nor import load_chip_profile

        chip = load_chip_profile(fcfg.chip, fcfg.chip_params or None).endurance_cycles
    endurance = endurance_of(q, stack.medium, chip)
    outcomes = run_all(q, stack, configs, _length_overrides(length), length.duration_s, members, workers=workers,
                       progress=progress)
    rows = [config_result(o, members, endurance, q.ram_bytes) for o in outcomes]
    if not any("figures" in d for d in rows):
        raise ConfigError(f"no configuration ran ({rows[0].get('error', '')})")
    notes = _notes(q, stack, length, members, endurance, rows)
    if members.method == "population":
        notes.append(_merge_note(first, members))
    doc = {"question": {**{k: getattr(q, k) for k in ("record_bytes", "rate_hz", "jitter_ms", "ram_bytes", "cuts",
                                                      "seed")},
                        "syncs": [sync_name(s) for s in q.syncs]},
           "stack": {"scenario": first.name, "base": stack.base, "overrides": list(stack.overrides),
                     "medium": stack.medium, "description": stack.load().description,
                     "stack": _stack_summary(first)},
           "run": {"duration_s": length.duration_s, "why": length.why, "too_short": length.short,
                   "rotate_bytes": length.rotate_bytes, "keep_files": length.keep_files, "pilot_s": PILOT_S},
           "range": {"method": members.method, "members": [m.name for m in members.chosen],
                     "planned": members.planned, "band_percentiles": list(members.band), "reason": members.reason},
           "endurance": endurance, "configurations": rows,
           "recommendation": recommend(rows, q.ram_bytes), "notes": notes}
    return doc, outcomes


#: the card fields the merges' cost comes from (the longest stalls of a log crossing allocation units)
MERGE_FIELDS = ("merge_copy_us_per_kib", "merge_base_ms")


def _merge_note(sc: Any, members: Any) -> str:
    """What the members carry for the merge cost beside the scenario's card: the stall and buffer ranges follow
    these values (a population member carries its card profile's value, fitted or the profile's default)."""
    built = sc.build()
    try:
        card = built.sd_parts.card
    finally:
        built.close()
    parts = []
    for f in MERGE_FIELDS:
        vals = [m.overrides.get(("sd", "card_params"), {}).get(f) for m in members.chosen]
        shown = ", ".join(f"{m.name} {v:g}" for m, v in zip(members.chosen, vals) if v is not None)
        parts.append(f"{f}: {card.name} {getattr(card, f):g}" + (f"; members {shown}" if shown else ""))
    return ("merge cost, which makes the longest stalls: " + "; ".join(parts) + " (a member carries its card "
            "profile's value, fitted or not; sdbench list cards says which cards fitted it)")


def _stack_summary(sc: Any) -> dict[str, Any]:
    if sc.sd:
        _, cfg = sc.media_config("sd")
        return {"host": cfg.host, "card": cfg.card, "bus": cfg.bus.kind, "clock_hz": cfg.bus.clock_hz,
                "capacity_bytes": cfg.capacity_bytes or None}
    _, cfg = sc.media_config("flash")
    return {"host": cfg.host, "chip": cfg.chip, "partition_bytes": cfg.partition_size_bytes}


def _notes(q: Question, stack: Stack, length: RunLength, members: Any, endurance: dict[str, Any],
           rows: list[dict[str, Any]]) -> list[str]:
    notes = [f"each configuration logs {length.duration_s:.0f} s ({length.why})"
             + (f", through a ring of {length.keep_files} files of {length.rotate_bytes // 1024} KiB (the log does "
                f"not fit the medium)" if length.rotate_bytes else "")]
    if length.short:
        notes.append(f"warning: {length.short}")
    behind = [d["name"] for d in rows if d.get("pilot_only")]
    if behind:
        notes.append(f"{', '.join(behind)}: the writer does not keep up in a {PILOT_S:g} s pilot, so its figures "
                     f"are the pilot's and its buffer grows without bound")
    if members.chosen:
        lo, hi = members.band
        what = ("the card population (shipped fitted cards)" if members.method == "population"
                else "the fit's uncertainty")
        span = "span" if (lo, hi) == (0.0, 100.0) or len(members.chosen) == 2 else f"{lo:g}–{hi:g} % band"
        notes.append(f"ranges (in brackets): the {span} over {len(members.chosen)} of {members.planned} members of "
                     f"{what}: {', '.join(m.name for m in members.chosen)}; --members N runs more")
    else:
        notes.append(f"no ranges: {members.reason}")
    notes.append(f"stall: the duration of each write/sync/rotate call; buffer: the RAM the backlog of records takes "
                 f"(p99 over the records written, max = the buffer that loses none); lost: records the "
                 f"{q.ram_bytes} B buffer drops")
    if q.cuts:
        notes.append(f"power cut: the same log and cache cut at up to {q.cuts} points each, then remounted; records "
                     f"lost: the worst cut's written records that did not survive (a sync had promised none of "
                     f"them unless 'acked lost' says so)")
    src = endurance.get("source", "")
    what = (f"{endurance['tbw_bytes']:.3g} B written" if endurance.get("tbw_bytes")
            else f"{endurance.get('cycles', 0):,.0f} P/E cycles")
    notes.append(f"wear: bytes the medium programs per byte logged (filesystem, cache, wear levelling and FTL); life "
                 f"at {what}, wear spread over the whole medium: {src}")
    return notes
