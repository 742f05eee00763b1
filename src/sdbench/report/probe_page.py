"""The HTML page of ``sdbench probe``: plots of read time across boundaries and of write time against open
streams and stream spacing, then the tables.  Works on the probe's JSON document (``-f json``)."""
from __future__ import annotations

from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from .. import __version__
from . import plots
from .text import size_text


def _alignment(doc: dict[str, Any]) -> Figure | None:
    rows = doc.get("alignment") or []
    if not rows:
        return None
    fig = Figure(figsize=(plots.WIDTH_IN, 3.6), layout="constrained")
    ax = fig.add_subplot()
    xs = [r["boundary_bytes"] for r in rows]
    shown = []
    # hollow markers of three shapes: the three reads often take the same time, and no line may hide another
    for (key, label), style in zip((("pre_us", "read just before"), ("on_us", "read across"),
                                    ("post_us", "read just after")), plots.run_styles(3)):
        ys = [r[key] / 1e3 for r in rows]
        ax.plot(xs, ys, marker=style["marker"], linestyle=style["linestyle"], color=style["color"], mfc="none",
                label=label)
        shown += ys
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(size_text))
    ax.set_xlabel("boundary size (reads across odd multiples of it)")
    # not from zero: a read across a boundary is slower by a few per cent, which is the finding
    log = plots.style_axis(ax, "y", shown, times=True, zero=False)
    ax.set_ylabel("median read time" + (" (log scale)" if log else ""))
    for key, label in (("page_bytes", "page"), ("au_bytes_read", "AU (reads)")):
        if doc.get(key):
            ax.axvline(doc[key], color="#888", linestyle=":", label=f"{label}: {size_text(doc[key])}")
    plots.legend_on_top(ax, 5)
    return fig


def _streams(doc: dict[str, Any]) -> Figure | None:
    """Write time against the number of streams and against their spacing: a panel for each the probe
    measured (a probe that found no open-unit count has no spacing test)."""
    a, b = doc.get("open_streams") or [], doc.get("au_spacing") or []
    panels = [p for p in ("streams", "spacing") if (a if p == "streams" else b)]
    if not panels:
        return None
    fig = Figure(figsize=(plots.WIDTH_IN, 3.6), layout="constrained")
    axes = dict(zip(panels, fig.subplots(1, len(panels), squeeze=False)[0]))
    if "streams" in axes:
        ax = axes["streams"]
        ys = [r["write_us"] / 1e3 for r in a]
        ax.plot([r["streams"] for r in a], ys, marker="o",
                label=f"16 KiB writes, streams {size_text(doc['stream_spacing_bytes'])} apart")
        if doc.get("open_aus"):
            ax.axvline(doc["open_aus"], color="#888", linestyle=":", label=f"open units: {doc['open_aus']}")
        ax.set_xlabel("streams written round-robin")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        _time_axis(ax, ys)
    if "spacing" in axes:
        ax = axes["spacing"]
        ys = [r["write_us"] / 1e3 for r in b]
        ax.plot([r["spacing_bytes"] for r in b], ys, marker="o", label=f"{(doc.get('open_aus') or 0) + 1} streams")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(size_text))
        if doc.get("au_bytes_write"):
            ax.axvline(doc["au_bytes_write"], color="#888", linestyle=":",
                       label=f"AU: {size_text(doc['au_bytes_write'])}")
        ax.set_xlabel("stream spacing")
        _time_axis(ax, ys)
    return fig


def _time_axis(ax: Any, ys: list[float]) -> None:
    """Median time per write on the y axis (``42 µs``, ``3 ms``; log scale when it spans decades), legend."""
    log = plots.style_axis(ax, "y", ys, times=True)
    ax.set_ylabel("median time per write" + (" (log scale)" if log else ""))
    plots.legend_on_top(ax, 2)


def render(doc: dict[str, Any], findings: list[tuple[str, str]], *, title: str) -> str:
    figs = []
    for caption, fig in (("Read time across boundaries (flashbench's alignment test)", _alignment(doc)),
                         ("Write time against open streams and stream spacing", _streams(doc))):
        if fig is not None:
            figs.append((caption, plots.svg_uri(fig)))
    from .html import _env

    return _env().get_template("probe.html.j2").render(
        title=title, figures=figs, findings=findings, latency=doc.get("latency", []),
        not_measured=doc.get("not_measured", {}), version=__version__, size=size_text)
