"""UHS-I bus modes (DDR50 framing, clock limits per mode, the 1.8 V switch and tuning in the initialisation) and
the Linux MMC host model (requests split at max_sectors, CMD23, CMD13 after writes, command queueing), checked
at the command level; the ESP32-P4 and Raspberry Pi scenarios run and their traces show CMD11 and CMD19."""
from __future__ import annotations

import pytest

from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.card import CardProfile
from sdbench.media.sim.host import HostProfile
from sdbench.media.sim.linux_mmc import LinuxMmcDriver
from sdbench.media.sim.sdhost import SdHostDriver, check_bus_clock
from sdbench.options import from_mapping
from sdbench.protocols import run_scenario
from sdbench.stack.sd import load_card, load_host, sd_driver

UHS = "sdr12 sdr25 sdr50 ddr50"
CARD = CardProfile(capacity_bytes=1 << 30, uhs_modes=UHS, read_access_us=100.0, read_block_gap_us=1.0,
                   write_busy_block_us=2.0, write_busy_end_us=500.0, write_busy_single_us=300.0)


def _linux(card: CardProfile = CARD, mode: str = "ddr50", clock_hz: int = 50_000_000, **host):
    h = HostProfile(name="linux", driver="linux-mmc", cpu_hz=1_000_000_000, call_cycles=host.pop("call", 50_000),
                    transaction_cycles=10_000, uhs_max_clock_hz={"sdr25": 50_000_000, "ddr50": 50_000_000,
                                                                 "sdr104": 200_000_000},
                    voltage_switch_us=17_000.0, tuning_modes=("sdr104", "ddr50"), tuning_commands=40,
                    tuning_gap_us=1000.0, **host)
    clock = VirtualClock()
    return sd_driver(h, SdBus(BusConfig("sd4", clock_hz, mode=mode)), card, clock, log_commands=True), clock


def _names(dev) -> list[str]:
    out = [e.name if e.repeat == 1 else f"{e.name}x{e.repeat}" for e in dev.log]
    dev.log.clear()
    return out


# ---- the bus ---------------------------------------------------------------------------------------------------

def test_ddr50_carries_a_block_in_half_the_data_clocks_with_two_crc16_per_line():
    sdr = SdBus(BusConfig("sd4", 50_000_000, mode="sdr25"))
    ddr = SdBus(BusConfig("sd4", 50_000_000, mode="ddr50"))
    # start bit, 1024 data clocks (512 in DDR), CRC16 (two interleaved in DDR: 16 clocks), end bit, 2-clock gap
    assert sdr.read_block_clocks() == 1 + 1024 + 16 + 1 + 2
    assert ddr.read_block_clocks() == 1 + 512 + 16 + 1 + 2
    assert ddr.write_block_clocks() - ddr.read_block_clocks() == sdr.write_block_clocks() - sdr.read_block_clocks()
    assert ddr.command_clocks() == sdr.command_clocks(), "the CMD line stays single-edge"
    assert 48e6 < ddr.payload_ceiling_bytes_s() < 48.2e6  # 512 B per 532 clocks at 50 MHz
    assert ddr.raw_byte_rate_bytes_s() == 2 * sdr.raw_byte_rate_bytes_s()


def test_auto_mode_prices_blocks_as_before():
    assert SdBus(BusConfig("sd4", 40_000_000)).read_block_clocks() == 1044
    assert not SdBus(BusConfig("sd4", 40_000_000)).uhs


# ---- the clock limits per mode -----------------------------------------------------------------------------------

def test_p4_takes_sdr50_at_100_mhz_and_refuses_more_or_what_it_lacks():
    host = load_host("esp32p4-sdmmc")
    card = load_card("sandisk-extreme-64gb")
    check_bus_clock(host, SdBus(BusConfig("sd4", 100_000_000, mode="sdr50")), card)
    check_bus_clock(host, SdBus(BusConfig("sd4", 50_000_000, mode="ddr50")), card)
    with pytest.raises(ConfigError, match=r"above host esp32p4-sdmmc's limit 100000000 Hz in SDR50"):
        check_bus_clock(host, SdBus(BusConfig("sd4", 100_000_001, mode="sdr50")), card)
    with pytest.raises(ConfigError, match=r"does not drive SDR104 \(its UHS-I modes: sdr50, ddr50"):
        check_bus_clock(host, SdBus(BusConfig("sd4", 100_000_000, mode="sdr104")), card)
    with pytest.raises(ConfigError, match="above host esp32p4-sdmmc's limit 50000000 Hz"):
        check_bus_clock(host, SdBus(BusConfig("sd4", 100_000_000)), card)  # 3.3 V High Speed stops at 50 MHz
    with pytest.raises(ConfigError, match="4-bit SD bus"):
        check_bus_clock(host, SdBus(BusConfig("sd1", 50_000_000, mode="sdr50")), card)


