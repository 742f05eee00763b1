"""The ``sdfat-bench`` protocol: Arduino SdFat's bench example over FAT (simulated card, memory) or a directory."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.errors import ConfigError, SdbenchError
from sdbench.importers import parse_text, sdfat
from sdbench.media.base import bottom
from sdbench.protocols import run_scenario
from sdbench.workloads.registry import protocol
from sdbench.workloads.sdfatbench import SdFatBenchConfig, put_double, sdfat_output, sketch_speed

SPI = "sdfat-bench-esp32-sdspi"
SDMMC = "sdfat-bench-esp32-sdmmc"
SMALL = ["sdfat_bench.file_bytes=65536"]       # 128 calls of 512 B, two 32 KiB clusters


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


class _Windows:
    """Timer listener: (start, stop, label) of every timed call on the stack's clock."""

    def __init__(self) -> None:
        self.out: list[tuple[int, int, str]] = []
        self.clock = None

    def timer_start(self, label: str) -> None:
        self._t0 = self.clock.now_ns()

    def timer_stop(self, label: str) -> None:
        self.out.append((self._t0, self.clock.now_ns(), label))


def _traced(name: str, sets: list[str]):
    sc = scen.load(name, [*sets, "sd.log_commands=true"])
    win = _Windows()
    built = []

    def on_built(b):
        built.append(b)
        win.clock = b.clock

    rec = run_scenario(sc, listeners=(win,), on_built=on_built)
    return rec, win.out, bottom(built[0].target.sd_device).log


def _in(log, a, b):
    return [e for e in log if a <= e.t_ns < b]


# ---- the sequence, command by command ---------------------------------------------------------------

def test_write_and_read_passes_at_the_command_level():
    rec, windows, log = _traced(SPI, SMALL)
    n = 128
    assert [lab for _, _, lab in windows] == ["sdfat write"] * 2 + ["sdfat read"] * 2
    data_lbas = None
    for a, b, lab in windows:
        ev = _in(log, a, b)
        names = [e.name for e in ev]
        assert not {"CMD18", "CMD25", "CMD12"} & set(names)   # FatFs moves a 512-byte call as one block
        if lab == "sdfat write":
            # one CMD24 per call, the card's busy polled with CMD13 after each, then the sync: the directory
            # entry (read, written); the FAT sector at most once, when the chain moves to the next cluster
            writes = [e for e in ev if e.name == "CMD24"]
            assert len(writes) == n + 1 and names.count("CMD13") >= n + 1
            lbas = [e.arg for e in writes[:n]]
            assert lbas == list(range(lbas[0], lbas[0] + n))        # the pre-allocated clusters, in order
            assert data_lbas in (None, lbas)                        # every pass overwrites them in place
            data_lbas = lbas
            assert names[-3:-1] == ["CMD17", "CMD24"] and writes[-1].arg not in lbas
            assert 1 <= names.count("CMD17") <= 2
        else:
            # one CMD17 per call over the same sectors, in order; the FAT sector at most once
            reads = [e.arg for e in ev if e.name == "CMD17"]
            assert [x for x in reads if x >= data_lbas[0]] == data_lbas and len(reads) <= n + 1
            assert set(names) == {"CMD17"}
    # the row counters say the same per pass
    w, r = rec.rows
    assert w.commands["CMD24"] == n + 1 and r.commands["CMD17"] <= n + 1
    # block-device counters over both passes: the data sectors and the directory entry; no data read back
    assert w.counters["writes"] == 2 * (n + 1) and w.counters["bytes_written"] == 2 * (n + 1) * 512
    assert 2 * n <= r.counters["reads"] <= 2 * (n + 1) and "writes" not in r.counters


