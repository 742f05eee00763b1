"""Simulated SD targets: bus arithmetic, driver command sequences, card behaviour, determinism."""
from __future__ import annotations

import json

import pytest

from sdbench.cli import main
from sdbench.clock import VirtualClock
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.card import CardModel, CardProfile
from sdbench.media.sim.host import HostProfile
from sdbench.media.sim.sdhost import SdHostDriver
from sdbench.scenarios import load
from sdbench.protocols import run_scenario
from sdbench.testing import BlockDeviceSuite

MB = 1e6


def test_sd4_40mhz_payload_ceiling():
    bus = SdBus(BusConfig("sd4", 40_000_000))
    assert bus.read_block_clocks() == 1044  # start + 1024 + CRC16 + end + gap
    assert bus.payload_ceiling_bytes_s() / MB == pytest.approx(19.62, abs=0.01)
    assert bus.payload_ceiling_bytes_s(write=True) / MB == pytest.approx(19.49, abs=0.01)


def test_sd1_block_and_spi_ceilings():
    assert SdBus(BusConfig("sd1", 40_000_000)).read_block_clocks() == 4116
    spi = SdBus(BusConfig("spi", 25_000_000))
    assert spi.raw_byte_rate_bytes_s() / 1024 == pytest.approx(3051.8, abs=0.1)  # 25 MHz / 8 = 3052 KiB/s
    assert spi.raw_byte_rate_bytes_s() / 1048576 == pytest.approx(2.98, abs=0.01)
    assert spi.payload_ceiling_bytes_s() / MB == pytest.approx(3.10, abs=0.01)
    assert SdBus(BusConfig("spi", 20_000_000)).payload_ceiling_bytes_s() / MB == pytest.approx(2.48, abs=0.01)
    assert SdBus(BusConfig("sd4", 25_000_000)).payload_ceiling_bytes_s() / MB == pytest.approx(12.26, abs=0.01)


def test_command_framing():
    sd = SdBus(BusConfig("sd4", 40_000_000, ncr_clocks=8, block_gap_clocks=2))
    assert sd.command_clocks("R1") == 48 + 8 + 48 + 2
    assert sd.command_clocks("R2") == 48 + 8 + 136 + 2
    spi = SdBus(BusConfig("spi", 25_000_000, ncr_clocks=8))
    assert spi.command_clocks("R1") == (6 + 1 + 1) * 8
    assert spi.command_clocks("R7") == (6 + 1 + 5) * 8


def _driver(driver="sdmmc", bus="sd4", clock_hz=40_000_000, **card):
    clock = VirtualClock()
    host = HostProfile(driver=driver, transaction_cycles=2400, cpu_hz=240_000_000,
                       block_cycles=1000 if driver != "sdmmc" else 0, crc_cycles_per_byte=16 if driver == "sdspi" else 0)
    prof = CardProfile(capacity_bytes=64 << 20, **card)
    return SdHostDriver(host, SdBus(BusConfig(bus, clock_hz)), prof, clock, log_commands=True), clock


def _cmds(dev):
    return [(e.name, e.repeat) for e in dev.log]


def test_sdmmc_aligned_requests_are_one_command_each():
    dev, _ = _driver(write_busy_end_us=100.0, write_busy_single_us=100.0)
    dev.write(10, bytes(512 * 8), buf_addr=0x1000)
    assert [n for n, _ in _cmds(dev)] == ["CMD25", "CMD12", "CMD13"]
    assert _cmds(dev)[-1][1] > 1, "CMD13 is polled until the card leaves busy"
    dev.log.clear()
    dev.read(10, 8, buf_addr=0x1000)
    assert _cmds(dev) == [("CMD18", 1), ("CMD12", 1), ("CMD13", 1)]
    dev.log.clear()
    dev.read(10, 1, buf_addr=0x1000)
    assert _cmds(dev) == [("CMD17", 1), ("CMD13", 1)]


def test_sdmmc_unaligned_buffer_takes_the_per_sector_slow_path():
    dev, clock = _driver()
    t0 = clock.now_ns()
    dev.write(0, bytes(512 * 4), buf_addr=0x1002)
    names = [n for n, _ in _cmds(dev)]
    assert names == ["CMD24", "CMD13"] * 4
    slow = clock.now_ns() - t0
    dev.log.clear()
    t0 = clock.now_ns()
    dev.write(0, bytes(512 * 4), buf_addr=0x1000)
    assert clock.now_ns() - t0 < slow
    dev.log.clear()
    dev.read(0, 3, buf_addr=0x1001)
    assert [n for n, _ in _cmds(dev)] == ["CMD17", "CMD13"] * 3


