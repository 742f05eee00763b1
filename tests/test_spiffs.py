"""SPIFFS: configuration, conformance suite, NOR AND semantics, garbage collection, behaviours."""
from __future__ import annotations

import random

import pytest

from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError, FileSystemError
from sdbench.fs.base import SEEK_END
from sdbench.fs.spiffs import SpiffsConfig, SpiffsError, SpiffsFileSystem
from sdbench.fs.spiffs.layout import PH_FLAG_DELET, PH_FLAG_USED
from sdbench.media import Geometry, MemoryDevice
from sdbench.media.trace import TraceDevice
from sdbench.options import from_mapping, option_info
from sdbench.testing import FileSystemSuite


def nor(size: int, erase: int = 4096, **kw) -> MemoryDevice:
    """A byte-addressed NOR flash model: erase to 0xFF, programming ANDs bits."""
    return MemoryDevice(Geometry(sector_size=1, sector_count=size, erase_size=erase, erase_value=0xFF),
                        program_and=True, **kw)


def fresh(size: int = 2 << 20, cfg: SpiffsConfig | None = None, **kw) -> SpiffsFileSystem:
    fs = SpiffsFileSystem(nor(size), cfg or SpiffsConfig(), **kw)
    fs.format()
    fs.mount()
    return fs


def erase_counts(fs: SpiffsFileSystem) -> list[int]:
    core = fs.core
    mem = fs.device
    return [int.from_bytes(mem.read(fs.offset_bytes + core.lay.erase_count_addr(b), core.lay.obj_id_len), "little")
            for b in range(core.block_count)]


# ---------------------------------------------------------------------------------------------
# configuration
# ---------------------------------------------------------------------------------------------
def test_default_config_is_esp_idf():
    c = SpiffsConfig()
    assert (c.page_size_bytes, c.block_size_bytes, c.obj_name_len, c.meta_len) == (256, 4096, 32, 4)
    assert c.use_magic and c.use_magic_len and not c.aligned_obj_ix_tables
    assert (c.obj_id_len, c.span_ix_len, c.page_ix_len, c.block_ix_len) == (2, 2, 2, 2)
    assert (c.cache_pages, c.write_cache, c.page_checks, c.gc_max_runs) == (5, True, True, 10)


def test_every_option_has_help_and_numbers_have_units():
    for info in option_info(SpiffsConfig):
        assert info.help, info.name
        if info.type == "int":
            assert info.unit, info.name


def test_config_from_mapping_and_validation():
    c = from_mapping(SpiffsConfig, {"page_size_bytes": 512, "block_size_bytes": 65536, "cache_pages": 0})
    assert c.page_size_bytes == 512 and c.cache_pages == 0
    with pytest.raises(ConfigError):
        from_mapping(SpiffsConfig, {"page_size_bytes": 300})
    with pytest.raises(ConfigError):
        from_mapping(SpiffsConfig, {"obj_id_len": 3})
    with pytest.raises(ConfigError):
        SpiffsConfig(page_size_bytes=256, block_size_bytes=512)


def test_device_must_be_byte_addressed_nor():
    with pytest.raises(ConfigError, match="byte-addressed"):
        SpiffsFileSystem(MemoryDevice.of_size(1 << 20))
    with pytest.raises(ConfigError, match="erase size"):
        SpiffsFileSystem(nor(1 << 20, erase=65536))
    with pytest.raises(ConfigError, match="does not fit"):
        SpiffsFileSystem(nor(1 << 20), size_bytes=2 << 20)


# ---------------------------------------------------------------------------------------------
# the shared conformance suite
# ---------------------------------------------------------------------------------------------
class TestSpiffsEspIdf(FileSystemSuite):
    """ESP-IDF configuration on a 2 MiB partition."""

    def make_fs(self):
        return SpiffsFileSystem(nor(2 << 20))


class TestSpiffsSmallUncached(FileSystemSuite):
    """No cache at all, 256 KiB: the space-reuse test needs garbage collection here.

    One space request collects at most gc_max_runs (10) blocks, about 37 KB, so a
    single write bigger than that fails once the free space is all in deleted
    pages -- the reference library does the same -- hence the smaller big file.
    """

    big_file_bytes = 30_000

    def make_fs(self):
        return SpiffsFileSystem(nor(256 << 10), SpiffsConfig(cache_pages=0))


