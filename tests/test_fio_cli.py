"""`sdbench fio/stream/preset` through sdbench.cli.main: output, JSON, and one-line errors (exit 2)."""
from __future__ import annotations

import errno
import json
import hashlib
import io
import os
import time
from pathlib import Path

import pytest

from sdbench.cli import main
from sdbench.records import MIB, Results


def image(tmp_path: Path, size: int = 8 * MIB, name: str = "card.img", fill: bytes = b"\x5a") -> Path:
    p = tmp_path / name
    p.write_bytes(fill * size)
    return p


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def one_line_error(capsys, contains: str) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert contains in err, err
    return err


def test_fio_table_and_json(tmp_path, capsys):
    img = image(tmp_path)
    out = tmp_path / "res.json"
    rc = main(["fio", "--device", str(img), "--rw", "randread", "--bs", "4k", "--size", "2M", "--iodepth", "2",
               "--json", str(out)])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    lines = cap.out.splitlines()
    assert lines[0].startswith("| Row") and "MiB/s" in lines[0] and "IOPS" in lines[0] and "p99 µs" in lines[0]
    assert set(lines[1]) <= set("|-: ") and lines[2].startswith("| job read")
    rec = Results.from_json(out.read_text()).runs[0]
    assert rec.row("job read").bytes == 2 * MIB and rec.metadata["rows"]["job read"]["iops"] > 0
    assert [p for p in tmp_path.iterdir() if p.name.startswith(".res.json")] == []  # no temporary left


def test_job_file_with_cli_overrides(tmp_path, capsys):
    img = image(tmp_path)
    job = tmp_path / "j.toml"
    job.write_text('size = "1M"\n[first]\nrw = "write"\nbs = "64k"\n[second]\nrw = "randread"\n')
    out = tmp_path / "r.json"
    rc = main(["fio", "--device", str(img), "--job", str(job), "--iodepth", "3", "--allow-write", "--yes", "-q",
               "--json", str(out)])
    assert rc == 0, capsys.readouterr().err
    rec = Results.from_json(out.read_text()).runs[0]
    assert [r.label for r in rec.rows] == ["first write", "second read"]
    assert [j["iodepth"] for j in rec.metadata["jobs"]] == [3, 3]
    assert rec.metadata["jobs"][0]["bs_bytes"] == 64 * 1024


def test_write_needs_allow_write_and_nothing_is_written(tmp_path, capsys):
    img = image(tmp_path)
    before = digest(img)
    out = tmp_path / "x.json"
    rc = main(["fio", "--device", str(img), "--rw", "write", "--size", "1M", "--json", str(out)])
    assert rc == 2
    one_line_error(capsys, "without --allow-write")
    assert digest(img) == before and not out.exists()


class _Terminal(io.StringIO):
    """Typed answers on a standard input that looks like a terminal."""

    def isatty(self) -> bool:
        return True


def test_write_needs_confirmation(tmp_path, capsys, monkeypatch):
    img = image(tmp_path)
    before = digest(img)
    monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
    rc = main(["fio", "--device", str(img), "--rw", "write", "--size", "1M", "--allow-write"])
    out, err = capsys.readouterr()
    # a declined prompt: exit 2, the question and one error line on stderr, nothing on stdout
    assert rc == 2 and f"Write test data to image file {img}" in err and "error: not confirmed" in err
    assert out == ""
    assert digest(img) == before
    monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
    rc = main(["fio", "--device", str(img), "--rw", "write", "--size", "1M", "--allow-write", "-q"])
    assert rc == 0 and digest(img) != before


def test_no_terminal_means_no_confirmation(tmp_path, capsys, monkeypatch):
    img = image(tmp_path)
    before = digest(img)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))  # piped input cannot confirm
    rc = main(["fio", "--device", str(img), "--rw", "write", "--size", "1M", "--allow-write"])
    assert rc == 2 and "pass --yes" in capsys.readouterr().err
    assert digest(img) == before


