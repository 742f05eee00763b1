"""A pass over a big region is made in windows, so a whole card or disk in small blocks fits in memory; the
patterns that cannot be made in windows are refused beyond a limit, before the run, in one line."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sdbench.cli import main
from sdbench.clock import WallClock
from sdbench.errors import ConfigError
from sdbench.media.base import BlockDeviceWrapper, Geometry
from sdbench.media.linux import LinuxBlockDevice
from sdbench.media.memory import MemoryDevice
from sdbench.workloads import fio
from sdbench.workloads.fio import plan as plan_mod
from sdbench.workloads.fio.fiofile import build_run, parse_ini
from sdbench.workloads.fio.jobs import JobConfig
from sdbench.workloads.fio.plan import IoPlan, permuted

MIB = 1 << 20


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 1000, (1 << 16) + 3])
def test_permuted_is_a_permutation_for_any_key(n):
    idx = np.arange(n, dtype=np.int64)
    a = permuted(n, (1, 2, 3), idx)
    assert sorted(a.tolist()) == list(range(n))
    # a slice of the indices gives the same entries as the whole
    assert np.array_equal(permuted(n, (1, 2, 3), idx[n // 3:]), a[n // 3:])
    if n > 8:
        assert not np.array_equal(a, permuted(n, (1, 2, 4), idx)) and not np.array_equal(a, idx)


class Tracer(BlockDeviceWrapper):
    kind = "trace"

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.ops: list[tuple[str, int]] = []

    def _read(self, lba, count, buf_addr):
        self.ops.append(("r", lba))
        return super()._read(lba, count, buf_addr)

    def _write(self, lba, data, buf_addr):
        self.ops.append(("w", lba))
        return super()._write(lba, data, buf_addr)


def memory(size: int = 4 * MIB) -> MemoryDevice:
    return MemoryDevice(Geometry(sector_size=512, sector_count=size // 512), WallClock())


@pytest.fixture
def small_windows(monkeypatch):
    monkeypatch.setattr(plan_mod, "WINDOW_IOS", 100)


def test_windows_cover_the_pass_as_one_pass_would(small_windows):
    # 4 MiB in 4 KiB blocks: 1024 I/Os in windows of 100
    job = JobConfig(name="w", rw="read", bs_bytes=4096, size_bytes=4 * MIB)
    assert IoPlan(job, 4 * MIB).windows() == 11
    dev = Tracer(memory())
    res = fio.run_job(dev, job)
    assert [lba for _, lba in dev.ops] == list(range(0, 8192, 8))       # in order, once each
    assert res.loops[0].ops["read"] == 1024
    # fio's random map over windows: every block once per pass, in no simple order; loops differ
    dev = Tracer(memory())
    res = fio.run_job(dev, JobConfig(name="r", rw="randread", bs_bytes=4096, size_bytes=4 * MIB, loops=2))
    first, second = [lba for _, lba in dev.ops[:1024]], [lba for _, lba in dev.ops[1024:]]
    assert sorted(first) == sorted(second) == list(range(0, 8192, 8))
    assert first != sorted(first) and first != second
    # a mix keeps its share in each window; io_size beyond the pass goes round the windows
    dev = Tracer(memory())
    res = fio.run_job(dev, JobConfig(name="m", rw="randrw", rwmixread=70, bs_bytes=4096, size_bytes=4 * MIB,
                                     io_size_bytes=6 * MIB))
    reads = sum(1 for k, _ in dev.ops if k == "r")
    assert len(dev.ops) == 1536 and abs(reads - 0.7 * 1536) <= 11


def test_windows_on_a_descriptor_with_verify_and_a_time_limit(tmp_path, small_windows):
    img = tmp_path / "card.img"
    img.write_bytes(b"\0" * (2 * MIB))
    dev = LinuxBlockDevice(str(img), allow_write=True)
    try:
        res = fio.run_job(dev, JobConfig(name="v", rw="randwrite", bs_bytes=4096, size_bytes=2 * MIB,
                                         verify="crc32c", iodepth=4))
        assert res.loops[0].ops["write"] == 512
        assert res.verify["ok"] and res.verify["checked_blocks"] == 512
        for engine, depth in (("auto", 16), ("psync", 8)):  # io_uring where there is one; psync's processes
            deep = fio.run_job(dev, JobConfig(name="d", rw="randread", bs_bytes=4096, size_bytes=2 * MIB,
                                              ioengine=engine, iodepth=depth))
            assert deep.loops[0].ops["read"] == 512
        timed = fio.run_job(dev, JobConfig(name="t", rw="read", bs_bytes=4096, size_bytes=2 * MIB,
                                           runtime_s=0.3, time_based=True))
        assert timed.loops[0].ops["read"] > 512                              # round the windows, more than once
        assert 0.25 < timed.loops[0].duration_ns / 1e9 < 1.0
    finally:
        dev.close()


def test_a_pattern_that_cannot_be_windowed_is_refused_past_the_limit(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(plan_mod, "MAX_PASS_IOS", 1000)
    split, zipf = (j.config for j in build_run([("t.fio", parse_ini(
        "[b]\nrw=randread\nbssplit=4k/50:8k/50\nsize=8M\n[z]\nrw=randread\nrandom_distribution=zipf:1.2\n"
        "bs=4k\nsize=8M\n", "t.fio", env={}))], []).jobs)
    with pytest.raises(ConfigError, match="several block sizes"):
        IoPlan(split, 8 * MIB)
    with pytest.raises(ConfigError, match="this random pattern"):
        IoPlan(zipf, 8 * MIB)
    IoPlan(JobConfig(name="ok", rw="randread", bs_bytes=4096, size_bytes=8 * MIB), 8 * MIB)   # windows instead
    img = tmp_path / "card.img"
    img.write_bytes(b"\0" * (8 * MIB))
    rc = main(["fio", "--name=z", "--rw=randread", "--random_distribution=zipf:1.2", "--bs=4k",
               f"--filename={img}", "--no-save", "-q"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: job z: one pass") and err.count("\n") == 1


def test_a_whole_big_device_in_small_blocks_stays_small_in_memory(tmp_path):
    """A 256 GiB sparse image read whole in 4 KiB blocks is a pass of 64 Mi I/Os: made whole, the sequential and
    random passes grew the process by 2.5 GiB; in windows, by about 100 MiB at most."""
    img = tmp_path / "big.img"
    with open(img, "wb") as f:
        f.truncate(256 << 30)
    code = f"""
import resource, sys
from sdbench.media.linux import LinuxBlockDevice
from sdbench.workloads import fio
from sdbench.workloads.fio.jobs import JobConfig
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
dev = LinuxBlockDevice({str(img)!r}, allow_write=False)
for rw in ("read", "randread"):
    res = fio.run_job(dev, JobConfig(name=rw, rw=rw, bs_bytes=4096, size_bytes=0, runtime_s=0.2,
                                     time_based=True))
    assert res.loops[0].ops["read"] > 0
dev.close()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    grew_kib = int(r.stdout.strip().splitlines()[-1])
    assert grew_kib < 128 * 1024, f"{grew_kib} KiB"


def test_the_cli_reads_a_big_image_in_windows(tmp_path):
    img = tmp_path / "big.img"
    with open(img, "wb") as f:
        f.truncate(64 << 30)
    out = tmp_path / "out.json"
    rc = main(["fio", "--name=s", "--rw=randread", "--bs=4k", f"--filename={img}", "--runtime=0.2",
               "--time_based", "--output-format=json", f"--output={out}", "--no-save", "-q"])
    assert rc == 0
    job = json.loads(Path(out).read_text())["jobs"][0]
    assert job["read"]["total_ios"] > 0 and job["job options"]["rw"] == "randread"