class TestSpiffsPartitionNoWriteCache(FileSystemSuite):
    """A 512 KiB partition at 256 KiB inside a 1 MiB chip, read cache only, plain descriptors."""

    big_file_bytes = 30_000   # see TestSpiffsSmallUncached

    def make_fs(self):
        cfg = SpiffsConfig(write_cache=False, temporal_fd_cache=False, page_checks=False, use_mtime=False)
        return SpiffsFileSystem(nor(1 << 20), cfg, offset_bytes=256 << 10, size_bytes=512 << 10)


class TestSpiffsBigPages(FileSystemSuite):
    """512-byte pages in 64 KiB blocks (two lookup pages per block), aligned index tables."""

    def make_fs(self):
        cfg = SpiffsConfig(page_size_bytes=512, block_size_bytes=65536, aligned_obj_ix_tables=True, meta_len=7)
        return SpiffsFileSystem(nor(2 << 20, erase=4096), cfg)


def test_partition_leaves_the_rest_of_the_chip_alone():
    dev = nor(1 << 20)
    fs = SpiffsFileSystem(dev, offset_bytes=256 << 10, size_bytes=512 << 10)
    fs.format()
    fs.mount()
    with fs.open("/x.bin", "w") as f:
        f.write(bytes(range(256)) * 100)
    fs.unmount()
    assert dev.read_bytes(0, 256 << 10) == b"\xff" * (256 << 10)
    assert dev.read_bytes(768 << 10, 256 << 10) == b"\xff" * (256 << 10)


# ---------------------------------------------------------------------------------------------
# NOR flash semantics
# ---------------------------------------------------------------------------------------------
class StrictNor(MemoryDevice):
    """Refuses to program a 1 over a 0 (what a 'must erase first' model would do)."""

    def _write(self, lba, data, buf_addr):
        old = self.read_bytes(lba, len(data))
        if any(n & ~o for o, n in zip(old, data)):
            raise FileSystemError(f"strict NOR: 0->1 program at {lba}")
        super()._write(lba, data, buf_addr)


def test_spiffs_relies_on_and_semantics():
    """Deleting pages programs 0x7E over flag bytes that already have bits cleared."""
    dev = nor(256 << 10)
    trace = TraceDevice(dev, keep_data=True)
    fs = SpiffsFileSystem(trace, SpiffsConfig(use_mtime=False))
    fs.format()
    fs.mount()
    with fs.open("/f.bin", "w") as f:
        f.write(b"x" * 600)              # index header + 3 data pages
    hdr_pix = fs.core.find_by_name(b"/f.bin")
    flags_addr = hdr_pix * 256 + fs.core.codec.flags_off
    assert dev.read_bytes(flags_addr, 1) == b"\xf8"           # used, final, index
    trace.clear()
    fs.remove("/f.bin")
    flag_writes = [trace.data[e.seq] for e in trace.entries if e.op == "write" and e.lba == flags_addr]
    # first the "index being deleted" bit, then the delete mask 0x7E written blindly over 0xB8
    assert flag_writes == [b"\xb8", b"\x7e"]
    # AND: 0xF8 & 0xB8 & 0x7E; an overwriting model would leave 0x7E
    assert dev.read_bytes(flags_addr, 1) == bytes([0xF8 & 0xB8 & 0x7E])
    assert not dev.read_bytes(flags_addr, 1)[0] & (PH_FLAG_DELET | PH_FLAG_USED)
    fs.unmount()
    fs.mount()
    assert fs.listdir("/") == []


def test_strict_nor_model_breaks_spiffs():
    dev = StrictNor(Geometry(sector_size=1, sector_count=256 << 10, erase_size=4096, erase_value=0xFF))
    fs = SpiffsFileSystem(dev, SpiffsConfig(use_mtime=False))
    fs.format()
    fs.mount()
    with fs.open("/f.bin", "w") as f:
        f.write(b"x" * 600)
    with pytest.raises(FileSystemError, match="0->1"):
        fs.remove("/f.bin")


