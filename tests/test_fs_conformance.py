"""Every FileSystem passes the shared conformance suite."""
from __future__ import annotations

import pytest

from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError, FileSystemError
from sdbench.fs.base import OPTIONAL_OPS, File, FileStat, FileSystem, UnsupportedOperation
from sdbench.fs.costed import CostedFileSystem
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


class TestCostedFat(FileSystemSuite):
    """The host-cost wrapper of simulated stacks passes every call through (the optional operations too)."""

    def make_fs(self):
        inner = FatFileSystem(MemoryDevice.of_size(32 << 20), FatConfig(fat_type="fat16", allocation_unit_bytes=2048))
        return CostedFileSystem(inner, VirtualClock(), call_ns=1000.0, open_ns=5000.0)


class TestCostedLittleFs(FileSystemSuite):
    def make_fs(self):
        return CostedFileSystem(LittleFsFileSystem(MemoryDevice.of_size(8 << 20), LittleFsConfig()), VirtualClock(),
                                call_ns=1000.0)


def test_costed_sync_is_one_call_and_metadata_calls_are_free():
    clock = VirtualClock()
    fs = CostedFileSystem(LittleFsFileSystem(MemoryDevice.of_size(8 << 20), LittleFsConfig()), clock, call_ns=1000.0)
    fs.format()
    fs.mount()
    assert fs.has_directories and all(fs.supports(op) for op in OPTIONAL_OPS)
    with fs.open("/a", "w") as f:
        f.write(b"x" * 100)
        before = clock.now_ns()
        f.sync()
        assert clock.now_ns() - before == 1000  # the memory device takes no time: only the VFS call
        before = clock.now_ns()
        f.truncate(10)
        assert clock.now_ns() == before
    before = clock.now_ns()
    fs.mkdir("/d")
    fs.rename("/a", "/d/a")
    assert clock.now_ns() == before and fs.stat("/d/a").size == 10
    fs.unmount()


class _Minimal(FileSystem):
    """The abstract primitives only, as a plugin that knows nothing of the optional operations."""

    kind = "minimal"

    def __init__(self):
        super().__init__(MemoryDevice.of_size(1 << 20))
        self.files: dict[str, bytearray] = {}

    def _format(self):
        self.files = {}

    def _mount(self):
        pass

    def _unmount(self):
        pass

    def _open(self, path, mode):
        return _MinimalFile(self, path, mode)

    def _stat(self, path):
        return FileStat(path, len(self.files[path]))

    def _remove(self, path):
        del self.files[path]

    def _listdir(self, path):
        return list(self.files)


class _MinimalFile(File):
    def __init__(self, fs, path, mode):
        super().__init__(fs, path, mode)
        fs.files.setdefault(path, bytearray())

    def read(self, size=-1, *, buf_addr=0):
        return bytes(self.fs.files[self.path])

    def write(self, data, *, buf_addr=0):
        self.fs.files[self.path] += data
        return len(data)

    def seek(self, offset, whence=0):
        return offset

    def tell(self):
        return 0

    def _close(self):
        pass


def test_optional_operations_default_to_a_clear_refusal():
    fs = _Minimal()
    fs.format()
    fs.mount()
    assert not any(fs.supports(op) for op in OPTIONAL_OPS)
    with pytest.raises(ValueError, match="unknown operation"):
        fs.supports("chmod")
    with fs.open("/a", "w") as f:
        with pytest.raises(UnsupportedOperation, match="^sync is not supported by minimal$"):
            f.sync()
        with pytest.raises(UnsupportedOperation, match="^truncate is not supported by minimal$"):
            f.truncate(0)
    with pytest.raises(UnsupportedOperation, match="^rename is not supported by minimal$"):
        fs.rename("/a", "/b")
    with pytest.raises(UnsupportedOperation, match="^mkdir is not supported by minimal$"):
        fs.mkdir("/d")
    fs.has_directories = False
    with pytest.raises(UnsupportedOperation, match="^mkdir is not supported by minimal: it has no directories$"):
        fs.mkdir("/d")
    fs.unmount()
    with pytest.raises(FileSystemError, match="not mounted"):
        fs.rename("/a", "/b")


