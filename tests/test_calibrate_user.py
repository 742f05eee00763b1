"""`sdbench calibrate --from FILE --setup SCENARIO -o CARD.toml`: a card profile from a user's own measurements."""
from __future__ import annotations

import statistics
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from sdbench.cli import main

DATA = resources.files("sdbench") / "data"
P2 = "p2-spi25-350mhz-pny-16gb"
ESPIDF = "espidf-esp32-sdmmc4-40mhz"


def _population_sets(**scale: float) -> list[str]:
    """--set overrides that give the scenario's card the population values, some fields scaled."""
    from sdbench.usercal import population

    pop, _ = population()
    out = []
    for k, v in pop.items():
        v = v * scale.get(k, 1.0)
        out += ["--set", f"sd.card_params.{k}={v!r}"]
    return out


def _run_json(tmp_path, scenario: str, *args: str) -> str:
    path = tmp_path / "measured.json"
    assert main(["run", scenario, "--no-save", "--no-range", "-q", "--json", str(path), *args]) == 0
    return str(path)


def _calibrate(*args: str) -> int:
    return main(["calibrate", "-q", *args])


def test_round_trip_recovers_a_modified_card(tmp_path, capsys):
    from sdbench.stack.sd import load_card
    from sdbench.usercal import population

    pop, names = population()
    truth = {"read_access_us": pop["read_access_us"] * 2, "write_busy_end_us": pop["write_busy_end_us"] * 1.5}
    measured = _run_json(tmp_path, P2, "--runs", "3",
                         *_population_sets(read_access_us=2.0, write_busy_end_us=1.5))
    capsys.readouterr()
    out = tmp_path / "mine.toml"
    assert _calibrate("--from", measured, "--setup", P2, "-o", str(out)) == 0
    report = capsys.readouterr().out
    assert "8 rows matched, 0 not matched" in report
    assert f"wrote {out}" in report
    card = load_card(str(out))
    assert card.name == "mine"  # the output file's name
    for name, value in truth.items():
        assert getattr(card, name) == pytest.approx(value, rel=0.02), name
    # the fit's σ of every fitted field, and only of those
    assert {"read_access_us", "write_busy_end_us", "init_ms", "write_busy_single_us"} <= set(card.fit_rel_sd)
    assert all(0 < v < 1e6 for v in card.fit_rel_sd.values())
    assert card.fit_rel_sd["read_access_us"] < 0.05
    assert "erase_busy_us" not in card.fit_rel_sd
    # fields no row tells keep the population's value, and the header says so
    assert card.erase_busy_us == pop["erase_busy_us"]
    # a field no shipped card fitted has no population value: the setup's card's
    assert "page_bytes" not in pop and card.page_bytes == load_card("pny-16gb").page_bytes
    text = out.read_text()
    assert text.startswith(f"# fitted by `sdbench calibrate --from measured.json --setup {P2}`")
    header = [ln for ln in text.splitlines() if ln.startswith("#")]
    pop_lines = " ".join(ln for ln in header if "population" in ln or ln.startswith("#     "))
    assert f"population (median of the {len(names)} shipped fitted cards;" in pop_lines
    assert "erase_busy_us" in pop_lines
    assert any("read_access_us = " in ln and "σ" in ln for ln in header)
    assert any("File Open" in ln for ln in header)  # a matched row that fits no field is compared
    # the profile runs: `sdbench run SCENARIO --set sd.card=FILE` gives back the measured figures
    refit = _run_json(tmp_path, P2, "--runs", "3", "--set", f"sd.card={out}")
    got = {r["label"]: r["time_ms"] for r in __import__("json").loads(open(refit).read())["runs"][0]["rows"]}
    want = {r["label"]: r["time_ms"] for r in __import__("json").loads(open(measured).read())["runs"][0]["rows"]}
    for label in ("Raw Read 1x512B", "Raw Write 1x512B", "Mount"):
        assert got[label] == pytest.approx(want[label], rel=0.01), label


