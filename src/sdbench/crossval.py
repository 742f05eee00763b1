"""Cross-validation by host and by card, and the structural error it measures.

A prediction is only as good as what it stands on.  Where the host and the card were fitted to rows of their
own, the model's error on rows no fit used is the whole story; where the user's host or card was never
calibrated, the prediction stands on a host profile derived from sources and estimates, or on the card
population, and its error is larger.  This module measures that error the way a user meets it:

* **by host**: every train row of a scenario whose host is fitted is predicted with the host's fitted fields
  back at the values they had before any fit (the profile's ``unfitted``: sources and estimates), and every card
  all of whose rows ran on that host back at the population's value (the population without it);
* **by card**: every train row of a scenario whose card is fitted is predicted with the card's fitted fields at
  the population's medians over the other cards (the host stays as fitted);
* rows no fit group uses (train predictions) are out-of-sample already: each counts as it stands.

Every such row falls in a **class** by what is uncalibrated in the stack it was predicted with: ``neither``,
``card`` (the card is the population), ``host`` (no host field fitted) or ``both``.  Per class and kind of row
(read, write), the structural error is the part of the log errors their parameter ranges do not explain, as
much as a 10–90 % range needs: the smallest σ with which ±1.28 √(s² + σ²) holds ⌈0.8 (n + 1)⌉ of the class's n
log errors, s being each prediction's parameter spread as a σ (its 10–90 % band over 2 × 1.28).  That order
statistic is split conformal prediction's: a new row drawn like the class's rows falls inside its range with
probability at least 80 %, whatever the errors' distribution (one far-off row widens no one's range but its
own class's last 20 %).  The classes are then held in order (:func:`ordered_variances`): a stack with more
uncalibrated cannot claim a smaller error than one with less.  `sdbench calibrate --model-error` records it
(model-error.toml) and every simulated range adds ±1.28 σ of its class in quadrature
(:func:`sdbench.population.widen`).  The coverage reported here takes each group's σ from the other
groups' rows only (leave one group out), so it is what a new host or card can expect.

What is not refitted: a held-out host's rows also helped fit the cards that ran on it and on other hosts too,
and the population's medians include the cards fitted through the held-out host; those keep their fitted
values.  The figures are therefore slightly optimistic for hosts whose cards also ran elsewhere.
"""
from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from . import scenarios as scen
from .calibrate import Measurement
from .errors import SdbenchError
from .media.sim.esp_flash import load_esp_flash_host
from .media.sim.nor import load_chip_profile
from .population import Z90, error_kind
from .protocols import run_scenarios
from .records import Row
from .stack.cardpop import card_population
from .stack.loaded import host_calibrated, is_fitted
from .stack.sd import load_card, load_host
from .validation import FACTOR, compare_row, fitted_rows, row_group, TRAIN_PREDICTION

#: what is uncalibrated in a prediction's stack
CLASSES = ("neither", "card", "host", "both")
CLASS_TITLES = {"neither": "host and card calibrated", "card": "card uncalibrated (the population)",
                "host": "host uncalibrated", "both": "host and card uncalibrated"}
#: the train rows whose mechanism the model does not have yet (in the data folder)
UNMODELLED_FILE = "unmodelled.toml"
#: fewest rows of a class and kind its structural error is measured from
MIN_ROWS = 3
#: where a class with too few rows of a kind borrows its error (the next less calibrated class)
FALLBACK = {"neither": "card", "card": "both", "host": "both", "both": "host"}
BY = ("host", "card")


@dataclass(frozen=True)
class StackOf:
    """A scenario's host and card, as cross-validation treats them (the SD host and card, or the flash target's
    host and chip)."""

    section: str          # "sd" or "flash"
    host: str
    card: str
    host_fitted: bool
    card_fitted: bool


def stack_of(name: str) -> StackOf | None:
    """The simulated host and card of scenario ``name`` (None for real media)."""
    sc = scen.load(name)
    base = sc.source_dir
    if sc.sd and sc.sd.get("media") == "sim":
        host, card = str(sc.sd.get("host", "esp32-sdmmc")), str(sc.sd.get("card", "generic-sdhc"))
        c = load_card(card, None, base)
        return StackOf("sd", host, card, host_calibrated(host, base),
                       is_fitted("cards", card, base) or bool(c.fit_rel_sd))
    if sc.flash and sc.flash.get("media") == "sim-nor":
        host, chip = str(sc.flash.get("host", "esp32-flash")), str(sc.flash.get("chip", "gd25q32c"))
        return StackOf("flash", host, chip, host_calibrated(host, base), is_fitted("flash", chip, base))
    return None