def test_a_card_without_the_mode_is_refused_naming_its_modes():
    host = load_host("esp32p4-sdmmc")
    with pytest.raises(ConfigError, match=r"card generic-sdhc does not support SDR50 \(its UHS-I modes: none"):
        check_bus_clock(host, SdBus(BusConfig("sd4", 100_000_000, mode="sdr50")), load_card("generic-sdhc"))
    with pytest.raises(ConfigError, match="does not support DDR50"):
        check_bus_clock(host, SdBus(BusConfig("sd4", 50_000_000, mode="ddr50")),
                        load_card("generic-sdhc", {"uhs_modes": "sdr12 sdr25 sdr50"}))


def test_explicit_default_and_high_speed_modes():
    host, card = load_host("esp32-sdmmc"), load_card("generic-sdhc")
    check_bus_clock(host, SdBus(BusConfig("sd4", 40_000_000, mode="hs")), card)
    with pytest.raises(ConfigError, match=r"limit 25000000 Hz in SD mode \(Default Speed: sd.bus.mode = \"ds\""):
        check_bus_clock(host, SdBus(BusConfig("sd4", 40_000_000, mode="ds")), card)
    with pytest.raises(ConfigError, match="no High Speed mode here"):
        check_bus_clock(load_host("esp32-sdmmc", {"high_speed": False}), SdBus(BusConfig("sd4", 20_000_000, mode="hs")),
                        card)


@pytest.mark.parametrize("table,msg", [({"uhs_max_clock_hz": {"sdr51": 100_000_000}}, "not a UHS-I mode"),
                                       ({"uhs_max_clock_hz": {"ddr50": 100_000_000}}, "1..50000000"),
                                       ({"uhs_max_clock_hz": {"sdr50": 0}}, "1..100000000"),
                                       ({"tuning_modes": ["hs"]}, "is not one of")])
def test_host_uhs_fields_are_checked(table, msg):
    with pytest.raises(ConfigError, match=msg):
        from_mapping(HostProfile, table, "host")


def test_a_uhs104_card_takes_cmd23():
    with pytest.raises(ConfigError, match="UHS104 card supports CMD23"):
        from_mapping(CardProfile, {"uhs_modes": "sdr104"}, "card")
    assert from_mapping(CardProfile, {"uhs_modes": "sdr104", "cmd23": True}, "card").cmd23
    with pytest.raises(ConfigError, match="'sdr105' is not a UHS-I mode"):
        from_mapping(CardProfile, {"uhs_modes": "sdr50 sdr105"}, "card")
    with pytest.raises(ConfigError, match="names a mode twice"):
        from_mapping(CardProfile, {"uhs_modes": "ddr50 ddr50"}, "card")
    assert not load_card("generic-sdhc", {"uhs_modes": "sdr12"}).supports_mode("sdr1")


# ---- the initialisation -----------------------------------------------------------------------------------------

def test_uhs_initialisation_switches_to_1v8_then_the_mode_then_tunes():
    dev, _ = _linux()
    dev.initialise()
    names = _names(dev)
    assert names.index("CMD11") == names.index("ACMD41-loop") + 1, "CMD11 right after ACMD41 reports ready"
    assert names[-4:] == ["CMD55", "ACMD6", "CMD6", "CMD19x40"]
    dev, _ = _linux()
    dev.initialise()
    cmd11 = next(e for e in dev.log if e.name == "CMD11")
    assert cmd11.dur_ns >= 17_000_000, "the host's switch time is inside CMD11's entry"
    cmd19 = next(e for e in dev.log if e.name == "CMD19")
    assert cmd19.nbytes == 40 * 64 and cmd19.dur_ns >= 40 * 1_000_000


