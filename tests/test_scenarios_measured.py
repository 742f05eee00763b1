"""Every scenario named in the shipped measurements exists and emits every row named there."""
from __future__ import annotations

import pytest

from sdbench.calibrate import load_measurements
from sdbench.protocols import run_scenario
from sdbench.scenarios import builtin_names, load
from sdbench.workloads.registry import protocol

MEAS = load_measurements()
NAMES = sorted({m.scenario for m in MEAS})


@pytest.mark.parametrize("name", NAMES)
def test_scenario_exists_and_emits_its_rows(name):
    assert name in builtin_names(), f"no built-in scenario {name}"
    sc = load(name)
    over = [f"{protocol(sc.protocol).runs_option}=1"] if sc.protocol != "raw" else []
    if sc.protocol == "sdfat-bench":  # the rows a bench emits do not depend on its file's size: a small one
        over.append("sdfat_bench.file_bytes=65536")
    rec = run_scenario(load(name, over))
    labels = {r.label for r in rec.rows}
    missing = [m.row for m in MEAS if m.scenario == name and m.row not in labels]
    assert not missing, f"{name} does not emit {missing}"


def test_measured_runs_are_the_scenario_defaults():
    # `sdbench run NAME` alone reproduces the measured setup's number of runs
    for name in NAMES:
        sc = load(name)
        for m in (m for m in MEAS if m.scenario == name and m.runs):
            if sc.protocol == "espidf":
                cfg = protocol("espidf").config_of(sc)
                want = cfg.spiffs_runs if "SPIFFS" in m.row else cfg.runs
                assert want == m.runs, (name, m.row)
            elif sc.protocol == "p2":
                assert protocol("p2").config_of(sc).runs == m.runs, (name, m.row)
