"""Calibrate a card profile from a user's own measurements: ``sdbench calibrate --from FILE --setup SCENARIO``.

The measurements are read by the importers (ESP-IDF perf_benchmark log, SdFat bench output, fio JSON, sdbench
results JSON) or, as a CSV of ``row,value,unit[,runs]`` (docs/calibration.md), here.  Their rows are matched
by label to the rows the scenario (the setup they were measured on) emits.

Which card fields a matched row can tell is data, declared below: :data:`ROW_KINDS` names the *mechanism* of
a scenario's rows (a one-sector read, a multi-block write, an erase...), and :data:`FIELD_SOURCES` says, field
by field in order, which mechanism fits it; each mechanism fits one field at most, so a multi-block read fits
``read_access_us`` when no one-sector read is there, and ``read_block_gap_us`` when one is.  Within a
mechanism the raw-level rows are used when there are any, else the file-level ones; every other matched row is
*compared* (its prediction is reported, the fit does not use it).

The fit is a :class:`~sdbench.calibrate.fit_groups.FitGroup` built in memory: one scenario, one param per
fitted field (starting at its population value), solved field by field
(:class:`~sdbench.calibrate.fit_groups.FitStep`: a 1-D root of the mean relative error of its rows, with the
scenario cut to the parts those rows need), then the standard deviations from the Jacobian at the solution, as
for the shipped groups.  Fields no matched row
tells stay at their *population* value (:func:`population`).  Those that at least two shipped cards fitted are
left out of the profile, which says ``timing_from = "population"``: it loads them as the shipped cards that
carry that flag do, and the ranges of a run with it span the values the fitted cards have (sdbench.population).
"""
from __future__ import annotations

import csv
import math
import re
import textwrap
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import profiles
from .calibrate import (FITTED_BY, SD_AT_BOUND, FitGroup, FitStep, Measurement, Param, Uncertainty, describe_sd,
                        fit_group, profile_text, sd_cells)
from .errors import ConfigError, SdbenchError
from .importers import parse_text, read_text
from .importers.validate import printable
from .media.sim.card import NOT_TIMING, CardProfile
from .options import from_mapping
from .output_files import check_profile_output, write_atomically
from .protocols import run_scenario
from .records import Row
from .scenarios import Scenario
from .scenarios import load as load_scenario
from .stack.cardpop import card_population
from .stack.sd import fitted_values, spread_values
from .workloads.espidf import PART_NAMES
from .workloads.registry import protocol

# ---- which rows tell which card fields (data) -----------------------------------------------------------------

SINGLE_READ = "one-sector read"
MULTI_READ = "multi-block read"
SINGLE_WRITE = "one-sector write"
ONE_BLOCK_MULTI_WRITE = "one-block multi-block write"
MULTI_WRITE = "multi-block write"
ERASE = "erase"
INIT = "card initialisation"
#: the mechanisms a row may have ("" = none a card field alone explains: the row is compared only)
MECHANISMS = (SINGLE_READ, MULTI_READ, SINGLE_WRITE, ONE_BLOCK_MULTI_WRITE, MULTI_WRITE, ERASE, INIT)


@dataclass(frozen=True)
class RowKind:
    """The rows of a protocol whose label matches ``label`` (and whose op is ``op``, if given, and that move at
    most ``max_bytes`` per call, if given): what they time and at which level."""

    protocol: str                 # the protocol that emits them ("*": any)
    label: str                    # regular expression the whole label matches
    mechanism: str                # one of MECHANISMS, or "" (compared only)
    level: str                    # "raw" (sector I/O, card init) or "file" (through a filesystem)
    what: str                     # for the report
    op: str = ""
    max_bytes: int = 0


