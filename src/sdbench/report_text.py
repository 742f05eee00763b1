"""Plain-text renderings of records that paste well into Markdown."""
from __future__ import annotations

from .records import RunRecord


def range_text(rng: tuple[float, float] | None, digits: int = 3) -> str:
    """A row's range as ``lo–hi`` (en dash), or "" when it has none."""
    return "" if rng is None else f"{rng[0]:.{digits}f}–{rng[1]:.{digits}f}"


# breakdown categories shown first, in stack order; others follow alphabetically
CATEGORY_ORDER = ("host", "rtos", "usb", "bus", "card", "flash", "fs", "other")


def categories(rec: RunRecord) -> list[str]:
    """The time categories any row of ``rec`` has, in stack order."""
    found = {k for r in rec.rows for k in r.breakdown_ms}
    return [c for c in CATEGORY_ORDER if c in found] + sorted(found - set(CATEGORY_ORDER))


def markdown_table(rec: RunRecord) -> str:
    """The rows as a Markdown table; a "range ms" column (10th–90th percentile of the mean time) follows
    "mean ms" when a row has a range."""
    simulated = rec.clock == "virtual"
    figures = any(r.unit != "ms" for r in rec.rows)
    ranged = any(r.time_ms_range is not None for r in rec.rows)
    head = ["label", "runs", "bytes", "mean ms", "median ms", "min ms", "max ms", "stdev ms", "MiB/s"]
    if ranged:
        head.insert(4, "range ms")
    if figures:
        head.insert(1, "figure")
    cats = categories(rec) if simulated else []
    if simulated:
        head += [f"{c} ms" for c in cats] + ["commands/call"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(head))) + "|"]
    def ms(v: float | None) -> str:
        return "" if v is None else f"{v:.3f}"

    for r in rec.rows:
        cells = [r.label, str(r.runs), str(r.bytes), ms(r.time_ms), ms(r.time_ms_median), ms(r.time_ms_min),
                 ms(r.time_ms_max), ms(r.time_ms_stdev), f"{r.mib_s:.3f}"]
        if ranged:
            cells.insert(4, range_text(r.time_ms_range))
        if figures:
            unit = "µs" if r.unit == "us" else r.unit
            cells.insert(1, f"{r.reported_value:.4g} {unit}")
        if simulated:
            b = r.breakdown_ms
            cells += [f"{b.get(c, 0):.3f}" for c in cats]
            cells.append(" ".join(f"{k}×{v:g}" for k, v in sorted(r.commands.items())))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
