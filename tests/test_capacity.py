"""sdbench capacity: fake-card detection (quick and full), restore of the original data, CLI safety."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess

import pytest

from sdbench import capacity as cap
from sdbench.cli import main
from sdbench.media import MemoryDevice
from sdbench.media.base import BlockDeviceError
from sdbench.media.fake import FakeCardDevice
from sdbench.testing import BlockDeviceSuite

MIB = 1 << 20


def _filled(size: int, seed: int = 7) -> MemoryDevice:
    d = MemoryDevice.of_size(size)
    d.write_bytes(0, random.Random(seed).randbytes(size))
    return d


# ---- the fake card itself ---------------------------------------------------------------
class TestFakeCardWithinRealSize(BlockDeviceSuite):
    """Inside its real size a fake card is an ordinary device (the announced tail is what lies)."""

    def make_device(self):
        inner = MemoryDevice.of_size(2 * MIB)
        return _Window(FakeCardDevice(inner, 8 * MIB, "wrap"), inner.geometry)


class _Window(cap.BlockDevice):
    """The first ``geometry`` sectors of a device, so the suite's last-sector checks stay inside the real size."""

    def __init__(self, dev, geometry):
        super().__init__(geometry)
        self.dev = dev

    def _read(self, lba, count, buf_addr):
        return self.dev.read(lba, count)

    def _write(self, lba, data, buf_addr):
        self.dev.write(lba, data)


def test_fake_modes_past_the_real_size():
    real = 1 * MIB // 512
    wrap = FakeCardDevice(MemoryDevice.of_size(MIB), 4 * MIB, "wrap")
    wrap.write(real + 5, b"\xAB" * 512)
    assert wrap.read(5, 1) == b"\xAB" * 512
    drop = FakeCardDevice(MemoryDevice.of_size(MIB), 4 * MIB, "drop")
    drop.write(real + 5, b"\xAB" * 512)
    assert drop.read(real + 5, 1) == bytes(512) and drop.read(5, 1) == bytes(512)
    old = FakeCardDevice(MemoryDevice.of_size(MIB), 4 * MIB, "drop", drop_reads="old")
    before = old.read(real + 5, 1)
    old.write(real + 5, b"\xAB" * 512)
    assert old.read(real + 5, 1) == before != b"\xAB" * 512
    err = FakeCardDevice(MemoryDevice.of_size(MIB), 4 * MIB, "error")
    with pytest.raises(BlockDeviceError):
        err.write(real, b"\x00" * 512)
    with pytest.raises(BlockDeviceError):
        err.read(real - 1, 2)
    assert err.geometry.size_bytes == 4 * MIB


# ---- quick mode -------------------------------------------------------------------------
def test_wraparound_fake_is_found(tmp_path):
    inner = _filled(16 * MIB)
    original = inner.read_bytes(0, 16 * MIB)
    dev = FakeCardDevice(inner, 64 * MIB, "wrap")
    res = cap.quick_probe(dev, tmp_path / "r.restore")
    assert res.verdict == "fake"
    assert abs(res.usable_bytes - 16 * MIB) <= 0.01 * 16 * MIB
    assert res.counts["aliased"] > 0
    assert res.first_bad_lba == 16 * MIB // 512
    assert inner.read_bytes(0, 16 * MIB) == original  # low data restored even on the fake


@pytest.mark.parametrize("mode,cls", [("drop", "corrupted"), ("error", "unreadable"), ("wrap", "aliased")])
def test_drop_error_and_odd_wrap_fakes(tmp_path, mode, cls):
    dev = FakeCardDevice(_filled(12 * MIB), 64 * MIB, mode)   # not a power of two: found by the ladder
    res = cap.quick_probe(dev, tmp_path / "r.restore")
    assert res.verdict == "fake"
    assert res.usable_bytes == 12 * MIB
    assert res.counts[cls] > 0 and res.counts["good"] > 0


def test_genuine_card_keeps_its_data(tmp_path):
    dev = _filled(32 * MIB)
    before = dev.read_bytes(0, 32 * MIB)
    res = cap.quick_probe(dev, tmp_path / "r.restore")
    assert res.verdict == "genuine"
    assert res.usable_bytes == res.announced_bytes == 32 * MIB
    assert res.first_bad_lba is None and 100 <= res.counts["good"] <= 1000
    assert res.restore.verified == res.restore.restored > 0
    assert dev.read_bytes(0, 32 * MIB) == before


def test_damaged_card(tmp_path):
    class Bad(MemoryDevice):
        def _read(self, lba, count, buf_addr):
            data = super()._read(lba, count, buf_addr)
            if lba <= 5000 < lba + count:
                raise BlockDeviceError("I/O error")
            return data

    dev = Bad.of_size(16 * MIB)
    res = cap.full_probe(dev)
    assert res.verdict == "damaged" and res.first_bad_lba == 5000 and res.counts["unreadable"] == 1
    assert res.usable_bytes == 5000 * 512