#: first match wins: a protocol's own kinds, then the generic ones by op and size
ROW_KINDS: tuple[RowKind, ...] = (
    # ESP-IDF perf_benchmark (workloads/espidf.py): the SD raw rows move the whole target in one command; what
    # the FAT and LittleFS rows issue is what the simulated stack issues for them (`sdbench run -f table`)
    RowKind("espidf", r"SD raw read( \[\d+ kB label\])?", MULTI_READ, "raw", "one CMD18 of the target size"),
    RowKind("espidf", r"SD raw write( \[\d+ kB label\])?", MULTI_WRITE, "raw", "one CMD25 of the target size"),
    RowKind("espidf", r"SD FATFS( \(new file\))?: read tiny size", SINGLE_READ, "file", "255 B: one CMD17"),
    RowKind("espidf", r"SD FATFS \(new file\): write tiny size", "", "file",
            "255 B stay in FatFs' buffer until the untimed close: one FAT sector read"),
    RowKind("espidf", r"SD FATFS: write tiny size", SINGLE_WRITE, "file", "255 B appended: a CMD24 every other call"),
    RowKind("espidf", r"SD FATFS: (read|write) (more|less) than target size", "", "file",
            "appends across sectors: one-sector commands by the hundred, and a multi-block one"),
    RowKind("espidf", r"SD FATFS( \(new file\))?: read (target|more than target|less than target) size", MULTI_READ,
            "file", "a file read in CMD18s"),
    RowKind("espidf", r"SD FATFS( \(new file\))?: write (target|more than target|less than target) size",
            MULTI_WRITE, "file", "a file written in CMD25s"),
    RowKind("espidf", r"SD LittleFS( \(new file\))?: write .*", ERASE, "file",
            "esp_littlefs erases every block (an ERASE each) before it programs it"),
    RowKind("espidf", r"SD LittleFS( \(new file\))?: read .*", SINGLE_READ, "file", "LittleFS reads 512 B blocks"),
    RowKind("espidf", r".*", "", "file", "not the SD card's rows"),
    # Propeller 2 SD benchmark (workloads/p2.py), as the shipped fit group `p2` fits it: the driver writes raw
    # sectors with CMD25, one sector too
    RowKind("p2", r"Mount", INIT, "raw", "card power-up (ACMD41 loop) and the FAT mount"),
    RowKind("p2", r"Raw Read 1x512B", SINGLE_READ, "raw", "one sector (CMD17)"),
    RowKind("p2", r"Raw Read 64x \(32KB\)", MULTI_READ, "raw", "64 sectors in one CMD18"),
    RowKind("p2", r"Raw Write 1x512B", ONE_BLOCK_MULTI_WRITE, "raw", "one sector in a CMD25"),
    RowKind("p2", r"Raw Write 64x \(32KB\)", MULTI_WRITE, "raw", "64 sectors in one CMD25"),
    RowKind("p2", r"File Read.*", SINGLE_READ, "file", "a file read one sector per CMD17"),
    RowKind("p2", r"File Write.*", SINGLE_WRITE, "file", "a file written one sector per CMD24"),
    RowKind("p2", r".*", "", "file", "the driver's own work (File Open): no card field"),
    # USB mass-storage bridge (workloads/usbmsc.py)
    RowKind("usbmsc", r"USB MSC single-sector read", SINGLE_READ, "raw", "one sector through the bridge"),
    RowKind("usbmsc", r"USB MSC single-sector write", SINGLE_WRITE, "raw", "one sector through the bridge"),
    RowKind("usbmsc", r"USB MSC multi-sector read", MULTI_READ, "raw", "multi-block reads through the bridge"),
    RowKind("usbmsc", r"USB MSC (multi-sector|background) write", MULTI_WRITE, "raw",
            "multi-block writes through the bridge"),
    # sector I/O in chunks (workloads/rawseq.py)
    RowKind("rawseq", r".*", MULTI_READ, "raw", "sector chunks read", op="read"),
    RowKind("rawseq", r".*", MULTI_WRITE, "raw", "sector chunks written", op="write"),
    # any other protocol: by the row's op and size
    RowKind("*", r".*", INIT, "file", "a mount with the card's power-up", op="mount"),
    RowKind("*", r".*", SINGLE_READ, "file", "reads of one sector per call", op="read", max_bytes=512),
    RowKind("*", r".*", MULTI_READ, "file", "reads", op="read"),
    RowKind("*", r".*", SINGLE_WRITE, "file", "writes of one sector per call", op="write", max_bytes=512),
    RowKind("*", r".*", MULTI_WRITE, "file", "writes", op="write"),
    RowKind("*", r".*", "", "file", "no card field alone explains it"),
)

#: card field -> the mechanisms that may fit it, in order of preference; fields are assigned in this order and
#: each mechanism fits one field at most
FIELD_SOURCES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("read_access_us", (SINGLE_READ, MULTI_READ)),
    ("write_busy_end_us", (ONE_BLOCK_MULTI_WRITE, MULTI_WRITE)),
    ("write_busy_single_us", (SINGLE_WRITE,)),
    ("init_ms", (INIT,)),
    ("read_block_gap_us", (MULTI_READ,)),     # only when a one-sector read fits the access
    ("write_busy_block_us", (MULTI_WRITE,)),  # only when a one-block CMD25 fits the end busy
    ("erase_busy_us", (ERASE,)),
)

