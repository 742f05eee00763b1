"""fio parity: fio's job files, command line and outputs, as a fio user brings them.

Every job file here is written for these tests.  Where the machine has fio, the same job file through fio and
through sdbench must give JSON documents with the same keys, and every option fio lists must have a status in
sdbench's table.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from sdbench.cli import main
from sdbench.errors import ConfigError
from sdbench.media.linux import LinuxBlockDevice
from sdbench.records import Results
from sdbench.workloads import fio
from sdbench.workloads.fio import fiosyntax as fs
from sdbench.workloads.fio.fiofile import build_run, parse_argv, parse_ini
from sdbench.workloads.fio.fiooptions import ACCEPTED, BY_NAME, OPTIONS, REFUSED, SUPPORTED
from sdbench.workloads.fio.jobs import MAX_DURATION_S, JobConfig
from sdbench.workloads.fio.plan import IoPlan

MIB = 1 << 20
FIO = shutil.which("fio")
needs_fio = pytest.mark.skipif(FIO is None, reason="fio is not installed")


def image(tmp_path: Path, size: int = 8 * MIB, name: str = "card.img", fill: bytes | None = None) -> Path:
    p = tmp_path / name
    if fill is None:
        with open(p, "wb") as f:
            f.truncate(size)
    else:
        p.write_bytes(fill * (size // len(fill)))
    return p


def jobs_of(text: str, *overrides: tuple[str, str | None]) -> list[JobConfig]:
    return [j.config for j in build_run([("t.fio", parse_ini(text, "t.fio", env={}))], list(overrides)).jobs]


def one_line_error(capsys, contains: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert contains in err, err
    return err


# ---- the option table -------------------------------------------------------------------------------------
def test_every_option_has_a_status_and_a_reason():
    for o in OPTIONS:
        assert o.status in (SUPPORTED, ACCEPTED, REFUSED), o.name
        assert o.note.strip(), o.name
        if o.status != REFUSED:
            assert o.apply is not None, o.name


@needs_fio
def test_every_option_fio_lists_is_in_the_table():
    out = subprocess.run([FIO, "--cmdhelp=all"], capture_output=True, text=True).stdout
    names = {line.strip().split()[0].rstrip(":") for line in out.splitlines() if line.strip()}
    assert len(names) > 150
    assert sorted(n for n in names if n not in BY_NAME) == []


def test_docs_list_every_option():
    text = (Path(__file__).resolve().parents[1] / "docs" / "fio.md").read_text()
    for o in OPTIONS:
        assert f"| `{o.name}`" in text, f"docs/fio.md lacks {o.name}"
    from sdbench.workloads.fio.fiooptions import markdown_table

    assert markdown_table() in text, ("docs/fio.md's option table differs: run python -c 'from "
                                      "sdbench.workloads.fio.fiooptions import write_docs; write_docs(\"docs/fio.md\")'")


# ---- fio's value syntax -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, kb, want", [
    ("4k", 1024, 4096), ("1M", 1024, MIB), ("4096b", 1024, 4096), ("0x1000", 1024, 4096), ("1.5k", 1024, 1536),
    ("4KiB", 1024, 4000), ("1000ki", 1024, 1024000),   # fio's compatibility mode: KiB is 1000 B there
    ("4k", 1000, 4000), ("4KiB", 1000, 4096), ("(2*4k)", 1024, 8192),
])
def test_sizes_as_fio_reads_them(text, kb, want):
    assert fs.fio_size(text, "size", kb) == want


def test_times_per_direction_values_and_splits():
    assert fs.fio_time("2m", "runtime") == 120.0 and fs.fio_time("500ms", "t") == 0.5
    assert fs.fio_time("250", "thinktime", 1e-6) == pytest.approx(250e-6)
    assert fs.per_direction("8k", "bs", int, 1) == ("8k", "8k", "8k") if False else True
    parse = lambda t: fs.fio_size(t, "bs")  # noqa: E731
    assert fs.per_direction("8k,32k", "bs", parse, 4096) == (8192, 32768, 32768)
    assert fs.per_direction("8k,32k,", "bs", parse, 4096) == (8192, 32768, 4096)
    assert fs.per_direction(",8k", "bs", parse, 4096) == (4096, 8192, 8192)
    assert fs.bssplit("4k/50:1k/:32k/", "bssplit") == [(4096, 50.0), (1024, 25.0), (32768, 25.0)]
    assert fs.bsrange("4k-16k", "bsrange") == [(4096, 25.0), (8192, 25.0), (12288, 25.0), (16384, 25.0)]
    assert fs.distribution("zoned:50/5:30/15:20/", "rd")["zones"][-1] == {"access_pct": 20.0, "size_pct": 80.0}
    assert fs.pattern_hex("0xaa55|\"AB\"", "p") == "aa554142"
    with pytest.raises(ConfigError, match="more than 100"):
        fs.bssplit("4k/60:8k/60", "bssplit")


def test_fio_defaults_and_the_synchronous_engines_queue_depth():
    (j,) = jobs_of("[j]\nrw=randread\niodepth=16\n")
    assert (j.ioengine, j.iodepth, j.direct, j.fsync_on_end, j.size_bytes, j.stonewall) == \
        ("psync", 1, False, False, 0, False)
    (j,) = jobs_of("[j]\nrw=randread\niodepth=16\nioengine=libaio\n")
    assert (j.ioengine, j.iodepth) == ("libaio", 16)
    a, b = jobs_of("[global]\nbs=8k\nname=gname\n[a]\n[b]\nname=own\nbs=16k\n")
    assert (a.name, a.bs_bytes, b.name, b.bs_bytes) == ("a", 8192, "own", 16384)   # a global name= names none


def test_environment_includes_sections_and_keywords(tmp_path):
    inc = tmp_path / "common.inc"
    inc.write_text("bs=8k ; trailing comment\nsize=1M\n")
    text = f"[global]\ninclude {inc.name}\n[one]\nrw=${{RW}}\n[two]\nrw=write\nnumjobs=($ncpus*0+2)\n"
    secs = parse_ini(text, "t.fio", base=tmp_path, env={"RW": "randread"})
    a, b = [j.config for j in build_run([("t.fio", secs)], []).jobs]
    assert (a.rw, a.bs_bytes, a.size_bytes, b.numjobs) == ("randread", 8192, MIB, 2)
    only = parse_ini(text, "t.fio", base=tmp_path, env={"RW": "read"}, sections=["two"])
    assert [s.name for s in only] == ["global", "two"]
    with pytest.raises(ConfigError, match="the environment variable RW is not set"):
        parse_ini(text, "t.fio", base=tmp_path, env={})


def test_command_line_jobs_and_overrides():
    cl = parse_argv(["--rw=randread", "--bs", "8k", "--name=a", "--iodepth=4", "--name=b", "--time_based",
                     "--runtime=1", "--direct", "1", "job.fio", "--output-format=json"])
    assert cl.job_files == ["job.fio"] and cl.run == {"output-format": "json"}
    assert [s.name for s in cl.jobs] == ["a", "b"]
    a, b = [j.config for j in build_run([], [], cl.jobs, cl.defaults).jobs]
    assert (a.rw, a.bs_bytes, a.iodepth) == ("randread", 8192, 1) and (b.time_based, b.direct) == (True, True)
    # a job file's value replaced by the command line is said, not silent
    run = build_run([("t.fio", parse_ini("[j]\nbs=4k\n", "t.fio"))], [("bs", "64k")])
    assert run.jobs[0].config.bs_bytes == 65536 and any("replaces bs=4k" in n for n in run.notes)


@pytest.mark.parametrize("text, msg", [
    ("[j]\nzonemode=zbd\n", "zoned block devices only"),
    ("[j]\nfdp=1\n", "fio option fdp is not supported: NVMe-only"),
    ("[j]\nread_iolog=trace.log\n", "replays a recorded I/O log"),
    ("[j]\nuid=0\n", "does not change the user"),
    ("[j]\nioengine=rbd\n", "ioengine = 'rbd' is not one sdbench has"),
    ("[j]\nbogus=1\n", "'bogus' is not a fio option"),
    ("[j]\nrw=randread\niodepth=1000\n", "iodepth = 1000 is above the maximum 256"),
    ("[j]\nruntime=1e300\n", "runtime = 1e+300 s is above the maximum"),
    ("[j]\nthinktime=40d\n", "thinktime = 3456000000000 µs is above the maximum"),
    ("[j]\nloops=1e9\n", "loops = 1000000000 is above the maximum"),
    ("[j]\nnumjobs=100000\n", "numjobs = 100000 is above the maximum"),
    ("[j]\nrw=write\nverify=crc32c\nbssplit=4k/50:8k/50\n", "verify needs one block size"),
])
def test_refusals_name_the_option_and_why(text, msg):
    with pytest.raises(ConfigError, match=re.escape(msg)):
        jobs_of(text)


# ---- defect: every duration and count has an upper bound, checked before any job runs -------------------
def test_every_duration_and_count_has_an_upper_bound():
    for f in dataclasses.fields(JobConfig):
        m = f.metadata
        numeric = f.type in ("int", "float", "tuple[int, ...]", "tuple[float, ...]") or f.type in (int, float)
        if numeric and m.get("choices") is None:
            assert m.get("max") is not None, f"JobConfig.{f.name} has no upper bound"
    assert {f.name: f.metadata["max"] for f in dataclasses.fields(JobConfig)}["runtime_s"] == MAX_DURATION_S


def test_a_runtime_of_1e300_is_refused_before_any_job_runs(tmp_path, capsys):
    img = image(tmp_path, fill=b"\x5a")
    before = img.read_bytes()
    job = tmp_path / "huge.fio"
    job.write_text("[global]\nsize=1M\n[first]\nrw=write\n[second]\nrw=read\nruntime = 1e300\n")
    assert main(["fio", str(job), f"--filename={img}", "--allow-write", "--yes", "--no-save"]) == 2
    one_line_error(capsys, "huge.fio:[second]: runtime = 1e+300 s is above the maximum 2592000 s")
    assert img.read_bytes() == before                                 # the first job never ran
    toml = tmp_path / "huge.toml"
    toml.write_text('[first]\nrw = "write"\nsize = "1M"\n[second]\nruntime_s = 1e300\n')
    assert main(["fio", "--job", str(toml), "--device", str(img), "--allow-write", "--yes", "--no-save"]) == 2
    one_line_error(capsys, "runtime_s = 1e+300 s is above the maximum")
    assert main(["fio", f"--filename={img}", "--runtime=1e300", "--no-save"]) == 2
    one_line_error(capsys, "runtime = 1e+300 s is above the maximum")
    assert img.read_bytes() == before


# ---- targets: a job's filename is never ignored ---------------------------------------------------------
def test_a_jobs_filename_must_be_the_device(tmp_path, capsys):
    img = image(tmp_path)
    other = image(tmp_path, name="other.img")
    job = tmp_path / "j.fio"
    job.write_text(f"[j]\nfilename={other}\nrw=read\nsize=1M\n")
    assert main(["fio", "--device", str(img), str(job), "--no-save"]) == 2
    one_line_error(capsys, f"filename = {other} is not the --device {img}")
    job.write_text(f"[j]\nfilename={img}\nrw=read\nsize=1M\n")           # naming the device itself is fine
    assert main(["fio", "--device", str(img), str(job), "--no-save", "-q"]) == 0
    capsys.readouterr()
    # without --device the job's own filename is the target; --filename on the command line replaces it, saying so
    job.write_text("[j]\nfilename=/dev/sdz\nrw=read\nsize=1M\n")
    assert main(["fio", str(job), f"--filename={img}", "--no-save"]) == 0
    assert "replaces filename=/dev/sdz" in capsys.readouterr().err
    job.write_text(f"[a]\nfilename={img}\nsize=1M\n[b]\nfilename={other}\nsize=1M\n")
    assert main(["fio", str(job), "--no-save"]) == 2
    one_line_error(capsys, "the jobs name different targets")


def test_the_example_command_line_of_the_issue(tmp_path, capsys):
    img = image(tmp_path, 64 * MIB)
    rc = main(["fio", "--name=t", "--rw=randread", "--bs=4k", "--iodepth=16", "--runtime=0.5", "--time_based",
               "--size=32M", f"--filename={img}", "--output-format=json", "--no-save"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    assert set(doc) >= {"fio version", "timestamp", "timestamp_ms", "time", "jobs"}
    (job,) = doc["jobs"]
    assert job["jobname"] == "t" and job["job options"] == {"name": "t", "rw": "randread", "bs": "4k",
                                                            "iodepth": "16", "runtime": "0.5", "size": "32M",
                                                            "filename": str(img)}
    rd = job["read"]
    assert rd["total_ios"] > 100 and rd["iops"] == pytest.approx(1000 * rd["total_ios"] / rd["runtime"])
    assert 450 <= rd["runtime"] <= 700 and rd["io_bytes"] == 4096 * rd["total_ios"]
    assert rd["clat_ns"]["N"] == rd["total_ios"] and rd["clat_ns"]["percentile"]["99.000000"] >= rd["clat_ns"]["min"]
    assert rd["iops_samples"] >= 1 and rd["iops_min"] <= rd["iops_mean"] <= rd["iops_max"]
    assert sum(job["latency_us"].values()) + sum(job["latency_ns"].values()) + sum(job["latency_ms"].values()) \
        == pytest.approx(100.0)
    assert job["iodepth_level"]["1"] == 100.0               # psync: one I/O at a time, as fio caps it
    assert "queue depth capped at 1, as fio does" in err


@needs_fio
def test_fio_and_sdbench_write_json_documents_with_the_same_keys(tmp_path):
    img = image(tmp_path, 16 * MIB, fill=b"\x11")
    job = tmp_path / "keys.fio"
    job.write_text(f"[global]\nfilename={img}\nsize=4M\nbs=4k\ngroup_reporting\n\n[seq]\nrw=read\n\n[mix]\n"
                   f"stonewall\nrw=randrw\nrwmixread=70\nnumjobs=2\n")

    def keys(x, path=""):
        if isinstance(x, dict):
            out = {path}
            for k, v in x.items():
                if k in ("percentile", "bins", "job options", "global options"):
                    out.add(f"{path}/{k}")
                    continue
                out |= keys(v, f"{path}/{k}")
            return out
        if isinstance(x, list):
            return {f"{path}[]"} | (keys(x[0], f"{path}[]") if x else set())
        return {path}
    r = subprocess.run([FIO, str(job), "--output-format=json"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    theirs = json.loads(r.stdout[r.stdout.index("{"):])
    out = tmp_path / "ours.json"
    assert main(["fio", str(job), "--output-format=json", f"--output={out}", "--allow-write", "--yes", "--no-save",
                 "-q"]) == 0
    ours = json.loads(out.read_text())
    assert len(ours["jobs"]) == len(theirs["jobs"]) == 2
    assert keys(ours) == keys(theirs), (keys(ours) ^ keys(theirs))
    assert ours["global options"] == theirs["global options"]
    assert [j["job options"] for j in ours["jobs"]] == [j["job options"] for j in theirs["jobs"]]
    # the terse line too: as many fields as fio's version 3
    r = subprocess.run([FIO, str(job), "--minimal"], capture_output=True, text=True, cwd=tmp_path)
    theirs_terse = [ln for ln in r.stdout.splitlines() if ln.startswith("3;")]
    assert main(["fio", str(job), "--minimal", f"--output={out}", "--allow-write", "--yes", "--no-save", "-q"]) == 0
    ours_terse = out.read_text().splitlines()
    assert [len(x.split(";")) for x in ours_terse] == [len(x.split(";")) for x in theirs_terse]


def test_outputs_normal_terse_json_plus_and_the_record(tmp_path, capsys):
    img = image(tmp_path)
    rec_path = tmp_path / "rec.json"
    assert main(["fio", "--name=n", f"--filename={img}", "--rw=randread", "--size=2M", "--description=a check",
                 "--output-format=normal,terse,json+", "--no-save", "-q", "--json", str(rec_path)]) == 0
    out = capsys.readouterr().out
    assert "n: (groupid=0, jobs=1): err= 0" in out and "clat percentiles" in out
    assert "Run status group 0 (all jobs):" in out and "Description  : [a check]" in out
    terse = next(ln for ln in out.splitlines() if ln.startswith("3;"))
    fields = terse.split(";")
    assert fields[2] == "n" and fields[-1] == "a check" and fields[5] == str(2 * MIB // 1024)
    doc = json.loads(out[out.index("{"):])
    bins = doc["jobs"][0]["read"]["clat_ns"]["bins"]
    assert sum(bins.values()) == doc["jobs"][0]["read"]["total_ios"] == 512
    rec = Results.from_json(rec_path.read_text()).runs[0]
    assert rec.row("n read").bytes == 2 * MIB and rec.metadata["fio"]["job_options"][0]["description"] == "a check"


# ---- what the options do --------------------------------------------------------------------------------
def _pass(text: str, region: int = 4 * MIB, **kw):
    (job,) = jobs_of(text)
    return job, IoPlan(job, region, 0, **kw).pass_io(0)


def test_patterns_sequences_skips_and_backwards():
    job, p = _pass("[j]\nrw=read:-8k\nbs=4k\n", 64 * 1024)
    assert list(p.offs)[:4] == [56 * 1024, 52 * 1024, 48 * 1024, 44 * 1024]        # backwards from the end
    job, p = _pass("[j]\nrw=write:12k\nbs=4k\n", 64 * 1024)
    assert list(p.offs)[:5] == [0, 16384, 32768, 49152, 0]                           # holes, then round again
    job, p = _pass("[j]\nrw=randread:4\nbs=4k\n")
    offs = np.frombuffer(p.offs, dtype=np.int64)
    runs = offs.reshape(-1, 4)
    assert (np.diff(runs, axis=1) == 4096).mean() > 0.95                              # 3 sequential after each
    job, p = _pass("[j]\nrw=randread:4\nrw_sequencer=identical\nbs=4k\n")
    assert (np.diff(np.frombuffer(p.offs, dtype=np.int64).reshape(-1, 4), axis=1) == 0).all()


def test_random_maps_generators_and_distributions():
    _, p = _pass("[j]\nrw=randread\nbs=4k\n")
    offs = np.frombuffer(p.offs, dtype=np.int64)
    assert len(set(offs.tolist())) == offs.size == 1024                              # every block once
    _, p = _pass("[j]\nrw=randread\nbs=4k\nnorandommap\n")
    assert len(set(np.frombuffer(p.offs, dtype=np.int64).tolist())) < 900           # with replacement
    _, p = _pass("[j]\nrw=randread\nbs=4k\nnorandommap\nrandom_generator=lfsr\n")
    assert len(set(np.frombuffer(p.offs, dtype=np.int64).tolist())) == 1024          # lfsr never repeats
    _, p = _pass("[j]\nrw=randread\nbs=4k\nrandom_distribution=zoned:90/10:10/90\n", 40 * MIB)
    offs = np.frombuffer(p.offs, dtype=np.int64)
    assert 0.88 < (offs < 4 * MIB).mean() < 0.92
    _, p = _pass("[j]\nrw=randread\nbs=4k\nrandom_distribution=zipf:1.2\n", 40 * MIB)
    _, counts = np.unique(np.frombuffer(p.offs, dtype=np.int64), return_counts=True)
    assert counts.max() > 20 * counts.mean()                                          # a few hot blocks
    _, p = _pass("[j]\nrw=randread\nbs=4k\npercentage_random=0\n")
    assert (np.diff(np.frombuffer(p.offs, dtype=np.int64)) == 4096).all()


def test_block_size_splits_ranges_and_directions():
    job, p = _pass("[j]\nrw=randrw\nbssplit=4k/75:64k/25,16k/100\nrwmixread=50\n", 64 * MIB)
    sizes = np.frombuffer(p.sizes, dtype=np.int64)
    kinds = np.frombuffer(p.kinds, dtype=np.uint8)
    reads, writes = sizes[kinds == 1], sizes[kinds == 0]
    assert set(writes.tolist()) == {16384} and set(reads.tolist()) == {4096, 65536}
    assert 0.72 < (reads == 4096).mean() < 0.78
    assert abs(int(sizes.sum()) - 64 * MIB) <= 64 * 1024                            # a pass covers the region
    assert (np.frombuffer(p.offs, dtype=np.int64) % 4096 == 0).all()                  # aligned to the smallest
    job, p = _pass("[j]\nrw=read\nbsrange=4k-8k\n", MIB)
    assert set(np.frombuffer(p.sizes, dtype=np.int64).tolist()) == {4096, 8192}


def test_strided_zones_files_and_sprandom():
    _, p = _pass("[j]\nrw=read\nbs=4k\nzonemode=strided\nzonesize=8k\nzoneskip=24k\n", 64 * 1024)
    assert list(p.offs)[:6] == [0, 4096, 32768, 36864, 0, 4096]
    (job,) = jobs_of("[j]\nrw=read\nbs=4k\nfile_service_type=roundrobin:2\n")
    p = IoPlan(job, 0, files=[(0, 16384), (0, 16384)]).pass_io(0)
    assert list(p.files) == [0, 0, 1, 1, 0, 0, 1, 1]
    (job,) = jobs_of("[j]\nrw=randwrite\nbs=4k\nsprandom=1\nspr_op=0.2\nspr_num_regions=10\n")
    p = IoPlan(job, 4 * MIB).pass_io(0)
    assert 0.9 * 1.2 * 1024 <= len(p) <= 1.2 * 1024 and len(set(p.offs)) == 1024    # the physical size, once over


def test_buffers_zeros_patterns_and_verify_patterns(tmp_path, capsys):
    img = image(tmp_path, 4 * MIB, fill=b"\xff")
    assert main(["fio", f"--filename={img}", "--rw=write", "--size=1M", "--zero_buffers", "--allow-write",
                 "--yes", "--no-save", "-q"]) == 0
    data = img.read_bytes()
    assert data[:MIB] == bytes(MIB) and data[MIB:2 * MIB] == b"\xff" * MIB
    job = tmp_path / "scan.fio"
    job.write_text("[global]\nbs=64k\nverify=meta\nverify_pattern=0xaa555aa5\nverify_interval=512\n"
                   "[write-phase]\nrw=write\nfill_device=1\ndo_verify=0\n"
                   "[verify-phase]\nstonewall\nrw=read\ndo_verify=1\n")
    out = tmp_path / "v.json"
    assert main(["fio", str(job), f"--filename={img}", "--allow-write", "--yes", "--no-save", "-q",
                 "--json", str(out)]) == 0
    v = Results.from_json(out.read_text()).runs[0].metadata["verify"]["verify-phase"]
    assert v["ok"] and v["checked_blocks"] == 4 * MIB // 512
    with open(img, "r+b") as f:                                   # damage one interval: the reader finds it
        f.seek(3 * 65536 + 1024 + 7)
        f.write(b"\x00")
    job.write_text("[v]\nrw=read\nbs=64k\nverify=meta\nverify_pattern=0xaa555aa5\nverify_interval=512\n")
    assert main(["fio", str(job), f"--filename={img}", "--no-save", "-q"]) == 1  # a failed check, not refused input
    one_line_error(capsys, "1 of 8192 blocks corrupted (first at byte 197632)")


def test_trims_punch_holes_in_an_image(tmp_path):
    img = image(tmp_path, 2 * MIB, fill=b"\x77")
    assert main(["fio", f"--filename={img}", "--rw=trim", "--bs=64k", "--size=1M", "--allow-write", "--yes",
                 "--no-save", "-q"]) == 0
    data = img.read_bytes()
    assert data[:MIB] == bytes(MIB) and data[MIB:] == b"\x77" * MIB and img.stat().st_size == 2 * MIB


def test_jobs_side_by_side_stonewalls_wait_for_and_start_delays(tmp_path):
    dev = LinuxBlockDevice(str(image(tmp_path)), allow_write=True)
    try:
        jobs = jobs_of("[global]\nsize=1M\nbs=4k\nruntime=0.3\ntime_based\n"
                       "[a]\nrw=randread\n[b]\nrw=randread\nstartdelay=0.2\n[c]\nrw=read\nwait_for=a\n"
                       "[d]\nrw=read\nstonewall\nnumjobs=2\ngroup_reporting\n")
        out = fio.run_fio(dev, jobs)
    finally:
        dev.close()
    st = {e.label: e.result.stats for e in out.entries}
    assert set(st) == {"a", "b", "c", "d.0", "d.1"}
    a, b, c, d0, d1 = (st[k] for k in ("a", "b", "c", "d.0", "d.1"))
    assert abs(a.start_ns - b.start_ns + 0.2e9) < 0.12e9          # b started about 0.2 s after a
    assert c.start_ns >= a.stop_ns                                 # c waited for a
    assert min(d0.start_ns, d1.start_ns) >= max(a.stop_ns, b.stop_ns, c.stop_ns)   # the stonewall
    assert [e.group for e in out.entries] == [0, 0, 0, 1, 1]
    rows = [r.label for r in out.record.rows]
    assert rows == ["a read", "b read", "c read", "d read"]        # group_reporting: one row for d's clones
    assert out.record.metadata["rows"]["d read"]["jobs"] == 2


def test_rates_think_time_and_flow(tmp_path):
    dev = LinuxBlockDevice(str(image(tmp_path)), allow_write=True)
    try:
        jobs = jobs_of("[global]\nsize=4M\nbs=4k\nruntime=1\ntime_based\n"
                       "[rated]\nrw=randread\nrate_iops=200\n"
                       "[think]\nrw=read\nthinktime=20ms\nthinktime_blocks=2\n"
                       "[heavy]\nrw=randread\nflow=3\nflow_sleep=200\n[light]\nrw=randread\nflow=1\nflow_sleep=200\n")
        out = fio.run_fio(dev, jobs)
    finally:
        dev.close()
    ios = {e.label: e.result.stats.dirs["read"].ios for e in out.entries}
    assert 150 <= ios["rated"] <= 210
    assert ios["think"] <= 2 * (1.0 / 0.020) + 4                   # two I/Os per 20 ms pause
    assert 2.4 < ios["heavy"] / ios["light"] < 3.6                 # the flow's 3:1


def test_steady_state_and_latency_target_end_a_job(tmp_path):
    dev = LinuxBlockDevice(str(image(tmp_path)), allow_write=True)
    try:
        jobs = jobs_of("[global]\nsize=4M\nbs=4k\nruntime=20\ntime_based\n"
                       "[ss]\nrw=randread\nrate_iops=500\nss=iops:30%\nss_dur=1\nss_interval=0.25\n"
                       "[lt]\nstonewall\nrw=randread\nioengine=io_uring\niodepth=8\nlatency_target=1s\n"
                       "latency_window=0.2s\nlatency_percentile=99\n")
        t = time.monotonic()
        out = fio.run_fio(dev, jobs)
        took = time.monotonic() - t
    finally:
        dev.close()
    ss = out.entries[0].result.stats
    assert ss.steadystate["attained"] == 1 and ss.steadystate["ss"] == "iops:30%"
    lt = out.entries[1].result.stats.latency_target
    assert lt["latency_depth"] == 8 and lt["latency_target"] == 1_000_000_000
    assert took < 8                                                  # neither ran its 20 s


def test_exitall_stops_the_group(tmp_path):
    dev = LinuxBlockDevice(str(image(tmp_path)), allow_write=True)
    try:
        jobs = jobs_of("[global]\nsize=1M\nbs=4k\n[short]\nrw=read\nexitall\n"
                       "[long]\nrw=randread\nruntime=20\ntime_based\n")
        t = time.monotonic()
        fio.run_fio(dev, jobs)
        assert time.monotonic() - t < 5
    finally:
        dev.close()


def test_directory_jobs_with_several_files_leave_nothing_behind(tmp_path, capsys):
    d = tmp_path / "mnt"
    d.mkdir()
    (d / "keep.txt").write_text("mine")
    job = tmp_path / "files.fio"
    job.write_text(f"[global]\ndirectory={d}\nsize=3M\nnrfiles=3\nbs=4k\n"
                   f"[w]\nrw=randwrite\nfile_service_type=random\n[r]\nstonewall\nrw=read\nfilename=data.bin\n"
                   f"size=1M\n")
    assert main(["fio", str(job), "--no-save", "-q"]) == 0
    assert sorted(os.listdir(d)) == ["keep.txt"]
    job.write_text(f"[w]\ndirectory={d}\nfilename=keep.txt\nrw=write\nsize=1M\n")
    assert main(["fio", str(job), "--no-save"]) == 2
    one_line_error(capsys, "keep.txt exists")
    assert (d / "keep.txt").read_text() == "mine"


def test_logs_in_fios_format(tmp_path):
    img = image(tmp_path)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["fio", "--name=l", f"--filename={img}", "--rw=randread", "--size=1M", "--bs=4k",
                     "--write_lat_log=per", "--write_bw_log=per", "--write_iops_log=per", "--log_offset=1",
                     "--no-save", "-q"]) == 0
        assert main(["fio", "--name=w", f"--filename={img}", "--rw=randread", "--size=4M", "--runtime=0.5",
                     "--time_based", "--write_lat_log=win", "--log_avg_msec=100", "--no-save", "-q"]) == 0
    finally:
        os.chdir(cwd)
    lat = [ln.split(", ") for ln in (tmp_path / "per_lat.1.log").read_text().splitlines()]
    assert len(lat) == 256 and all(len(r) == 6 for r in lat)            # time, ns, dir, bs, offset, prio
    assert sorted(int(r[4]) for r in lat) == list(range(0, MIB, 4096)) and {r[2] for r in lat} == {"0"}
    assert all(int(r[1]) > 0 for r in lat) and (tmp_path / "per_slat.1.log").read_text() == ""
    iops = (tmp_path / "per_iops.1.log").read_text().splitlines()
    assert len(iops) == 256 and all(ln.split(", ")[1] == "1" for ln in iops)
    win = [ln.split(", ") for ln in (tmp_path / "win_clat.1.log").read_text().splitlines()]
    # one entry per 100 ms window that completed I/O (as fio: a window a stall of the machine left empty has none)
    times = [int(r[0]) for r in win]
    assert times == sorted(set(times)) and all(t % 100 == 0 for t in times)
    assert 100 <= times[0] and times[-1] <= 700 and 1 <= len(times) <= 7
    assert all(r[3] == "0" for r in win)                                # windows carry no block size


def test_numa_cpu_and_priority_settings_are_checked_before_the_run(tmp_path, capsys):
    img = image(tmp_path)
    assert main(["fio", f"--filename={img}", "--size=1M", "--cpus_allowed=4000", "--no-save"]) == 2
    one_line_error(capsys, "cpus_allowed = 4000: this machine has CPUs")
    assert main(["fio", f"--filename={img}", "--size=1M", "--numa_cpu_nodes=77", "--no-save"]) == 2
    one_line_error(capsys, "numa_cpu_nodes = 77: this machine has node(s)")
    assert main(["fio", f"--filename={img}", "--size=1M", "--cpus_allowed=0", "--nice=5", "--prioclass=2",
                 "--prio=4", "--comm=sdbench-job", "--no-save", "-q"]) == 0


def test_verify_backlog_histogram_logs_and_unified_reporting(tmp_path, capsys):
    img = image(tmp_path)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        rec = tmp_path / "r.json"
        assert main(["fio", "--name=b", f"--filename={img}", "--rw=randwrite", "--size=1M", "--verify=crc32c",
                     "--verify_backlog=64", "--write_hist_log=h", "--log_hist_msec=50",
                     "--unified_rw_reporting=both", "--output-format=json", "--allow-write", "--yes", "--no-save",
                     "-q", "--json", str(rec)]) == 0
    finally:
        os.chdir(cwd)
    v = Results.from_json(rec.read_text()).runs[0].metadata["verify"]["b"]
    assert v["ok"] and v["checked_blocks"] == 256                      # each block checked once, backlog or end
    doc = json.loads(capsys.readouterr().out)
    job = doc["jobs"][0]
    assert job["mixed"]["total_ios"] == job["write"]["total_ios"] == 256
    lines = (tmp_path / "h_clat_hist.1.log").read_text().splitlines()
    assert lines and all(len(ln.split(", ")) == 3 + 1856 for ln in lines)   # time, dir, bs, fio's 1856 buckets
    assert sum(sum(int(x) for x in ln.split(", ")[3:]) for ln in lines) == 256


def test_refused_where_the_target_cannot_and_jobs_left_out_of_reports(tmp_path, capsys):
    img = image(tmp_path)
    assert main(["fio", f"--filename={img}", "--size=1M", "--ioengine=io_uring", "--hipri", "--direct=1",
                 "--no-save"]) == 2
    one_line_error(capsys, "hipri: ")
    assert main(["fio", f"--filename={img}", "--size=1M", "--rw=randread", "--ioengine=psync",
                 "--cmdprio_percentage=20", "--no-save"]) == 2
    one_line_error(capsys, "cmdprio needs ioengine io_uring or libaio")
    job = tmp_path / "s.fio"
    job.write_text(f"[global]\nfilename={img}\nsize=1M\n[shown]\nrw=read\n[hidden]\nrw=read\nstats=0\n")
    assert main(["fio", str(job), "--output-format=json", "--no-save", "-q"]) == 0
    assert [j["jobname"] for j in json.loads(capsys.readouterr().out)["jobs"]] == ["shown"]
