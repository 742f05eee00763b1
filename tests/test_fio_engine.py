"""fio-like jobs, CRC-32C, latency histogram, stream and presets on image files and directories."""
from __future__ import annotations

import math
import os
import random
import zlib
from pathlib import Path

import numpy as np
import pytest

from sdbench.errors import ConfigError, SdbenchError
from sdbench.media.base import ReadOnlyError
from sdbench.fs.hostdir import DirTarget
from sdbench.media.linux import LinuxBlockDevice
from sdbench.records import MIB, Results
from sdbench.stats_latency import LatencyHistogram, exact_percentile, throughput_timeline
from sdbench.workloads import fio
from sdbench.workloads.stream import run_stream


def image(tmp_path: Path, size: int = 8 * MIB, name: str = "card.img") -> Path:
    p = tmp_path / name
    with open(p, "wb") as f:
        f.truncate(size)
    return p


# ---- CRC-32C ----------------------------------------------------------------------------------
def test_crc32c_check_value_and_chaining():
    assert fio.crc32c(b"123456789") == 0xE3069283       # the standard check value
    assert fio.crc32c(b"") == 0
    assert fio.crc32c(bytes(32)) == 0x8A9136AA           # RFC 3720 B.4: 32 bytes of zeros
    assert fio.crc32c(b"\xff" * 32) == 0x62A8AB43        # RFC 3720 B.4: 32 bytes of 0xFF
    assert fio.crc32c(bytes(range(32))) == 0x46DD794E    # RFC 3720 B.4: incrementing
    data = random.Random(1).randbytes(300_001)
    one = fio.crc32c(data)
    for cut in (1, 511, 512, 4096, 150_000):
        assert fio.crc32c(data[cut:], fio.crc32c(data[:cut])) == one
    assert one != zlib.crc32(data)  # a different polynomial from zlib's CRC-32


def test_crc32c_rows_matches_scalar():
    rng = np.random.default_rng(3)
    for m in (8, 63, 64, 65, 4088, 4096 * 3 - 8):
        mat = rng.integers(0, 256, size=(5, m), dtype=np.uint8)
        got = fio.crc32c_rows(mat)
        assert [int(x) for x in got] == [fio._update_py(0xFFFFFFFF, bytes(r)) ^ 0xFFFFFFFF for r in mat]


def test_block_trailer_round_trip_and_detection():
    bs = 4096
    blocks = bytearray(random.Random(2).randbytes(3 * bs))
    view = memoryview(blocks)
    for i in range(3):
        b = view[i * bs:(i + 1) * bs]
        fio.stamp_block(b, fio.crc32c(b[:bs - fio.TRAILER_BYTES]), 8192 + i * bs, i, 77)
    assert fio.check_blocks(bytes(blocks), bs, 8192, 77) == []
    assert fio.check_blocks(bytes(blocks), bs, 8192, 78) == [8192, 8192 + bs, 8192 + 2 * bs]  # stale run
    blocks[bs + 100] ^= 1
    assert fio.check_blocks(bytes(blocks), bs, 8192, 77) == [8192 + bs]
    blocks[bs + 100] ^= 1
    swapped = bytes(blocks[bs:2 * bs] + blocks[:bs] + blocks[2 * bs:])  # misplaced blocks
    assert fio.check_blocks(swapped, bs, 8192, 77) == [8192, 8192 + bs]


def test_stamp_crc_is_the_crc32c_check_value():
    import struct

    import crc32c as reference

    assert fio.crc32c(b"123456789") == reference.crc32c(b"123456789") == 0xE3069283
    bs = 512
    block = bytearray((bytes(range(256)) * 2)[:bs])
    view = memoryview(block)
    fio.stamp_block(view, fio.crc32c(view[:bs - fio.TRAILER_BYTES]), 1024, 3, 9)
    crc, magic = struct.unpack_from("<II", block, bs - 8)
    assert struct.unpack_from("<QQQ", block, bs - fio.TRAILER_BYTES) == (1024, 3, 9)
    assert crc == reference.crc32c(bytes(block[:bs - 8])) and magic == fio.VERIFY_MAGIC
    assert crc == 0x6D70FE77  # the on-disk stamp of this block, fixed since verify was first written


