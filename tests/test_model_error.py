"""The model error: measured on the train rows no fit uses, recorded by `sdbench calibrate --model-error`, and
added to every simulated row's range."""
from __future__ import annotations

import math
import tomllib

import pytest

from sdbench import population
from sdbench import scenarios as scen
from sdbench.protocols import run_scenario
from sdbench.records import make_row
from sdbench.stack.sd import load_card


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
    assert info["structural"] == {"class": "neither", "measured_on": {"read": "neither", "write": "neither"}}
    assert info["model_log_sd"] == population.model_error()
    assert info["model_z"] == population.model_error_z()
    for r in rec.rows:
        kind = population.error_kind(r.op)
        m = population.model_error_z()[kind] * population.model_error()[kind]
        assert r.time_ms_range == pytest.approx((r.time_ms * math.exp(-m), r.time_ms * math.exp(m)))


def test_the_shipped_ranges_span_the_normal_quantile_of_a_sigma_measured_for_their_coverage():
    # σ is measured so that 80 % of the rows fall inside ±1.28 σ (crossval.conformal_sd): the file says so
    doc = tomllib.loads((population.profiles.DATA / population.MODEL_ERROR_FILE).read_text())
    z = population.model_error_z()
    for kind in population.ERROR_KINDS:
        assert z[kind] == pytest.approx(population.Z90, abs=1e-4) and doc[f"rows_{kind}"] >= 3
    (r, w) = population.widen((_row("read", 10.0), _row("write", 10.0)), {"read": 0.1, "write": 0.1},
                              {"read": 1.5})
    assert r.time_ms_range == pytest.approx((10 * math.exp(-0.15), 10 * math.exp(0.15)))
    assert w.time_ms_range == pytest.approx((10 * math.exp(-0.1 * population.Z90), 10 * math.exp(0.1 * population.Z90)))




def test_the_validation_page_states_the_shipped_structural_error():
    """docs/validation.md's table of σ per class is the shipped model-error.toml's, to 0.1 %."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "validation.md").read_text(encoding="utf-8")
    for klass in population.STRUCTURAL_CLASSES:
        sd, _, src = population.structural_error(klass)
        line = next(ln for ln in page.splitlines() if ln.startswith(f"| {klass} | ") and "%" in ln)
        cells = [c.strip() for c in line.strip("|").split("|")]
        for kind, cell in zip(("read", "write"), cells[1:3]):
            assert src[kind] == klass, (klass, kind)
            assert cell.startswith(f"{sd[kind] * 100:.1f} %"), (klass, kind, cell)
