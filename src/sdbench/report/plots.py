"""Report plots with matplotlib's object API (no pyplot, no display: safe headless).

Each function returns a :class:`matplotlib.figure.Figure` or None when the
runs hold nothing to draw; :func:`svg` and :func:`save` render one.  Runs are
``(name, record)`` pairs; legends name them by what differs between them
(:func:`sdbench.report.differences.run_labels`).  An axis whose values span
more than :data:`LOG_SPAN` is logarithmic; times are ticked with their unit
(``42 µs``, ``3.5 ms``, ``2 s``).
"""
from __future__ import annotations

import base64
import io
import math
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from matplotlib import colormaps, rc_context
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, NullFormatter

from ..compare import FIGURE_OP
from ..records import Row, RunRecord
from .differences import run_labels
from .tables import categories
from .text import size_text

WIDTH_IN = 10.0
PNG_DPI = 120
#: height per row label in the rows plot, inches (grows with the number of runs, up to BAND_MAX_IN)
BAND_IN = 0.18
BAND_MAX_IN = 0.42
#: an axis whose largest value is more than this many times its smallest is logarithmic
LOG_SPAN = 100.0
LEGEND_FONT = 8
CATEGORY_COLOURS = {"host": "#4e79a7", "rtos": "#9c755f", "usb": "#b07aa1", "bus": "#f28e2b", "card": "#e15759",
                    "flash": "#76b7b2", "fs": "#59a14f", "other": "#bab0ac"}
MARKERS = "osD^v<>ph*"
LINESTYLES = ("-", "--", ":", "-.")


def _speed(row: Row) -> float | None:
    return row.mib_s if row.bytes and row.mib_s > 0 else None


def _get(rec: RunRecord, label: str) -> Row | None:
    try:
        return rec.row(label)
    except KeyError:
        return None


# -- shared pieces ----------------------------------------------------------------------------------------------

def time_text(ms: float, _pos: object = None) -> str:
    """A time in ms with the unit that reads best: ``42 µs``, ``3.5 ms``, ``2.1 s`` (a tick formatter too)."""
    a = abs(ms)
    if a == 0:
        return "0"
    value, unit = (ms * 1000, "µs") if a < 1 else (ms, "ms") if a < 1000 else (ms / 1000, "s")
    return f"{value:.3g} {unit}"


def _plain(v: float, _pos: object = None) -> str:
    return f"{v:g}"


def log_ticks(target: Any, shown: Sequence[float], fmt: Callable[..., str]) -> None:
    """Tick labels of a log axis (``ax.xaxis`` or ``ax.yaxis``): ``fmt`` at every decade, and at 2 and 5 times
    each when the values span less than two decades (else one decade label could be all the axis shows)."""
    target.set_major_formatter(FuncFormatter(fmt))
    if shown and max(shown) / min(shown) >= LOG_SPAN:
        target.set_minor_formatter(NullFormatter())
        return

    def minor(v: float, _pos: object = None) -> str:
        mantissa = v / 10 ** math.floor(math.log10(v)) if v > 0 else 0.0
        return fmt(v) if any(abs(mantissa - m) < 1e-6 for m in (2.0, 5.0)) else ""
    target.set_minor_formatter(FuncFormatter(minor))


