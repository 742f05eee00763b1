"""sdbench validate: row groups, statistics, interval coverage, JSON, exit codes, leave-one-card-out."""
from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from sdbench import protocols
from sdbench import validation as v
from sdbench.calibrate import Measurement, groups, load_measurements
from sdbench.cli import main
from sdbench.records import Row, make_row

V30 = "p2-spi25-350mhz-lexar-v30-64gb"          # fitted rows and train predictions (File Read, File Write)
BLUE250 = "p2-spi25-250mhz-lexar-blue-128gb"   # withheld rows only


@dataclasses.dataclass(frozen=True)
class RangedRow(Row):
    """A simulated row with a range of the mean time per call, whether or not Row has the field yet."""

    time_ms_range: tuple[float, float] | None = None


def _ranged(row: Row, lo_ms: float, hi_ms: float) -> RangedRow:
    return RangedRow(**{**{f.name: getattr(row, f.name) for f in dataclasses.fields(Row)},
                        "time_ms_range": (lo_ms, hi_ms)})


def _meas(scenario: str = "s", row: str = "r", value: float | None = 100.0, unit: str = "ms",
          split: str = "train") -> Measurement:
    return Measurement(scenario, row, "read", 0, 1, value, unit, split, "", "")


def _cmp(measured: float | None, predicted: float | None, rng: list[float] | None = None,
         group: str = v.TRAIN_PREDICTION) -> dict:
    err = None if measured is None or predicted is None else (predicted - measured) / measured
    return {"scenario": "s", "row": f"r{measured}-{predicted}", "group": group, "measured": measured,
            "predicted": predicted, "error": err, "range": rng, "inside": v.inside(measured, rng), "emitted": True,
            "level": "file", "split": "train" if measured is not None else "withheld"}


# ---- groups ------------------------------------------------------------------------------------------------

def test_a_train_row_in_a_fit_group_is_fitted():
    fitted = v.fitted_rows()
    p2 = groups()["p2"]
    assert set(p2.rows) <= fitted
    assert v.row_group(_meas(V30, "Mount"), fitted) == v.FITTED
    assert v.row_group(_meas(V30, "File Read 256KB"), fitted) == v.TRAIN_PREDICTION
    assert v.row_group(_meas(BLUE250, "File Read 256KB", None, split="withheld"), fitted) == v.WITHHELD_PREDICTION
    # a fit group's rows decide, not the level: a made-up group fitting a file-level row makes it fitted
    g = dataclasses.replace(p2, rows=p2.rows + ((V30, "File Read 256KB"),))
    assert v.row_group(_meas(V30, "File Read 256KB"), v.fitted_rows([g])) == v.FITTED


def test_validate_rows_groups_two_scenarios():
    meas = load_measurements()
    rows, missing = v.validate_rows(meas, [V30, BLUE250])
    assert not missing
    by = {(r["scenario"], r["row"]): r for r in rows}
    assert by[(V30, "Mount")]["group"] == v.FITTED
    assert by[(V30, "File Open")]["group"] == v.FITTED  # fits the P2 host's per-open cost
    assert by[(V30, "File Read 256KB")]["group"] in (v.TRAIN_PREDICTION, v.FITTED)
    fitted = v.fitted_rows()
    for r in rows:
        want = v.FITTED if (r["scenario"], r["row"]) in fitted and r["split"] == "train" else \
            v.TRAIN_PREDICTION if r["split"] == "train" else v.WITHHELD_PREDICTION
        assert r["group"] == want
    assert {r["group"] for r in rows if r["scenario"] == BLUE250} == {v.WITHHELD_PREDICTION}
    assert all(r["measured"] is None and r["error"] is None for r in rows if r["group"] == v.WITHHELD_PREDICTION)


def test_validate_rows_in_processes_gives_the_same_rows_in_the_same_order():
    meas = load_measurements()
    one, _ = v.validate_rows(meas, [V30, BLUE250], ranges=False)
    two, _ = v.validate_rows(meas, [BLUE250, V30], ranges=False, workers=2)
    order = {V30: 1, BLUE250: 0}
    assert sorted(one, key=lambda r: order[r["scenario"]]) == two
    assert [r["scenario"] for r in two][0] == BLUE250   # as asked, whichever finished first


# ---- statistics --------------------------------------------------------------------------------------------