def test_fat_truncate_discards_the_freed_clusters():
    dev = MemoryDevice.of_size(32 << 20)
    fs = FatFileSystem(dev, FatConfig(fat_type="fat16", allocation_unit_bytes=2048))
    fs.format()
    fs.mount()
    with fs.open("/t.bin", "w") as f:
        f.write(bytes(20 * 2048))
    before = dev.stats.snapshot()
    with fs.open("/t.bin", "r+") as f:
        f.truncate(2048 * 5 + 1)   # 14 of 20 clusters freed, one contiguous run
    d = dev.stats.delta(dev.stats.snapshot(), before)
    assert d["trims"] == 1 and d["bytes_trimmed"] == 14 * 2048
    fs.unmount()


def test_fat_rename_onto_a_file_replaces_it_as_micropython_does():
    fs = FatFileSystem(MemoryDevice.of_size(8 << 20), FatConfig(fat_type="fat16"))
    fs.format()
    fs.mount()
    for name, data in (("/a.txt", b"new"), ("/b.txt", b"old, longer")):
        with fs.open(name, "w") as f:
            f.write(data)
    fs.rename("/A.TXT", "/b.txt")       # FAT names are case-insensitive
    assert fs.listdir("/") == ["b.txt"]
    with fs.open("/b.txt") as f:
        assert f.read() == b"new"
    fs.rename("/b.txt", "/B.TXT")       # a case change is a rename of the same entry, not a replacement
    assert fs.listdir("/") == ["B.TXT"]
    fs.unmount()


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


# ---- SPIFFS' rename and truncate (SPIFFS_rename, SPIFFS_ftruncate in the core) ----------------------------

def _spiffs():
    from sdbench.fs.spiffs import SpiffsFileSystem

    dev = MemoryDevice(Geometry(sector_size=1, sector_count=1 << 20, erase_size=4096, erase_value=0xFF),
                       program_and=True)
    fs = SpiffsFileSystem(dev)
    fs.format()
    fs.mount()
    return fs


def test_spiffs_core_rename_refuses_a_taken_name_and_rehashes_the_descriptor_cache():
    from sdbench.fs.spiffs import SpiffsError

    fs = _spiffs()
    for name in ("/a", "/b"):
        with fs.open(name, "w") as f:
            f.write(name.encode() * 100)
    with pytest.raises(SpiffsError) as e:
        fs.core.rename(b"/a", b"/b")
    assert e.value.code == "CONFLICTING_NAME"
    with pytest.raises(SpiffsError) as e:
        fs.core.rename(b"/nope", b"/c")
    assert e.value.code == "NOT_FOUND"
    old, new = fs.core._hash(b"/a"), fs.core._hash(b"/c")   # noqa: SLF001 - the temporal cache is what this checks
    assert any(d.name_hash == old and d.score > 0 for d in fs.core.fds)
    fs.rename("/a", "/c")
    assert not any(d.name_hash == old and d.score > 0 for d in fs.core.fds)
    assert any(d.name_hash == new for d in fs.core.fds)
    assert all(d.file_nbr == 0 for d in fs.core.fds)        # the spare descriptor went back
    fs.rename("/c", "/b")                                   # the interface replaces /b (SPIFFS_remove first)
    assert fs.listdir("/") == ["b"]
    with fs.open("/b") as f:
        assert f.read() == b"/a" * 100
    with pytest.raises(FileSystemError, match="mkdir is not supported by spiffs: it has no directories"):
        fs.mkdir("/d")
    fs.unmount()


def test_spiffs_core_ftruncate_codes():
    from sdbench.fs.spiffs import SpiffsError
    from sdbench.fs.spiffs import core as C

    fs = _spiffs()
    with fs.open("/t", "w") as f:
        f.write(bytes(1000))
    fh = fs.core.open(b"/t", C.O_RDONLY)
    with pytest.raises(SpiffsError) as e:
        fs.core.ftruncate(fh, 10)
    assert e.value.code == "NOT_WRITABLE"
    fs.core.close(fh)
    fh = fs.core.open(b"/t", C.O_RDWR)
    with pytest.raises(SpiffsError) as e:
        fs.core.ftruncate(fh, 1001)
    assert e.value.code == "END_OF_OBJECT"
    fs.core.ftruncate(fh, 300)
    fs.core.close(fh)
    assert fs.stat("/t").size == 300
    fs.unmount()
