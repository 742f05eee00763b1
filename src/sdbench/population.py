"""How sure a simulated figure is: the variants of a scenario that span its uncertainty, and the range they give.

A simulated run prints one figure per row, but the card behind it is one of
many (an uncalibrated profile such as ``generic-sdhc`` stands for no product)
or was fitted with some uncertainty (``fit_rel_sd`` in a fitted profile).  This
module says which *members* to run for a scenario:

* **population**: the scenario's SD card is uncalibrated (its TOML has no
  "fitted by `sdbench calibrate`" header and no ``fit_rel_sd``): one member
  per shipped fitted card profile, carrying that card's timing fields (the
  union of the fields in which the shipped fitted cards differ; never
  capacity, clock limits, markings, name or description);
* **fit**: a profile of the stack (SD card, host, flash chip, flash host)
  records ``fit_rel_sd``: :data:`FIT_MEMBERS` members, each field drawn
  from an independent log-normal with that relative standard deviation and
  median the fitted value, with a seed derived from the scenario's seed.
  A fitted card may hold fields at the population's value (``timing_from =
  "population"`` and the field not set: no train row of that card measures
  it); each member then also carries, for each such field that at least two
  cards fitted, one of the values those cards have (evenly spread quantiles,
  in an order drawn per field), so the range spans what the card does not
  tell;
* **none**: nothing to vary (calibrated profiles with an empty
  ``fit_rel_sd``, real media): no range, and the run's metadata says why.

In the population case, profiles that record ``fit_rel_sd`` (a fitted host)
are drawn as well, one draw per member.

:func:`ranges` turns the members' rows into a range per row without
multiplying the run time: the central scenario runs in full as always (its
figures do not change), then the central and every member run again with
their protocol's runs option cut to at most :data:`RUNS_CAP` and, where the
full run has them, at least :data:`MIN_RUNS` (see :func:`budget`), and each
row gets ``time_ms_range`` =
central × (10th, 90th percentile of member_reduced / central_reduced),
clipped so that low <= central <= high.  Everything is deterministic: the
same scenario and seed give the same ranges.

**Model error.**  Parameters are not the only uncertainty: a mechanism the
model lacks or gets wrong shows as the error of predictions on rows no fit
used.  ``sdbench calibrate --model-error`` measures it by cross-validation, per
class of what is uncalibrated in a stack and for reads and writes apart
(writes meet the card's internal work, which the model knows least): σ of
log(predicted / measured), as much as brings 80 % of those rows inside their
ranges (:func:`sdbench.crossval.conformal_sd`).  It is written to
``data/model-error.toml``; :func:`widen` adds ±1.28 σ to every simulated row's
range in quadrature with the parameters' spread, on each side, in log space.
A simulated row with nothing else to vary gets the model error alone.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import Any, Callable

from . import profiles
from .errors import ConfigError
from .media.sim.card import NOT_TIMING, CardProfile
from .options import apply_overrides, option_info
from .records import Row
from .scenarios import Scenario
from .stack.cardpop import STRUCTURE_FIELDS, card_population
from .stack.loaded import LoadedProfile, stack_profiles
from .stack.loaded import forget as forget_loaded
from .stack.sd import forget_population
from .workloads.registry import protocol

#: the band a range spans: 10th to 90th percentile of the members
PERCENTILES = (10, 90)
#: most timed calls per row a member (and the reduced central run) makes
RUNS_CAP = 4
#: fewest timed calls per row a member makes when the full run has that many: a row's first call may take
#: another path than the rest (a file's first append is aligned, the next ones are not; a cold cache), and
#: :func:`projected` carries the rest to the full run only when it has them
MIN_RUNS = 2
#: timed calls the members and the reduced central run may make together, as a share of the central run's, when
#: :data:`MIN_RUNS` each is over :data:`RANGE_BUDGET` (a protocol with few runs): a fit then keeps its draws
#: rather than fall back to its two extremes, whose joint 10th/90th percentiles overstate a row of several fields
MIN_RUNS_BUDGET = 2.5
#: timed calls all members (and the reduced central run) may make together, as a share of the central run's
RANGE_BUDGET = 1.0
#: fewest members a range is computed from when the budget allows fewer (a protocol whose runs are already 1):
#: then the members are the population's extremes, or a fit's two extremes (see :func:`budget`)
MIN_MEMBERS = 2
#: members drawn from a fit's uncertainty
FIT_MEMBERS = 10
#: card fields a population member never carries: what the card is, how big, what its bus allows
NOT_VARIED = NOT_TIMING
FITTED_MARK = profiles.FITTED_MARK
#: where `sdbench calibrate` records the model error (see the module's docstring)
MODEL_ERROR_FILE = "model-error.toml"


@dataclass(frozen=True)
class Member:
    """One variant of a scenario: overrides of profile fields, by (section, params table)."""

    name: str
    overrides: dict[tuple[str, str], dict[str, Any]]
    #: a population member's kind of flash translation layer (with a random-write area or without): a range run
    #: on fewer members than the population keeps one of each kind (:func:`select`)
    variant: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Plan:
    """What a scenario's range is taken over."""

    method: str                               # "population", "fit" or "none"
    members: tuple[Member, ...] = ()
    reason: str = ""                          # why there is no range (method "none")
    card: str = ""                            # the scenario's card (population)
    population: tuple[str, ...] = ()          # every shipped fitted card (population)
    fields: tuple[str, ...] = ()              # card fields the population members carry
    varied: dict[str, dict[str, float]] = field(default_factory=dict)  # "card x" -> field -> σ/value
    #: two members, all fitted fields at their 10th and at their 90th percentile (fit; see :func:`budget`)
    extremes: tuple[Member, ...] = ()
    #: card fields held at the population's value -> the fitted cards' values the members spread over (fit)
    held: dict[str, tuple[float, ...]] = field(default_factory=dict)
    #: what is uncalibrated in the stack (sdbench.crossval): its structural error term (:func:`widen`)
    structural_class: str = "neither"


