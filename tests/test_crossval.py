"""Cross-validation by host and by card, the structural error per class, and ranges that carry it."""
from __future__ import annotations

import json
import math
import tomllib

import pytest

from sdbench import crossval, population
from sdbench import scenarios as scen
from sdbench.calibrate import load_measurements
from sdbench.cli import main
from sdbench.protocols import run_scenario
from sdbench.stack.cardpop import card_population
from sdbench.stack.loaded import host_calibrated
from sdbench.stack.sd import load_host

P2 = "p2-spi25-350mhz-pny-16gb"


def _row(klass, kind, log_error, param_sd=0.0, host="h", card="c", by="as is", measured=100.0):
    pred = measured * math.exp(log_error)
    return {"klass": klass, "kind": kind, "log_error": log_error, "param_sd": param_sd, "host": host, "card": card,
            "by": by, "measured": measured, "predicted": pred, "error": pred / measured - 1,
            "range": [pred * math.exp(-crossval.Z90 * param_sd), pred * math.exp(crossval.Z90 * param_sd)],
            "scenario": "s", "row": "r"}


def test_the_structural_error_is_what_the_parameters_spread_does_not_explain():
    rows = [_row("card", "read", e, 0.1) for e in (0.3, -0.3, 0.3, -0.3)] + [_row("card", "write", 0.05, 0.2)] * 3
    table = crossval.structural_sd(rows)
    z = crossval.Z90
    assert table["card"]["read"] == (pytest.approx(math.sqrt((0.3 / z) ** 2 - 0.01)), 4)
    assert table["card"]["write"] == (0.0, 3)          # the spread covers all of it
    assert "both" not in table                          # no rows: nothing claimed
    assert crossval.resolve(table, "both", "read") is None
    assert crossval.resolve(table, "neither", "read")[2] == "card"  # borrowed from the next less calibrated class


def test_the_structural_error_brings_eighty_percent_of_its_rows_inside_whatever_the_tails():
    """Ten rows: the ceil(0.8 * 11) = 9th smallest need sets σ, so one far-off row (a card 8x off) widens
    nothing, and 9 of the 10 rows are inside their ranges; an RMS would have tripled σ for the other nine."""
    errs = [0.01 * i for i in range(1, 10)] + [math.log(8.0)]
    rows = [_row("both", "write", e * (-1) ** i, 0.02) for i, e in enumerate(errs)]
    sd, n = crossval.structural_sd(rows)["both"]["write"]
    assert n == 10 and sd == pytest.approx(math.sqrt((0.09 / crossval.Z90) ** 2 - 0.02 ** 2))
    inside = [abs(r["log_error"]) <= crossval.Z90 * math.hypot(0.02, sd) * (1 + 1e-12) for r in rows]
    assert sum(inside) == 9 and not inside[-1]
    # up to eight rows: every one of them inside
    few = rows[:4]
    sd4, _ = crossval.structural_sd(few)["both"]["write"]
    assert sd4 == pytest.approx(math.sqrt((0.04 / crossval.Z90) ** 2 - 0.02 ** 2))


def test_a_less_calibrated_class_never_claims_a_smaller_error_than_a_more_calibrated_one():
    """Four rows of an uncalibrated host that happen to fit claim no error of their own; they pool with the
    calibrated stacks' rows instead.  A both-uncalibrated class that measured less than the card class pools with
    it, weighted by rows; classes already in order keep what they measured."""
    rows = [_row("neither", "write", e) for e in (0.2, -0.2, 0.2, -0.2)]
    rows += [_row("host", "write", 0.01, 0.05)] * 4
    rows += [_row("card", "write", e) for e in (0.5, -0.5)] * 3
    rows += [_row("both", "write", e) for e in (0.3, -0.3)] * 6
    rows += [_row("neither", "read", 0.1)] * 3 + [_row("both", "read", 0.4)] * 3
    table = crossval.structural_sd(rows)
    z = crossval.Z90
    half = math.sqrt((0.2 / z) ** 2 / 2)
    assert table["neither"]["write"] == (pytest.approx(half), 4)
    assert table["host"]["write"] == (pytest.approx(half), 4)   # not 0: pooled with neither
    pooled = math.sqrt((6 * (0.5 / z) ** 2 + 12 * (0.3 / z) ** 2) / 18)
    assert table["card"]["write"] == (pytest.approx(pooled), 6)
    assert table["both"]["write"] == (pytest.approx(pooled), 12)
    assert table["neither"]["read"][0] == pytest.approx(0.1 / z) and table["both"]["read"][0] == pytest.approx(0.4 / z)


def test_ordered_variances_is_the_least_squares_fit_that_keeps_the_order():
    var = {"neither": 0.04, "host": 0.01, "card": 0.1, "both": 0.05}
    count = {"neither": 10, "host": 10, "card": 10, "both": 30}
    got = crossval.ordered_variances(var, count)
    assert got == pytest.approx({"neither": 0.025, "host": 0.025, "card": 0.0625, "both": 0.0625})
    # already in order: unchanged; one class alone: itself
    assert crossval.ordered_variances({"neither": 0.01, "both": 0.2}, {"neither": 3, "both": 5}) == \
        {"neither": 0.01, "both": 0.2}
    assert crossval.ordered_variances({"card": 0.3}, {"card": 4}) == {"card": 0.3}


