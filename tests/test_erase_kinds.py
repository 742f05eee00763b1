"""ERASE, DISCARD and FULE are separate card busy times; which one a driver sends for an erase and for a trim."""
from __future__ import annotations

import pytest

from sdbench.clock import VirtualClock
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.card import ERASE_ARGS, CardModel, CardProfile
from sdbench.media.sim.host import HostProfile
from sdbench.media.sim.sdhost import SdHostDriver

BUSY = {"erase_busy_us": 15_000.0, "erase_busy_per_sector_us": 0.0, "discard_busy_us": 300.0,
        "fule_busy_us": 40_000.0}


def _driver(trim_command="discard", bus="sd4", driver="sdmmc", **card):
    host = HostProfile(driver=driver, transaction_cycles=2400, cpu_hz=240_000_000, trim_command=trim_command,
                       crc_cycles_per_byte=16 if driver == "sdspi" else 0)
    clock_hz = 20_000_000 if bus == "spi" else 40_000_000
    prof = CardProfile(capacity_bytes=64 << 20, **{**BUSY, **card})
    return SdHostDriver(host, SdBus(BusConfig(bus, clock_hz)), prof, VirtualClock(), log_commands=True)


def _cmd38(dev):
    return [(e.arg, e.dur_ns) for e in dev.log if e.name == "CMD38"]


def test_each_kind_has_its_own_busy():
    card = CardModel(CardProfile(**BUSY))
    assert card.erase_busy_ns(1, "erase") == 15_000_000
    assert card.erase_busy_ns(1, "discard") == 300_000
    assert card.erase_busy_ns(1, "fule") == 40_000_000
    assert ERASE_ARGS == {"erase": 0, "discard": 1, "fule": 2}


def test_an_erase_callback_sends_a_full_erase_and_waits_in_ticks():
    dev = _driver()
    t0 = dev.clock.now_ns()
    dev.erase(100, 1)
    (arg, _), = _cmd38(dev)
    assert arg == 0  # ERASE, whatever the host does with trims
    spent = dev.clock.now_ns() - t0
    # 15 ms of busy, waited for in 10 ms task delays: the call ends on a tick boundary after the busy
    assert spent >= 15_000_000 and dev.clock.now_ns() % 10_000_000 == 0


@pytest.mark.parametrize("trim_command, card, bus, want", [
    ("none", {}, "sd4", None),                             # ESP-IDF >= 5.3: FatFs trims never reach an SD card
    ("discard", {}, "sd4", 1),                             # DISCARD where the card takes it
    ("discard", {"discard_support": False}, "sd4", 0),     # ... else ERASE
    ("discard", {}, "spi", 0),                             # SPI mode: no DISCARD (sdmmc_can_discard)
    ("erase", {}, "sd4", 0),
])
def test_a_trim_becomes_what_the_host_says(trim_command, card, bus, want):
    dev = _driver(trim_command, bus=bus, driver="sdspi" if bus == "spi" else "sdmmc", **card)
    t0 = dev.clock.now_ns()
    dev.trim(200, 8)
    cmds = _cmd38(dev)
    if want is None:
        assert cmds == [] and dev.clock.now_ns() == t0
    else:
        assert [a for a, _ in cmds] == [want]
        busy = BUSY["discard_busy_us"] if want == 1 else BUSY["erase_busy_us"]
        assert dev.clock.now_ns() - t0 >= busy * 1e3


def test_a_discard_is_cheaper_than_an_erase_on_the_same_card():
    erase, discard = _driver("erase"), _driver("discard")
    for dev in (erase, discard):
        dev.trim(0, 8)
    assert discard.clock.now_ns() < erase.clock.now_ns()


def test_littlefs_on_sd_erases_every_block_it_programs():
    from sdbench.fs.littlefs import LittleFsConfig, LittleFsFileSystem

    dev = _driver("none")
    fs = LittleFsFileSystem(dev, LittleFsConfig(read_size=512, prog_size=512, block_size=512, cache_size=512,
                                                lookahead_size=128, block_count=4096))
    fs.format()
    fs.mount()
    dev.log.clear()
    with fs.open("/f.bin", "w") as f:
        f.write(bytes(8 * 512))
    erases = [e.arg for e in dev.log if e.name == "CMD38"]
    writes = [e for e in dev.log if e.name == "CMD24"]
    assert erases and set(erases) == {0} and len(erases) >= 8 and len(writes) >= 8
    fs.unmount()


# ---- the P2 driver's raw API: multi-block commands even for one sector ----------------------------------

def test_p2_raw_tests_use_the_multi_block_entry_and_the_file_tests_single_blocks():
    from sdbench.protocols import run_scenario
    from sdbench.scenarios import load

    sc = load("p2-spi25-350mhz-pny-16gb", ["sd.log_commands=true", "p2.runs=1",
                                           "p2.metrics=['Raw Read 1x512B', 'Raw Write 1x512B', 'File Read']"])
    rows = {r.label: r.commands for r in run_scenario(sc).rows}
    assert rows["Raw Read 1x512B"] == {"CMD18": 1, "CMD12": 1, "CMD13": 1}
    assert rows["Raw Write 1x512B"] == {"CMD25": 1, "CMD13": 1}  # the stop token ends it, no CMD12
    assert "CMD18" not in rows["File Read 256KB"] and rows["File Read 256KB"]["CMD17"] >= 512


def test_p2_raw_tests_can_use_single_block_commands():
    from sdbench.protocols import run_scenario
    from sdbench.scenarios import load

    sc = load("p2-spi25-350mhz-pny-16gb", ["sd.log_commands=true", "p2.runs=1", "p2.raw_multi_block=false",
                                           "p2.metrics=['Raw Read 1x512B', 'Raw Write 1x512B']"])
    rows = {r.label: r.commands for r in run_scenario(sc).rows}
    assert rows["Raw Read 1x512B"] == {"CMD17": 1, "CMD13": 1}
    assert rows["Raw Write 1x512B"] == {"CMD24": 1, "CMD13": 1}


def test_a_one_block_multi_write_pays_the_end_busy_not_the_single_block_busy():
    dev = _driver("none", bus="spi", driver="sdspi", write_busy_single_us=5_000.0, write_busy_end_us=100.0)
    t0 = dev.clock.now_ns()
    dev.write_multi(10, bytes(512))
    multi = dev.clock.now_ns() - t0
    t0 = dev.clock.now_ns()
    dev.write(2000, bytes(512))
    single = dev.clock.now_ns() - t0
    assert multi < 1_000_000 < 5_000_000 < single


def test_littlefs_append_mode_creates_a_missing_file():
    from sdbench.fs.littlefs import LittleFsConfig, LittleFsFileSystem
    from sdbench.media.memory import MemoryDevice

    fs = LittleFsFileSystem(MemoryDevice.of_size(1 << 20), LittleFsConfig(block_count=0))
    fs.format()
    fs.mount()
    for chunk in (b"ab", b"cd"):
        with fs.open("/log.bin", "a") as f:
            f.write(chunk)
    with fs.open("/log.bin", "r") as f:
        assert f.read() == b"abcd"
    fs.unmount()
