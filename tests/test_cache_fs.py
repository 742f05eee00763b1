"""Filesystems run unchanged on top of a BlockCache (and the data reaches the medium)."""
from __future__ import annotations

import random

from sdbench.cache import BlockCache, CacheConfig
from sdbench.fs.fat import FatConfig, FatFileSystem
from sdbench.fs.littlefs import LittleFsConfig, LittleFsFileSystem
from sdbench.media import MemoryDevice
from sdbench.testing import FileSystemSuite


class TestFatOverArcCache(FileSystemSuite):
    def make_fs(self):
        cache = BlockCache(MemoryDevice.of_size(32 << 20),
                           CacheConfig(blocks=32, policy="arc", read_ahead_blocks=4, pinned_lba_ranges=((0, 8),)))
        return FatFileSystem(cache, FatConfig(fat_type="fat16", allocation_unit_bytes=2048))


class TestLittleFsOverSmallLrucCache(FileSystemSuite):
    def make_fs(self):
        cache = BlockCache(MemoryDevice.of_size(8 << 20), CacheConfig(blocks=8, policy="lruc", read_ahead_blocks=2))
        return LittleFsFileSystem(cache, LittleFsConfig())


def test_files_written_through_a_cache_are_on_the_bare_device():
    mem = MemoryDevice.of_size(8 << 20)
    cache = BlockCache(mem, CacheConfig(blocks=16, policy="2q", read_ahead_blocks=8))
    files = {f"/f{i}.bin": random.Random(i).randbytes(n) for i, n in enumerate((1024, 4096, 70_000, 300))}
    fs = LittleFsFileSystem(cache, LittleFsConfig())
    fs.format()
    fs.mount()
    for path, data in files.items():
        with fs.open(path, "w") as f:
            for i in range(0, len(data), 512):
                f.write(data[i:i + 512])
    fs.unmount()
    cache.sync()
    s = cache.cache_stats
    assert s.hits > 0 and s.flushes > 0
    bare = LittleFsFileSystem(mem, LittleFsConfig())
    bare.mount()
    for path, data in files.items():
        with bare.open(path, "r") as f:
            assert f.read() == data
    bare.unmount()
