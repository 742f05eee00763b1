"""Every FileSystem passes the shared conformance suite."""
from __future__ import annotations

import pytest

from sdbench.errors import ConfigError, FileSystemError
from sdbench.fs.fat import FatConfig, FatFileSystem
from sdbench.fs.littlefs import LittleFsConfig, LittleFsFileSystem
from sdbench.media import Geometry, MemoryDevice
from sdbench.testing import FileSystemSuite


class TestFat32WithMbr(FileSystemSuite):
    def make_fs(self):
        return FatFileSystem(MemoryDevice.of_size(256 << 20),
                             FatConfig(fat_type="fat32", allocation_unit_bytes=2048, partition_start_lba=63))


class TestFat16Sfd(FileSystemSuite):
    def make_fs(self):
        return FatFileSystem(MemoryDevice.of_size(32 << 20), FatConfig(fat_type="fat16", allocation_unit_bytes=2048))


class TestFat4096ByteSectors(FileSystemSuite):
    def make_fs(self):
        dev = MemoryDevice(Geometry(sector_size=4096, sector_count=512))
        return FatFileSystem(dev, FatConfig(allocation_unit_bytes=4096, sector_size_bytes=4096,
                                            n_fats=1, root_entries=128))


class TestLittleFsSd(FileSystemSuite):
    def make_fs(self):
        return LittleFsFileSystem(MemoryDevice.of_size(8 << 20), LittleFsConfig())


class TestLittleFsFlash(FileSystemSuite):
    def make_fs(self):
        dev = MemoryDevice(Geometry(sector_size=1, sector_count=1 << 20, erase_size=4096, erase_value=0xFF),
                           program_and=True)
        return LittleFsFileSystem(dev, LittleFsConfig(read_size=128, prog_size=128, block_size=4096))


def test_only_one_fat_volume_at_a_time():
    a = FatFileSystem(MemoryDevice.of_size(8 << 20), FatConfig(fat_type="fat16"))
    b = FatFileSystem(MemoryDevice.of_size(8 << 20), FatConfig(fat_type="fat16"))
    a.format(); b.format()
    a.mount()
    with pytest.raises(FileSystemError, match="another FAT volume"):
        b.mount()
    a.unmount()
    b.mount()
    b.unmount()


def test_fat_mount_of_garbage_is_a_clear_error():
    dev = MemoryDevice.of_size(8 << 20)
    dev.write(0, b"\x13" * 512)
    fs = FatFileSystem(dev, FatConfig())
    with pytest.raises(FileSystemError, match="no FAT volume"):
        fs.mount()


def test_fat32_layout_matches_request():
    fs = FatFileSystem(MemoryDevice.of_size(8 << 30), FatConfig(allocation_unit_bytes=65536, partition_start_lba=63))
    fs.format()
    fs.mount()
    lay = fs.layout
    assert lay.fat_type == 32 and lay.volume_start == 63 and lay.cluster_bytes == 65536
    assert lay.data_start == 63 + 32 + 2 * lay.fat_sectors
    fs.unmount()


def test_fat32_too_few_clusters_is_config_error():
    with pytest.raises(ConfigError, match="FAT32 needs"):
        FatFileSystem(MemoryDevice.of_size(16 << 20), FatConfig(fat_type="fat32", allocation_unit_bytes=65536)).format()


def test_littlefs_block_count_limit():
    fs = LittleFsFileSystem(MemoryDevice.of_size(64 << 20), LittleFsConfig(block_count_limit=1000))
    assert fs.block_count == 1000


@pytest.mark.parametrize("size,au,expect", [(2 << 20, 4096, 12), (1 << 30, 65536, 16), (16 << 30, 65536, 32)])
def test_fat_type_follows_cluster_count(size, au, expect):
    fs = FatFileSystem(MemoryDevice.of_size(size), FatConfig(allocation_unit_bytes=au))
    assert fs.plan_layout().fat_type == expect