def test_group_statistics_on_constructed_rows():
    rows = [_cmp(100, 105), _cmp(100, 90), _cmp(100, 140), _cmp(100, 60), _cmp(100, 300)]
    s = v.group_stats(rows)
    assert s["rows"] == s["compared"] == 5
    assert s["median_abs_error"] == pytest.approx(0.40)  # |errors| .05 .10 .40 .40 2.0
    assert s["worst_abs_error"] == pytest.approx(2.0)
    assert s["within_10pct"] == pytest.approx(2 / 5)   # 10 % itself counts
    # ×1.5: 105, 90, 140 are; 60 is not (100/60 = 1.67), 300 is not
    assert s["within_x1_5"] == pytest.approx(3 / 5)
    assert s["coverage"] is None and s["median_range_width"] is None and s["rows_with_range"] == 0
    assert v.within_factor(100, 150) and v.within_factor(150, 100) and not v.within_factor(100, 0)


def test_coverage_and_width_count_only_rows_with_a_range():
    rows = [_cmp(100, 105, [95, 110]), _cmp(100, 120, [110, 130]), _cmp(100, 98, [98, 100]), _cmp(100, 100)]
    s = v.group_stats(rows)
    assert s["rows_with_range"] == 3
    assert s["coverage"] == pytest.approx(2 / 3)  # ends are inside
    assert s["median_range_width"] == pytest.approx(statistics.median([110 / 95, 130 / 110, 100 / 98]))
    withheld = v.group_stats([_cmp(None, 50, [40, 60], v.WITHHELD_PREDICTION), _cmp(None, 50)])
    assert withheld["rows"] == 2 and withheld["compared"] == 0 and withheld["median_abs_error"] is None
    assert withheld["coverage"] is None and withheld["median_range_width"] == pytest.approx(1.5)


def test_ranges_in_the_row_unit_swap_for_throughput():
    row = make_row("x", "read", 32768, [10_000_000])  # 32 KiB in 10 ms
    plain = RangedRow(**{**{f.name: getattr(row, f.name) for f in dataclasses.fields(Row)}, "time_ms_range": None})
    assert v.row_range(plain, "ms") is None and v.compare_row(_meas(), plain, v.FITTED)["range"] is None
    r = _ranged(row, 8.0, 12.5)
    assert v.row_range(r, "ms") == pytest.approx((8.0, 12.5))
    assert v.row_range(r, "us") == pytest.approx((8000.0, 12500.0))
    lo, hi = v.row_range(r, "KiB/s")
    assert (lo, hi) == pytest.approx((32 / 0.0125, 32 / 0.008))  # the long time is the low figure
    assert v.row_range(r, "MB/s") == pytest.approx((32768 / 1e6 / 0.0125, 32768 / 1e6 / 0.008))
    m = _meas(unit="KiB/s", value=3000.0)
    c = v.compare_row(m, r, v.TRAIN_PREDICTION)
    assert c["predicted"] == pytest.approx(3200.0) and c["range"] == pytest.approx([2560.0, 4000.0])
    assert c["inside"] is True
    assert v.compare_row(_meas(unit="KiB/s", value=4100.0), r, v.TRAIN_PREDICTION)["inside"] is False
    assert v.compare_row(_meas(unit="ms", value=12.6), r, v.TRAIN_PREDICTION)["inside"] is False
    assert v.compare_row(_meas(value=None, split="withheld"), r, v.WITHHELD_PREDICTION)["inside"] is None
    assert v.row_range(_ranged(row, 0.0, 1.0), "KiB/s") is None  # no finite throughput at 0 ms
    gone = v.compare_row(m, None, v.TRAIN_PREDICTION)  # the scenario did not emit the row
    assert not gone["emitted"] and gone["predicted"] is None and gone["range"] is None and gone["inside"] is None


# ---- the command -------------------------------------------------------------------------------------------

def _with_ranges(monkeypatch):
    """Simulated rows carry a ±20 % range of their time."""
    real = protocols.run_scenario  # what run_scenarios calls in this process

    def run(sc, **kw):
        rec = real(sc, **kw)
        return dataclasses.replace(rec, rows=tuple(_ranged(r, r.time_ms * 0.8, r.time_ms * 1.2) for r in rec.rows))

    monkeypatch.setattr(protocols, "run_scenario", run)


