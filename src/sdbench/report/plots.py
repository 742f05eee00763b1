"""Report plots with matplotlib's object API (no pyplot, no display: safe headless).

Each function returns a :class:`matplotlib.figure.Figure` or None when the
runs hold nothing to draw; :func:`svg` and :func:`save` render one.
"""
from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from pathlib import Path

from matplotlib import rc_context
from matplotlib.figure import Figure

from ..compare import FIGURE_OP
from ..records import Row, RunRecord
from .tables import categories
from .text import size_text

BAR_H_IN = 0.22            # height per bar, inches
WIDTH_IN = 10.0
PNG_DPI = 120
CATEGORY_COLOURS = {"host": "#4e79a7", "rtos": "#9c755f", "usb": "#b07aa1", "bus": "#f28e2b", "card": "#e15759",
                    "flash": "#76b7b2", "fs": "#59a14f", "other": "#bab0ac"}


def _speed(row: Row) -> float | None:
    return row.mib_s if row.bytes and row.mib_s > 0 else None


def bars(runs: Sequence[tuple[str, RunRecord]]) -> Figure | None:
    """Per row label, one bar per run: MiB/s where the row moves data, else mean ms (right panel); rows with a
    range (simulated) carry an error bar from its low to its high end."""
    labels: dict[str, None] = {}
    for _, rec in runs:
        for r in rec.rows:
            if r.op != FIGURE_OP:   # a figure (bytes, records, %) is no time: the run's tables show it
                labels.setdefault(r.label, None)
    rate = [lbl for lbl in labels if any((row := _get(rec, lbl)) is not None and _speed(row) for _, rec in runs)]
    timed = [lbl for lbl in labels if lbl not in rate]
    panels = [(rate, "MiB/s", lambda r: _speed(r)), (timed, "mean time per call, ms", lambda r: r.time_ms)]
    ranged = any(r.time_ms_range is not None for _, rec in runs for r in rec.rows)
    panels = [p for p in panels if p[0]]
    if not panels:
        return None
    n = len(runs)
    heights = [max(len(p[0]) * (n * BAR_H_IN + 0.15), 1.2) for p in panels]
    fig = Figure(figsize=(WIDTH_IN, sum(heights) + 1.2 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, (lbls, xlabel, value) in zip(axes, panels):
        step = 1.0 / (n + 0.6)
        for i, (name, rec) in enumerate(runs):
            ys, xs, errs = [], [], []
            for j, lbl in enumerate(lbls):
                row = _get(rec, lbl)
                v = value(row) if row is not None else None
                if v is not None and math.isfinite(v):
                    ys.append(j + (i - (n - 1) / 2) * step)
                    xs.append(v)
                    errs.append(_error(row, v, xlabel == "MiB/s"))  # type: ignore[arg-type]
            # simulated rows with a range: error bars from the range's low to its high end
            xerr = [[e[0] for e in errs], [e[1] for e in errs]] if ranged and xs else None
            ax.barh(ys, xs, height=step * 0.9, label=name, xerr=xerr,
                    error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#333333"})
        ax.set_yticks(range(len(lbls)), labels=lbls, fontsize=7)
        ax.set_ylim(len(lbls) - 0.5, -0.5)
        shown = [v for _, rec in runs for lbl in lbls if (row := _get(rec, lbl)) is not None
                 and (v := value(row)) is not None and v > 0 and math.isfinite(v)]
        if shown and max(shown) / min(shown) > 100:
            ax.set_xscale("log")  # flash writes at 0.07 MiB/s next to SD reads at 17 MiB/s
            xlabel += " (log scale)"
        ax.set_xlabel(xlabel)
        ax.grid(axis="x", alpha=0.3)
        if n > 1:
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle("Rows by run")
    return fig


def _error(row: Row, v: float, rate: bool) -> tuple[float, float]:
    """(below, above) ``v`` for an error bar over the row's range; (0, 0) without one.  A rate's range is the
    time range turned over: the slow end of the time is the low end of the rate."""
    rng = row.time_ms_range
    if rng is None:
        return 0.0, 0.0
    lo, hi = rng
    if not rate:
        return max(v - lo, 0.0), max(hi - v, 0.0)
    t = row.time_ms
    slow = v * t / hi if hi > 0 else v
    fast = v * t / lo if lo > 0 else v
    return max(v - slow, 0.0), max(fast - v, 0.0)


def _get(rec: RunRecord, label: str) -> Row | None:
    try:
        return rec.row(label)
    except KeyError:
        return None


def family(label: str) -> str:
    """The series a row belongs to: the label with its size part removed."""
    if ":" in label:
        head, tail = label.split(":", 1)
        op = "write" if "write" in tail else "read" if "read" in tail else tail.strip()
        return f"{head}: {op}"
    return re.sub(r"\s*\[\d+ kB label\]|\s*\d+(\.\d+)?\s*[kKM]i?B\b|\s*\(\d+[kKM]?B?\)", "", label).strip()


def throughput_vs_size(runs: Sequence[tuple[str, RunRecord]]) -> Figure | None:
    """MiB/s against bytes per call (log scale): a panel per op, a colour per row family, a marker per run.

    Families whose rows all move the same size (e.g. ESP-IDF's SD raw rows) say nothing here and are left out.
    """
    series: dict[str, list[tuple[str, str, list[tuple[int, float]]]]] = {}
    for name, rec in runs:
        fams: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for r in rec.rows:
            s = _speed(r)
            if s is not None:
                fams.setdefault((r.op, family(r.label)), []).append((r.bytes, s))
        for (op, fam), pts in fams.items():
            if len({b for b, _ in pts}) >= 2:
                series.setdefault(op, []).append((name, fam, sorted(pts)))
    if not series:
        return None
    ops = sorted(series, key=lambda o: (o != "write", o))
    fig = Figure(figsize=(WIDTH_IN, 4.2 * len(ops)), layout="constrained")
    axes = fig.subplots(len(ops), 1, squeeze=False)[:, 0]
    markers = "os^vD<>p*h"
    run_names = list(dict.fromkeys(n for n, _ in runs))
    for ax, op in zip(axes, ops):
        fams = list(dict.fromkeys(fam for _, fam, _ in series[op]))
        colours = {f: f"C{i % 10}" for i, f in enumerate(fams)}
        sizes = sorted({b for *_, pts in series[op] for b, _ in pts})
        for name, fam, pts in series[op]:
            k = run_names.index(name)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ["-", "--", ":", "-."][k % 4],
                    marker=markers[k % len(markers)], color=colours[fam], linewidth=1.2, markersize=5,
                    label=f"{fam} ({name})" if len(runs) > 1 else fam)
        ax.set_xscale("log")
        ax.set_xticks(sizes, labels=[size_text(b) for b in sizes], fontsize=8, rotation=60, ha="right",
                      rotation_mode="anchor")  # neighbouring sizes (53, 64, 77 KiB) would overlap
        ax.minorticks_off()
        ax.set_xlabel("bytes per call")
        ax.set_ylabel(f"{op} MiB/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Throughput vs transfer size")
    return fig


def breakdown(name: str, rec: RunRecord) -> Figure | None:
    """Simulated time per call by category (host, bus, card, ...), stacked per row."""
    cats = categories(rec)
    rows = [r for r in rec.rows if r.breakdown_ms]
    if not cats or not rows:
        return None
    fig = Figure(figsize=(WIDTH_IN, max(len(rows) * BAR_H_IN * 1.4 + 1.5, 2.5)), layout="constrained")
    ax = fig.subplots()
    left = [0.0] * len(rows)
    for c in cats:
        vals = [r.breakdown_ms.get(c, 0.0) for r in rows]
        ax.barh(range(len(rows)), vals, left=left, label=c, color=CATEGORY_COLOURS.get(c))
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(range(len(rows)), labels=[r.label for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("simulated time per call, ms")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Where the time goes: {name}")
    return fig


def logger_timeline(name: str, rec: RunRecord) -> Figure | None:
    """A data logger run: write latency over time (log scale) and the latency histogram of writes and syncs."""
    m = rec.metadata.get("logger") or {}
    tl, hist = m.get("timeline") or {}, m.get("histogram") or {}
    if not tl.get("t_s") or not hist.get("edges_ms"):
        return None
    fig = Figure(figsize=(WIDTH_IN, 5.0), layout="constrained")
    ax1, ax2 = fig.subplots(2, 1)
    ax1.plot(tl["t_s"], [max(v, 1e-3) for v in tl["write_ms"]], lw=0.6, label="write")
    ax1.set_yscale("log")
    ax1.set_xlabel("time since the first record, s")
    ax1.set_ylabel("write latency, ms")
    if tl.get("records_per_point", 1) > 1:
        ax1.set_title(f"worst of every {tl['records_per_point']} records", fontsize=8)
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=7, loc="upper right")
    edges = hist["edges_ms"]
    labels = [f"<{e:g}" for e in edges] + [f">={edges[-1]:g}"] if len(hist.get("write", [])) > len(edges) else \
        [f"<{e:g}" for e in edges]
    for i, op in enumerate(k for k in ("write", "sync", "rotate") if hist.get(k)):
        counts = hist[op]
        ax2.bar([x + 0.27 * i for x in range(len(counts))], counts, width=0.27, label=op)
    ax2.set_yscale("log")
    ax2.set_xticks(range(len(labels)), labels=labels, fontsize=7)
    ax2.set_xlabel("latency, ms")
    ax2.set_ylabel("calls")
    ax2.grid(axis="y", alpha=0.3)
    ax2.legend(fontsize=7, loc="upper right")
    fig.suptitle(f"Data logger: {name}")
    return fig


def figures(runs: Sequence[tuple[str, RunRecord]]) -> list[tuple[str, str, Figure]]:
    """(file stem, caption, figure) for every plot the runs support."""
    out = []
    fig = bars(runs)
    if fig is not None:
        out.append(("rows", "Per-row comparison of runs", fig))
    fig = throughput_vs_size(runs)
    if fig is not None:
        out.append(("throughput-vs-size", "Throughput against transfer size", fig))
    for name, rec in runs:
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")
        fig = breakdown(name, rec)
        if fig is not None:
            out.append(("breakdown-" + safe, f"Simulated time breakdown, {name}", fig))
        fig = logger_timeline(name, rec)
        if fig is not None:
            out.append(("logger-" + safe, f"Write latency over time and latency histogram, {name}", fig))
    return out


def _render(fig: Figure, target: io.IOBase | Path, fmt: str) -> None:
    # text stays text in SVG (smaller, searchable); no dates: the same runs give the same files
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "sdbench"}):
        meta = {"Date": None} if fmt == "svg" else {"Software": None}
        fig.savefig(target, format=fmt, dpi=PNG_DPI if fmt == "png" else None, metadata=meta)


def svg(fig: Figure) -> str:
    buf = io.StringIO()
    _render(fig, buf, "svg")
    return buf.getvalue()


def save(fig: Figure, target: io.IOBase | Path, fmt: str) -> None:
    _render(fig, target, fmt)
