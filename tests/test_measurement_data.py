"""The project's measurement data: the seed's file and the published folder, levels, units, unfitted values."""
from __future__ import annotations

import tomllib

import pytest

from sdbench import calibrate
from sdbench.calibrate import load_measurements, row_level, row_value, write_profile
from sdbench.calibrate.measurements import _read_measurements
from sdbench.errors import SdbenchError
from sdbench.records import make_row

HEAD = "scenario,row,op,size_bytes,runs,value,unit,split,source,note,level\n"


def test_a_row_may_declare_its_level_and_a_bad_level_is_refused():
    rows = _read_measurements(HEAD + "s,sdfat write,write,5000000,1,1000,KB/s,train,src,n,file\n"
                                     "s,raw read,read,4096,1,9.5,MB/s,train,src,n,raw\n", "x.csv")
    assert [row_level(m) for m in rows] == ["file", "raw"]
    with pytest.raises(SdbenchError, match="level 'disk'"):
        _read_measurements(HEAD + "s,r,read,1,1,1,MB/s,train,src,n,disk\n", "x.csv")


def test_sdfat_kilobytes_are_a_thousand_bytes():
    row = make_row("sdfat write", "write", 5_000_000, [1_000_000_000])
    assert row_value(row, "KB/s") == pytest.approx(5000.0)
    assert row_value(row, "KiB/s") == pytest.approx(5_000_000 / 1024)


def test_the_shipped_data_is_the_seed_file_and_the_published_folder():
    rows = load_measurements()
    seed = _read_measurements((calibrate.DATA / "measurements.csv").read_text(), "measurements.csv")
    assert rows[:len(seed)] == seed
    folder = calibrate.DATA / calibrate.PUBLISHED
    extra = sum(len(_read_measurements(f.read_text(), f.name)) for f in folder.iterdir() if f.name.endswith(".csv"))
    assert len(rows) == len(seed) + extra


def test_a_fit_keeps_what_each_field_was_before_it(tmp_path):
    """The first fit of a field records its value before (a source's or an estimate's) in ``unfitted``; a later
    fit keeps that, so cross-validation can always predict a host as if no row had calibrated it."""
    before = tomllib.loads((calibrate.DATA / "hosts" / "teensy41-sdio.toml").read_text())
    path = write_profile("host", "teensy41-sdio", {"block_cycles": 1234.0}, tmp_path, ["fitted by `sdbench calibrate x`"])
    first = tomllib.loads(path.read_text())
    assert first["block_cycles"] == 1234 and first["unfitted"] == {"block_cycles": before["block_cycles"]}
    write_profile("host", "teensy41-sdio", {"block_cycles": 999.0, "call_cycles": 50.0}, tmp_path,
                  ["fitted by `sdbench calibrate y`"])
    again = tomllib.loads(path.read_text())
    assert again["unfitted"] == {"block_cycles": before["block_cycles"], "call_cycles": before["call_cycles"]}
    # a group that fitted the profile before (its header is there) holds its own values in every field it
    # fits, those it fitted without a σ too: a rerun records nothing new
    write_profile("host", "teensy41-sdio", {"fs_call_cycles": 77.0}, tmp_path, ["fitted by `sdbench calibrate y`"])
    assert tomllib.loads(path.read_text())["unfitted"] == again["unfitted"]


def test_a_card_field_held_at_the_population_keeps_the_population_value_as_unfitted(tmp_path):
    """A named card that took a field from the population had the population's value before its first fit: that is
    what ``unfitted`` records, and a second fit keeps it (a fixed point, not the first fit's value)."""
    from sdbench.stack.sd import card_population

    median = card_population().medians["write_busy_end_us"]
    path = tmp_path / "cards" / "held.toml"
    path.parent.mkdir()
    path.write_text('name = "held"\ntiming_from = "population"\ncapacity_bytes = 16_000_000_000\n')
    write_profile("card", "held", {"write_busy_end_us": 777.0}, tmp_path, ["fitted by `sdbench calibrate x`"])
    first = tomllib.loads(path.read_text())
    assert first["write_busy_end_us"] == 777 and first["unfitted"] == {"write_busy_end_us": median}
    write_profile("card", "held", {"write_busy_end_us": 778.0}, tmp_path, ["fitted by `sdbench calibrate x`"])
    assert tomllib.loads(path.read_text())["unfitted"] == {"write_busy_end_us": median}