@pytest.mark.parametrize("args, msg", [
    (["fio", "--device", "/nonexistent/card.img"], "no such device or file: /nonexistent/card.img"),
    (["fio"], "has no target: give --device or --dir"),
    (["fio", "--device", "IMG", "--dir", "DIR"], "give exactly one target"),
    (["fio", "--device", "IMG", "--offset", "9M"], "too small"),
    (["fio", "--device", "IMG", "--rw=write", "--filename=/dev/sdz"], "filename = /dev/sdz is not the --device"),
    (["fio", "--device", "IMG", "--directory=DIR"], "names a directory, but the target is --device"),
    (["fio", "--device", "IMG", "--bs", "1000"], "multiple of 512"),
    (["fio", "--device", "IMG", "--rw", "upward"], "not one of"),
    (["fio", "--device", "IMG", "--bs", "huge"], "bs: 'huge' is not a size"),
    (["fio", "--device", "IMG", "--job", "MISSING.toml"], "job file not found"),
    (["fio", "--dir", "DIR/none"], "no such directory"),
    (["fio", "--device", "DIR"], "is a directory"),
    (["fio", "--device", "IMG", "--json", "DIR/no/such/out.json"], "does not exist"),
    (["stream", "--device", "IMG", "--size", "64M", "--allow-write", "--yes"], "too small"),
    (["preset", "cdm", "--device", "IMG", "--size", "1M"], "--allow-write"),
    (["preset", "sdfat", "--device", "IMG", "--allow-write", "--yes", "--size", "100M"], "too small"),
    # the preset options are checked against their declaration (inf crashed; -1 and nan ran)
    (["preset", "cdm", "--device", "IMG", "--allow-write", "--yes", "--runtime-s", "inf"],
     "--runtime-s: expected a finite number, got inf"),
    (["preset", "a1", "--device", "IMG", "--allow-write", "--yes", "--runtime-s", "-1"],
     "--runtime-s = -1.0 s is below the minimum 0.0 s"),
    (["preset", "cdm", "--device", "IMG", "--allow-write", "--yes", "--loops", "5000"],
     "--loops = 5000 is above the maximum 1000"),
    (["preset", "sdfat", "--device", "IMG", "--allow-write", "--yes", "--size", "100"],
     "--size = 100 B is below the minimum 4096 B"),
    (["probe", "IMG", "--size", "16k"], "probe needs at least 32,768 B"),
    (["info", "--cid", "12345"], "expected 32 hex digits"),
    (["info"], "give a DEVICE or registers"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, args, msg):
    img = image(tmp_path)
    before = digest(img)
    args = [a.replace("IMG", str(img)).replace("DIR", str(tmp_path)) for a in args]
    rc = main(args)
    assert rc == 2
    one_line_error(capsys, msg.replace("DIR", str(tmp_path)))
    assert digest(img) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.img"]


def test_bad_job_file_contents(tmp_path, capsys):
    img = image(tmp_path)
    for content, msg in (("rw = [", "invalid TOML"), ("[a]\nrw = 'write'\nbs = 'x'\n", "is not a size"),
                         ("[a]\nfoo = 1\n", "unknown option j.toml:a.foo")):
        job = tmp_path / "j.toml"
        job.write_text(content)
        assert main(["fio", "--device", str(img), "--job", str(job)]) == 2
        one_line_error(capsys, msg)


def test_no_permission_is_a_clear_error(tmp_path, capsys, monkeypatch):
    import sdbench.media.linux as lin

    img = image(tmp_path)

    def denied(path, flags, *a):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(lin.os, "open", denied)
    assert main(["fio", "--device", str(img)]) == 2
    one_line_error(capsys, "no permission to open")


def test_unsupported_o_direct_errors_when_required_and_warns_otherwise(tmp_path, capsys, monkeypatch):
    import sdbench.media.linux as lin

    img = image(tmp_path)
    real_open = os.open

    def no_direct(path, flags, *a):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *a)

    monkeypatch.setattr(lin.os, "open", no_direct)
    # a job that asks for O_DIRECT gets it or an error, as in fio; fio's default, buffered, needs none
    assert main(["fio", "--device", str(img), "--size", "1M", "--direct"]) == 2
    one_line_error(capsys, "O_DIRECT is not supported")
    assert main(["fio", "--device", str(img), "--size", "1M", "--direct=1"]) == 2
    one_line_error(capsys, "O_DIRECT is not supported")
    assert main(["fio", "--device", str(img), "--size", "1M"]) == 0
    assert "O_DIRECT" not in capsys.readouterr().err
    assert main(["fio", "--device", str(img), "--size", "1M", "--buffered", "-q"]) == 0


def test_verify_failure_is_reported_after_saving_results(tmp_path, capsys, monkeypatch):
    from sdbench.workloads import fio

    img = image(tmp_path)
    out = tmp_path / "v.json"
    real_verify = fio._Engine.verify

    def corrupt_then_verify(self, progress):
        with open(img, "r+b") as f:
            f.seek(4096 * 5)
            f.write(b"\x00" * 16)
        return real_verify(self, progress)

    monkeypatch.setattr(fio._Engine, "verify", corrupt_then_verify)
    rc = main(["fio", "--device", str(img), "--rw", "write", "--size", "1M", "--verify", "crc32c", "--allow-write",
               "--yes", "-q", "--json", str(out)])
    assert rc == 1  # the medium failed a check: not the code of refused input (2)
    one_line_error(capsys, "verify failed: job: 1 of 256 blocks corrupted (first at byte 20480)")
    assert not Results.from_json(out.read_text()).runs[0].metadata["verify"]["job"]["ok"]


def test_stream_and_presets_through_the_cli(tmp_path, capsys):
    img = image(tmp_path, 16 * MIB)
    assert main(["stream", "--device", str(img), "--size", "4M", "--allow-write", "--yes", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("| Row") and "MB/s" in out and "stream read" in out
    js = tmp_path / "a1.json"
    rc = main(["preset", "a1", "--device", str(img), "--size", "2M", "--runtime-s", "0.2", "--allow-write", "--yes",
               "-q", "--json", str(js)])
    out = capsys.readouterr().out
    a1 = Results.from_json(js.read_text()).runs[0].metadata["a1"]
    assert rc == (0 if a1["pass"] else 1)
    assert "| A1 criterion" in out and ("PASS" in out or "FAIL" in out)
    assert "|\n\n| A1 criterion" in out  # a blank line between the tables: pasted, they stay two tables
    assert main(["preset", "sdfat", "--device", str(img), "--size", "100000", "--allow-write", "--yes", "-q"]) == 0
    out = capsys.readouterr().out
    assert "KB/s" in out and "Max µs" in out
    assert main(["preset", "cdm", "--device", str(img), "--size", "2M", "--loops", "1", "--runtime-s", "0.05",
                 "--mode", "read", "-q"]) == 0
    assert "RND4K Q32T1 read" in capsys.readouterr().out


def test_dir_target_through_the_cli_leaves_nothing_behind(tmp_path, capsys):
    d = tmp_path / "card"
    d.mkdir()
    (d / "photo.jpg").write_bytes(b"jpeg")
    assert main(["fio", "--dir", str(d), "--rw", "randwrite", "--size", "1M", "--verify", "crc32c", "-q"]) == 0
    assert main(["preset", "sdfat", "--dir", str(d), "--size", "20000", "-q"]) == 0
    assert main(["stream", "--dir", str(d), "--size", "1M", "-q"]) == 0
    assert sorted(os.listdir(d)) == ["photo.jpg"]
    assert main(["fio", "--dir", str(d), "--rw", "write", "--size", "1M", "-q", "--keep"]) == 0
    assert "sdbench-job.bin" in os.listdir(d)


def test_cdm_default_size_fits_a_small_card(tmp_path, capsys):
    # CrystalDiskMark's default 1 GiB does not fit a 40 MiB card: the largest of its sizes that does is used
    img = image(tmp_path, 40 * MIB)
    js = tmp_path / "cdm.json"
    assert main(["preset", "cdm", "--device", str(img), "--loops", "1", "--runtime-s", "0.05", "--mode", "read",
                 "--json", str(js)]) == 0
    err = capsys.readouterr().err
    assert "test size 32 MiB" in err
    assert Results.from_json(js.read_text()).runs[0].metadata["size_bytes"] == 32 * MIB


FIO_JOB = """; an existing fio job file
[global]
ioengine=libaio
direct=1
size=2M
runtime=1s

[rand-read]
rw=randread
bs=4k
iodepth=2
numjobs=2

[seq-write]
readwrite=write
bs=64k
"""


def test_fio_ini_job_file_runs_and_writes_fio_json(tmp_path, capsys):
    img = image(tmp_path, 8 * MIB)
    job = tmp_path / "card.fio"
    job.write_text(FIO_JOB)
    out = tmp_path / "fio.json"
    assert main(["fio", "--device", str(img), "--job", str(job), "--allow-write", "--yes", "-q",
                 "--fio-json", str(out)]) == 0
    out_text = capsys.readouterr().out
    assert "rand-read.0 read" in out_text and "rand-read.1 read" in out_text
    doc = json.loads(out.read_text())
    assert [j["jobname"] for j in doc["jobs"]] == ["rand-read", "rand-read", "seq-write"]   # numjobs: two clones
    rr, sw = doc["jobs"][0], doc["jobs"][2]
    assert rr["job options"] == {"rw": "randread", "bs": "4k", "iodepth": "2", "numjobs": "2"}
    assert doc["global options"] == {"ioengine": "libaio", "direct": "1", "size": "2M", "runtime": "1s"}
    assert rr["read"]["total_ios"] > 0 and rr["read"]["iops"] > 0 and rr["write"]["io_bytes"] == 0
    assert rr["read"]["clat_ns"]["percentile"]["99.000000"] >= rr["read"]["clat_ns"]["min"]
    assert sw["write"]["io_bytes"] == 2 * MIB and sw["write"]["bw"] == sw["write"]["bw_bytes"] // 1024


@pytest.mark.parametrize("text,msg", [
    ("[j]\nrw=randread\nzonemode=zbd\n", "zonemode = zbd: zoned block devices only"),
    ("rw=read\n[j]\n", "outside of a [section]"),
    ("[j]\nrw=randread\nruntime=1e300\n", "runtime = 1e+300 s is above the maximum 2592000 s"),
    ("[j]\nrw=randread\nrandom_generator=lfsr\nnorandommap\nfoo=1\n", "bad.fio:5: 'foo' is not a fio option"),
    ("[j]\nrw=randread\nexec_prerun=rm -rf /\n", "exec_prerun is not supported: sdbench runs no commands"),
    ("[j]\nioengine=windowsaio\n", "ioengine"),
    ("[global]\nbs=4k\n", "no job section"),
    ("[j]\nruntime=soon\n", "not a time"),
    ("[j]\niodepth=many\n", "not a whole number"),
])
def test_fio_ini_errors_are_one_line(tmp_path, capsys, text, msg):
    job = tmp_path / "bad.fio"
    job.write_text(text)
    assert main(["fio", "--device", str(image(tmp_path, MIB)), "--job", str(job)]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and "\n" not in err


def test_real_media_runs_are_stored_like_every_run(tmp_path, capsys):
    from sdbench.store import open_store

    img = image(tmp_path, 8 * MIB)
    db = tmp_path / "r.sqlite"
    assert main(["fio", "--device", str(img), "--rw", "randread", "--size", "1M", "--db", str(db)]) == 0
    assert "saved as run 1" in capsys.readouterr().err
    assert main(["stream", "--device", str(img), "--size", "1M", "--allow-write", "--yes", "-q",
                 "--db", str(db)]) == 0
    assert main(["fio", "--device", str(img), "--rw", "read", "--size", "1M", "--no-save", "--db", str(db)]) == 0
    assert main(["run", "--device", str(img), "--allow-write", "--yes", "--set", "espidf.runs=1", "-q",
                 "--db", str(db)]) == 0
    with open_store(db) as store:
        names = [r.scenario for r in store.list_runs()]
    assert len(names) == 3 and names[-1] == f"espidf@{img}"


def test_an_unsafe_device_is_refused_as_such_before_it_is_opened(tmp_path, capsys, monkeypatch):
    """A job that writes to the system disk was refused with the error of opening it to read its size
    (permission denied), not with why writing there is refused."""
    import sdbench.cli.cmd_fio as cmd_fio
    import sdbench.media.safety as safety

    def unsafe(path, **kw):
        raise safety.UnsafeTargetError(f"refusing to write to {path}: it holds the root filesystem (/)")

    def opened(path):
        raise AssertionError("the device was opened before the safety check")
    monkeypatch.setattr(safety, "check_writable_target", unsafe)
    monkeypatch.setattr(cmd_fio, "_device_size", opened)
    img = tmp_path / "disk.img"
    img.write_bytes(bytes(MIB))
    assert main(["fio", f"--filename={img}", "--name=t", "--rw=write", "--bs=4k", "--size=64k", "--allow-write",
                 "--yes", "--no-save", "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: refusing to write to {img}: it holds the root filesystem (/)"


# ---- Ctrl-C: fio's way ------------------------------------------------------------------------------------------
def _ctrl_c_fio(tmp_path: Path, args: list[str]) -> tuple[int, str, str]:
    """``sdbench fio ARGS`` in a session of its own, Ctrl-C'd as a terminal does (the whole process group) once
    it has run for a second and a half; exit code, stdout, stderr."""
    import signal
    import subprocess
    import sys
    import time

    p = subprocess.Popen([sys.executable, "-m", "sdbench", "fio", *args, "--db", "runs.db"], cwd=tmp_path, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        time.sleep(1.5)
        assert p.poll() is None, "the run ended before Ctrl-C"
        os.killpg(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert "Traceback" not in err and "error:" not in err, err
    return p.returncode, out, err


@pytest.mark.parametrize("engine, depth", [("io_uring", 1), ("psync", 1), ("io_uring", 32)])
def test_ctrl_c_stops_the_jobs_and_prints_what_they_measured(tmp_path, capsys, engine, depth):
    """As fio does: the first Ctrl-C ends the running jobs and the run reports them (exit 130 all the same);
    a stonewalled job after them does not start."""
    img = image(tmp_path, 16 * MIB)
    t0 = time.monotonic()
    rc, out, err = _ctrl_c_fio(tmp_path, [
        f"--filename={img}", "--direct=1", "--bs=4k", "--runtime=60", "--time_based", f"--ioengine={engine}",
        f"--iodepth={depth}", "--name=first", "--rw=randread", "--name=second", "--rw=randread", "--stonewall"])
    assert time.monotonic() - t0 < 20
    assert rc == 130, err
    assert "| first read |" in out and "second" not in out
    lines = err.strip().splitlines()
    assert lines[0].startswith("stopping: Ctrl-C") and lines[-1] == "interrupted"
    assert ("warning: stopped early from outside (Ctrl-C): each job's figures cover the time it ran; 1 job did "
            "not start") in lines
    # stored as a Ctrl-C'd run is, with what it measured
    assert main(["runs", "--db", str(tmp_path / "runs.db"), "-f", "json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert run["status"] == "failed: interrupted" and run["rows"] == 1


def test_a_second_ctrl_c_stops_at_once_and_the_handler_goes_with_the_run(capfd):
    import signal

    from sdbench.cli.cmd_fio import _first_ctrl_c_stops
    from sdbench.workloads.fio import StopRequest

    before = signal.getsignal(signal.SIGINT)
    stop = StopRequest()
    with pytest.raises(KeyboardInterrupt):  # while the jobs are set up: an interruption, as before
        with _first_ctrl_c_stops(stop, quiet=False):
            os.kill(os.getpid(), signal.SIGINT)
            pytest.fail("a Ctrl-C during set-up did not interrupt")
    assert not stop.requested and capfd.readouterr().err == ""
    stop.started = True
    with pytest.raises(KeyboardInterrupt):
        with _first_ctrl_c_stops(stop, quiet=False):
            os.kill(os.getpid(), signal.SIGINT)
            assert stop.requested                      # the first: the jobs are asked to end
            os.kill(os.getpid(), signal.SIGINT)        # the second: an interruption, at once
            pytest.fail("the second Ctrl-C did not interrupt")
    assert signal.getsignal(signal.SIGINT) is before
    assert capfd.readouterr().err == ("stopping: Ctrl-C; the jobs end and report what they measured (Ctrl-C again: "
                                      "at once)\n")


def test_an_ignored_ctrl_c_stays_ignored():
    import signal

    from sdbench.cli.cmd_fio import _first_ctrl_c_stops
    from sdbench.workloads.fio import StopRequest

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)   # a background job of a shell script
    try:
        stop = StopRequest()
        stop.started = True
        with _first_ctrl_c_stops(stop, quiet=True):
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
        assert not stop.requested
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_run_stopped_before_any_job_measured_is_an_interruption(tmp_path):
    from sdbench.media.linux import LinuxBlockDevice
    from sdbench.workloads import fio

    dev = LinuxBlockDevice(str(image(tmp_path)), allow_write=False)
    stop = fio.StopRequest()
    stop.stop()
    try:
        with pytest.raises(KeyboardInterrupt):   # no table of nothing, no run stored as if it had run
            fio.run_fio(dev, [fio.JobConfig(name="j", rw="randread", size_bytes=MIB)], stop=stop)
    finally:
        dev.close()