def test_full_mode_finds_a_wraparound_fake():
    dev = FakeCardDevice(MemoryDevice.of_size(3 * MIB), 8 * MIB, "wrap")   # any modulus, not only 2^k
    seen = []
    res = cap.full_probe(dev, progress=lambda label, f: seen.append((label, f)))
    assert res.verdict == "fake" and res.usable_bytes == 3 * MIB
    assert res.counts["good"] == 3 * MIB // 512 and res.counts["aliased"] == 5 * MIB // 512
    assert seen and seen[-1][1] == 1.0 and "MB/s" in seen[-1][0]


def test_restore_file_round_trip_after_a_crash(tmp_path, monkeypatch):
    img = tmp_path / "card.img"
    data = random.Random(3).randbytes(8 * MIB)
    img.write_bytes(data)
    rfile = tmp_path / "saved.restore"

    class Crash(Exception):
        pass

    def crash(self, points):
        raise Crash

    monkeypatch.setattr(cap.QuickProbe, "written", crash)
    monkeypatch.setattr(cap, "restore_sectors", lambda dev, log: None)   # power lost: no clean-up
    # main() turns the unexpected exception into exit code 3 (as a crash would end the run)
    assert main(["capacity", str(img), "--allow-write", "--yes", "--restore-file", str(rfile), "-q"]) == 3
    monkeypatch.undo()
    assert img.read_bytes() != data and rfile.exists()
    assert main(["capacity", str(img), "--restore", str(rfile), "--allow-write", "--yes", "-f", "json"]) == 0
    assert img.read_bytes() == data
    # a second restore finds the originals already there and changes nothing
    assert main(["capacity", str(img), "--restore", str(rfile), "--allow-write", "--yes", "-q"]) == 0
    assert img.read_bytes() == data


def test_restore_leaves_sectors_written_since_alone(tmp_path):
    dev = _filled(4 * MIB)
    before = dev.read_bytes(0, 4 * MIB)
    probe = cap.QuickProbe(dev, tmp_path / "r.restore")
    probe.res.restore = None
    probe._round([0, 100])
    dev.write(100, b"\x11" * 512)                  # the user wrote there after the crash
    log = cap.RestoreLog.load(tmp_path / "r.restore")
    rr = cap.restore(dev, log, only_ours=True)
    assert rr.skipped_foreign == 1 and rr.restored == 1
    assert dev.read_bytes(0, 512) == before[:512] and dev.read(100, 1) == b"\x11" * 512


def test_damaged_restore_file_is_refused(tmp_path):
    p = tmp_path / "x.restore"
    p.write_bytes(cap.RESTORE_MAGIC + b"{}\n" + b"\0" * 4)
    with pytest.raises(cap.SdbenchError, match="not a valid"):
        cap.RestoreLog.load(p)