def test_json_carries_groups_ranges_and_inside(tmp_path, capsys, monkeypatch):
    _with_ranges(monkeypatch)
    out = tmp_path / "v.json"
    assert main(["validate", V30, BLUE250, "--json", str(out), "-q", "-j", "1"]) == 0  # in this process: patched
    text = capsys.readouterr().out
    assert "| group |" in text and "fitted (train rows a fit group uses): " in text
    assert "withheld predictions (no measured value here): 3 rows" in text
    doc = json.loads(out.read_text())
    assert set(doc) >= {"rows", "groups", "summary", "missing_scenarios"}
    assert list(doc["groups"]) == list(v.GROUPS)
    for r in doc["rows"]:
        assert r["group"] in v.GROUPS
        lo, hi = r["range"]
        assert lo < hi and lo <= r["predicted"] <= hi
        if r["measured"] is None:
            assert r["inside"] is None
        else:
            assert r["inside"] == (lo <= r["measured"] <= hi)
    g = doc["groups"]
    for name in (v.FITTED, v.TRAIN_PREDICTION):
        assert set(g[name]) >= {"rows", "median_abs_error", "within_10pct", "within_x1_5", "coverage",
                                "median_range_width"}
        assert 0 <= g[name]["coverage"] <= 1
    assert g[v.WITHHELD_PREDICTION]["rows"] == 3 and g[v.WITHHELD_PREDICTION]["median_abs_error"] is None
    # ±20 % of the time: width 1.2 / 0.8 in every unit
    assert g[v.WITHHELD_PREDICTION]["median_range_width"] == pytest.approx(1.5)


def test_without_ranges_coverage_is_na(tmp_path, capsys):
    out = tmp_path / "v.json"
    assert main(["validate", BLUE250, "--json", str(out), "-q"]) == 0
    doc = json.loads(out.read_text())
    if not any(r["range"] for r in doc["rows"]):
        assert "median range width n/a" in capsys.readouterr().out
        assert all(r["inside"] is None for r in doc["rows"])


@pytest.mark.parametrize("args,msg", [
    (["validate", "no-such-scenario"], "unknown scenario"),
    (["validate", "espidf-memory"], "has no rows in the measurements file"),
    (["validate", "--cross", "card", V30], "--cross takes no scenarios"),
    (["validate", "--cross", "cards"], "--cross 'cards': host or card"),
])
def test_bad_input_is_one_line_exit_2(args, msg, capsys):
    assert main(args + ["-q"]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


@pytest.mark.parametrize("text,msg", [
    ("a,b\n1,2\n", "not a measurements file"),
    ("scenario,row,op,size_bytes,runs,value,unit,split\n", "no rows"),
    ("scenario,row,op,size_bytes,runs,value,unit,split\ns,r,read,0,1,x,ms,train\n", "line 2"),
    ("scenario,row,op,size_bytes,runs,value,unit,split\ns,r,read,0,1,1,furlongs,train\n", "unit"),
    ("scenario,row,op,size_bytes,runs,value,unit,split\ns,r,read,0,1,1,ms,maybe\n", "split"),
    ("scenario,row,op,size_bytes,runs,value,unit,split\ns,r,read,0,1,,ms,train\n", "needs a measured value"),
    ("scenario,row,op,size_bytes,runs,value,unit,split\ns,r,read,0,1,5,ms,withheld\n", "carry no measured value"),
    ("scenario,row,op,size_bytes,runs,value,unit,split,note\ns,r,read,0,1,1,ms,train,\"" + "x" * 140_000 + "\"\n",
     "line 2: not CSV this reads"),
    ("scenario,row,op,size_bytes,runs,value,unit,split\nnosuch,r,read,0,1,1,ms,train\n",
     "names no built-in scenario ('nosuch')"),
])
def test_bad_data_file_is_one_line_exit_2(text, msg, tmp_path, capsys):
    bad = tmp_path / "m.csv"
    bad.write_text(text)
    out = tmp_path / "v.json"
    out.write_text("keep\n")
    assert main(["validate", "--data", str(bad), "-q", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1
    assert out.read_text() == "keep\n"  # refused before anything is written
    assert main(["validate", "--data", str(tmp_path / "absent.csv"), "-q"]) == 2
    assert "not found" in capsys.readouterr().err


def test_a_measurements_file_saved_with_a_byte_order_mark_reads(tmp_path):
    from sdbench.calibrate import load_measurements

    f = tmp_path / "m.csv"
    f.write_text("\ufeffscenario,row,op,size_bytes,runs,value,unit,split\ns,r,read,0,1,2.5,ms,train\n",
                 encoding="utf-8")
    (m,) = load_measurements(f)
    assert (m.scenario, m.row, m.value) == ("s", "r", 2.5)
