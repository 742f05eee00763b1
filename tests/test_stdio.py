"""newlib's stdio layer (api = "stdio"): FILE buffering as newlib does it, its per-call costs on the clock and in
the cost ledger (re-priced like every other charge), the workload option and the esp_littlefs benchmark
scenarios."""
from __future__ import annotations

from dataclasses import replace

import pytest

from sdbench import protocols
from sdbench import scenarios as scen
from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.fs.fat import FatConfig, FatFile, FatFileSystem
from sdbench.fs.littlefs import LittleFsConfig, LittleFsFile, LittleFsFileSystem
from sdbench.fs.stdio import StdioFileSystem, StdioHost, StdioOptions
from sdbench.ledger import Recording
from sdbench.media import Geometry, MemoryDevice
from sdbench.media.sim.host import HostProfile
from sdbench.media.sim.newlib import NewlibStdio
from sdbench.protocols import run_scenario
from sdbench.repricing import check_replay, replayed_rows
from sdbench.stack.target import Target
from sdbench.testing import FileSystemSuite
from sdbench.workloads.fileworkload import load_options

HOST = HostProfile(cpu_hz=160_000_000)
LINE = b"All work and no play makes Jack a dull boy.\n"
BENCH = "esp-littlefs-bench-littlefs"


def flash_littlefs() -> LittleFsFileSystem:
    dev = MemoryDevice(Geometry(sector_size=1, sector_count=1 << 20, erase_size=4096, erase_value=0xFF),
                       program_and=True)
    return LittleFsFileSystem(dev, LittleFsConfig(read_size=128, prog_size=128, block_size=4096))


def small_fat() -> FatFileSystem:
    return FatFileSystem(MemoryDevice.of_size(32 << 20), FatConfig(fat_type="fat16", allocation_unit_bytes=2048))


def with_stdio(fs, clock=None, host=HOST, **options) -> StdioFileSystem:
    return StdioFileSystem(fs, clock or VirtualClock(), StdioHost("sd.host", host), StdioOptions(**options))


class TestStdioLittleFs(FileSystemSuite):
    """Through fwrite/fread with the filesystem's st_blksize as the buffer: every call of the suite as the
    filesystem underneath gives it."""

    def make_fs(self):
        return with_stdio(flash_littlefs())


class TestStdioFatByCharacter(FileSystemSuite):
    """Through fprintf and fgetc with an odd setvbuf size, so buffer boundaries fall everywhere."""

    def make_fs(self):
        return with_stdio(small_fat(), write_call="fprintf", read_call="fgetc", buffer_bytes=100)


@pytest.fixture
def vfs_calls(monkeypatch):
    """The read()/write() calls that reach the filesystem below the FILE layer: (kind, bytes asked, bytes moved)."""
    seen: list[tuple[str, int, int]] = []
    for cls in (LittleFsFile, FatFile):
        write, read = cls.write, cls.read

        def spy_write(self, data, *, buf_addr=0, _w=write):
            seen.append(("write", len(data), len(data)))
            return _w(self, data, buf_addr=buf_addr)

        def spy_read(self, size=-1, *, buf_addr=0, _r=read):
            got = _r(self, size, buf_addr=buf_addr)
            seen.append(("read", size, len(got)))
            return got
        monkeypatch.setattr(cls, "write", spy_write)
        monkeypatch.setattr(cls, "read", spy_read)
    return seen


def _bench_file(fs: StdioFileSystem) -> tuple[bytes, int]:
    """The benchmark's file: 2000 fprintf of the 44-byte line, then fgetc to EOF; (data, fgetc calls)."""
    fs.format()
    fs.mount()
    with fs.open("/0.txt", "w") as f:
        for _ in range(2000):
            f.fprintf(LINE)
    with fs.open("/0.txt", "r") as f:
        got, calls = [], 0
        while True:
            c = f.fgetc(1)
            calls += 1
            if not c:
                break
            got.append(c)
    return b"".join(got), calls