# ---- latency histogram ------------------------------------------------------------------------
@pytest.mark.parametrize("k", [3, 5, 7])
def test_histogram_percentiles_within_the_documented_bound(k):
    rng = np.random.default_rng(k)
    samples = np.concatenate([rng.lognormal(11, 1.2, 20_000), rng.uniform(0, 300, 500),
                              rng.lognormal(17, 0.3, 200)]).astype(np.int64)
    h = LatencyHistogram(k)
    h.record_many(samples[:10_000])
    for v in samples[10_000:10_100]:
        h.record(int(v))
    h2 = LatencyHistogram(k)
    h2.record_many(samples[10_100:])
    h.merge(h2)
    assert h.count == samples.size
    assert h.min_ns == samples.min() and h.max_ns == samples.max()
    assert math.isclose(h.mean_ns, samples.mean(), rel_tol=1e-12)
    bound = 2.0 ** -(k + 1)
    assert h.relative_error == bound
    vals = samples.tolist()
    for p in (0.1, 1, 10, 25, 50, 75, 90, 99, 99.9, 99.99, 100):
        exact = exact_percentile(vals, p)
        got = h.percentile_ns(p)
        assert abs(got - exact) <= bound * exact + 1e-9, (p, exact, got)
    rebuilt = LatencyHistogram.from_dict(h.to_dict())
    assert rebuilt.percentile_ns(99) == h.percentile_ns(99)


def test_histogram_small_values_are_exact_and_summary_keys():
    h = LatencyHistogram(7)
    for v in (0, 1, 2, 3, 255):
        h.record(v)
    assert [h.percentile_ns(p) for p in (20, 40, 60, 80, 100)] == [0, 1, 2, 3, 255]
    s = h.summary_us()
    assert set(s) == {"count", "min_us", "max_us", "mean_us", "p50_us", "p99_us", "p99_9_us"}
    with pytest.raises(ValueError):
        h.record(-1)


def test_throughput_timeline():
    ends = [int(0.2e9), int(0.5e9), int(1.1e9), int(2.5e9)]
    tl = throughput_timeline(ends, MIB, 0, 1.0, stop_ns=int(2.5e9))
    assert tl["t_s"] == [1.0, 2.0, 2.5]
    assert tl["iops"] == [2.0, 1.0, 2.0]       # last interval is 0.5 s long
    assert tl["mib_s"] == [2.0, 1.0, 2.0]


# ---- job configuration ------------------------------------------------------------------------
def test_sizes_and_aliases():
    assert fio.parse_size("4k") == 4096 and fio.parse_size("1M") == MIB and fio.parse_size("64MiB") == 64 * MIB
    assert fio.parse_size("2g") == 2 << 30 and fio.parse_size(512) == 512 and fio.parse_size("1.5k") == 1536
    assert fio.parse_size("0x100000") == MIB and fio.parse_size("0X1f") == 31  # an offset as disk tools print it
    for bad in ("lots", "0x", "0xg", "0x8000000000000000"):
        with pytest.raises(ConfigError):
            fio.parse_size(bad)
    j = fio.job_from_mapping({"rw": "randread", "bs": "8k", "size": "1M", "runtime": 2})
    assert (j.bs_bytes, j.size_bytes, j.runtime_s, j.random, j.reads, j.writes) == (8192, MIB, 2.0, True, True, False)


@pytest.mark.parametrize("bad, msg", [
    ({"rw": "sideways"}, "not one of"),
    ({"bs": 1000}, "multiple of 512"),
    ({"bs": "4k", "size": 1024}, "smaller than one block"),
    ({"iodepth": 0}, "below the minimum"),
    ({"rwmixread": 101}, "above the maximum"),
    ({"rw": "trim", "verify": "crc32c"}, "verify needs a job that writes or reads"),
    ({"time_based": True}, "time_based needs a runtime above 0 s"),
    ({"colour": "red"}, "unknown option"),
    ({"direct": "maybe"}, "true or false"),
])
def test_bad_job_options(bad, msg):
    with pytest.raises(ConfigError, match=msg):
        fio.job_from_mapping(bad)


