"""``sdbench calibrate``, ``sdbench validate`` and ``sdbench trace``: the simulated targets."""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from .. import scenarios as scen
from ..errors import SdbenchError
from ..protocols import run_scenario
from ..output_files import check_writable_output, write_atomically

if TYPE_CHECKING:
    from ..calibrate import Measurement

# calibrate (scipy.optimize) is imported by the commands that use it: every other command starts faster


def validate_rows(meas: list[Measurement], names: list[str] | None = None,
                  progress: bool = False) -> tuple[list[dict[str, Any]], list[str]]:
    from ..calibrate import row_level, row_value

    wanted = names or sorted({m.scenario for m in meas})
    known = set(scen.builtin_names())
    out: list[dict[str, Any]] = []
    missing = []
    for name in wanted:
        rows = [m for m in meas if m.scenario == name]
        if name not in known:
            missing.append(name)
            continue
        if progress:
            typer.echo(f"simulating {name} ...", err=True)
        rec = run_scenario(scen.load(name))
        got = {r.label: r for r in rec.rows}
        for m in rows:
            r = got.get(m.row)
            pred = row_value(r, m.unit) if r is not None else None
            err = (pred - m.value) / m.value if (pred is not None and m.value) else None
            out.append({"scenario": name, "row": m.row, "level": row_level(m), "split": m.split, "unit": m.unit,
                        "measured": m.value, "predicted": pred, "error": err, "emitted": r is not None})
    return out, missing


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    s: dict[str, Any] = {}
    for level, tol in (("raw", 0.10), ("bridge", 0.15), ("file", 0.20)):
        errs = [abs(r["error"]) for r in rows if r["split"] == "train" and r["level"] == level and r["error"] is not None]
        if errs:
            s[level] = {"rows": len(errs), "median_abs_error": statistics.median(errs), "worst_abs_error": max(errs),
                        "tolerance": tol, "within_tolerance": sum(e <= tol for e in errs)}
    s["not_emitted"] = [f"{r['scenario']}: {r['row']}" for r in rows if not r["emitted"]]
    s["withheld_predicted"] = sum(1 for r in rows if r["split"] == "withheld" and r["predicted"] is not None)
    return s


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    def calibrate_cmd(
        group: list[str] = typer.Argument(None, help="Fit groups to run (default: all). See --list."),
        data: Optional[Path] = typer.Option(None, "--data", help="Measurements CSV (default: the shipped copy)."),
        output_dir: Path = typer.Option(Path("calibrated"), "--output-dir", "-o",
                                        help="Where to write fitted profiles (cards/*.toml, hosts/*.toml). "
                                             "The shipped ones come from -o src/sdbench/data."),
        list_: bool = typer.Option(False, "--list", help="List fit groups and exit."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    ) -> None:
        """Fit card and host parameters to the raw-level train rows (scipy least squares) and write profiles.

        Only physical parameters are fitted (µs, ms, cycles, bytes); the simulator is the
        model, run for every trial.  Prints the residual of every row used.
        """
        from ..calibrate import fit, groups, load_measurements, write_results

        gs = groups()
        if list_:
            typer.echo("| group | scenarios | host | description |")
            typer.echo("|---|---|---|---|")
            for g in gs.values():
                typer.echo(f"| {g.name} | {len(g.scenarios)} | {g.host} | {g.description} |")
            return
        meas = load_measurements(data)
        for name in group or list(gs):
            if name not in gs:
                raise SdbenchError(f"unknown fit group {name!r} (known: {', '.join(gs)})")
        for name in group or list(gs):
            if not quiet:
                typer.echo(f"fitting {name} ...", err=True)
            res = fit(name, meas, progress=None if quiet else (lambda s: typer.echo(s, err=True)))
            paths = write_results(res, output_dir)
            typer.echo(f"### {name}: {res.evaluations} simulations, cost {res.cost:.4g}")
            typer.echo("")
            typer.echo("| scenario | row | measured | model | error |")
            typer.echo("|---|---|---:|---:|---:|")
            for s, row, m, p in res.residuals:
                typer.echo(f"| {s} | {row} | {m:g} | {p:.4g} | {(p - m) / m * 100:+.1f} % |")
            typer.echo("")
            for p in paths:
                typer.echo(f"wrote {p}")
            typer.echo("")

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

    @app.command("trace")
    def trace_cmd(
        scenario: str = typer.Argument(..., help="A simulated scenario (name or TOML file)."),
        limit: int = typer.Option(60, "--limit", "-n", min=1, help="Commands to list."),
        skip: int = typer.Option(0, "--skip", min=0, help="Commands to skip first."),
        row: Optional[str] = typer.Option(None, "--row", help="Only commands issued inside this row's timed calls."),
        runs: int = typer.Option(1, "--runs", min=1, help="Timed calls per row while tracing."),
        set_: list[str] = typer.Option([], "--set", help="Override a scenario field (repeatable)."),
    ) -> None:
        """List the SD commands a simulated scenario issues, like a logic analyser.

        Columns: time since start (µs), command, argument, data bytes, duration (µs),
        cumulative time (ms).  ``CMD13 ×n`` is status polling repeated n times.
        """
        from ..workloads.registry import protocol

        base = scen.load(scenario, list(set_))
        if base.sd.get("media") != "sim":
            raise SdbenchError(f"scenario {scenario} has no simulated SD card to trace")
        sc = scen.load(scenario, list(set_) + ["sd.log_commands=true", f"{protocol(base.protocol).runs_option}={runs}"])
        windows: list[tuple[int, int, str]] = []
        listener = _Windows(windows)
        built_dev: list[Any] = []
        def on_built(b: Any) -> None:
            built_dev.append(b)
            listener.clock = b.clock

        rec = run_scenario(sc, listeners=(listener,), on_built=on_built)
        from ..media.base import bottom

        dev = bottom(built_dev[0].target.sd_device)  # below any cache or bridge
        log = dev.log or []
        if row is not None:
            spans = [(a, b) for a, b, lab in windows if lab == row]
            if not spans:
                raise SdbenchError(f"row {row!r} not in {sc.name} (rows: {', '.join(r.label for r in rec.rows)})")
            log = [e for e in log if any(a <= e.t_ns < b for a, b in spans)]
        typer.echo("| # | t µs | command | arg | bytes | µs | cum ms |")
        typer.echo("|---:|---:|---|---:|---:|---:|---:|")
        t_origin = log[0].t_ns if log else 0
        cum = 0
        for i, e in enumerate(log):
            cum += e.dur_ns
            if i < skip:
                continue
            if i >= skip + limit:
                typer.echo(f"... {len(log) - skip - limit} more (use --limit/--skip)")
                break
            name = e.name if e.repeat == 1 else f"{e.name} ×{e.repeat}"
            typer.echo(f"| {i} | {(e.t_ns - t_origin) / 1e3:.1f} | {name} | {e.arg} | {e.nbytes} | {e.dur_ns / 1e3:.1f} | "
                       f"{cum / 1e6:.3f} |")


class _Windows:
    """Timer listener recording (start, stop, label) on the virtual clock."""

    def __init__(self, out: list[tuple[int, int, str]]) -> None:
        self.out = out
        self._start = 0
        self.clock: Any = None

    def timer_start(self, label: str) -> None:
        self._label = label
        self._start = self._now()

    def timer_stop(self, label: str) -> None:
        self.out.append((self._start, self._now(), label))

    def _now(self) -> int:
        return self.clock.now_ns() if self.clock is not None else 0