def style_axis(ax: Axes, axis: str, values: Iterable[float], *, times: bool = False, zero: bool = True) -> bool:
    """Make ``axis`` ("x" or "y") of ``ax`` logarithmic when the positive ``values`` span more than
    :data:`LOG_SPAN`, else linear from 0 (unless not ``zero``) to past the largest value; tick it in plain
    numbers (or times in ms with :func:`time_text`).  Returns whether the axis is logarithmic."""
    shown = [v for v in values if v > 0 and math.isfinite(v)]
    log = bool(shown) and max(shown) / min(shown) > LOG_SPAN
    target = ax.xaxis if axis == "x" else ax.yaxis
    fmt = time_text if times else _plain
    if log:
        (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
        log_ticks(target, shown, fmt)
    else:
        if shown and zero:
            (ax.set_xlim if axis == "x" else ax.set_ylim)(0, max(shown) * 1.06)
        target.set_major_formatter(FuncFormatter(fmt))
    return log


def run_styles(n: int) -> list[dict[str, Any]]:
    """A colour, a hollow marker and a line style per run: every run distinguishable (hollow markers of other
    shapes stay visible where two runs give the same value)."""
    palette = colormaps["tab10" if n <= 10 else "tab20"].colors
    return [{"color": palette[i % len(palette)], "marker": MARKERS[i % len(MARKERS)],
             "linestyle": LINESTYLES[i % len(LINESTYLES)]} for i in range(n)]


def legend_columns(labels: Sequence[str], width_in: float = WIDTH_IN) -> int:
    """Columns of a legend spanning the figure's width, from its longest label."""
    longest = max((len(s) for s in labels), default=1)
    per_col = (longest * 0.55 + 3.5) * LEGEND_FONT / 72  # characters at about 0.55 em, plus the handle
    return max(1, min(len(labels), int(width_in * 0.95 / per_col)))


def _legend_rows(labels: Sequence[str]) -> int:
    return math.ceil(len(labels) / legend_columns(labels))


def with_legend_row(fig: Figure, heights: Sequence[float], labels: Sequence[str],
                    handles: Sequence[Any]) -> list[Axes]:
    """One panel per height, below a row holding the runs' legend in as many columns as fit (when there is more
    than one run): a legend in a panel of its own is laid out with the figure, never cut off at its edge."""
    if len(labels) < 2:
        return list(fig.subplots(len(heights), 1, squeeze=False, height_ratios=heights)[:, 0])
    grid = fig.subplots(len(heights) + 1, 1, squeeze=False,
                        height_ratios=[0.2 * _legend_rows(labels) + 0.05, *heights])[:, 0]
    grid[0].set_axis_off()
    grid[0].legend(handles, labels, loc="center", ncols=legend_columns(labels), fontsize=LEGEND_FONT,
                   frameon=False, borderaxespad=0)
    return list(grid[1:])


def legend_height(labels: Sequence[str]) -> float:
    """Inches the legend row of :func:`with_legend_row` adds to a figure."""
    return 0.2 * _legend_rows(labels) + 0.1 if len(labels) > 1 else 0.0


def legend_on_top(ax: Axes, ncols: int = 1) -> None:
    """``ax``'s legend just above it, off the data (laid out with the figure)."""
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), borderaxespad=0.4, ncols=ncols, fontsize=LEGEND_FONT,
              frameon=False)


def row_axis(ax: Axes, labels: Sequence[str]) -> None:
    """A y axis of row labels, first at the top, every other row shaded (easier to follow across)."""
    for j in range(0, len(labels), 2):
        ax.axhspan(j - 0.5, j + 0.5, color="#f3f5f7", zorder=0)
    ax.set_yticks(range(len(labels)), labels=labels, fontsize=7)
    ax.set_ylim(len(labels) - 0.5, -0.5)


# -- the plots ------------------------------------------------------------------------------------------------