def test_job_file_global_and_jobs(tmp_path):
    p = tmp_path / "jobs.toml"
    p.write_text('bs = "8k"\nsize = "1M"\n[global]\niodepth = 2\n[seqw]\nrw = "write"\n'
                 '[randr]\nrw = "randread"\nbs = "4k"\n')
    a, b = fio.load_job_file(p)
    assert (a.name, a.rw, a.bs_bytes, a.size_bytes, a.iodepth) == ("seqw", "write", 8192, MIB, 2)
    assert (b.name, b.rw, b.bs_bytes) == ("randr", "randread", 4096)
    single = tmp_path / "one.toml"
    single.write_text('rw = "randwrite"\n')
    (j,) = fio.load_job_file(single)
    assert j.name == "one" and j.rw == "randwrite"


@pytest.mark.parametrize("content, msg", [
    (None, "job file not found"),
    ("rw = ", "invalid TOML"),
    ('[j]\nrw = "write"\nblocksize = 3\n', "bs_bytes = 3 B is below the minimum 512 B"),
    ('[j]\nnope = 1\n', "unknown option bad.toml:j.nope"),
])
def test_job_file_errors(tmp_path, content, msg):
    p = tmp_path / "bad.toml"
    if content is not None:
        p.write_text(content)
    with pytest.raises(ConfigError, match=msg):
        fio.load_job_file(p)


# ---- running jobs -----------------------------------------------------------------------------
def test_sequential_write_then_read_on_an_image(tmp_path):
    img = image(tmp_path)
    dev = LinuxBlockDevice(img, allow_write=True)
    w = fio.JobConfig(name="w", rw="write", bs_bytes=64 * 1024, size_bytes=4 * MIB)
    r = fio.JobConfig(name="r", rw="read", bs_bytes=64 * 1024, size_bytes=4 * MIB, iodepth=3, loops=2)
    rec = fio.run_jobs(dev, [w, r])
    dev.close()
    wr, rr = rec.row("w write"), rec.row("r read")
    assert (wr.op, wr.bytes, wr.runs, wr.unit) == ("write", 4 * MIB, 1, "MiB/s")
    assert rr.bytes == 8 * MIB and rr.mib_s > 0
    m = rec.metadata["rows"]["r read"]
    assert m["ops"] == 128 and len(m["loops"]) == 2 and m["lat"]["count"] == 128
    assert m["lat"]["min_us"] <= m["lat"]["p50_us"] <= m["lat"]["p99_us"] <= m["lat"]["max_us"]
    assert math.isclose(m["iops"] * 64 * 1024, m["bw_bytes_s"])
    assert sum(m["timeline"]["iops"][i] * (m["timeline"]["t_s"][i] - (m["timeline"]["t_s"][i - 1] if i else 0))
               for i in range(len(m["timeline"]["t_s"]))) == pytest.approx(128, rel=1e-4)
    assert rec.clock == "wall" and rec.protocol == "fio" and rec.stack["kind"] == "linux"
    # stores and exports like any other run
    again = Results.from_json(Results(runs=(rec,)).to_json()).runs[0]
    assert again.row("r read").bytes == 8 * MIB and again.metadata["rows"]["r read"]["ops"] == 128


def test_random_jobs_cover_each_block_once_and_randrw_mixes(tmp_path):
    img = image(tmp_path)
    dev = LinuxBlockDevice(img, allow_write=True)
    res = fio.run_job(dev, fio.JobConfig(name="rw", rw="randrw", bs_bytes=4096, size_bytes=2 * MIB, rwmixread=70,
                                         iodepth=2, verify="crc32c"))
    ops_r = sum(lp.ops["read"] for lp in res.loops)
    ops_w = sum(lp.ops["write"] for lp in res.loops)
    assert ops_r + ops_w == 512 and 0.6 < ops_r / 512 < 0.8
    assert res.verify["ok"] and res.verify["checked_blocks"] == ops_w
    rows, meta = fio.job_rows(res)
    assert [r.label for r in rows] == ["rw read", "rw write"] and all(r.unit == "IOPS" for r in rows)
    assert rows[0].value == pytest.approx(meta["rw read"]["iops"])
    dev.close()


