"""``sdbench validate``: every published figure, predicted vs measured."""
from __future__ import annotations

import json
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
        cross: bool = typer.Option(False, "--cross", help="Leave-one-card-out cross-validation over the P2 cards "
                                                          "instead of the comparison."),
        card: list[str] = typer.Option(None, "--card", help="With --cross: the cards taking part (default: all "
                                                            "nine P2 cards; at least two)."),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
        no_range: bool = typer.Option(False, "--no-range", help="No prediction ranges (faster; coverage n/a)."),
    ) -> None:
        """Run every scenario named in a measurements file; print predicted vs measured per row.

        Rows fall in three groups: fitted (train rows a fit group calibrates with), train
        predictions (train rows no fit group uses) and withheld predictions (no measured value
        here).  Per group: median |error|, share within 10 % and within ×1.5, and how often the
        measured figure lies inside the predicted range.  --cross predicts each P2 card from the
        median of the other cards' fitted parameters instead.
        """
        from ..calibrate import load_measurements
        from ..validation import check_measurements

        if card and not cross:
            raise SdbenchError("--card belongs to --cross")
        if cross and scenario:
            raise SdbenchError("--cross takes no scenarios (choose cards with --card)")
        if json_path is not None:
            check_writable_output(json_path)
        meas = load_measurements(data)
        check_measurements(meas, str(data) if data else "measurements.csv")
        if cross:
            _cross(meas, card or None, json_path, quiet)
        else:
            _compare(meas, scenario or None, json_path, quiet, ranges=not no_range)


def _compare(meas: list[Any], scenario: list[str] | None, json_path: Path | None, quiet: bool, *,
             ranges: bool = True) -> None:
    from ..validation import GROUPS, summarise, summarise_groups, validate_rows

    rows, missing = validate_rows(meas, scenario, progress=not quiet, ranges=ranges)
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
        doc = {"rows": rows, "groups": per_group, "summary": summ, "missing_scenarios": missing}
        write_atomically(json_path, json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def _cross(meas: list[Any], cards: list[str] | None, json_path: Path | None, quiet: bool) -> None:
    from ..validation import cross_validate

    res = cross_validate(meas, cards, progress=None if quiet else (lambda s: typer.echo(s, err=True)))
    typer.echo(f"Leave-one-card-out over fit group {res['group']}: each card's fitted fields set to the median "
               f"of the other cards'")
    typer.echo("")
    typer.echo("| card | rows | median abs. error | worst error | worst row |")
    typer.echo("|---|---:|---:|---:|---|")
    for c in res["cards"]:
        typer.echo(f"| {c['card']} | {c['rows']} | {_pct(c['median_abs_error'])} | {_pct(c['worst_error'], True)} | "
                   f"{c['worst_row'] or ''} |")
    typer.echo("")
    o = res["overall"]
    verdict = "meets" if o["meets_target"] else "misses"
    typer.echo(f"overall: {o['rows']} held-out rows, median |error| {_pct(o['median_abs_error'])}, worst "
               f"{_pct(o['worst_abs_error'])}; {verdict} the target (<= {res['target_median_abs_error'] * 100:.0f} %)")
    for level, s in o["by_level"].items():
        typer.echo(f"  {level}-level: {s['rows']} rows, median |error| {_pct(s['median_abs_error'])}, "
                   f"worst {_pct(s['worst_abs_error'])}")
    if res["not_emitted"]:
        typer.echo(f"rows not emitted: {len(res['not_emitted'])}")
    if json_path is not None:
        write_atomically(json_path, json.dumps(res, indent=2, ensure_ascii=False) + "\n")
