"""``sdbench calibrate``: fit card and host parameters to measurements and write profiles."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import SdbenchError

# calibrate (scipy.optimize) is imported by the command that uses it: every other command starts faster


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

