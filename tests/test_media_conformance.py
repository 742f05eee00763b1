"""Every BlockDevice passes the shared conformance suite."""
from __future__ import annotations

import pytest

from sdbench.media import Geometry, ImageFileDevice, MemoryDevice, TraceDevice
from sdbench.testing import BlockDeviceSuite


class TestMemoryDevice(BlockDeviceSuite):
    def make_device(self):
        return MemoryDevice.of_size(8 * 1024 * 1024)


class TestMemoryDeviceErasable(BlockDeviceSuite):
    def make_device(self):
        return MemoryDevice(Geometry(sector_size=512, sector_count=4096, prog_size=512, erase_size=4096,
                                     erase_value=0xFF))


class TestImageFileDevice(BlockDeviceSuite):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path

    def make_device(self):
        p = self.tmp / "card.img"
        p.unlink(missing_ok=True)
        return ImageFileDevice.create(p, 4 * 1024 * 1024)


class TestTraceDevice(BlockDeviceSuite):
    def make_device(self):
        return TraceDevice(MemoryDevice.of_size(1024 * 1024))


class TestMediumLog(BlockDeviceSuite):
    """The power-loss runs' recorder of what reaches the medium."""

    def make_device(self):
        from sdbench.powerloss import MediumLog

        return MediumLog(MemoryDevice.of_size(1024 * 1024))


def test_sparse_memory_device_does_not_allocate_a_whole_card():
    d = MemoryDevice.of_size(64 * 10**9)
    assert d.geometry.sector_count == 64 * 10**9 // 512
    d.write(d.geometry.sector_count - 1, b"\x55" * 512)
    d.write(0, b"\xaa" * 512)
    assert d.allocated_bytes <= 2 * 64 * 1024
    assert d.read(d.geometry.sector_count - 1, 1) == b"\x55" * 512
    assert d.read(12345, 1) == bytes(512)


def test_memory_erase_of_large_range_is_cheap_and_correct():
    d = MemoryDevice(Geometry(sector_size=512, sector_count=1 << 20, erase_value=0xFF))
    d.write(100, b"\x00" * 512 * 300)
    d.erase(50, 1000)
    assert d.read(100, 1) == b"\xff" * 512
    assert d.read(49, 1) == b"\xff" * 512  # never written: erase value
    assert d.allocated_bytes <= 3 * 64 * 1024


def test_image_is_sparse_when_created(tmp_path):
    p = tmp_path / "big.img"
    d = ImageFileDevice.create(p, 1 << 30)
    assert p.stat().st_blocks * 512 < 1 << 20
    d.close()


def test_trace_records_ops_in_order():
    t = TraceDevice(MemoryDevice.of_size(1 << 20))
    t.write(2, bytes(1024))
    t.read(2, 2)
    t.sync()
    assert [(e.op, e.lba, e.count) for e in t.ops()] == [("write", 2, 2), ("read", 2, 2), ("sync", 0, 0)]


class TestMemoryDeviceNorSemantics(BlockDeviceSuite):
    def make_device(self):
        return MemoryDevice(Geometry(sector_size=1, sector_count=64 * 1024, erase_size=4096, erase_value=0xFF),
                            program_and=True)


def test_and_programming_only_clears_bits():
    d = MemoryDevice(Geometry(sector_size=1, sector_count=8192, erase_size=4096, erase_value=0xFF), program_and=True)
    d.write(10, b"\xf0\x0f")
    d.write(10, b"\x3c\xff")
    assert d.read(10, 2) == b"\x30\x0f"


class TestUnitView(BlockDeviceSuite):
    """A NOR partition in littlefs's 128-byte program units (what a block cache in front of littlefs holds)."""

    def make_device(self):
        from sdbench.media.units import UnitView

        return UnitView(MemoryDevice(Geometry(sector_size=1, sector_count=64 * 1024, erase_size=4096,
                                              erase_value=0xFF), program_and=True), 128)
