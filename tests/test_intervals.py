"""Ranges of simulated rows: population and fit-uncertainty members, determinism, formats, store."""
from __future__ import annotations

import json
import math
import re
import sqlite3
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from sdbench import population
from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.importers import espidf as espidf_import
from sdbench.protocols import run_scenario
from sdbench.records import RecordError, Results, Row, make_row
from sdbench.report.export import to_csv, to_espidf
from sdbench.report.tables import rows_table
from sdbench.report_text import markdown_table
from sdbench.store import open_store
from sdbench.store import db as storedb
from sdbench.store.api import Store
from sdbench.stack.sd import load_card, load_host
from sdbench.workloads.espidf import espidf_line

SD = "espidf-esp32-sdmmc4-40mhz"
#: the shipped profiles' own fit uncertainty left out, and the card's population-held field set (so it is not
#: spanned: tests/test_population_held.py), so that each test says what varies
NO_FIT = ["sd.card_params.fit_rel_sd={}", "sd.host_params.fit_rel_sd={}",
          f"sd.card_params.write_busy_single_us={load_card('esp32-perfbench-card').write_busy_single_us}"]
#: the SD raw group only; 72 runs: 17 population members and the central at 4 runs fit the budget exactly
RAW = ["espidf.parts=['sd_raw']", "espidf.runs=72", "sd.host_params.fit_rel_sd={}"]
GENERIC = [*RAW, 'sd.card="generic-sdhc"']
SMALL_FIT = [*RAW, "sd.card_params.fit_rel_sd={read_access_us=0.02, write_busy_end_us=0.02}"]


@pytest.fixture(scope="module", autouse=True)
def _no_model_error():
    # these tests check the parameters' spread; the model error that widens it has its own tests
    # (test_model_error.py)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(population, "structural_error", lambda klass="neither": ({}, {}, {}))
        yield


def _run(overrides, name=SD, **kw):
    return run_scenario(scen.load(name, list(overrides)), ranges=True, **kw)


@pytest.fixture(scope="module")
def generic():
    return _run(GENERIC)


@pytest.fixture(scope="module")
def small_fit():
    return _run(SMALL_FIT)


def _widths(rec):
    return [(r.time_ms_range[1] - r.time_ms_range[0]) / r.time_ms for r in rec.rows]


def test_population_range_on_every_row_holds_the_central(generic):
    assert generic.source == "simulated" and len(generic.rows) == 8
    for r in generic.rows:
        lo, hi = r.time_ms_range
        assert 0 <= lo <= r.time_ms <= hi
    info = generic.metadata["range"]
    assert info["method"] == "population" and info["card"] == "generic-sdhc"
    assert info["members"] == len(info["population"]) >= 10 and info["runs"] == {
        "option": "espidf.runs", "central": 72, "members": 3}  # the budget over 21 cards
    assert "capacity_bytes" not in info["fields"] and "read_access_us" in info["fields"]
    assert any("names no calibrated card (generic-sdhc)" in w and f"{info['members']} shipped" in w
               for w in generic.warnings)
    # the central figures are the scenario's own card's, as without ranges
    plain = run_scenario(scen.load(SD, GENERIC))
    assert [replace(r, time_ms_range=None) for r in generic.rows] == list(plain.rows)
    assert "range" not in plain.metadata and all(r.time_ms_range is None for r in plain.rows)


def test_ranges_are_deterministic(small_fit):
    again = _run(SMALL_FIT)
    assert again.to_dict() == small_fit.to_dict()
    assert Results(runs=(again,)).to_json() == Results(runs=(small_fit,)).to_json()


def test_uncalibrated_card_range_is_wider_than_a_small_fit_uncertainty(generic, small_fit):
    info = small_fit.metadata["range"]
    assert info["method"] == "fit" and info["members"] == population.FIT_MEMBERS
    assert info["fit_rel_sd"] == {"card esp32-perfbench-card": {"read_access_us": 0.02, "write_busy_end_us": 0.02}}
    assert all(r.time_ms_range[0] <= r.time_ms <= r.time_ms_range[1] for r in small_fit.rows)
    assert statistics.median(_widths(generic)) > 3 * statistics.median(_widths(small_fit)) > 0