def forget() -> None:
    """Drop every cached reading of the shipped profiles (the population, the model error): `sdbench
    calibrate` writing into the data folder changes them for the groups after."""
    shipped_population.cache_clear()
    _model_error_doc.cache_clear()
    forget_loaded()
    profiles.forget()
    forget_population()


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@lru_cache(maxsize=1)
def shipped_population() -> tuple[tuple[tuple[str, dict[str, Any]], ...], tuple[str, ...]]:
    """The members of an uncalibrated card's range: one per shipped fitted card, (its name, its timing fields: its
    fitted values, the population's medians for the rest; :meth:`CardPopulation.member`), and the timing fields in
    which they differ."""
    try:
        pop = card_population()
    except ConfigError:
        return (), ()
    members = tuple((n, pop.member(n)) for n in pop.cards)
    names = [f.name for f in fields(CardProfile) if f.name not in NOT_VARIED]
    varied = tuple(n for n in names if all(n in m and _numeric(m[n]) for _, m in members)
                   and len({m[n] for _, m in members}) > 1)
    return members, varied


#: the standard normal's 90th percentile
Z90 = 1.2815515655446004


def _draw(profile: LoadedProfile, z: Any) -> dict[str, Any]:
    """Every field ``profile.fit_rel_sd`` names at the log-normal quantile ``z()`` (median: the fitted value),
    held within the range the field declares: a poorly determined field (a ratio fitted at σ 72 %) would
    otherwise draw values no such device can have, which the model refuses; at its bound it is the most the
    physics allows."""
    out: dict[str, Any] = {}
    bounds = _declared_bounds(type(profile.value))
    for name, rel_sd in sorted(profile.value.fit_rel_sd.items()):
        value = getattr(profile.value, name)
        s = math.sqrt(math.log1p(float(rel_sd) ** 2))  # σ of log(x) for that relative standard deviation
        drawn = value * math.exp(s * z())
        lo, hi = bounds.get(name, (None, None))
        if hi is not None and drawn > hi:
            drawn = hi
        if lo is not None and drawn < lo:
            drawn = lo
        out[name] = round(drawn) if isinstance(value, int) else drawn
    return out


@lru_cache(maxsize=None)
def _declared_bounds(cls: type) -> dict[str, tuple[float | None, float | None]]:
    """Each option's declared (min, max) of a profile class (sdbench.options.option_info)."""
    return {o.name: (o.min, o.max) for o in option_info(cls)}


def _slowness(card: dict[str, Any], fields_: tuple[str, ...], medians: dict[str, float]) -> float:
    """An overall slowness index of a population member's fields (to choose members spread over the
    population)."""
    return sum(math.log1p(card[f] / medians[f]) for f in fields_ if medians[f] > 0)


