"""Host profiles: every shipped host loads and builds; the driver kinds sdfat-spi and sdio issue the commands their
drivers do (command log of SdHostDriver); each host added with them refuses a bus clock above its limit, naming
it; `sdbench list hosts` and docs/hosts.md show them; their sdfat-bench scenarios run."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sdbench import profiles
from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.card import CardProfile
from sdbench.media.sim.esp_flash import Esp32FlashDriver, load_esp_flash_host
from sdbench.media.sim.host import HostProfile
from sdbench.media.sim.nor import FlashChipProfile, NorFlashChip
from sdbench.calibrate import groups as calibrate_groups
from sdbench.media.sim.busclock import ABOVE_RATING, resolve
from sdbench.media.sim.sdhost import SdHostDriver, check_bus_clock
from sdbench.protocols import run_scenario
from sdbench.stack.sd import load_card, load_host, sd_driver

HOSTS = profiles.shipped("hosts")
DOCS = Path(__file__).resolve().parents[1] / "docs" / "hosts.md"

#: the hosts added with their drivers: kind, bus, the scenario's clock, the host's clock limit, High Speed or not
NEW_HOSTS = {
    "arduino-esp32-sdfat-spi": ("sdfat-spi", "spi", 20_000_000, 80_000_000, False),
    "esp32-sdspi-160mhz": ("sdspi", "spi", 20_000_000, 80_000_000, False),
    "esp32c3-sdspi": ("sdspi", "spi", 20_000_000, 80_000_000, False),
    "esp32c6-sdspi": ("sdspi", "spi", 20_000_000, 80_000_000, False),
    "esp32p4-sdmmc": ("sdmmc", "sd4", 40_000_000, 50_000_000, True),
    "rp2040-sdfat-spi": ("sdfat-spi", "spi", 24_000_000, 24_000_000, False),
    "rp2040-pio-sdio": ("sdio", "sd4", 20_833_333, 31_250_000, False),
    "stm32f4-sdfat-spi": ("sdfat-spi", "spi", 21_000_000, 42_000_000, False),
    "stm32f4-sdio": ("sdio", "sd4", 24_000_000, 24_000_000, False),
    "teensy41-sdio": ("sdio", "sd4", 49_500_000, 49_500_000, True),
    "due-sdfat-spi": ("sdfat-spi", "spi", 21_000_000, 42_000_000, False),
}
BUS_OF = {"sdmmc": "sd4", "sdio": "sd4", "sdspi": "spi", "p2spi": "spi", "sdfat-spi": "spi", "generic": "sd4",
          "linux-mmc": "sd4"}
CARD = CardProfile(capacity_bytes=64 << 20, write_busy_single_us=400.0, write_busy_block_us=10.0,
                   write_busy_end_us=1200.0, read_access_us=100.0)


def _sd_host(name: str) -> HostProfile | None:
    try:
        return load_host(name)
    except ConfigError:  # the hosts folder also holds ESP32 flash hosts
        return None


# ---- every shipped host ---------------------------------------------------------------------------------------

def test_the_new_hosts_are_shipped():
    assert set(NEW_HOSTS) <= set(HOSTS)


@pytest.mark.parametrize("name", HOSTS)
def test_every_shipped_host_loads_and_builds(name):
    host = _sd_host(name)
    clock = VirtualClock()
    if host is None:
        flash = load_esp_flash_host(name)
        chip = NorFlashChip(FlashChipProfile(name="chip-1m", capacity_bytes=1 << 20), clock)
        dev = Esp32FlashDriver(chip, flash, offset_bytes=0x10000, size_bytes=0x10000)
        g = dev.geometry
        n = g.erase_size // g.sector_size  # one erase block, in the driver's sectors
        dev.erase(0, n)
        dev.write(0, bytes(range(256)) * (g.erase_size // 256))
        assert dev.read(0, n) == bytes(range(256)) * (g.erase_size // 256)
        assert clock.now_ns() > 0
        return
    assert host.name == name
    limits = [20_000_000, host.max_bus_clock_hz or 20_000_000,
              host.cpu_hz // host.min_clock_divider if host.min_clock_divider else 20_000_000]
    bus = SdBus(BusConfig(BUS_OF[host.driver], min(limits)))
    dev = sd_driver(host, bus, load_card("generic-sdhc", {"capacity_bytes": 64 << 20}), clock)
    dev.initialise()
    data = bytes(range(256)) * 16
    dev.write(2048, data)
    dev.write(2056, data)
    dev.sync()
    assert dev.read(2048, 16) == data * 2
    assert 0 < clock.now_ns() < 10**12


#: hosts a fit group calibrates from published rows (sdbench/data/fits): fitted, the others uncalibrated
FITTED = {g.host for g in calibrate_groups().values()}


@pytest.mark.parametrize("name", sorted(NEW_HOSTS))
def test_new_hosts_are_uncalibrated_and_say_where_their_figures_come_from(name):
    kind, _, _, _, hs = NEW_HOSTS[name]
    host = load_host(name)
    assert (host.driver, host.high_speed) == (kind, hs)
    text = (profiles.DATA / "hosts" / f"{name}.toml").read_text()
    if name in FITTED:  # a fit group's host: the header names the group, the fields it fitted keep their source
        assert profiles.FITTED_MARK in text.splitlines()[0] and host.fit_rel_sd
        assert set(host.unfitted) == set(host.fit_rel_sd), "each fitted field keeps its value from the source"
    else:
        assert not host.fit_rel_sd
        assert text.startswith("# Uncalibrated"), "the header says the profile is not fitted"
        assert "fitted by `sdbench calibrate" not in text
    assert "# bus clock limits:" in text and "estimate" in text
    assert host.trim_command == "none"


# ---- the clock limits ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(NEW_HOSTS))
def test_new_host_refuses_a_clock_above_its_limit_naming_it(name):
    kind, bus_kind, clock_hz, limit, hs = NEW_HOSTS[name]
    host = load_host(name)
    card = load_card("generic-sdhc")
    check_bus_clock(host, SdBus(BusConfig(bus_kind, clock_hz)), card)  # the scenario's clock is taken
    with pytest.raises(ConfigError) as e:
        check_bus_clock(host, SdBus(BusConfig(bus_kind, limit + 1)), card)
    assert f"above host {name}'s limit {limit} Hz" in str(e.value), str(e.value)
    card_limit = card.max_clock_hz(hs)
    check_bus_clock(host, SdBus(BusConfig(bus_kind, limit)), card)  # up to the host's limit
    if limit > card_limit:  # above the card's Default Speed rating: taken, with a warning (no High Speed switch)
        assert not hs
        _, meta, warnings = resolve(host, BusConfig(bus_kind, limit), card)
        assert meta["above_card_rating"] and any(ABOVE_RATING in w for w in warnings), warnings


def test_clock_tied_to_the_cpu_names_the_divider():
    host = load_host("rp2040-pio-sdio", {"cpu_hz": 200_000_000})
    with pytest.raises(ConfigError, match=r"limit 50000000 Hz \(cpu_hz 200000000 Hz / min_clock_divider 4\)"):
        check_bus_clock(host, SdBus(BusConfig("sd4", 50_000_001)), load_card("generic-sdhc",
                                                                            {"high_speed_max_clock_hz": 100_000_000,
                                                                             "default_speed_max_clock_hz": 60_000_000}))


@pytest.mark.parametrize("driver,bus", [("sdfat-spi", "sd4"), ("sdfat-spi", "sd1"), ("sdio", "spi")])
def test_driver_kind_refuses_the_other_bus(driver, bus):
    with pytest.raises(ConfigError, match=driver):
        SdHostDriver(HostProfile(driver=driver), SdBus(BusConfig(bus, 20_000_000)), CARD, VirtualClock())


# ---- sdfat-spi: SdFat's SdSpiCard ------------------------------------------------------------------------------

def _driver(driver: str, bus: str = "spi", clock_hz: int = 20_000_000, **host):
    clock = VirtualClock()
    h = HostProfile(driver=driver, cpu_hz=200_000_000, transaction_cycles=300, dma_align_bytes=host.pop("align", 1),
                    **host)
    return SdHostDriver(h, SdBus(BusConfig(bus, clock_hz)), CARD, clock, log_commands=True), clock


def _log(dev) -> list[str]:
    names = [e.name if e.repeat == 1 else f"{e.name}x{e.repeat}" for e in dev.log]
    dev.log.clear()
    return names


def test_sdfat_dedicated_spi_keeps_one_cmd25_open_over_sequential_writes():
    dev, clock = _driver("sdfat-spi", keep_open="all", spi_byte_cycles=80)
    for i in range(4):
        dev.write(100 + i, bytes(512))
    assert _log(dev) == ["CMD25", "DATA", "DATA", "DATA"]
    assert clock.commands_snapshot() == {"CMD25": 1}, "blocks of an open transfer are not commands"
    dev.write(200, bytes(1024))  # elsewhere: the open transfer ends first
    assert _log(dev) == ["STOP_TRAN", "CMD25"]
    dev.sync()
    assert _log(dev) == ["STOP_TRAN"]
    dev.sync()
    assert _log(dev) == [], "nothing open, nothing to stop"


def test_sdfat_flush_busy_is_polled_by_the_next_command_not_at_the_stop():
    dev, clock = _driver("sdfat-spi", keep_open="all")
    dev.write(100, bytes(512))
    t0 = clock.now_ns()
    dev.sync()
    assert clock.now_ns() - t0 < 50_000, "writeStop returns after the stop-tran token"
    _log(dev)
    dev.read(100, 1)
    cmd18 = dev.log[0]
    assert cmd18.name == "CMD18" and cmd18.dur_ns >= CARD.write_busy_end_us * 1e3, "waitReady polls the flush"


def test_sdfat_dedicated_spi_reads_stream_and_stop_with_cmd12():
    dev, _ = _driver("sdfat-spi", keep_open="all")
    dev.read(10, 2)
    dev.read(12, 1)
    dev.read(13, 4)
    assert _log(dev) == ["CMD18", "DATA", "DATA"]
    dev.read(50, 1)
    assert _log(dev) == ["CMD12", "CMD18"]
    dev.write(51, bytes(512))
    assert _log(dev) == ["CMD12", "CMD25"]
    dev.read(51, 1)
    assert _log(dev) == ["STOP_TRAN", "CMD18"], "no CMD13 after writes"


def test_sdfat_shared_spi_single_and_multi_block_commands():
    dev, _ = _driver("sdfat-spi", keep_open="none")
    dev.write(5, bytes(512))
    assert _log(dev) == ["CMD24", "CMD13"], "CHECK_FLASH_PROGRAMMING: busy, then SEND_STATUS"
    dev.write(6, bytes(1024))
    dev.write(8, bytes(1024))
    assert _log(dev) == ["CMD25", "STOP_TRAN", "CMD25", "STOP_TRAN"]
    dev.read(5, 1)
    dev.read(6, 2)
    assert _log(dev) == ["CMD17", "CMD18", "CMD12"]


def test_sdfat_erase_polls_busy_without_cmd13():
    dev, clock = _driver("sdfat-spi", keep_open="all")
    dev.write(0, bytes(512))
    _log(dev)
    t0 = clock.now_ns()
    dev.erase(0, 64)
    assert _log(dev) == ["STOP_TRAN", "CMD32", "CMD33", "CMD38"]
    assert clock.now_ns() - t0 >= CARD.erase_busy_us * 1e3


def test_sdfat_single_byte_calls_cost_cpu():
    """Command bytes, poll bytes, the token and the CRC bytes are single-byte SPI calls: spi_byte_cycles each."""
    times = []
    for cycles in (0, 1000):
        dev, clock = _driver("sdfat-spi", keep_open="all", spi_byte_cycles=cycles)
        dev.read(0, 1)
        t0 = clock.now_ns()
        dev.read(1, 1)  # in the open transfer: poll bytes, token, 512 bytes, 2 CRC bytes
        times.append(clock.now_ns() - t0)
    assert times[1] - times[0] >= 3 * 1000 * 5, times  # at least 3 calls of 1000 cycles at 200 MHz (5 µs each)


def test_sdfat_byte_loop_costs_every_data_byte():
    dev, clock = _driver("sdfat-spi", keep_open="all", byte_cycles=100)
    dev.read(0, 1)
    t0 = clock.now_ns()
    dev.read(1, 4)
    bus = SdBus(BusConfig("spi", 20_000_000))
    assert clock.now_ns() - t0 >= 4 * (bus.read_block_ns() + 512 * 100 * 5)


# ---- sdio: an MCU's SD-mode host -------------------------------------------------------------------------------

def _sdio(**host):
    return _driver("sdio", "sd4", 24_000_000, **host)


def test_sdio_per_request_with_cmd13_polling_after_every_transfer():
    dev, clock = _sdio(keep_open="none", busy_wait="cmd13")
    dev.write(5, bytes(512))
    names = _log(dev)
    assert names[0] == "CMD24" and names[1].startswith("CMD13x"), names
    dev.write(6, bytes(1024))
    names = _log(dev)
    assert names[:2] == ["CMD25", "CMD12"] and names[2].startswith("CMD13x") and len(names) == 3, names
    dev.read(5, 1)
    dev.read(5, 2)
    assert _log(dev) == ["CMD17", "CMD13", "CMD18", "CMD12", "CMD13"]
    assert "rtos" not in {k for k, v in clock.breakdown_ns().items() if v}, "no RTOS ticks"


def test_sdio_multi_block_writes_continue_an_open_cmd25():
    dev, clock = _sdio(keep_open="writes", busy_wait="dat0", align=4)
    dev.write(5, bytes(512))
    dev.write(6, bytes(1024))
    dev.write(8, bytes(1024))
    assert _log(dev) == ["CMD24", "CMD25", "DATA"]
    dev.read(9, 2)
    dev.read(11, 2)
    assert _log(dev) == ["CMD12", "CMD18", "CMD12", "CMD18", "CMD12"], "reads are never left open"
    dev.write(20, bytes(1024))
    assert _log(dev) == ["CMD25"]
    t0 = clock.now_ns()
    dev.sync()
    assert _log(dev) == ["CMD12"] and clock.now_ns() - t0 >= CARD.write_busy_end_us * 1e3, "stop waits for DAT0"
    dev.write(30, bytes(1024), buf_addr=0x2002)  # not DMA-aligned: a sector at a time through the driver's buffer
    dev.read(30, 2, buf_addr=0x2002)
    assert _log(dev) == ["CMD24", "CMD24", "CMD17", "CMD17"]


def test_sdio_fifo_streams_both_ways_with_cmd13_before_each_start():
    dev, clock = _sdio(keep_open="all", busy_wait="dat0", status_before_transfer=True)
    dev.write(5, bytes(512))
    dev.write(6, bytes(512))
    dev.write(7, bytes(1024))
    assert _log(dev) == ["CMD13", "CMD25", "DATA", "DATA"]
    dev.read(5, 1)
    dev.read(6, 3)
    assert _log(dev) == ["CMD12", "CMD13", "CMD18", "DATA"]
    dev.sync()
    assert _log(dev) == ["CMD12"]
    assert clock.commands_snapshot() == {"CMD13": 2, "CMD25": 1, "CMD12": 2, "CMD18": 1}


def test_sdio_erase_ends_the_open_transfer_and_waits_for_busy():
    dev, clock = _sdio(keep_open="all", busy_wait="cmd13")
    dev.write(0, bytes(512))
    _log(dev)
    dev.erase(0, 64)
    names = _log(dev)
    assert names[0] == "CMD12" and names[1].startswith("CMD13") and names[2:5] == ["CMD32", "CMD33", "CMD38"]
    assert names[5].startswith("CMD13x"), names


def test_streaming_kinds_read_back_what_they_wrote():
    for kind, bus, extra in (("sdfat-spi", "spi", {"keep_open": "all"}), ("sdio", "sd4", {"keep_open": "all"}),
                             ("sdio", "sd1", {"keep_open": "writes", "busy_wait": "dat0"})):
        dev, _ = _driver(kind, bus, **extra)
        blocks = [bytes([i]) * 512 for i in range(8)]
        for i, b in enumerate(blocks):
            dev.write(i, b)
        assert dev.read(0, 8) == b"".join(blocks)
        assert dev.read(3, 1) == blocks[3]


# ---- `sdbench list hosts`, docs/hosts.md, scenarios ---------------------------------------------------------------

def _rows(out: str) -> tuple[list[str], dict[str, list[str]]]:
    lines = out.strip().splitlines()
    split = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
    assert all(len(r) == len(split[0]) for r in split[2:])
    return split[0], {r[0]: r for r in split[2:]}


def test_list_hosts_shows_every_host_with_its_limits_and_calibration(capsys):
    assert main(["list", "hosts"]) == 0
    header, rows = _rows(capsys.readouterr().out)
    assert header[:6] == ["host", "driver", "CPU", "bus clock limit", "card mode", "parameters"]
    assert sorted(rows) == HOSTS
    for name, (kind, _, _, limit, hs) in NEW_HOSTS.items():
        row = rows[name]
        want = "fitted" if name in FITTED else "uncalibrated"
        assert row[1] == kind and row[3] == f"{limit / 1e6:g} MHz" and row[5] == want, row
        assert row[4] == ("High Speed (CMD6)" if hs else "Default Speed"), row
    assert rows["esp32s3-sdspi"][5] == "fitted"


def test_docs_list_every_shipped_host():
    text = DOCS.read_text()
    table = [line for line in text.splitlines() if re.match(r"\| `[a-z0-9-]+` \|", line)]
    listed = [re.match(r"\| `([a-z0-9-]+)` \|", line).group(1) for line in table]
    assert sorted(h for h in listed if h in HOSTS) == HOSTS
    for name, (kind, *_rest) in NEW_HOSTS.items():
        line = next(line for line in table if line.startswith(f"| `{name}` |"))
        assert f"`{kind}`" in line, line


@pytest.mark.parametrize("name", sorted(NEW_HOSTS))
def test_sdfat_bench_scenario_of_each_new_host_runs(name):
    kind, bus_kind, clock_hz, _, _ = NEW_HOSTS[name]
    sc = scen.load(f"sdfat-bench-{name}", ["sdfat_bench.file_bytes=16384"])
    assert sc.protocol == "sdfat-bench" and sc.sd["host"] == name and sc.sd["card"] == "generic-sdhc"
    rec = run_scenario(sc)
    assert [r.label for r in rec.rows] == ["sdfat write", "sdfat read"]
    sd = rec.stack["sd"]
    assert (sd["host"]["name"], sd["host"]["driver"]) == (name, kind)
    assert (sd["bus"]["kind"], sd["bus"]["clock_hz"]) == (bus_kind, clock_hz)


def test_hosts_that_carry_the_esp32s3_sdspi_cycle_counts_have_the_fitted_ones():
    # an estimate carried over from a fitted profile follows it when that profile is refitted
    from sdbench.stack.sd import load_host

    source = load_host("esp32s3-sdspi")
    carriers = [n for n in profiles.shipped("hosts")
                if "cycle counts of the esp32s3-sdspi profile" in (profiles.DATA / "hosts" / f"{n}.toml").read_text()]
    assert len(carriers) >= 3
    for n in carriers:
        h = load_host(n)
        for f in ("transaction_cycles", "block_cycles", "crc_cycles_per_byte"):
            assert getattr(h, f) == getattr(source, f), (n, f)