#: search bounds of the fitted fields, in their unit (as the shipped fit groups bound them)
FIELD_BOUNDS: dict[str, tuple[float, float]] = {
    "read_access_us": (0.0, 20000.0), "read_block_gap_us": (0.0, 2000.0), "write_busy_single_us": (0.0, 100000.0),
    "write_busy_end_us": (0.0, 100000.0), "write_busy_block_us": (0.0, 100000.0), "init_ms": (0.0, 5000.0),
    "erase_busy_us": (0.0, 100000.0),
}

#: card fields that are not timing: never from the population (the scenario's card, or what the command says)
NOT_POPULATION = NOT_TIMING
#: timed calls per row while the fit searches (the runs of the measurements come back for the last steps)
SEARCH_RUNS = 10
#: units of the measurements CSV (docs/calibration.md)
CSV_UNITS = ("ms", "us", "µs", "KiB/s", "MB/s", "MiB/s")
CSV_COLUMNS = ("row", "value", "unit")


def kind_of(protocol_name: str, row: Row) -> RowKind:
    """The first kind of ROW_KINDS that ``row`` (as the scenario emits it) belongs to."""
    for k in ROW_KINDS:
        if k.protocol not in (protocol_name, "*") or (k.op and k.op != row.op):
            continue
        if k.max_bytes and not 0 < row.bytes <= k.max_bytes:
            continue
        if re.fullmatch(k.label, row.label):
            return k
    raise AssertionError("ROW_KINDS ends with a kind every row matches")


def assign_fields(mechanisms: dict[str, list[str]]) -> dict[str, str]:
    """field -> mechanism that fits it, from the mechanisms that have rows (FIELD_SOURCES, in order)."""
    used: set[str] = set()
    out = {}
    for name, sources in FIELD_SOURCES:
        for mech in sources:
            if mech in mechanisms and mech not in used:
                out[name] = mech
                used.add(mech)
                break
    return out


# ---- the population ---------------------------------------------------------------------------------------

def population() -> tuple[dict[str, Any], tuple[str, ...]]:
    """(timing field -> its population value, the shipped fitted card profiles): each field's median over the
    cards that fitted it, what a profile with ``timing_from = "population"`` loads (:mod:`sdbench.stack.cardpop`);
    a field no card fitted has none (it keeps the scenario card's value)."""
    try:
        pop = card_population()
    except ConfigError as e:
        raise SdbenchError(str(e)) from None
    return dict(pop.medians), pop.cards


# ---- reading the measurements ---------------------------------------------------------------------------

@dataclass(frozen=True)
class UserRow:
    """One measured row of the user's file."""

    label: str
    value: float
    unit: str
    runs: int = 0           # 0: not given
    bytes: int = 0          # bytes per call, 0: not given
    text: str = ""          # the value as written (its rounding)


def _csv_header(text: str) -> list[str] | None:
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            cols = [c.strip().lower() for c in next(csv.reader([line]))]
        except csv.Error:  # e.g. a cell beyond the csv module's field limit: not this CSV
            return None
        return cols if tuple(cols[:3]) == CSV_COLUMNS else None
    return None


def read_csv(text: str, name: str) -> list[UserRow]:
    """The measurements CSV: a header ``row,value,unit[,runs]``, then one row per line; lines starting with #
    are comments. Every value is a figure in VALUE_RANGE in one of CSV_UNITS."""
    try:
        return _read_csv(text, name)
    except csv.Error as e:  # e.g. a cell beyond the csv module's field limit
        raise SdbenchError(f"{name}: not CSV this reads ({e})") from None


#: the figures a measurements CSV may hold (in any of CSV_UNITS): beyond them a value is a typo or a unit
#: mix-up, and the fit would run into overflow instead of saying so
VALUE_RANGE = (1e-6, 1e12)


