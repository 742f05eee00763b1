"""``sdbench validate``: every published figure, predicted vs measured."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import typer

from ..errors import SdbenchError
from ..output_files import check_writable_output, write_atomically


def _pct(x: float | None, sign: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{x * 100:+.1f} %" if sign else f"{x * 100:.1f} %"


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else f"×{x:.3g}"


GROUP_TITLES = {"fitted": "fitted (train rows a fit group uses)",
                "train-prediction": "train predictions (train rows no fit group uses)",
                "withheld-prediction": "withheld predictions (no measured value here)"}


def _group_line(name: str, s: dict[str, Any]) -> str:
    title = GROUP_TITLES.get(name, name)
    if name == "withheld-prediction":
        return (f"{title}: {s['rows']} rows, {s['predicted']} predicted, "
                f"median range width {_ratio(s['median_range_width'])}")
    cov = "n/a" if s["coverage"] is None else f"{s['coverage'] * 100:.0f} % of {s['rows_with_range']}"
    return (f"{title}: {s['compared']} rows, median |error| {_pct(s['median_abs_error'])}, "
            f"within 10 % {_pct(s['within_10pct'])}, within ×1.5 {_pct(s['within_x1_5'])}, "
            f"interval coverage {cov}, median range width {_ratio(s['median_range_width'])}")


def register(app: typer.Typer) -> None:
    @app.command("validate")
    def validate_cmd(
        scenario: list[str] = typer.Argument(None, help="Scenarios to check (default: every one in the data)."),
        data: Optional[Path] = typer.Option(None, "--data", help="Measurements CSV (default: the shipped copy)."),
        json_path: Optional[Path] = typer.Option(None, "--json", help="Write the comparison as JSON to FILE."),
        cross: Optional[str] = typer.Option(None, "--cross", metavar="host|card",
                                            help="Cross-validation instead of the comparison: every train row "
                                                 "predicted with its host (host) or its card (card) left out; per "
                                                 "host or card and overall."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
        no_range: bool = typer.Option(False, "--no-range", help="No prediction ranges (faster; coverage n/a)."),
        workers: Optional[int] = typer.Option(None, "--workers", "-j", min=1, max=4096,
                                              help="Run the scenarios in this many processes (default: one per "
                                                   "CPU); the figures do not depend on it."),
    ) -> None:
        """Run every scenario named in a measurements file; print predicted vs measured per row.

        Rows fall in three groups: fitted (train rows a fit group calibrates with), train
        predictions (train rows no fit group uses) and withheld predictions (no measured value
        here).  Per group: median |error|, share within 10 % and within ×1.5, and how often the
        measured figure lies inside the predicted range.

        --cross host: every train row of a calibrated host predicted with the host's fitted fields
        at their values before any fit (and the cards fitted only through it at the population);
        --cross card: every train row of a fitted card predicted with the card at the population's
        medians over the other cards.  The rows no fit uses count as they stand.  Per host or card
        and overall: median |error|, within ×1.5, coverage of the range (its structural error
        measured without that host's or card's rows) and the median range width
        (docs/validation.md).
        """
        from ..calibrate import load_measurements
        from ..validation import check_measurements

        if cross is not None and cross not in ("host", "card"):
            raise SdbenchError(f"--cross {cross!r:.30}: host or card")
        if cross and scenario:
            raise SdbenchError("--cross takes no scenarios: it predicts every train row")
        if json_path is not None:
            check_writable_output(json_path)
        meas = load_measurements(data)
        check_measurements(meas, str(data) if data else "measurements.csv")
        n_workers = workers or os.cpu_count() or 1
        if cross:
            _cross(meas, cross, json_path, quiet, n_workers)
        else:
            _compare(meas, scenario or None, json_path, quiet, ranges=not no_range, workers=n_workers)


def _compare(meas: list[Any], scenario: list[str] | None, json_path: Path | None, quiet: bool, *,
             ranges: bool = True, workers: int = 1) -> None:
    from ..validation import GROUPS, summarise, summarise_groups, validate_rows

    rows, missing = validate_rows(meas, scenario, progress=not quiet, ranges=ranges, workers=workers)
    summ = summarise(rows)
    per_group = summarise_groups(rows)
    typer.echo("| scenario | row | level | group | measured | predicted | range | unit | error |")
    typer.echo("|---|---|---|---|---:|---:|---:|---|---:|")
    for r in rows:
        meas_s = "withheld" if r["measured"] is None else f"{r['measured']:g}"
        pred_s = "not emitted" if r["predicted"] is None else f"{r['predicted']:.4g}"
        rng_s = "" if r["range"] is None else f"{r['range'][0]:.4g}–{r['range'][1]:.4g}"
        if r["inside"] is False:
            rng_s += " (outside)"
        err_s = "" if r["error"] is None else f"{r['error'] * 100:+.1f} %"
        typer.echo(f"| {r['scenario']} | {r['row']} | {r['level']} | {r['group']} | {meas_s} | {pred_s} | "
                   f"{rng_s} | {r['unit']} | {err_s} |")
    typer.echo("")
    for g in GROUPS:
        typer.echo(_group_line(g, per_group[g]))
    crossed = _recorded_cross()
    for line in crossed["lines"]:
        typer.echo(line)
    typer.echo("")
    for level in ("raw", "bridge", "file"):
        if level in summ:
            s = summ[level]
            typer.echo(f"{level}-level train rows: {s['rows']}, median |error| {s['median_abs_error'] * 100:.1f} %, "
                       f"worst {s['worst_abs_error'] * 100:.1f} %, within ±{s['tolerance'] * 100:.0f} %: "
                       f"{s['within_tolerance']}/{s['rows']}")
    if missing:
        typer.echo(f"scenarios not built in yet: {', '.join(missing)}")
    if summ["not_emitted"]:
        typer.echo(f"rows not emitted: {len(summ['not_emitted'])}")
    if json_path is not None:
        doc = {"rows": rows, "groups": per_group, "summary": summ, "missing_scenarios": missing,
               "cross_validated": crossed["overall"]}
        write_atomically(json_path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def _recorded_cross() -> dict[str, Any]:
    """The cross-validated group from what `sdbench calibrate --model-error` recorded: a line per kind of
    cross-validation and its overall figures."""
    from ..crossval import evaluate, recorded_rows

    rows = recorded_rows()
    out: dict[str, Any] = {"lines": [], "overall": {}}
    if not rows:
        return out
    for by in ("host", "card"):
        o = evaluate(rows, by)["overall"]
        out["overall"][by] = o
        out["lines"].append(
            f"cross-validated by {by} (train rows predicted with their {by} left out, as recorded by `sdbench "
            f"calibrate --model-error`): {o['rows']} rows, median |error| {_pct(o['median_abs_error'])}, within "
            f"×1.5 {_pct(o['within_x1_5'])}, interval coverage {_pct(o['coverage'])}, median range width "
            f"{_ratio(o['median_range_width'])}")
    return out


def _cross(meas: list[Any], by: str, json_path: Path | None, quiet: bool, workers: int = 1) -> None:
    from ..crossval import CLASS_TITLES, cross_validate

    res = cross_validate(meas, progress=None if quiet else (lambda s: typer.echo(s, err=True)), workers=workers)
    view = res[by]
    what = ("with its host's fitted fields at their values before any fit" if by == "host" else
            "with its card at the population's medians over the other cards")
    typer.echo(f"Cross-validation by {by}: every train row predicted {what}; the rows no fit uses as they stand")
    typer.echo("")
    typer.echo(f"| {by} | rows | median abs. error | within ×1.5 | coverage | median range width | worst row |")
    typer.echo("|---|---:|---:|---:|---:|---:|---|")
    for g in view["groups"]:
        typer.echo(f"| {g['group']} | {g['rows']} | {_pct(g['median_abs_error'])} | {_pct(g['within_x1_5'])} | "
                   f"{_pct(g['coverage'])} | {_ratio(g['median_range_width'])} | {g['worst_row'] or ''} "
                   f"({_pct(g['worst_error'], True)}) |")
    o = view["overall"]
    typer.echo("")
    typer.echo(f"overall: {o['rows']} rows, median |error| {_pct(o['median_abs_error'])}, within ×1.5 "
               f"{_pct(o['within_x1_5'])}, coverage {_pct(o['coverage'])}, median range width "
               f"{_ratio(o['median_range_width'])}")
    typer.echo("")
    typer.echo("structural error by what is uncalibrated (σ of log error beyond the parameters' spread):")
    for k, kinds in res["structural"].items():
        parts = ", ".join(f"{kind} {sd * 100:.1f} % over {n} rows" for kind, (sd, n) in sorted(kinds.items()))
        typer.echo(f"  {CLASS_TITLES[k]}: {parts}")
    if json_path is not None:
        doc = {"by": by, "groups": view["groups"], "overall": o, "rows": view["rows"],
               "structural": {k: {kind: {"log_rel_sd": sd, "rows": n} for kind, (sd, n) in v.items()}
                              for k, v in res["structural"].items()}}
        write_atomically(json_path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
