"""The tables the CLI and the HTML report show: runs, rows of a run, comparisons."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..compare import FIGURE_OP, Comparison, Metric, cv
from ..media.sim.card import CardProfile
from ..options import option_info
from ..records import Row, RunRecord
from ..report_text import categories
from ..store import StoredRun
from ..store.api import device_of
from .text import DASH, Table, num, pct

def runs_table(runs: Sequence[StoredRun]) -> Table:
    t = Table(["id", "created (UTC)", "status", "source", "scenario", "protocol", "clock", "rows", "device",
               "host"], right={0, 7})
    for r in runs:
        t.add([str(r.id), r.created_utc[:19].replace("T", " "), r.status, r.source, r.scenario, r.protocol or DASH,
               r.clock, str(r.rows), r.device_name or DASH, str(r.host.get("hostname", "")) or DASH])
    return t


def range_cell(r: Row) -> str:
    """A row's range of its mean time, ``lo–hi`` ms (10th–90th percentile), or a dash."""
    rng = r.time_ms_range
    return DASH if rng is None else f"{num(rng[0])}–{num(rng[1])}"


def rows_table(rec: RunRecord, title: str = "") -> Table:
    cats = categories(rec)
    ranged = any(r.time_ms_range is not None for r in rec.rows)
    head = ["label", "op", "bytes", "runs", "mean ms", *(["range ms"] if ranged else []), "median ms", "min ms",
            "max ms", "CV", "MiB/s", "reported"]
    head += [f"{c} ms" for c in cats]
    t = Table(head, right=set(range(2, len(head))) - {head.index("reported")}, title=title,
              wraps={head.index(h) for h in ("bytes", "range ms") if h in head})
    for r in rec.rows:
        reported = DASH if r.unit == "ms" and r.value is None else f"{num(r.reported_value, 2)} {r.unit}"
        size = str(r.bytes) if r.reported_bytes is None else f"{r.bytes} ({r.reported_bytes} printed)"
        cells = [r.label, r.op, size, str(r.runs), num(r.time_ms), *([range_cell(r)] if ranged else []),
                 num(r.time_ms_median), num(r.time_ms_min), num(r.time_ms_max), pct(cv(r)),
                 num(r.mib_s) if r.bytes else DASH, reported]
        cells += [num(r.breakdown_ms.get(c)) for c in cats]
        t.add(cells)
    return t


def comparison_table(cmp: Comparison) -> Table:
    head = ["label"]
    for i, name in enumerate(cmp.names):
        head += [f"{name} ms", f"{name} MiB/s"]
        if i:
            head += [f"{name} speed ×", f"{name} verdict"]
    t = Table(head, right=set(range(1, len(head))))
    for line in cmp.lines:
        cells = [line.label]
        for i, c in enumerate(line.cells):
            cells += [_time_cell(c.row), num(c.row.mib_s) if c.row and c.row.bytes else DASH]
            if i:
                cells += [num(c.speed_x, 2) if c.speed_x is not None else DASH,
                          c.test.short() if c.test else DASH]
        t.add(cells)
    t.right -= {j for j, h in enumerate(head) if h.endswith(" verdict")}
    return t


def _time_cell(row: Row | None) -> str:
    """A row's time in a comparison; a figure row (a logger's buffer, records lost, ...) shows its figure and unit."""
    if row is None:
        return DASH
    if row.op == FIGURE_OP:
        return f"{num(row.reported_value)} {row.unit}"
    return num(row.time_ms)


#: beyond this many runs, tables with a column group per run would not fit a page: they go long (a row per run)
WIDE_RUNS = 4


def comparison_table_long(cmp: Comparison) -> Table:
    """The comparison with a row per label and run (for many runs, e.g. a sweep): width stays the same."""
    t = Table(["label", "run", "ms", "MiB/s", "speed ×", "verdict"], right={2, 3, 4})
    for line in cmp.lines:
        for i, c in enumerate(line.cells):
            t.add([line.label if i == 0 else "", cmp.names[i], _time_cell(c.row),
                   num(c.row.mib_s) if c.row and c.row.bytes else DASH,
                   num(c.speed_x, 2) if c.speed_x is not None else DASH, c.test.short() if c.test else DASH])
    return t