def test_rows_units_and_metadata():
    rec = run_scenario(scen.load(SDMMC, ["sdfat_bench.file_bytes=262144", "sdfat_bench.runs=2"]))
    assert rec.protocol == "sdfat-bench" and rec.clock == "virtual"
    assert [r.label for r in rec.rows] == ["sdfat write", "sdfat read"]
    for row in rec.rows:
        assert row.unit == "KB/s" and row.bytes == 262144 and row.runs == 4   # 2 runs x 2 passes
        assert row.value == pytest.approx(262144 / row.time_ms)
    m = rec.metadata["sdfat_bench"]
    assert (m["file_bytes"], m["buf_bytes"], m["moved_bytes"], m["runs"]) == (262144, 512, 262144, 2)
    assert m["fs_type"] == "FAT32" and m["card_bytes"] == 16_000_000_000
    for label, row in zip(("sdfat write", "sdfat read"), rec.rows):
        info = m["rows"][label]
        assert info["calls_per_pass"] == 512 and len(info["passes"]) == 4
        for p, t in zip(info["passes"], row.samples_ms):
            assert p["ms"] == pytest.approx(t, abs=1.0)   # millis(): whole ms
            assert p["kb_s"] == pytest.approx(262144 / p["ms"], rel=1e-6)
            assert 0 < p["min_us"] <= p["avg_us"] <= p["max_us"] < 1_000_000
    assert protocol("sdfat-bench").timed_calls(scen.load(SDMMC, ["sdfat_bench.runs=2"])) == 8


def test_runs_sets_the_sketch_runs_and_the_run_is_deterministic():
    assert protocol("sdfat-bench").runs_option == "sdfat_bench.runs"
    a = run_scenario(scen.load(SPI, SMALL))
    b = run_scenario(scen.load(SPI, SMALL))
    assert a.to_dict() == b.to_dict()
    other = run_scenario(scen.load(SPI, [*SMALL, "seed=2"]))
    assert [r.label for r in other.rows] == [r.label for r in a.rows]


