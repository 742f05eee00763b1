"""Host descriptions are composed from the text fields mcu and software and the parameters, so an override shows
in them; clock figures in the text fields and the old free-text description are refused; a scenario loaded with
overrides says what they changed."""
from __future__ import annotations

import pytest

from sdbench import profiles
from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.errors import ConfigError
from sdbench.media.sim.esp_flash import EspFlashHostProfile, load_esp_flash_host
from sdbench.media.sim.host import HostProfile
from sdbench.stack.sd import load_host

HOSTS = profiles.shipped("hosts")


def _any_host(name: str, overrides: dict | None = None) -> HostProfile | EspFlashHostProfile:
    try:
        return load_host(name, overrides)
    except ConfigError:  # the hosts folder also holds ESP32 flash hosts
        return load_esp_flash_host(name, overrides)


# ---- composed from the parameters ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", HOSTS)
def test_every_shipped_host_loads_and_its_description_has_its_cpu_clock(name):
    host = _any_host(name)
    assert host.mcu and host.software, "every shipped host names its MCU and its driver"
    assert host.description.startswith(f"{host.mcu} at {host.cpu_hz / 1e6:g} MHz, {host.software}; ")
    assert "\n" not in host.description


def test_sd_host_description_follows_overridden_cpu_clock_tick_and_clock_limit():
    shipped = load_host("esp32-sdmmc")
    assert shipped.description == ("ESP32 at 160 MHz, ESP-IDF v5 SDMMC host driver (DMA, CMD13 polling); driver kind "
                                   "sdmmc, RTOS tick 100 Hz, bus clock at most 40 MHz, High Speed switching (CMD6), "
                                   "DMA buffers 4-byte aligned")
    host = load_host("esp32-sdmmc", {"cpu_hz": 240_000_000, "rtos_tick_hz": 1000, "max_bus_clock_hz": 20_000_000,
                                     "high_speed": False, "dma_align_bytes": 64})
    d = host.description
    assert d.startswith("ESP32 at 240 MHz, ") and "160 MHz" not in d
    assert "RTOS tick 1000 Hz" in d and "100 Hz" not in d
    assert "bus clock at most 20 MHz" in d and "most 40 MHz" not in d
    assert "no High Speed switching (Default Speed)" in d and "DMA buffers 64-byte aligned" in d


def test_clock_limit_tied_to_the_cpu_follows_cpu_hz():
    assert "bus clock at most 175 MHz (CPU clock / 2)" in load_host("p2-350mhz").description
    d = load_host("p2-350mhz", {"cpu_hz": 250_000_000}).description
    assert d.startswith("Parallax Propeller 2 at 250 MHz") and "bus clock at most 125 MHz (CPU clock / 2)" in d
    # the lower of the two limits is the one that holds
    assert "at most 100 MHz, " in load_host("p2-350mhz", {"max_bus_clock_hz": 100_000_000}).description


def test_tick_and_alignment_show_only_where_the_driver_uses_them():
    spi = load_host("esp32s3-sdspi").description  # SDSPI polls the card: no ticks, no DMA alignment rule
    assert "tick" not in spi and "aligned" not in spi
    assert "DMA buffers 4-byte aligned" in load_host("rp2040-pio-sdio").description
    assert "aligned" not in load_host("teensy41-sdio").description  # 1 B: no rule


def test_flash_host_description_follows_cpu_flash_mode_clock_and_tick():
    shipped = load_esp_flash_host("esp32-flash")
    assert shipped.description == ("ESP32 at 160 MHz, ESP-IDF v5 esp_flash on SPI1 (perf_benchmark build); flash "
                                   "QIO at 80 MHz, RTOS tick 100 Hz (erase yields)")
    d = load_esp_flash_host("esp32-flash", {"cpu_hz": 240_000_000, "flash_mode": "dio", "flash_clock_hz": 40_000_000,
                                            "rtos_tick_hz": 1000}).description
    assert d.startswith("ESP32 at 240 MHz, ") and "flash DIO at 40 MHz" in d and "RTOS tick 1000 Hz" in d
    assert "tick" not in load_esp_flash_host("esp32-flash", {"yield_during_erase": False}).description


def test_a_runs_stack_records_the_composed_description_of_the_overridden_host():
    sc = scen.load("espidf-esp32-sdmmc4-40mhz", ["sd.host_params.cpu_hz=240000000"])
    built = sc.build()
    try:
        host = built.stack["sd"]["host"]
    finally:
        built.discard()
    assert host["description"].startswith("ESP32 at 240 MHz, ") and host["cpu_hz"] == 240_000_000
    assert (host["mcu"], host["software"]) == ("ESP32", "ESP-IDF v5 SDMMC host driver (DMA, CMD13 polling)")