# ---------------------------------------------------------------------------------------------
# garbage collection
# ---------------------------------------------------------------------------------------------
def test_gc_reclaims_space_over_many_write_delete_cycles():
    fs = fresh(128 << 10)               # 32 blocks, 112 KiB usable by SPIFFS' own count
    total, _used = fs.info()
    rng = random.Random(7)
    static = {f"/static{i}": rng.randbytes(8000) for i in range(6)}
    for path, data in static.items():
        with fs.open(path, "w") as f:
            f.write(data)
    before = erase_counts(fs)
    written = 0
    live: dict[str, bytes] = {}
    for i in range(150):
        path = f"/c{i % 3}"
        data = rng.randbytes(rng.randrange(1, 4000))
        with fs.open(path, "w") as f:
            f.write(data)
        written += len(data)
        live[path] = data
        if i % 4 == 0:
            fs.remove(path)
            del live[path]
    after = erase_counts(fs)
    assert written > 2 * total                          # far more than fits: space was reclaimed
    assert fs.core.gc.erases > 20
    assert sum(after) > sum(before) and max(after) > max(before)
    fs.unmount()
    fs.mount()
    for path, data in {**static, **live}.items():
        with fs.open(path, "r") as f:
            assert f.read() == data, path
    assert sorted(fs.listdir("/")) == sorted(p[1:] for p in {**static, **live})


def test_full_file_system_reports_full_and_stays_consistent():
    fs = fresh(64 << 10)
    rng = random.Random(3)
    kept = {}
    with pytest.raises(SpiffsError) as exc:
        for i in range(100):
            data = rng.randbytes(3000)
            with fs.open(f"/f{i}", "w") as f:
                f.write(data)
            kept[f"/f{i}"] = data
    assert exc.value.code == "FULL"
    fs.unmount()
    fs.mount()
    for path, data in kept.items():
        with fs.open(path, "r") as f:
            assert f.read() == data
    # deleting makes room again
    for path in list(kept)[:5]:
        fs.remove(path)
    with fs.open("/again", "w") as f:
        f.write(b"y" * 3000)
    with fs.open("/again", "r") as f:
        assert f.read() == b"y" * 3000


def test_gc_quick_erases_fully_deleted_blocks():
    fs = fresh(64 << 10, SpiffsConfig(use_mtime=False))
    for i in range(12):
        with fs.open(f"/f{i}", "w") as f:
            f.write(b"z" * 3000)
    for i in range(12):
        fs.remove(f"/f{i}")
    erases = fs.core.gc.erases
    with fs.open("/big", "w") as f:
        f.write(b"q" * 20000)
    assert fs.core.gc.erases > erases
    with fs.open("/big", "r") as f:
        assert f.read() == b"q" * 20000


# ---------------------------------------------------------------------------------------------
# behaviours of the ESP-IDF configuration
# ---------------------------------------------------------------------------------------------
def test_write_cache_holds_small_writes_until_close():
    dev = nor(256 << 10)
    fs = SpiffsFileSystem(dev)
    fs.format()
    fs.mount()
    f = fs.open("/log.txt", "w")
    writes = dev.stats.writes
    for _ in range(10):
        f.write(b"0123456789abcdef")      # 160 B < one page: all cached
    assert dev.stats.writes == writes
    f.close()
    assert dev.stats.writes > writes
    with fs.open("/log.txt", "r") as f:
        assert f.read() == b"0123456789abcdef" * 10


def test_uncached_small_writes_go_to_flash():
    dev = nor(256 << 10)
    fs = SpiffsFileSystem(dev, SpiffsConfig(write_cache=False))
    fs.format()
    fs.mount()
    f = fs.open("/log.txt", "w")
    writes = dev.stats.writes
    f.write(b"0123456789abcdef")
    assert dev.stats.writes > writes
    f.close()