def test_sdmmc_erase_waits_in_rtos_ticks():
    dev, clock = _driver(erase_busy_us=300.0)
    clock.advance_ns(1_000_000)  # 1 ms into a 10 ms tick
    t0 = clock.now_ns()
    dev.erase(100, 1)
    assert [n for n, _ in _cmds(dev)] == ["CMD32", "CMD33", "CMD38"]
    assert clock.now_ns() % 10_000_000 == 0, "the wait ends on a tick boundary"
    assert clock.now_ns() - t0 > 300_000
    assert clock.breakdown_ns().get("rtos", 0) > 0


def test_sdmmc_long_busy_yields_ticks_after_100ms():
    dev, clock = _driver(write_busy_single_us=250_000.0)
    dev.write(0, bytes(512), buf_addr=0)
    bd = clock.breakdown_ns()
    assert bd.get("rtos", 0) > 0, "polling beyond 100 ms yields to the RTOS"
    assert 250e6 <= clock.now_ns() < 275e6


def test_sdspi_sequence_per_block_with_status_after_write():
    dev, clock = _driver("sdspi", "spi", 20_000_000)
    dev.write(0, bytes(512 * 2))
    assert [n for n, _ in _cmds(dev)] == ["CMD25", "CMD13"]
    dev.log.clear()
    dev.read(0, 2)
    assert [n for n, _ in _cmds(dev)] == ["CMD18", "CMD12"]
    # software CRC and per-block transactions are host time
    assert clock.breakdown_ns()["host"] > 2 * 2 * 512 * 16 / 240e6 * 1e9


def test_p2spi_host_cost_scales_with_cpu_clock():
    times = {}
    for hz in (350_000_000, 250_000_000):
        clock = VirtualClock()
        host = HostProfile(driver="p2spi", cpu_hz=hz, transaction_cycles=4000, block_cycles=8000, dma_align_bytes=1)
        dev = SdHostDriver(host, SdBus(BusConfig("spi", 25_000_000)), CardProfile(capacity_bytes=64 << 20), clock)
        dev.read(0, 64)
        times[hz] = (clock.now_ns(), clock.breakdown_ns())
    assert times[250_000_000][0] > times[350_000_000][0]
    assert times[250_000_000][1]["bus"] == times[350_000_000][1]["bus"], "same SPI clock, same bus time"
    assert times[250_000_000][1]["host"] == pytest.approx(times[350_000_000][1]["host"] * 1.4, rel=1e-4)


def test_p2spi_checks_status_after_every_transfer():
    clock = VirtualClock()
    host = HostProfile(driver="p2spi", cpu_hz=350_000_000, dma_align_bytes=1)
    dev = SdHostDriver(host, SdBus(BusConfig("spi", 25_000_000)), CardProfile(capacity_bytes=64 << 20), clock,
                       log_commands=True)
    dev.read(0, 1)
    dev.write(0, bytes(512))
    dev.read(0, 4)
    assert [n for n, _ in _cmds(dev)] == ["CMD17", "CMD13", "CMD24", "CMD13", "CMD18", "CMD12", "CMD13"]


def test_p2_file_tests_move_one_sector_per_command():
    """The P2 driver's file handles go through a 512-byte buffer: CMD24/CMD17 per sector, never multi-block."""
    sc = load("p2-spi25-350mhz-pny-16gb", ["sd.log_commands=true", "p2.runs=1",
                                           "p2.metrics=['File Read', 'File Write']"])
    rows = {r.label: r for r in run_scenario(sc).rows}
    w, r = rows["File Write 32KB"].commands, rows["File Read 256KB"].commands
    assert "CMD25" not in w and w["CMD24"] >= 64
    assert "CMD18" not in r and r["CMD17"] >= 512
    assert w["CMD13"] >= w["CMD24"] and r["CMD13"] >= r["CMD17"]


