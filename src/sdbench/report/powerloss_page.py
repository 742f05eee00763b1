"""The HTML page of ``sdbench powerloss --matrix``: a heat map of how many cuts lost acknowledged data (or
worse) per filesystem x cache/bridge, each cell with its throughput beside it, then the table.  Works on the
command's JSON document."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure

from .. import __version__
from . import plots

BAD = ("lost_acknowledged", "corrupted", "needs_repair", "unmountable")
COLUMNS = ("Clean", "Lost unacknowledged", "Lost acknowledged", "Corrupted", "Needs repair", "Unmountable")


def _stack_label(d: dict[str, Any]) -> str:
    return f"cache {d['cache']}\nbridge {d['bridge']}"


def luminance(rgb: Sequence[float]) -> float:
    """Relative luminance of an sRGB colour (components 0..1), as WCAG defines it."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb[:3]]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: Sequence[float], b: Sequence[float]) -> float:
    """WCAG contrast ratio of two colours, 1 (none) to 21 (black on white)."""
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def text_colour(background: Sequence[float]) -> str:
    """Black or white, whichever reads better on ``background`` (white on dark green and dark red)."""
    return "black" if contrast(background, (0.0, 0.0, 0.0)) >= contrast(background, (1.0, 1.0, 1.0)) else "white"


def heat_map(cells: list[dict[str, Any]]) -> Figure | None:
    run = [d for d in cells if "skipped" not in d]
    if not run:
        return None
    rows = list(dict.fromkeys(d["fs"] for d in run))
    cols = list(dict.fromkeys(_stack_label(d) for d in run))
    share = [[float("nan")] * len(cols) for _ in rows]
    text = [[""] * len(cols) for _ in rows]
    for d in run:
        r, c = rows.index(d["fs"]), cols.index(_stack_label(d))
        bad = sum(d[k] for k in BAD)
        share[r][c] = bad / d["cuts"] if d["cuts"] else 0.0
        text[r][c] = f"{bad}/{d['cuts']} unsafe\n{d['throughput_kib_s']:,.0f} KiB/s"
    fig = Figure(figsize=(max(6.0, 1.9 * len(cols) + 2.5), 1.1 * len(rows) + 1.8), layout="constrained")
    ax = fig.add_subplot()
    im = ax.imshow(share, cmap="RdYlGn_r", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, fontsize=8)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("block cache and USB bridge")
    ax.set_ylabel("filesystem")
    for r in range(len(rows)):
        for c in range(len(cols)):
            if text[r][c]:
                ax.text(c, r, text[r][c], ha="center", va="center", fontsize=8,
                        color=text_colour(im.cmap(im.norm(share[r][c]))))
    fig.colorbar(im, ax=ax, label="share of cuts that lost acknowledged data or worse")
    return fig


def render(head: dict[str, Any], cells: list[dict[str, Any]], *, title: str) -> str:
    figs = []
    fig = heat_map(cells)
    if fig is not None:
        caption = ("Cuts that lost acknowledged data, corrupted a file, left the filesystem needing repair or "
                   "unmountable, out of the cuts made; each cell's throughput of the same workload beside it")
        figs.append((caption, plots.svg_uri(fig)))
    from .html import _env

    return _env().get_template("powerloss.html.j2").render(title=title, head=head, cells=cells, figures=figs,
                                                            version=__version__)