def test_fitted_card_without_fit_uncertainty_has_no_range():
    rec = _run(["espidf.parts=['sd_raw']", "espidf.runs=2", *NO_FIT])
    assert all(r.time_ms_range is None for r in rec.rows)
    info = rec.metadata["range"]
    assert info["method"] == "none"
    assert "esp32-perfbench-card" in info["reason"] and "fit_rel_sd is empty" in info["reason"]


def test_profiles_from_files(tmp_path):
    base = (Path(population.profiles.DATA) / "cards" / "esp32-perfbench-card.toml").read_text()
    # without its population-held field too: these profiles set every timing field themselves
    body = "\n".join(ln for ln in base.splitlines() if not ln.startswith(("#", "fit_rel_sd", "timing_from")))
    fitted = tmp_path / "fitted.toml"
    fitted.write_text("# fitted by `sdbench calibrate test` from nothing\n" + body
                      + "\n[fit_rel_sd]\nwrite_busy_end_us = 0.1\ninit_ms = 0.2\n")
    rec = _run(["espidf.parts=['sd_raw']", "espidf.runs=20", f'sd.card="{fitted}"', "sd.host_params.fit_rel_sd={}"])
    assert rec.metadata["range"]["method"] == "fit"
    assert all(r.time_ms_range is not None for r in rec.rows)
    empty = tmp_path / "empty.toml"
    empty.write_text("# fitted by `sdbench calibrate test`\n" + body + "\n")
    rec = _run(["espidf.parts=['sd_raw']", "espidf.runs=2", f'sd.card="{empty}"', "sd.host_params.fit_rel_sd={}"])
    assert rec.metadata["range"]["method"] == "none" and "fit_rel_sd is empty" in rec.metadata["range"]["reason"]
    plain = tmp_path / "plain.toml"
    plain.write_text(body + "\n")  # no header, no fit_rel_sd: uncalibrated
    assert population.plan(scen.load(SD, [f'sd.card="{plain}"']), simulated=True).method == "population"
    # the scenario may give an uncalibrated card an uncertainty of its own: then it is drawn from
    sc = scen.load(SD, ['sd.card="generic-sdhc"', "sd.card_params.fit_rel_sd={read_access_us=0.1}"])
    assert population.plan(sc, simulated=True).method == "fit"


def test_host_fit_uncertainty_is_drawn_in_each_population_member():
    sc = scen.load(SD, [*GENERIC, "sd.host_params.fit_rel_sd={transaction_cycles=0.3}"])
    pl = population.plan(sc, simulated=True)
    assert pl.method == "population" and pl.varied == {"host esp32-sdmmc": {"transaction_cycles": 0.3}}
    cycles = [m.overrides[("sd", "host_params")]["transaction_cycles"] for m in pl.members]
    assert all(isinstance(c, int) for c in cycles) and len(set(cycles)) > 1
    assert population.plan(sc, simulated=True) == pl  # the same draws every time


def test_a_drawn_value_is_held_within_the_range_its_field_declares():
    """The RP2040 PIO host's read clock ratio is fitted at σ 72 %: its 90th-percentile draw would be above 1,
    which no PIO program can run at; the member takes the bound instead of being refused."""
    sc = scen.load("pico-sdfat-pio-sdio-133mhz")
    pl = population.plan(sc, simulated=True)
    ratios = [m.overrides[("sd", "host_params")]["read_clock_ratio"] for m in pl.members]
    fitted = load_host("rp2040-sdfat-pio-sdio").read_clock_ratio
    assert max(ratios) == 1.0 and min(ratios) < fitted        # spread both ways about the fitted value, capped at 1
    rec = run_scenario(sc, ranges=True)
    assert not any("could not run" in w for w in rec.warnings)
    assert all(r.time_ms_range[0] <= r.time_ms <= r.time_ms_range[1] for r in rec.rows)