def rows_by_run(runs: Sequence[tuple[str, RunRecord]], labels: Sequence[str]) -> Figure | None:
    """Per row label a line, per run a hollow marker on it: MiB/s where the row moves data, else the mean time
    per call (second panel); rows with a range (simulated) carry a whisker from its low to its high end."""
    seen: dict[str, None] = {}
    for _, rec in runs:
        for r in rec.rows:
            if r.op != FIGURE_OP:   # a figure (bytes, records, %) is no time: the run's tables show it
                seen.setdefault(r.label, None)
    rate = [lbl for lbl in seen if any((row := _get(rec, lbl)) is not None and _speed(row) for _, rec in runs)]
    timed = [lbl for lbl in seen if lbl not in rate]
    panels = [(lbls, xlabel, value, times) for lbls, xlabel, value, times in (
        (rate, "MiB/s", _speed, False), (timed, "mean time per call", lambda r: r.time_ms, True)) if lbls]
    if not panels:
        return None
    n = len(runs)
    band = min(max(BAND_IN, 0.035 * n), BAND_MAX_IN)
    heights = [max(len(p[0]) * band, 0.9) + 0.55 for p in panels]
    styles = run_styles(n)
    fig = Figure(figsize=(WIDTH_IN, sum(heights) + 0.5 + legend_height(labels)), layout="constrained")
    axes = with_legend_row(fig, heights, labels, [_proxy(s) for s in styles])
    step = min(0.7 / n, 0.22)
    for ax, (lbls, xlabel, value, times) in zip(axes, panels):
        shown = []
        for i, ((_, rec), style, label) in enumerate(zip(runs, styles, labels)):
            ys, xs, lo, hi = [], [], [], []
            for j, lbl in enumerate(lbls):
                row = _get(rec, lbl)
                v = value(row) if row is not None else None
                if v is not None and math.isfinite(v):
                    below, above = _error(row, v, not times)  # type: ignore[arg-type]
                    ys.append(j + (i - (n - 1) / 2) * step)
                    xs.append(v)
                    lo.append(below)
                    hi.append(above)
                    shown += [v - below, v + above, v]
            if xs:
                ax.errorbar(xs, ys, xerr=[lo, hi] if any(lo) or any(hi) else None, linestyle="none",
                            marker=style["marker"], color=style["color"], mfc="none", markersize=6,
                            markeredgewidth=1.2, elinewidth=0.9, capsize=0, label=label)
        row_axis(ax, lbls)
        log = style_axis(ax, "x", shown, times=times)
        ax.set_xlabel(xlabel + (" (log scale)" if log else ""))
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle("Rows by run")
    return fig


def _proxy(style: dict[str, Any], *, line: bool = False) -> Line2D:
    """A legend handle drawn as the run's markers (and line) are."""
    return Line2D([], [], color=style["color"], marker=style["marker"], mfc="none", markersize=6,
                  markeredgewidth=1.2, linestyle=style["linestyle"] if line else "none")


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


def family(label: str) -> str:
    """The series a row belongs to: the label with its size part removed."""
    if ":" in label:
        head, tail = label.split(":", 1)
        op = "write" if "write" in tail else "read" if "read" in tail else tail.strip()
        return f"{head}: {op}"
    return re.sub(r"\s*\[\d+ kB label\]|\s*\d+(\.\d+)?\s*[kKM]i?B\b|\s*\(\d+[kKM]?B?\)", "", label).strip()


