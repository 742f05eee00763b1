"""One self-contained HTML report: inline CSS, plots as embedded SVG images, no network."""
from __future__ import annotations

import base64
import io
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import __version__
from ..compare import card_table, compare_runs, ranking
from ..output_files import write_atomically
from ..records import RunRecord
from ..store import StoredRun
from . import plots
from .tables import (WIDE_RUNS, card_table_long, card_table_view, comparison_table, comparison_table_long,
                     rows_table, run_summary, stack_diff_table, stack_tree)


@dataclass(frozen=True)
class ReportRun:
    name: str                 # shown in tables and legends, e.g. "#12"
    record: RunRecord
    run_id: int | None = None
    info: StoredRun | None = None


def _env():
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("sdbench.report", "templates"),
                              autoescape=True, trim_blocks=True, lstrip_blocks=True)


def render(runs: Sequence[ReportRun], *, title: str = "sdbench report") -> str:
    pairs = [(r.name, r.record) for r in runs]
    figs = [(stem, caption, "data:image/svg+xml;base64," + base64.b64encode(plots.svg(fig).encode()).decode())
            for stem, caption, fig in plots.figures(pairs)]
    comparison = warnings = None
    ranks: list = []
    if len(runs) > 1:
        cmp = compare_runs(pairs)
        comparison = comparison_table(cmp) if len(runs) <= WIDE_RUNS else comparison_table_long(cmp)
        warnings = cmp.warnings
        ranks = ranking(cmp)
    card = None
    if len(runs) > 1:
        view = card_table_view if len(runs) <= WIDE_RUNS else card_table_long
        card = view([r.name for r in runs], card_table([r.record for r in runs]))
    items = [{"name": r.name, "summary": run_summary(r.run_id, r.info, r.record), "warnings": r.record.warnings,
              "rows": rows_table(r.record), "stack": stack_tree(r.record.stack)} for r in runs]
    stack_diff = stack_diff_table([r.name for r in runs], [r.record.stack for r in runs]) if len(runs) > 1 else None
    return _env().get_template("report.html.j2").render(
        title=title, runs=items, figures=figs, comparison=comparison, comparison_warnings=warnings, card=card,
        stack_diff=stack_diff, ranks=ranks,
        version=__version__, generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def write_plots(runs: Sequence[ReportRun], directory: Path, fmt: str) -> list[Path]:
    """The report's plots as ``DIR/<name>.<fmt>`` files; returns the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for stem, _, fig in plots.figures([(r.name, r.record) for r in runs]):
        path = directory / f"{stem}.{fmt}"
        buf = io.BytesIO()
        plots.save(fig, buf, fmt)
        write_atomically(path, buf.getvalue())  # replaces a regular file only, like every output
        out.append(path)
    return out