def test_runtime_limits_and_time_based(tmp_path):
    dev = LinuxBlockDevice(image(tmp_path), allow_write=True)
    res = fio.run_job(dev, fio.JobConfig(rw="randread", bs_bytes=4096, size_bytes=MIB, runtime_s=0.3,
                                         time_based=True))
    lp = res.loops[0]
    assert lp.ops["read"] > 256                     # went round the 1 MiB region more than once
    assert 0.25e9 < lp.duration_ns < 1.5e9
    dev.close()


def test_verify_detects_corruption_injected_into_the_image(tmp_path):
    img = image(tmp_path)
    dev = LinuxBlockDevice(img, allow_write=True, offset_bytes=MIB, size_bytes=4 * MIB)
    job = fio.JobConfig(name="v", rw="randwrite", bs_bytes=8192, size_bytes=2 * MIB, offset_bytes=512 * 1024,
                        verify="crc32c")

    def corrupt():
        with open(img, "r+b") as f:
            # block 3 of the job region: one flipped byte in its payload
            pos = MIB + 512 * 1024 + 3 * 8192 + 1000
            f.seek(pos)
            b = f.read(1)
            f.seek(pos)
            f.write(bytes([b[0] ^ 0x40]))
            # block 10: zeroed (a lost write)
            f.seek(MIB + 512 * 1024 + 10 * 8192)
            f.write(bytes(8192))
            f.flush()
            os.fsync(f.fileno())

    rec = fio.run_jobs(dev, [job], before_verify=corrupt)
    dev.close()
    v = rec.metadata["verify"]["v"]
    assert not v["ok"] and v["bad_blocks"] == 2 and v["checked_blocks"] == 256
    assert v["bad_offsets_bytes"] == [3 * 8192, 10 * 8192] and v["first_bad_offset_bytes"] == 3 * 8192
    assert fio.verify_failures(rec) == ["v: 2 of 256 blocks corrupted (first at byte 24576)"]


def test_verify_passes_without_corruption_and_jobs_stay_in_their_region(tmp_path):
    img = image(tmp_path, 4 * MIB)
    with open(img, "r+b") as f:
        f.write(b"\xee" * (4 * MIB))
    dev = LinuxBlockDevice(img, allow_write=True)
    rec = fio.run_jobs(dev, [fio.JobConfig(name="v", rw="write", bs_bytes=4096, size_bytes=MIB, offset_bytes=MIB,
                                           verify="crc32c", iodepth=4)])
    dev.close()
    assert rec.metadata["verify"]["v"]["ok"]
    raw = img.read_bytes()
    assert raw[:MIB] == b"\xee" * MIB and raw[2 * MIB:] == b"\xee" * (2 * MIB)


def test_jobs_need_room_and_permission(tmp_path):
    dev = LinuxBlockDevice(image(tmp_path, MIB))
    with pytest.raises(ReadOnlyError, match="allow_write"):
        fio.run_job(dev, fio.JobConfig(rw="write", size_bytes=MIB))
    with pytest.raises(SdbenchError, match="too small"):
        fio.run_job(dev, fio.JobConfig(rw="read", size_bytes=2 * MIB))
    dev.close()