def test_round_trip_from_an_espidf_log(tmp_path, capsys):
    from sdbench.stack.sd import load_card

    # a complete log of the raw and FAT parts (the importer refuses a part with rows missing)
    args = ["--runs", "2", "--set", "espidf.parts=['sd_raw', 'sd_fatfs']", "--set", "sd.card_params.read_access_us=600"]
    assert main(["run", ESPIDF, "--no-save", "--no-range", "-q", "-f", "espidf", *args]) == 0
    log = tmp_path / "monitor.log"
    log.write_text(capsys.readouterr().out)
    out = tmp_path / "card.toml"
    assert _calibrate("--from", str(log), "--setup", ESPIDF, "-o", str(out), "--card", "my card") == 0
    report = capsys.readouterr().out
    assert "24 rows matched, 0 not matched" in report
    assert "| SD FATFS (new file): read tiny size |" in report and "| read_access_us |" in report
    # the one-sector read fits the access (the raw 64 KiB reads then fit the gap between blocks)
    card = load_card(str(out))
    assert card.name == "my card"
    assert card.read_access_us == pytest.approx(600, rel=0.02)
    assert "read_block_gap_us" in card.fit_rel_sd
    assert "compared" in report  # e.g. the FAT file rows: predictions, not fitted
    assert "warning:" not in capsys.readouterr().err
    # the same log fitted as if each row were the mean of 50 calls: the first write's cost is spread thinner than
    # in the log, the fit runs into a bound and misses rows, and says so instead of writing the profile silently
    assert _calibrate("--from", str(log), "--setup", ESPIDF, "-o", str(tmp_path / "c50.toml"), "--runs", "50") == 0
    err = capsys.readouterr().err
    assert "warning: write_busy_end_us stopped at a bound" in err and "fitted rows are more than 10% from" in err


def test_csv_rows_not_matched_are_reported(tmp_path, capsys):
    csv = tmp_path / "bench.csv"
    csv.write_text("# my card on the P2 board\nrow,value,unit,runs\nRaw Read 1x512B,900,KiB/s,3\n"
                   "Raw Read 128x,2000,KiB/s,3\n\"Mount, warm\",12,ms,3\n")
    out = tmp_path / "c.toml"
    assert _calibrate("--from", str(csv), "--setup", P2, "-o", str(out)) == 0
    report = capsys.readouterr().out
    assert "1 rows matched, 2 not matched" in report
    assert "| row not matched | why |" in report
    assert f"| Raw Read 128x | not a row of {P2} |" in report and f"| Mount, warm | not a row of {P2} |" in report
    text = out.read_text()
    assert "rows not matched:" in text and "#     Raw Read 128x: not a row of" in text
    fitted = tomllib.loads(text)
    # one row: the access alone, its σ the stated 1 % of the figure (the rounding of "900" is finer)
    assert set(fitted["fit_rel_sd"]) == {"read_access_us"}
    assert "runs per row 3 (from the measured rows)" in report


def test_population_is_the_median_of_the_shipped_fitted_cards(tmp_path, capsys):
    from sdbench.usercal import population

    pop, names = population()
    fitted = []
    for res in sorted(DATA.joinpath("cards").iterdir(), key=lambda r: r.name):
        text = res.read_text()
        first = next((ln for ln in text.splitlines() if ln.startswith("#")), "")
        if "fitted by `sdbench calibrate" in first:
            fitted.append(tomllib.loads(text))
    assert names and len(names) == len(fitted)
    assert "generic-sdhc" not in names  # not fitted: no part of the population
    # each field's median over the cards that fitted it (named in their fit_rel_sd)
    values = sorted(t["read_access_us"] for t in fitted if "read_access_us" in t.get("fit_rel_sd", {}))
    assert len(values) >= 3 and pop["read_access_us"] == pytest.approx(statistics.median(values))
    for never in ("capacity_bytes", "name", "default_speed_max_clock_hz", "fit_rel_sd"):
        assert never not in pop


def test_an_existing_output_is_replaced_only_with_force(tmp_path, capsys):
    csv = tmp_path / "m.csv"
    csv.write_text("row,value,unit\nRaw Read 1x512B,900,KiB/s\n")
    out = tmp_path / "card.toml"
    out.write_text("keep me\n")
    assert _calibrate("--from", str(csv), "--setup", P2, "-o", str(out)) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {out} exists; pass --force to replace it"
    assert out.read_text() == "keep me\n"
    assert _calibrate("--from", str(csv), "--setup", P2, "-o", str(out), "--force") == 0
    assert tomllib.loads(out.read_text())["name"] == "card"
    assert not list(tmp_path.glob(".card.toml.*"))  # no temporary file left behind


