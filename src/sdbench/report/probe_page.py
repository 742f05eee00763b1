"""The HTML page of ``sdbench probe``: plots of read time across boundaries and of write time against open
streams and stream spacing, then the tables.  Works on the probe's JSON document (``-f json``)."""
from __future__ import annotations

import base64
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

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
    for key, label in (("pre_us", "read just before"), ("on_us", "read across"), ("post_us", "read just after")):
        ax.plot(xs, [r[key] for r in rows], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(size_text))
    ax.set_xlabel("boundary size (reads across odd multiples of it)")
    ax.set_ylabel("median read time (µs)")
    for key, label in (("page_bytes", "page"), ("au_bytes_read", "AU (reads)")):
        if doc.get(key):
            ax.axvline(doc[key], color="#888", linestyle=":", label=f"{label}: {size_text(doc[key])}")
    ax.legend(loc="upper left")
    return fig


def _streams(doc: dict[str, Any]) -> Figure | None:
    a, b = doc.get("open_streams") or [], doc.get("au_spacing") or []
    if not a and not b:
        return None
    fig = Figure(figsize=(plots.WIDTH_IN, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    if a:
        left.plot([r["streams"] for r in a], [r["write_us"] / 1e3 for r in a], marker="o",
                  label=f"16 KiB writes, streams {size_text(doc['stream_spacing_bytes'])} apart")
        if doc.get("open_aus"):
            left.axvline(doc["open_aus"], color="#888", linestyle=":", label=f"open units: {doc['open_aus']}")
        left.set_yscale("log")
        left.set_xlabel("streams written round-robin")
        left.set_ylabel("median time per write (ms)")
        left.legend(loc="upper left")
    if b:
        right.plot([r["spacing_bytes"] for r in b], [r["write_us"] / 1e3 for r in b], marker="o",
                   label=f"{(doc.get('open_aus') or 0) + 1} streams")
        right.set_xscale("log", base=2)
        right.xaxis.set_major_formatter(FuncFormatter(size_text))
        if doc.get("au_bytes_write"):
            right.axvline(doc["au_bytes_write"], color="#888", linestyle=":",
                          label=f"AU: {size_text(doc['au_bytes_write'])}")
        right.set_yscale("log")
        right.set_xlabel("stream spacing")
        right.set_ylabel("median time per write (ms)")
        right.legend(loc="upper left")
    return fig


def render(doc: dict[str, Any], findings: list[tuple[str, str]], *, title: str) -> str:
    figs = []
    for caption, fig in (("Read time across boundaries (flashbench's alignment test)", _alignment(doc)),
                         ("Write time against open streams and stream spacing", _streams(doc))):
        if fig is not None:
            data = base64.b64encode(plots.svg(fig).encode()).decode()
            figs.append((caption, "data:image/svg+xml;base64," + data))
    from .html import _env

    return _env().get_template("probe.html.j2").render(
        title=title, figures=figs, findings=findings, latency=doc.get("latency", []),
        not_measured=doc.get("not_measured", {}), version=__version__, size=size_text)
