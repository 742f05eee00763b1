"""``sdbench run`` and ``sdbench scenarios``."""
from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from dataclasses import replace as _replace

from .. import scenarios as scen
from ..errors import SdbenchError
from ..protocols import RUNS_OVERRIDE, run_scenario
from ..records import Results, RunRecord
from ..report_text import markdown_table
from ..workloads.espidf import espidf_line
from .output import check_writable_output, write_atomically


class OutFormat(str, Enum):
    espidf = "espidf"
    table = "table"
    json = "json"


def print_run(rec: RunRecord, fmt: OutFormat) -> None:
    if fmt is OutFormat.espidf:
        for r in rec.rows:
            typer.echo(espidf_line(r))
    elif fmt is OutFormat.table:
        typer.echo(f"### {rec.scenario} ({'simulated, virtual clock' if rec.clock == 'virtual' else 'wall clock'})")
        typer.echo("")
        typer.echo(markdown_table(rec))
        typer.echo("")
        summary = rec.metadata.get("p2_summary")
        if summary:
            typer.echo("| summary | value |")
            typer.echo("|---|---:|")
            for k, v in summary.items():
                shown = f"{v:.0f} KiB/s" if k.endswith("kib_s") else (f"{v * 100:.0f} %" if "efficiency" in k
                                                                       else f"{v:.2f}x")
                typer.echo(f"| {k.replace('_', ' ')} | {shown} |")
            typer.echo("")


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_cmd(
        scenario: list[str] = typer.Argument(None, help="Built-in scenario names or scenario TOML files "
                                                        f"(default: {scen.DEFAULT_SCENARIO})."),
        runs: Optional[int] = typer.Option(None, "--runs", min=1, max=100_000,
                                           help="Timed calls per row (overrides the scenario)."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Seed for data and simulated card randomness."),
        fmt: Optional[OutFormat] = typer.Option(None, "--format", "-f",
                                                help="espidf: the example's printf lines (default for the ESP-IDF "
                                                     "protocol); table: a Markdown table (default otherwise); "
                                                     "json: the results document on stdout."),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Also write the results as JSON to FILE."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field, e.g. "
                                                         "--set espidf.target_size_bytes=32768 (repeatable)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar or notes on stderr."),
        db: Optional[Path] = typer.Option(None, "--db", help="Results database (default: $SDBENCH_DB or the "
                                                              "per-user data directory)."),
        save: bool = typer.Option(True, "--save/--no-save", help="Save each run in the results database."),
        device: Optional[str] = typer.Option(None, "--device", help="Run on a real block device or image file "
                                                                    "(wall clock) instead of the scenario's card."),
        directory: Optional[str] = typer.Option(None, "--dir", help="Run the file-level tests in a mounted "
                                                                   "directory through the OS (never formatted)."),
        allow_write: bool = typer.Option(False, "--allow-write", help="Allow writing to --device (destroys data "
                                                                      "in the range)."),
        yes: bool = typer.Option(False, "--yes", help="Do not ask before writing to --device."),
        offset: int = typer.Option(0, "--offset", min=0, help="--device: first byte of the range used."),
        size: int = typer.Option(0, "--size", min=0, help="--device: bytes of the range used (0 = to the end)."),
        buffered: bool = typer.Option(False, "--buffered", help="--device/--dir: no O_DIRECT."),
        drop_caches: bool = typer.Option(False, "--drop-caches", help="--dir: drop the kernel caches between "
                                                                      "steps (root only)."),
    ) -> None:
        """Run scenarios (protocol + stack) and print one line per measurement.

        Simulated scenarios run on a virtual clock and are deterministic: the same
        scenario and seed give the same output.  Times are mean ms per timed call;
        kB = KiB and MB/s = MiB/s as in ESP-IDF's perf_benchmark.
        """
        if device and directory:
            raise SdbenchError("give --device or --dir, not both")
        real = bool(device or directory)
        names = scenario or (["espidf-memory"] if real else [scen.DEFAULT_SCENARIO])
        if json_path is not None:
            check_writable_output(json_path)
        overrides = list(set_)
        loaded = []
        for n in names:
            sc_over = list(overrides)
            if runs is not None:
                sc_over.append(f"{RUNS_OVERRIDE[_protocol_of(n)]}={runs}")
            if seed is not None:
                sc_over.append(f"seed={seed}")
            sc = scen.load(n, sc_over)
            if device:
                if sc.protocol not in ("espidf", "raw"):
                    raise SdbenchError(f"--device runs the espidf or raw protocol, not {sc.protocol}")
                sd = {"media": "device", "path": device, "allow_write": allow_write, "yes": yes,
                      "offset_bytes": offset, "size_bytes": size, "direct": "off" if buffered else "auto"}
                parts = tuple(p for p in sc.espidf.parts if p.startswith("sd_")) or ("sd_raw",)
                sc = _replace(sc, sd=sd, flash={}, espidf=_replace(sc.espidf, parts=parts))
                sc.media_config("sd")
            elif directory:
                if sc.protocol != "espidf":
                    raise SdbenchError(f"--dir runs the espidf protocol, not {sc.protocol}")
                sc = _replace(sc, sd={}, flash={}, directory=directory, directory_drop_caches=drop_caches,
                              espidf=_replace(sc.espidf, parts=("dir",)))
            loaded.append(sc)
        records = []
        store = None
        if save:
            from ..store import open_store

            store = open_store(str(db) if db is not None else None)
        for sc in loaded:
            if not quiet:
                typer.echo(f"running {sc.name}: {sc.description}", err=True)
            if store is not None:
                # each finished row is committed at once: a run killed part-way keeps what it measured
                rid = store.begin_run(scenario=sc.name, clock=sc.clock_kind(), protocol=sc.protocol, seed=sc.seed,
                                      source="simulated" if sc.clock_kind() == "virtual" else "measured")
                rec = run_scenario(sc, progress=not quiet and sys.stderr.isatty(),
                                   on_row=lambda row, rid=rid: store.add_row(rid, row))
                store.finish_run(rid, rec)
                typer.echo(f"saved as run {rid}", err=True)
            else:
                rec = run_scenario(sc, progress=not quiet and sys.stderr.isatty())
            records.append(rec)
            if not quiet:
                for w in rec.warnings:
                    typer.echo(f"warning: {w}", err=True)
            print_run(rec, fmt or (OutFormat.espidf if sc.protocol == "espidf" else OutFormat.table))
        results = Results(runs=tuple(records))
        if fmt is OutFormat.json:
            typer.echo(results.to_json(), nl=False)
        if json_path is not None:
            write_atomically(json_path, results.to_json())

    @app.command("scenarios")
    def scenarios_cmd() -> None:
        """List built-in scenarios with a one-line description (Markdown table)."""
        typer.echo("| scenario | description |")
        typer.echo("|---|---|")
        for name, desc in scen.describe_all():
            mark = " (default)" if name == scen.DEFAULT_SCENARIO else ""
            typer.echo(f"| {name}{mark} | {desc} |")


def _protocol_of(name: str) -> str:
    data, _ = scen._load_raw(name)
    proto = data.get("protocol", "espidf")
    return proto if proto in RUNS_OVERRIDE else "espidf"