def plan(sc: Scenario, *, simulated: bool, profiles_: tuple[LoadedProfile, ...] | None = None) -> Plan:
    """The members of scenario ``sc``'s uncertainty (see the module's docstring); ``profiles_``: its stack's
    profiles as the run loaded them (``Built.profiles``), else they are loaded here."""
    if not simulated:
        return Plan("none", reason="measured on real media: the spread is in the per-call samples, not in a model")
    profs = stack_profiles(sc) if profiles_ is None else profiles_
    if not profs:
        return Plan("none", reason="no simulated card or flash chip in the stack")
    varied = [p for p in profs if p.value.fit_rel_sd]
    card = next((p for p in profs if p.kind == "card"), None)
    # what is uncalibrated: the SD host and card, or the flash target's host and chip
    media_card = card or next((p for p in profs if p.kind == "flash chip"), None)
    host = next((p for p in profs if p.kind in ("host", "flash host")), None)
    klass = {(False, False): "neither", (False, True): "card", (True, False): "host", (True, True): "both"}[
        (host is None or not host.calibrated, media_card is None or not media_card.calibrated)]
    rng = random.Random(f"sdbench-range:{sc.seed}")  # a str seed: the same draws on every platform and run
    sigma = {p.title: {k: float(v) for k, v in sorted(p.value.fit_rel_sd.items())} for p in varied}

    def draws() -> dict[tuple[str, str], dict[str, Any]]:
        return {(p.section, p.params): _draw(p, lambda: rng.gauss(0.0, 1.0)) for p in varied}

    if card is not None and not card.calibrated:
        cards, fields_ = shipped_population()
        if not cards:
            return Plan("none", reason=f"the card profile {card.name} is uncalibrated and no fitted card profile "
                                       "is shipped to take a population from")
        timing = tuple(f for f in fields_ if f not in STRUCTURE_FIELDS)
        medians = {f: sorted(m[f] for _, m in cards)[len(cards) // 2] for f in timing}
        ordered = sorted(cards, key=lambda nm: (_slowness(nm[1], timing, medians), nm[0]))
        members = []
        for name, m in ordered:
            over = draws()
            key = ("sd", "card_params")
            over[key] = {**over.get(key, {}), **{f: m[f] for f in fields_}}
            members.append(Member(name, over, (bool(m.get("random_area_bytes")),)))
        return Plan("population", tuple(members), card=card.name, population=tuple(n for n, _ in ordered),
                    fields=fields_, varied=sigma, structural_class=klass)
    # a calibrated card's held fields that at least two fitted cards fitted: their values
    spans = card.spread if card is not None and card.calibrated else {}
    if varied or spans:
        def with_held(over: dict[tuple[str, str], dict[str, Any]], q: Callable[[str], float]) -> dict[
                tuple[str, str], dict[str, Any]]:
            """``over`` with each held field at its values' ``q(field)``-th percentile (an integer field rounded)."""
            if not spans:
                return over
            values = {f: percentile(list(v), q(f)) for f, v in spans.items()}
            values = {f: round(x) if isinstance(getattr(card.value, f), int) else x for f, x in values.items()}
            key = ("sd", "card_params")
            return {**over, key: {**over.get(key, {}), **values}}

        extremes = tuple(Member(name, with_held({(p.section, p.params): _draw(p, lambda z=z: z) for p in varied},
                                                lambda f, q=q: q))
                         for name, z, q in (("all fields at their 10th percentile", -Z90, PERCENTILES[0]),
                                            ("all fields at their 90th percentile", Z90, PERCENTILES[1])))
        # each held field: the members take evenly spread quantiles of its values, in an order of their own,
        # drawn apart from the fitted fields' draws (which then do not depend on what the card holds)
        held_rng = random.Random(f"sdbench-range-held:{sc.seed}")
        orders = {f: held_rng.sample(range(FIT_MEMBERS), FIT_MEMBERS) for f in sorted(spans)}
        members = tuple(Member(f"draw {i + 1}", with_held(draws(), lambda f, i=i: 100.0 * (orders[f][i] + 0.5)
                                                          / FIT_MEMBERS)) for i in range(FIT_MEMBERS))
        return Plan("fit", members, varied=sigma, extremes=extremes, held=spans, structural_class=klass)
    empty = [p.title for p in profs if p.calibrated]
    if len(empty) == 1:
        return Plan("none", structural_class=klass,
                    reason=f"nothing to vary: {empty[0]} is calibrated but records no fit uncertainty (its "
                                   "fit_rel_sd is empty; `sdbench calibrate` fills it)")
    if empty:
        return Plan("none", structural_class=klass,
                    reason=f"nothing to vary: {', '.join(empty[:-1])} and {empty[-1]} are calibrated but "
                                   "record no fit uncertainty (their fit_rel_sd is empty; `sdbench calibrate` "
                                   "fills it)")
    return Plan("none", structural_class=klass,
                reason="nothing to vary: no profile of the stack records a fit uncertainty (fit_rel_sd)")


# -- reduced runs -------------------------------------------------------------------------------------

def runs_of(sc: Scenario) -> int:
    """The scenario's value of its protocol's runs option (``ProtocolSpec.runs_option``)."""
    spec = protocol(sc.protocol)
    return int(getattr(spec.config_of(sc), spec.runs_field))


def with_runs(sc: Scenario, runs: int) -> Scenario:
    """``sc`` with its protocol's runs option set to ``runs`` (as ``--runs`` would set it)."""
    spec = protocol(sc.protocol)
    raw = apply_overrides(sc.raw, [f"{spec.runs_option}={int(runs)}"])
    return replace(sc, raw=raw, options={**sc.options, spec.table: spec.options(raw[spec.table])})


def member_scenario(sc: Scenario, member: Member) -> Scenario:
    """``sc`` with ``member``'s profile fields in its override tables ([sd.card_params], ...)."""
    tables = {"sd": dict(sc.sd), "flash": dict(sc.flash)}
    for (section, params), values in member.overrides.items():
        table = tables[section]
        old = table.get(params)
        table[params] = {**(old if isinstance(old, dict) else {}), **values}
    return replace(sc, sd=tables["sd"], flash=tables["flash"])


def budget(sc: Scenario, members: int) -> tuple[int, int]:
    """(runs of the reduced runs, members to run) within :data:`RANGE_BUDGET`.

    The cost of a run is its protocol's timed calls.  The runs are the most, up
    to :data:`RUNS_CAP`, that keep all members (and the reduced central run,
    when the runs are reduced at all) within the budget; when even
    :data:`MIN_RUNS` each (or the full run's, if fewer) is over it, the
    members run at those runs within :data:`MIN_RUNS_BUDGET` (when that is
    at least 2), fewer if need be, but never fewer than :data:`MIN_MEMBERS`
    (a protocol whose runs are already 1 then costs more):
    the population's members spread evenly over it, its fastest and slowest
    included (:func:`select`); of a fit, the first draws, or when fewer than
    half of them fit, its :attr:`Plan.extremes`, whose range is their span
    rather than a percentile band.
    """
    spec = protocol(sc.protocol)
    full_runs = runs_of(sc)
    allowed = RANGE_BUDGET * max(spec.timed_calls(sc), 1)
    least = max(min(MIN_RUNS, full_runs), 1)
    cost_least, central_least = 1, 0
    for r in range(max(min(full_runs, RUNS_CAP), least), least - 1, -1):
        cost = max(spec.timed_calls(with_runs(sc, r)), 1)
        central = 1 if r < full_runs else 0
        if (members + central) * cost <= allowed:
            return r, members
        cost_least, central_least = cost, central
    if least >= MIN_RUNS:
        allowed = MIN_RUNS_BUDGET * max(spec.timed_calls(sc), 1)
    fit = int(allowed // cost_least) - central_least
    return least, min(members, max(fit, MIN_MEMBERS))


def select(members: tuple[Member, ...], k: int) -> tuple[Member, ...]:
    """``k`` of ``members`` evenly spread over their order (the first and the last included); with two or more,
    a kind of flash translation layer none of them has adds its slowest member (a card without a random-write
    area stalls where one with it does not: the range must hold both)."""
    n = len(members)
    if k >= n:
        return members
    if k <= 1:
        return members[n // 2:n // 2 + 1]
    picked = {round(i * (n - 1) / (k - 1)) for i in range(k)}
    have = {members[i].variant for i in picked}
    for i in range(n - 1, -1, -1):
        if members[i].variant not in have:
            have.add(members[i].variant)
            picked.add(i)
    return tuple(members[i] for i in sorted(picked))


# -- the range ----------------------------------------------------------------------------------------

def percentile(values: list[float], p: float) -> float:
    """The ``p``-th percentile, linear between the closest ranks (numpy's default)."""
    v = sorted(values)
    pos = (len(v) - 1) * p / 100.0
    i = int(math.floor(pos))
    if i + 1 >= len(v):
        return v[-1]
    return v[i] + (v[i + 1] - v[i]) * (pos - i)


def projected(row: Row, runs: int) -> float:
    """A reduced row's mean time per call carried to ``runs`` calls: its first call once, the mean of the
    others for the rest.  One-off costs of a first call (the card loading its tables after power-up, a cold
    cache) then weigh as they do in the full run, not ``runs / reduced runs`` times more."""
    s = row.samples_ms
    if len(s) < 2 or runs <= len(s):
        return row.time_ms
    rest = math.fsum(s[1:]) / (len(s) - 1)
    return (s[0] + (runs - 1) * rest) / runs


@dataclass(frozen=True)
class Ranged:
    rows: tuple[Row, ...]
    #: label -> "optimistic" (the central is faster than the band) or "pessimistic" (slower)
    outside: dict[str, str]


def ranges(central: tuple[Row, ...], central_reduced: tuple[Row, ...],
           members: list[tuple[Row, ...]], band: tuple[float, float] = PERCENTILES) -> Ranged:
    """Each central row with ``time_ms_range`` = central × (10th, 90th percentile of member / central at the
    reduced runs), widened to hold the central figure; rows without at least two member figures keep None.
    ``band``: other percentiles ((0, 100) for a fit's two extremes, which are its 10th and 90th already)."""
    base = {r.label: r for r in central_reduced}
    by_member = [{r.label: r for r in rows} for rows in members]
    out: list[Row] = []
    outside: dict[str, str] = {}
    for row in central:
        ref = base.get(row.label)
        figures = [projected(m[row.label], row.runs) for m in by_member if row.label in m]
        if ref is None or len(figures) < 2:
            out.append(row)
            continue
        scale = projected(ref, row.runs)
        if scale <= 0:
            # no scale to carry to the full run: a row that takes no time in every member keeps none
            out.append(row.with_range(row.time_ms, row.time_ms) if not any(figures) else row)
            continue
        ratios = [f / scale for f in figures]
        q_lo, q_hi = percentile(ratios, band[0]), percentile(ratios, band[1])
        if q_lo > 1.0 + 1e-9:
            outside[row.label] = "optimistic"
        elif q_hi < 1.0 - 1e-9:
            outside[row.label] = "pessimistic"
        out.append(row.with_range(min(row.time_ms * q_lo, row.time_ms), max(row.time_ms * q_hi, row.time_ms)))
    return Ranged(tuple(out), outside)


#: row ops that program the medium; every other op (read, mount, open, ...) counts as a read
WRITING_OPS = frozenset({"write", "append", "sync", "format", "delete", "truncate", "rename", "mkdir", "create",
                         "rotate", "trim", "erase"})
#: the kinds of row the model error is measured for
ERROR_KINDS = ("read", "write")


def error_kind(op: str) -> str:
    """"write" for a row that programs the medium (any op with "write" in it too: randwrite, rw), else "read"."""
    return "write" if op in WRITING_OPS or "write" in op or op in ("rw", "randrw") else "read"


#: the classes of what is uncalibrated in a stack (sdbench.crossval), and where one with no recorded error of a
#: kind borrows it: the next less calibrated class
STRUCTURAL_CLASSES = ("neither", "card", "host", "both")
STRUCTURAL_FALLBACK = {"neither": "card", "card": "both", "host": "both", "both": "host"}


@lru_cache(maxsize=1)
def _model_error_doc() -> dict[str, tuple[dict[str, float], dict[str, float], dict[str, int]]]:
    """Class -> (σ, z and rows per kind) from ``data/model-error.toml``: the top level is the class ``neither``
    (the train rows no fit group uses), ``[class.<name>]`` the others; empty when missing or unreadable."""
    import tomllib

    try:
        doc = tomllib.loads((profiles.DATA / MODEL_ERROR_FILE).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    tables = {"neither": doc, **{k: v for k, v in (doc.get("class") or {}).items() if isinstance(v, dict)}}
    out: dict[str, tuple[dict[str, float], dict[str, float], dict[str, int]]] = {}
    for klass, t in tables.items():
        sd, z, n = {}, {}, {}
        for kind in ERROR_KINDS:
            v = t.get(f"log_rel_sd_{kind}")
            if _numeric(v) and math.isfinite(v) and v >= 0:
                sd[kind] = float(v)
                q = t.get(f"z_{kind}")
                # a file without z (or a nonsensical one) falls back to the normal quantile, as for a known σ
                z[kind] = float(q) if _numeric(q) and math.isfinite(q) and q >= Z90 else Z90
                rows = t.get(f"rows_{kind}")
                n[kind] = int(rows) if _numeric(rows) and rows >= 0 else 0
        if sd:
            out[klass] = (sd, z, n)
    return out


def structural_error(klass: str = "neither") -> tuple[dict[str, float], dict[str, float], dict[str, str]]:
    """The recorded error for a stack of class ``klass`` (what is uncalibrated in it): per kind of row
    (:func:`error_kind`), σ of log(predicted / measured), the multiple of σ a range spans on each side, and the
    class it was measured on (its own, or the next less calibrated one where it has no rows of that kind:
    :data:`STRUCTURAL_FALLBACK`).  Empty when nothing is recorded."""
    doc = _model_error_doc()
    sd: dict[str, float] = {}
    z: dict[str, float] = {}
    src: dict[str, str] = {}
    # its own class, the less calibrated ones after it, and last the calibrated stacks' (never more than is known)
    chain = [klass if klass in STRUCTURAL_FALLBACK else "both"]
    while STRUCTURAL_FALLBACK[chain[-1]] not in chain:
        chain.append(STRUCTURAL_FALLBACK[chain[-1]])
    chain.append("neither")
    for kind in ERROR_KINDS:
        for k in chain:
            got = doc.get(k)
            if got is not None and kind in got[0]:
                sd[kind], z[kind], src[kind] = got[0][kind], got[1][kind], k
                break
    return sd, z, src


def model_error() -> dict[str, float]:
    """The model error `sdbench calibrate --model-error` recorded for calibrated stacks, per kind of row
    (:func:`error_kind`): σ of log(predicted / measured); empty when not recorded."""
    return structural_error("neither")[0]


def model_error_z() -> dict[str, float]:
    """Per kind of row, the multiple of its model error σ a range spans on each side (as recorded: the normal
    90th percentile, σ being measured for a 10–90 % range: :func:`sdbench.crossval.conformal_sd`)."""
    return structural_error("neither")[1]


def widen(rows: tuple[Row, ...], log_sd: dict[str, float], z: float | dict[str, float] = Z90) -> tuple[Row, ...]:
    """Each row's range widened by the model error of its kind: on each side, the log distance from the
    central figure to the end and ``z * σ`` added in quadrature (a row without a range gets ±``z * σ``);
    ``z`` is one multiple for every kind or one per kind (a kind it lacks takes :data:`Z90`).
    Rows with a central figure of 0, or of a kind without a recorded error, keep what they have."""
    out = []
    for row in rows:
        c = row.time_ms
        kind = error_kind(row.op)
        m = (z.get(kind, Z90) if isinstance(z, dict) else z) * log_sd.get(kind, 0.0)
        if not c > 0 or m <= 0:
            out.append(row)
            continue
        lo, hi = row.time_ms_range if row.time_ms_range is not None else (c, c)
        d_lo = math.log(c / lo) if lo > 0 else math.inf
        d_hi = math.log(hi / c) if hi > 0 else 0.0
        out.append(row.with_range(c * math.exp(-math.hypot(d_lo, m)), c * math.exp(math.hypot(d_hi, m))))
    return tuple(out)


def describe(pl: Plan, used: int, planned: int) -> str:
    """One line for the run's warnings: what the ranges span."""
    lo, hi = PERCENTILES
    if pl.method == "population":
        some = f"{used} of the {len(pl.population)}" if used < len(pl.population) else f"the {used}"
        return (f"the scenario names no calibrated card ({pl.card}): each range is the {lo}–{hi} % spread over "
                f"{some} shipped fitted card profiles" + (" (fewer to keep within the time budget)"
                                                          if planned < len(pl.population) else ""))
    what = ", ".join(f"{k} ({', '.join(v)})" for k, v in pl.varied.items())
    if pl.held:
        held = (f"the fitted cards' values of {', '.join(pl.held)} (the card's population values: no train row "
                f"measures them)")
        what = f"{what} and {held}" if what else held
    if planned < len(pl.members):
        return (f"each range spans the fit uncertainty of {what} with every field at its {lo}th and at its {hi}th "
                f"percentile (two members, to keep within the time budget)")
    return f"each range is the {lo}–{hi} % spread over {used} draws from the fit uncertainty of {what}"
