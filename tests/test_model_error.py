"""The model error: measured on the train rows no fit uses, recorded by `sdbench calibrate --model-error`, and
added to every simulated row's range."""
from __future__ import annotations

import math
import tomllib

import pytest

from sdbench import population
from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.errors import ConfigError
from sdbench.protocols import run_scenario
from sdbench.records import make_row
from sdbench.stack.sd import load_card
from sdbench.validation import TRAIN_PREDICTION, model_error, model_error_toml, range_quantile


def _row(op, ms, rng=None):
    r = make_row(f"{op} row", op, 4096, [round(ms * 1e6)] * 2)
    return r if rng is None else r.with_range(*rng)


def test_the_shipped_model_error_has_a_sigma_for_reads_and_for_writes():
    me = population.model_error()
    assert set(me) == {"read", "write"}
    assert 0 < me["read"] < me["write"] < 1


def test_widen_adds_the_model_error_in_quadrature_on_each_side():
    sd = {"read": 0.05, "write": 0.2}
    m_r, m_w = population.Z90 * 0.05, population.Z90 * 0.2
    bare_read, bare_write = population.widen((_row("read", 10.0), _row("write", 10.0)), sd)
    assert bare_read.time_ms_range == pytest.approx((10 * math.exp(-m_r), 10 * math.exp(m_r)))
    assert bare_write.time_ms_range == pytest.approx((10 * math.exp(-m_w), 10 * math.exp(m_w)))
    lo, hi = 10 * math.exp(-0.3), 10 * math.exp(0.1)
    (w,) = population.widen((_row("sync", 10.0, (lo, hi)),), sd)   # sync programs: the write σ
    assert w.time_ms_range == pytest.approx((10 * math.exp(-math.hypot(0.3, m_w)),
                                             10 * math.exp(math.hypot(0.1, m_w))))
    assert w.time_ms == 10.0
    (z,) = population.widen((_row("read", 0.0),), sd)              # no time: nothing to scale
    assert z.time_ms_range is None
    assert population.widen((_row("read", 10.0),), {})[0].time_ms_range is None


@pytest.mark.parametrize("op, kind", [("write", "write"), ("randwrite", "write"), ("rw", "write"),
                                      ("delete", "write"), ("read", "read"), ("mount", "read"), ("open", "read")])
def test_each_op_has_a_kind(op, kind):
    assert population.error_kind(op) == kind


def test_a_calibrated_stack_without_fit_uncertainty_gets_the_model_error_alone():
    rec = run_scenario(scen.load("espidf-esp32-sdmmc4-40mhz", [
        "espidf.parts=['sd_raw']", "espidf.runs=2", "sd.card_params.fit_rel_sd={}", "sd.host_params.fit_rel_sd={}",
        # the card's population-held field set: nothing left to span (tests/test_population_held.py)
        f"sd.card_params.write_busy_single_us={load_card('esp32-perfbench-card').write_busy_single_us}"]),
        ranges=True)
    info = rec.metadata["range"]
    assert info["method"] == "model-error" and "fit_rel_sd is empty" in info["reason"]
    assert info["model_log_sd"] == population.model_error()
    assert info["model_z"] == population.model_error_z()
    for r in rec.rows:
        kind = population.error_kind(r.op)
        m = population.model_error_z()[kind] * population.model_error()[kind]
        assert r.time_ms_range == pytest.approx((r.time_ms * math.exp(-m), r.time_ms * math.exp(m)))


def test_the_shipped_ranges_span_the_student_t_quantile_of_the_rows_sigma_came_from():
    # σ from few rows is uncertain itself: the band is wider than the normal 1.28 σ, more so for fewer rows
    doc = tomllib.loads((population.profiles.DATA / population.MODEL_ERROR_FILE).read_text())
    z = population.model_error_z()
    for kind in population.ERROR_KINDS:
        assert z[kind] == pytest.approx(range_quantile(doc[f"rows_{kind}"]), abs=1e-4)
        assert z[kind] > population.Z90
    assert range_quantile(4) == pytest.approx(1.5332, abs=1e-4)      # tables of Student's t, 4 degrees
    assert range_quantile(6) == pytest.approx(1.4398, abs=1e-4)
    assert range_quantile(10_000) == pytest.approx(population.Z90, abs=1e-3)
    (r, w) = population.widen((_row("read", 10.0), _row("write", 10.0)), {"read": 0.1, "write": 0.1},
                              {"read": 1.5})
    assert r.time_ms_range == pytest.approx((10 * math.exp(-0.15), 10 * math.exp(0.15)))
    assert w.time_ms_range == pytest.approx((10 * math.exp(-0.1 * population.Z90), 10 * math.exp(0.1 * population.Z90)))