def throughput_vs_size(runs: Sequence[tuple[str, RunRecord]], labels: Sequence[str]) -> Figure | None:
    """MiB/s against bytes per call (log scale): a panel per op, a colour per row family (legend beside each
    panel), a marker and line style per run (legend above).

    Families whose rows all move the same size (e.g. ESP-IDF's SD raw rows) say nothing here and are left out.
    """
    series: dict[str, list[tuple[int, str, list[tuple[int, float]]]]] = {}
    for k, (_, rec) in enumerate(runs):
        fams: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for r in rec.rows:
            s = _speed(r)
            if s is not None:
                fams.setdefault((r.op, family(r.label)), []).append((r.bytes, s))
        for (op, fam), pts in fams.items():
            if len({b for b, _ in pts}) >= 2:
                series.setdefault(op, []).append((k, fam, sorted(pts)))
    if not series:
        return None
    ops = sorted(series, key=lambda o: (o != "write", o))
    n = len(runs)
    styles = run_styles(n)
    fig = Figure(figsize=(WIDTH_IN, 4.2 * len(ops) + legend_height(labels)), layout="constrained")
    # the runs' legend draws them in grey: colours are the row families (each panel's legend)
    axes = with_legend_row(fig, [4.2] * len(ops), labels,
                           [_proxy({**s, "color": "#333333"}, line=True) for s in styles])
    for ax, op in zip(axes, ops):
        fams = list(dict.fromkeys(fam for _, fam, _ in series[op]))
        colours = {f: f"C{i % 10}" for i, f in enumerate(fams)}
        sizes = sorted({b for *_, pts in series[op] for b, _ in pts})
        for k, fam, pts in series[op]:
            style = styles[k]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style["linestyle"] if n > 1 else "-",
                    marker=style["marker"] if n > 1 else "o", mfc="none", color=colours[fam], linewidth=1.2,
                    markersize=5, label=f"{fam} ({labels[k]})" if n > 1 else fam)
        ax.set_xscale("log")
        ax.set_xticks(sizes, labels=[size_text(b) for b in sizes], fontsize=8, rotation=60, ha="right",
                      rotation_mode="anchor")  # neighbouring sizes (53, 64, 77 KiB) would overlap
        ax.minorticks_off()
        ax.set_xlabel("bytes per call")
        log = style_axis(ax, "y", [v for *_, pts in series[op] for _, v in pts])
        ax.set_ylabel(f"{op} MiB/s" + (" (log scale)" if log else ""))
        ax.grid(alpha=0.3)
        ax.legend([Line2D([], [], color=colours[f], linewidth=2) for f in fams], fams, fontsize=7,
                  loc="upper left", bbox_to_anchor=(1.01, 1.0), title="rows", title_fontsize=7)
    fig.suptitle("Throughput vs transfer size")
    return fig


def breakdown(name: str, rec: RunRecord) -> Figure | None:
    """Simulated time per call (left, logarithmic when the rows span decades) and the share of each category
    (host, bus, card, ...) in it (right), per row."""
    cats = categories(rec)
    rows = [r for r in rec.rows if r.breakdown_ms]
    if not cats or not rows:
        return None
    fig = Figure(figsize=(WIDTH_IN, max(len(rows) * BAND_IN * 1.2 + 1.6, 2.6)), layout="constrained")
    total_ax, share_ax = fig.subplots(1, 2, sharey=True, width_ratios=[1.0, 1.2])
    ys = range(len(rows))
    totals = [sum(r.breakdown_ms.values()) for r in rows]
    # a dot per row, not a bar: a bar's length means nothing on a log axis
    total_ax.plot(totals, list(ys), linestyle="none", marker="o", markersize=4, color="#4d5b69",
                  label="time per call")
    log = style_axis(total_ax, "x", totals, times=True)
    total_ax.set_xlabel("simulated time per call" + (" (log scale)" if log else ""))
    row_axis(total_ax, [r.label for r in rows])
    total_ax.grid(axis="x", alpha=0.3)
    left = [0.0] * len(rows)
    for c in cats:
        share = [100.0 * r.breakdown_ms.get(c, 0.0) / t if t > 0 else 0.0 for r, t in zip(rows, totals)]
        share_ax.barh(ys, share, left=left, height=0.6, label=c, color=CATEGORY_COLOURS.get(c))
        left = [a + b for a, b in zip(left, share)]
    share_ax.set_xlim(0, 100)
    share_ax.set_xlabel("share of the time, %")
    share_ax.tick_params(axis="y", left=False)
    share_ax.grid(axis="x", alpha=0.3)
    legend_on_top(total_ax)
    legend_on_top(share_ax, len(cats))
    fig.suptitle(f"Where the time goes: {name}")
    return fig