def test_flash_chip_fit_uncertainty():
    rec = _run(["espidf.parts=['flash_raw']", "espidf.runs=12", "flash.host_params.fit_rel_sd={}",
                "flash.chip_params.fit_rel_sd={byte_program_next_typ_us=0.2}"], name="espidf-esp32-spiflash")
    info = rec.metadata["range"]
    assert info["method"] == "fit" and list(info["fit_rel_sd"]) == ["flash chip gd25q32c"]
    assert all(r.time_ms_range[0] <= r.time_ms <= r.time_ms_range[1] for r in rec.rows)
    assert any(r.time_ms_range[1] > r.time_ms_range[0] for r in rec.rows)


def test_real_media_runs_have_no_range():
    rec = _run(["espidf.parts=['sd_raw']", "espidf.runs=1"], name="espidf-memory")
    assert rec.source == "measured" and all(r.time_ms_range is None for r in rec.rows)
    assert rec.metadata["range"]["method"] == "none" and "real media" in rec.metadata["range"]["reason"]


def test_budget_and_percentiles():
    sc = scen.load(SD)
    assert population.runs_of(sc) == 100
    assert population.budget(sc, 12) == (4, 12)
    # two calls at least: at 20 runs, two each for 12 members and the reduced central run are over the budget
    # but within MIN_RUNS_BUDGET; at 5 runs, 5 members are
    assert population.budget(scen.load(SD, ["espidf.runs=20"]), 12) == (2, 12)
    assert population.budget(scen.load(SD, ["espidf.runs=5"]), 12) == (2, 5)
    assert population.budget(scen.load(SD, ["espidf.runs=2"]), 12) == (2, population.MIN_MEMBERS)
    assert population.budget(scen.load(SD, ["espidf.runs=1"]), 12) == (1, population.MIN_MEMBERS)
    assert population.percentile([1, 2, 3, 4, 5], 10) == pytest.approx(1.4)
    assert population.percentile([3.0], 90) == 3.0
    members = tuple(population.Member(str(i), {}) for i in range(12))
    assert [m.name for m in population.select(members, 4)] == ["0", "4", "7", "11"]


# -- records ----------------------------------------------------------------------------------------

def _row(rng=None):
    return replace(make_row("SD raw read", "read", 65536, [4_000_000, 4_200_000]), time_ms_range=rng)


def test_json_round_trip(generic):
    doc = Results(runs=(generic,)).to_json()
    row = json.loads(doc)["runs"][0]["rows"][0]
    assert row["time_ms_range"] == list(generic.rows[0].time_ms_range)
    assert Results.from_json(doc).runs[0] == generic
    # older documents, without the field, read as rows without a range
    old = json.loads(doc)
    for r in old["runs"][0]["rows"]:
        del r["time_ms_range"]
    assert all(r.time_ms_range is None for r in Results.from_dict(old).runs[0].rows)


@pytest.mark.parametrize("bad,msg", [
    ([4.2, 4.0], "low 4.2 is above high 4.0"),
    ([-1.0, 5.0], "time_ms_range[0]: expected a number from 0"),
    ([float("nan"), 5.0], "expected a finite number"),
    ([4.0, float("inf")], "expected a finite number"),
    ([4.0], "expected null or [low, high]"),
    ("4-5", "expected null or [low, high]"),
    (["4", 5.0], "expected a number, got '4'"),
    ([4.15, 4.18], "does not include time_ms"),
    ([4.0, 4.1, 4.2], "expected null or [low, high]"),
])
def test_malformed_ranges_are_refused(bad, msg):
    d = _row().to_dict()
    d["time_ms_range"] = bad
    with pytest.raises(RecordError) as e:
        Row.from_dict(d, "rows[0]")
    assert msg in str(e.value) and "rows[0].time_ms_range" in str(e.value)
    assert Row.from_dict({**d, "time_ms_range": [4.0, 4.3]}).time_ms_range == (4.0, 4.3)
    assert Row.from_dict({**d, "time_ms_range": None}).time_ms_range is None


