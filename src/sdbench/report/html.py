"""One self-contained HTML report: inline CSS, plots as embedded SVG images, no network.

The page is a list of sections, each made by one function of :data:`SECTIONS` from the report's runs and shown
by its own template (``templates/section_<name>.html.j2``): a new section is a function, a template and an
entry in the list."""
from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from .. import __version__
from ..compare import card_table, compare_runs, ranking
from ..output_files import write_atomically
from ..records import RunRecord
from ..store import StoredRun
from . import plots
from .differences import differences, fact_texts
from .tables import (WIDE_RUNS, card_table_long, card_table_view, comparison_table, comparison_table_long,
                     rows_table, run_summary, stack_diff_table, stack_tree)


@dataclass(frozen=True)
class ReportRun:
    name: str                 # shown in tables and legends, e.g. "#12"
    record: RunRecord
    run_id: int | None = None
    info: StoredRun | None = None


@dataclass(frozen=True)
class Report:
    """The runs of one report and what every section needs to know about them."""

    runs: tuple[ReportRun, ...]
    title: str = "sdbench report"

    @property
    def pairs(self) -> list[tuple[str, RunRecord]]:
        return [(r.name, r.record) for r in self.runs]

    @cached_property
    def differs(self) -> list[str]:
        """Per run, everything that tells it from the others, as text ("" for nothing)."""
        return [", ".join(t) for t in fact_texts(differences([r.record for r in self.runs]))]


@dataclass(frozen=True)
class Section:
    name: str                 # its template is templates/section_<name>.html.j2
    data: dict[str, Any] = field(default_factory=dict)


def overview_section(rep: Report) -> Section | None:
    """What tells the runs apart, one line per run (legends show the first few of these)."""
    if len(rep.runs) < 2:
        return None
    return Section("overview", {"runs": [(r.name, d) for r, d in zip(rep.runs, rep.differs)]})


def plots_section(rep: Report) -> Section | None:
    figs = [(stem, caption, plots.svg_uri(fig)) for stem, caption, fig in plots.figures(rep.pairs)]
    return Section("plots", {"figures": figs}) if figs else None


def comparison_section(rep: Report) -> Section | None:
    if len(rep.runs) < 2:
        return None
    cmp = compare_runs(rep.pairs)
    wide = len(rep.runs) <= WIDE_RUNS
    view = card_table_view if wide else card_table_long
    return Section("comparison", {
        "baseline": rep.runs[0].name, "table": comparison_table(cmp) if wide else comparison_table_long(cmp),
        "warnings": cmp.warnings, "ranks": ranking(cmp),
        "card": view([r.name for r in rep.runs], card_table([r.record for r in rep.runs]))})


def runs_section(rep: Report) -> Section:
    items = [{"name": r.name, "differs": d, "summary": run_summary(r.run_id, r.info, r.record),
              "warnings": r.record.warnings, "rows": rows_table(r.record), "stack": stack_tree(r.record.stack)}
             for r, d in zip(rep.runs, rep.differs)]
    return Section("runs", {"runs": items})


def stack_diff_section(rep: Report) -> Section | None:
    if len(rep.runs) < 2:
        return None
    table = stack_diff_table([r.name for r in rep.runs], [r.record.stack for r in rep.runs])
    return Section("stack_diff", {"table": table}) if table is not None else None


#: the report's sections in page order
SECTIONS: tuple[Callable[[Report], Section | None], ...] = (
    overview_section, plots_section, comparison_section, runs_section, stack_diff_section)


def _env():
    import jinja2

    return jinja2.Environment(loader=jinja2.PackageLoader("sdbench.report", "templates"),
                              autoescape=True, trim_blocks=True, lstrip_blocks=True)


def render(runs: Sequence[ReportRun], *, title: str = "sdbench report") -> str:
    rep = Report(tuple(runs), title)
    sections = [s for make in SECTIONS if (s := make(rep)) is not None]
    return _env().get_template("report.html.j2").render(
        title=title, run_count=len(rep.runs), sections=sections, version=__version__,
        generated=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


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
