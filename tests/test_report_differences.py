"""What tells runs apart: legend names made of what differs, stack differences without the copies the builder
records, and the protocol's options in a run's stack."""
from __future__ import annotations

import pytest

from sdbench import scenarios as scen
from sdbench.protocols import run_scenario
from sdbench.records import RunRecord, make_row
from sdbench.report.differences import differences, fact_text, run_labels, short_keys
from sdbench.report.tables import copies, stack_diff_table, stack_fields

CARD = {"name": "generic-sdhc", "read_access_us": 182.0, "au_bytes": 4194304}


def stack(clock_hz: int = 40_000_000, busy_us: float = 862.5, rate_hz: float = 200.0) -> dict:
    card = {**CARD, "write_busy_end_us": busy_us}
    bus = {"kind": "sd4", "clock_hz": clock_hz}
    # as the stack builder records it: the card and bus again inside the device it built
    return {"scenario": "s", "sd": {"bus": bus, "card": card, "device": {"kind": "sim-sd", "bus": dict(bus),
                                                                      "card": dict(card)}},
            "logger": {"rate_hz": rate_hz}}


def record(scenario: str = "s", seed: int = 1, sweep: dict | None = None, **kw) -> RunRecord:
    meta = {"sweep": {"id": "x", "params": sweep}} if sweep is not None else {}
    return RunRecord(scenario=scenario, stack=stack(**kw), clock="virtual", seed=seed, source="simulated",
                     rows=(make_row("r", "read", 512, [1000, 1100]),), metadata=meta)


def test_copies_of_a_table_are_found_in_every_stack_and_the_shorter_path_kept():
    a, b = stack(), stack(clock_hz=20_000_000, busy_us=900.0)
    assert copies([a, b]) == {"sd.device.bus", "sd.device.card"}
    fields = stack_fields([a, b])
    assert "sd.card.write_busy_end_us" in fields[0] and "sd.device.card.write_busy_end_us" not in fields[0]
    assert fields[1]["sd.bus.clock_hz"] == "20000000" and fields[1]["sd.device.kind"] == "sim-sd"
    # a table that is no copy in one of the stacks stays in all
    c = stack()
    c["sd"]["device"]["card"]["write_busy_end_us"] = 1.0
    assert copies([a, c]) == {"sd.device.bus"}


def test_stack_differences_list_each_field_once():
    t = stack_diff_table(["#1", "#2"], [stack(), stack(clock_hz=20_000_000, busy_us=900.0)])
    fields = [row[0] for row in t.rows]
    assert fields == ["sd.bus.clock_hz", "sd.card.write_busy_end_us"]
    assert t.rows[0][1:] == ["40000000", "20000000"]


def test_runs_of_one_scenario_are_named_by_their_set_values_and_seed():
    recs = [record(), record(clock_hz=20_000_000), record(seed=7), record(rate_hz=1000.0)]
    labels = run_labels(["#1", "#2", "#3", "#4"], recs)
    # values in the unit their key names, as a person reads them
    assert labels == ["#1 clock_hz=40 MHz, rate_hz=200 Hz, seed 1", "#2 clock_hz=20 MHz, rate_hz=200 Hz, seed 1",
                      "#3 clock_hz=40 MHz, rate_hz=200 Hz, seed 7", "#4 clock_hz=40 MHz, rate_hz=1 kHz, seed 1"]
    assert differences(recs)[1] == [("sd.bus.clock_hz", "20000000"), ("logger.rate_hz", "200.0"), ("seed", "1")]
    # nothing differs: the name alone
    assert run_labels(["#1", "#2"], [record(), record()]) == ["#1", "#2"]
    assert run_labels(["#1"], [record(seed=3)]) == ["#1"]