# -- output formats ---------------------------------------------------------------------------------

def test_espidf_line_suffix_and_import(generic):
    r = generic.rows[0]
    line = espidf_line(r)
    plain = espidf_line(replace(r, time_ms_range=None))
    assert line.startswith(plain + " [") and re.search(r" \[\d+\.\d{3}–\d+\.\d{3} ms\]$", line)
    text = to_espidf(generic)
    runs = espidf_import.parse(text, name="sim.log")
    assert len(runs) == 1 and len(runs[0].rows) == len(generic.rows)
    for got, want in zip(runs[0].rows, generic.rows):
        assert got.label == want.label
        assert got.time_ms_range == pytest.approx(want.time_ms_range, abs=0.0005)
    # without the suffix, as the example prints them
    plain_rows = espidf_import.parse(to_espidf(replace(generic, rows=tuple(
        replace(x, time_ms_range=None) for x in generic.rows))), name="plain.log")[0].rows
    assert all(x.time_ms_range is None for x in plain_rows)
    # a '-' typed for the en dash reads too; a range that misses the mean is refused
    assert espidf_import.ROW_RE.search(plain + " [1.000-2.000 ms]")
    bad = text.replace(text.splitlines()[0], plain + " [0.001–0.002 ms]")
    with pytest.raises(Exception, match="does not hold the mean time"):
        espidf_import.parse(bad, name="bad.log")


def test_tables_and_csv_show_the_range(generic):
    md = markdown_table(generic)
    head = md.splitlines()[0]
    assert "| mean ms | range ms |" in head
    lo, hi = generic.rows[0].time_ms_range
    assert f"{lo:.3f}–{hi:.3f}" in md.splitlines()[2]
    t = rows_table(generic)
    assert t.headers[t.headers.index("mean ms") + 1] == "range ms"
    assert t.headers.index("reported") not in t.right
    csv_text = to_csv([(1, generic)])
    assert csv_text.splitlines()[0].endswith(",time_ms_low,time_ms_high")
    assert csv_text.splitlines()[1].endswith(f",{lo!r},{hi!r}")
    # measured runs keep their tables as they were
    measured = _run(["espidf.parts=['sd_raw']", "espidf.runs=1"], name="espidf-memory")
    assert "range ms" not in markdown_table(measured) and "range ms" not in rows_table(measured).headers


def test_html_report_with_ranges(generic):
    from sdbench.report.html import ReportRun, render

    html = render([ReportRun("#1", generic, 1)])
    assert "range ms" in html and "shipped fitted card profiles" in html


# -- store ------------------------------------------------------------------------------------------

def test_store_rows_added_then_ranged_by_finish_run(tmp_path, generic):
    plain = tuple(replace(r, time_ms_range=None) for r in generic.rows)
    with open_store(tmp_path / "s.sqlite") as s:
        rid = s.begin_run(scenario=generic.scenario, clock="virtual", protocol="espidf", source="simulated")
        for r in plain:
            s.add_row(rid, r)
        s.finish_run(rid, generic)
        assert s.load(rid) == generic
        other = s.save(generic)
        assert s.load(other) == generic
        assert s.check() == (2, [])
        # a finished record whose rows differ in more than their range is refused, as before
        rid2 = s.begin_run(scenario="x", clock="virtual")
        s.add_row(rid2, plain[0])
        with pytest.raises(Exception, match="rows are not the"):
            s.finish_run(rid2, replace(generic, rows=(replace(generic.rows[0], time_ms=1.0,
                                                              time_ms_range=(0.5, 1.5)),)))
    conn = sqlite3.connect(tmp_path / "s.sqlite")
    got = conn.execute("SELECT time_ms_low, time_ms_high FROM rows WHERE run_id = ? ORDER BY seq",
                       (rid,)).fetchall()
    conn.close()
    assert got == [r.time_ms_range for r in generic.rows]