def test_coverage_takes_each_groups_sigma_from_the_other_groups_only():
    """One host whose rows miss by a factor of 2: the σ it is judged by comes from the other hosts, which are
    close, so its rows fall outside; the others are inside thanks to it."""
    rows = [_row("both", "read", 0.05 * (-1) ** i, host=f"h{i % 3}", by="host") for i in range(9)]
    rows += [_row("both", "read", math.log(2.0), host="bad", by="host") for _ in range(3)]
    view = crossval.evaluate(rows, "host")
    by = {g["group"]: g for g in view["groups"]}
    assert by["bad"]["coverage"] == 0.0 and by["h0"]["coverage"] == 1.0
    assert view["overall"]["rows"] == 12 and view["overall"]["within_x1_5"] == pytest.approx(9 / 12)


def test_holding_a_host_out_puts_its_fitted_fields_back_and_its_cards_to_the_population():
    meas = [m for m in load_measurements() if m.scenario == P2]
    plans = crossval.plans(meas)
    host_plan = next(p for p in plans if p.by == "host")
    unfitted = load_host("p2-350mhz").unfitted
    assert unfitted and all(f"sd.host_params.{f}={v}" in host_plan.overrides for f, v in unfitted.items())
    # the PNY card ran on this host only: back at the population's medians over the other cards
    others = card_population().without("pny-16gb").medians
    assert any(o.startswith("sd.card_params.write_busy_end_us=") for o in host_plan.overrides)
    assert f"sd.card_params.read_access_us={others['read_access_us']!r}" in host_plan.overrides
    assert host_plan.klass == "both"
    card_plan = next(p for p in plans if p.by == "card")
    assert card_plan.klass == "card" and not any("host_params" in o for o in card_plan.overrides)
    assert {p.by for p in plans} >= {"host", "card", "as is"}


def test_plans_run_in_processes_give_the_rows_one_process_gives():
    meas = [m for m in load_measurements() if m.scenario == P2]
    ps = crossval.plans(meas)
    assert len(ps) >= 2
    assert crossval.run_plans(ps, workers=2) == crossval.run_plans(ps)


def test_a_stack_is_classed_by_what_is_uncalibrated_in_it():
    assert population.plan(scen.load(P2), simulated=True).structural_class == "neither"
    assert population.plan(scen.load(P2, ['sd.card="generic-sdhc"']), simulated=True).structural_class == "card"
    assert population.plan(scen.load("sdfat-bench-due-sdfat-spi"), simulated=True).structural_class == "both"
    # a fit group's host is calibrated with the cards fitted through it, though no field of its own is
    assert host_calibrated("esp32-sdmmc") and not host_calibrated("due-sdfat-spi")


def test_the_shipped_ranges_carry_their_classs_structural_error():
    rec = run_scenario(scen.load(P2, ['sd.card="generic-sdhc"', "p2.runs=2"]), ranges=True)
    info = rec.metadata["range"]
    sd, z, src = population.structural_error("card")
    assert info["structural"]["class"] == "card" and info["model_log_sd"] == sd and info["model_z"] == z
    doc = tomllib.loads((population.profiles.DATA / population.MODEL_ERROR_FILE).read_text())
    for kind in population.ERROR_KINDS:
        t = doc["class"][src[kind]] if src[kind] != "neither" else doc
        assert sd[kind] == t[f"log_rel_sd_{kind}"]
        assert z[kind] == pytest.approx(t[f"z_{kind}"], abs=1e-4) == pytest.approx(population.Z90, abs=1e-4)
    bare = run_scenario(scen.load(P2, ['sd.card="generic-sdhc"', "p2.runs=2"]), ranges=True, structural=False)
    for a, b in zip(rec.rows, bare.rows):
        if b.time_ms_range is not None:
            assert a.time_ms_range[0] <= b.time_ms_range[0] and a.time_ms_range[1] >= b.time_ms_range[1]


def test_the_recorded_rows_give_plain_validate_its_cross_validated_group():
    rows = crossval.recorded_rows()
    assert rows and {r["by"] for r in rows} >= {"host", "card"}
    assert {r["klass"] for r in rows} <= set(crossval.CLASSES)


def test_cross_cli_and_model_error_on_a_small_data_file(tmp_path, capsys):
    data = tmp_path / "m.csv"
    lines = [ln for ln in (population.profiles.DATA / "measurements.csv").read_text().splitlines()
             if ln.startswith(("scenario,", "p2-spi25-350mhz-pny-16gb,", "p2-spi25-350mhz-lexar-v30-64gb,",
                               "p2-spi25-350mhz-samsung-evo-128gb,"))]
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "cross.json"
    assert main(["validate", "--cross", "card", "--data", str(data), "--json", str(out)]) == 0
    cap = capsys.readouterr()
    assert "| card | rows | median abs. error | within ×1.5 | coverage |" in cap.out and "overall:" in cap.out
    doc = json.loads(out.read_text())
    assert {g["group"] for g in doc["groups"]} >= {"pny-16gb", "lexar-v30-64gb"}
    assert main(["calibrate", "--model-error", "--data", str(data), "-o", str(tmp_path), "-q"]) == 0
    me = tomllib.loads((tmp_path / "model-error.toml").read_text())
    assert "class" in me and me["row"]
    assert main(["validate", "--cross", "disk", "-q"]) == 2
    assert "host or card" in capsys.readouterr().err
    assert main(["validate", "--cross", "host", P2, "-q"]) == 2
