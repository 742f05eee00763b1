"""SdFat-class hosts: the bus clock a host's divider makes, a clock above the card's rating, and how a block's data
moves (byte loop, chunks, a CPU-fed FIFO, DMA), at the command level."""
from __future__ import annotations

import pytest

from sdbench import scenarios as scen
from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.busclock import ABOVE_RATING, divided_clock, resolve
from sdbench.media.sim.card import CardProfile
from sdbench.media.sim.host import HostProfile
from sdbench.media.sim.sdhost import SdHostDriver
from sdbench.protocols import run_scenario
from sdbench.stack.sd import load_card, load_host

CARD = CardProfile(capacity_bytes=64 << 20, read_access_us=100.0, read_block_gap_us=5.0, write_busy_block_us=20.0,
                   write_busy_end_us=500.0)


# ---- the clock a divider makes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("host,asked,made", [
    # arduino-esp32 spiFrequencyToClockDiv: APB 80 MHz / any whole divisor, APB itself when asked for it
    ("arduino-esp32-sdfat-spi", 50_000_000, 40_000_000), ("arduino-esp32-sdfat-spi", 30_000_000, 26_666_666),
    ("arduino-esp32-sdfat-spi", 25_000_000, 20_000_000), ("arduino-esp32-sdfat-spi", 80_000_000, 80_000_000),
    # ArduinoCore-sam SPISettings: 84 MHz / SCBR
    ("due-sdfat-spi", 42_000_000, 42_000_000), ("due-sdfat-spi", 30_000_000, 28_000_000),
    ("due-sdfat-spi", 25_000_000, 21_000_000),
    # STM32 SPI_CR1 BR: APB2 84 MHz / 2, 4, 8 ...
    ("stm32f4-sdfat-spi", 42_000_000, 42_000_000), ("stm32f4-sdfat-spi", 30_000_000, 21_000_000),
    ("stm32f4-sdfat-spi", 10_000_000, 5_250_000),
    # pico-sdk spi_set_baudrate: clk_peri 48 MHz / an even prescale times a post-divider
    ("rp2040-sdfat-spi", 24_000_000, 24_000_000), ("rp2040-sdfat-spi", 20_000_000, 12_000_000),
    # Teensy 4 LPSPI: 240 MHz / (SCKDIV + 2)
    ("teensy41-sdfat-spi", 50_000_000, 48_000_000),
])
def test_the_host_divider_makes_the_fastest_clock_not_above_the_request(host, asked, made):
    h = load_host(host)
    got, divisor = divided_clock(h, asked)
    assert got == made and got <= asked
    assert got == h.bus_clock_source_hz // divisor


def test_a_host_without_a_divider_runs_at_the_clock_asked_for():
    assert divided_clock(load_host("teensy41-sdio"), 49_500_000) == (49_500_000, 0)


def test_a_run_at_a_divided_clock_says_so_and_uses_it():
    rec = run_scenario(scen.load("sdfat-bench-arduino-esp32-sdfat-spi-30mhz", ["sdfat_bench.file_bytes=16384"]))
    sd = rec.stack["sd"]
    assert sd["bus"]["clock_hz"] == 26_666_666
    assert sd["bus_clock"] == {"requested_hz": 30_000_000, "clock_hz": 26_666_666, "source_hz": 80_000_000,
                               "divisor": 3, "card_rated_hz": 25_000_000, "above_card_rating": True}
    assert any("30000000 Hz asked for" in w and "26666666 Hz (80 MHz / 3)" in w for w in rec.warnings)
    assert any(ABOVE_RATING in w for w in rec.warnings)


def test_the_due_at_42_mhz_runs_above_the_card_rating_with_a_warning_not_a_refusal():
    rec = run_scenario(scen.load("sdfat-bench-due-sdfat-spi-42mhz", ["sdfat_bench.file_bytes=16384"]))
    assert rec.stack["sd"]["bus"]["clock_hz"] == 42_000_000 and rec.stack["sd"]["bus_clock"]["above_card_rating"]
    assert [w for w in rec.warnings if ABOVE_RATING in w]
    assert not [w for w in rec.warnings if "asked for" in w], "84 MHz / 2 is the clock asked for"


def test_above_the_host_limit_stays_refused():
    with pytest.raises(ConfigError, match="above host due-sdfat-spi's limit 42000000 Hz"):
        scen.load("sdfat-bench-due-sdfat-spi-42mhz", ["sd.bus.clock_hz=50000000"]).build()


def test_a_host_that_switches_to_high_speed_is_held_to_the_card_limit():
    host = load_host("teensy41-sdio")
    card = load_card("generic-sdhc", {"high_speed_max_clock_hz": 40_000_000})
    with pytest.raises(ConfigError, match="above card generic-sdhc's limit 40000000 Hz in SD mode"):
        resolve(host, BusConfig("sd4", 49_500_000), card)


def test_within_the_rating_no_warning():
    bus, meta, warnings = resolve(load_host("rp2040-sdfat-spi"), BusConfig("spi", 24_000_000), load_card("generic-sdhc"))
    assert bus.clock_hz == 24_000_000 and not meta["above_card_rating"] and warnings == []