def test_overwrite_inside_file_r_plus():
    fs = fresh(256 << 10)
    data = bytearray(random.Random(1).randbytes(40_000))
    with fs.open("/m.bin", "w") as f:
        f.write(bytes(data))
    with fs.open("/m.bin", "r+") as f:
        f.seek(30_000)
        f.write(b"A" * 5000)                 # spans index pages 0 and 1
        f.seek(100)
        f.write(b"B" * 10)                   # partial page: copy-on-write
        f.seek(0, SEEK_END)
        f.write(b"C" * 300)                  # append
    data[30_000:35_000] = b"A" * 5000
    data[100:110] = b"B" * 10
    data += b"C" * 300
    fs.unmount()
    fs.mount()
    with fs.open("/m.bin", "r") as f:
        assert f.read() == bytes(data)
    assert fs.stat("/m.bin").size == len(data)


def test_errors_are_one_line_filesystem_errors():
    fs = fresh(128 << 10)
    with pytest.raises(FileSystemError, match="name too long"):
        fs.open("/" + "n" * 40, "w")
    with pytest.raises(FileSystemError, match="no such file"):
        fs.open("/missing", "r")
    with fs.open("/s", "w") as f:
        f.write(b"abc")
    with fs.open("/s", "r") as f:
        with pytest.raises(FileSystemError):
            f.seek(10)
        with pytest.raises(FileSystemError, match="not opened for writing"):
            f.write(b"x")
    with pytest.raises(FileSystemError):
        fs.stat("/nope")


def test_remove_closes_open_handles():
    fs = fresh(128 << 10)
    f = fs.open("/a", "w")
    f.write(b"hello")
    fs.remove("/a")
    with pytest.raises(FileSystemError, match="closed"):
        f.write(b"more")
    f.close()                               # harmless
    g = fs.open("/b", "w")                  # may reuse the descriptor slot
    f.close()
    g.write(b"ok")
    g.close()
    with fs.open("/b", "r") as h:
        assert h.read() == b"ok"


def test_too_many_open_files():
    fs = fresh(128 << 10, SpiffsConfig(max_open_files=2))
    a = fs.open("/a", "w")
    b = fs.open("/b", "w")
    with pytest.raises(SpiffsError, match="too many open files"):
        fs.open("/c", "w")
    a.close()
    b.close()


def test_mtime_is_stored_in_metadata():
    clock = VirtualClock()
    clock.advance_ns(1_700_000_000 * 10**9)
    fs = SpiffsFileSystem(nor(128 << 10, clock=clock))
    fs.format()
    fs.mount()
    with fs.open("/t", "w") as f:
        f.write(b"1")
    assert int.from_bytes(fs.stat_meta("/t"), "little") == 1_700_000_000
    fs2 = SpiffsFileSystem(nor(128 << 10), SpiffsConfig(use_mtime=False))
    fs2.format()
    fs2.mount()
    with fs2.open("/t", "w") as f:
        f.write(b"1")
    assert fs2.stat_meta("/t") == b"\xff" * 4


def test_names_with_slashes_list_like_esp_idf():
    fs = fresh(128 << 10)
    for p in ("/top.txt", "/dir/a.txt", "/dir/sub/b.txt"):
        with fs.open(p, "w") as f:
            f.write(p.encode())
    assert fs.listdir("/") == ["dir/a.txt", "dir/sub/b.txt", "top.txt"]
    assert fs.listdir("/dir") == ["a.txt", "sub/b.txt"]
    with fs.open("/dir/sub/b.txt", "r") as f:
        assert f.read() == b"/dir/sub/b.txt"


def test_mount_of_blank_flash_fails_cleanly():
    fs = SpiffsFileSystem(nor(128 << 10))
    with pytest.raises(FileSystemError, match="no SPIFFS"):
        fs.mount()
    assert not fs.mounted


def test_empty_and_single_byte_files():
    fs = fresh(128 << 10)
    with fs.open("/empty", "w"):
        pass
    assert fs.stat("/empty").size == 0
    with fs.open("/empty", "r") as f:
        assert f.read() == b"" and f.read(10) == b""
    with fs.open("/one", "a") as f:
        f.write(b"1")
    with fs.open("/one", "a") as f:
        f.write(b"2")
    with fs.open("/one", "r") as f:
        assert f.read() == b"12"