def _read_csv(text: str, name: str) -> list[UserRow]:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    reader = csv.reader(lines)
    header = [c.strip().lower() for c in next(reader)]
    extra = [c for c in header[3:] if c != "runs"]
    if extra or len(set(header)) != len(header):
        raise SdbenchError(f"{name}: columns are row,value,unit and optionally runs, got {','.join(header)[:80]}")
    out = []
    for i, cells in enumerate(reader, start=2):
        where = f"{name}: data line {i}"
        if len(cells) != len(header):
            raise SdbenchError(f"{where}: {len(cells)} cells for {len(header)} columns")
        rec = dict(zip(header, (c.strip() for c in cells)))
        if not rec["row"]:
            raise SdbenchError(f"{where}: the row label is empty")
        try:
            value = float(rec["value"])
        except ValueError:
            raise SdbenchError(f"{where}: value {printable(rec['value'])[:40]!r} is not a number") from None
        if not (math.isfinite(value) and value > 0):
            raise SdbenchError(f"{where}: value {rec['value'][:40]!r} is not a figure above 0")
        if not VALUE_RANGE[0] <= value <= VALUE_RANGE[1]:
            raise SdbenchError(f"{where}: value {rec['value'][:40]!r} is outside {VALUE_RANGE[0]:g} to "
                               f"{VALUE_RANGE[1]:g} (a typo, or the wrong unit?)")
        unit = rec["unit"]
        if unit not in CSV_UNITS:
            raise SdbenchError(f"{where}: unit {printable(unit)[:20]!r} is not one of {', '.join(CSV_UNITS)}")
        runs = 0
        if rec.get("runs"):
            if not re.fullmatch(r"[0-9]+", rec["runs"]) or not 1 <= int(rec["runs"]) <= 100_000:
                raise SdbenchError(f"{where}: runs {printable(rec['runs'])[:20]!r} is not a whole number from 1 "
                                   "to 100000")
            runs = int(rec["runs"])
        out.append(UserRow(rec["row"], value, unit, runs, 0, rec["value"]))
    if not out:
        raise SdbenchError(f"{name}: no rows under the header")
    return out


def read_measurements(path: Path) -> tuple[str, list[UserRow]]:
    """(format, rows) of a user's measurements file: the CSV format, or anything the importers read (as the
    mean time per call, ms). A label given twice is refused."""
    text = read_text(path)
    name = Path(path).name
    if _csv_header(text) is not None:
        fmt, rows = "csv", read_csv(text, printable(name))
    else:
        fmt, runs = parse_text(text, name=name)
        rows = [UserRow(r.label, r.time_ms, "ms", r.runs, r.bytes, repr(r.time_ms)) for run in runs for r in run.rows]
    seen: set[str] = set()
    for r in rows:
        if r.label in seen:
            raise SdbenchError(f"{printable(name)}: row {printable(r.label)[:60]!r} appears twice (one run per file)")
        seen.add(r.label)
    return fmt, rows


# ---- cutting a scenario to the rows a fit needs ---------------------------------------------------------------

def _espidf_restrict(sc: Scenario, labels: set[str]) -> list[str]:
    """The parts up to the last one a label needs, in protocol order (a part starts on the card the parts
    before it left); within that last part, the new-file mode only when no label needs the normal mode and no
    other filesystem part runs before it."""
    cfg = protocol("espidf").config_of(sc)

    def part_of(label: str) -> str | None:
        return next((p for p in cfg.parts if label == PART_NAMES[p] or label.startswith(PART_NAMES[p] + " ")
                     or label.startswith(PART_NAMES[p] + ":")), None)

    needed = {part_of(lb) for lb in labels} - {None}
    if not needed:
        return []
    last = max(cfg.parts.index(p) for p in needed)  # type: ignore[arg-type]
    keep = list(cfg.parts[:last + 1])
    out = [f"espidf.parts={keep!r}"]
    fs_parts = [p for p in keep if p in ("sd_fatfs", "sd_littlefs")]
    normal = any(part_of(lb) == keep[-1] and "(new file)" not in lb for lb in labels)
    if fs_parts == [keep[-1]] and not normal and "new_file" in cfg.sd_modes:
        out.append("espidf.sd_modes=['new_file']")
    return out


def _p2_restrict(sc: Scenario, labels: set[str]) -> list[str]:
    """The metrics up to the last one a label needs, in protocol order."""
    metrics = list(protocol("p2").config_of(sc).metrics)
    idx = [i for i, m in enumerate(metrics) if any(lb == m or lb.startswith(m + " ") for lb in labels)]
    return [f"p2.metrics={metrics[:max(idx) + 1]!r}"] if idx else []


#: protocol -> (scenario, labels) -> overrides that run only what those rows need (and all that precedes them)
RESTRICT: dict[str, Callable[[Scenario, set[str]], list[str]]] = {"espidf": _espidf_restrict, "p2": _p2_restrict}


