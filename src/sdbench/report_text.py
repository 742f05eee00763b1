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
        cells = [r.label.replace("|", "\\|"), str(r.runs), str(r.bytes), ms(r.time_ms), ms(r.time_ms_median),
                 ms(r.time_ms_min), ms(r.time_ms_max), ms(r.time_ms_stdev), f"{r.mib_s:.3f}"]
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


def side_by_side(recs: list[RunRecord]) -> str:
    """The rows several runs share (same label), side by side as a Markdown table: each run's mean ms and MiB/s;
    "" when no label is in two runs."""
    labels: dict[str, list[int]] = {}
    for i, rec in enumerate(recs):
        for r in rec.rows:
            labels.setdefault(r.label, [])
            if i not in labels[r.label]:
                labels[r.label].append(i)
    shared = [label for label, where in labels.items() if len(where) >= 2]
    if not shared:
        return ""
    names = [f"{i + 1}: {rec.scenario}" for i, rec in enumerate(recs)]
    rows = [{r.label: r for r in rec.rows} for rec in recs]
    head = ["label", *(f"{n} {unit}" for n in names for unit in ("ms", "MiB/s"))]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for label in shared:
        cells = [label.replace("|", "\\|")]
        for by_label in rows:
            r = by_label.get(label)
            cells += ["", ""] if r is None else [f"{r.time_ms:.3f}", f"{r.mib_s:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
