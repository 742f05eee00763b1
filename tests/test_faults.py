"""The fault wrapper: a conformant pass-through without faults; power cuts keep exactly what landed."""
from __future__ import annotations

import pytest

from sdbench.errors import ConfigError
from sdbench.media import Geometry, MemoryDevice
from sdbench.media.base import BlockDeviceError
from sdbench.media.faults import FaultConfig, FaultDevice, PowerCut
from sdbench.options import from_mapping
from sdbench.testing import BlockDeviceSuite

SS = 512


class TestFaultDeviceWithoutFaults(BlockDeviceSuite):
    def make_device(self):
        return FaultDevice(MemoryDevice.of_size(4 << 20))


class TestFaultDeviceErasable(BlockDeviceSuite):
    def make_device(self):
        return FaultDevice(MemoryDevice(Geometry(sector_size=SS, sector_count=4096, prog_size=SS, erase_size=4096,
                                                 erase_value=0xFF)), FaultConfig(bitflip_probability=0.0))


def _dev(**cfg) -> tuple[FaultDevice, MemoryDevice]:
    inner = MemoryDevice(Geometry(sector_size=SS, sector_count=256, prog_size=SS, erase_size=8 * SS,
                                  erase_value=0xFF))
    return FaultDevice(inner, FaultConfig(**cfg)), inner


def test_cut_at_op_keeps_earlier_ops_and_a_torn_prefix():
    dev, inner = _dev(cut_at_op=3, torn_sectors=2)
    dev.write(0, b"\x01" * SS)
    dev.write(1, b"\x02" * SS)
    with pytest.raises(PowerCut, match="operation 3"):
        dev.write(8, b"\x03" * (5 * SS))
    assert dev.cut == {"op": 3, "what": "write", "lba": 8, "sectors": 5, "landed_sectors": 2}
    assert inner.read(8, 5) == b"\x03" * (2 * SS) + b"\xff" * (3 * SS)
    # off: nothing passes, reads included, whoever catches the error
    for call in (lambda: dev.read(0, 1), lambda: dev.write(20, b"\x04" * SS), lambda: dev.erase(16, 8),
                 lambda: dev.trim(0, 1), dev.sync):
        with pytest.raises(PowerCut):
            call()
    assert inner.read(20, 1) == b"\xff" * SS and dev.ops == 3
    dev.power_on()
    assert dev.read(0, 2) == b"\x01" * SS + b"\x02" * SS
    dev.write(20, b"\x05" * SS)          # no second cut
    assert dev.ops == 4


def test_cut_erase_erases_whole_units_of_a_prefix():
    dev, inner = _dev(cut_at_op=2, torn_sectors=9)
    dev.write(0, b"\x07" * (24 * SS))
    with pytest.raises(PowerCut):
        dev.erase(0, 24)
    assert dev.cut["landed_sectors"] == 8                      # 9 sectors round down to one 8-sector unit
    assert inner.read(0, 8) == b"\xff" * (8 * SS) and inner.read(8, 16) == b"\x07" * (16 * SS)


def test_seeded_torn_lengths_repeat_and_never_land_the_whole_write():
    landed = []
    for seed in range(20):
        dev, _ = _dev(cut_at_op=1, seed=seed)
        with pytest.raises(PowerCut):
            dev.write(0, bytes(16 * SS))
        landed.append(dev.cut["landed_sectors"])
    assert all(0 <= n < 16 for n in landed) and len(set(landed)) > 3
    again, _ = _dev(cut_at_op=1, seed=7)
    with pytest.raises(PowerCut):
        again.write(0, bytes(16 * SS))
    assert again.cut["landed_sectors"] == landed[7]


def test_bitflips_and_bad_sectors():
    dev, inner = _dev(bitflip_probability=1.0, bad_sectors=(5,))
    inner.write(0, bytes(4 * SS))
    data = dev.read(0, 4)
    assert dev.bitflips == 4
    assert [sum(bin(b).count("1") for b in data[i * SS:(i + 1) * SS]) for i in range(4)] == [1] * 4
    assert inner.read(0, 4) == bytes(4 * SS)                   # the medium itself is unchanged
    with pytest.raises(BlockDeviceError, match="bad sector"):
        dev.read(4, 2)
    with pytest.raises(BlockDeviceError, match="bad sector"):
        dev.write(5, bytes(SS))
    assert dev.describe()["faults"]["bad_sectors"] == [5]


def test_config_is_checked_where_declared():
    with pytest.raises(ConfigError, match="cut_at_op"):
        from_mapping(FaultConfig, {"cut_at_op": -1}, "faults")
    with pytest.raises(ConfigError, match="bitflip_probability"):
        from_mapping(FaultConfig, {"bitflip_probability": 2}, "faults")


def test_volatile_cache_loses_the_newest_sectors_at_a_cut_and_sync_does_not_save_them():
    dev, inner = _dev(cut_at_op=4, torn_sectors=0, volatile_sectors=2)
    for lba in range(3):
        dev.write(lba, bytes([lba + 1]) * SS)
    dev.sync()                                            # this card does not empty its cache on a flush
    with pytest.raises(PowerCut):
        dev.write(3, b"\x09" * SS)
    assert inner.read(0, 4) == b"\x01" * SS + b"\xff" * (3 * SS)
    assert dev.volatile_lost == 2
