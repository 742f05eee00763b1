"""``sdbench validate``: every published figure, predicted vs measured."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from ..output_files import check_writable_output, write_atomically


def register(app: typer.Typer) -> None:
    @app.command("validate")
    def validate_cmd(
        scenario: list[str] = typer.Argument(None, help="Scenarios to check (default: every one in the data)."),
        data: Optional[Path] = typer.Option(None, "--data", help="Measurements CSV (default: the shipped copy)."),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Write the comparison as JSON to FILE."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    ) -> None:
        """Run every scenario named in a measurements file; print predicted vs measured per row.

        Train rows show the error; withheld rows show the prediction only.  The summary gives
        median and worst absolute error for raw-level rows (tolerance ±10 %), rows through the
        USB bridge (±15 %) and file-level rows (±20 %).
        """
        from ..calibrate import load_measurements
        from ..validation import summarise, validate_rows

        if json_path is not None:
            check_writable_output(json_path)
        meas = load_measurements(data)
        rows, missing = validate_rows(meas, scenario or None, progress=not quiet and sys.stderr.isatty())
        summ = summarise(rows)
        typer.echo("| scenario | row | level | split | measured | predicted | unit | error |")
        typer.echo("|---|---|---|---|---:|---:|---|---:|")
        for r in rows:
            meas_s = "withheld" if r["measured"] is None else f"{r['measured']:g}"
            pred_s = "not emitted" if r["predicted"] is None else f"{r['predicted']:.4g}"
            err_s = "" if r["error"] is None else f"{r['error'] * 100:+.1f} %"
            typer.echo(f"| {r['scenario']} | {r['row']} | {r['level']} | {r['split']} | {meas_s} | {pred_s} | "
                       f"{r['unit']} | {err_s} |")
        typer.echo("")
        for level in ("raw", "bridge", "file"):
            if level in summ:
                s = summ[level]
                typer.echo(f"{level}-level train rows: {s['rows']}, median |error| {s['median_abs_error'] * 100:.1f} %, "
                           f"worst {s['worst_abs_error'] * 100:.1f} %, within ±{s['tolerance'] * 100:.0f} %: "
                           f"{s['within_tolerance']}/{s['rows']}")
        typer.echo(f"withheld rows predicted: {summ['withheld_predicted']}")
        if missing:
            typer.echo(f"scenarios not built in yet: {', '.join(missing)}")
        if summ["not_emitted"]:
            typer.echo(f"rows not emitted: {len(summ['not_emitted'])}")
        if json_path is not None:
            doc = {"rows": rows, "summary": summ, "missing_scenarios": missing}
            write_atomically(json_path, json.dumps(doc, indent=2) + "\n")