def test_list_hosts_shows_the_composed_descriptions(capsys):
    assert main(["list", "hosts"]) == 0
    out = capsys.readouterr().out
    for name in HOSTS:
        assert f"| {name} |" in out and _any_host(name).description in out


# ---- refused ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, text, figure", [
    ("mcu", "ESP32 at 240 MHz", "240 MHz"),
    ("software", "ESP-IDF SDMMC host driver, FreeRTOS 100Hz tick", "100Hz"),
    ("software", "bit-banged SPI at 1.5 mhz", "1.5 mhz"),
    ("mcu", "MCU with a 32.768 kHz crystal", "32.768 kHz"),
])
def test_a_clock_figure_in_a_text_field_is_refused_naming_the_field(field, text, figure):
    with pytest.raises(ConfigError) as e:
        load_host("esp32-sdmmc", {field: text})
    msg = str(e.value)
    assert "\n" not in msg and f"{field} holds a clock figure ({figure!r})" in msg and "cpu_hz" in msg
    with pytest.raises(ConfigError, match=f"{field} holds a clock figure"):
        HostProfile(**{field: text})


def test_a_clock_figure_in_the_flash_hosts_text_is_refused():
    with pytest.raises(ConfigError, match=r"software holds a clock figure \('80 MHz'\).*flash_clock_hz"):
        load_esp_flash_host("esp32-flash", {"software": "ESP-IDF v5 esp_flash, QIO 80 MHz"})


def test_text_without_clock_figures_is_taken():
    host = load_host("esp32-sdmmc", {"mcu": "USB 2.0 reader", "software": "SPI1, CMD13 after 4-bit writes, v5.3"})
    assert host.description.startswith("USB 2.0 reader at 160 MHz, SPI1, CMD13 after 4-bit writes, v5.3; ")


def test_a_user_host_file_with_a_description_is_refused_with_what_to_write_instead(tmp_path):
    path = tmp_path / "my-host.toml"
    path.write_text('name = "my-host"\ndescription = "my board at 240 MHz"\ndriver = "sdmmc"\n')
    with pytest.raises(ConfigError) as e:
        load_host(str(path))
    msg = str(e.value)
    assert "\n" not in msg and "description is no longer an option" in msg
    assert "mcu" in msg and "software" in msg and "unknown option" not in msg
    with pytest.raises(ConfigError, match="description is no longer an option"):
        load_esp_flash_host("esp32-flash", {"description": "x"})
    with pytest.raises(ConfigError, match="description is no longer an option"):
        scen.load("espidf-esp32-sdmmc4-40mhz", ['sd.host_params.description="x"']).build()


# ---- scenario descriptions with overrides ----------------------------------------------------------------------

def test_scenario_description_names_what_set_changed_with_units():
    plain = scen.load("espidf-esp32-sdmmc4-40mhz")
    assert "changed" not in plain.description
    sc = scen.load("espidf-esp32-sdmmc4-40mhz", ["sd.bus.clock_hz=20000000", "sd.host_params.cpu_hz=160000000",
                                                 "espidf.runs=5", "seed=3"])
    assert sc.description == (f"{plain.description}; changed: sd.bus.clock_hz = 20000000 Hz, "
                              f"sd.host_params.cpu_hz = 160000000 Hz, espidf.runs = 5 calls, seed = 3")
    # a table given whole is named field by field; a string is quoted
    sc = scen.load("espidf-esp32-sdmmc4-40mhz", ["sd.host_params={rtos_tick_hz=1000}", 'sd.card="generic-sdhc"'])
    assert sc.description.endswith('; changed: sd.host_params.rtos_tick_hz = 1000 Hz, sd.card = "generic-sdhc"')


def test_scenario_description_unchanged_by_a_set_to_the_files_own_value():
    plain = scen.load("espidf-esp32-sdmmc4-40mhz")
    assert scen.load("espidf-esp32-sdmmc4-40mhz", ["sd.bus.clock_hz=40000000"]).description == plain.description


def test_flash_scenario_description_names_host_and_chip_fields():
    sc = scen.load("espidf-esp32-spiflash", ["flash.host_params.flash_clock_hz=40000000", "flash.fat.n_fats=1"])
    assert sc.description.endswith("; changed: flash.host_params.flash_clock_hz = 40000000 Hz, flash.fat.n_fats = 1")


def test_run_with_set_prints_the_change(capsys):
    code = main(["run", "espidf-esp32-sdmmc4-40mhz", "--set", "sd.bus.clock_hz=20000000", "--set",
                 "espidf.parts=['sd_raw']", "--runs", "1", "--no-save", "--no-range", "-f", "json"])
    err = capsys.readouterr().err
    assert code == 0, err
    line = next(line for line in err.splitlines() if line.startswith("running espidf-esp32-sdmmc4-40mhz: "))
    assert "changed: sd.bus.clock_hz = 20000000 Hz" in line
