"""Loop devices on image files in tmp (root and a working losetup; skipped otherwise).

Only loop devices created here, on files created here, are ever written.
"""
from __future__ import annotations

import hashlib
import os

import pytest

from sdbench.cli import main
from sdbench.errors import SdbenchError
from sdbench.fs.hostdir import DirTarget
from sdbench.media.linux import LinuxBlockDevice
from sdbench.media.safety import UnsafeTargetError, check_writable_target
from sdbench.records import Results
from sdbench.testing import BlockDeviceSuite

pytestmark = pytest.mark.root

MIB = 1 << 20


class TestLinuxBlockDeviceOnLoop(BlockDeviceSuite):
    @pytest.fixture(autouse=True)
    def _loop(self, loopdev):
        self.dev = loopdev[0]

    def make_device(self):
        return LinuxBlockDevice(self.dev, allow_write=True)


def test_loop_device_geometry_and_describe(loopdev):
    dev, _ = loopdev
    d = LinuxBlockDevice(dev)
    assert d.is_block and d.direct and d.device_size_bytes == 32 * MIB
    assert d.geometry.sector_size == d.logical_block_bytes == 512
    assert d.describe()["target"] == "block device"
    assert check_writable_target(dev).device == os.path.basename(dev)
    d.close()


@pytest.mark.parametrize("mounted", ["ext4"], indirect=True)
def test_raw_write_to_a_mounted_loop_device_is_refused(mounted, tmp_path, capsys):
    dev, img, mnt = mounted
    with pytest.raises(UnsafeTargetError, match=f"it is mounted on {mnt}"):
        check_writable_target(dev)
    with pytest.raises(SdbenchError, match="mounted"):
        LinuxBlockDevice(dev, allow_write=True)
    # reading a mounted device is allowed
    LinuxBlockDevice(dev).close()
    out = tmp_path / "r.json"
    rc = main(["fio", "--device", dev, "--rw", "write", "--size", "1M", "--allow-write", "--yes", "-q",
               "--json", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("error: refusing to write to") and "mounted on" in err and err.count("\n") == 1
    assert not out.exists()
    # the image file behind it is refused too while attached
    with pytest.raises(UnsafeTargetError, match="backs the attached loop device"):
        check_writable_target(img)


def test_write_outside_the_loop_device_is_refused(loopdev, capsys):
    dev, img = loopdev
    before = hashlib.sha256(img.read_bytes()).hexdigest()
    rc = main(["fio", "--device", dev, "--rw", "write", "--offset", "33M", "--allow-write", "--yes"])
    err = capsys.readouterr().err
    assert rc == 2 and "too small" in err and err.count("\n") == 1
    # a region that runs past the end stops there, as fio's does, and says so: nothing outside is written
    head = hashlib.sha256(img.read_bytes()[:31 * MIB]).hexdigest()
    rc = main(["fio", "--device", dev, "--rw", "write", "--offset", "31M", "--size", "2M", "--allow-write", "--yes",
               "--no-save"])
    err = capsys.readouterr().err
    assert rc == 0 and "goes past the end" in err
    assert hashlib.sha256(img.read_bytes()[:31 * MIB]).hexdigest() == head and img.stat().st_size == 32 * MIB
    before = hashlib.sha256(img.read_bytes()).hexdigest()
    d = LinuxBlockDevice(dev, allow_write=True, offset_bytes=31 * MIB)
    with pytest.raises(SdbenchError):
        d.write(d.geometry.sector_count, bytes(512))
    d.close()
    assert hashlib.sha256(img.read_bytes()).hexdigest() == before


def test_fio_verify_on_a_loop_device(loopdev, tmp_path, capsys):
    dev, _ = loopdev
    out = tmp_path / "v.json"
    rc = main(["fio", "--device", dev, "--rw", "randwrite", "--bs", "4k", "--size", "4M", "--iodepth", "4",
               "--ioengine=io_uring", "--direct=1", "--verify", "crc32c", "--allow-write", "--yes", "-q", "--json",
               str(out)])
    assert rc == 0, capsys.readouterr().err
    rec = Results.from_json(out.read_text()).runs[0]
    assert rec.metadata["verify"]["job"]["ok"] and rec.metadata["verify"]["job"]["checked_blocks"] == 1024
    assert rec.stack["target"] == "block device" and rec.stack["direct"]


@pytest.mark.parametrize("mounted", ["ext4", "vfat", "exfat"], indirect=True)
def test_dir_target_on_loop_mounted_filesystems(mounted, tmp_path, capsys):
    dev, img, mnt = mounted
    fs = DirTarget(mnt)
    assert fs.mount_info.get("source") == dev
    with fs.open("/x.bin", "w") as f:
        f.write(os.urandom(10_000))
    assert fs.stat("/x.bin").size == 10_000
    fs.remove("/x.bin")
    out = tmp_path / "d.json"
    rc = main(["fio", "--dir", str(mnt), "--rw", "randrw", "--bs", "4k", "--size", "2M", "--verify", "crc32c",
               "-q", "--json", str(out)])
    assert rc == 0, capsys.readouterr().err
    rec = Results.from_json(out.read_text()).runs[0]
    assert rec.stack["kind"] == "dir" and rec.stack["fstype"] in ("ext4", "vfat", "exfat")
    assert "fsync" in rec.stack["defeat_methods"]
    assert rec.metadata["verify"]["job"]["ok"]
    rc = main(["stream", "--dir", str(mnt), "--size", "4M", "-q"])
    assert rc == 0
    rc = main(["preset", "sdfat", "--dir", str(mnt), "--size", "200000", "-q"])
    assert rc == 0
    assert [n for n in os.listdir(mnt) if n.startswith("sdbench") or n == "BENCH.DAT"] == []
