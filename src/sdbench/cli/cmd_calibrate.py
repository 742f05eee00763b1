"""``sdbench calibrate``: fit card and host parameters to measurements and write profiles."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import SdbenchError
from ..importers.validate import printable
from .params import size_option

# calibrate (scipy.optimize) is imported by the command that uses it: every other command starts faster


def register(app: typer.Typer) -> None:
    @app.command("calibrate")
    def calibrate_cmd(
        group: list[str] = typer.Argument(None, help="Fit groups to run (default: all). See --list."),
        data: Optional[Path] = typer.Option(None, "--data", help="Measurements CSV (default: the shipped copy)."),
        output: Optional[Path] = typer.Option(None, "--output", "-o", "--output-dir",
                                              help="Fit groups and --model-error: the directory to write into "
                                                   "(cards/*.toml, hosts/*.toml, flash/*.toml; default: "
                                                   "calibrated); the shipped profiles come from -o "
                                                   "src/sdbench/data. With --from: the card profile file to write "
                                                   "(CARD.toml)."),
        list_: bool = typer.Option(False, "--list", help="List fit groups and exit."),
        workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, max=4096,
                                              help="Fit groups in this many processes (default: one per CPU; "
                                                   "one by one when -o is the data folder, where each group "
                                                   "reads the profiles the groups before it wrote); with "
                                                   "--model-error, its predictions."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
        from_: Optional[Path] = typer.Option(None, "--from",
                                             help="Calibrate a card from your own measurements: an ESP-IDF "
                                                  "perf_benchmark log, SdFat bench output, fio JSON, sdbench "
                                                  "results JSON or a CSV of row,value,unit[,runs] "
                                                  "(docs/calibration.md)."),
        setup: Optional[str] = typer.Option(None, "--setup",
                                            help="With --from: the scenario the measurements were taken on (a "
                                                 "shipped name or a scenario TOML file)."),
        card: Optional[str] = typer.Option(None, "--card",
                                           help="With --from: the card profile's name (default: the output "
                                                "file's name without .toml)."),
        capacity_bytes: Optional[int] = size_option(None, "--capacity-bytes", minimum=1 << 20,
                                                    help="With --from: the card's capacity (default: the "
                                                         "scenario's card's)"),
        runs: Optional[int] = typer.Option(None, "--runs", min=1, max=100_000,
                                           help="With --from: timed calls per row in the fit's runs (default: "
                                                "the measured rows' runs, else the scenario's)."),
        force: bool = typer.Option(False, "--force", help="With --from: replace an existing output file."),
        model_error: bool = typer.Option(False, "--model-error",
                                         help="Measure the model error on the train rows no fit group uses (with "
                                              "the installed profiles) and write model-error.toml into -o."),
    ) -> None:
        """Fit card and host parameters to the raw-level train rows (scipy least squares) and write profiles.

        Only physical parameters are fitted (µs, ms, cycles, bytes); the simulator is the
        model, run for every trial.  Prints the residual of every row used and writes each
        fitted field's relative standard deviation (fit_rel_sd) into the profiles.

        With --from FILE --setup SCENARIO -o CARD.toml: fit a card profile to your own
        measurements, taken on SCENARIO; fields no measured row tells keep the median of
        the shipped fitted cards (those two or more of them fitted are left to the
        population, timing_from = "population", and the ranges of a run with the profile
        span their values).

        With --model-error: cross-validate every train row by host and by card (as `sdbench
        validate --cross` does) and record the structural error per class of what is
        uncalibrated in a stack (model-error.toml); every simulated range includes its class's.
        """
        progress = None if quiet else (lambda s: typer.echo(s, err=True))
        if from_ is not None or setup is not None:
            _from_file(group, data, list_, from_, setup, output, card, capacity_bytes, runs, force, progress)
            return
        for flag, value in (("--card", card), ("--capacity-bytes", capacity_bytes), ("--runs", runs),
                            ("--force", force or None)):
            if value is not None:
                raise SdbenchError(f"{flag} belongs to --from (calibrating a card from your measurements)")
        from .. import population
        from .. import profiles
        from ..calibrate import TARGETS, fit, fit_all, groups, load_measurements, sd_cells, write_results
        from ..output_files import check_output_dir

        if model_error:
            _model_error(group, data, list_, output, progress, workers or os.cpu_count() or 1)
            return
        gs = groups()
        if list_:
            typer.echo("| group | scenarios | host | description |")
            typer.echo("|---|---|---|---|")
            for g in gs.values():
                typer.echo(f"| {g.name} | {len(g.scenarios)} | {g.host} | {g.description} |")
            return
        output_dir = output if output is not None else Path("calibrated")
        for name in group or list(gs):
            if name not in gs:
                raise SdbenchError(f"unknown fit group {name!r} (known: {', '.join(gs)})")
        # before the fits: a path that cannot take the profiles fails now, not after minutes of fitting
        check_output_dir(output_dir, "-o", tuple(sorted({folder for _, folder, _, _ in TARGETS.values()})))
        meas = load_measurements(data)
        names = group or list(gs)
        n_workers = min(workers or os.cpu_count() or 1, len(names))
        if output_dir.resolve() == profiles.DATA.resolve():
            n_workers = 1  # each group reads the profiles the groups before it wrote
        fitted: dict[str, Any] = {}
        if n_workers > 1:
            if not quiet:
                typer.echo(f"fitting {len(names)} groups in {n_workers} processes ...", err=True)
            done = None if quiet else (lambda name: typer.echo(f"fitted {name}", err=True))
            fitted = dict(zip(names, fit_all(names, meas, n_workers, done)))
        for name in names:
            if name in fitted:
                res = fitted[name]
            else:
                if not quiet:
                    typer.echo(f"fitting {name} ...", err=True)
                res = fit(name, meas, progress=progress)
            paths = write_results(res, output_dir)
            population.forget()  # with -o the data folder, the next group reads what this one wrote
            typer.echo(f"### {name}: {res.evaluations} simulations, cost {res.cost:.4g}")
            typer.echo("")
            typer.echo("| scenario | row | measured | model | error |")
            typer.echo("|---|---|---:|---:|---:|")
            for s, row, m, p in res.residuals:
                typer.echo(f"| {s} | {row} | {m:g} | {p:.4g} | {(p - m) / m * 100:+.1f} % |")
            typer.echo("")
            typer.echo("| field | of | value | σ / value | σ from |")
            typer.echo("|---|---|---:|---:|---|")
            for u in res.uncertainty:
                sd, source = sd_cells(u)
                typer.echo(f"| {u.name} | {u.target} | {u.value:.6g} | {sd} | {source} |")
            typer.echo("")
            for p in paths:
                typer.echo(f"wrote {p}")
            typer.echo("")


def _model_error(group: list[str] | None, data: Path | None, list_: bool, output: Path | None,
                 progress: object, workers: int = 1) -> None:
    from ..calibrate import load_measurements
    from ..output_files import check_output_dir, check_writable_output, write_atomically
    from ..crossval import CLASS_TITLES, cross_validate, structural_toml
    from ..population import MODEL_ERROR_FILE, Z90

    if group or list_:
        raise SdbenchError("--model-error takes no fit groups and no --list")
    if output is None:
        raise SdbenchError("--model-error needs -o DIR (the shipped file is src/sdbench/data/model-error.toml)")
    check_output_dir(output, "-o")
    path = output / MODEL_ERROR_FILE
    if output.is_dir():
        check_writable_output(path)  # before the runs: a path that cannot be written fails now
    meas = load_measurements(data)
    res = cross_validate(meas, progress=None if progress is None else (lambda s: typer.echo(s, err=True)),
                         workers=workers)
    output.mkdir(parents=True, exist_ok=True)
    write_atomically(path, structural_toml(res))
    for k, kinds in res["structural"].items():
        for kind, (sd, n) in sorted(kinds.items()):
            typer.echo(f"{CLASS_TITLES[k]}: {kind}s σ {sd * 100:.1f} % (log) over {n} rows; ranges span "
                       f"±{Z90:.2f} σ")
    for by in ("host", "card"):
        o = res[by]["overall"]
        cov = "n/a" if o["coverage"] is None else f"{o['coverage'] * 100:.0f} %"
        typer.echo(f"cross-validation by {by}: {o['rows']} rows, coverage {cov} (each σ without the held-out "
                   f"{by}'s rows)")
    typer.echo(f"wrote {path}")


def _from_file(group: list[str] | None, data: Path | None, list_: bool, from_: Path | None, setup: str | None,
               output: Path | None, card: str | None, capacity_bytes: int | None, runs: int | None, force: bool,
               progress) -> None:  # type: ignore[no-untyped-def]
    """``sdbench calibrate --from FILE --setup SCENARIO -o CARD.toml``."""
    if group or data is not None or list_:
        what = "fit groups" if group else ("--data" if data is not None else "--list")
        raise SdbenchError(f"--from calibrates one card from your file: {what} cannot go with it")
    if from_ is None or setup is None:
        raise SdbenchError("--from FILE needs --setup SCENARIO (the scenario the measurements were taken on), and "
                           "--setup needs --from")
    if output is None:
        raise SdbenchError("--from needs -o CARD.toml: the card profile to write")
    from ..usercal import calibrate_card, check_output, fit_warnings, markdown, write

    check_output(output, force)  # before the fit: a refusal costs nothing
    name = card if card is not None else output.stem
    if not name.strip():
        raise SdbenchError("--card: the card's name must not be empty")
    if not name.isprintable():
        raise SdbenchError(f"--card {printable(name)[:60]!r}: a card's name has no control characters or line "
                           "breaks")
    fit = calibrate_card(from_, setup, card=name, capacity_bytes=capacity_bytes, runs=runs, progress=progress)
    path = write(fit, output, force)
    for line in markdown(fit):
        typer.echo(line)
    typer.echo("")
    typer.echo(f"wrote {path} (use it: sdbench run {setup} --set sd.card=\"{path}\")")
    for w in fit_warnings(fit):
        typer.echo(f"warning: {w}", err=True)