def test_runs_on_the_command_line_adds_whole_runs(capsys):
    code = main(["run", SPI, "--set", "sdfat_bench.file_bytes=65536", "--runs", "2", "--no-save", "--no-range",
                 "-q", "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    run = json.loads(out)["runs"][0]
    assert [r["runs"] for r in run["rows"]] == [4, 4] and run["metadata"]["sdfat_bench"]["runs"] == 2


def test_without_pre_allocation_the_writes_allocate_clusters():
    pre = run_scenario(scen.load(SPI, ["sdfat_bench.file_bytes=262144"]))
    grow = run_scenario(scen.load(SPI, ["sdfat_bench.file_bytes=262144", "sdfat_bench.pre_allocate=false"]))
    # FAT sector writes happen inside the timed passes only when the chain grows there
    assert grow.rows[0].commands["CMD24"] > pre.rows[0].commands["CMD24"]
    assert grow.metadata["sdfat_bench"]["pre_allocate"] is False


# ---- the sketch's text output and the importer ------------------------------------------------------

def _same_rows(a, b):
    assert [(r.label, r.op, r.bytes, r.unit, r.runs) for r in a.rows] == \
           [(r.label, r.op, r.bytes, r.unit, r.runs) for r in b.rows]
    for x, y in zip(a.rows, b.rows):
        assert all(abs(s - t) <= 1.0 for s, t in zip(x.samples_ms, y.samples_ms))   # the sketch's 1 ms


@pytest.mark.parametrize("sets", [
    ["sdfat_bench.file_bytes=262144"],                                   # FILE_SIZE_MB = 0.262144
    ["sdfat_bench.file_bytes=1000000", "sdfat_bench.runs=2"],            # n x 512 = 999936 B moved per pass
    ["sdfat_bench.file_bytes=300000", "sdfat_bench.buf_bytes=4096", "sdfat_bench.read_passes=3"],
])
def test_text_output_imports_back_into_the_same_rows(sets):
    rec = run_scenario(scen.load(SPI, sets))
    text = sdfat_output(rec)
    lines = text.splitlines()
    assert lines[:4] == ["", "Use a freshly formatted SD for best performance.", "", "Type any character to start"]
    assert "Type is FAT32" in lines and "Card size: 16.00 GB (GB = 1E9 bytes)" in lines
    assert lines[-2:] == ["Done", "Type any character to start"]
    i = lines.index("write speed and latency")
    assert lines[i - 2:i + 3] == ["Starting write test, please wait.", "", "write speed and latency",
                                  "speed,max,min,avg", "KB/Sec,usec,usec,usec"]
    j = lines.index("read speed and latency")
    assert lines[j - 3:j + 3] == ["", "Starting read test, please wait.", "", "read speed and latency",
                                  "speed,max,min,avg", "KB/Sec,usec,usec,usec"]
    fmt, [back] = parse_text(text, name="bench.txt")
    assert fmt == "sdfat"
    _same_rows(rec, back)
    m = rec.metadata["sdfat_bench"]
    assert back.metadata["runs"] == m["runs"] and back.metadata["buf_bytes"] == m["buf_bytes"]
    for label in ("sdfat write", "sdfat read"):
        ours = [(p["max_us"], p["min_us"], p["avg_us"]) for p in m["rows"][label]["passes"]]
        theirs = [(p["max_us"], p["min_us"], p["avg_us"]) for p in back.metadata["rows"][label]["passes"]]
        assert ours == theirs
    assert back.stack["fs_type"] == "FAT32"


def test_published_output_renders_and_imports_back():
    text = (Path(__file__).parent / "data" / "sdfat_bench_esp32.txt").read_text()
    [rec] = sdfat.parse(text)
    again = sdfat_output(rec)
    assert "Manufacturer ID: 0X3" in again and "2850.63,9120,174,177" in again and "FILE_SIZE_MB = 5" in again
    [back] = sdfat.parse(again)
    _same_rows(rec, back)
    assert back.metadata["device"] == rec.metadata["device"]


def test_printing_follows_the_sketch():
    assert put_double(2850.627) == "2850.63" and put_double(0.004) == "0.00" and put_double(5e9) == "BIG FLT"
    assert put_double(sketch_speed(4_999_680, 1754)) == "2850.44"      # float s / uint32 t
    assert put_double(sketch_speed(4_999_680, 0)) == "BIG FLT"
    # FILE_SIZE = 5 MB, BUF_SIZE 512: the current sketch prints n x 512 / t, older ones 5,000,000 / t
    for speed in (sketch_speed(4_999_680, 7669), 5_000_000 / 7669):
        text = ("FILE_SIZE_MB = 5\nBUF_SIZE = 512 bytes\nwrite speed and latency\nspeed,max,min,avg\n"
                f"KB/Sec,usec,usec,usec\n{put_double(speed)},900,700,800\n\nread speed and latency\n"
                f"speed,max,min,avg\nKB/Sec,usec,usec,usec\n{put_double(speed)},900,700,800\n\nDone\n")
        [rec] = sdfat.parse(text)
        assert rec.rows[0].samples_ms == (7669.0,)


# ---- a directory -----------------------------------------------------------------------------------

def test_directory_run_leaves_nothing_behind(tmp_path, capsys):
    d = tmp_path / "mnt"
    d.mkdir()
    (d / "mine.txt").write_text("keep")
    code = main(["run", SPI, "--set", "sdfat_bench.file_bytes=65536", "--dir", str(d), "--no-save", "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    run = json.loads(out)["runs"][0]
    assert run["clock"] == "wall" and [r["label"] for r in run["rows"]] == ["sdfat write", "sdfat read"]
    assert all(r["unit"] == "KB/s" and r["bytes"] == 65536 and r["runs"] == 2 for r in run["rows"])
    m = run["metadata"]["sdfat_bench"]
    assert len(m["rows"]["sdfat read"]["passes"]) == 2 and "fs_type" not in m
    assert sorted(os.listdir(d)) == ["mine.txt"]


def test_directory_with_a_bench_file_is_refused(tmp_path, capsys):
    d = tmp_path / "mnt"
    d.mkdir()
    (d / "BENCH.DAT").write_text("someone's")
    code = main(["run", SPI, "--set", "sdfat_bench.file_bytes=65536", "--dir", str(d), "--no-save"])
    _, err = capsys.readouterr()
    assert code == 2 and "BENCH.DAT exists already" in err and len(err.strip().splitlines()) == 1
    assert (d / "BENCH.DAT").read_text() == "someone's"


# ---- refusals before any I/O ------------------------------------------------------------------------

@pytest.mark.parametrize("sets,msg", [
    (["sdfat_bench.sketch=sdio-demo", "sdfat_bench.buf_bytes=3072", "sdfat_bench.pre_allocate=false",
      "sdfat_bench.write_passes=1", "sdfat_bench.read_passes=1"], "BUF_DIM is a power of two from 512 B"),
    (["sdfat_bench.sketch=sdio-demo", "sdfat_bench.buf_bytes=4096"], "set pre_allocate = false, write_passes = 1"),
    (["sdfat_bench.buf_bytes=4"], "sdfat_bench.buf_bytes"),
    (["sdfat_bench.file_bytes=1024", "sdfat_bench.buf_bytes=2048"], "larger than file_bytes"),
    (["sdfat_bench.buf_bytes=4194304"], "sdfat_bench.buf_bytes"),
    (["sdfat_bench.write_passes=0"], "sdfat_bench.write_passes"),
    (["sdfat_bench.file_bytes=5000000000"], "sdfat_bench.file_bytes"),
])
def test_bad_options_are_refused_when_the_scenario_loads(sets, msg):
    with pytest.raises(ConfigError, match=msg):
        scen.load(SPI, sets)


def test_a_file_larger_than_the_volume_is_refused_before_any_io(tmp_path, capsys):
    path = _write(tmp_path, "small.toml", """protocol = "sdfat-bench"
[sdfat_bench]
file_bytes = 3_000_000
[sd]
media = "memory"
capacity_bytes = 2_097_152
""")
    with pytest.raises(ConfigError, match=r"sdfat_bench.file_bytes = 3000000 B .* more than the FAT volume"):
        run_scenario(scen.load(path))
    assert main(["run", path, "--no-save"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "sdfat_bench.file_bytes" in err


def test_memory_device_runs_on_the_wall_clock(tmp_path):
    path = _write(tmp_path, "mem.toml", """protocol = "sdfat-bench"
[sdfat_bench]
file_bytes = 131072
buf_bytes = 4096
[sd]
media = "memory"
capacity_bytes = 268435456
""")
    rec = run_scenario(scen.load(path))
    assert rec.clock == "wall" and [r.runs for r in rec.rows] == [2, 2]
    assert rec.metadata["sdfat_bench"]["rows"]["sdfat write"]["calls_per_pass"] == 32


def test_defaults_and_scenarios():
    cfg = SdFatBenchConfig()
    assert (cfg.file_bytes, cfg.buf_bytes, cfg.write_passes, cfg.read_passes, cfg.pre_allocate, cfg.runs) == \
           (5_000_000, 512, 2, 2, True, 1)
    assert (cfg.calls, cfg.moved_bytes) == (9765, 4_999_680)
    spi, mmc = scen.load(SPI), scen.load(SDMMC)
    assert spi.sd["host"] == "esp32s3-sdspi" and spi.sd["bus"] == {"kind": "spi", "clock_hz": 20_000_000}
    assert "SDSPI" in spi.description and "not SdFat's own SPI driver" in spi.description
    assert mmc.sd["host"] == "esp32-sdmmc" and mmc.sd["bus"] == {"kind": "sd4", "clock_hz": 40_000_000}
    assert protocol(spi.protocol).config_of(spi) == cfg


def test_list_protocols_shows_sdfat_bench(capsys):
    assert main(["list", "protocols"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("| sdfat-bench |"))
    assert "device, dir, image, memory, sim |" in line and "sdfat_bench.runs" in line


def test_a_flash_only_or_empty_stack_is_refused(tmp_path):
    path = _write(tmp_path, "none.toml", 'protocol = "sdfat-bench"\n')
    with pytest.raises(SdbenchError, match="needs an \\[sd\\] device or a directory"):
        run_scenario(scen.load(path))


def test_sdfat_bench_on_the_arduino_esp32_spi_host_imports_back():
    # SdFat's own SPI driver on an ESP32 (Arduino core): the text it prints reads back into the same rows
    rec = run_scenario(scen.load("sdfat-bench-arduino-esp32-sdfat-spi", ["sdfat_bench.file_bytes=131072"]))
    assert rec.stack["sd"]["host"]["driver"] == "sdfat-spi"
    fmt, [back] = parse_text(sdfat_output(rec), name="bench.txt")
    assert fmt == "sdfat"
    _same_rows(rec, back)


# ---- rows per pass, TeensySdioDemo's sweep, SdFat's sector cache ---------------------------------------------

DEMO = ["sdfat_bench.sketch=sdio-demo", "sdfat_bench.buf_bytes=2048", "sdfat_bench.file_bytes=65536",
        "sdfat_bench.pre_allocate=false", "sdfat_bench.write_passes=1", "sdfat_bench.read_passes=1"]


def test_pass_rows_give_every_pass_a_row_of_its_own():
    rec = run_scenario(scen.load(SPI, [*SMALL, "sdfat_bench.pass_rows=true", "sdfat_bench.read_passes=3"]))
    assert [r.label for r in rec.rows] == ["sdfat write 512 B pass 1", "sdfat write 512 B pass 2",
                                           "sdfat read 512 B pass 1", "sdfat read 512 B pass 2",
                                           "sdfat read 512 B pass 3"]
    m = rec.metadata["sdfat_bench"]["rows"]
    times = [p["ms"] for p in m["sdfat write"]["passes"] + m["sdfat read"]["passes"]]
    assert all(r.runs == 1 for r in rec.rows)
    assert [round(r.time_ms) for r in rec.rows] == pytest.approx(times, abs=1)
    again = run_scenario(scen.load(SPI, [*SMALL, "sdfat_bench.pass_rows=true", "sdfat_bench.runs=2"]))
    assert [r.runs for r in again.rows] == [2, 2, 2, 2], "each run adds a sample to its pass's row"


def test_the_sdio_demo_sweeps_its_sizes_and_prints_its_table():
    rec, windows, log = _traced(SPI, DEMO)
    sizes = [512, 1024, 2048]
    assert [r.label for r in rec.rows] == [f"sdfat {op} {b} B" for b in sizes for op in ("write", "read")]
    assert [lab for _, _, lab in windows] == [r.label for r in rec.rows]
    for row in rec.rows:
        assert row.bytes == 65536 and row.runs == 1 and row.value == pytest.approx(65536 / row.time_ms)
    m = rec.metadata["sdfat_bench"]
    assert m["sketch"] == "sdio-demo" and m["sizes"] == sizes
    for a, b, lab in windows:
        names = [e.name for e in _in(log, a, b)]
        if lab.startswith("sdfat write"):
            assert "CMD17" in names, "no pre-allocation: the FAT is read as the chain grows in the timed pass"
    text = sdfat_output(rec)
    lines = text.splitlines()
    assert lines[1:3] == ["size,write,read", "bytes,KB/sec,KB/sec"] and lines[-1] == "Done"
    for b, line in zip(sizes, lines[3:6]):
        size, w, r = line.split(",")
        assert int(size) == b and float(w) == pytest.approx(m["rows"]["sdfat write"]["passes"][sizes.index(b)]["kb_s"],
                                                              abs=0.01)
    assert protocol("sdfat-bench").timed_calls(scen.load(SPI, DEMO)) == 6


def test_the_sdio_demo_runs_on_an_sd_device_only(tmp_path, capsys):
    d = tmp_path / "mnt"
    d.mkdir()
    code = main(["run", SPI, *[x for kv in DEMO for x in ("--set", kv)], "--dir", str(d), "--no-save"])
    err = capsys.readouterr().err
    assert code == 2 and "that sketch runs on an [sd] device (FAT) only" in err, err
    assert os.listdir(d) == []


@pytest.mark.parametrize("buf", [511, 64])
def test_partial_sector_calls_go_through_sdfat_cache(buf):
    """SdFat reserves a pre-allocated sector in its cache without reading it and writes it as soon as a call fills
    it (FatFs would read every sector first): the write passes are one write stream, sector after sector, and
    the read passes read each sector once."""
    file_bytes = 32768
    rec, windows, log = _traced("sdfat-bench-rp2040-sdfat-spi", [f"sdfat_bench.buf_bytes={buf}",
                                                                 f"sdfat_bench.file_bytes={file_bytes}"])
    n = file_bytes // buf
    for a, b, lab in windows:
        ev = _in(log, a, b)
        names = [e.name for e in ev]
        blocks = sum(e.nbytes for e in ev if e.name in ("DATA", "CMD25", "CMD18")) // 512
        if lab == "sdfat write":
            assert not {"CMD17", "CMD18"} & set(names), "no sector is read before it is written"
            # one stream of the file's sectors, in order; the close then writes the directory entry
            first = names.index("CMD25")
            stream = names[first + 1:names.index("STOP_TRAN", first)]
            assert set(stream) == {"DATA"} and len(stream) + 1 == -(-n * buf // 512), names
            assert names.count("CMD25") == 2 and blocks == -(-n * buf // 512) + 1
        else:
            assert not {"CMD24", "CMD25"} & set(names)
            assert blocks == -(-n * buf // 512), "every sector read once, through the cache"
    m = rec.metadata["sdfat_bench"]["rows"]["sdfat write"]
    assert m["calls_per_pass"] == n


def test_sdfat_cache_reads_a_sector_a_write_rewrites_in_part():
    from sdbench.fs.fat import FatConfig, FatFileSystem
    from sdbench.media.memory import MemoryDevice
    from sdbench.media.base import Geometry
    from sdbench.workloads.sdfatfile import SdFatFile

    dev = MemoryDevice(Geometry(sector_size=512, sector_count=131072))
    fs = FatFileSystem(dev, FatConfig())
    fs.format()
    fs.mount()
    try:
        f = fs.open("/a.bin", "w")
        sf = SdFatFile(f, lambda n: None, preallocated=False)
        assert sf.write(bytes(range(256)) * 4) == 1024          # two whole sectors: straight
        reads = dev.stats.reads
        sf.seek(100)
        sf.write(b"x" * 10)                                      # inside the file: the sector is read first
        sf.sync()
        assert dev.stats.reads == reads + 1, "the sector a write rewrites in part is read first, once"
        sf.seek(0)
        got = sf.read(1024)
        assert got[:100] == (bytes(range(256)) * 4)[:100] and got[100:110] == b"x" * 10
        assert got[110:] == (bytes(range(256)) * 4)[110:]
        reads = dev.stats.reads
        sf.seek(1024)
        sf.write(b"end")                                         # past the end: reserved, not read
        sf.sync()
        assert dev.stats.reads == reads
        f.close()
        g = fs.open("/a.bin", "r")
        assert g.read(1027)[1024:] == b"end"
        g.close()
    finally:
        fs.unmount()


@pytest.mark.parametrize("buf", [64, 100, 511])
def test_calls_inside_the_cached_sector_take_the_short_path_with_the_same_results(monkeypatch, buf):
    # small calls (the 64-byte BUF_SIZE: millions in a 100 MB pass) are served inside SdFat's cached sector by a
    # short path; it must give the record the general path gives, ranges (re-priced from a recording) included
    from sdbench.workloads.sdfatfile import SdFatFile
    sc = scen.load("pico2-sdfat-sdio-150mhz-64b", ["sdfat_bench.file_bytes=65536", f"sdfat_bench.buf_bytes={buf}"])
    short = run_scenario(sc, ranges=True)
    monkeypatch.setattr(SdFatFile, "small_call_path", False)
    general = run_scenario(sc, ranges=True)
    assert short.rows == general.rows
    assert short.metadata == general.metadata


def test_short_reads_stop_before_a_call_whose_check_fails():
    # the sketch checks each read buffer's last byte: a batch of short reads must leave a failing call to the
    # general path, which raises at its offset
    from sdbench.clock import VirtualClock
    from sdbench.fs.costed import CostedFileSystem
    from sdbench.fs.fat import FatConfig, FatFileSystem
    from sdbench.media import MemoryDevice
    from sdbench.workloads.sdfatbench import _check_read, _ends_a_line
    from sdbench.workloads.sdfatfile import SdFatFile
    clock = VirtualClock()
    fs = CostedFileSystem(FatFileSystem(MemoryDevice.of_size(32 << 20), FatConfig(fat_type="fat16")), clock, 1000.0)
    fs.format()
    fs.mount()
    line = b"x" * 63 + b"\n"
    data = bytearray(line * 16)
    data[5 * 64 + 63] = ord("?")  # the sixth 64-byte call's last byte
    with fs.open("/a.bin", "w") as f:
        f.write(bytes(data))
    f = fs.open("/a.bin", "r")
    sf = SdFatFile(f, lambda n, times=1: None, preallocated=False)
    _check_read(sf.read(64), 64, 0)                 # the general path reads the sector into the cache
    assert sf.short_reads(64, 100, _ends_a_line) == 4  # calls 2-5; the sixth fails its check
    t = clock.now_ns()
    assert sf.tell() == 5 * 64
    at = sf.tell()
    with pytest.raises(SdbenchError, match="data check error at offset 320"):
        _check_read(sf.read(64), 64, at)
    assert clock.now_ns() == t + 1000               # one call charged
    f.close()
    fs.unmount()