def test_no_tuning_where_the_host_does_not_tune_and_no_switch_at_3v3():
    dev, _ = _linux(mode="sdr25")
    dev.initialise()
    names = _names(dev)
    assert "CMD11" in names and "CMD6" in names and not any(n.startswith("CMD19") for n in names)
    dev, _ = _linux(mode="auto")
    dev.initialise()
    names = _names(dev)
    assert "CMD11" not in names and "CMD6" not in names and names[-1] == "CMD16"


# ---- the Linux MMC host ------------------------------------------------------------------------------------------

def test_linux_reads_one_command_sequence_per_request_with_cmd23_where_the_card_takes_it():
    dev, _ = _linux(card=from_mapping(CardProfile, {**CARD.__dict__, "cmd23": True}, "card"))
    dev.read(0, 1)
    assert _names(dev) == ["CMD17"]
    dev.read(8, 8)
    assert _names(dev) == ["CMD23", "CMD18"]
    dev, _ = _linux()  # CARD has no CMD23 in its SCR: CMD12 stops the transfer
    dev.read(8, 8)
    assert _names(dev) == ["CMD18", "CMD12"]


def test_linux_splits_a_request_at_max_sectors():
    dev, _ = _linux()
    dev.read(0, 4096)  # 2 MiB: four 512 KiB requests
    cmds = [e for e in dev.log if e.name == "CMD18"]
    assert [(e.arg, e.nbytes) for e in cmds] == [(0, 524288), (1024, 524288), (2048, 524288), (3072, 524288)]
    dev.log.clear()
    dev, _ = _linux(max_request_bytes=65536)
    dev.write(0, bytes(131072))
    assert [e.name for e in dev.log] == ["CMD25", "CMD12", "CMD13", "CMD25", "CMD12", "CMD13"]


def test_linux_writes_wait_for_busy_on_dat0_then_send_one_cmd13():
    dev, clock = _linux()
    t0 = clock.now_ns()
    dev.write(100, bytes(4096))
    assert _names(dev) == ["CMD25", "CMD12", "CMD13"]
    # call_cycles (50 us), 8 blocks with 7 in-transfer busies, the end busy of 500 us, then the CMD13 request
    assert clock.now_ns() - t0 > (50 + 7 * 2 + 500 + 10) * 1000
    dev.write(200, bytes(512))
    assert _names(dev) == ["CMD24", "CMD13"]


def test_bcm2835_sdhost_sends_cmd23_for_reads_only():
    card = from_mapping(CardProfile, {**CARD.__dict__, "cmd23": True}, "card")
    dev, _ = _linux(card=card, mode="auto", cmd23="reads")
    dev.read(0, 8)
    dev.write(0, bytes(4096))
    assert _names(dev) == ["CMD23", "CMD18", "CMD25", "CMD12", "CMD13"]


def test_each_request_costs_call_cycles_once():
    dev0, c0 = _linux(call=0)
    dev1, c1 = _linux(call=100_000)  # 100 us at 1 GHz
    for d in (dev0, dev1):
        d.read(0, 4096)   # four requests
        d.read(9000, 8)   # one
    assert c1.now_ns() - c0.now_ns() == pytest.approx(5 * 100_000)


def test_command_queueing_makes_each_request_a_task():
    card = from_mapping(CardProfile, {**CARD.__dict__, "cmdq": True, "uhs_modes": UHS + " sdr104", "cmd23": True},
                        "card")
    dev, _ = _linux(card=card, mode="sdr104", clock_hz=200_000_000, cmdq=True)
    assert dev.queued
    dev.read(0, 8)
    dev.write(8, bytes(4096))
    assert _names(dev) == ["CMD44", "CMD45", "CMD13", "CMD46", "CMD44", "CMD45", "CMD13", "CMD47"]
    dev, _ = _linux(card=card, mode="sdr104", clock_hz=200_000_000)  # the engine off: CMD23 + CMD18
    dev.read(0, 8)
    assert _names(dev) == ["CMD23", "CMD18"]


