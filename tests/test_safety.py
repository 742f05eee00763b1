"""What sdbench writes, and what it refuses to write (docs/safety.md).

Every refusal is one line on stderr with exit code 2, and the file or device
it was pointed at keeps every byte. The root tests use loop and device-mapper
devices on image files created in tmp (skipped without root).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import MIB, run_cmd
from sdbench.cli import main
from sdbench.store import open_store


def digest(p: Path | str) -> str:
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def one_line_error(capsys, *needles: str) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def image(tmp_path: Path, name: str = "card.img", size: int = 8 * MIB) -> Path:
    p = tmp_path / name
    p.write_bytes(bytes([0x5A]) * size)
    return p


def scenario_file(tmp_path: Path, sd_table: str, name: str = "mine.toml") -> Path:
    p = tmp_path / name
    p.write_text(f'protocol = "espidf"\n[espidf]\nruns = 1\nparts = ["sd_raw"]\ntarget_size_bytes = 4096\n'
                 f'[sd]\n{sd_table}\n')
    return p


# ---- write permission comes from the command line only --------------------------------------------

def test_set_cannot_grant_writing_a_device(tmp_path, capsys):
    img = image(tmp_path)
    before = digest(img)
    rc = main(["run", "espidf-memory", "--no-save", "-q", "--set",
               f'sd={{media="device", path="{img}", allow_write=true, yes=true}}'])
    assert rc == 2
    one_line_error(capsys, "sd.allow_write", "command line only")
    assert digest(img) == before


@pytest.mark.parametrize("grant", ["allow_write = true\nyes = true", "yes = true", "allow_write = true"])
def test_scenario_file_cannot_grant_writing(tmp_path, capsys, grant):
    img = image(tmp_path)
    before = digest(img)
    sc = scenario_file(tmp_path, f'media = "device"\npath = "{img}"\n{grant}')
    assert main(["run", str(sc), "--no-save", "-q"]) == 2
    one_line_error(capsys, "command line only")
    assert digest(img) == before


def test_device_media_in_a_file_needs_the_flag_and_a_confirmation(tmp_path, capsys):
    img = image(tmp_path)
    before = digest(img)
    sc = scenario_file(tmp_path, f'media = "device"\npath = "{img}"')
    assert main(["run", str(sc), "--no-save", "-q"]) == 2
    one_line_error(capsys, "without --allow-write")
    # the flag alone: a confirmation is still needed, and piped input cannot give it
    assert main(["run", str(sc), "--no-save", "-q", "--allow-write"]) == 2
    one_line_error(capsys, "pass --yes")
    assert digest(img) == before
    assert main(["run", str(sc), "--no-save", "-q", "--allow-write", "--yes"]) == 0
    assert digest(img) != before


def test_existing_image_media_needs_the_flag(tmp_path, capsys):
    img = image(tmp_path, "elsewhere.img")
    before = digest(img)
    sub = tmp_path / "scenarios"
    sub.mkdir()
    # a file outside the scenario's folder, reached by a relative path
    sc = scenario_file(sub, 'media = "image"\npath = "../elsewhere.img"')
    assert main(["run", str(sc), "--no-save", "-q"]) == 2
    one_line_error(capsys, "without --allow-write", str(img.name))
    assert digest(img) == before


def test_read_only_image_is_refused_even_with_the_flag(tmp_path, capsys):
    img = image(tmp_path)
    before = digest(img)
    img.chmod(0o444)
    sc = scenario_file(tmp_path, f'media = "image"\npath = "{img}"')
    assert main(["run", str(sc), "--no-save", "-q", "--allow-write"]) == 2
    one_line_error(capsys, "read-only (mode 0444)")
    assert digest(img) == before and stat.S_IMODE(img.stat().st_mode) == 0o444  # never chmod


def test_new_image_is_created_without_the_flag(tmp_path, capsys):
    sc = scenario_file(tmp_path, f'media = "image"\npath = "new.img"\nsize_bytes = {4 * MIB}')
    assert main(["run", str(sc), "--no-save", "-q"]) == 0, capsys.readouterr().err
    assert (tmp_path / "new.img").stat().st_size == 4 * MIB


def test_missing_image_without_size_is_one_line(tmp_path, capsys):
    sc = scenario_file(tmp_path, 'media = "image"\npath = "missing.img"')
    assert main(["run", str(sc), "--no-save", "-q"]) == 2
    one_line_error(capsys, "not found")
    assert not (tmp_path / "missing.img").exists()


def test_sweep_spec_cannot_grant_writing(tmp_path, capsys):
    img = image(tmp_path)
    before = digest(img)
    sc = scenario_file(tmp_path, f'media = "image"\npath = "{img}"')
    spec = tmp_path / "sweep.toml"
    spec.write_text(f'base = "{sc}"\n[grid]\n"espidf.runs" = [1, 2]\n[fixed]\n"sd.allow_write" = true\n')
    assert main(["sweep", str(spec), "--no-save", "-q", "-j", "1"]) == 2
    one_line_error(capsys)
    spec.write_text(f'base = "{sc}"\n[grid]\n"espidf.runs" = [1, 2]\n')
    assert main(["sweep", str(spec), "--no-save", "-q", "-j", "1"]) == 2
    one_line_error(capsys, "without --allow-write")
    assert digest(img) == before


# ---- outputs replace regular files only --------------------------------------------------------------

def _special_outputs(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock_path))
    s.close()
    link = tmp_path / "link-to-null"
    link.symlink_to("/dev/null")
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere" / "x.json")
    d = tmp_path / "adir"
    d.mkdir()
    return {"/dev/full": Path("/dev/full"), "/dev/null": Path("/dev/null"), "fifo": fifo, "socket": sock_path,
            "symlink to a device": link, "dangling symlink": dangling, "directory": d}


@pytest.mark.parametrize("kind", ["/dev/full", "/dev/null", "fifo", "socket", "symlink to a device",
                                  "dangling symlink", "directory"])
def test_outputs_never_replace_what_is_not_a_regular_file(tmp_path, capsys, kind):
    target = _special_outputs(tmp_path)[kind]
    before = os.lstat(target)
    rc = main(["run", "espidf-memory", "--no-save", "-q", "--runs", "1", "--json", str(target)])
    assert rc == 2
    one_line_error(capsys, "cannot write")
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)


def test_output_through_a_symlink_replaces_the_file_and_keeps_the_link(tmp_path, capsys):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "out.json"
    link.symlink_to(real.name)
    assert main(["run", "espidf-memory", "--no-save", "-q", "--runs", "1", "--json", str(link)]) == 0
    assert link.is_symlink() and '"runs"' in real.read_text()


def test_read_only_output_is_refused(tmp_path, capsys):
    out = tmp_path / "keep.json"
    out.write_text("keep")
    out.chmod(0o444)
    assert main(["run", "espidf-memory", "--no-save", "-q", "--runs", "1", "--json", str(out)]) == 2
    one_line_error(capsys, "read-only")
    assert out.read_text() == "keep"


# ---- bad input: one line, before any work ---------------------------------------------------------------

@pytest.mark.parametrize("setting, needle", [
    ("espidf.runs=nan", "espidf.runs"),
    ("espidf.target_size_bytes=inf", "espidf.target_size_bytes"),
    ("espidf.runs=1e400", "espidf.runs"),
    ("espidf.runs=true", "espidf.runs"),
    ("espidf.runs=170141183460469231731687303715884105728", "out of range"),
    ("espidf.runs.x=1", "espidf.runs is not a table"),
    ("protocol=[1, 2]", "protocol must be a string"),
    ("protocol=\"nope\"", "unknown protocol"),
    ("sd_fat=5", "[sd_fat] must be a table"),
    ("espidf=5", "[espidf] must be a table"),
    ("seed=-1", "seed"),
    ("seed=1.5", "seed must be an integer"),
    ("name={a=1}", "name must be a string"),
    ("sd.media=[1]", "unknown sd.media"),
    ("a..b=1", "dotted key"),
    ("=1", "dotted key"),
])
def test_bad_set_values_are_one_line(capsys, setting, needle):
    rc = main(["run", "espidf-memory", "--no-save", "-q", "--set", setting])
    assert rc == 2
    one_line_error(capsys, needle)


@pytest.mark.parametrize("extends", ["5", "[1]", '""', '"no-such-scenario"', '"missing.toml"'])
def test_bad_extends_is_one_line(tmp_path, capsys, extends):
    sc = tmp_path / "x.toml"
    sc.write_text(f"extends = {extends}\n")
    assert main(["run", str(sc), "--no-save", "-q"]) == 2
    one_line_error(capsys)


def test_runs_flag_does_not_hide_a_bad_runs_in_the_file(tmp_path, capsys):
    sc = tmp_path / "x.toml"
    sc.write_text('extends = "espidf-memory"\n[espidf]\nruns = "many"\n')
    assert main(["run", str(sc), "--no-save", "-q", "--runs", "1"]) == 2
    one_line_error(capsys, "espidf.runs")


def test_scenario_that_is_not_a_regular_file(tmp_path, capsys):
    fifo = tmp_path / "s.toml"
    os.mkfifo(fifo)
    assert main(["run", str(fifo), "--no-save", "-q"]) == 2  # refused at once, never opened (a FIFO would hang)
    one_line_error(capsys, "not a regular file")


def test_refused_run_leaves_no_run_in_the_store(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    assert main(["run", "espidf-memory", "-q", "--runs", "1", "--db", str(db)]) == 0
    capsys.readouterr()
    img = image(tmp_path)
    sc = scenario_file(tmp_path, f'media = "image"\npath = "{img}"')
    assert main(["run", str(sc), "-q", "--db", str(db)]) == 2
    one_line_error(capsys, "without --allow-write")
    store = open_store(db)
    try:
        assert [r.scenario for r in store.list_runs()] == ["espidf-memory"]
    finally:
        store.close()


# ---- mounted loop and device-mapper devices (root) ----------------------------------------------------


def _attempts(dev: str, backing: Path, tmp_path: Path) -> list[list[str]]:
    """Every way a user could point sdbench at a mounted device or its backing file, with and without flags."""
    dev_sc = scenario_file(tmp_path, f'media = "device"\npath = "{dev}"', "dev.toml")
    img_sc = scenario_file(tmp_path, f'media = "image"\npath = "{backing}"', "img.toml")
    flags = ["--allow-write", "--yes"]
    base = ["run", "--no-save", "-q"]
    out: list[list[str]] = []
    for f in ([], flags):
        out += [
            [*base, str(dev_sc), *f],
            [*base, str(img_sc), *f],
            [*base, "espidf-memory", "--set", f'sd={{media="device", path="{dev}", allow_write=true, yes=true}}', *f],
            [*base, "espidf-memory", "--set", f'sd={{media="image", path="{backing}"}}', *f],
            [*base, "--device", dev, *f],
            [*base, "--device", str(backing), *f],
            ["fio", "--device", dev, "--rw", "write", "--size", "1M", "-q", *f],
            ["fio", "--device", str(backing), "--rw", "write", "--size", "1M", "-q", *f],
            [*base, "espidf-memory", "--runs", "1", "--json", dev, *f],
            [*base, "espidf-memory", "--runs", "1", "--json", str(backing), *f],
        ]
    return out


@pytest.mark.root
@pytest.mark.parametrize("mounted", ["ext4"], indirect=True)
def test_nothing_reaches_a_mounted_loop_device(mounted, tmp_path, capsys):
    dev, backing, mnt = mounted
    run_cmd("sync")
    before = digest(backing)
    for argv in _attempts(dev, backing, tmp_path):
        rc = main(argv)
        err = capsys.readouterr().err
        assert rc == 2, (argv, err)
        assert "Traceback" not in err and err.strip().startswith("error: "), (argv, err)
    run_cmd("sync")
    assert digest(backing) == before
    assert os.path.ismount(mnt)


@pytest.mark.root
def test_nothing_reaches_a_loop_device_under_a_mounted_device_mapper_target(loopdev, tmp_path, capsys):
    dev, backing = loopdev
    if not shutil.which("dmsetup") or not shutil.which("mkfs.ext4"):
        pytest.skip("dmsetup and mkfs.ext4 are needed")
    name = f"sdbench-test-{os.getpid()}"
    sectors = os.path.getsize(backing) // 512
    r = run_cmd("dmsetup", "create", name, "--table", f"0 {sectors} linear {dev} 0")
    if r.returncode:
        pytest.skip(f"device-mapper does not work here: {r.stderr.strip()}")
    mnt = tmp_path / "dm-mnt"
    try:
        dm = f"/dev/mapper/{name}"
        if run_cmd("mkfs.ext4", "-q", "-F", dm).returncode:
            pytest.skip("mkfs.ext4 on the device-mapper target failed")
        mnt.mkdir()
        if run_cmd("mount", dm, str(mnt)).returncode:
            pytest.skip("cannot mount the device-mapper target")
        run_cmd("sync")
        before = digest(backing)
        for argv in _attempts(dev, backing, tmp_path) + _attempts(dm, backing, tmp_path):
            rc = main(argv)
            err = capsys.readouterr().err
            assert rc == 2 and "Traceback" not in err, (argv, err)
        run_cmd("sync")
        assert digest(backing) == before
    finally:
        run_cmd("umount", str(mnt))
        run_cmd("dmsetup", "remove", name)


# ---- runs that fail or die part-way ----------------------------------------------------------------

def _store_ids(db: Path) -> dict[int, str]:
    store = open_store(db, create=False)
    try:
        return {r.id: r.status for r in store.list_runs()}
    finally:
        store.close()


@pytest.fixture
def espidf_fails_after_one_row(monkeypatch):
    """The ESP-IDF protocol, made to fail with an input-class error after its first row."""
    from dataclasses import replace

    from sdbench.errors import FileSystemError
    from sdbench.workloads import registry

    spec = registry.protocol("espidf")

    def fails_after_one_row(sc, built, ctx):
        rows = spec.run(sc, built, ctx)
        yield next(rows)
        raise FileSystemError("no free space on the card")

    monkeypatch.setitem(registry.PROTOCOLS._specs, "espidf", replace(spec, run=fails_after_one_row))


def test_a_run_that_fails_part_way_is_stored_as_failed(tmp_path, capsys, request):
    db = tmp_path / "r.sqlite"
    assert main(["run", "espidf-memory", "-q", "--runs", "1", "--db", str(db)]) == 0
    request.getfixturevalue("espidf_fails_after_one_row")  # the complete run first, then the failing one
    capsys.readouterr()
    rc = main(["run", "espidf-memory", "-q", "--runs", "1", "--db", str(db)])
    assert rc == 1  # a failed run, not a refusal
    line = one_line_error(capsys, "run 2 failed: no free space on the card")
    assert "Traceback" not in line
    assert _store_ids(db) == {1: "complete", 2: "failed"}
    store = open_store(db, create=False)
    try:
        assert store.resolve("latest") == 1
        failed = store.load(2)
        assert failed.status_reason == "no free space on the card" and len(failed.rows) == 1
    finally:
        store.close()
    # the status and its reason survive export and import
    out = tmp_path / "failed.json"
    assert main(["export", "2", "--db", str(db), "-f", "json", "-o", str(out)]) == 0
    db2 = tmp_path / "r2.sqlite"
    assert main(["import", str(out), "--db", str(db2)]) == 0
    assert list(_store_ids(db2).values()) == ["failed"]


def test_kill_9_mid_run_leaves_a_consistent_store(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    assert main(["run", "espidf-memory", "-q", "--runs", "1", "--db", str(db)]) == 0
    code = "import sys; from sdbench.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "run", "espidf-esp32-sdmmc4-40mhz", "--runs", "100", "-q",
                             "--db", str(db)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
                if conn.execute("SELECT count(*) FROM rows WHERE run_id = 2").fetchone()[0] >= 2:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    capsys.readouterr()
    assert main(["db", "check", "--db", str(db)]) == 0, capsys.readouterr()
    assert _store_ids(db) == {1: "complete", 2: "incomplete"}
    store = open_store(db, create=False)
    try:
        assert store.resolve("latest") == 1
        assert len(store.load(2).rows) >= 2
    finally:
        store.close()
    out = tmp_path / "killed.json"
    assert main(["export", "2", "--db", str(db), "-f", "json", "-o", str(out)]) == 0
    db2 = tmp_path / "r2.sqlite"
    assert main(["import", str(out), "--db", str(db2)]) == 0
    assert list(_store_ids(db2).values()) == ["incomplete"]


@pytest.mark.parametrize("argv", [
    ["show", "latest", "--db", "L"],
    ["run", "espidf-memory", "--no-save", "-q", "--runs", "1", "--json", "L/x.json"],
    ["run", "--device", "L", "--no-save", "-q"],
    ["run", "L.toml", "--no-save"],
    ["import", "L"],
    ["fio", "--device", "/etc/passwd/x"],
])
def test_impossible_paths_are_one_line(capsys, argv):
    long_name = "y" * 300  # longer than any file name may be
    assert main([a.replace("L", long_name) if a.startswith("L") else a for a in argv]) == 2
    one_line_error(capsys)


def test_a_refused_run_removes_the_image_it_created(tmp_path, capsys):
    # the image is created while the stack is built; the pre-flight then refuses the filesystem layout
    sc = tmp_path / "fat32.toml"
    sc.write_text('extends = "espidf-memory"\n[espidf]\nparts = ["sd_fatfs"]\nruns = 1\n'
                  f'[sd]\nmedia = "image"\npath = "new.img"\nsize_bytes = {64 * MIB}\n'
                  '[sd_fat]\nfat_type = "fat32"\nallocation_unit_bytes = 32768\n')
    assert main(["run", str(sc), "--no-save", "-q"]) == 2
    one_line_error(capsys, "FAT32")
    assert not (tmp_path / "new.img").exists()


def test_a_run_that_fails_part_way_exits_1_without_a_store_too(capsys, espidf_fails_after_one_row):
    assert main(["run", "espidf-memory", "-q", "--runs", "1", "--no-save"]) == 1
    one_line_error(capsys, "run failed: no free space on the card")
