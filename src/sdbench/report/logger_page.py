"""The HTML page of ``sdbench logger``: the decision table first, then per configuration a stall timeline (every
write's latency over the log, log axis) and the buffer's distribution (records held, log axes).  Works on the
command's JSON document."""
from __future__ import annotations

import base64
from typing import Any

from matplotlib.figure import Figure

from .. import __version__
from . import plots


def _uri(fig: Figure) -> str:
    return "data:image/svg+xml;base64," + base64.b64encode(plots.svg(fig).encode()).decode()


def stall_timeline(d: dict[str, Any], period_ms: float) -> Figure | None:
    """Write latency over the log (the worst of each group of records), log y axis, with the record period (a
    write longer than it makes the writer fall behind)."""
    tl = d.get("timeline") or {}
    if not tl.get("t_s"):
        return None
    fig = Figure(figsize=(11.0, 3.2), layout="constrained")
    ax = fig.add_subplot()
    written = [t + age / 1000.0 for t, age in zip(tl["t_s"], tl["age_ms"])]
    ax.plot(written, [max(w, 1e-3) for w in tl["write_ms"]], lw=0.8, color="#1f77b4",
            label=f"write() latency (worst of {tl['records_per_point']} records per point)")
    ax.axhline(period_ms, color="#d62728", lw=0.8, ls="--", label=f"record period {period_ms:g} ms")
    ax.set_yscale("log")
    ax.set_xlim(0, max(written) * 1.01 if written else 1)
    ax.set_xlabel("time the record was written (s after the log began)")
    ax.set_ylabel("write() latency (ms)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="upper left")
    ax.set_title(d["name"], fontsize=10)
    return fig


def buffer_distribution(d: dict[str, Any], record_bytes: int, ram_bytes: int) -> Figure | None:
    """How often the backlog held up to each power of two of records, just before a write returned (log axes),
    with the RAM given."""
    dist = d.get("buffer_distribution") or {}
    if not dist.get("counts"):
        return None
    fig = Figure(figsize=(11.0, 2.8), layout="constrained")
    ax = fig.add_subplot()
    edges = [e * record_bytes for e in dist["edges_records"]]
    ax.bar(range(len(edges)), dist["counts"], color="#2ca02c")
    ax.set_xticks(range(len(edges)), [_kib(e) for e in edges], fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("RAM the backlog took, up to (bytes; one bar per power of two of records)")
    ax.set_ylabel("records written")
    ram_at = sum(1 for e in edges if e < ram_bytes) - 0.5
    ax.axvline(ram_at, color="#d62728", lw=0.8, ls="--", label=f"RAM given {_kib(ram_bytes)}")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", which="both", alpha=0.25)
    ax.set_title(d["name"], fontsize=10)
    return fig


def _kib(n: float) -> str:
    return f"{n / 1024:g} KiB" if n >= 1024 else f"{n:g} B"


def render(doc: dict[str, Any], head: list[str], cells: list[list[str]], *, title: str, wall_s: float,
           workers: int) -> str:
    """The logger's page; ``wall_s`` and ``workers``: what the run took here (not in the document, which is the
    same for the same question)."""
    q = doc["question"]
    period_ms = 1000.0 / q["rate_hz"]
    sections = []
    for d in doc["configurations"]:
        figs = []
        for fig, caption in ((stall_timeline(d, period_ms), "Stall timeline: each write's latency over the log"),
                             (buffer_distribution(d, q["record_bytes"], q["ram_bytes"]),
                              "Buffer distribution: the RAM the backlog took when each record was written")):
            if fig is not None:
                figs.append((caption, _uri(fig)))
        sections.append({"name": d["name"], "figures": figs,
                         "causes": d.get("stalls_by_cause") or {}, "longest": d.get("longest_stall")})
    from .html import _env

    return _env().get_template("logger.html.j2").render(title=title, doc=doc, head=head, cells=cells,
                                                         sections=sections, version=__version__,
                                                         wall_s=f"{wall_s:.1f}", workers=workers)
