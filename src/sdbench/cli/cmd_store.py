"""Commands on the results store: runs, show, export, compare, import, report, and ``db check/repair/vacuum``."""
from __future__ import annotations

import json
import stat
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from ..errors import SdbenchError
from ..options import stat_or_none
from .formats import format_enum, format_name, format_option, print_table, table_text

DB_HELP = "Results store file (default: $SDBENCH_DB, else results.sqlite in the per-user data directory)."


RunsFormat = format_enum("runs")
ShowFormat = format_enum("show")
CompareFormat = format_enum("compare")
ExportFormat = format_enum("export")


ImportFormat = format_enum("import")


class SourceChoice(str, Enum):
    measured = "measured"
    simulated = "simulated"
    imported = "imported"


class StatusChoice(str, Enum):
    complete = "complete"
    incomplete = "incomplete"
    failed = "failed"


class MetricChoice(str, Enum):
    reported = "reported"
    ms = "ms"
    mib_s = "mib_s"


def _db_option() -> Optional[Path]:
    return typer.Option(None, "--db", help=DB_HELP, show_default=False)


def _ids(store, refs: list[str]) -> list[int]:
    """The run ids of what the user typed, duplicates refused."""
    out: list[int] = []
    for ref in refs:
        rid = store.resolve(ref)
        if rid in out:
            raise SdbenchError(f"run {rid} is given twice")
        out.append(rid)
    return out


def _load(store, refs: list[str]):
    """[(id, StoredRun, RunRecord)] for what the user typed, duplicates refused."""
    return [(rid, store.info(rid), store.load(rid)) for rid in _ids(store, refs)]


def _not_complete(rid: int, info) -> str:
    """Why a run's rows may be fewer than its protocol makes ('' for a complete run)."""
    if info.status == "failed":
        return f"run {rid} failed ({info.status_reason or 'no reason recorded'})"
    if info.status != "complete":
        return f"run {rid} is incomplete (interrupted)"
    return ""


def _runs(n: int) -> str:
    return f"{n} run" if n == 1 else f"{n} runs"


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.1f} KiB"


def _write_output(text: str, output: Optional[Path]) -> None:
    if output is None or str(output) == "-":
        typer.echo(text, nl=False)
        return
    from ..output_files import check_writable_output, write_atomically

    check_writable_output(output)
    write_atomically(output, text)


