"""`sdbench powerloss --workload logger`: the logger's own log cut at many points; cut runs replay what the
medium saw instead of running the workload again, and find the same."""
from __future__ import annotations

import json
import random
from dataclasses import asdict

import pytest

from sdbench import powerloss as pl
from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.errors import ConfigError
from sdbench.media import MemoryDevice

FAT = "logger-sd-fat-pauses"
SMALL = ["sd.capacity_bytes=268435456", "sd.card_params.pause_probability=0"]


def test_the_logger_workload_is_the_scenarios_log_grown_to_the_cuts():
    sc = scen.load(FAT, [*SMALL, "logger.record_bytes=512", "logger.rate_hz=100", "logger.sync_every_ms=500"])
    cfg = pl.log_replay(sc, 60, 1)
    # three sync intervals of 500 ms, one session, every record held (the RAM buffer is not the medium)
    assert cfg.log.duration_s == pytest.approx(1.505) and cfg.log.runs == 1 and cfg.log.record_bytes == 512
    res = pl.run_cell(sc, pl.Cell("fat", "write-back"), cfg)
    d = res.to_dict(1)
    assert d["cuts"] == 60 and d["cut_points"] >= 60
    assert d["workload"]["record_bytes"] == 512 and d["workload"]["rate_hz"] == 100.0
    assert d["workload"]["duration_s"] >= 1.505
    assert d["cache_config"] == {"blocks": 64, "block_bytes": 512, "bytes": 32768, "policy": "lru",
                                 "write_mode": "write-back", "evict_flush": "run"}
    # a write-back cache holds the log's sectors until a sync: a cut loses at most what no sync promised
    assert d["lost_acknowledged"] == 0 and d["lost_unacknowledged"] > 0 and d["lost_bytes_max"] > 0
    with pytest.raises(ConfigError, match="replays a logger scenario"):
        pl.log_replay(scen.load("espidf-esp32-sdmmc4-40mhz"), 10, 1)


@pytest.mark.parametrize("fs, cache", [("fat", "none"), ("fat", "write-back"), ("littlefs", "write-through"),
                                       ("spiffs", "none")])
def test_replaying_the_medium_finds_what_running_the_workload_again_finds(fs, cache):
    if fs == "spiffs":   # SPI flash: the chip's array is what a cut run starts from
        sc = scen.load("logger-esp32-spiflash", ['logger.part="flash_spiffs"'])
    else:
        sc = scen.load(FAT if fs == "fat" else "logger-sd-littlefs-pauses", SMALL)
    runner = pl.CellRunner(sc, pl.Cell(fs, cache), pl.log_replay(sc, 40, 3))
    work, start, end, _ = pl.sized_workload(runner, runner.cfg)
    runner.cfg = work
    points = pl.cut_points(start, end, 40, 3)[::5]
    replayed = [asdict(runner.cut_run(op, pl.cut_seed(3, op))) for op in points]
    runner.recording = None   # the cut runs make the workload again through the filesystem
    again = [asdict(runner.cut_run(op, pl.cut_seed(3, op))) for op in points]
    assert replayed == again


def test_the_files_workload_replays_the_same_too():
    sc = scen.load("espidf-esp32-sdmmc4-40mhz", ["sd.capacity_bytes=67108864"])
    runner = pl.CellRunner(sc, pl.Cell("raw", "write-back"), pl.WorkloadConfig(cuts=20))
    work, start, end, _ = pl.sized_workload(runner, runner.cfg)
    runner.cfg = work
    points = pl.cut_points(start, end, 20, 1)[::4]
    replayed = [asdict(runner.cut_run(op, pl.cut_seed(1, op))) for op in points]
    runner.recording = None
    assert replayed == [asdict(runner.cut_run(op, pl.cut_seed(1, op))) for op in points]
    assert any(r["cls"] != "clean" for r in replayed)


def test_the_medium_log_is_a_pass_through_that_keeps_the_operations():
    mem = MemoryDevice.of_size(1 << 20)
    n = [0]
    log = pl.MediumLog(mem, lambda: n[0])
    log.write(2, b"\x01" * 1024)
    n[0] = 5
    log.erase(8, 2)
    log.trim(10, 1)
    assert [(w, lba) for w, lba, _ in log.ops] == [("write", 2), ("erase", 8), ("trim", 10)]
    assert log.states == [0, 5, 5]
    other = MemoryDevice.of_size(1 << 20)
    log.replay(other)
    assert other.read(0, 16) == mem.read(0, 16)


def test_fat_entries_are_counted_as_the_fat_stores_them():
    def slow(raw: bytes, kind: int, clusters: int) -> int:
        used = 0
        for c in range(2, clusters + 2):
            if kind == 12:
                v = int.from_bytes(raw[c * 3 // 2:c * 3 // 2 + 2], "little")
                v = v >> 4 if c & 1 else v & 0xFFF
            else:
                w = kind // 8
                v = int.from_bytes(raw[c * w:c * w + w], "little") & (0x0FFFFFFF if w == 4 else 0xFFFF)
            used += v != 0
        return used

    rng = random.Random(5)
    for kind in (12, 16, 32):
        for clusters in (1, 2, 9, 300):
            raw = bytes(rng.choice([0, 0, 0, 1, 0xFF, 0xF0, 0x10]) for _ in range((clusters + 2) * 4 + 8))
            assert pl.fat_entries_used(raw, kind, clusters) == slow(raw, kind, clusters)


def test_cli_workload_logger_reports_the_cache_size_and_policy(capsys):
    code = main(["powerloss", "logger-sd-littlefs-pauses", "--set", "sd.capacity_bytes=268435456", "--workload",
                 "logger", "--cache", "write-through", "--cuts", "12", "-j", "1", "-q", "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["workload"]["kind"] == "logger" and doc["workload"]["record_bytes"] == 64
    cell = doc["cells"][0]
    assert cell["cache_config"]["write_mode"] == "write-through" and cell["cache_config"]["blocks"] == 64
    assert main(["powerloss", "logger-sd-littlefs-pauses", "--workload", "logger", "--workload", "files=2"]) == 2
    assert "takes no other --workload field" in capsys.readouterr().err