def test_card_update_block_merges_copy_valid_pages():
    prof = CardProfile(page_bytes=16384, au_bytes=1 << 20, update_block_bytes=1 << 20, open_aus=1,
                       merge_base_ms=10.0, merge_copy_us_per_kib=1.0, write_busy_end_us=0.0, preconditioned=True)
    card = CardModel(prof)
    # 16 writes of 64 KiB to the same place fill the 1 MiB update block; the 17th merges
    costs = [card.write_done_busy_ns(0, 128, 512, True) for _ in range(17)]
    assert costs[:16] == [0.0] * 16
    # a used card: the other 60 pages of the AU hold data and are copied
    assert costs[16] == pytest.approx(10e6 + (64 - 4) * 16 * 1e3)
    # another AU with only one open slot closes (merges) the first
    assert card.write_done_busy_ns(4096, 1, 512, False) > 10e6


def test_discard_makes_merges_cheap():
    prof = CardProfile(page_bytes=16384, au_bytes=1 << 20, update_block_bytes=1 << 20, open_aus=1,
                       merge_base_ms=10.0, merge_copy_us_per_kib=1.0, write_busy_end_us=0.0)
    card = CardModel(prof)
    card.discard(0, 2048, 512)  # the whole AU: nothing valid any more
    costs = [card.write_done_busy_ns(0, 128, 512, True) for _ in range(17)]
    assert costs[16] == pytest.approx(10e6), "only the merge itself, nothing to copy"


def test_first_write_after_power_up():
    card = CardModel(CardProfile(first_write_ms=50.0, write_busy_single_us=100.0))
    assert card.write_done_busy_ns(0, 1, 512, False) == pytest.approx(50.1e6)
    assert card.write_done_busy_ns(0, 1, 512, False) == pytest.approx(0.1e6)


def test_card_small_writes():
    prof = CardProfile(page_bytes=16384, au_bytes=1 << 20, update_block_bytes=1 << 20, open_aus=2,
                       merge_base_ms=1.0, write_busy_single_us=0.0)
    card = CardModel(prof)
    for i in range(32 * 64):  # 1 MiB in 512-byte sequential writes fills the block exactly once
        card.write_done_busy_ns(i, 1, 512, False)
    assert card.merges == 0
    card.write_done_busy_ns(0, 1, 512, False)  # one more sector in this AU: the update block is full
    assert card.merges == 1
    # the same sector rewritten: sector-sized slots by default, whole pages when the card has no small-write buffer
    small = CardModel(prof)
    for _ in range(65):
        small.write_done_busy_ns(0, 1, 512, False)
    assert small.merges == 0
    paged = CardModel(CardProfile(**{**prof.__dict__, "small_write_unit_bytes": 16384}))
    for _ in range(65):
        paged.write_done_busy_ns(0, 1, 512, False)
    assert paged.merges == 1


class TestSimSdmmcConformance(BlockDeviceSuite):
    def make_device(self):
        return _driver()[0]


class TestSimSdspiConformance(BlockDeviceSuite):
    def make_device(self):
        return _driver("sdspi", "spi", 20_000_000)[0]


def _espidf_json(*extra):
    import io
    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", "espidf-esp32-sdmmc4-40mhz", "--runs", "3", "-q", "-f", "json",
                     "--set", "espidf.parts=['sd_raw','sd_fatfs']", *extra]) == 0
    return out.getvalue()


def test_same_scenario_and_seed_give_identical_output():
    assert _espidf_json() == _espidf_json()


def test_different_seed_changes_only_random_pauses():
    # with pauses disabled (the calibrated card has none), a new seed changes nothing but the data
    a = json.loads(_espidf_json("--seed", "1"))["runs"][0]["rows"]
    b = json.loads(_espidf_json("--seed", "2"))["runs"][0]["rows"]
    assert [r["samples_ms"] for r in a] == [r["samples_ms"] for r in b]
    on = ["--set", "sd.card_params.pause_probability=0.3", "--set", "sd.card_params.pause_median_ms=20"]
    c = json.loads(_espidf_json("--seed", "1", *on))["runs"][0]["rows"]
    d = json.loads(_espidf_json("--seed", "2", *on))["runs"][0]["rows"]
    assert [r["samples_ms"] for r in c] != [r["samples_ms"] for r in d]
    # reads never pause: read rows are identical across seeds
    assert [r["samples_ms"] for r in c if r["op"] == "read"] == [r["samples_ms"] for r in d if r["op"] == "read"]