@pytest.mark.parametrize("honour, size", [(False, 128), (True, 4096)])
def test_lines_and_characters_move_in_buffer_sized_calls(vfs_calls, honour, size):
    """fprintf lines collect into buffer-sized write()s (the rest at fclose); fgetc refills with reads of the
    buffer's size until one returns 0, and the call that meets EOF is the 88,001st."""
    host = replace(HOST, stdio=NewlibStdio(honour_blksize=honour))
    fs = with_stdio(flash_littlefs(), host=host)
    assert fs.buffer_bytes() == size  # BUFSIZ where st_blksize is not honoured, esp_littlefs' block size where it is
    data, calls = _bench_file(fs)
    assert data == LINE * 2000 and calls == 88_001
    full, rest = divmod(88_000, size)
    assert [c for c in vfs_calls if c[0] == "write"] == [("write", size, size)] * full + [("write", rest, rest)]
    reads = [c for c in vfs_calls if c[0] == "read"]
    assert reads == [("read", size, size)] * full + [("read", size, rest), ("read", size, 0)]


def test_setvbuf_and_each_filesystems_st_blksize():
    host = HOST  # honours st_blksize
    assert with_stdio(flash_littlefs(), host=host).buffer_bytes() == 4096
    assert with_stdio(small_fat(), host=host).buffer_bytes() == 128  # CONFIG_FATFS_VFS_FSTAT_BLKSIZE = 0
    fat4k = replace(HOST, stdio=NewlibStdio(fat_fstat_blksize_bytes=4096))
    assert with_stdio(small_fat(), host=fat4k).buffer_bytes() == 4096
    assert with_stdio(small_fat(), host=host, buffer_bytes=512).buffer_bytes() == 512


def test_a_large_fwrite_from_an_empty_buffer_goes_down_in_whole_buffers(vfs_calls):
    fs = with_stdio(flash_littlefs(), host=replace(HOST, stdio=NewlibStdio(honour_blksize=False)))
    fs.format()
    fs.mount()
    with fs.open("/a", "w") as f:
        f.fwrite(b"x" * 1000)   # 896 directly, 104 buffered
        f.fwrite(b"y" * 100)    # fills to 128 at 24 bytes: a write of 128, 76 buffered
        f.fflush()              # fflush writes, no fsync
    assert [n for k, n, _ in vfs_calls if k == "write"] == [896, 128, 76]
    with fs.open("/a", "r") as f:
        assert f.fread(-1) == b"x" * 1000 + b"y" * 100


def test_every_call_charges_its_fields_and_nothing_else():
    """The ledger holds each stdio field as count x its cycles at cpu_hz; the clock moved by exactly that (the
    memory device takes no time)."""
    clock = VirtualClock()
    s = HOST.stdio
    fs = with_stdio(flash_littlefs(), clock=clock, host=replace(HOST, stdio=NewlibStdio(honour_blksize=False)))
    _bench_file(fs)
    led = clock.ledger_ns()
    ns = 1e9 / HOST.cpu_hz

    def count(field: str, each: float) -> float:  # the clock keeps whole ns per charge (up to 0.5 ns off each)
        return pytest.approx(led[f"sd.host.stdio.{field}"] / (each * ns), rel=5e-3)

    assert count("getc_cycles", s.getc_cycles) == 88_001
    assert count("lock_cycles", s.lock_cycles) == 2000 + 88_001 + 2  # fprintf, fgetc, 2 fclose
    assert count("fprintf_cycles", s.fprintf_cycles) == 2000
    assert count("format_cycles_per_byte", s.format_cycles_per_byte) == 88_000
    assert count("copy_cycles_per_byte", s.copy_cycles_per_byte) == 88_000
    assert count("io_cycles", s.io_cycles) == 688 + 689  # write()s, read()s
    assert count("fopen_cycles", s.fopen_cycles) == 2
    assert sum(led.values()) == pytest.approx(clock.now_ns(), abs=len(led))


def test_api_stdio_needs_a_simulated_host():
    target = Target(fs_factories={"x": small_fat}, clock=VirtualClock())
    assert not isinstance(target.make_fs("x"), StdioFileSystem)
    with pytest.raises(ConfigError, match="workload.api = stdio models newlib on a simulated host"):
        target.make_fs("x", "stdio", where="workload.api")
    target.hosts["x"] = StdioHost("sd.host", HOST)
    assert isinstance(target.make_fs("x", "stdio"), StdioFileSystem)