def test_schema_2_store_migrates_and_keeps_its_runs(tmp_path, generic):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    storedb.migrate(conn, storedb.MIGRATIONS[:2])
    old_run = replace(generic, rows=tuple(replace(r, time_ms_range=None) for r in generic.rows),
                      metadata={k: v for k, v in generic.metadata.items() if k != "range"}, warnings=())
    s = Store(conn, path)
    rid = s.save(old_run)
    with pytest.raises(Exception, match="older than row ranges"):
        s.save(generic)
    s.close()
    assert "time_ms_low" not in {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(rows)")}
    with open_store(path) as s:
        assert s.load(rid) == old_run
        new = s.save(generic)
        assert s.load(new) == generic and s.check() == (2, [])
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == storedb.SCHEMA_VERSION == 3
    assert conn.execute("SELECT count(*) FROM rows WHERE run_id = ? AND time_ms_low IS NULL",
                        (rid,)).fetchone()[0] == len(old_run.rows)
    conn.close()


# -- command line -----------------------------------------------------------------------------------

def _cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_run_stores_ranges_and_no_range_skips_them(capsys, tmp_path):
    db = tmp_path / "r.sqlite"
    sets = [a for s in ["espidf.parts=['sd_raw']", "espidf.runs=20", 'sd.card="generic-sdhc"'] for a in ("--set", s)]
    code, out, err = _cli(capsys, "run", *sets, "--db", str(db), "-f", "json")
    assert code == 0, err
    assert "warning: the scenario names no calibrated card (generic-sdhc)" in err
    printed = Results.from_json(out).runs[0]
    assert all(r.time_ms_range is not None for r in printed.rows)
    with open_store(db) as s:
        assert s.load(s.resolve("latest")) == printed
    code, out, err = _cli(capsys, "run", *sets, "--no-save", "-q")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 8 and all(re.search(r" MB/s \[[\d.]+–[\d.]+ ms\]$", ln) for ln in lines)
    code, out, err = _cli(capsys, "run", *sets, "--no-save", "-q", "--no-range")
    assert code == 0 and all(ln.endswith(" MB/s") for ln in out.splitlines())
    code, out, _ = _cli(capsys, "run", *sets, "--no-save", "-q", "--no-range", "-f", "json")
    run = Results.from_json(out).runs[0]
    assert all(r.time_ms_range is None for r in run.rows) and "range" not in run.metadata
    assert [r.time_ms for r in run.rows] == [r.time_ms for r in printed.rows]
    assert not any(math.isnan(r.time_ms) for r in run.rows)


def test_budget_limited_members():
    # one run per row cannot be cut: the population's two extremes, or a fit's two extremes
    rec = _run(["espidf.parts=['sd_raw']", "espidf.runs=1", 'sd.card="generic-sdhc"', "sd.host_params.fit_rel_sd={}"])
    info = rec.metadata["range"]
    assert info["budget_limited"] and info["members"] == 2 == population.MIN_MEMBERS
    assert info["cards"] == [info["population"][0], info["population"][-1]]
    assert any("2 of the" in w and "time budget" in w for w in rec.warnings)
    rec = _run(["espidf.parts=['sd_raw']", "espidf.runs=1", "sd.host_params.fit_rel_sd={}",
                "sd.card_params.fit_rel_sd={write_busy_end_us=0.1}"])
    info = rec.metadata["range"]
    assert info["method"] == "fit" and info["members"] == 2 and info["budget_limited"]
    assert info["draws"] == ["all fields at their 10th percentile", "all fields at their 90th percentile"]
    assert all(r.time_ms_range[0] <= r.time_ms <= r.time_ms_range[1] for r in rec.rows)
    assert any(r.time_ms_range[1] > r.time_ms for r in rec.rows if r.op == "write")
