"""The ESP-IDF perf_benchmark protocol, checked through the trace wrapper."""
from __future__ import annotations

import random

import pytest

from sdbench.fs.base import File, FileStat, FileSystem
from sdbench.fs.fat import FatConfig, FatFileSystem
from sdbench.fs.littlefs import LittleFsConfig, LittleFsFileSystem
from sdbench.media import MemoryDevice, TraceDevice
from sdbench.runner import Context
from sdbench.clock import WallClock
from sdbench.workloads import espidf
from sdbench.stack import Target
from sdbench.workloads.espidf import EspIdfConfig, espidf_line


class SpyFile(File):
    def __init__(self, fs, inner, path, mode):
        super().__init__(fs, path, mode)
        self.inner = inner

    def read(self, size=-1, *, buf_addr=0):
        data = self.inner.read(size, buf_addr=buf_addr)
        self.fs.reads.append((self.path, self.inner.tell() - len(data), data))
        return data

    def write(self, data, *, buf_addr=0):
        self.fs.writes.append((self.path, self.inner.tell(), bytes(data)))
        return self.inner.write(data, buf_addr=buf_addr)

    def seek(self, offset, whence=0):
        return self.inner.seek(offset, whence)

    def tell(self):
        return self.inner.tell()

    def _close(self):
        self.inner.close()
        self.fs.trace.mark(f"close {self.path}")


class SpyFs(FileSystem):
    """Passes through to a real filesystem; logs file calls into the device trace."""

    kind = "spy"

    def __init__(self, inner: FileSystem, trace: TraceDevice):
        super().__init__(inner.device)
        self.inner, self.trace = inner, trace
        self.opens, self.reads, self.writes = [], [], []

    def _format(self):
        self.inner.format()

    def _mount(self):
        self.inner.mount()

    def _unmount(self):
        self.inner.unmount()

    def _open(self, path, mode):
        self.trace.mark(f"open {path} {mode}")
        self.opens.append((path, mode))
        return SpyFile(self, self.inner.open(path, mode), path, mode)

    def _stat(self, path) -> FileStat:
        return self.inner.stat(path)

    def _remove(self, path):
        self.trace.mark(f"remove {path}")
        self.inner.remove(path)

    def _listdir(self, path):
        return self.inner.listdir(path)


def _stack(kind: str):
    trace = TraceDevice(MemoryDevice.of_size(1 << 30), keep_data=True)
    if kind == "fat":
        inner = FatFileSystem(trace, FatConfig(allocation_unit_bytes=65536, partition_start_lba=63, fat_type="fat16"))
    else:
        inner = LittleFsFileSystem(trace, LittleFsConfig())
    spy = SpyFs(inner, trace)
    return trace, spy


def _windows(trace: TraceDevice):
    """[(label, [ops inside the timer])] in order."""
    out, cur, label = [], None, None
    for e in trace.entries:
        if e.op == "mark" and e.note.startswith("start "):
            assert cur is None, "timers never nest"
            cur, label = [], e.note[6:]
        elif e.op == "mark" and e.note.startswith("stop "):
            out.append((label, cur))
            cur = None
        elif cur is not None:
            assert e.op != "mark", f"{e.note} happened inside the timer of {label}"
            cur.append(e)
    assert cur is None
    return out


@pytest.mark.parametrize("kind", ["fat", "littlefs"])
def test_new_file_mode_timer_covers_only_the_call_and_reopens_with_truncate(kind):
    trace, spy = _stack(kind)
    spy.format()
    spy.mount()
    cfg = EspIdfConfig(runs=3)
    ctx = Context(WallClock(), (trace,))
    buf = random.Random(5).randbytes(78643)
    rows = [espidf._fs_test(spy, f"X (new file): write {n}", "/test.bin", buf[:n], True, False, True, 3, cfg, ctx,
                            (trace,)) for n in (65536,)]
    # every run opened with create+truncate, and the file holds one copy, not three
    assert spy.opens == [("/test.bin", "w")] * 3
    assert spy.stat("/test.bin").size == 65536
    rows.append(espidf._fs_test(spy, "X (new file): read 65536", "/test.bin", buf[:65536], False, True, True, 3, cfg,
                                ctx, (trace,)))
    assert spy.opens[3:] == [("/test.bin", "r")] * 3
    assert not spy.exists("/test.bin"), "read tests unlink the file afterwards"
    # the data read back equals the data written, every run
    assert [d for _, _, d in spy.reads] == [buf[:65536]] * 3
    wins = _windows(trace)
    assert [w[0] for w in wins] == ["X (new file): write 65536"] * 3 + ["X (new file): read 65536"] * 3
    for label, ops in wins:
        assert ops, "each timed call reaches the device"
        if "write" in label:
            written = sum(e.count * 512 for e in ops if e.op == "write")
            if kind == "fat":  # FatFs writes whole sectors of the call straight through
                assert written >= 65536
        else:
            read = sum(e.count * 512 for e in ops if e.op == "read")
            assert read >= 65536
            assert not [e for e in ops if e.op == "write"], "a read call writes nothing"
    # open and close run outside the timers: the marks sit between windows (checked by _windows)
    seq = [e.note.split()[0] for e in trace.entries if e.op == "mark"]
    assert seq[:4] == ["open", "start", "stop", "close"]
    assert rows[0].runs == 3 and rows[0].bytes == 65536