def _cmp(kind, measured, predicted, group=TRAIN_PREDICTION):
    return {"group": group, "op": kind, "measured": measured, "predicted": predicted, "scenario": "s",
            "row": f"{kind} {measured}"}


def test_model_error_is_the_rms_log_error_per_kind_with_a_leave_one_out_coverage():
    rows = [_cmp("read", 100, p) for p in (101, 99, 105)] + [_cmp("write", 100, p) for p in (120, 80, 100, 150)]
    rows.append(_cmp("write", 100, 500, group="fitted"))          # fitted rows do not count
    me = model_error(rows)
    logs_r = [math.log(p / 100) for p in (101, 99, 105)]
    assert me.log_rel_sd["read"] == pytest.approx(math.sqrt(sum(x * x for x in logs_r) / 3))
    assert len(me.rows) == 7
    # 150 is outside t σ of the other writes (120, 80, 100; t 1.64 for 3 rows); 105 outside that of 101 and 99
    assert me.loo_coverage == pytest.approx(5 / 7)
    assert me.z == {"read": pytest.approx(range_quantile(3)), "write": pytest.approx(range_quantile(4))}
    doc = tomllib.loads(model_error_toml(me))
    assert doc["log_rel_sd_write"] == pytest.approx(me.log_rel_sd["write"], abs=1e-4)
    assert doc["z_write"] == pytest.approx(range_quantile(4), abs=1e-4)
    assert doc["rows_read"] == 3 and len(doc["row"]) == 7 and doc["leave_one_out_coverage"] == pytest.approx(5 / 7,
                                                                                                              abs=1e-3)
    with pytest.raises(ConfigError, match="model error of reads needs at least 3"):
        model_error(rows[1:])


def test_rows_that_await_a_mechanism_stay_out_of_the_model_error():
    rows = [_cmp("read", 100, p) for p in (101, 99, 105)] + [_cmp("write", 100, p) for p in (120, 80, 100)]
    awaiting = {**_cmp("write", 100, 1), "row": "scattered write"}   # a mechanism the model lacks: 100x off
    me = model_error(rows + [awaiting], unmodelled=[("s", "scattered write")])
    assert me.log_rel_sd == model_error(rows, unmodelled=[]).log_rel_sd and me.left_out == (("s", "scattered write"),)
    assert "# left out: 1 train rows that await a mechanism" in model_error_toml(me)
    assert model_error(rows + [awaiting], unmodelled=[]).log_rel_sd["write"] > 2, "counted, it would dominate"


def test_the_shipped_rows_that_await_a_mechanism_are_train_rows_no_fit_uses():
    from sdbench.calibrate import load_measurements
    from sdbench.validation import fitted_rows, unmodelled_rows

    awaiting = unmodelled_rows()
    assert awaiting and all(awaiting.values())
    train = {(m.scenario, m.row) for m in load_measurements() if m.split == "train"}
    assert set(awaiting) <= train - fitted_rows()


def test_calibrate_model_error_writes_the_file(tmp_path, capsys):
    assert main(["calibrate", "--model-error", "-o", str(tmp_path), "-q"]) == 0
    out = capsys.readouterr().out
    assert "model error of reads" in out and "leave-one-out coverage" in out
    doc = tomllib.loads((tmp_path / "model-error.toml").read_text())
    assert doc["log_rel_sd_read"] == pytest.approx(population.model_error()["read"], abs=1e-4)
    assert main(["calibrate", "--model-error"]) == 2
    assert "needs -o DIR" in capsys.readouterr().err
    (tmp_path / "sub" / "model-error.toml").mkdir(parents=True)   # not a regular file: refused before the runs
    assert main(["calibrate", "--model-error", "-o", str(tmp_path / "sub"), "-q"]) == 2
    assert "is a directory; outputs replace regular files only" in capsys.readouterr().err