def test_linux_recorded_costs_equal_the_command_level_path():
    fast = []
    for log in (False, True):
        h = load_host("rpi4-sdhci")
        clock = VirtualClock()
        dev = sd_driver(h, SdBus(BusConfig("sd4", 50_000_000, mode="ddr50")),
                        load_card("samsung-pro-plus-32gb", {"capacity_bytes": 1 << 30}), clock, log_commands=log)
        times = []
        for lba, n in ((0, 8), (4096, 4096), (64, 8), (9000, 1)):
            t0 = clock.now_ns()
            dev.read(lba, n)
            times.append(clock.now_ns() - t0)
        for lba, n in ((100_000, 8), (200_000, 1024), (100_008, 8)):
            t0 = clock.now_ns()
            dev.write(lba, bytes(n * 512))
            times.append(clock.now_ns() - t0)
        fast.append(times)
    assert fast[0] == fast[1]


def test_the_base_model_refuses_a_kind_it_does_not_model():
    with pytest.raises(ConfigError, match="linux-mmc is not modelled by SdHostDriver"):
        SdHostDriver(load_host("rpi4-sdhci"), SdBus(BusConfig("sd4", 50_000_000)), CARD, VirtualClock())
    assert isinstance(sd_driver(load_host("rpi4-sdhci"), SdBus(BusConfig("sd4", 50_000_000)), CARD, VirtualClock()),
                      LinuxMmcDriver)
    with pytest.raises(ConfigError, match="not SPI"):
        sd_driver(load_host("rpi4-sdhci"), SdBus(BusConfig("spi", 20_000_000)), CARD, VirtualClock())


# ---- the scenarios -----------------------------------------------------------------------------------------------

SHORT_JOBS = "fio.jobs=[{name='r', rw='read', bs=524288, size=4194304}, {name='w', rw='write', bs=4096, size=65536}]"


def test_pi4_ddr50_scenario_runs_and_its_trace_starts_with_the_uhs_initialisation(capsys):
    assert main(["trace", "pidramble-4b-samsung-pro-plus-32gb", "-n", "24", "--set", SHORT_JOBS]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("| ") and not ln.startswith("| #")]
    cmds = [ln.split("|")[3].strip() for ln in lines]
    assert cmds[cmds.index("ACMD41-loop") + 1] == "CMD11"
    assert "CMD6" in cmds and "CMD19 ×40" in cmds, cmds
    assert cmds[cmds.index("CMD19 ×40") + 1:cmds.index("CMD19 ×40") + 3] == ["CMD18", "CMD12"], \
        "the data requests follow the initialisation"


def test_pi4_ddr50_reads_twice_as_fast_as_the_same_host_in_sdr25():
    jobs = ["fio.jobs=[{name='seq', rw='read', bs=524288, size=16777216}]"]
    ddr = run_scenario(scen.load("pidramble-4b-samsung-pro-plus-32gb", jobs)).rows[0]
    sdr = run_scenario(scen.load("pidramble-4b-samsung-pro-plus-32gb", jobs + ["sd.bus.mode=sdr25"])).rows[0]
    assert ddr.bytes == sdr.bytes and 1.8 < sdr.time_ms / ddr.time_ms < 2.0


def test_p4_sdr50_scenario_runs_and_its_trace_shows_cmd11_and_four_cmd19(capsys):
    assert main(["trace", "espidf-esp32p4-sdmmc4-sdr50-100mhz", "-n", "15", "--set", "espidf.parts=['sd_raw']"]) == 0
    out = capsys.readouterr().out
    assert "| CMD11 |" in out and "| CMD19 ×4 |" in out and "| CMD6 |" in out
    sc = scen.load("espidf-esp32p4-sdmmc4-sdr50-100mhz", ["espidf.parts=['sd_raw']", "espidf.runs=2"])
    fast = run_scenario(sc)
    hs = run_scenario(scen.load("espidf-esp32p4-sdmmc4-sdr50-100mhz", ["espidf.parts=['sd_raw']", "espidf.runs=2",
                                                                      "sd.bus.mode=hs", "sd.bus.clock_hz=50000000"]))
    reads = {r.label: r.time_ms for r in hs.rows if "read" in r.label}
    assert all(r.time_ms < reads[r.label] for r in fast.rows if "read" in r.label), "SDR50 at 100 MHz reads faster"
    assert fast.stack["sd"]["bus"]["mode"] == "sdr50"
