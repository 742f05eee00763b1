"""fio-plot (the PyPI package many people chart fio's results with) reads sdbench's fio JSON and logs as they are.

The package goes into a temporary virtual environment of its own; without a network (or pip) the test is
skipped.  The series is fio-plot's own layout: a randread run per queue depth and job count, each writing
fio's JSON and its lat, iops and bw logs (``<rw>-iodepth-<d>-numjobs-<n>``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from sdbench.cli import main

pytestmark = pytest.mark.slow

MIB = 1 << 20
DEPTHS = (1, 2, 4)
JOBS = (1, 2)


@pytest.fixture(scope="module")
def fio_plot(tmp_path_factory) -> Path:
    env_dir = tmp_path_factory.mktemp("fioplot-venv")
    try:
        venv.EnvBuilder(with_pip=True).create(env_dir)
    except Exception as e:  # noqa: BLE001 - no venv or ensurepip here
        pytest.skip(f"cannot make a virtual environment: {e}")
    pip = env_dir / "bin" / "pip"
    r = subprocess.run([str(pip), "install", "--quiet", "--disable-pip-version-check", "fio-plot"],
                       capture_output=True, text=True, timeout=600)
    if r.returncode:
        pytest.skip(f"fio-plot could not be installed (no network?): {(r.stderr or r.stdout).strip()[-200:]}")
    exe = env_dir / "bin" / "fio-plot"
    if not exe.exists():
        pytest.skip("fio-plot installed no fio-plot command")
    return exe


def _series(tmp_path: Path) -> Path:
    img = tmp_path / "card.img"
    with open(img, "wb") as f:
        f.truncate(32 * MIB)
    out = tmp_path / "results"
    out.mkdir()
    cwd = os.getcwd()
    os.chdir(out)  # the logs go where the prefixes say: here
    try:
        for d in DEPTHS:
            for n in JOBS:
                prefix = f"randread-iodepth-{d}-numjobs-{n}"
                rc = main(["fio", "--name=series", f"--filename={img}", "--rw=randread", "--bs=4k", "--direct=1",
                           "--ioengine=io_uring", f"--iodepth={d}", f"--numjobs={n}", "--runtime=0.6",
                           "--time_based", "--size=16M", "--output-format=json",
                           f"--output=randread-{d}-{n}.json", f"--write_lat_log={prefix}",
                           f"--write_iops_log={prefix}", f"--write_bw_log={prefix}", "--log_avg_msec=100",
                           "--no-save", "-q"])
                assert rc == 0
    finally:
        os.chdir(cwd)
    return out


def _png(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_fio_plot_renders_bar_line_and_latency_charts(fio_plot, tmp_path):
    data = _series(tmp_path)
    doc = json.loads((data / "randread-4-2.json").read_text())
    assert [j["job options"]["numjobs"] for j in doc["jobs"]] == ["2", "2"]
    charts = {
        "bar_qd.png": ["-l", "-d", *map(str, DEPTHS), "-n", "1"],                # IOPS and latency by queue depth
        "bar_nj.png": ["-N", "-d", "1", "-n", *map(str, JOBS)],                  # by number of jobs
        "line.png": ["-g", "-t", "lat", "iops", "bw", "-d", *map(str, DEPTHS), "-n", "1"],  # the logs over time
        "latency.png": ["-H", "-d", "4", "-n", "1"],                              # latency histogram
    }
    for name, args in charts.items():
        r = subprocess.run([str(fio_plot), "-i", str(data), "-T", "sdbench", "-r", "randread", "-o",
                            str(tmp_path / name), *args], capture_output=True, text=True, timeout=300,
                           cwd=tmp_path)
        assert r.returncode == 0, (name, r.stdout[-1000:], r.stderr[-2000:])
        width, height = _png(tmp_path / name)
        assert width >= 1000 and height >= 500, (name, width, height)
    assert sys.executable  # the charts came from a separate interpreter: sdbench's own was not used
