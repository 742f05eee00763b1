"""LinuxBlockDevice on image files, and the safety checks on described (fake) systems."""
from __future__ import annotations

import errno
import hashlib
import os
import stat
from pathlib import Path

import pytest

from sdbench.errors import SdbenchError
from sdbench.media.base import OutOfRangeError, ReadOnlyError
from sdbench.media.linux import AlignedBuffer, LinuxBlockDevice
from sdbench.media.safety import (UnsafeTargetError, check_writable_target, device_family, read_mounts,
                                  read_swaps, _Sysfs)
from sdbench.testing import BlockDeviceSuite


def make_image(path: Path, size: int, fill: bytes | None = None) -> Path:
    with open(path, "wb") as f:
        if fill is None:
            f.truncate(size)
        else:
            f.write((fill * (size // len(fill) + 1))[:size])
    return path


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class TestLinuxBlockDeviceOnImage(BlockDeviceSuite):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path

    def make_device(self):
        p = make_image(self.tmp / "card.img", 4 * 1024 * 1024)
        return LinuxBlockDevice(p, allow_write=True)


class TestLinuxBlockDeviceBufferedWindow(BlockDeviceSuite):
    @pytest.fixture(autouse=True)
    def _tmp(self, tmp_path):
        self.tmp = tmp_path

    def make_device(self):
        p = make_image(self.tmp / "card.img", 2 * 1024 * 1024)
        return LinuxBlockDevice(p, allow_write=True, direct=False, offset_bytes=65536, size_bytes=1024 * 1024)


def test_direct_is_used_on_a_regular_filesystem(tmp_path):
    d = LinuxBlockDevice(make_image(tmp_path / "a.img", 1 << 20))
    assert d.direct and not d.warnings
    assert os.O_DIRECT & __import__("fcntl").fcntl(d.fd, __import__("fcntl").F_GETFL)
    d.close()


def test_window_confines_every_access(tmp_path):
    p = make_image(tmp_path / "w.img", 1 << 20, b"\xa5")
    d = LinuxBlockDevice(p, allow_write=True, offset_bytes=64 * 1024, size_bytes=128 * 1024)
    assert d.geometry.sector_count == 256
    d.write(0, b"\x11" * 512)
    d.write(255, b"\x22" * 512)
    with pytest.raises(OutOfRangeError):
        d.write(256, b"\x33" * 512)
    with pytest.raises(OutOfRangeError):
        d.read(250, 7)
    with pytest.raises(OutOfRangeError):
        d.check_region(0, 128 * 1024 + 512)
    d.sync()
    d.close()
    raw = p.read_bytes()
    assert raw[64 * 1024:64 * 1024 + 512] == b"\x11" * 512
    assert raw[192 * 1024 - 512:192 * 1024] == b"\x22" * 512
    # nothing outside the window changed
    assert raw[:64 * 1024] == b"\xa5" * 64 * 1024
    assert raw[192 * 1024:] == b"\xa5" * (len(raw) - 192 * 1024)


def test_fast_paths_read_into_and_write_from(tmp_path):
    p = make_image(tmp_path / "f.img", 1 << 20)
    d = LinuxBlockDevice(p, allow_write=True)
    buf = AlignedBuffer(8192)
    buf.view[:] = os.urandom(8192)
    assert d.write_from(8, buf.view) == 8192
    out = AlignedBuffer(8192)
    d.read_into(8, out.view)
    assert bytes(out.view) == bytes(buf.view)
    assert d.stats.writes == 1 and d.stats.bytes_read == 8192
    d.close()
    buf.close()
    out.close()


def test_read_only_unless_allowed(tmp_path):
    p = make_image(tmp_path / "ro.img", 1 << 20)
    before = sha(p)
    d = LinuxBlockDevice(p)
    assert d.read_only
    with pytest.raises(ReadOnlyError):
        d.write(0, bytes(512))
    with pytest.raises(ReadOnlyError):
        d.write_from(0, memoryview(bytearray(512)))
    d.close()
    assert sha(p) == before


def test_window_larger_than_the_device_is_refused(tmp_path):
    p = make_image(tmp_path / "small.img", 1 << 20)
    with pytest.raises(SdbenchError, match="too small"):
        LinuxBlockDevice(p, size_bytes=2 << 20)
    with pytest.raises(SdbenchError, match="too small"):
        LinuxBlockDevice(p, offset_bytes=1 << 20)
    with pytest.raises(SdbenchError, match="multiple"):
        LinuxBlockDevice(p, offset_bytes=100)


def test_missing_and_wrong_kinds_of_path(tmp_path):
    with pytest.raises(SdbenchError, match="no such device or file"):
        LinuxBlockDevice(tmp_path / "nope.img")
    with pytest.raises(SdbenchError, match="is a directory"):
        LinuxBlockDevice(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SdbenchError, match="neither a block device nor a regular file"):
        LinuxBlockDevice(fifo)


def test_o_direct_refused_on_open_falls_back_with_a_warning(tmp_path, monkeypatch):
    import sdbench.media.linux as lin

    real_open = os.open

    def fake_open(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a)

    monkeypatch.setattr(lin.os, "open", fake_open)
    d = LinuxBlockDevice(make_image(tmp_path / "x.img", 1 << 20), allow_write=True)
    assert not d.direct
    assert any("O_DIRECT" in w for w in d.warnings)
    d.write(0, b"\x01" * 512)
    assert d.read(0, 1) == b"\x01" * 512
    assert d.describe()["warnings"]
    d.close()


def test_no_permission_is_one_clear_error(tmp_path, monkeypatch):
    import sdbench.media.linux as lin

    def denied(path, flags, *a):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(lin.os, "open", denied)
    with pytest.raises(SdbenchError, match="no permission to open"):
        LinuxBlockDevice(make_image(tmp_path / "p.img", 1 << 20))


# ---- safety: parsing ------------------------------------------------------------------------
def test_mountinfo_and_swaps_parsing(tmp_path):
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "42 27 179:1 / /media/my\\040card rw,relatime shared:5 - vfat /dev/mmcblk0p1 rw\n")
    (proc / "swaps").write_text("Filename\tType\tSize\tUsed\tPriority\n/swap\\040file file 1024 0 -2\n"
                                "/dev/sdb2 partition 2048 0 -3\n")
    mounts = read_mounts(str(proc))
    assert [(m.devno, m.mount_point, m.fstype, m.source) for m in mounts][1:] == [
        ((254, 0), "/", "ext4", "/dev/vda"), ((179, 1), "/media/my card", "vfat", "/dev/mmcblk0p1")]
    assert read_swaps(str(proc)) == [("/swap file", "file"), ("/dev/sdb2", "partition")]


def _any_block_device() -> str | None:
    for entry in sorted(os.scandir("/dev"), key=lambda e: e.name):
        try:
            if stat.S_ISBLK(os.stat(entry.path).st_mode):
                return entry.path
        except OSError:
            continue
    return None


def _fake_system(tmp_path: Path, devno: tuple[int, int], mounted_minor_offset: int | None, swap: bool = False,
                 holder: bool = False) -> tuple[str, str]:
    """A disk 'fakedisk' (devno) with partitions fakedisk1/2, optionally mounted/swap/held."""
    sys_root = tmp_path / "sys"
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    disk = sys_root / "devices" / "platform" / "block" / "fakedisk"
    major, minor = devno
    nodes = {"fakedisk": (disk, minor)}
    for i in (1, 2):
        nodes[f"fakedisk{i}"] = (disk / f"fakedisk{i}", minor + 100 + i)
    if holder:
        nodes["dm-9"] = (sys_root / "devices" / "virtual" / "block" / "dm-9", minor + 200)
    for name, (path, mn) in nodes.items():
        (path / "holders").mkdir(parents=True)
        (path / "slaves").mkdir(parents=True)
        (path / "dev").write_text(f"{major}:{mn}\n")
        (path / "ro").write_text("0\n")
        if name[-1].isdigit() and name.startswith("fakedisk"):
            (path / "partition").write_text(name[-1] + "\n")
        (sys_root / "class" / "block").mkdir(parents=True, exist_ok=True)
        (sys_root / "dev" / "block").mkdir(parents=True, exist_ok=True)
        os.symlink(path, sys_root / "class" / "block" / name)
        os.symlink(path, sys_root / "dev" / "block" / f"{major}:{mn}")
    if holder:
        os.symlink(nodes["dm-9"][0], nodes["fakedisk2"][0] / "holders" / "dm-9")
        os.symlink(nodes["fakedisk2"][0], nodes["dm-9"][0] / "slaves" / "fakedisk2")
    lines = ["27 1 254:0 / / rw,relatime - ext4 /dev/vda rw"]
    if mounted_minor_offset is not None:
        lines.append(f"50 27 {major}:{minor + mounted_minor_offset} / /media/card rw - vfat /dev/fake rw")
    (proc / "self" / "mountinfo").write_text("\n".join(lines) + "\n")
    swaps = "Filename\tType\tSize\tUsed\tPriority\n"
    (proc / "swaps").write_text(swaps)
    return str(proc), str(sys_root)


@pytest.fixture
def blockdev():
    dev = _any_block_device()
    if dev is None:
        pytest.skip("no block device node in /dev to borrow a device number from")
    st = os.stat(dev)
    return dev, (os.major(st.st_rdev), os.minor(st.st_rdev))


def test_unmounted_fake_disk_passes(tmp_path, blockdev):
    dev, devno = blockdev
    proc, sysr = _fake_system(tmp_path, devno, None)
    chk = check_writable_target(dev, proc_root=proc, sys_root=sysr, root_path=str(tmp_path))
    assert chk.kind == "block" and chk.device == "fakedisk"
    assert sorted(chk.family) == ["fakedisk", "fakedisk1", "fakedisk2"]


def test_a_mounted_partition_refuses_the_whole_disk(tmp_path, blockdev):
    dev, devno = blockdev
    proc, sysr = _fake_system(tmp_path, devno, 101)
    with pytest.raises(UnsafeTargetError, match=r"its partition /dev/fakedisk1 is mounted on /media/card \(vfat\)"):
        check_writable_target(dev, proc_root=proc, sys_root=sysr, root_path=str(tmp_path))


def test_a_mounted_disk_itself_is_refused(tmp_path, blockdev):
    dev, devno = blockdev
    proc, sysr = _fake_system(tmp_path, devno, 0)
    with pytest.raises(UnsafeTargetError, match="it is mounted on /media/card"):
        check_writable_target(dev, proc_root=proc, sys_root=sysr, root_path=str(tmp_path))


def test_a_held_partition_refuses_the_disk_and_family_includes_holders(tmp_path, blockdev):
    dev, devno = blockdev
    proc, sysr = _fake_system(tmp_path, devno, None, holder=True)
    fam = device_family(_Sysfs(sysr).node_for_devno(devno), sysr)
    assert {n.name for n in fam} == {"fakedisk", "fakedisk1", "fakedisk2", "dm-9"}
    with pytest.raises(UnsafeTargetError, match="in use by /dev/dm-9"):
        check_writable_target(dev, proc_root=proc, sys_root=sysr, root_path=str(tmp_path))


def test_a_mounted_holder_refuses_the_disk(tmp_path, blockdev):
    dev, devno = blockdev
    proc, sysr = _fake_system(tmp_path, devno, 200, holder=True)
    with pytest.raises(UnsafeTargetError, match="/dev/dm-9 is mounted on /media/card"):
        check_writable_target(dev, proc_root=proc, sys_root=sysr, root_path=str(tmp_path))


def test_root_device_is_refused(tmp_path, blockdev):
    dev, devno = blockdev
    proc, sysr = _fake_system(tmp_path, devno, None)
    (Path(proc) / "self" / "mountinfo").write_text(f"27 1 {devno[0]}:{devno[1] + 102} / / rw - ext4 /dev/x rw\n")
    with pytest.raises(UnsafeTargetError, match="its partition /dev/fakedisk2 holds the root filesystem"):
        check_writable_target(dev, proc_root=proc, sys_root=sysr, root_path=str(tmp_path))


def test_read_only_device_is_refused(tmp_path, blockdev):
    dev, devno = blockdev
    proc, sysr = _fake_system(tmp_path, devno, None)
    (Path(sysr) / "class" / "block" / "fakedisk" / "ro").write_text("1\n")
    with pytest.raises(SdbenchError, match="read-only"):
        check_writable_target(dev, proc_root=proc, sys_root=sysr, root_path=str(tmp_path))


def test_the_real_root_device_is_refused():
    root = next((m for m in read_mounts() if m.mount_point == "/"), None)
    if root is None or not root.source.startswith("/dev/") or not os.path.exists(root.source):
        pytest.skip("the root filesystem is not on a visible block device here")
    if not stat.S_ISBLK(os.stat(root.source).st_mode):
        pytest.skip("root source is not a block device")
    # only the check runs: nothing is opened for writing
    with pytest.raises(UnsafeTargetError, match="root filesystem|mounted|in use"):
        check_writable_target(root.source)


def test_image_file_that_is_swap_or_backs_a_loop_device_is_refused(tmp_path):
    img = make_image(tmp_path / "card.img", 1 << 20)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text("")
    (proc / "swaps").write_text(f"Filename\tType\tSize\tUsed\tPriority\n{img} file 1024 0 -2\n")
    empty_sys = tmp_path / "sys"
    (empty_sys / "block").mkdir(parents=True)
    with pytest.raises(UnsafeTargetError, match="active swap file"):
        check_writable_target(img, proc_root=str(proc), sys_root=str(empty_sys))
    (proc / "swaps").write_text("Filename\tType\tSize\tUsed\tPriority\n")
    loop = empty_sys / "block" / "loop7" / "loop"
    loop.mkdir(parents=True)
    (loop / "backing_file").write_text(f"{img}\n")
    with pytest.raises(UnsafeTargetError, match="backs the attached loop device /dev/loop7"):
        check_writable_target(img, proc_root=str(proc), sys_root=str(empty_sys))
    (loop / "backing_file").write_text(f"{tmp_path / 'other.img'}\n")
    assert check_writable_target(img, proc_root=str(proc), sys_root=str(empty_sys)).kind == "file"
