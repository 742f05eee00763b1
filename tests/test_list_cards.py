"""`sdbench list cards`: one Markdown line per shipped card with its capacity and the speed class markings printed
on it; the markings are declared, checked card profile fields that no timing model reads."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from sdbench import profiles
from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.errors import ConfigError
from sdbench.media.sim.card import SPEED_CLASS_MARKINGS, UHS_BUSES, CardModel, CardProfile
from sdbench.protocols import run_scenario

CARDS = profiles.shipped("cards")
KNOWN = {m for family in SPEED_CLASS_MARKINGS.values() for m in family}


def _load(name: str) -> CardProfile:
    return profiles.load(CardProfile, "cards", name, what="card profile")


def test_cards_are_shipped():
    assert "sandisk-extreme-64gb" in CARDS and "generic-sdhc" in CARDS


@pytest.mark.parametrize("name", CARDS)
def test_every_shipped_card_loads_with_known_markings(name):
    c = _load(name)
    assert c.name == name
    assert set(c.speed_class.split()) <= KNOWN, c.speed_class
    assert c.uhs_bus in UHS_BUSES
    # each file says where its markings come from (or why there are none)
    text = (profiles.DATA / "cards" / f"{name}.toml").read_text()
    assert re.search(r"^# markings: \S", text, re.M), name


def test_synthetic_and_unnamed_cards_have_no_markings():
    for name in ("generic-sdhc", "esp32-perfbench-card", "esp32s3-msc-sdmmc-card", "esp32s3-msc-spi-card"):
        c = _load(name)
        assert c.speed_class == "" and c.uhs_bus == "", name


def _rows(out: str) -> tuple[list[str], dict[str, list[str]]]:
    lines = out.strip().splitlines()
    split = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    header = split[0]
    assert re.fullmatch(r"\|(---\|)+", lines[1]), lines[1]
    assert all(line.startswith("| ") and line.endswith(" |") for line in lines[2:])
    assert all(len(r) == len(header) for r in split[2:]), "every row has the header's cells"
    return header, {r[0]: r for r in split[2:]}


def test_list_cards_shows_capacity_and_speed_class_of_each(capsys):
    assert main(["list", "cards"]) == 0
    header, rows = _rows(capsys.readouterr().out)
    assert header[:3] == ["card", "capacity", "speed class"] and header[-1] == "description"
    assert sorted(rows) == CARDS, "one line per shipped card"
    for name, row in rows.items():
        c = _load(name)
        cap, marks, desc = row[1], row[2], row[-1]
        gb = float(cap.split()[0])
        assert re.fullmatch(r"\d+(\.\d)? GB \(SD(SC|HC|XC|UC)\)", cap), cap
        assert gb == pytest.approx(c.capacity_bytes / 1e9, abs=0.05), (name, cap)
        if c.speed_class or c.uhs_bus:
            assert marks != "not recorded"
            assert set(c.speed_class.split()) <= set(marks.replace(",", " ").split()), (name, marks)
            assert c.uhs_bus in marks, (name, marks)
        else:
            assert marks == "not recorded", (name, marks)
        assert desc == c.description


def test_list_cards_cells(capsys):
    assert main(["list", "cards"]) == 0
    _, rows = _rows(capsys.readouterr().out)
    assert rows["sandisk-extreme-64gb"][1:3] == ["64 GB (SDXC)", "C10 U3 V30 A2, UHS-I"]
    assert rows["lexar-v30-64gb"][2] == "V30"
    assert rows["sandisk-switch-128gb"][2] == "UHS-I (speed class not recorded)"
    assert rows["generic-sdhc"][1:3] == ["16 GB (SDHC)", "not recorded"]
    # the fields a card takes from the shipped fitted cards (timing_from = "population")
    assert rows["esp32-perfbench-card"][6] == "fitted; from the population: write_busy_single_us"
    assert rows["lexar-v30-64gb"][6] == "fitted"
    assert rows["generic-sdhc"][6].startswith("uncalibrated; from the population: ")


BAD_MARKINGS = [
    ('speed_class = "C10 U2"', "speed_class: 'U2' is not a speed class marking"),
    ('speed_class = "c10"', "speed_class: 'c10' is not a speed class marking"),
    ('speed_class = "C10 V30 C6"', "'C6' and 'C10' are both C markings"),
    ('speed_class = "Class 10"', "speed_class: 'Class' is not a speed class marking"),
    ('uhs_bus = "UHS-IV"', "uhs_bus = 'UHS-IV' is not one of UHS-I, UHS-II, UHS-III"),
    ("speed_class = 10", "speed_class: expected a string"),
]


@pytest.mark.parametrize("line,text", BAD_MARKINGS, ids=[b[0] for b in BAD_MARKINGS])
def test_unknown_marking_in_a_user_card_file_is_refused(tmp_path, line, text):
    bad = tmp_path / "card.toml"
    bad.write_text(f'name = "mine"\n{line}\n')
    with pytest.raises(ConfigError) as e:
        profiles.load(CardProfile, "cards", str(bad), what="card profile")
    msg = str(e.value)
    assert text in msg and "\n" not in msg, msg
    with pytest.raises(ConfigError) as e:
        run_scenario(scen.load("esp32s3-sdmmc4-40mhz", [f'sd.card="{bad}"']))
    assert text in str(e.value)


def test_unknown_marking_is_one_line_with_exit_2_on_the_cli(tmp_path, capsys):
    bad = tmp_path / "card.toml"
    bad.write_text('name = "mine"\nspeed_class = "C10 U3 V40"\n')
    rc = main(["run", "esp32s3-sdmmc4-40mhz", "--set", f'sd.card="{bad}"', "--no-save"])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: card profile ") and "'V40'" in lines[0], err
    assert "Traceback" not in err
    # as an override of a shipped card too
    rc = main(["run", "esp32s3-sdmmc4-40mhz", "--set", 'sd.card_params.speed_class="U5"', "--no-save"])
    err = capsys.readouterr().err
    assert rc == 2 and "speed_class: 'U5'" in err.strip().splitlines()[-1], err


def test_markings_change_no_timing():
    """The markings are informational: a card model with other markings times every command alike."""
    base = _load("sandisk-extreme-64gb")
    other = replace(base, speed_class="C2", uhs_bus="UHS-III")
    a, b = CardModel(base, seed=3), CardModel(other, seed=3)
    for lba, count in [(0, 1), (8, 64), (100_000, 8), (8192, 1), (72, 64)]:
        assert a.write_done_busy_ns(lba, count, 512, count > 1) == b.write_done_busy_ns(lba, count, 512, count > 1)
    assert (a.read_access_ns(), a.erase_busy_ns(64), a.init_ns()) == (b.read_access_ns(), b.erase_busy_ns(64),
                                                                     b.init_ns())


def test_no_timing_model_reads_the_markings():
    """Only the profile's own check reads them among the media models, stacks and workloads."""
    src = Path(__file__).resolve().parent.parent / "src" / "sdbench"
    readers = sorted(str(p.relative_to(src)) for folder in ("media", "stack", "workloads", "fs", "cache")
                     for p in (src / folder).rglob("*.py")
                     if re.search(r"\.(speed_class|uhs_bus)\b", p.read_text(encoding="utf-8")))
    assert readers == ["media/sim/card.py"], readers