def test_rows_explain_where_time_went():
    rec = run_scenario(load("espidf-esp32-sdmmc4-40mhz", ["espidf.runs=2", "espidf.parts=['sd_raw']"]))
    r = rec.row("SD raw write [64 kB label]")
    assert set(r.breakdown_ms) >= {"host", "bus", "card"}
    assert sum(r.breakdown_ms.values()) == pytest.approx(r.time_ms, rel=1e-6)
    assert r.commands["CMD25"] == 1 and r.commands["CMD12"] == 1 and r.commands["CMD13"] >= 1
    assert rec.clock == "virtual" and rec.source == "simulated"


def test_trace_command_lists_commands(capsys):
    assert main(["trace", "espidf-esp32-sdmmc4-40mhz", "-n", "5", "--row", "SD raw read [16 kB label]"]) == 0
    out = capsys.readouterr().out
    assert "| 0 |" in out and "CMD18" in out and "CMD12" in out


def test_trace_rejects_real_media(capsys):
    assert main(["trace", "espidf-memory"]) == 2
    assert "no simulated SD card" in capsys.readouterr().err


def test_trace_call_needs_a_row(capsys):
    """--call picks among a row's timed calls: without --row it was silently ignored."""
    assert main(["trace", "espidf-esp32-sdmmc4-40mhz", "--call", "2"]) == 2
    assert "--call picks one of a row's timed calls: it needs --row" in capsys.readouterr().err


def test_read_fast_path_equals_the_command_level_path():
    over = ["espidf.runs=3", "espidf.parts=['sd_raw','sd_fatfs','sd_littlefs']", "espidf.sd_modes=['normal']"]
    fast = run_scenario(load("espidf-esp32-sdmmc4-40mhz", over))
    slow = run_scenario(load("espidf-esp32-sdmmc4-40mhz", over + ["sd.log_commands=true"]))
    assert [r.to_dict() for r in fast.rows] == [r.to_dict() for r in slow.rows]


def test_default_scenario_is_the_simulated_esp32_sdmmc_target():
    from sdbench.scenarios import DEFAULT_SCENARIO

    assert DEFAULT_SCENARIO == "espidf-esp32-sdmmc4-40mhz"
    assert load(DEFAULT_SCENARIO).clock_kind() == "virtual"


def test_trace_reaches_the_card_below_a_cache(capsys):
    assert main(["trace", "espidf-esp32-sdmmc4-40mhz", "-n", "3", "--set", "sd.cache.blocks=8",
                 "--row", "SD raw read [16 kB label]"]) == 0
    assert "CMD18" in capsys.readouterr().out


@pytest.mark.parametrize("bus,driver,want", [("sd4", "sdmmc", 0xB368 << 16), ("sd4", "sdio", 0xB368 << 16),
                                             ("spi", "sdspi", 0)])
def test_commands_that_address_the_card_carry_its_rca(bus, driver, want):
    from sdbench.clock import VirtualClock
    from sdbench.media.sim.bus import BusConfig, SdBus
    from sdbench.media.sim.card import CardProfile
    from sdbench.media.sim.host import HostProfile
    from sdbench.media.sim.sdhost import SdHostDriver

    host = HostProfile(driver=driver, transaction_cycles=2400, cpu_hz=240_000_000)
    dev = SdHostDriver(host, SdBus(BusConfig(bus, 20_000_000 if bus == "spi" else 40_000_000)),
                       CardProfile(capacity_bytes=64 << 20, rca=0xB368), VirtualClock(), log_commands=True)
    dev.initialise()
    dev.write(8, bytes(512))
    args = {e.name: e.arg for e in dev.log}
    assert args["CMD13"] == want                 # SEND_STATUS: RCA << 16 in SD mode, stuff bits in SPI
    if bus != "spi":
        assert args["CMD7"] == args["CMD9"] == want and args["CMD3"] == 0


def test_trace_lists_the_steady_state_call_unless_told(capsys):
    args = ["trace", "espidf-esp32-sdmmc4-40mhz", "--row", "SD raw write [16 kB label]", "-n", "10"]
    assert main(args) == 0
    last = capsys.readouterr().out
    assert main([*args, "--call", "1"]) == 0
    first = capsys.readouterr().out
    assert main([*args, "--call", "0"]) == 0
    every = capsys.readouterr().out

    def busy_polls(out):
        return [int(line.split("×")[1].split()[0]) for line in out.splitlines() if "CMD13 ×" in line]
    # the first write after power-up loads the card's tables: far more busy polling than the steady state
    assert busy_polls(first)[0] > 10 * busy_polls(last)[0]
    assert len(busy_polls(every)) == 3