def register(app: typer.Typer) -> None:
    runs_app = typer.Typer(name="runs", invoke_without_command=True, add_completion=False, rich_markup_mode=None,
                           help="List stored runs, oldest first, with their status (and why a failed run failed); "
                                "`sdbench runs delete` deletes runs.")
    app.add_typer(runs_app, name="runs")

    @runs_app.callback()
    def runs_cmd(
        ctx: typer.Context,
        scenario: Optional[str] = typer.Option(None, "--scenario", "-s", help="Only runs whose scenario contains "
                                                                             "TEXT (case-insensitive)."),
        source: Optional[SourceChoice] = typer.Option(None, "--source", help="Only measured, simulated or "
                                                                              "imported runs."),
        since: Optional[str] = typer.Option(None, "--since", help="Only runs stored since a date (2024-05-01), "
                                                                  "date and time, or an age (90m, 12h, 3d, 2w)."),
        status: Optional[StatusChoice] = typer.Option(
            None, "--status", help="Only complete, incomplete (the process ended part-way without a word: killed, "
                                   "power lost) or failed runs (an error, or stopped by Ctrl-C or SIGTERM)."),
        limit: Optional[int] = typer.Option(None, "--limit", "-n", min=1, help="Only the newest N runs."),
        fmt: RunsFormat = format_option("runs", "md"),
        db: Optional[Path] = _db_option(),
    ) -> None:
        """List stored runs, oldest first, with their status (and why a failed run failed)."""
        if ctx.invoked_subcommand is not None:
            return
        from dataclasses import replace

        from ..store import default_db_path, open_store

        path = db.expanduser() if db else default_db_path()
        from ..report.tables import runs_table

        def nothing_to_list(words: str) -> None:
            if format_name(fmt) == "md":
                typer.echo(words)
            else:  # an empty list for a program, the words for a person
                print_table(runs_table([]), fmt)
                typer.echo(words, err=True)

        st = stat_or_none(path, "the results store")
        if st is None or (stat.S_ISREG(st.st_mode) and st.st_size == 0):  # an empty file is no store either
            nothing_to_list(f"no runs stored yet ({path})")
            return
        with open_store(path, create=False) as store:
            runs = store.list_runs(scenario=scenario, source=source.value if source else None, since=since,
                                   status=status.value if status else None, limit=limit)
        if not runs:
            nothing_to_list(f"no matching runs in {path}")
            return
        print_table(runs_table([replace(r, status=r.status_text) for r in runs]), fmt)
        for r in runs:
            if r.problem:
                typer.echo(f"warning: run {r.id} is damaged ({r.problem}); see `sdbench db check --db {path}`",
                           err=True)

    @runs_app.command("delete")
    def delete_cmd(
        runs: list[str] = typer.Argument(None, help="Run ids (see `sdbench runs`) or 'latest'."),
        status: Optional[StatusChoice] = typer.Option(None, "--status", help="Every run of this status instead: "
                                                                              "incomplete (interrupted) or "
                                                                              "failed."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before deleting."),
        db: Optional[Path] = _db_option(),
    ) -> None:
        """Delete runs and their rows from the store, all or none; `sdbench db vacuum` then gives the space back
        to the file system."""
        from ..store import open_store

        if bool(runs) == (status is not None):
            raise SdbenchError("runs delete: give run ids, or --status incomplete|failed (not both)")
        if status is StatusChoice.complete:
            raise SdbenchError("runs delete --status: incomplete or failed (complete runs are deleted by id)")
        path = _db_path(db)
        with open_store(path, create=False, write=True) as store:
            if status is not None:
                ids = [r.id for r in store.list_runs(status=status.value)]
                if not ids:
                    typer.echo(f"no {status.value} runs in {path}")
                    return
            else:
                ids = _ids(store, runs)
            shown = ", ".join(map(str, ids[:20])) + (" ..." if len(ids) > 20 else "")
            if not yes:
                if not sys.stdin.isatty():
                    raise SdbenchError(f"runs delete: deleting {_runs(len(ids))} ({shown}) needs a confirmation; "
                                       "give --yes when there is no terminal to ask on")
                if not typer.confirm(f"Delete {_runs(len(ids))} ({shown}) from {path}?", err=True):
                    raise typer.Exit(1)
            store.delete_runs(ids)
        typer.echo(f"deleted {_runs(len(ids))} from {path} ({shown}); `sdbench db vacuum` shrinks the file")

    @app.command("show")
    def show_cmd(
        run: str = typer.Argument(..., help="Run id (see `sdbench runs`) or 'latest'."),
        fmt: ShowFormat = format_option("show", "md", json="the run's results document (as export -f json)",
                                        csv="its rows (as export -f csv)"),
        db: Optional[Path] = _db_option(),
    ) -> None:
        """Show one run: what was measured on what, and every row."""
        from ..report.tables import rows_table, run_summary, stack_fields
        from ..report.text import Table
        from ..store import open_store

        with open_store(db, create=False) as store:
            [(rid, info, rec)] = _load(store, [run])
        name = format_name(fmt)
        if name != "md":
            from ..report.export import export

            typer.echo(export([(rid, rec)], name, [info]), nl=False)
            return
        facts = Table(["field", "value"], title=f"Run {rid}")
        for k, v in run_summary(rid, info, rec):
            facts.add([k, v])
            if k == "status" and info.status_reason:
                facts.add(["status reason", info.status_reason])
        if rec.stack:  # a run stopped before its stack was built has none
            for k, v in stack_fields([rec.stack])[0].items():  # the card and host once, not again under the device
                facts.add([f"stack.{k}", v])
        print_table(facts, fmt)
        typer.echo("")
        for w in rec.warnings:
            typer.echo(f"warning: {w}")
        if rec.warnings:
            typer.echo("")
        print_table(rows_table(rec), fmt)

    @app.command("export")
    def export_cmd(
        runs: list[str] = typer.Argument(..., help="Run ids or 'latest'."),
        fmt: ExportFormat = format_option("export", "json", json="sdbench results, re-importable",
                                          csv="one line per row", md="Markdown, a table per run"),
        output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to FILE (atomically) instead "
                                                                           "of stdout."),
        db: Optional[Path] = _db_option(),
    ) -> None:
        """Export runs as JSON, CSV, Markdown or a protocol's own output (ESP-IDF lines, SdFat bench)."""
        from ..store import open_store
        from ..report.export import export
        from ..workloads.registry import text_formats

        with open_store(db, create=False) as store:
            loaded = _load(store, runs)
        name = format_name(fmt)
        renders = text_formats()
        if name in renders:
            text = "".join(renders[name](rec) for _, _, rec in loaded)
        else:
            text = export([(rid, rec) for rid, _, rec in loaded], name, [info for _, info, _ in loaded])
        _write_output(text, output)
        for rid, info, rec in loaded:
            if info.status != "complete":
                typer.echo(f"warning: {_not_complete(rid, info)}: exported the {len(rec.rows)} rows it stored",
                           err=True)

    @app.command("compare")
    def compare_cmd(
        runs: list[str] = typer.Argument(..., help="Run ids or 'latest'; the first is the baseline."),
        table: bool = typer.Option(False, "--table", help="Card-comparison layout: metrics as rows, runs as "
                                                          "columns, best per row marked."),
        metric: MetricChoice = typer.Option(MetricChoice.reported, "--metric",
                                            help="--table figure: reported (each row's own unit), ms or mib_s."),
        alpha: float = typer.Option(0.05, "--alpha", min=1e-6, max=0.5, help="Significance level of the tests."),
        fmt: CompareFormat = format_option("compare", "md", json="the runs, the table, the ranking and the "
                                                                 "warnings", csv="the table"),
        db: Optional[Path] = _db_option(),
    ) -> None:
        """Compare runs side by side per row label, with ratios and significance."""
        from ..compare import card_table, compare_runs, comparison_warnings, ranking
        from ..report.tables import card_table_view, comparison_table
        from ..store import open_store

        if len(runs) < (1 if table else 2):
            raise SdbenchError("compare needs at least two runs (or --table with one or more)")
        with open_store(db, create=False) as store:
            loaded = _load(store, runs)
        names = [f"#{rid}" for rid, _, _ in loaded]
        pairs = [(n, rec) for n, (_, _, rec) in zip(names, loaded)]
        described = [f"{rec.scenario} ({rec.source}{f', {info.device_name}' if info.device_name else ''})"
                     for _, info, rec in loaded]
        ranks = []
        if table:
            view = card_table_view(names, card_table([rec for _, rec in pairs], metric.value))
            warnings = comparison_warnings(pairs)
        else:
            cmp = compare_runs(pairs, alpha=alpha)
            view, warnings, ranks = comparison_table(cmp), list(cmp.warnings), ranking(cmp)
            shared = sum(all(c.row is not None for c in ln.cells) for ln in cmp.lines)
        name = format_name(fmt)
        if name == "csv":
            print_table(view, fmt)
            return
        if name == "json":
            doc = {"runs": [{"run": n, "scenario": rec.scenario, "source": rec.source} for n, rec in pairs],
                   "table": json.loads(table_text(view, "json")),
                   "ranking": [{"run": r.name, "speed_x": r.speed_x, "rows": r.rows, "faster": r.faster,
                                "slower": r.slower} for r in ranks],
                   "warnings": list(warnings)}
            typer.echo(json.dumps(doc, ensure_ascii=False, indent=1))
            return
        for n, d in zip(names, described):
            typer.echo(f"- {n}: {d}")
        typer.echo("")
        print_table(view, fmt)
        if ranks:
            typer.echo("")
            alike = next(r.rows for r in ranks if r.name == names[0])  # the baseline's: every such row
            typer.echo(f"Ranking, fastest first (geometric mean of speed × over the {alike} of the {shared} rows "
                       f"every run has that move the same bytes per call; {names[0]} = 1.00):")
            for k, r in enumerate(ranks, start=1):
                more = f", faster in {r.faster} rows, slower in {r.slower}" if r.name != names[0] else ""
                typer.echo(f"{k}. {r.name}: {r.speed_x:.2f}x{more}")
        if warnings:
            typer.echo("")
        for w in warnings:
            typer.echo(f"- warning: {w}")

    @app.command("import")
    def import_cmd(
        file: Path = typer.Argument(..., help="A perf_benchmark monitor log, fio JSON, SdFat bench output, or an "
                                              "sdbench results JSON."),
        fmt: Optional[ImportFormat] = format_option(
            "import", tail="the input's format, detected when omitted", json="sdbench results",
            espidf="an ESP-IDF perf_benchmark monitor log", fio="fio's JSON output", sdfat="SdFat bench output"),
        scenario: Optional[str] = typer.Option(None, "--scenario", help="Scenario name to file the run under "
                                                                        "(e.g. the simulated scenario it is "
                                                                        "compared with)."),
        db: Optional[Path] = _db_option(),
    ) -> None:
        """Import results; prints what was read, then the new run ids, one a line, last.

        A file holding several runs is stored all-or-nothing.  Runs from an sdbench
        results JSON keep their status: an incomplete or failed run stays so.
        """
        from ..importers import parse_file
        from ..importers.detect import UnknownFormat
        from ..store import open_store

        try:
            used, records = parse_file(file, fmt.value if fmt else None, scenario=scenario)
        except UnknownFormat as e:
            raise SdbenchError(f"{e}; pass --format to say which") from None
        with open_store(db) as store:
            ids = store.save_many(records)
        for rid, rec in zip(ids, records):
            dev = rec.metadata.get("device") or {}
            on = f", device {dev.get('name')}" if isinstance(dev, dict) and dev.get("name") else ""
            state = "" if rec.status == "complete" else f", {rec.status}"
            typer.echo(f"{file.name} ({used}): run {rid}, {len(rec.rows)} rows, scenario {rec.scenario}{on}{state}")
            for w in rec.warnings:
                typer.echo(f"warning: run {rid}: {w}", err=True)
        for rid in ids:
            typer.echo(str(rid))

    @app.command("report")
    def report_cmd(
        runs: list[str] = typer.Argument(..., help="Run ids or 'latest'; the first is the comparison baseline."),
        html: Optional[Path] = typer.Option(None, "--html", help="Write one self-contained HTML file."),
        png: Optional[Path] = typer.Option(None, "--png", help="Write the plots as PNG files into DIR."),
        svg: Optional[Path] = typer.Option(None, "--svg", help="Write the plots as SVG files into DIR."),
        title: Optional[str] = typer.Option(None, "--title", help="Report title (default, or when empty: the "
                                                                       "scenarios' names)."),
        db: Optional[Path] = _db_option(),
    ) -> None:
        """Report runs as HTML (tables, stack metadata, plots) and/or plot files."""
        if html is None and png is None and svg is None:
            raise SdbenchError("report: say what to write: --html FILE, --png DIR and/or --svg DIR")
        for d in (png, svg):
            st = stat_or_none(d, "a plot directory") if d is not None else None
            if st is not None and not stat.S_ISDIR(st.st_mode):
                raise SdbenchError(f"{d} exists and is not a directory")
        from ..report.html import ReportRun, render, write_plots
        from ..store import open_store

        with open_store(db, create=False) as store:
            loaded = _load(store, runs)
        items = [ReportRun(f"#{rid}", rec, rid, info) for rid, info, rec in loaded]
        if title is None or not title.strip():  # an empty title would leave the page unnamed
            title = "sdbench: " + ", ".join(dict.fromkeys(r.record.scenario for r in items))
        if html is not None:
            _write_output(render(items, title=title), html)
            typer.echo(f"wrote {html}")
        for d, kind in ((png, "png"), (svg, "svg")):
            if d is not None:
                try:
                    paths = write_plots(items, d, kind)
                except OSError as e:
                    raise SdbenchError(f"cannot write plots into {d}: {e.strerror}") from None
                typer.echo(f"wrote {len(paths)} {kind.upper()} plots into {d}")

    _register_db(app)