def card_table_long(names: Sequence[str], metrics: Sequence[Metric]) -> Table:
    """Best per metric with a row per metric: the best run and its figure, the worst beside it (many runs)."""
    t = Table(["metric", "unit", "best run", "best", "worst run", "worst"], right={3, 5})
    for m in metrics:
        digits = 0 if m.unit in ("IOPS",) else 3 if m.unit in ("ms", "MiB/s", "MB/s") else 2
        vals = [(v, i) for i, v in enumerate(m.values) if v is not None]
        if m.best is None or not vals:
            t.add([m.label, m.unit, DASH, DASH, DASH, DASH])
            continue
        worst = max(vals) if m.best == min(vals)[1] else min(vals)
        t.add([m.label, m.unit, names[m.best], num(m.values[m.best], digits), names[worst[1]], num(worst[0], digits)])
    return t


def card_table_view(names: Sequence[str], metrics: Sequence[Metric]) -> Table:
    t = Table(["metric", "unit", *names], right=set(range(2, 2 + len(names))))
    for r, m in enumerate(metrics):
        digits = 0 if m.unit in ("IOPS",) else 3 if m.unit in ("ms", "MiB/s", "MB/s") else 2
        t.add([m.label, m.unit, *(num(v, digits) for v in m.values)])
        if m.best is not None:
            t.marked.add((r, 2 + m.best))
    return t


def run_summary(rid: int | None, info: StoredRun | None, rec: RunRecord) -> list[tuple[str, str]]:
    """Key facts of a run as (name, value) pairs."""
    out = []
    if rid is not None:
        out.append(("run", str(rid)))
    out += [("scenario", rec.scenario), ("protocol", rec.protocol or DASH), ("source", rec.source),
            ("clock", "virtual (simulated)" if rec.clock == "virtual" else "wall"),
            ("seed", DASH if rec.seed is None else str(rec.seed)), ("rows", str(len(rec.rows)))]
    if info is not None:
        out += [("status", info.status), ("stored (UTC)", info.created_utc[:19].replace("T", " ")),
                ("host", ", ".join(f"{k}={v}" for k, v in info.host.items()))]
        if info.sweep_id:
            out.append(("sweep", info.sweep_id))
    dev = device_of(rec.metadata)
    if isinstance(dev, dict) and dev:
        out.append(("device", ", ".join(f"{k}={v}" for k, v in dev.items() if not isinstance(v, dict))))
    for k in ("imported_from", "created_utc", "sdbench_version"):
        if k in rec.metadata:
            out.append((k.replace("_", " "), str(rec.metadata[k])))
    rng = range_summary(rec.metadata.get("range"))
    if rng:
        out.append(("range", rng))
    return out


def range_summary(info: object) -> str:
    """What a run's ranges span (its ``metadata["range"]``), in a line; "" when the run says nothing."""
    if not isinstance(info, dict):
        return ""
    pct_ = info.get("percentiles")
    band = f"{pct_[0]}–{pct_[1]} %" if isinstance(pct_, list) and len(pct_) == 2 else "10–90 %"
    method = info.get("method")
    runs = info.get("runs") if isinstance(info.get("runs"), dict) else {}
    at = f", members at {runs['option']} = {runs['members']}" if "option" in runs and "members" in runs else ""
    sd = info.get("model_log_sd")
    z = info.get("model_z") if isinstance(info.get("model_z"), dict) else {}
    model = ("model error (σ " + ", ".join(f"{k} {v * 100:.0f} %" + (f" at ±{z[k]:.2f} σ" if k in z else "")
                                          for k, v in sd.items()) + " in log)"
             if isinstance(sd, dict) and sd else "")
    if method == "population":
        return (f"{band} over {info.get('members', '?')} shipped fitted card profiles (the scenario's card "
                f"{info.get('card', '?')} is uncalibrated){at}" + (f", with the {model}" if model else ""))
    if method == "fit":
        varied = info.get("fit_rel_sd") if isinstance(info.get("fit_rel_sd"), dict) else {}
        held = info.get("population_fields") if isinstance(info.get("population_fields"), dict) else {}
        what = f"the fit uncertainty of {', '.join(varied)}" if varied else ""
        if held:
            span = ", ".join(f"{f} ({_span(f, v)})" for f, v in held.items())
            what = (f"{what} and " if what else "") + f"the fitted cards' values of {span}, which no train row " \
                                                      f"of the card measures"
        return (f"{band} over {info.get('members', '?')} draws from {what}{at}"
                + (f", with the {model}" if model else ""))
    if method == "model-error" and model:
        return f"{band} of the {model} alone ({info.get('reason', 'nothing else to vary')})"
    return f"none: {info.get('reason', 'not computed')}"


