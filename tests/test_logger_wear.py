"""The logger's wear, coverage and producer options: NAND bytes the card programs, a log too short to see a
merge, a ring of files, jitter."""
from __future__ import annotations

import pytest

from sdbench import scenarios as scen
from sdbench.errors import ConfigError
from sdbench.media.sim.card import CardModel, CardProfile
from sdbench.protocols import run_scenario
from sdbench.workloads import logger
from sdbench.workloads.logger.wear import Endurance, life_s

FAT = "logger-sd-fat-pauses"
#: the data-logger example: ESP32-S3 over SDSPI at 20 MHz, the generic card, 512-byte records at 100 Hz
S3 = ["sd.host=\"esp32s3-sdspi\"", "sd.bus.kind=\"spi\"", "sd.bus.clock_hz=20000000", "logger.record_bytes=512",
      "logger.rate_hz=100", "sd.card_params.pause_probability=0", "sd.capacity_bytes=32000000000"]


def test_the_card_counts_host_data_and_merge_copies_as_nand_bytes():
    p = CardProfile(page_bytes=16384, au_bytes=16384 * 4, update_block_bytes=16384 * 4, open_aus=1)
    card = CardModel(p)
    card.write_done_busy_ns(0, 1, 512, multi=False)          # one sector of AU 0
    assert card.nand_programmed_bytes == 512
    card.write_done_busy_ns(p.au_bytes // 512, 1, 512, multi=False)   # AU 1: AU 0 merges, copying 3 pages
    assert card.merges == 1
    assert card.nand_programmed_bytes == 512 + 512 + 3 * 16384


def test_a_log_shorter_than_an_allocation_unit_is_never_silent():
    rec = run_scenario(scen.load(FAT, [*S3, "logger.duration_s=20"]))
    cov = rec.metadata["logger"]["coverage"]
    assert cov["au_bytes"] == 4 << 20 and cov["aus_filled"] == pytest.approx(20 * 100 * 512 / (4 << 20))
    assert cov["short"] and any("allocation unit" in w and "82 s" in w for w in rec.warnings)


def test_a_log_across_allocation_units_sees_the_merge_and_its_nand_copies():
    # a card without a random-write area: the FAT and directory writes keep an update block open in their unit
    rec = run_scenario(scen.load(FAT, [*S3, "logger.duration_s=100", "sd.card_params.random_area_bytes=0"]))
    meta = rec.metadata["logger"]
    assert not meta["coverage"]["short"] and not any("allocation unit" in w for w in rec.warnings)
    # moving into the second AU merges the one that holds the FAT and directory: a stall of hundreds of ms
    assert meta["longest_stall"]["cause"] == "card merge (garbage collection)" and meta["longest_stall"]["ms"] > 300
    wear = meta["wear"]
    assert wear["medium"] == "sd card" and wear["logged_bytes"] == 100 * 100 * 512
    # the merge copies most of a 4 MiB unit: more NAND bytes than the log's 5 MB plus its FAT and directory writes
    assert wear["programmed_bytes"] > wear["written_bytes"] + (3 << 20)
    assert wear["write_amplification"] == pytest.approx(wear["programmed_bytes"] / wear["logged_bytes"])
    by = {r.label: r for r in rec.rows}
    assert by["logger write amplification"].value == pytest.approx(wear["write_amplification"])
    dist = meta["buffer"]["distribution"]
    assert dist["max_bytes"] == meta["buffer"]["needed_bytes"] and dist["p99_bytes"] <= dist["max_bytes"]
    assert sum(dist["counts"]) == 100 * 100


def test_a_random_write_area_takes_the_fat_writes_and_the_unit_change_does_not_stall():
    """The generic card's random-write area takes the FAT and directory sectors: no update block stays open in
    their unit, so entering the next unit is a switch merge, not a copy of the unit."""
    rec = run_scenario(scen.load(FAT, [*S3, "logger.duration_s=100"]))
    meta = rec.metadata["logger"]
    assert meta["longest_stall"]["ms"] < 50
    assert meta["wear"]["programmed_bytes"] < meta["wear"]["written_bytes"] + (1 << 20)


def test_life_follows_the_rate_of_wear():
    wear = {"medium": "sd card", "logged_bytes": 1_000_000, "programmed_bytes": 2_000_000,
            "written_bytes": 1_100_000, "medium_bytes": 1_000_000_000}
    # 3000 cycles of 1 GB, logging 100 kB/s that program 200 kB/s
    assert life_s(wear, Endurance(cycles=3000), 100_000) == pytest.approx(3000 * 1e9 / 2e5)
    # 10 TB written by the host at 110 kB/s
    assert life_s(wear, Endurance(tbw_bytes=1e13), 100_000) == pytest.approx(1e13 / 1.1e5)
    nor = {"medium": "nor flash", "logged_bytes": 409_600, "erases": 50, "erase_bytes": 4096,
           "medium_bytes": 4096 * 512}
    # 50 sector erases per 400 KiB logged, logging 40 KiB/s: 5 erases a second over 512 sectors
    assert life_s(nor, Endurance(cycles=100_000), 40_960) == pytest.approx(100_000 * 512 / 5.0)
    assert life_s(wear, Endurance(), 100_000) is None


def test_a_ring_of_files_keeps_the_newest():
    over = ["logger.duration_s=2", "logger.rotate_bytes=8192", "logger.keep_files=2"]
    rec = run_scenario(scen.load(FAT, over))
    meta = rec.metadata["logger"]
    assert meta["files"] == 4 and meta["keep_files"] == 2   # 400 records of 64 B: 4 files of 128 records
    with pytest.raises(ConfigError, match="keep_files needs logger.rotate_bytes"):
        scen.load(FAT, ["logger.keep_files=2"])


def test_jitter_delays_records_inside_their_period():
    cfg = logger.LoggerConfig(rate_hz=100.0, duration_s=1.0, jitter_ms=4.0)
    s = logger.Schedule(cfg, seed=1, session=0)
    times = [s.t(k) for k in range(cfg.records)]
    assert all(10_000_000 * k <= t < 10_000_000 * k + 4_000_000 for k, t in enumerate(times))
    assert len(set(t % 10_000_000 for t in times)) > 50       # drawn, not fixed
    assert s.produced_before(times[37] + 1) == 38 and s.produced_before(times[37]) == 37
    with pytest.raises(ConfigError, match="jitter_ms = 10 ms is not below the record period"):
        logger.LoggerConfig(rate_hz=100.0, jitter_ms=10.0)