def restrict_for(sc: Scenario, labels: set[str]) -> list[str]:
    hook = RESTRICT.get(sc.protocol)
    return hook(sc, labels) if hook else []


# ---- the fit --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Compared:
    """A matched row: measured and model figures, and the field it fits (None: compared only)."""

    label: str
    unit: str
    measured: float
    model: float
    kind: RowKind
    field: str | None

    @property
    def error(self) -> float:
        return (self.model - self.measured) / self.measured


@dataclass
class UserFit:
    """What `sdbench calibrate --from` found and writes."""

    card: str
    scenario: str
    source: str                                  # the measurements file, as shown
    fmt: str
    rows: list[Compared]                         # matched rows, in the scenario's order
    unmatched: list[tuple[str, str]]             # (label, why)
    not_measured: int                            # rows the scenario emits that the file lacks
    fitted: list[Uncertainty]
    population: dict[str, Any]                   # population fields written in the profile -> value
    held: dict[str, Any]                         # population fields left to timing_from = "population" -> value
    population_cards: tuple[str, ...]
    from_scenario: list[str]                     # non-timing fields from the scenario's card
    pinned: list[str]                            # fields the scenario's [sd.card_params] sets
    base_card: str
    runs: tuple[int, str]                        # (runs per row, where it comes from)
    capacity: tuple[int, str]
    table: dict[str, Any]
    evaluations: int
    text: str = ""

    @property
    def fitted_rows(self) -> list[Compared]:
        return [r for r in self.rows if r.field is not None]


def _unit_of(name: str) -> str:
    for suffix, unit in (("_us", "µs"), ("_ms", "ms"), ("_bytes", "B"), ("_us_per_kib", "µs/KiB")):
        if name.endswith(suffix):
            return unit
    return ""


def _scenario_card(sc: Scenario) -> tuple[str, CardProfile, dict[str, Any]]:
    """(card name, the card as the scenario loads it, the scenario's [sd.card_params]); SdbenchError when the
    scenario has no simulated SD card."""
    if not sc.sd or sc.sd.get("media") != "sim":
        raise SdbenchError(f"scenario {sc.name} has no simulated SD card ([sd] media = \"sim\"): there is no card "
                           "to calibrate")
    _, cfg = sc.media_config("sd")
    over = dict(cfg.card_params)
    if cfg.capacity_bytes:
        over["capacity_bytes"] = cfg.capacity_bytes
    card = profiles.load(CardProfile, "cards", cfg.card, over, sc.source_dir, what="card profile")
    return cfg.card, card, dict(cfg.card_params)


def _runs_choice(sc: Scenario, matched: list[tuple[UserRow, Row]], runs: int | None) -> tuple[int, str, str]:
    """(runs, why, override key) for the scenario's protocol runs option."""
    spec = protocol(sc.protocol)
    current = int(getattr(spec.config_of(sc), spec.runs_field))
    if runs is not None:
        return runs, "--runs", spec.runs_option
    given = {u.runs for u, _ in matched if u.runs}
    if len(given) == 1:
        return given.pop(), "the measured rows", spec.runs_option
    if given:
        return current, f"the scenario's (the measured rows differ: {', '.join(map(str, sorted(given)))})", \
            spec.runs_option
    return current, "the scenario's (the file gives none)", spec.runs_option