def klass(host_uncalibrated: bool, card_uncalibrated: bool) -> str:
    return {(False, False): "neither", (False, True): "card", (True, False): "host",
            (True, True): "both"}[(host_uncalibrated, card_uncalibrated)]


def _num(v: float) -> str:
    return repr(round(float(v), 6)) if isinstance(v, float) else str(v)


def host_overrides(st: StackOf) -> list[str]:
    """The scenario overrides that put a host's fitted fields back at their values before any fit."""
    if st.section == "sd":
        unfitted = load_host(st.host).unfitted
        return [f"sd.host_params.{f}={_num(v)}" for f, v in unfitted.items()]
    unfitted = load_esp_flash_host(st.host).unfitted
    return [f"flash.host_params.{f}={_num(v)}" for f, v in unfitted.items()]


def card_overrides(st: StackOf) -> list[str]:
    """The scenario overrides that make a fitted card (or flash chip) a card of the population: its fitted fields
    at the medians of the other fitted cards (a flash chip's at their values before any fit)."""
    if st.section == "flash":
        return [f"flash.chip_params.{f}={_num(v)}" for f, v in load_chip_profile(st.card).unfitted.items()]
    pop = card_population()
    mine = pop.fitted.get(st.card)
    if mine is None:
        mine = {f: getattr(load_card(st.card), f) for f in load_card(st.card).fit_rel_sd}
    others = pop.without(st.card).medians
    return [f"sd.card_params.{f}={_num(others[f])}" for f in mine if f in others]


@dataclass(frozen=True)
class Plan:
    """One prediction of cross-validation: a scenario run with overrides, the rows it predicts and how."""

    by: str               # "host", "card", or "as is" (a train prediction)
    host: str             # the scenario's host and card (the held-out one is ``by``'s)
    card: str
    scenario: str
    overrides: tuple[str, ...]
    klass: str
    rows: tuple[Measurement, ...]


def plans(meas: list[Measurement], by: Iterable[str] = BY) -> list[Plan]:
    """Every prediction cross-validation makes for the train rows of ``meas`` (see the module's docstring)."""
    by = tuple(by)
    train: dict[str, list[Measurement]] = {}
    for m in meas:
        if m.split == "train" and m.value is not None:
            train.setdefault(m.scenario, []).append(m)
    known = set(scen.builtin_names())
    stacks = {s: st for s in train if s in known and (st := stack_of(s)) is not None}
    fitted = fitted_rows()
    out: list[Plan] = []
    # a card whose every train row runs on one host goes back to the population when that host is held out
    hosts_of: dict[str, set[str]] = {}
    for s, st in stacks.items():
        hosts_of.setdefault(st.card, set()).add(st.host)
    for s, st in sorted(stacks.items()):
        rows = tuple(train[s])
        as_is = tuple(m for m in rows if row_group(m, fitted) == TRAIN_PREDICTION)
        if as_is:
            out.append(Plan("as is", st.host, st.card, s, (), klass(not st.host_fitted, not st.card_fitted), as_is))
        if "host" in by and st.host_fitted:
            over = host_overrides(st)
            card_out = not st.card_fitted or (hosts_of.get(st.card) == {st.host} and st.card_fitted)
            if st.card_fitted and card_out:
                over += card_overrides(st)
            out.append(Plan("host", st.host, st.card, s, tuple(over), klass(True, card_out), rows))
        if "card" in by and st.card_fitted:
            out.append(Plan("card", st.host, st.card, s, tuple(card_overrides(st)), klass(not st.host_fitted, True),
                            rows))
    return out


