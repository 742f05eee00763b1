"""Shared conformance suites.

Every BlockDevice (real, simulated, or a wrapper) passes :class:`BlockDeviceSuite`;
every FileSystem passes :class:`FileSystemSuite`.  Use them by subclassing in a
test module and providing a factory::

    class TestMyDevice(BlockDeviceSuite):
        def make_device(self):
            return MyDevice(...)

The suites need pytest (a test dependency), imported lazily here so that the
package itself does not depend on it.
"""
from __future__ import annotations

import hashlib
import random

from .errors import FileSystemError
from .fs.base import File, FileSystem, UnsupportedOperation
from .media.base import AlignmentError, BlockDevice, OutOfRangeError


def _pattern(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


class BlockDeviceSuite:
    """Bounds, alignment, data round trip, erase and stats."""

    #: set False for devices that refuse writes by design
    writable = True

    def make_device(self) -> BlockDevice:  # pragma: no cover - overridden
        raise NotImplementedError

    def _dev(self) -> BlockDevice:
        return self.make_device()

    def test_geometry_is_consistent(self) -> None:
        d = self._dev()
        g = d.geometry
        assert g.sector_size > 0 and g.sector_count > 0
        assert g.read_size % g.sector_size == 0
        assert g.prog_size % g.sector_size == 0
        assert g.erase_size % g.prog_size == 0
        d.close()

    def test_round_trip_first_and_last_units(self) -> None:
        if not self.writable:
            return
        d = self._dev()
        g = d.geometry
        unit = max(g.prog_size, g.read_size, g.erase_size) // g.sector_size
        for lba in (0, g.sector_count - unit):
            if g.erase_value is not None:
                d.erase(lba, unit)
            data = _pattern(unit * g.sector_size, lba)
            d.write(lba, data)
            assert d.read(lba, unit) == data
        d.close()

    def test_multi_unit_round_trip(self) -> None:
        if not self.writable:
            return
        d = self._dev()
        g = d.geometry
        unit = max(g.prog_size, g.read_size, g.erase_size) // g.sector_size
        n = min(4 * unit, g.sector_count // unit * unit)
        lba = (g.sector_count // 2) // unit * unit
        n = min(n, (g.sector_count - lba) // unit * unit)
        if g.erase_value is not None:
            d.erase(lba, n)
        data = _pattern(n * g.sector_size, 7)
        d.write(lba, data)
        d.sync()
        assert d.read(lba, n) == data
        # a second write replaces the data (after an erase where the medium needs it)
        if g.erase_value is not None:
            d.erase(lba, n)
        data2 = _pattern(n * g.sector_size, 8)
        d.write(lba, data2)
        assert d.read(lba, n) == data2
        d.close()

    def test_copy_in_pieces_is_its_reads_and_writes(self) -> None:
        """copy_pieces: the source's data at the destination, counted as a read and a write per piece."""
        if not self.writable:
            return
        d = self._dev()
        g = d.geometry
        unit = max(g.prog_size, g.read_size, g.erase_size) // g.sector_size
        if g.sector_count < 2 * unit:
            d.close()
            return
        piece = max(g.prog_size, g.read_size) // g.sector_size
        src, dst = 0, g.sector_count // unit // 2 * unit
        if g.erase_value is not None:
            d.erase(src, unit)
            d.erase(dst, unit)
        data = _pattern(unit * g.sector_size, 11)
        d.write(src, data)
        before = d.stats.snapshot()
        d.copy_pieces(src, dst, unit, piece)
        after = d.stats.snapshot()
        assert d.read(dst, unit) == data and d.read(src, unit) == data
        pieces = unit // piece
        assert after["reads"] - before["reads"] == after["writes"] - before["writes"] == pieces
        assert after["bytes_read"] - before["bytes_read"] == after["bytes_written"] - before["bytes_written"] == \
            unit * g.sector_size
        d.close()

    def test_erase_reads_back_erase_value(self) -> None:
        if not self.writable:
            return
        d = self._dev()
        g = d.geometry
        n = g.erase_size // g.sector_size
        d.write(0, _pattern(n * g.sector_size, 3)[: n * g.sector_size])
        d.erase(0, n)
        if g.erase_value is not None:
            assert d.read(0, n) == bytes([g.erase_value]) * (n * g.sector_size)
        d.close()

    def test_out_of_range_is_refused(self) -> None:
        d = self._dev()
        g = d.geometry
        unit = g.read_size // g.sector_size
        for lba, count in ((g.sector_count, unit), (-unit, unit), (g.sector_count - unit, 2 * unit)):
            try:
                d.read(lba, count)
            except OutOfRangeError:
                pass
            else:
                raise AssertionError(f"read {lba}+{count} outside the device was accepted")
        if self.writable:
            try:
                d.write(g.sector_count, bytes(g.prog_size))
            except OutOfRangeError:
                pass
            else:
                raise AssertionError("write past the end was accepted")
        d.close()

    def test_misaligned_is_refused(self) -> None:
        d = self._dev()
        g = d.geometry
        if self.writable and g.sector_size > 1:
            try:
                d.write(0, bytes(g.sector_size + 1))
            except AlignmentError:
                pass
            else:
                raise AssertionError("write of a partial sector was accepted")
        if self.writable and g.prog_size > g.sector_size:
            try:
                d.write(1, bytes(g.prog_size))
            except AlignmentError:
                pass
            else:
                raise AssertionError("misaligned program was accepted")
        if g.erase_size > g.sector_size and self.writable:
            try:
                d.erase(1, g.erase_size // g.sector_size)
            except AlignmentError:
                pass
            else:
                raise AssertionError("misaligned erase was accepted")
        d.close()

    def test_stats_count_ops_and_bytes(self) -> None:
        d = self._dev()
        g = d.geometry
        unit = max(g.prog_size, g.read_size, g.erase_size) // g.sector_size
        before = d.stats.snapshot()
        d.read(0, unit)
        if self.writable:
            if g.erase_value is not None:
                d.erase(0, unit)
            d.write(0, bytes(unit * g.sector_size))
        after = d.stats.snapshot()
        assert after["reads"] - before["reads"] >= 1
        assert after["bytes_read"] - before["bytes_read"] >= unit * g.sector_size
        if self.writable:
            assert after["writes"] - before["writes"] >= 1
            assert after["bytes_written"] - before["bytes_written"] >= unit * g.sector_size
        d.close()


def _refused(call, *what: str) -> str:
    """Run ``call``; it must raise FileSystemError (with each of ``what`` in the message): the message."""
    try:
        call()
    except FileSystemError as e:
        text = str(e)
        for w in what:
            assert w in text, f"{w!r} not in the error {text!r}"
        return text
    raise AssertionError(f"accepted: expected a FileSystemError naming {', '.join(what) or 'the cause'}")


def _skip(reason: str) -> None:
    import pytest  # a test dependency, only needed when a test skips

    pytest.skip(reason)


class FileSystemSuite:
    """Data round trip with checksums, append, truncate-on-open, remove, remount; the optional operations
    (mkdir, rename, File.truncate, File.sync) where the filesystem supports them, else their clear refusal
    (``<op> is not supported by <kind>``); mkdir is skipped where the kind declares no directories
    (``has_directories = False``)."""

    def make_fs(self) -> FileSystem:  # pragma: no cover - overridden
        raise NotImplementedError

    #: largest file the suite writes (small media override it)
    big_file_bytes = 100_000

    def _fresh(self) -> FileSystem:
        fs = self.make_fs()
        fs.format()
        fs.mount()
        return fs

    def test_round_trip_with_checksums(self) -> None:
        fs = self._fresh()
        files = {f"/f{i}.bin": _pattern(n, i) for i, n in enumerate((0, 1, 255, 512, 4096, 65536, self.big_file_bytes))}
        for path, data in files.items():
            with fs.open(path, "w") as f:
                assert f.write(data) == len(data)
        for path, data in files.items():
            with fs.open(path, "r") as f:
                got = f.read()
            assert hashlib.sha256(got).hexdigest() == hashlib.sha256(data).hexdigest(), path
            assert fs.stat(path).size == len(data)
        fs.unmount()

    def test_chunked_writes_and_reads(self) -> None:
        fs = self._fresh()
        data = _pattern(30_000, 11)
        with fs.open("/chunks.bin", "w") as f:
            for i in range(0, len(data), 777):
                f.write(data[i:i + 777])
        out = bytearray()
        with fs.open("/chunks.bin", "r") as f:
            while True:
                c = f.read(1000)
                if not c:
                    break
                out += c
        assert bytes(out) == data
        fs.unmount()

    def test_append_mode_appends(self) -> None:
        fs = self._fresh()
        with fs.open("/log.txt", "w") as f:
            f.write(b"first,")
        with fs.open("/log.txt", "a") as f:
            f.write(b"second")
        with fs.open("/log.txt", "r") as f:
            assert f.read() == b"first,second"
        fs.unmount()

    def test_open_w_truncates(self) -> None:
        fs = self._fresh()
        with fs.open("/t.bin", "w") as f:
            f.write(_pattern(5000, 1))
        with fs.open("/t.bin", "w") as f:
            f.write(b"short")
        assert fs.stat("/t.bin").size == 5
        with fs.open("/t.bin", "r") as f:
            assert f.read() == b"short"
        fs.unmount()

    def test_seek_and_tell(self) -> None:
        fs = self._fresh()
        data = _pattern(3000, 5)
        with fs.open("/s.bin", "w") as f:
            f.write(data)
        with fs.open("/s.bin", "r") as f:
            assert f.seek(1000) == 1000
            assert f.tell() == 1000
            assert f.read(10) == data[1000:1010]
            assert f.tell() == 1010
        fs.unmount()

    def test_remove_and_listdir(self) -> None:
        fs = self._fresh()
        for name in ("a.bin", "b.bin", "c.bin"):
            with fs.open("/" + name, "w") as f:
                f.write(name.encode())
        assert fs.listdir("/") == ["a.bin", "b.bin", "c.bin"]
        fs.remove("/b.bin")
        assert fs.listdir("/") == ["a.bin", "c.bin"]
        assert not fs.exists("/b.bin")
        try:
            fs.open("/b.bin", "r")
        except FileSystemError:
            pass
        else:
            raise AssertionError("opening a removed file for reading succeeded")
        try:
            fs.remove("/b.bin")
        except FileSystemError:
            pass
        else:
            raise AssertionError("removing a missing file succeeded")
        fs.unmount()

    def test_reopen_after_remount(self) -> None:
        fs = self._fresh()
        data = _pattern(20_000, 9)
        with fs.open("/keep.bin", "w") as f:
            f.write(data)
        fs.unmount()
        fs.mount()
        assert fs.stat("/keep.bin").size == len(data)
        with fs.open("/keep.bin", "r") as f:
            assert f.read() == data
        fs.unmount()

    def test_space_is_reused_after_remove(self) -> None:
        fs = self._fresh()
        data = _pattern(self.big_file_bytes, 2)
        for _ in range(6):
            with fs.open("/cycle.bin", "w") as f:
                f.write(data)
            fs.remove("/cycle.bin")
        with fs.open("/cycle.bin", "w") as f:
            f.write(data)
        with fs.open("/cycle.bin", "r") as f:
            assert f.read() == data
        fs.unmount()

    # ---- optional operations: mkdir, rename, truncate, sync ------------------------------------------------
    def _unsupported(self, fs: FileSystem, op: str, call, f: File | None = None) -> None:
        """``op`` is not supported here: calling it says so, naming the kind; the rest of the test is skipped."""
        try:
            call()
        except UnsupportedOperation as e:
            assert e.op == op and fs.kind in str(e), str(e)
        else:
            raise AssertionError(f"{fs.kind}: supports({op!r}) is False but {op} worked (set file_class to the "
                                 f"File subclass that implements it)")
        if f is not None:
            f.close()
        fs.unmount()
        _skip(f"{fs.kind} does not support {op}")

    def test_supports_names_the_primitives(self) -> None:
        fs = self._fresh()
        with fs.open("/s.bin", "w") as f:
            for op in ("truncate", "sync"):
                implemented = getattr(type(f), "_" + op) is not getattr(File, "_" + op)
                assert fs.supports(op) == implemented, \
                    f"{fs.kind}: supports({op!r}) is {fs.supports(op)}, its File does{'' if implemented else ' not'} " \
                    f"implement _{op} (file_class names the File subclass)"
        for op in ("mkdir", "rename"):
            assert isinstance(fs.supports(op), bool)
        try:
            fs.supports("chmod")
        except ValueError:
            pass
        else:
            raise AssertionError("supports() of an unknown operation did not raise ValueError")
        fs.unmount()

    def test_mkdir_makes_a_directory(self) -> None:
        fs = self._fresh()
        if not fs.has_directories:  # the kind declares none: mkdir is refused, naming the kind
            _refused(lambda: fs.mkdir("/d"), "mkdir", fs.kind)
            fs.unmount()
            _skip(f"{fs.kind} has no directories (has_directories = False)")
        if not fs.supports("mkdir"):
            self._unsupported(fs, "mkdir", lambda: fs.mkdir("/d"))
        fs.mkdir("/d")
        assert fs.stat("/d").is_dir and "d" in fs.listdir("/")
        assert fs.listdir("/d") == []
        data = _pattern(3000, 21)
        with fs.open("/d/x.bin", "w") as f:
            f.write(data)
        fs.mkdir("/d/sub")
        assert fs.listdir("/d") == ["sub", "x.bin"]
        _refused(lambda: fs.mkdir("/d"))                # exists
        _refused(lambda: fs.mkdir("/d/x.bin"))          # exists, as a file
        _refused(lambda: fs.mkdir("/"))
        _refused(lambda: fs.mkdir("/missing/sub"))      # no parent
        fs.unmount()
        fs.mount()
        assert fs.stat("/d/sub").is_dir
        with fs.open("/d/x.bin", "r") as f:
            assert f.read() == data
        fs.remove("/d/sub")  # an empty directory
        fs.remove("/d/x.bin")
        fs.remove("/d")
        assert not fs.exists("/d")
        fs.unmount()

    def test_rename_moves_and_replaces(self) -> None:
        fs = self._fresh()
        a, b = _pattern(5000, 31), _pattern(700, 32)
        with fs.open("/a.bin", "w") as f:
            f.write(a)
        if not fs.supports("rename"):
            self._unsupported(fs, "rename", lambda: fs.rename("/a.bin", "/b.bin"))
        fs.rename("/a.bin", "/b.bin")
        assert not fs.exists("/a.bin") and fs.listdir("/") == ["b.bin"]
        with fs.open("/b.bin", "r") as f:
            assert f.read() == a
        fs.rename("/b.bin", "/b.bin")                  # the same name: nothing happens
        assert fs.listdir("/") == ["b.bin"]
        _refused(lambda: fs.rename("/nope.bin", "/c.bin"))
        _refused(lambda: fs.rename("/nope.bin", "/nope.bin"))
        with fs.open("/c.bin", "w") as f:
            f.write(b)
        fs.rename("/c.bin", "/b.bin")                  # onto an existing file: it is replaced
        assert fs.listdir("/") == ["b.bin"] and fs.stat("/b.bin").size == len(b)
        if fs.supports("mkdir"):
            fs.mkdir("/d")
            fs.rename("/b.bin", "/d/moved.bin")        # into a directory
            assert fs.listdir("/") == ["d"] and fs.listdir("/d") == ["moved.bin"]
            with fs.open("/e.bin", "w") as f:
                f.write(b"e")
            _refused(lambda: fs.rename("/e.bin", "/d"))   # a file never replaces a directory
            _refused(lambda: fs.rename("/d", "/d/sub"))   # nor a directory moves into itself
            fs.rename("/d", "/d2")                     # a directory with its files
            assert fs.listdir("/d2") == ["moved.bin"]
            final = "/d2/moved.bin"
        else:
            final = "/b.bin"
        fs.unmount()
        fs.mount()
        with fs.open(final, "r") as f:
            assert f.read() == b
        fs.unmount()

    def test_truncate_shortens_an_open_file(self) -> None:
        fs = self._fresh()
        n = self.big_file_bytes
        data = _pattern(n, 41)
        with fs.open("/t.bin", "w") as f:
            f.write(data)
        if not fs.supports("truncate"):
            f = fs.open("/t.bin", "r+")
            self._unsupported(fs, "truncate", lambda: f.truncate(10), f)
        cuts = [n - 1, n * 2 // 3 + 17, n // 3, 4097, 1000, 1]
        with fs.open("/t.bin", "r+") as f:
            _refused(lambda: f.truncate(n + 1), "truncate", "shortens")   # never grows
            _refused(lambda: f.truncate(-1))
            f.truncate(n)                                # its own size: nothing to cut
            f.seek(n // 2)
            for size in cuts:
                f.truncate(size)
                assert f.tell() == min(n // 2, size), (size, f.tell())
            f.seek(0)
            assert f.read() == data[:1]
        assert fs.stat("/t.bin").size == 1
        with fs.open("/t.bin", "a") as f:                # a truncated file grows again by writing
            f.write(data[1:5000])
        with fs.open("/t.bin", "r") as f:
            assert f.read() == data[:5000]
            _refused(lambda: f.truncate(0), "read-only")
        # small writes a cache may still hold are part of the file
        with fs.open("/t.bin", "w") as f:
            f.write(b"0123456789" * 10)
            f.truncate(42)
            f.write(b"!")
        with fs.open("/t.bin", "r") as f:
            assert f.read() == (b"0123456789" * 10)[:42] + b"!"
        with fs.open("/t.bin", "r+") as f:
            f.truncate(0)
        assert fs.stat("/t.bin").size == 0
        closed = fs.open("/t.bin", "r+")
        closed.close()
        _refused(lambda: closed.truncate(0), "closed")
        fs.unmount()
        fs.mount()
        assert fs.stat("/t.bin").size == 0
        with fs.open("/t.bin", "w") as f:                # the space is free again
            f.write(data)
        with fs.open("/t.bin", "r") as f:
            assert f.read() == data
        fs.unmount()

    def test_sync_commits_an_open_file(self) -> None:
        fs = self._fresh()
        data = _pattern(20_000, 51)
        f = fs.open("/s.bin", "w")
        f.write(data[:10_000])
        if not fs.supports("sync"):
            self._unsupported(fs, "sync", f.sync, f)
        f.sync()
        assert fs.stat("/s.bin").size == 10_000        # the size is on the medium while the file is open
        f.write(data[10_000:10_100])                  # a small write after the sync
        f.sync()
        f.sync()                                      # nothing new: still fine
        assert fs.stat("/s.bin").size == 10_100
        f.write(data[10_100:])
        f.close()
        _refused(f.sync, "closed")
        with fs.open("/s.bin", "r") as r:
            r.sync()                                  # a read-only file syncs too
            assert r.read() == data
        fs.unmount()
        fs.mount()
        with fs.open("/s.bin", "r") as r:
            assert r.read() == data
        fs.unmount()