def test_fat_close_commits_directory_entry_outside_the_timer():
    trace, spy = _stack("fat")
    spy.format()
    spy.mount()
    ctx = Context(WallClock(), (trace,))
    buf = random.Random(1).randbytes(54613)
    espidf._fs_test(spy, "W", "/test.bin", buf, True, False, True, 1, EspIdfConfig(runs=1), ctx, (trace,))
    entries = trace.entries
    i_stop = next(i for i, e in enumerate(entries) if e.op == "mark" and e.note.startswith("stop"))
    i_close = next(i for i, e in enumerate(entries) if e.op == "mark" and e.note.startswith("close"))
    dir_writes = [i for i, e in enumerate(entries) if e.op == "write" and b"TEST    BIN" in trace.data.get(i, b"")]
    assert dir_writes, "the directory entry is written"
    # the entry with the final size is written at close: after the timer stopped, before the close mark
    assert any(i_stop < i < i_close for i in dir_writes)
    # the partial tail sector (54613 = 106 sectors + 341 B) is flushed at close too, not in the timer
    tail = buf[106 * 512:]
    assert any(i_stop < i < i_close and trace.data[i][:len(tail)] == tail for i in trace.data)


@pytest.mark.parametrize("kind", ["fat", "littlefs"])
def test_normal_mode_appends_at_i_times_size_and_reads_walk_the_file(kind):
    trace, spy = _stack(kind)
    spy.format()
    spy.mount()
    ctx = Context(WallClock(), (trace,))
    cfg = EspIdfConfig(runs=4)
    data = random.Random(2).randbytes(54613)
    espidf._fs_test(spy, "X: write", "/test.bin", data, True, False, False, 4, cfg, ctx, (trace,))
    assert spy.opens == [("/test.bin", "w")], "normal mode opens once"
    assert [off for _, off, _ in spy.writes] == [i * 54613 for i in range(4)]
    assert spy.stat("/test.bin").size == 4 * 54613
    espidf._fs_test(spy, "X: read", "/test.bin", data, False, True, False, 4, cfg, ctx, (trace,))
    assert [(off, d) for _, off, d in spy.reads] == [(i * 54613, data) for i in range(4)]
    assert not spy.exists("/test.bin")


def test_sd_raw_moves_the_full_target_at_lba0_by_default():
    trace = TraceDevice(MemoryDevice.of_size(64 << 20))
    target = Target(sd_device=trace)
    ctx = Context(WallClock(), (trace,))
    rows = list(espidf._sd_raw(target, EspIdfConfig(runs=2), ctx))
    assert [r.label for r in rows][:2] == ["SD raw write [16 kB label]", "SD raw read [16 kB label]"]
    assert all(r.bytes == 65536 for r in rows)
    assert [r.reported_bytes for r in rows] == [16384, 16384, 32768, 32768, 49152, 49152, 65536, 65536]
    assert {(e.op, e.lba, e.count) for e in trace.ops()} == {("write", 0, 128), ("read", 0, 128)}
    # N writes, then N reads, per row
    assert [e.op for e in trace.ops()][:4] == ["write", "write", "read", "read"]
    corrected = list(espidf._sd_raw(Target(sd_device=MemoryDevice.of_size(1 << 20)),
                                    EspIdfConfig(runs=1, raw_corrected_sizes=True), Context(WallClock())))
    assert [r.bytes for r in corrected][::2] == [16384, 32768, 49152, 65536]


def test_sizes_follow_the_c_casts():
    assert EspIdfConfig().sizes() == [("target", 65536), ("more than target", 78643),
                                      ("less than target", 54613), ("tiny", 255)]


def test_full_protocol_emits_every_sd_row_in_order():
    dev = MemoryDevice.of_size(1 << 30)
    target = Target(sd_device=dev, fs_factories={
        "sd_fatfs": lambda: FatFileSystem(dev, FatConfig(allocation_unit_bytes=65536, partition_start_lba=63)),
        "sd_littlefs": lambda: LittleFsFileSystem(dev, LittleFsConfig())})
    rows = list(espidf.run(target, EspIdfConfig(runs=2), Context(WallClock())))
    labels = [r.label for r in rows]
    assert len(labels) == 8 + 16 + 16
    assert labels[8] == "SD FATFS (new file): write target size"
    assert labels[16] == "SD FATFS: write target size"
    assert labels[-1] == "SD LittleFS: read tiny size"
    assert all(r.runs == 2 for r in rows)


def test_espidf_line_format():
    from sdbench.records import make_row

    r = make_row("SD FATFS: write target size", "write", 65536, [6_236_000] * 100)
    line = espidf_line(r)
    assert line == "[" + r.label.ljust(55) + "] (100x)    6.236 ms    64.00 kB     10.022 MB/s"
    assert len(line.split("]")[0]) == 56