# ---- CLI ----------------------------------------------------------------------------------
def test_cli_sparse_image_is_genuine_and_unchanged(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    img = tmp_path / "card.img"
    with open(img, "wb") as f:
        f.truncate(64 * MIB)
        f.seek(0)
        f.write(b"MBR!" * 128)
        f.seek(40 * MIB)
        f.write(random.Random(5).randbytes(MIB))
    before = img.read_bytes()
    assert main(["capacity", str(img), "--allow-write", "--yes", "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "genuine" and doc["usable_bytes"] == doc["announced_bytes"] == 64 * MIB
    assert doc["first_bad_lba"] is None and set(doc["counts"]) == {"good", "corrupted", "aliased", "unreadable"}
    assert img.read_bytes() == before
    assert not list(tmp_path.glob("*.restore"))  # removed once the restore was verified


def test_cli_text_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    img = tmp_path / "card.img"
    img.write_bytes(bytes(4 * MIB))
    assert main(["capacity", str(img), "--allow-write", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "genuine" in out and "Usable" in out


def test_cli_refuses_without_allow_write(tmp_path, capsys):
    img = tmp_path / "card.img"
    img.write_bytes(bytes(MIB))
    assert main(["capacity", str(img)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: refusing to write") and "\n" not in err
    assert img.read_bytes() == bytes(MIB)
    assert not list(tmp_path.glob("*.restore"))


@pytest.mark.parametrize("args,msg", [
    (["/nonexistent/card.img", "--allow-write", "--yes"], "no such"),
    (["X", "--full", "--restore-file", "r"], "--restore-file"),
    (["X", "--restore", "r", "--full"], "--restore"),
])
def test_cli_bad_input_is_one_line(args, msg, capsys):
    assert main(["capacity", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and msg in err and "\n" not in err


def test_cli_restore_file_cannot_be_a_device(tmp_path, capsys):
    img = tmp_path / "card.img"
    img.write_bytes(bytes(MIB))
    assert main(["capacity", str(img), "--allow-write", "--yes", "--restore-file", "/dev/null"]) == 2
    assert "regular files only" in capsys.readouterr().err


def test_cli_restore_file_that_exists_is_refused_and_kept(tmp_path, capsys):
    """The run would replace the file and delete it after restoring: a file it did not make is never used."""
    img = tmp_path / "card.img"
    img.write_bytes(bytes(2 * MIB))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    assert main(["capacity", str(img), "--allow-write", "--yes", "--restore-file", str(notes), "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "exists" in err and "\n" not in err
    assert notes.read_text() == "my notes" and img.read_bytes() == bytes(2 * MIB)


def test_cli_full_mode_on_an_image(tmp_path, capsys):
    img = tmp_path / "card.img"
    img.write_bytes(bytes(2 * MIB))
    assert main(["capacity", str(img), "--full", "--allow-write", "--yes", "-f", "json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "genuine" and doc["counts"]["good"] == 2 * MIB // 512


# ---- real block devices (root) -------------------------------------------------------------
def test_loop_device_is_genuine_and_keeps_its_data(loopdev, tmp_path, capsys):
    dev, img = loopdev
    with open(dev, "r+b") as f:
        f.write(random.Random(9).randbytes(MIB))
    subprocess.run(["sync"], check=False)
    with open(dev, "rb") as f:
        before = f.read()
    rfile = tmp_path / "loop.restore"
    assert main(["capacity", dev, "--allow-write", "--yes", "-f", "json", "--restore-file", str(rfile)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "genuine" and doc["announced_bytes"] == 32 * MIB
    with open(dev, "rb") as f:
        assert f.read() == before


def test_device_mapper_wraparound(tmp_path, capsys):
    """A dm-linear device of 512 MiB whose second half maps onto its first (a wrap-around fake, as the real
    ones are), over a 256 MiB loop device: quick mode says fake and finds the usable bytes within 1 %."""
    if os.geteuid() != 0 or not shutil.which("dmsetup") or not os.path.exists("/dev/mapper/control"):
        pytest.skip("device-mapper is not available here")
    img = tmp_path / "backing.img"
    with open(img, "wb") as f:
        f.truncate(256 * MIB)
    from conftest import attach_loop, run_cmd

    loop = attach_loop(img)
    name = f"sdbench-wrap-{os.getpid()}"
    half = 256 * MIB // 512
    table = f"0 {half} linear {loop} 0\n{half} {half} linear {loop} 0\n"
    try:
        r = subprocess.run(["dmsetup", "create", name], input=table, capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"dmsetup create failed: {r.stderr.strip().splitlines()[0] if r.stderr.strip() else ''}")
        try:
            dev = f"/dev/mapper/{name}"
            assert main(["capacity", dev, "--allow-write", "--yes", "-f", "json", "-q",
                         "--restore-file", str(tmp_path / "dm.restore")]) == 1
            doc = json.loads(capsys.readouterr().out)
            assert doc["verdict"] == "fake" and doc["announced_bytes"] == 512 * MIB
            assert abs(doc["usable_bytes"] - 256 * MIB) <= 0.01 * 256 * MIB
        finally:
            run_cmd("dmsetup", "remove", name)
    finally:
        run_cmd("losetup", "-d", loop)


def test_the_confirmation_says_quick_mode_restores_and_full_mode_destroys(tmp_path, monkeypatch):
    from sdbench.cli import cmd_capacity
    from sdbench.media.realtarget import WriteGrant

    img = tmp_path / "card.img"
    with open(img, "wb") as f:
        f.truncate(8 << 20)
    asked: list[str] = []
    monkeypatch.setattr(cmd_capacity, "write_grant",
                        lambda allow, yes: WriteGrant(allow_write=allow, ask=lambda q: asked.append(q) or True))
    monkeypatch.chdir(tmp_path)
    assert main(["capacity", str(img), "--allow-write", "-f", "json"]) == 0
    assert "restored from a copy saved first" in asked[-1] and "destroyed" not in asked[-1]
    assert main(["capacity", str(img), "--allow-write", "--full", "-f", "json", "-q"]) == 0
    assert "destroyed" in asked[-1]


def test_without_allow_write_quick_mode_says_it_restores(tmp_path, capsys):
    """Issue 32: `capacity` without --allow-write said data would be "destroyed" though quick mode restores it."""
    from sdbench.cli import main

    img = tmp_path / "card.img"
    with open(img, "wb") as f:
        f.truncate(32 << 20)
    assert main(["capacity", str(img)]) == 2
    err = capsys.readouterr().err
    assert "without --allow-write" in err and "restored" in err and "destroyed" not in err, err
    assert main(["capacity", str(img), "--full"]) == 2
    assert "destroyed" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [img]   # nothing written, no restore file left