def test_stdio_options_without_the_api_are_refused():
    with pytest.raises(ConfigError, match="workload.stdio: set without workload.api"):
        load_options({"stdio": {"read_call": "fgetc"}})
    # an api given as posix (--set over a stdio scenario) runs posix, the table unused
    assert load_options({"api": "posix", "stdio": {"read_call": "fgetc"}}).api == "posix"
    with pytest.raises(ConfigError, match="workload.stdio.read_call"):
        load_options({"api": "stdio", "stdio": {"read_call": "getc"}})


def _one_file(name: str, *sets: str):
    return scen.load(name, ["workload.count=1", *sets])


def test_fgetc_read_costs_the_modelled_per_character_path():
    """esp_littlefs' read of an 88,000-byte file with fgetc on the ESP32 flash target: the row's time is the
    per-character path (88,001 lock pairs and fgetc bodies), 689 refills of BUFSIZ through the VFS, fopen and
    fclose, and the flash reads; the per-character path is most of it."""
    rec = run_scenario(_one_file(BENCH))
    row = rec.row("read")
    host = rec.stack["flash"]["host"]
    cpu, st = host["cpu_hz"], host["stdio"]
    ms = 1e3 / cpu
    led = rec.metadata["ledger"]["read"]
    per_char = 88_001 * (st["lock_cycles"] + st["getc_cycles"]) * ms
    assert led["flash.host.stdio.getc_cycles"] == pytest.approx(88_001 * st["getc_cycles"] * ms, rel=1e-3)
    assert led["flash.host.stdio.lock_cycles"] == pytest.approx((88_001 + 1) * st["lock_cycles"] * ms, rel=1e-3)
    assert led["flash.host.stdio.io_cycles"] == pytest.approx(689 * st["io_cycles"] * ms, rel=1e-3)
    fs_call = rec.stack["flash"].get("fs_call_cycles", 6000)
    assert led["flash.fs_call_cycles"] == pytest.approx(689 * fs_call * ms, rel=1e-3)
    assert sum(led.values()) == pytest.approx(row.time_ms, rel=5e-3)
    assert per_char / row.time_ms > 0.8
    assert rec.metadata["workload"]["stdio"]["file_buffer_bytes"] == 128  # ESP32: ROM stdio, BUFSIZ


def test_a_stdio_run_re_prices_with_other_stdio_figures():
    """A recorded stdio run replays to its own rows, and to a run's rows with another lock cost."""
    sc = _one_file(BENCH)
    rec = Recording()
    central = protocols._run_once(sc, recording=rec).rows
    assert rec.repriceable, rec.reasons
    assert check_replay(sc, rec, central) == ""
    other = _one_file(BENCH, "flash.host_params.stdio.lock_cycles=1400")
    priced = replayed_rows(other, rec, central)
    ran = protocols._run_once(other).rows
    for a, b in zip(priced, ran):
        assert a.time_ms == pytest.approx(b.time_ms, rel=1e-3), a.label
    assert priced[3].time_ms > central[3].time_ms * 1.5  # the read row doubles its lock cost


@pytest.mark.parametrize("fs", ["fat", "spiffs", "littlefs"])
def test_the_benchmark_scenarios_run(fs):
    rec = run_scenario(_one_file(f"esp-littlefs-bench-{fs}"))
    assert [r.label for r in rec.rows] == ["format", "mount", "write", "read", "delete"]
    assert rec.row("write").bytes == rec.row("read").bytes == 88_000
    assert rec.metadata["workload"]["api"] == "stdio"


@pytest.mark.slow
@pytest.mark.parametrize("fs", ["fat", "spiffs", "littlefs"])
def test_the_benchmark_scenarios_run_whole(fs):
    rec = run_scenario(scen.load(f"esp-littlefs-bench-{fs}"))
    assert rec.row("read").runs == (4 if fs == "spiffs" else 5)