def _span(name: str, v: object) -> str:
    """``[low, high]`` of card field ``name`` (``range.population_fields``) as text, in the unit the card profile
    declares for it: "817.6–2150 µs"."""
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
        unit = next((o.unit for o in option_info(CardProfile) if o.name == name), "")
        return f"{v[0]:.4g}–{v[1]:.4g} {unit}".rstrip()
    return "?"


def flatten(d: object, prefix: str = "") -> list[tuple[str, str]]:
    """Nested stack metadata as ``a.b.c = value`` pairs."""
    if isinstance(d, dict):
        out = []
        for k, v in d.items():
            out += flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out or [(prefix, "{}")]
    return [(prefix, str(d))]


def _subtrees(d: object, prefix: str = "") -> dict[str, dict[str, Any]]:
    """Every non-empty table of ``d`` by its dotted path."""
    out: dict[str, dict[str, Any]] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out[path] = v
                out.update(_subtrees(v, path))
    return out


def copies(stacks: Sequence[object]) -> set[str]:
    """Paths of tables that repeat another table of the same name in every stack: the builder records the card
    both as ``sd.card`` and, inside the device it built, as ``sd.device.card``; the shorter path is kept."""
    trees = [_subtrees(s) for s in stacks]
    if not trees:
        return set()
    common = [p for p in trees[0] if all(p in t for t in trees[1:])]
    common.sort(key=lambda p: (p.count("."), p))
    dropped: set[str] = set()
    for i, p in enumerate(common):
        if any(p.startswith(d + ".") for d in dropped):
            continue
        name = p.rsplit(".", 1)[-1]
        for q in common[:i]:
            if q not in dropped and q.rsplit(".", 1)[-1] == name and not p.startswith(q + ".") \
                    and all(t[p] == t[q] for t in trees):
                dropped.add(p)
                break
    return dropped


def stack_fields(stacks: Sequence[object]) -> list[dict[str, str]]:
    """Each stack flattened to ``path -> value``, without the tables that only repeat another (:func:`copies`)."""
    gone = copies(stacks)
    return [{k: v for k, v in flatten(s) if not any(k == g or k.startswith(g + ".") for g in gone)}
            for s in stacks]


def stack_tree(d: object) -> list[tuple[str, object]]:
    """Nested stack metadata as (key, text) and (key, subtree) pairs, for a tree the reader opens as needed."""
    if not isinstance(d, dict):
        return [("", str(d))]
    out: list[tuple[str, object]] = []
    for k, v in d.items():
        out.append((str(k), stack_tree(v) if isinstance(v, dict) and v else ("{}" if isinstance(v, dict) else str(v))))
    return out


def stack_diff_table(names: Sequence[str], stacks: Sequence[object]) -> Table | None:
    """The flattened stack fields whose values differ between runs, a column per run; None when all agree."""
    flat = stack_fields(stacks)  # without the copies (sd.device.card repeats sd.card)
    keys = sorted({k for f in flat for k in f})
    wide = len(names) <= WIDE_RUNS
    t = Table(["field", *names] if wide else ["field", "run", "value"])
    for k in keys:
        vals = [f.get(k, DASH) for f in flat]
        if len(set(vals)) > 1:
            shown = [v if len(v) <= 60 else v[:57] + "..." for v in vals]
            if wide:
                t.add([k, *shown])
            else:  # many runs (a sweep): a row per run
                t.rows += [[k if i == 0 else "", n, v] for i, (n, v) in enumerate(zip(names, shown))]
    return t if t.rows else None
