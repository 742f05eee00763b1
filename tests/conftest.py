"""Test-wide set-up: results go to a temporary database, never the user's; loop devices for the root tests.

Only loop devices created here, on image files created in tmp, are ever written.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

MIB = 1 << 20


@pytest.fixture(autouse=True)
def _private_results_db(tmp_path, monkeypatch):
    monkeypatch.setenv("SDBENCH_DB", str(tmp_path / "results.sqlite"))


def write_file(tmp_path: Path, name: str, text: str) -> str:
    """``text`` as file ``name`` in ``tmp_path``; its path (for scenario and profile files of a test)."""
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def sim_sd_toml(extra: str = "") -> str:
    """The [sd] tables of a small simulated card (256 MiB, ESP32 SDMMC, 4-bit at 40 MHz), then ``extra``."""
    return f"""
[sd]
media = "sim"
host = "esp32-sdmmc"
card = "generic-sdhc"
capacity_bytes = 268435456
[sd.bus]
kind = "sd4"
clock_hz = 40000000
{extra}
"""


def run_cmd(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True)


def attach_loop(img: Path) -> str:
    if os.geteuid() != 0:
        pytest.skip("loop devices need root")
    if not shutil.which("losetup"):
        pytest.skip("losetup is not installed")
    r = run_cmd("losetup", "--find", "--show", str(img))
    if r.returncode != 0 or not r.stdout.strip():
        pytest.skip(f"losetup does not work here: {r.stderr.strip()}")
    return r.stdout.strip()


@pytest.fixture
def loopdev(tmp_path):
    img = tmp_path / "loop.img"
    with open(img, "wb") as f:
        f.truncate(32 * MIB)
    dev = attach_loop(img)
    yield dev, img
    run_cmd("umount", dev)
    run_cmd("losetup", "-d", dev)


def mkfs_and_mount(dev: str, fstype: str, mnt: Path) -> None:
    # no lazy initialisation: the kernel would otherwise write the inode tables in the background after mount,
    # and tests compare the backing file's bytes before and after
    mkfs = {"ext4": ["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"],
            "vfat": ["mkfs.vfat"], "exfat": ["mkfs.exfat"]}[fstype]
    if not shutil.which(mkfs[0]):
        pytest.skip(f"{mkfs[0]} is not installed")
    if not shutil.which("mount"):
        pytest.skip("mount is not installed")
    r = run_cmd(*mkfs, dev)
    if r.returncode:
        pytest.skip(f"{mkfs[0]} failed: {r.stderr.strip()}")
    mnt.mkdir()
    r = run_cmd("mount", "-t", fstype, dev, str(mnt))
    if r.returncode:
        pytest.skip(f"cannot mount {fstype}: {r.stderr.strip()}")


@pytest.fixture
def mounted(loopdev, tmp_path, request):
    dev, img = loopdev
    mnt = tmp_path / "mnt"
    mkfs_and_mount(dev, request.param, mnt)
    yield dev, img, mnt
    run_cmd("umount", str(mnt))


CHROMIUM = Path("/usr/bin/chromium")


def chromium_screenshot(html: Path, tmp_path: Path, height: int):
    """``html`` rendered by headless Chromium 1280 px wide: the screenshot as an RGB float array."""
    from matplotlib.image import imread

    shot = tmp_path / "shot.png"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'profile'}", f"--window-size=1280,{height}", f"--screenshot={shot}",
           html.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, timeout=90)
    assert shot.exists(), proc.stderr.decode(errors="replace")[-500:]
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
    return imread(shot)[..., :3]