def run_plans(plans_: list[Plan], progress: Callable[[str], None] | None = None,
              workers: int = 1) -> list[dict[str, Any]]:
    """Run every plan (ranges from the parameters' spread only: the structural error is what is measured) and
    compare; each row also carries ``by``, ``group``, ``class``, ``kind``, ``log_error`` and ``param_sd``.
    ``workers``: the plans run side by side in that many processes (the rows do not depend on it)."""
    def what(p: Plan) -> str:
        return p.scenario if p.by == "as is" else f"{p.by} {getattr(p, p.by)} held out: {p.scenario}"

    scs = [scen.load(p.scenario, list(p.overrides)) for p in plans_]
    finished = 0

    def done(i: int, res: Any) -> None:
        nonlocal finished
        finished += 1
        if progress:
            progress(f"[{finished}/{len(plans_)}] {what(plans_[i])}")
    records = run_scenarios(scs, workers=workers, ranges=True, structural=False, done=done)
    out: list[dict[str, Any]] = []
    for p, rec in zip(plans_, records):
        if isinstance(rec, BaseException):
            raise SdbenchError(f"cross-validation, {what(p)}: does not run: {rec}") from None
        got: dict[str, Row] = {r.label: r for r in rec.rows}
        for m in p.rows:
            row = compare_row(m, got.get(m.row), f"cross-validated ({p.by})" if p.by != "as is" else TRAIN_PREDICTION)
            row.update(by=p.by, host=p.host, card=p.card, klass=p.klass, kind=error_kind(row["op"] or m.op))
            pred, meas, rng = row["predicted"], row["measured"], row["range"]
            row["log_error"] = math.log(pred / meas) if pred and meas and pred > 0 and meas > 0 else None
            row["param_sd"] = (math.log(rng[1] / rng[0]) / (2 * Z90)
                               if rng is not None and rng[0] > 0 and rng[1] > 0 else 0.0)
            out.append(row)
    return out


@functools.lru_cache(maxsize=1)
def unmodelled_rows() -> dict[tuple[str, str], str]:
    """(scenario, row label) -> the mechanism the model lacks, for the train rows that await one
    (``sdbench/data/unmodelled.toml``): `sdbench validate` still compares them, but the structural error leaves
    them out, so a mechanism the model lacks does not pass for its error on every range; they are reported."""
    from . import profiles
    from .options import parse_toml

    path = profiles.DATA / UNMODELLED_FILE
    if not path.is_file():
        return {}
    doc = parse_toml(path.read_text(), UNMODELLED_FILE)
    out: dict[tuple[str, str], str] = {}
    for i, item in enumerate(doc.get("row", [])):
        if not isinstance(item, dict) or not all(isinstance(item.get(k), str) and item[k]
                                                 for k in ("scenario", "row", "mechanism")):
            raise SdbenchError(f"{UNMODELLED_FILE}: row[{i}] needs scenario, row and mechanism (strings)")
        out[(item["scenario"], item["row"])] = item["mechanism"]
    return out


#: the classes a class's structural error may not be smaller than (its stack is at least as calibrated)
MORE_CALIBRATED = {"neither": (), "card": ("neither",), "host": ("neither",), "both": ("neither", "card", "host")}


#: the share of a class's rows a structural σ must bring inside their ranges: what a 10–90 % range claims
COVERAGE = 0.8


def structural_sd(rows: list[dict[str, Any]]) -> dict[str, dict[str, tuple[float, int]]]:
    """Class -> kind -> (σ of the structural error, rows it comes from), for each class and kind with at least
    :data:`MIN_ROWS` compared rows (:func:`conformal_sd`); rows that await a mechanism (:func:`unmodelled_rows`)
    are left out.  Per kind, the classes' variances are held in the order of what is calibrated
    (:func:`ordered_variances`)."""
    out: dict[str, dict[str, tuple[float, int]]] = {}
    awaiting = unmodelled_rows()
    for kind in ("read", "write"):
        var: dict[str, float] = {}
        count: dict[str, int] = {}
        for k in CLASSES:
            mine = [r for r in rows if r["klass"] == k and r["kind"] == kind and r["log_error"] is not None
                    and (r["scenario"], r["row"]) not in awaiting]
            if len(mine) < MIN_ROWS:
                continue
            var[k], count[k] = conformal_sd(mine) ** 2, len(mine)
        for k, v in ordered_variances(var, count).items():
            out.setdefault(k, {})[kind] = (math.sqrt(v), count[k])
    return out


def conformal_sd(rows: list[dict[str, Any]]) -> float:
    """The smallest σ that brings ⌈:data:`COVERAGE` (n + 1)⌉ of the n ``rows`` (all, up to eight rows) inside
    ±Z90 √(param_sd² + σ²) of their log error: each row needs σ² = (log_error / Z90)² − param_sd² (0 when its
    parameters' spread covers it), and σ² is that order statistic of the needs."""
    needs = sorted(max(0.0, (r["log_error"] / Z90) ** 2 - r["param_sd"] ** 2) for r in rows)
    k = min(len(needs), math.ceil(COVERAGE * (len(needs) + 1)))
    return math.sqrt(needs[k - 1])