@pytest.mark.parametrize("setup,content,extra,message", [
    (P2, None, [], "missing.csv: no such file"),
    (P2, "row,value,unit\nnot a P2 row,3,ms\n", [], f"no row of m.csv matches a row of {P2}"),
    ("espidf-esp32-spiflash", "row,value,unit\nSPI Flash raw read,8,ms\n", [], "has no simulated SD card"),
    ("espidf-memory", "row,value,unit\nSD raw read,8,ms\n", [], "has no simulated SD card"),
    (P2, "row,value,unit\nRaw Read 1x512B,fast,ms\n", [], "value 'fast' is not a number"),
    (P2, "row,value,unit\nRaw Read 1x512B,-3,ms\n", [], "is not a figure above 0"),
    (P2, "row,value,unit\nRaw Read 1x512B,3,furlongs\n", [], "unit 'furlongs' is not one of"),
    (P2, "row,value,unit\nRaw Read 1x512B,3,ms\nRaw Read 1x512B,4,ms\n", [], "appears twice"),
    (P2, "row,value,unit\nFile Open,0.2,ms\n", [], "tells a card field"),
    (P2, "hello\n", [], "cannot tell the format of m.csv"),
    (P2, "row,value,unit\nRaw Read 1x512B,1e300,ms\n", [], "value '1e300' is outside 1e-06 to 1e+12"),
    (P2, "row,value,unit\nRaw Read 1x512B,1e-308,MiB/s\n", [], "is outside 1e-06 to 1e+12"),
    (P2, "row,value,unit,runs\nRaw Read 1x512B,3,ms,\u00b2\n", [], "is not a whole number from 1"),
    (P2, "row,value,unit\n\"" + "x" * 140_000 + "\",3,ms\n", [], "m.csv: not CSV this reads"),
    (P2, "row,value,unit\nMount,3,ms\n", ["-o", "card.toml", "--card", "a\nb"], "has no control characters"),
    (P2, "row,value,unit\nMount,3,ms\n", ["-o", "card.toml", "--card", "a\x7fb"], "has no control characters"),
    ("no-such-scenario", "row,value,unit\nMount,3,ms\n", [], "unknown scenario"),
    (P2, "row,value,unit\nMount,3,ms\n", ["-o", "card.txt"], "a card profile is a .toml file"),
    (None, "row,value,unit\nMount,3,ms\n", [], "--from FILE needs --setup SCENARIO"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, setup, content, extra, message):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / ("m.csv" if content is not None else "missing.csv")
    if content is not None:
        src.write_text(content)
    args = ["--from", src.name, *(["--setup", setup] if setup else []), *(extra or ["-o", "card.toml"])]
    assert _calibrate(*args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err
    assert "--format" not in err  # calibrate has no such option
    assert not (tmp_path / "card.toml").exists()


def test_a_profile_escapes_control_characters_in_its_strings_and_comments():
    import tomllib

    from sdbench.calibrate.profile_writer import _comment_text
    from sdbench.options import toml_string

    for s in ("plain", 'q"uote\\back', "new\nline", "del\x7fesc\x1b[31m", "tab\there"):
        assert tomllib.loads(f"k = {toml_string(s)}")["k"] == s
        text = "# " + _comment_text(f"scenario {s} \u2028 sep")
        assert text.count("\n") == 0 and tomllib.loads(text + "\nk = 1\n") == {"k": 1}
    assert _comment_text("µs ×1.5 – fine") == "µs ×1.5 – fine"


def test_flags_of_from_are_refused_without_it(capsys):
    assert main(["calibrate", "esp32s3-sdmmc", "--runs", "3"]) == 2
    assert "--runs belongs to --from" in capsys.readouterr().err
    assert main(["calibrate", "p2", "--from", "x.csv", "--setup", P2, "-o", "x.toml"]) == 2
    assert "fit groups cannot go with it" in capsys.readouterr().err


def test_which_rows_fit_which_fields():
    from sdbench.records import make_row
    from sdbench.usercal import (ERASE, MULTI_READ, MULTI_WRITE, ONE_BLOCK_MULTI_WRITE, SINGLE_READ, SINGLE_WRITE,
                                 assign_fields, kind_of)

    # a one-sector read fits the access, the multi-block read then the gap; without it, the access
    assert assign_fields({SINGLE_READ: ["a"], MULTI_READ: ["b"]}) == {"read_access_us": SINGLE_READ,
                                                                       "read_block_gap_us": MULTI_READ}
    assert assign_fields({MULTI_READ: ["b"]}) == {"read_access_us": MULTI_READ}
    assert assign_fields({ONE_BLOCK_MULTI_WRITE: ["a"], MULTI_WRITE: ["b"], SINGLE_WRITE: ["c"], ERASE: ["d"]}) == {
        "write_busy_end_us": ONE_BLOCK_MULTI_WRITE, "write_busy_block_us": MULTI_WRITE,
        "write_busy_single_us": SINGLE_WRITE, "erase_busy_us": ERASE}

    def kind(protocol, label, op="read", nbytes=65536):
        return kind_of(protocol, make_row(label, op, nbytes, [1000]))

    assert kind("espidf", "SD raw read [16 kB label]").mechanism == MULTI_READ
    assert kind("espidf", "SD raw read [16 kB label]").level == "raw"
    assert kind("espidf", "SD FATFS (new file): read tiny size").mechanism == SINGLE_READ
    # a new file's 255 B stay in FatFs' buffer until the (untimed) close: no write busy to fit
    assert kind("espidf", "SD FATFS (new file): write tiny size", "write").mechanism == ""
    assert kind("espidf", "SD LittleFS (new file): write target size", "write").mechanism == ERASE
    assert kind("espidf", "SPI Flash raw read").mechanism == ""
    assert kind("p2", "Raw Write 1x512B", "write", 512).mechanism == ONE_BLOCK_MULTI_WRITE
    assert kind("p2", "File Open", "open", 0).mechanism == ""
    # another protocol: by op and size
    assert kind("fio", "job1 read", "read", 512).mechanism == SINGLE_READ
    assert kind("fio", "job1 write", "write", 1 << 20).mechanism == MULTI_WRITE
    assert kind("fio", "job1 trim", "trim").mechanism == ""


def test_every_row_of_the_espidf_sd_scenario_has_a_declared_kind():
    """The ESP-IDF scenario's SD rows all have a kind of the protocol's own (none falls to the generic ones)."""
    from sdbench.protocols import run_scenario
    from sdbench.scenarios import load
    from sdbench.usercal import ROW_KINDS, kind_of

    rows = run_scenario(load(ESPIDF, ["espidf.runs=1", "espidf.parts=['sd_raw']"])).rows
    own = [k for k in ROW_KINDS if k.protocol == "espidf"]
    for r in rows:
        assert kind_of("espidf", r) in own, r.label


def test_fields_no_row_tells_are_left_to_the_population_and_ranges_span_them(tmp_path, capsys):
    from sdbench.population import plan
    from sdbench.scenarios import load
    from sdbench.media.sim.card import INERT_WITHOUT
    from sdbench.stack.cardpop import card_population
    from sdbench.stack.sd import fitted_values, load_card

    csv = tmp_path / "bench.csv"
    csv.write_text("row,value,unit,runs\nRaw Read 1x512B,900,KiB/s,3\n")
    out = tmp_path / "one.toml"
    assert _calibrate("--from", str(csv), "--setup", P2, "-o", str(out)) == 0
    report = capsys.readouterr().out
    text = out.read_text()
    table = tomllib.loads(text)
    spread = {f for f, v in fitted_values().items() if len(v) >= 2}
    # the setup's card has no random-write area: the fields of one do nothing on it and are not held
    held = spread - {"read_access_us"} - set(INERT_WITHOUT)
    assert {"write_busy_single_us", "init_ms"} <= held
    # the profile leaves them to the population, as the shipped cards that hold fields do
    assert table["timing_from"] == "population"
    assert "read_access_us" in table and not held & set(table)
    assert "erase_busy_us" in table  # fewer than two cards fitted it: no spread, the value is written
    # ... and the report shows what the one card that fitted it has
    erase = fitted_values()["erase_busy_us"]
    assert len(erase) == 1 and f"| erase_busy_us | {erase[0]:.6g} µs | population | the one card that fitted it |" \
        in report
    # the same value a shipped profile that takes it from the population has: one population
    assert table["erase_busy_us"] == pytest.approx(load_card("generic-sdhc").erase_busy_us, rel=1e-6)
    card = load_card(str(out))
    fitted = card_population().medians
    assert {f: getattr(card, f) for f in held} == {f: fitted[f] for f in held}
    assert "held at the population's value" in text and "| write_busy_single_us |" in report
    assert "spans " in report
    # a run with the card spans what the fitted cards do for each held field
    pl = plan(load(P2, [f'sd.card="{out}"']), simulated=True)
    assert pl.method == "fit" and set(pl.held) == held
    assert pl.held["write_busy_single_us"] == fitted_values()["write_busy_single_us"]


def test_a_file_whose_matching_rows_cannot_be_fitted_says_why(tmp_path, capsys):
    import re

    # the labels match the scenario's, but every time is 0: the error names the reason, not the labels
    text = (Path(__file__).parent / "data" / "espidf_esp32_sdmmc.log").read_text()
    log = tmp_path / "zero.log"
    log.write_text(re.sub(r"\)\s+[0-9.]+ ms", ")    0.000 ms", text))
    assert _calibrate("--from", str(log), "--setup", ESPIDF, "-o", str(tmp_path / "c.toml")) == 2
    err = capsys.readouterr().err
    assert "no row of zero.log can be fitted" in err and "its time is 0 in the file" in err, err
    assert not (tmp_path / "c.toml").exists()
