"""DirTarget: the FileSystem interface on a real directory, with cache defeat."""
from __future__ import annotations

import errno
import os

import pytest

from sdbench.errors import FileSystemError, SdbenchError
from sdbench.fs.hostdir import DirTarget
from sdbench.testing import FileSystemSuite


class TestDirTargetSuite(FileSystemSuite):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path

    def make_fs(self):
        return DirTarget(self.tmp)

    def _fresh(self):
        # a mounted directory is used as it is: no format, already mounted
        sub = self.tmp / f"fresh{len(os.listdir(self.tmp))}"
        sub.mkdir()
        fs = DirTarget(sub)
        fs.mount()
        return fs


def test_format_is_refused_with_a_clear_error(tmp_path):
    fs = DirTarget(tmp_path)
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(FileSystemError, match="refusing to format"):
        fs.format()
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_defeat_methods_and_counters(tmp_path):
    fs = DirTarget(tmp_path)
    assert fs.direct_align_bytes in (512, 4096)
    assert fs.defeat_methods[:2] == ("o_direct", "fsync") and "fadvise_dontneed" in fs.defeat_methods
    data = os.urandom(3 * 4096 + 100)
    with fs.open("/a.bin", "w") as f:
        f.write(data)              # 12288 aligned bytes go direct, 100 through the cache
    with fs.open("/a.bin", "r") as f:
        assert f.read() == data
    with fs.open("/a.bin", "r") as f:
        f.seek(7)
        assert f.read(50) == data[7:57]   # unaligned offset: buffered path, cache dropped first
    c = fs.counters
    assert c["direct_ops"] >= 2 and c["buffered_ops"] >= 2 and c["fsyncs"] >= 1 and c["fadvise"] >= 2
    d = fs.describe()
    assert d["kind"] == "dir" and d["defeat_methods"] == list(fs.defeat_methods)
    assert d.get("fstype")  # found in mountinfo


def test_without_o_direct_the_page_cache_is_still_defeated(tmp_path, monkeypatch):
    import sdbench.fs.hostdir as dt

    real_open = os.open

    def no_direct(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a)

    monkeypatch.setattr(dt.os, "open", no_direct)
    fs = DirTarget(tmp_path)
    assert fs.direct_align_bytes == 0
    assert "o_direct" not in fs.defeat_methods and "fsync" in fs.defeat_methods
    assert any("O_DIRECT" in w for w in fs.warnings)
    with fs.open("/b.bin", "w") as f:
        f.write(b"x" * 10000)
    with fs.open("/b.bin", "r") as f:
        assert f.read() == b"x" * 10000
    assert fs.counters["direct_ops"] == 0


def test_drop_caches_is_reported_only_when_possible(tmp_path):
    fs = DirTarget(tmp_path, drop_caches=True)
    if os.geteuid() == 0 and os.access("/proc/sys/vm/drop_caches", os.W_OK):
        assert "drop_caches" in fs.defeat_methods
    else:
        assert "drop_caches" not in fs.defeat_methods
        assert any("root" in w for w in fs.warnings)
    assert "drop_caches" not in DirTarget(tmp_path).defeat_methods


def test_paths_stay_inside_the_directory(tmp_path):
    inner = tmp_path / "inner"
    inner.mkdir()
    fs = DirTarget(inner)
    with pytest.raises(FileSystemError, match="not allowed"):
        fs.open("/../escape.bin", "w")
    assert not (tmp_path / "escape.bin").exists()


def test_bad_directories(tmp_path):
    with pytest.raises(SdbenchError, match="no such directory"):
        DirTarget(tmp_path / "missing")
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(SdbenchError, match="not a directory"):
        DirTarget(f)


def test_cleanup_removes_only_created_files(tmp_path):
    (tmp_path / "mine.txt").write_text("user data")
    fs = DirTarget(tmp_path)
    fs.mkdir("/d")
    with fs.open("/d/x.bin", "w") as f:
        f.write(b"1")
    with fs.open("/y.bin", "a") as f:
        f.write(b"2")
    fs.sync()
    fs.cleanup()
    assert sorted(os.listdir(tmp_path)) == ["mine.txt"]


def test_modes_and_errors(tmp_path):
    fs = DirTarget(tmp_path)
    with pytest.raises(FileSystemError, match="no such file"):
        fs.open("/missing", "r")
    with fs.open("/m.bin", "w") as f:
        f.write(b"hello")
    with fs.open("/m.bin", "r") as f:
        with pytest.raises(FileSystemError, match="read-only"):
            f.write(b"x")
    with fs.open("/m.bin", "r+") as f:
        f.seek(1)
        f.write(b"EL")
    with fs.open("/m.bin", "r") as f:
        assert f.read() == b"hELlo"
    with pytest.raises(FileSystemError):
        fs.open("/m.bin", "rw")
