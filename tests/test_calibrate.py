"""Calibration: fits physical parameters from raw rows, writes profiles, reproducibly."""
from __future__ import annotations

import tomllib
from importlib import resources

import pytest

from sdbench.calibrate import groups, load_measurements, row_value
from sdbench.cli import main

DATA = resources.files("sdbench") / "data"


@pytest.mark.parametrize("group,card", [("esp32s3-sdmmc", "esp32s3-msc-sdmmc-card"),
                                        pytest.param("esp32s3-spi", "esp32s3-msc-spi-card", marks=pytest.mark.slow)])
def test_shipped_profiles_are_the_output_of_calibrate(group, card, tmp_path, capsys):
    assert main(["calibrate", group, "-o", str(tmp_path), "-q"]) == 0
    out = capsys.readouterr().out
    assert "| raw sectors read |" in out
    fitted = tomllib.loads((tmp_path / "cards" / f"{card}.toml").read_text())
    shipped = tomllib.loads((DATA / "cards" / f"{card}.toml").read_text())
    for key in ("read_access_us", "write_busy_end_us"):
        assert fitted[key] == pytest.approx(shipped[key], rel=1e-6), key


def test_fit_groups_use_only_raw_level_train_rows():
    from sdbench.calibrate import _Evaluator, row_level

    meas = load_measurements()
    for g in groups().values():
        ev = _Evaluator(g, meas)
        used = [m for rows in ev.targets.values() for m in rows]
        assert used
        for m in used:
            assert m.split == "train" and m.value is not None
            # File Open rows constrain only the host's open cost (the cards are fixed by then)
            assert row_level(m) in ("raw", "bridge") or (m.op == "open" and m.row in g.host_rows), (g.name, m.row)


def test_bad_group_and_data_are_one_line_errors(capsys, tmp_path):
    assert main(["calibrate", "nope"]) == 2
    assert "unknown fit group" in capsys.readouterr().err
    bad = tmp_path / "m.csv"
    bad.write_text("a,b\n1,2\n")
    assert main(["validate", "--data", str(bad)]) == 2
    assert "not a measurements file" in capsys.readouterr().err


def test_row_value_units():
    from sdbench.records import make_row

    r = make_row("x", "read", 32768, [10_000_000])  # 32 KiB in 10 ms
    assert row_value(r, "ms") == pytest.approx(10.0)
    assert row_value(r, "KiB/s") == pytest.approx(3200.0)
    assert row_value(r, "MB/s") == pytest.approx(3.2768)
    assert row_value(r, "us") == pytest.approx(10000.0)