def logger_timeline(name: str, rec: RunRecord) -> Figure | None:
    """A data logger run: write latency over the whole run, by when each write began (log scale), syncs beside
    them and the longest stall marked; then the latency histogram of writes and syncs."""
    m = rec.metadata.get("logger") or {}
    tl, hist = m.get("timeline") or {}, m.get("histogram") or {}
    if not tl.get("t_s") or not hist.get("edges_ms"):
        return None
    fig = Figure(figsize=(WIDTH_IN, 5.4), layout="constrained")
    ax1, ax2 = fig.subplots(2, 1)
    starts, write_ms = _write_starts(tl)
    sessions = tl.get("session") or [0] * len(starts)
    many = len(set(sessions)) > 1
    ends = []
    for s in dict.fromkeys(sessions):
        pick = [i for i, x in enumerate(sessions) if x == s]
        xs = [starts[i] for i in pick]
        ys = [max(write_ms[i], 1e-3) for i in pick]
        ax1.plot(xs, ys, linestyle="none", marker=".", markersize=2.5, alpha=0.7,
                 label=f"write, session {s + 1}" if many else "write")
        ends += [x + y / 1000 for x, y in zip(xs, ys)]
    st = m.get("sync_timeline") or {}
    if st.get("t_s"):
        ax1.plot(st["t_s"], [max(v, 1e-3) for v in st["sync_ms"]], linestyle="none", marker="x", markersize=4,
                 color="C3", label="sync")
        ends += [t + v / 1000 for t, v in zip(st["t_s"], st["sync_ms"])]
    stall = m.get("longest_stall") or {}
    if isinstance(stall.get("at_s"), (int, float)) and isinstance(stall.get("ms"), (int, float)):
        at, ms = float(stall["at_s"]), float(stall["ms"])
        where = f" of session {stall['session'] + 1}" if many and isinstance(stall.get("session"), int) else ""
        ax1.plot([at], [ms], linestyle="none", marker="o", mfc="none", markersize=10, color="k",
                 label=f"longest stall: {time_text(ms)} {stall.get('op', '')} at {at:.1f} s{where}")
        ends.append(at + ms / 1000)
    ax1.set_yscale("log")
    log_ticks(ax1.yaxis, [v for line in ax1.get_lines() for v in line.get_ydata()], time_text)
    ax1.set_xlim(0, max(ends) * 1.01 if ends else None)
    ax1.set_xlabel("time since the " + ("session" if many else "log") + " began (when the call started), s")
    ax1.set_ylabel("latency per call")
    if tl.get("records_per_point", 1) > 1:
        ax1.set_title(f"writes: the worst of every {tl['records_per_point']} records", fontsize=8)
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), markerscale=1.5)
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
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(f"Data logger: {name}")
    return fig


def _write_starts(tl: dict[str, Any]) -> tuple[list[float], list[float]]:
    """When each timeline point's write began (s since its session's start) and how long it took (ms).  A point
    holds the time its record was produced and its age once written: the write began at produced + age -
    latency, which is past the log's duration when the writer fell behind."""
    t, w = tl["t_s"], tl["write_ms"]
    age = tl.get("age_ms") or w
    return [ts + max(a - x, 0.0) / 1000 for ts, a, x in zip(t, age, w)], list(w)


def figures(runs: Sequence[tuple[str, RunRecord]]) -> list[tuple[str, str, Figure]]:
    """(file stem, caption, figure) for every plot the runs support."""
    labels = run_labels([n for n, _ in runs], [r for _, r in runs])
    out = []
    fig = rows_by_run(runs, labels)
    if fig is not None:
        out.append(("rows", "Per-row comparison of runs", fig))
    fig = throughput_vs_size(runs, labels)
    if fig is not None:
        out.append(("throughput-vs-size", "Throughput against transfer size", fig))
    for (name, rec), label in zip(runs, labels):
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")
        fig = breakdown(label, rec)
        if fig is not None:
            out.append(("breakdown-" + safe, f"Simulated time breakdown, {label}", fig))
        fig = logger_timeline(label, rec)
        if fig is not None:
            out.append(("logger-" + safe, f"Write latency over time and latency histogram, {label}", fig))
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


def svg_uri(fig: Figure) -> str:
    """The figure as an SVG ``data:`` URI, for an ``<img>`` of a self-contained page."""
    return "data:image/svg+xml;base64," + base64.b64encode(svg(fig).encode()).decode()
