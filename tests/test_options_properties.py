"""Property tests over every declared option: any value either loads within its declaration or is refused
with a ConfigError (one line for the user); never another exception."""
from __future__ import annotations

import math
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdbench import scenarios as scen
from sdbench.cache import CacheConfig
from sdbench.errors import ConfigError
from sdbench.fs.fat import FatConfig
from sdbench.fs.littlefs import LittleFsConfig
from sdbench.fs.spiffs.config import SpiffsConfig
from sdbench.media.sim.bus import BusConfig
from sdbench.media.sim.card import CardProfile
from sdbench.media.sim.esp_flash import EspFlashHostProfile
from sdbench.stack.flash import SimFlashConfig
from sdbench.media.sim.host import HostProfile
from sdbench.media.sim.nor import FlashChipProfile, NorChipConfig
from sdbench.stack.sd import SimSdConfig
from sdbench.media.usbmsc import UsbMscConfig
from sdbench.media.wl import WlConfig
from sdbench.options import INT_LIMIT, from_mapping, option_info
from sdbench.stack.media import DeviceMediaConfig, ImageMediaConfig, MemoryMediaConfig
from sdbench.workloads.espidf import EspIdfConfig
from sdbench.workloads.fio import JobConfig
from sdbench.workloads.fstests import FsTestsConfig
from sdbench.workloads.p2 import P2Config
from sdbench.workloads.rawseq import RawSeqConfig
from sdbench.workloads.usbmsc import UsbMscProtocolConfig

CONFIGS = [CacheConfig, FatConfig, LittleFsConfig, SpiffsConfig, BusConfig, CardProfile, EspFlashHostProfile,
           SimFlashConfig, HostProfile, FlashChipProfile, NorChipConfig, SimSdConfig, UsbMscConfig, WlConfig,
           DeviceMediaConfig, ImageMediaConfig, MemoryMediaConfig, EspIdfConfig, JobConfig, FsTestsConfig, P2Config,
           RawSeqConfig, UsbMscProtocolConfig]

SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.sampled_from([0, 1, -1, 2, 3, 7, 8, 255, 256, 511, 512, 4096, 65536, 1 << 31, 1 << 63, -(1 << 63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "x", "nan", "inf", "-inf", "4k", "0x10", "1_000", "true", "1e400", "auto", "lru"]),
    st.text(max_size=12),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                      max_leaves=6)


def _mutations(cls: type) -> st.SearchStrategy[dict]:
    names = [f.name for f in fields(cls)]
    return st.dictionaries(st.one_of(st.sampled_from(names), st.text(max_size=6)), VALUES, max_size=4)


def _check_loaded(obj: object) -> None:
    """What loads is within its declaration: finite numbers, integers within ±2^63, inside min/max."""
    for info in option_info(type(obj)):
        v = getattr(obj, info.name)
        items = v if isinstance(v, (list, tuple)) else [v]
        for x in items:
            if isinstance(x, float):
                assert math.isfinite(x), (info.name, v)
            if isinstance(x, int) and not isinstance(x, bool):
                assert -INT_LIMIT < x < INT_LIMIT, (info.name, v)
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                assert info.min is None or x >= info.min, (info.name, v)
                assert info.max is None or x <= info.max, (info.name, v)


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
@settings(max_examples=60, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_table_loads_within_its_declaration_or_is_a_config_error(cls, data):
    table = data.draw(_mutations(cls))
    try:
        obj = from_mapping(cls, table, cls.__name__)
    except ConfigError as e:
        assert "\n" not in str(e)
        return
    _check_loaded(obj)


@settings(max_examples=60, derandomize=True, deadline=None)
@given(value=VALUES)
def test_a_table_of_any_type_is_refused_cleanly(value):
    if isinstance(value, dict):
        return
    with pytest.raises(ConfigError, match="expected a table"):
        from_mapping(EspIdfConfig, value, "espidf")  # type: ignore[arg-type]


def _scenario_keys() -> list[str]:
    sc = scen.load("espidf-esp32-sdmmc4-40mhz")
    keys: list[str] = []

    def walk(prefix: str, d: dict) -> None:
        for k, v in d.items():
            keys.append(f"{prefix}{k}")
            if isinstance(v, dict):
                walk(f"{prefix}{k}.", v)
    walk("", sc.raw)
    for section, cls in (("espidf", EspIdfConfig), ("sd_fat", FatConfig), ("sd_littlefs", LittleFsConfig)):
        keys += [f"{section}.{f.name}" for f in fields(cls)]
    keys += [f"sd.bus.{f.name}" for f in fields(BusConfig)]
    return sorted(set(keys))


TOML_VALUES = st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1", "2", "3", "512", "1e308", "1e400",
                               str(1 << 63), str(1 << 70), '""', '"x"', "[]", "[1, 2]", "{}", "{a = 1}", "true",
                               "false", "1.5", "0x200", "garbage ]", "'''"])


@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(_scenario_keys()), value=TOML_VALUES)
def test_any_set_on_a_scenario_loads_or_is_a_config_error(key, value):
    try:
        scen.load("espidf-esp32-sdmmc4-40mhz", [f"{key}={value}"])
    except ConfigError as e:
        assert "\n" not in str(e)


def test_numbers_must_be_finite_and_integers_fit_int64():
    with pytest.raises(ConfigError, match="out of range"):
        from_mapping(EspIdfConfig, {"buf_addr": 1 << 64}, "espidf")
    for bad in (float("nan"), float("inf"), 1 << 1100):
        with pytest.raises(ConfigError, match="copy_cycles_per_byte: expected a finite number"):
            from_mapping(CacheConfig, {"copy_cycles_per_byte": bad}, "sd.cache")
    with pytest.raises(ConfigError, match="copy_cycles_per_byte: expected a number, got 'nan'$"):
        from_mapping(CacheConfig, {"copy_cycles_per_byte": "nan"}, "sd.cache")


@pytest.mark.parametrize("key, value, expected", [
    ("sd.bridge.link.frame_us", '"42"', "a number"), ("sd.bridge.link.packet_bytes", '"512"', "an integer"),
    ("sd.bridge.link.lock_during_card_write", '"yes"', "true or false"), ("espidf.runs", '"3"', "an integer")])
def test_a_string_is_never_read_as_a_number_or_a_truth_value(key, value, expected):
    """Issue 32, defect 2: --set sd.bridge.link.frame_us="42" was taken as 42; types are exact."""
    name = "usb2-reader-generic-sdhc" if key.startswith("sd.bridge") else "espidf-esp32-sdmmc4-40mhz"
    with pytest.raises(ConfigError, match=f"{key}: expected {expected}, got"):
        scen.load(name, [f"{key}={value}"])
    scen.load(name, [f"{key}={value.strip(chr(34)).replace('yes', 'true')}"])  # the same value, unquoted
    # below the minimum: the unit is in the message
    with pytest.raises(ConfigError, match="below the minimum 1.0 %"):
        from_mapping(CacheConfig, {"twoq_in_percent": 0.5}, "sd.cache")


def test_a_partial_nested_table_keeps_the_fields_own_defaults():
    # [flash.fat] n_fats = 1 changes n_fats only: the flash target's 4096-byte sectors and 64 KiB clusters stay
    cfg = from_mapping(SimFlashConfig, {"fat": {"n_fats": 1}, "littlefs": {"block_cycles": 100}}, "flash")
    default = SimFlashConfig()
    assert cfg.fat == type(default.fat)(**{**default.fat.__dict__, "n_fats": 1})
    assert cfg.littlefs.block_size == default.littlefs.block_size == 4096 and cfg.littlefs.block_cycles == 100