# ---- the data phase of sdfat-spi -------------------------------------------------------------------------------

def _block_ns(**host) -> float:
    """The time of one block read inside an open transfer (the card's gap included)."""
    h = HostProfile(driver="sdfat-spi", cpu_hz=100_000_000, keep_open="all", dma_align_bytes=1, **host)
    clock = VirtualClock()
    dev = SdHostDriver(h, SdBus(BusConfig("spi", 20_000_000)), CARD, clock)
    dev.read(0, 1)
    t0 = clock.now_ns()
    dev.read(1, 1)
    return clock.now_ns() - t0


def test_sdfat_spi_data_phase_mechanisms():
    base = _block_ns()
    byte = 50.0  # ns of one clock at 20 MHz
    # a frame gap: idle clocks between the 512 bytes of a block
    assert _block_ns(spi_frame_gap_clocks=1.5) - base == pytest.approx(512 * 1.5 * byte)
    # a byte loop: the CPU's time per byte after each byte's clocks (10 ns a cycle)
    assert _block_ns(byte_cycles=40) - base == pytest.approx(512 * 400)
    # chunks: 64-byte chunks with 300 cycles of set-up each, the bus idle meanwhile
    assert _block_ns(spi_chunk_bytes=64, spi_chunk_cycles=300) - base == pytest.approx(8 * 3000)
    # a CPU-fed FIFO: only the part of the CPU's loop beyond the bus time shows
    assert _block_ns(fifo_cycles_per_byte=30) == pytest.approx(base)          # 300 ns a byte < 400 ns on the bus
    assert _block_ns(fifo_cycles_per_byte=60) - base == pytest.approx(512 * (600 - 400))
    # DMA: the block's set-up only
    assert _block_ns(block_cycles=500) - base == pytest.approx(5000)


def test_sdfat_spi_polling_pays_the_timeout_check_per_pass():
    slow = _block_ns(poll_cycles=1000)
    fast = _block_ns()
    assert slow > fast, "the token wait polls with a millis() per pass"


def test_the_card_works_on_the_next_block_while_the_host_is_away():
    """A read gap or a write busy runs from the end of the last block: a request continuing the open transfer after
    host time only waits for what is left of it."""
    h = HostProfile(driver="sdfat-spi", cpu_hz=100_000_000, keep_open="all", dma_align_bytes=1)
    for op, key in (("read", "sd.card.read_block_gap_us"), ("write", "sd.card.write_busy_block_us")):
        times = []
        for away_ns in (0, 100_000):
            clock = VirtualClock()
            dev = SdHostDriver(h, SdBus(BusConfig("spi", 20_000_000)), CARD, clock)
            (dev.read(0, 1) if op == "read" else dev.write(0, bytes(512)))
            clock.advance_ns(away_ns, "host")
            m = clock.mark()
            (dev.read(1, 1) if op == "read" else dev.write(1, bytes(512)))
            times.append(clock.delta_since(m))
        waited = [dict(t.params).get(key, 0.0) for t in times]
        assert waited[0] > 0 and waited[1] == 0, (op, waited)
        assert times[0].total_ns - times[1].total_ns >= waited[0] - 400, (op, times)  # waitReady reads one byte


# ---- the data phase of sdio ------------------------------------------------------------------------------------

def _sdio_dev(**host):
    host = {"keep_open": "all", **host}
    h = HostProfile(driver="sdio", cpu_hz=100_000_000, busy_wait="dat0", dma_align_bytes=1, **host)
    clock = VirtualClock()
    return SdHostDriver(h, SdBus(BusConfig("sd4", 25_000_000)), CARD, clock, log_commands=True), clock


def test_sdio_reads_at_a_slower_read_clock_and_a_fed_fifo_holds_the_bus_back():
    def read_ns(**host) -> float:
        dev, clock = _sdio_dev(**host)
        dev.read(0, 1)
        t0 = clock.now_ns()
        dev.read(1, 8)
        return clock.now_ns() - t0
    bus = SdBus(BusConfig("sd4", 25_000_000))
    base = read_ns()
    assert read_ns(read_clock_ratio=0.8) - base == pytest.approx(8 * bus.read_block_ns() * 0.25)
    # 512 bytes at 10 cycles: 51.2 µs of CPU against a block's ~42 µs on the bus
    assert read_ns(fifo_cycles_per_byte=10) - base == pytest.approx(8 * (51_200 - bus.read_block_ns()))


def test_sdio_auto_stop_costs_no_cpu_command():
    times = []
    for auto in (False, True):
        dev, clock = _sdio_dev(keep_open="none", transaction_cycles=5000, auto_stop=auto)
        t0 = clock.now_ns()
        dev.read(0, 4)
        times.append(clock.now_ns() - t0)
        assert [e.name for e in dev.log] == ["CMD18", "CMD12"]
    assert times[0] - times[1] == pytest.approx(50_000)