def calibrate_card(path: Path, setup: str, *, card: str, capacity_bytes: int | None = None,
                   runs: int | None = None, progress: Callable[[str], None] | None = None) -> UserFit:
    """Fit a card profile named ``card`` to the measurements in ``path``, taken on scenario ``setup``."""
    if "," in setup:
        raise SdbenchError(f"--setup {printable(setup)[:80]!r}: a scenario named with a comma is not supported "
                           "(rename the file)")
    fmt, user_rows = read_measurements(path)
    source = printable(Path(path).name)
    sc = load_scenario(setup)
    base_name, scen_card, pinned_params = _scenario_card(sc)
    if capacity_bytes is not None:
        try:
            from_mapping(CardProfile, {"capacity_bytes": capacity_bytes}, "--capacity-bytes")
        except ConfigError as e:
            raise SdbenchError(str(e)) from None
    # which rows the scenario emits (labels and sizes do not depend on the card's timing: one call per row)
    spec = protocol(sc.protocol)
    probe = run_scenario(load_scenario(setup, [f"{spec.runs_option}=1"]))
    emitted = {r.label: r for r in probe.rows}
    order = {label: i for i, label in enumerate(emitted)}
    matched: list[tuple[UserRow, Row]] = []
    unmatched: list[tuple[str, str]] = []
    for u in user_rows:
        model = emitted.get(u.label)
        if model is None:
            unmatched.append((u.label, f"not a row of {sc.name}"))
        elif not u.value > 0:
            unmatched.append((u.label, "its time is 0 in the file: no figure to fit"))
        elif u.bytes and model.bytes and u.bytes != model.bytes:
            unmatched.append((u.label, f"{u.bytes} B per call in the file, {model.bytes} B in {sc.name}"))
        else:
            matched.append((u, model))
    if not matched:
        if not user_rows:
            raise SdbenchError(f"{source} holds no rows")
        # a row whose label matches but whose figure cannot be fitted says why; otherwise the labels differ
        why = next(((lb, reason) for lb, reason in unmatched if not reason.startswith("not a row of")), None)
        if why is not None:
            raise SdbenchError(f"no row of {source} can be fitted: {printable(why[0])[:40]!r}: {why[1]}")
        shown = ", ".join(repr(printable(u.label)[:40]) for u in user_rows[:3])
        raise SdbenchError(f"no row of {source} matches a row of {sc.name} (the file has {len(user_rows)} rows, "
                           f"e.g. {shown}; `sdbench run {printable(setup)[:80]}` shows the scenario's)")
    matched.sort(key=lambda um: order[um[1].label])
    kinds = {u.label: kind_of(sc.protocol, model) for u, model in matched}
    # rows per mechanism: the raw-level ones when there are any, else the file-level ones
    levels: dict[str, dict[str, list[str]]] = {}
    for u, _ in matched:
        k = kinds[u.label]
        if k.mechanism:
            levels.setdefault(k.mechanism, {}).setdefault(k.level, []).append(u.label)
    by_mech = {m: lv.get("raw") or lv["file"] for m, lv in levels.items()}
    assigned = {f: m for f, m in assign_fields(by_mech).items() if f not in pinned_params}
    if not assigned:
        raise SdbenchError(f"none of the rows of {source} that match {sc.name} tells a card field "
                           f"(matched: {', '.join(printable(u.label)[:40] for u, _ in matched[:4])})")
    # the card every run starts from: population timing, the scenario card's other fields, the capacity
    pop, pop_names = population()
    pinned = sorted(pinned_params)
    cap = capacity_bytes or scen_card.capacity_bytes
    cap_from = "--capacity-bytes" if capacity_bytes else f"the scenario's card {base_name}"
    spread = spread_values()
    base: dict[str, Any] = {}
    population_fields: dict[str, Any] = {}
    held: dict[str, Any] = {}
    from_scenario: list[str] = []
    for f in fields(CardProfile):
        if f.name in ("name", "description", "timing_from", "speed_class", "uhs_bus", "uhs_modes", "fit_rel_sd",
                      "unfitted") or f.name in pinned_params:
            continue
        if f.name == "capacity_bytes":
            base[f.name] = cap
        elif f.name in pop:
            base[f.name] = pop[f.name]
            if f.name not in assigned:  # fitted from the rows; otherwise held (spread known) or written
                (held if f.name in spread else population_fields)[f.name] = pop[f.name]
        else:
            base[f.name] = getattr(scen_card, f.name)
            from_scenario.append(f.name)
    n_runs, runs_from, runs_key = _runs_choice(sc, matched, runs)
    common = [f"{runs_key}={n_runs}", f"sd.capacity_bytes={cap}"]
    search = (f"{runs_key}={SEARCH_RUNS}",) if n_runs > SEARCH_RUNS else ()
    all_labels = {u.label for u, _ in matched}
    params, steps = [], []
    for name, mech in sorted(assigned.items(), key=lambda fm: max(order[lb] for lb in by_mech[fm[1]])):
        lo, hi = FIELD_BOUNDS[name]
        start = min(max(float(pop.get(name, getattr(CardProfile(), name))), lo), hi)
        params.append(Param(f"card:{setup}", name, lo, hi, start=start))
        labels = tuple(by_mech[mech])
        steps.append(FitStep(len(params) - 1, labels, tuple(common + restrict_for(sc, set(labels)))))
    group = FitGroup(card, f"{card} from {source}", (setup,), "", tuple(params),
                     restrict=tuple(common + restrict_for(sc, all_labels)),
                     rows=tuple((setup, u.label) for u, _ in matched), base={setup: base}, steps=tuple(steps),
                     search=search)
    meas = [Measurement(setup, u.label, model.op, model.bytes, u.runs, u.value, u.unit, "train", source, "",
                        u.text) for u, model in matched]
    try:
        res = fit_group(group, meas, progress)
    except (np.linalg.LinAlgError, FloatingPointError, OverflowError) as e:
        raise SdbenchError(f"the fit failed on the figures of {source} ({e}): check their units") from None
    field_of = {lb: f for f, m in assigned.items() for lb in by_mech[m]}
    compared = [Compared(u.label, u.unit, m, p, kinds[u.label], field_of.get(u.label))
                for (u, _), (_, _, m, p) in zip(matched, res.residuals)]
    solved = res.card_params.get(setup, {})
    table: dict[str, Any] = {"name": card, "description": "", "speed_class": "", "uhs_bus": ""}
    if held:
        table["timing_from"] = "population"
    for f in fields(CardProfile):
        if f.name in held:
            continue  # loaded from the population (timing_from), as the fit had it
        if f.name in base:
            table[f.name] = solved.get(f.name, base[f.name])
        elif f.name in pinned_params or f.name == "uhs_modes":  # the bus modes it was measured in, as the setup's
            table[f.name] = getattr(scen_card, f.name)
    table["description"] = (f"a user's card, calibrated by sdbench calibrate --from {source} on {sc.name}: "
                            f"{', '.join(sorted(assigned))} fitted, other timings the population's")
    table["fit_rel_sd"] = {u.name: u.rel_sd for u in res.uncertainty if u.rel_sd is not None}
    try:
        from_mapping(CardProfile, {**table, **held}, f"card profile {card}")
    except ConfigError as e:
        raise SdbenchError(f"the calibrated card does not make a valid profile: {e}") from None
    out = UserFit(card, sc.name, source, fmt, compared, unmatched, len(emitted) - len(matched), res.uncertainty,
                  population_fields, held, pop_names, from_scenario, pinned, base_name, (n_runs, runs_from),
                  (cap, cap_from), table, res.evaluations)
    out.text = profile_text("card", table, report_lines(out, setup))
    return out