DB_APP_HELP = """Check, repair or compact the results store.

check: SQLite's full integrity check, then every stored run read back against
its checksums and the results format; lists what is wrong; exit status 0 when
all is well, 1 when problems were found.

repair: rebuild the store from the runs that still read back intact (ids,
times and statuses kept); the damaged file is kept next to it as
NAME.damaged-<UTC time>; says how many runs were recovered and lost.

vacuum: rewrite the file without free pages (after many deleted runs).
"""


class ProblemsFound(SdbenchError):
    """``sdbench db check`` found problems: the summary line, exit status 1."""

    exit_code = 1


def _db_path(db: Optional[Path]) -> Path:
    from ..store import default_db_path

    path = db.expanduser() if db else default_db_path()
    if stat_or_none(path, "the results store") is None:
        raise SdbenchError(f"no results store at {path}")
    return path


def _register_db(app: typer.Typer) -> None:
    db_app = typer.Typer(name="db", help=DB_APP_HELP, invoke_without_command=True, add_completion=False,
                         rich_markup_mode=None)
    app.add_typer(db_app, name="db")

    @db_app.callback()
    def db_root(ctx: typer.Context) -> None:
        if ctx.invoked_subcommand is None:  # `sdbench db` alone: its help, on stdout, exit status 0
            typer.echo(ctx.get_help())
            raise typer.Exit(0)

    @db_app.command("check")
    def check_cmd(db: Optional[Path] = _db_option()) -> None:
        """Check the store: file structure, then every run against its checksums and the format.

        Exit status 0: no problems; 1: problems found (listed, one a line).
        """
        from ..store import open_store
        from ..store.db import StoreDamaged

        path = _db_path(db)
        try:
            store = open_store(path, create=False, upgrade=False)
        except StoreDamaged as e:
            raise ProblemsFound(f"{path} cannot be read as a results store ({e.detail}); `sdbench db repair --db "
                                f"{path}` rebuilds it from the runs that can still be read") from None
        with store:
            n, problems = store.check()
        for p in problems:
            typer.echo(f"problem: {p}")
        if problems:
            raise ProblemsFound(f"{path}: {len(problems)} problem{'s' if len(problems) != 1 else ''} "
                                f"({_runs(n)}); `sdbench db repair --db {path}` rebuilds the store from the runs "
                                "that read back intact")
        typer.echo(f"{path}: ok ({_runs(n)})")

    @db_app.command("repair")
    def repair_cmd(
        force: bool = typer.Option(False, "--force", help="Rebuild even when the check finds no problem."),
        db: Optional[Path] = _db_option(),
    ) -> None:
        """Rebuild the store from the runs that read back intact; keep the damaged file as a backup."""
        from ..store import repair_store

        path = _db_path(db)
        res = repair_store(path, force=force)
        if res.backup is None:
            typer.echo(f"{path}: no problems found, nothing to repair (--force rebuilds it anyway)")
            return
        total = len(res.recovered) + len(res.lost)
        lost = f"; lost runs: {', '.join(map(str, res.lost[:20]))}{' ...' if len(res.lost) > 20 else ''}" \
            if res.lost else ""
        typer.echo(f"rebuilt {path}: recovered {len(res.recovered)} of {_runs(total)}, lost {len(res.lost)}{lost}")
        typer.echo(f"the {'damaged' if res.problems else 'old'} file is kept as {res.backup}")

    @db_app.command("vacuum")
    def vacuum_cmd(db: Optional[Path] = _db_option()) -> None:
        """Rewrite the store file without free pages (it shrinks after deleted runs)."""
        from ..store import open_store

        path = _db_path(db)
        with open_store(path, create=False, write=True) as store:
            before, after = store.vacuum()
        typer.echo(f"vacuumed {path}: {_size(before)} -> {_size(after)}")