def _partitions(items: list[str]) -> Iterable[list[list[str]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for p in _partitions(rest):
        for i in range(len(p)):
            yield p[:i] + [[first, *p[i]]] + p[i + 1:]
        yield [[first], *p]


def ordered_variances(var: dict[str, float], count: dict[str, int]) -> dict[str, float]:
    """The classes' variances, weighted by their rows, brought into the order of :data:`MORE_CALIBRATED` by
    least squares (isotonic regression): where a less calibrated class measured a smaller error than a more
    calibrated one (few rows, other setups), the two share their pooled variance.  Small samples otherwise
    claim, say, no structural error for an uncalibrated host because its four rows happened to fit.  With four
    classes every grouping is tried: the ordered solution is the best grouping whose pooled values keep the
    order."""
    classes = list(var)
    best: tuple[float, dict[str, float]] | None = None
    for groups in _partitions(classes):
        fit: dict[str, float] = {}
        for g in groups:
            pooled = sum(count[k] * var[k] for k in g) / sum(count[k] for k in g)
            fit.update(dict.fromkeys(g, pooled))
        if any(fit[lo] > fit[k] * (1 + 1e-12) for k in classes for lo in MORE_CALIBRATED[k] if lo in fit):
            continue
        loss = sum(count[k] * (fit[k] - var[k]) ** 2 for k in classes)
        if best is None or loss < best[0] * (1 - 1e-12):
            best = (loss, fit)
    return {} if best is None else {k: best[1][k] for k in classes}


def resolve(table: dict[str, dict[str, tuple[float, int]]], k: str, kind: str) -> tuple[float, int, str] | None:
    """The structural σ, its row count and the class it comes from for class ``k`` and ``kind``: its own, else
    the fallback chain's (:data:`FALLBACK`); None when no class has one."""
    seen = set()
    while k not in seen:
        seen.add(k)
        got = table.get(k, {}).get(kind)
        if got is not None:
            return got[0], got[1], k
        k = FALLBACK[k]
    return None


def widened(row: dict[str, Any], sd: float) -> list[float] | None:
    """A row's parameter range (in its unit) widened by ±Z90 ``sd`` in quadrature, as the shipped ranges are
    (:func:`sdbench.population.widen`), or None without a prediction."""
    pred = row["predicted"]
    if pred is None or pred <= 0:
        return None
    lo, hi = row["range"] if row["range"] is not None else (pred, pred)
    m = Z90 * sd
    d_lo = math.log(pred / lo) if lo > 0 else math.inf
    d_hi = math.log(hi / pred) if hi > 0 else 0.0
    return [pred * math.exp(-math.hypot(d_lo, m)), pred * math.exp(math.hypot(d_hi, m))]


def evaluate(rows: list[dict[str, Any]], by: str) -> dict[str, Any]:
    """Per held-out group and overall, for the rows of cross-validation ``by`` (host or card, with the train
    predictions of that kind of group): median |error|, share within ×1.5, coverage of the full range (the
    parameters' spread widened by the structural σ of its class measured without the group's own rows) and the
    median range width."""
    uncal = ("host", "both") if by == "host" else ("card", "both")
    mine = [dict(r) for r in rows if r["by"] == by or (r["by"] == "as is" and r["klass"] in uncal)]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in mine:
        groups.setdefault(r[by], []).append(r)
    per_group = []
    for g, grs in sorted(groups.items()):
        table = structural_sd([r for r in rows if r[by] != g])
        for r in grs:
            got = resolve(table, r["klass"], r["kind"])
            full = widened(r, got[0]) if got is not None else r["range"]
            r["full_range"] = full
            r["full_inside"] = None if full is None or r["measured"] is None else full[0] <= r["measured"] <= full[1]
        per_group.append({"group": g, **_stats(grs)})
    return {"by": by, "groups": per_group, "overall": _stats(mine), "rows": mine}


def _stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    compared = [r for r in rows if r["log_error"] is not None]
    errs = [abs(r["error"]) for r in compared]
    ranged = [r for r in compared if r.get("full_inside") is not None]
    widths = [r["full_range"][1] / r["full_range"][0] for r in ranged if r["full_range"][0] > 0]
    worst = max(compared, key=lambda r: abs(r["error"]), default=None)
    return {
        "rows": len(compared),
        "median_abs_error": statistics.median(errs) if errs else None,
        "within_x1_5": (sum(max(r["predicted"] / r["measured"], r["measured"] / r["predicted"]) <= FACTOR
                            for r in compared) / len(compared)) if compared else None,
        "coverage": sum(bool(r["full_inside"]) for r in ranged) / len(ranged) if ranged else None,
        "median_range_width": statistics.median(widths) if widths else None,
        "worst_row": None if worst is None else f"{worst['scenario']}: {worst['row']}",
        "worst_error": None if worst is None else worst["error"],
    }


def cross_validate(meas: list[Measurement], progress: Callable[[str], None] | None = None,
                   workers: int = 1) -> dict[str, Any]:
    """Every cross-validation prediction of ``meas``' train rows (:func:`plans`, :func:`run_plans` in
    ``workers`` processes), the structural error per class and kind they give, and the views by host and by
    card (:func:`evaluate`)."""
    rows = run_plans(plans(meas), progress, workers)
    return {"rows": rows, "structural": structural_sd(rows), "host": evaluate(rows, "host"),
            "card": evaluate(rows, "card")}


def structural_toml(res: dict[str, Any]) -> str:
    """The text of ``data/model-error.toml`` from :func:`cross_validate`'s result: per class (the top level is
    ``neither``) and kind, σ, its row count and the t quantile a range spans; then every row it came from."""
    from .options import toml_string

    table = res["structural"]
    lines = ["# fitted by `sdbench calibrate --model-error`: the structural error of predictions, measured by",
             "# cross-validation (sdbench.crossval): train rows predicted with their host or their card left out, and",
             "# the train rows no fit group uses, each in the class of what was uncalibrated in its stack (neither,",
             "# card, host, both).  Per class and kind of row: σ of log(predicted / measured) beyond the parameters'",
             "# spread, the smallest that brings ceil(0.8 (n + 1)) of the class's n rows inside their ranges (split",
             "# conformal), the classes held in order (a less calibrated one never below a more calibrated one); the",
             "# rows it comes from; z, the multiple of σ every simulated range adds in quadrature on each side",
             "# (sdbench.population.widen).  The top level is the class neither; a class without rows of a kind",
             "# borrows the next less calibrated class's (card -> both -> host)."]

    def block(k: str) -> list[str]:
        out = []
        for kind, (sd, n) in sorted(table.get(k, {}).items()):
            out += [f"log_rel_sd_{kind} = {sd:.4f}", f"rows_{kind} = {n}", f"z_{kind} = {Z90:.4f}"]
        return out

    lines += block("neither") + [""]
    for k in CLASSES[1:]:
        if table.get(k):
            lines += [f"[class.{k}]", f"# {CLASS_TITLES[k]}", *block(k), ""]
    for r in res["rows"]:
        if r["log_error"] is None:
            continue
        lines += ["[[row]]", f"by = {toml_string(r['by'])}", f"class = {toml_string(r['klass'])}",
                  f"kind = {toml_string(r['kind'])}", f"host = {toml_string(r['host'])}",
                  f"card = {toml_string(r['card'])}", f"scenario = {toml_string(r['scenario'])}",
                  f"row = {toml_string(r['row'])}", f"measured = {r['measured']:.6g}",
                  f"predicted = {r['predicted']:.6g}", f"log_error = {r['log_error']:+.4f}",
                  f"param_sd = {r['param_sd']:.4f}", ""]
    return "\n".join(lines)


def recorded_rows() -> list[dict[str, Any]]:
    """The cross-validation rows `sdbench calibrate --model-error` recorded in ``data/model-error.toml``, as
    :func:`run_plans` makes them (the parameters' range rebuilt from its recorded σ): what plain ``sdbench
    validate`` reports as the cross-validated group without running it again."""
    import tomllib

    from . import profiles
    from .population import MODEL_ERROR_FILE

    try:
        doc = tomllib.loads((profiles.DATA / MODEL_ERROR_FILE).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return []
    out = []
    for r in doc.get("row", []):
        try:
            pred, meas, sd = float(r["predicted"]), float(r["measured"]), float(r["param_sd"])
            out.append({"by": str(r["by"]), "klass": str(r["class"]), "kind": str(r["kind"]), "host": str(r["host"]),
                        "card": str(r["card"]), "scenario": str(r["scenario"]), "row": str(r["row"]),
                        "measured": meas, "predicted": pred, "error": (pred - meas) / meas,
                        "log_error": math.log(pred / meas), "param_sd": sd,
                        "range": [pred * math.exp(-Z90 * sd), pred * math.exp(Z90 * sd)]})
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            continue  # a row of an older format: left out
    return out