# ---- the report ---------------------------------------------------------------------------------------------

def _fig(v: float, unit: str) -> str:
    return f"{v:.4g} {unit}"


def _wrap(head: str, items: list[str], width: int = 112) -> list[str]:
    text = head + ", ".join(items)
    return textwrap.wrap(text, width=width, subsequent_indent="    ", break_on_hyphens=False) or [head]


def report_lines(fit: UserFit, setup: str) -> list[str]:
    """The header of the calibrated profile: the fit report (without the leading '# ')."""
    out = [f"{FITTED_BY} --from {fit.source} --setup {printable(setup)}` (a user's card; docs/calibration.md)"]
    out.append(f"  measurements: {fit.source} ({fit.fmt}): {len(fit.rows)} rows matched, {len(fit.unmatched)} not; "
               f"runs per row {fit.runs[0]} (from {fit.runs[1]})")
    out.append("  fitted rows: measured, model (error) -> the field they fit")
    out += [f"    {r.label}: {_fig(r.measured, r.unit)}, {_fig(r.model, r.unit)} ({r.error * 100:+.1f} %) -> {r.field}"
            for r in fit.fitted_rows]
    others = [r for r in fit.rows if r.field is None]
    if others:
        out.append("  compared rows (matched, fit no field): measured, model (error)")
        out += [f"    {r.label}: {_fig(r.measured, r.unit)}, {_fig(r.model, r.unit)} ({r.error * 100:+.1f} %)"
                for r in others]
    if fit.unmatched:
        out.append("  rows not matched:")
        out += [f"    {printable(label)[:60]}: {why}" for label, why in fit.unmatched]
    out.append("  fitted fields: value, σ (source)")
    for u in fit.fitted:
        out.append(f"    {u.name} = {u.value:.6g} {_unit_of(u.name)}: {describe_sd(u)}")
    if fit.held:
        out += _wrap('  held at the population\'s value (timing_from = "population": the median of the shipped cards '
                     "that fitted each; a run's ranges span their values): ",
                     [f"{n} {_value(v)} {_unit_of(n)} ({_span(n)})" for n, v in sorted(fit.held.items())])
    out += _wrap(f"  population (median of the {len(fit.population_cards)} shipped fitted cards; fewer than two "
                 "fitted each, no spread is known): ", [n + (f" ({_one_card(n)})" if _one_card(n) else "")
                                                        for n in sorted(fit.population)])
    out += _wrap(f"  from the scenario's card {fit.base_card}: ", fit.from_scenario)
    if fit.pinned:
        out += _wrap("  set by the scenario's [sd.card_params]: ", fit.pinned)
    out.append(f"  capacity_bytes: {fit.capacity[0]} (from {fit.capacity[1]})")
    return out


