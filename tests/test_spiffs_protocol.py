"""Flash-work fidelity: the ESP-IDF perf_benchmark SPIFFS steps against the reference C library's trace."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sdbench.fs.spiffs import protocol_trace_compare, replay_espidf_protocol
from sdbench.fs.spiffs.protocol import load_trace

TRACE = Path(__file__).resolve().parents[2] / "shared" / "data" / "spiffs" / "espidf-protocol-trace.csv"


@pytest.fixture
def reference_csv() -> Path:
    if not TRACE.is_file():
        pytest.skip(f"reference trace not found at {TRACE}")
    return TRACE


def test_flash_work_per_step_within_10_percent(reference_csv):
    rows = protocol_trace_compare(reference_csv, file=sys.stdout)   # the table shows with pytest -s
    ref = {(r.step, r.phase, r.op) for r in load_trace(reference_csv)}
    assert {(c.step, c.phase, c.op) for c in rows} == ref
    bad = [c for c in rows if not c.within(0.10)]
    assert not bad, bad
    # the timed calls are what the benchmark reports; they must be there
    assert any(c.phase == "timed" and c.op == "write" and c.count > 0 for c in rows)


def test_replay_matches_the_reference_operation_by_operation(reference_csv):
    """Stronger than required: same ops, addresses and sizes, in the same order."""
    ours = [(r.step, r.phase, r.op, r.addr, r.size) for r in replay_espidf_protocol()]
    ref = [(r.step, r.phase, r.op, r.addr, r.size) for r in load_trace(reference_csv)]
    assert len(ours) == len(ref)
    first_diff = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), None)
    assert first_diff is None, (first_diff, ours[first_diff], ref[first_diff])


def test_replay_without_reference_data_runs():
    rows = replay_espidf_protocol()
    steps = {r.step for r in rows}
    assert {"format", "mount", "write target", "read tiny"} <= steps
    # format erases all 512 blocks of the 2 MiB partition once
    assert sum(1 for r in rows if r.step == "format" and r.op == "erase") == 512