def test_jobs_on_a_directory_target(tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    fs = DirTarget(d)
    rec = fio.run_jobs(fs, [fio.JobConfig(name="a", rw="randwrite", bs_bytes=4096, size_bytes=MIB, verify="crc32c"),
                            fio.JobConfig(name="a", rw="randread", bs_bytes=4096, size_bytes=MIB)])
    assert rec.metadata["verify"]["a"]["ok"]
    assert rec.row("a read").bytes == MIB and rec.stack["kind"] == "dir"
    assert os.path.getsize(d / "sdbench-a.bin") == MIB
    fs.cleanup()
    assert os.listdir(d) == []
    with pytest.raises(ConfigError, match="size is needed"):
        fio.run_job(fs, fio.JobConfig(rw="read", size_bytes=0))


# ---- stream and presets -----------------------------------------------------------------------
def test_stream_on_an_image_and_corruption(tmp_path):
    img = image(tmp_path, 4 * MIB)
    dev = LinuxBlockDevice(img, allow_write=True)
    rec = run_stream(dev, size_mib=2, chunk_bytes=256 * 1024, passes=2)
    w, r = rec.row("stream write"), rec.row("stream read")
    assert (w.bytes, w.runs, w.unit) == (2 * MIB, 2, "MB/s") and r.runs == 2
    assert w.value == pytest.approx(w.bytes / 1e6 / (w.time_ms / 1e3))
    assert rec.metadata["verify"]["stream"] == {"method": "compare", "checked_chunks": 16, "bad_chunks": 0,
                                                "first_bad_offset_bytes": None, "ok": True}

    def corrupt():
        with open(img, "r+b") as f:
            f.seek(5 * 256 * 1024 + 17)
            f.write(b"\x00\x01\x02")

    rec = run_stream(dev, size_mib=2, chunk_bytes=256 * 1024, before_verify=corrupt)
    v = rec.metadata["verify"]["stream"]
    assert not v["ok"] and v["bad_chunks"] == 1 and v["first_bad_offset_bytes"] == 5 * 256 * 1024
    dev.close()
    with pytest.raises(SdbenchError, match="too small"):
        run_stream(LinuxBlockDevice(img, allow_write=True), size_mib=8)


def test_stream_on_a_directory(tmp_path):
    fs = DirTarget(tmp_path)
    rec = run_stream(fs, size_mib=2)
    assert rec.metadata["verify"]["stream"]["ok"] and rec.metadata["direct"]
    fs.cleanup()
    assert os.listdir(tmp_path) == []


def test_sdfat_bench_on_image_and_directory(tmp_path):
    dev = LinuxBlockDevice(image(tmp_path, MIB), allow_write=True)
    rec = fio.run_sdfat(dev, file_bytes=100_000)
    dev.close()
    w, r = rec.row("sdfat write"), rec.row("sdfat read")
    assert w.bytes == 195 * 512 and w.runs == 2 and r.runs == 2 and w.unit == "KB/s"
    assert w.value == pytest.approx(w.bytes / w.time_ms)
    p = rec.metadata["rows"]["sdfat write"]["passes"][0]
    assert p["min_us"] <= p["avg_us"] <= p["max_us"]
    assert rec.metadata["verify"]["sdfat"]["ok"]
    d = tmp_path / "fat"
    d.mkdir()
    fs = DirTarget(d)
    rec = fio.run_sdfat(fs, file_bytes=50_000, write_passes=1, read_passes=1)
    assert (d / "BENCH.DAT").stat().st_size == 97 * 512
    assert rec.metadata["verify"]["sdfat"]["checked_chunks"] == 97


def _rising(seen: list[tuple[str, float]]) -> None:
    """A preset's progress: the fraction of the whole run, never going back, from near 0 to 1."""
    fracs = [f for _, f in seen]
    assert fracs and all(0.0 <= f <= 1.0 for f in fracs)
    assert all(b >= a for a, b in zip(fracs, fracs[1:])), fracs
    assert fracs[0] < 0.5 and fracs[-1] > 0.75


def test_presets_report_the_whole_runs_progress(tmp_path):
    """Each job and loop of a preset reported its own fraction, so the line went 77 %, then 73 %."""
    dev = LinuxBlockDevice(image(tmp_path, 32 * MIB), allow_write=True)
    try:
        seen: list[tuple[str, float]] = []
        fio.run_cdm(dev, size_bytes=32 * MIB, loops=2, runtime_s=0.15, profile="real", mix=True,
                    progress=lambda label, f: seen.append((label, f)))
        _rising(seen)
        assert {"RND4K Q1T1 read", "RND4K Q1T1 write", "RND4K Q1T1 mix 70/30"} <= {label for label, _ in seen}
        for run in (lambda pr: fio.run_a1(dev, size_bytes=2 * MIB, runtime_s=0.3, progress=pr),
                    lambda pr: fio.run_sdfat(dev, file_bytes=1_000_000, progress=pr)):
            seen = []
            run(lambda label, f: seen.append((label, f)))
            _rising(seen)
    finally:
        dev.close()


def test_cdm_and_a1_presets_on_an_image(tmp_path):
    dev = LinuxBlockDevice(image(tmp_path, 8 * MIB), allow_write=True)
    rec = fio.run_cdm(dev, size_bytes=4 * MIB, loops=2, runtime_s=0.1)
    labels = [r.label for r in rec.rows]
    assert labels == [f"{t} {k}" for k in ("read", "write") for t, *_ in fio.CDM_TESTS]
    r = rec.row("RND4K Q32T1 read")
    assert r.unit == "MB/s" and len(rec.metadata["rows"][r.label]["loops"]) == 2
    best = max(rec.metadata["rows"][r.label]["loops"], key=lambda x: x["mib_s"])
    assert r.mib_s == pytest.approx(best["mib_s"], rel=1e-6)
    a1 = fio.run_a1(dev, size_bytes=2 * MIB, runtime_s=0.2)
    crit = {c["name"]: c for c in a1.metadata["a1"]["criteria"]}
    assert set(crit) == {"sequential write", "random 4K write", "random 4K read"}
    assert crit["random 4K read"]["threshold"] == 1500 and crit["random 4K write"]["threshold"] == 500
    assert crit["sequential write"]["threshold"] == 10_000 and crit["sequential write"]["unit"] == "KiB/s"
    assert a1.metadata["a1"]["pass"] == all(c["pass"] for c in crit.values())
    assert a1.metadata["jobs"][0]["iodepth"] == 4
    dev.close()
    ro = LinuxBlockDevice(image(tmp_path, 8 * MIB, "ro.img"))
    with pytest.raises(ReadOnlyError, match="--mode read"):
        fio.run_cdm(ro, size_bytes=MIB, loops=1, runtime_s=0.05)
    assert len(fio.run_cdm(ro, size_bytes=MIB, loops=1, runtime_s=0.05, mode="read").rows) == 4
    ro.close()


def test_deep_queues_spread_over_processes_and_cover_every_block_once(tmp_path):
    from sdbench.media.linux import LinuxBlockDevice
    from sdbench.workloads.fio import JobConfig, run_job
    from sdbench.workloads.fio.engine import PROCESS_MIN_IODEPTH, _cpus, _Engine
    from sdbench.workloads.fio.target import _open_port

    img = tmp_path / "card.img"
    img.write_bytes(os.urandom(4 << 20))
    dev = LinuxBlockDevice(str(img), allow_write=True)
    try:
        for rw in ("randread", "randrw"):
            job = JobConfig(name="q", rw=rw, bs_bytes=4096, size_bytes=4 << 20, iodepth=2 * PROCESS_MIN_IODEPTH,
                            seed=3, ioengine="psync")
            port = _open_port(dev, job)
            eng = _Engine(port, job, 1)
            procs = eng.processes()
            eng.close()
            port.close()
            assert procs == min(_cpus(), 4)
            res = run_job(dev, job)
            lp = res.loops[0]
            assert res.ioengine == "psync"
            assert lp.ops["read"] + lp.ops["write"] == 1024        # every block of the region, once
            lat = res.stats.dirs["read"].lat
            assert lat.n == lp.ops["read"] and lat.h.min_ns > 0
        # verify keeps one process: its record of written blocks lives there
        job = JobConfig(name="v", rw="randwrite", bs_bytes=4096, size_bytes=1 << 20, iodepth=16, verify="crc32c",
                        ioengine="psync")
        port = _open_port(dev, job)
        eng = _Engine(port, job, 1)
        assert eng.processes() == 1
        eng.close()
        port.close()
    finally:
        dev.close()


def test_sequential_mix_is_fios_rw():
    """rw (fio's readwrite): blocks in order, rwmixread % of them reads; fio's spellings map."""
    from sdbench.workloads.fio.fiofile import build_run, parse_ini
    from sdbench.workloads.fio.jobs import job_from_mapping
    from sdbench.workloads.fio.plan import block_order, op_kinds

    job = job_from_mapping({"rw": "readwrite", "bs": "4k", "size": "4M", "rwmixread": 70})
    assert job.rw == "rw" and job.reads and job.writes and not job.random
    assert list(block_order(job, 1024, 0)) == list(range(1024))
    kinds = op_kinds(job, 1024, 0)
    assert len(kinds) == 1024 and 0.6 < sum(kinds) / 1024 < 0.8
    (ini,) = build_run([("j.fio", parse_ini("[j]\nrw=readwrite\nbs=4k\nsize=1M\n", "j.fio"))], []).jobs
    assert ini.config.rw == "rw"