def markdown(fit: UserFit) -> list[str]:
    """The report `sdbench calibrate --from` prints."""
    out = [f"### card {fit.card} from {fit.source} on {fit.scenario}: {fit.evaluations} simulations", "",
           f"{len(fit.rows)} rows matched, {len(fit.unmatched)} not matched, {fit.not_measured} rows of the scenario "
           f"not in the file; runs per row {fit.runs[0]} (from {fit.runs[1]}).", "",
           "| row | measured | model | error | fits |", "|---|---:|---:|---:|---|"]
    out += [f"| {r.label} | {_fig(r.measured, r.unit)} | {_fig(r.model, r.unit)} | {r.error * 100:+.1f} % | "
            f"{r.field or 'compared'} |" for r in fit.rows]
    if fit.unmatched:
        out += ["", "| row not matched | why |", "|---|---|"]
        out += [f"| {printable(label)[:60]} | {why} |" for label, why in fit.unmatched]
    out += ["", "| field | value | σ / value | σ from |", "|---|---:|---:|---|"]
    for u in fit.fitted:
        sd, source = sd_cells(u)
        out.append(f"| {u.name} | {u.value:.6g} {_unit_of(u.name)} | {sd} | {source} |")
    out += [f"| {n} | {_value(v)} {_unit_of(n)} | population | spans {_span(n)} |" for n, v in sorted(fit.held.items())]
    for n, v in sorted(fit.population.items()):
        one = _one_card(n)
        out.append(f"| {n} | {_value(v)} {_unit_of(n)} | population |{' ' + one if one else ''} |")
    return out


#: a fitted row further than this from its measured figure is said to the user (the fit did not reach it)
FIT_WARN_ERROR = 0.10


def fit_warnings(fit: UserFit) -> list[str]:
    """What a user should know before trusting the profile: fields the fit left at a bound of their range, and
    fitted rows the model does not reach."""
    out = [f"{u.name} stopped at a bound of its range ({u.value:g} {_unit_of(u.name)}): the rows do not fix it"
           for u in fit.fitted if u.status == SD_AT_BOUND]
    far = [r for r in fit.fitted_rows if abs(r.error) > FIT_WARN_ERROR]
    if far:
        worst = max(far, key=lambda r: abs(r.error))
        out.append(f"{len(far)} of {len(fit.fitted_rows)} fitted rows are more than {FIT_WARN_ERROR:.0%} from the "
                   f"measured figure (worst: {printable(worst.label)[:60]}, {worst.error * 100:+.0f} %): the setup "
                   f"or the runs per row may not be those of the measurement")
    return out


def _one_card(name: str) -> str:
    """For a population field that one shipped card fitted: "the one card that fitted it", else "": the value
    is that card's (as every profile that takes it from the population has it), and no range spans it."""
    return "the one card that fitted it" if len(fitted_values().get(name, ())) == 1 else ""


def _span(name: str) -> str:
    """The values the shipped cards that fitted field ``name`` have: "817.6–2150 µs over 4 cards"."""
    v = spread_values()[name]
    return f"{v[0]:.4g}–{v[-1]:.4g} {_unit_of(name)} over {len(v)} cards"


def _value(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def check_output(out: Path, force: bool) -> None:
    """Refuse, before any work, an output that is not a .toml file, exists (without --force) or cannot be
    written."""
    check_profile_output(out, force, "-o")


def write(fit: UserFit, out: Path, force: bool) -> Path:
    """Write the profile atomically (refusing an existing file without ``force``, as check_output)."""
    check_output(out, force)
    write_atomically(out, fit.text)
    return out


__all__ = ["FIELD_SOURCES", "ROW_KINDS", "RowKind", "UserFit", "assign_fields", "calibrate_card", "check_output",
           "markdown", "population", "read_csv", "read_measurements", "write"]
