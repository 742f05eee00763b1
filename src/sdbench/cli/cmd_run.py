"""``sdbench run`` and ``sdbench scenarios``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer

from dataclasses import replace as _replace

from .. import scenarios as scen
from ..errors import ConfigError, RunFailedError, SdbenchError
from ..protocols import run_scenario, run_scenarios
from ..progress import Progress
from ..workloads.registry import PROTOCOLS, protocol, text_formats
from ..records import Results, RunRecord
from ..report_text import markdown_table, side_by_side
from .formats import format_enum, format_option
from .grant import write_grant
from .params import size_option
from ..output_files import check_writable_output, write_atomically


#: md, json, csv and every protocol's own text format (espidf, sdfat, ...): the -f vocabulary (cli/formats.py)
RunFormat = format_enum("run")


def print_run(rec: RunRecord, fmt: str) -> None:
    """One run as it finishes (json and csv: all runs at the end, as one document)."""
    renders = text_formats()
    if fmt in renders:
        typer.echo(renders[fmt](rec), nl=False)
    elif fmt == "md":
        typer.echo(f"### {rec.scenario} ({'simulated, virtual clock' if rec.clock == 'virtual' else 'wall clock'})")
        typer.echo("")
        typer.echo(markdown_table(rec))
        typer.echo("")
        spec = PROTOCOLS.all().get(rec.protocol or "")
        lines = spec.summary_lines(rec) if spec is not None and spec.summary_lines is not None else []
        if lines:
            typer.echo("| summary | value |")
            typer.echo("|---|---:|")
            for k, v in lines:
                typer.echo(f"| {k} | {v} |")
            typer.echo("")


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        scenario: list[str] = typer.Argument(None, help="Built-in scenario names or scenario TOML files "
                                                        f"(default: {scen.DEFAULT_SCENARIO})."),
        runs: Optional[int] = typer.Option(None, "--runs", min=1, max=100_000,
                                           help="Timed calls per row (overrides the scenario)."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Seed for data and simulated card randomness."),
        fmt: Optional[RunFormat] = format_option(
            "run", md="a Markdown table per run with where the time went, and one of the rows the runs share side "
                      "by side", json="the results document", csv="one line per row",
            **{n: f"{n}'s own output (the default for its protocol)" for n in text_formats()}),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the results as JSON to FILE."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field, e.g. "
                                                         "--set espidf.target_size_bytes=32768 (repeatable)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or notes on stderr."),
        db: Optional[Path] = typer.Option(None, "--db", help="Results database (default: $SDBENCH_DB or the "
                                                              "per-user data directory)."),
        save: bool = typer.Option(True, "--save/--no-save", help="Save each run in the results database."),
        no_range: bool = typer.Option(False, "--no-range", help="Skip the ranges of simulated rows (10th-90th "
                                                                "percentile over the card population or the fit's "
                                                                "uncertainty; about doubles a simulated run's time)."),
        device: Optional[str] = typer.Option(None, "--device", help="Run on a real block device or image file "
                                                                    "(wall clock) instead of the scenario's card."),
        directory: Optional[str] = typer.Option(None, "--dir", help="Run the file-level tests in a mounted "
                                                                   "directory through the OS (never formatted)."),
        allow_write: bool = typer.Option(False, "--allow-write", help="Allow writing real media: --device, or the "
                                                                      "device or existing image a scenario names "
                                                                      "(destroys data in the range). Only this "
                                                                      "flag allows it, never a file or --set."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before writing to a device or image file."),
        offset: int = size_option(0, "--offset", help="--device: first byte of the range used"),
        size: int = size_option(0, "--size", help="--device: bytes of the range used (0 = to the end)"),
        buffered: bool = typer.Option(False, "--buffered", help="--device/--dir: no O_DIRECT."),
        drop_caches: bool = typer.Option(False, "--drop-caches", help="--dir: drop the kernel caches between "
                                                                      "steps (root only)."),
        workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, max=4096,
                                              help="Processes for simulated runs: scenarios side by side, and a "
                                                   "run's range runs (default: the number of CPUs). Figures do "
                                                   "not depend on it."),
    ) -> None:
        """Run scenarios (protocol + stack) and print one line per measurement.

        Simulated scenarios run on a virtual clock and are deterministic: the same
        scenario and seed give the same output.  Times are mean ms per timed call;
        MiB/s is 2^20 B/s, a row's printed figure keeps its own unit (MB/s = 10^6 B/s),
        and -f espidf prints as ESP-IDF's perf_benchmark (kB = KiB, MB/s = MiB/s).  A simulated row
        also gets a range of its time (10th-90th percentile over the card population
        or the calibration's uncertainty; see docs/results-format.md), unless --no-range.
        """
        if device and directory:
            raise SdbenchError("give --device or --dir, not both")
        real = bool(device or directory)
        names = scenario or (["espidf-memory"] if real else [scen.DEFAULT_SCENARIO])
        if json_path is not None:
            check_writable_output(json_path)
        grant = write_grant(allow_write, yes)
        loaded = []
        for n in names:
            sc = scen.load(n, list(set_))
            spec = protocol(sc.protocol)
            if runs is not None or seed is not None:
                more = [f"{spec.runs_option}={runs}"] if runs is not None else []
                more += [f"seed={seed}"] if seed is not None else []
                sc = scen.load(n, [*set_, *more])
            if device:
                if "device" not in spec.media:
                    raise SdbenchError(f"protocol {sc.protocol} does not run on a real device (--device); "
                                       f"it runs on: {', '.join(sorted(spec.media))}")
                sd = {"media": "device", "path": device, "offset_bytes": offset, "size_bytes": size,
                      "direct": "off" if buffered else "auto"}
                # stored as a run of its own: the protocol on that device, not the scenario it started from
                sc = _replace(sc, sd=sd, flash={}, options=_retarget(sc, spec, "device"),
                              name=f"{sc.protocol}@{device}",
                              description=f"{spec.summary}, on {device} (real device or image, wall clock)")
                sc.media_config("sd")
            elif directory:
                if "dir" not in spec.media:
                    raise SdbenchError(f"protocol {sc.protocol} does not run in a directory (--dir); "
                                       f"it runs on: {', '.join(sorted(spec.media))}")
                sc = _replace(sc, sd={}, flash={}, directory=directory, directory_drop_caches=drop_caches,
                              options=_retarget(sc, spec, "dir"), name=f"{sc.protocol}@dir:{directory}",
                              description=f"{spec.summary}, in the directory {directory} (through the OS, wall "
                                          f"clock)")
            # permission to write real media comes from these flags alone, never from the scenario's data
            loaded.append(_replace(sc, write_grant=grant))
        records: list[RunRecord] = []
        saved: list[int | None] = []  # each record's run id in the store (None: not saved)
        name = None if fmt is None else str(getattr(fmt, "value", fmt))
        if name in text_formats():  # a protocol's own format prints that protocol's runs only: refused before work
            for sc in loaded:
                own = protocol(sc.protocol).default_format
                if own != name:
                    raise ConfigError(f"-f {name} prints runs of the protocol whose format it is; scenario "
                                      f"{sc.name} runs {sc.protocol} (formats: md, json, csv"
                                      f"{'' if own == 'md' else ', ' + own})")
        store = None
        if save:
            from ..store import open_store

            store = open_store(str(db) if db is not None else None)
        n_workers = workers or os.cpu_count() or 1
        progress = not quiet  # a bar on a terminal, a line every few seconds elsewhere
        simulated = [sc for sc in loaded if sc.clock_kind() == "virtual"]
        try:
            # simulated scenarios are independent: with several, they run side by side first, in processes of
            # their own; the records are printed and saved below in the order given
            ahead = _run_side_by_side(simulated, n_workers, ranges=not no_range, progress=progress) \
                if n_workers > 1 and len(simulated) > 1 else {}
            for sc in loaded:
                if id(sc) in ahead:
                    rec, stored_id = _keep(sc, ahead[id(sc)], store, quiet=quiet)
                else:
                    rec, stored_id = _run_one(sc, store, progress=progress, quiet=quiet, ranges=not no_range,
                                              workers=n_workers)
                records.append(rec)
                saved.append(stored_id)
                if not quiet:
                    for w in rec.warnings:
                        typer.echo(f"warning: {w}", err=True)
                print_run(rec, name or protocol(sc.protocol).default_format)
        finally:
            if store is not None:
                store.close()
        results = Results(runs=tuple(records))
        if name == "json":
            typer.echo(results.to_json(), nl=False)
        elif name == "csv":
            from ..report.export import to_csv

            typer.echo(to_csv([("" if rid is None else rid, rec) for rid, rec in zip(saved, records)]), nl=False)
        elif len(records) > 1:
            table = side_by_side(records)
            if table:
                typer.echo(f"### side by side: {len(records)} runs\n")
                typer.echo(table)
        if json_path is not None:
            write_atomically(json_path, results.to_json())

    @app.command("scenarios")
    def scenarios_cmd() -> None:
        """List built-in scenarios with a one-line description (Markdown table; as `sdbench list scenarios`)."""
        from .cmd_list import print_scenarios

        print_scenarios()


def _retarget(sc: scen.Scenario, spec: Any, kind: str) -> dict[str, Any]:
    """The scenario's protocol options once the command line has moved it onto media ``kind``."""
    return {**sc.options, spec.table: spec.on_media(spec.config_of(sc), kind)}


def _run_side_by_side(scs: list[scen.Scenario], workers: int, *, ranges: bool,
                      progress: bool) -> dict[int, RunRecord | SdbenchError]:
    """Simulated scenarios in ``workers`` processes; each one's record or error, by id() of its scenario."""
    bar = Progress(len(scs), f"{len(scs)} scenarios in {min(workers, len(scs))} processes", enabled=progress,
                   unit="scenarios")
    try:
        got = run_scenarios(scs, workers=workers, ranges=ranges,
                            done=lambda i, res: bar.advance(f"{scs[i].name} done"))
    finally:
        bar.close()
    return {id(sc): res for sc, res in zip(scs, got)}


def _keep(sc: scen.Scenario, res: RunRecord | SdbenchError, store, *, quiet: bool) -> tuple[RunRecord, int | None]:
    """A scenario that ran in a process of its own: its record saved whole (or its error raised, as if it ran
    here), and its run id."""
    if isinstance(res, SdbenchError):
        raise res
    if not quiet:
        typer.echo(f"ran {sc.name}: {sc.description}", err=True)
    if store is None:
        return res, None
    rid = store.save(res)
    if not quiet:
        typer.echo(f"saved as run {rid}", err=True)
    return res, rid


def _run_one(sc: scen.Scenario, store, *, progress: bool, quiet: bool, ranges: bool = True,
             workers: int = 1) -> tuple[RunRecord, int | None]:
    """Run one scenario; with a store, its row is written once the stack is built and each finished row is
    committed at once (a run killed part-way keeps what it measured). A run that fails after it began is
    stored as failed with the reason, and the command exits 1. Nothing is said before the stack is built and
    checked, so a refusal stays one line."""
    rid: int | None = None
    began = False

    def begin(built) -> None:
        nonlocal rid, began
        if not quiet:
            typer.echo(f"running {sc.name}: {sc.description}", err=True)
        if store is not None:
            rid = store.begin_run(scenario=sc.name, clock=built.clock.kind, protocol=sc.protocol, seed=sc.seed,
                                  source="simulated" if built.clock.kind == "virtual" else "measured")
        began = True

    try:
        # rows are stored as they finish; their ranges come at the end, with the record finish_run stores
        rec = run_scenario(sc, progress=progress, on_built=begin, ranges=ranges, workers=workers,
                           on_row=(lambda row: store.add_row(rid, row)) if store is not None else None)
    except KeyboardInterrupt:
        from . import stop_reason  # the package's signal handling, loaded before any command runs

        _mark_failed(store, rid, stop_reason())
        raise
    except SdbenchError as e:
        if not began:
            raise  # refused before the run began: nothing was stored
        _mark_failed(store, rid, str(e))
        raise RunFailedError(f"run {rid} failed: {e}" if rid is not None else f"run failed: {e}") from None
    except Exception as e:
        _mark_failed(store, rid, f"internal error: {type(e).__name__}: {e}")
        raise
    if store is None:
        return rec, None
    store.finish_run(rid, rec)
    if not quiet:
        typer.echo(f"saved as run {rid}", err=True)
    return rec, rid


def _mark_failed(store, rid: int | None, reason: str) -> None:
    """Store a begun run as failed; the error that failed it is the one to report, not a second one."""
    if store is None or rid is None:
        return
    try:
        store.fail_run(rid, reason)
    except SdbenchError:
        pass  # the run stays incomplete, which is true too
