"""``sdbench sweep``: run a scenario over a grid of parameter values, in parallel."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from ..errors import SdbenchError
from ..progress import Progress


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep_cmd(
        spec_path: Path = typer.Argument(..., metavar="SPEC.toml", help="Sweep spec file (base scenario, [grid], "
                                                                          "optional [fixed] and [plot]), or the "
                                                                          "name of a built-in one."),
        workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, max=4096,
                                              help="Parallel workers (default: the number of CPUs)."),
        dask: Optional[str] = typer.Option(None, "--dask", metavar="ADDRESS",
                                           help="Run on a Dask distributed cluster: tcp://HOST:PORT of its "
                                                "scheduler, or 'local' for a LocalCluster of --workers processes."),
        db: Optional[Path] = typer.Option(None, "--db", help="Results store (default: $SDBENCH_DB, else "
                                                             "results.sqlite in the per-user data directory)."),
        save: bool = typer.Option(True, "--save/--no-save", help="Save the runs in the results store."),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Also write all runs as JSON to FILE."),
        plot_path: Optional[Path] = typer.Option(None, "--plot", help="Write a PNG figure: --y against --x, one "
                                                                      "line per --series value."),
        x: Optional[str] = typer.Option(None, "--x", help="Grid key on the x axis (default: [plot] x, else the "
                                                          "first grid key)."),
        series: Optional[str] = typer.Option(None, "--series", help="Grid key with one line per value (default: "
                                                                    "[plot] series, else the second grid key)."),
        y: Optional[str] = typer.Option(None, "--y", help="Row label to plot; {key} is replaced by each "
                                                          "configuration's value (default: [plot] y)."),
        rows: list[str] = typer.Option([], "--row", help="Only these row labels in the table (repeatable)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    ) -> None:
        """Run every configuration of a sweep spec and print a Markdown table.

        Each configuration's run record (its parameters in metadata["sweep"]) is
        saved in the results store under one sweep id.  Simulated runs are
        deterministic: a configuration's result does not depend on the worker count.
        """
        from .. import sweep as sw
        from ..output_files import check_writable_output, write_atomically

        spec = sw.load_spec(spec_path)
        if save:
            from ..store import check_writable

            check_writable(db)  # a store the runs cannot go into is refused before they run
        if json_path is not None:
            check_writable_output(json_path)
        px = py = ps = None
        if plot_path is not None:
            check_writable_output(plot_path)
            if plot_path.suffix.lower() != ".png":
                raise SdbenchError(f"--plot {plot_path}: the figure is written as PNG (use a .png name)")
            keys = spec.keys
            px = x or spec.plot.get("x") or keys[0]
            ps = series or spec.plot.get("series") or (next((k for k in keys if k != px), None))
            py = y or spec.plot.get("y")
            if not py:
                raise SdbenchError("--plot needs --y ROW_LABEL (or y in the spec's [plot] table)")
            for k, what in ((px, "--x"), (ps, "--series")):
                if k is not None and k not in keys:
                    raise SdbenchError(f"{what} {k!r} is not a grid key ({', '.join(keys)})")
        sw.check_sweep(spec)  # a refusal comes before any note
        n = len(spec.configurations())
        if not quiet:
            where = f"Dask {dask}" if dask else "local processes"
            typer.echo(f"sweep {spec.name}: {n} configurations of {spec.base} on {where} "
                       f"({workers or os.cpu_count()} workers)", err=True)
        with Progress(n, f"sweep {spec.name}", enabled=not quiet, unit="configurations") as prog:
            res = sw.run_sweep(spec, workers=workers, dask=dask, progress=lambda where: prog.advance(where),
                               check=False)
        # the row labels exist only once the runs have: a label no run has is refused before anything is
        # printed, saved or written
        table = sw.markdown(res, rows or None)
        if py is not None and not any(r.label == py for rec in res.records for r in rec.rows):
            raise SdbenchError(f"--y {py!r}: no configuration has a row labelled so")
        typer.echo(f"### sweep {spec.name} ({res.sweep_id}): {n} configurations, {res.wall_s:.1f} s\n")
        typer.echo(table)
        if save:
            ids = sw.save(res, db)
            if ids is None:
                msg = "this sdbench has no results store"
                if json_path is None:
                    raise SdbenchError(f"{msg}: use --json FILE to keep the results")
                if not quiet:
                    typer.echo(f"{msg}; results are in {json_path}", err=True)
            elif not quiet:
                typer.echo(f"saved {len(ids)} runs as sweep {res.sweep_id} (runs {ids[0]}..{ids[-1]})", err=True)
        if json_path is not None:
            write_atomically(json_path, sw.results_json(res))
        if plot_path is not None:
            assert px is not None and py is not None
            write_atomically(plot_path, sw.plot_png(res, x=px, y=py, series=ps))
            if not quiet:
                typer.echo(f"wrote {plot_path}", err=True)
