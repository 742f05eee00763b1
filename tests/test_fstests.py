"""fs_tests: MicroPython's cached SD driver over the simulated card; the findings come out of the models."""
from __future__ import annotations

import pytest

from sdbench import scenarios as scen
from sdbench.cache import BlockCache
from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.media import MemoryDevice
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.mpy_sdcard import MicroPythonSdCard
from sdbench.stack.sd import load_card, load_host
from sdbench.protocols import run_scenario
from sdbench.workloads.fstests import MpyBlockDevice, MpyLittleFs, load_config
from sdbench.fs.littlefs import LittleFsConfig

BASE = "mpy-esp32s3-sdspi"


def values(*overrides: str) -> dict[str, float]:
    rec = run_scenario(scen.load(BASE, list(overrides)))
    return {r.label: r.value for r in rec.rows}


@pytest.fixture(scope="module")
def lfs_cache_sizes() -> dict[str, float]:
    return values('fs_tests.filesystems=["littlefs"]', "fs_tests.cache_blocks=[0, 4, 16, 128]")


def test_littlefs_mixed_reads_are_at_least_3x_faster_with_a_16_block_cache(lfs_cache_sizes):
    v = lfs_cache_sizes
    assert v["littlefs mixed cache=16 read"] >= 3 * v["littlefs mixed cache=0 read"], v
    # writes gain too: without a cache every 32-byte program is a read-modify-write of a whole block
    assert v["littlefs mixed cache=16 write"] >= 3 * v["littlefs mixed cache=0 write"], v


def test_cache_gains_flatten_as_the_cache_grows(lfs_cache_sizes):
    v = lfs_cache_sizes
    first = v["littlefs mixed cache=16 read"] / v["littlefs mixed cache=0 read"]
    later = v["littlefs mixed cache=128 read"] / v["littlefs mixed cache=16 read"]
    assert first > 3 and later < 1.1, (first, later)
    # and 4 blocks do not hold littlefs' working set (metadata pair + skip-list blocks); 16 do
    assert v["littlefs mixed cache=4 read"] < 0.5 * v["littlefs mixed cache=16 read"]


def test_large_read_ahead_relative_to_the_cache_hurts_and_small_helps_big_fat_files():
    v = values("fs_tests.cache_blocks=[32]", "fs_tests.read_ahead=[1, 4, 16]",
               'fs_tests.workloads=["mixed", "big_file"]')
    # littlefs walks its skip lists backwards: every miss drags 16 useless blocks in and evicts the useful ones
    assert v["littlefs mixed ra=16 read"] < 0.25 * v["littlefs mixed ra=1 read"], v
    assert v["fat big_file ra=4 read"] > 1.1 * v["fat big_file ra=1 read"], v   # CMD18 instead of CMD17s
    assert v["fat mixed ra=16 read"] < v["fat mixed ra=4 read"], v


def test_lruc_is_not_worse_than_lru():
    v = values('fs_tests.policies=["lru", "lruc"]', "fs_tests.cache_blocks=[8]")
    for fs in ("fat", "littlefs"):
        for d in ("write", "read"):
            assert v[f"{fs} mixed lruc {d}"] >= 0.98 * v[f"{fs} mixed lru {d}"], v


def test_runs_are_deterministic_and_the_seed_shuffles_the_file_order():
    over = ['fs_tests.filesystems=["littlefs"]', 'fs_tests.workloads=["small_files", "mixed"]',
            "fs_tests.cache_blocks=[8]"]
    a = run_scenario(scen.load(BASE, over))
    b = run_scenario(scen.load(BASE, over))
    assert [r.to_dict() for r in a.rows] == [r.to_dict() for r in b.rows]
    c = run_scenario(scen.load(BASE, over + ["seed=7"]))
    assert a.metadata["fs_tests"]["files"]["mixed"] != c.metadata["fs_tests"]["files"]["mixed"]
    assert sorted(a.metadata["fs_tests"]["files"]["mixed"]) == sorted(c.metadata["fs_tests"]["files"]["mixed"])
    assert len(a.metadata["fs_tests"]["files"]["mixed"]) == 28
    assert a.rows[0].unit == "KiB/s" and a.rows[0].bytes == 32 * 1024


def _card() -> MicroPythonSdCard:
    return MicroPythonSdCard(load_host("esp32s3-micropython"), SdBus(BusConfig(kind="spi", clock_hz=1_311_475)),
                             load_card("generic-sdhc"), VirtualClock())