def test_sweep_parameters_name_sweep_runs_and_scenarios_name_runs_of_other_scenarios():
    sweep = [record(sweep={"fs_tests.cache_blocks": n, "fs_tests.filesystems": fs}, busy_us=900.0 + n)
             for n in (0, 16) for fs in ("fat", "littlefs")]
    assert run_labels([f"#{i}" for i in range(1, 5)], sweep) == [
        "#1 cache_blocks=0, filesystems=fat", "#2 cache_blocks=0, filesystems=littlefs",
        "#3 cache_blocks=16, filesystems=fat", "#4 cache_blocks=16, filesystems=littlefs"]
    mixed = [record("a"), record("a", clock_hz=20_000_000), record("b")]
    assert run_labels(["#1", "#2", "#3"], mixed) == ["#1 a, clock_hz=40 MHz", "#2 a, clock_hz=20 MHz", "#3 b"]
    many = [record(clock_hz=c, busy_us=b, rate_hz=r, seed=s) for c, b, r, s in ((1, 1.0, 1.0, 1), (2, 2.0, 2.0, 2))]
    assert run_labels(["#1", "#2"], many)[1] == "#2 clock_hz=2 Hz, write_busy_end_us=2 µs, rate_hz=2 Hz +1 more"


def test_short_keys_are_the_shortest_tails_no_other_key_ends_with():
    assert short_keys(["sd.bus.clock_hz", "flash.bus.clock_hz", "sd.card.name", "seed"]) == {
        "sd.bus.clock_hz": "sd.bus.clock_hz", "flash.bus.clock_hz": "flash.bus.clock_hz", "sd.card.name": "name",
        "seed": "seed"}


def test_a_run_records_its_protocol_options_in_its_stack():
    a = run_scenario(scen.load("logger-sd-fat-pauses", ["logger.duration_s=1"]))
    b = run_scenario(scen.load("logger-sd-fat-pauses", ["logger.duration_s=1", "logger.rate_hz=400"]))
    assert a.stack["logger"]["rate_hz"] == 200.0 and b.stack["logger"]["rate_hz"] == 400.0
    assert run_labels(["#1", "#2"], [a, b]) == ["#1 rate_hz=200 Hz", "#2 rate_hz=400 Hz"]
    assert [row[0] for row in stack_diff_table(["#1", "#2"], [a.stack, b.stack]).rows] == ["logger.rate_hz"]


@pytest.mark.parametrize("key, value, shown", [
    ("clock_hz", "40000000", "clock_hz=40 MHz"), ("clock_hz", "400000", "clock_hz=400 kHz"),
    ("sector_size_bytes", "4096", "sector_size_bytes=4 KiB"), ("capacity_bytes", "1500000", "capacity_bytes=1.4 MiB"),
    ("busy_us", "250.0", "busy_us=250 µs"), ("timeout_ms", "1.5", "timeout_ms=1.5 ms"),
    ("fill_pct", "70", "fill_pct=70 %"), ("policy", "lru", "policy=lru"), ("blocks", "16", "blocks=16"),
    ("clock_hz", "fast", "clock_hz=fast"), ("throughput_kib_s", "512", "throughput_kib_s=512 KiB/s"),
    ("rate_bytes_s", "250000", "rate_bytes_s=250000 B/s"), ("ops_per_s", "20", "ops_per_s=20 /s"),
])
def test_a_value_is_shown_in_the_unit_its_key_names(key, value, shown):
    assert fact_text(key, value) == shown


def test_values_a_unit_would_round_together_stay_as_they_are():
    from sdbench.report.differences import fact_texts

    diffs = [[("sd.capacity_bytes", "5000000000"), ("clock_hz", "20000000")],
             [("sd.capacity_bytes", "5010000000"), ("clock_hz", "40000000")]]
    assert fact_texts(diffs, {"sd.capacity_bytes": "capacity_bytes"}) == [
        ["capacity_bytes=5000000000", "clock_hz=20 MHz"], ["capacity_bytes=5010000000", "clock_hz=40 MHz"]]