def test_sdcard_py_waits_a_millisecond_for_the_first_block_and_uses_one_command_per_request():
    card = _card()
    clock = card.clock
    card.read(100, 1)
    assert clock.commands == {"CMD17": 1}
    one = clock.breakdown_ns()
    assert one["rtos"] == 1_000_000  # readinto(): the token was not there at the first poll: sleep_ms(1)
    card.read(200, 4)
    assert clock.commands["CMD18"] == 1 and clock.commands["CMD12"] == 1
    assert clock.breakdown_ns()["rtos"] == 2_000_000  # later blocks of a CMD18 are ready at once
    card.write(300, bytes(4 * 512))
    card.write(400, bytes(512))
    assert clock.commands.get("CMD25") == 1 and clock.commands.get("CMD24") == 1
    assert "CMD13" not in clock.commands  # sdcard.py never asks for the status
    # 514 bytes per block at 1.311 MHz: a block read costs more than 3.1 ms on the wire alone
    assert one["bus"] > 3.1e6


def test_the_extended_interface_patches_partial_blocks():
    mem = MemoryDevice.of_size(1 << 20)
    bdev = MpyBlockDevice(mem, 0.0)
    bdev.write_ext(512 * 3 + 100, b"x" * 1000)
    assert mem.read(3, 3)[100:1100] == b"x" * 1000 and mem.read(3, 1)[:100] == bytes(100)
    assert bdev.read_ext(512 * 3 + 90, 30) == bytes(10) + b"x" * 20
    bdev.erase(0, 1)  # ioctl(6) does nothing on an SD card
    assert mem.stats.erases == 0


def test_littlefs_with_micropython_geometry_over_a_small_cache_keeps_the_data():
    mem = MemoryDevice.of_size(4 << 20)
    cache = BlockCache(mem)
    cfg = LittleFsConfig(read_size=32, prog_size=32, cache_size=128, lookahead_size=32, block_cycles=100)
    fs = MpyLittleFs(MpyBlockDevice(cache, 0.0), cfg)
    fs.format()
    fs.mount()
    with fs.open("/a.bin", "w") as f:
        for i in range(40):
            f.write(bytes([i]) * 512)
    fs.unmount()
    fs.mount()
    with fs.open("/a.bin", "r") as f:
        assert f.read() == b"".join(bytes([i]) * 512 for i in range(40))
    fs.unmount()


def test_config_errors_are_one_line_and_scalars_are_one_point_grids():
    with pytest.raises(ConfigError, match="fs_tests.filesystems: unknown value 'ext4'"):
        load_config({"filesystems": ["ext4"]})
    with pytest.raises(ConfigError, match="read_ahead"):
        load_config({"read_ahead": [0]})
    with pytest.raises(ConfigError, match="set by the protocol"):
        load_config({"cache": {"blocks": 4}})
    cfg = load_config({"cache_blocks": 8, "policies": "arc"})
    assert cfg.cache_blocks == (8,) and cfg.policies == ("arc",)
    # read-ahead beyond the cache size is skipped, as the driver refuses it
    v = values('fs_tests.filesystems=["fat"]', "fs_tests.cache_blocks=[2]", "fs_tests.read_ahead=[1, 4]")
    assert list(v) == ["fat mixed ra=1 write", "fat mixed ra=1 read"]


def test_a_scenario_can_wrap_its_card_in_a_block_cache():
    sc = scen.load("esp32s3-spi20mhz", ["sd.cache.blocks=8", 'sd.cache.policy="arc"'])
    built = sc.build()
    try:
        dev = built.target.sd_device
        assert isinstance(dev, BlockCache) and dev.config.blocks == 8
        assert dev.config.cpu_hz == 240_000_000  # the host profile's clock
        assert built.stack["sd"]["device"]["cache"]["policy"] == "arc"
    finally:
        built.close()
    rec = run_scenario(sc)
    assert rec.rows[0].label == "raw sectors write"
    with pytest.raises(ConfigError, match="sd.cache"):
        scen.load("esp32s3-spi20mhz", ["sd.cache.policy=\"mru\""])
    with pytest.raises(ConfigError, match="unknown option sd.cache.size"):
        scen.load("esp32s3-spi20mhz", ["sd.cache.size=8"])
