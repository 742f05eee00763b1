"""The `workload` protocol: file workloads written in TOML, on simulated flash and SD, RAM-backed cards and a
directory; the checks of the step list, the data check, determinism and the command line."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sdbench import scenarios as scen
from sdbench.errors import ConfigError, FileSystemError
from sdbench.protocols import run_scenario
from sdbench.workloads import fileworkload as fw
from sdbench.workloads.registry import protocol

SDBENCH = [sys.executable, "-m", "sdbench"]

#: every op once, on three files; checked against the model as it runs
ALL_OPS = """
[workload]
part = "{part}"
count = 3
size_bytes = 9000
chunk_bytes = 1024

[[workload.steps]]
op = "format"
[[workload.steps]]
op = "mount"
[[workload.steps]]
op = "mkdir"
path = "/d"
[[workload.steps]]
op = "write"
path = "/d/f{{i}}.bin"
[[workload.steps]]
op = "append"
path = "/d/f{{i}}.bin"
size_bytes = 100
[[workload.steps]]
op = "read"
path = "/d/f{{i}}.bin"
[[workload.steps]]
op = "seek"
path = "/d/f{{i}}.bin"
offset_bytes = 5000
size_bytes = 3000
[[workload.steps]]
op = "sync"
path = "/d/f{{i}}.bin"
size_bytes = 50
[[workload.steps]]
op = "truncate"
path = "/d/f{{i}}.bin"
size_bytes = 4000
[[workload.steps]]
op = "rename"
path = "/d/f{{i}}.bin"
to = "/d/g{{i:02d}}.bin"
[[workload.steps]]
op = "read"
path = "/d/g{{i:02d}}.bin"
label = "read renamed"
[[workload.steps]]
op = "create"
path = "/e.bin"
[[workload.steps]]
op = "open"
path = "/e.bin"
mode = "r+"
[[workload.steps]]
op = "list"
path = "/d"
[[workload.steps]]
op = "unmount"
[[workload.steps]]
op = "mount"
[[workload.steps]]
op = "read"
path = "/d/g{{i:02d}}.bin"
label = "read after remount"
[[workload.steps]]
op = "delete"
path = "/d/g{{i:02d}}.bin"
[[workload.steps]]
op = "delete"
path = "/d"
[[workload.steps]]
op = "delete"
path = "/e.bin"
[[workload.steps]]
op = "list"
"""

FLASH = """
[flash]
media = "sim-nor"
partition_size_bytes = {size}
[flash.fat]
allocation_unit_bytes = 4096
"""

MEMORY = """
[sd]
media = "memory"
capacity_bytes = 64_000_000
"""


def scenario(tmp_path: Path, body: str, stack: str = FLASH.format(size=0x84000), name: str = "wl") -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(f'protocol = "workload"\nseed = 3\n{body}\n{stack}', encoding="utf-8")
    return p


def run(path: Path, *sets: str):
    return run_scenario(scen.load(str(path), list(sets)))


def steps_toml(*steps: str, part: str = "flash_littlefs", extra: str = "") -> str:
    out = f'[workload]\npart = "{part}"\nsize_bytes = 1000\n{extra}\n'
    for s in steps:
        out += f"[[workload.steps]]\n{s}\n"
    return out


# ---- every op on every filesystem ---------------------------------------------------------------

@pytest.mark.parametrize("part,stack", [
    ("flash_fatfs", FLASH.format(size=0x84000)),     # FAT on wear levelling: 528 KiB is its smallest partition
    ("flash_littlefs", FLASH.format(size=0x40000)),
    ("flash_spiffs", FLASH.format(size=0x40000)),
    ("sd_fatfs", MEMORY),
    ("sd_littlefs", MEMORY),
], ids=["flash_fatfs", "flash_littlefs", "flash_spiffs", "memory-fat", "memory-littlefs"])
def test_every_op_runs_and_checks_its_data(tmp_path, part, stack):
    rec = run(scenario(tmp_path, ALL_OPS.format(part=part), stack))
    assert rec.status == "complete"
    rows = {r.label: r for r in rec.rows}
    spiffs = part == "flash_spiffs"
    ops = {r.op for r in rec.rows}
    assert ops == set(fw.OPS) - ({"mkdir"} if spiffs else set())
    assert rows["write /d/f{i}.bin x3"].runs == 3 and rows["write /d/f{i}.bin x3"].bytes == 9000
    assert rows["read /d/f{i}.bin x3"].bytes == 9100                  # write + append
    assert rows["seek /d/f{i}.bin @5000 x3"].bytes == 3000
    assert rows["sync /d/f{i}.bin x3"].bytes == 50
    assert rows["read renamed"].bytes == 4000 == rows["read after remount"].bytes  # truncated, renamed
    assert rows["list /d"].runs == 1 and rows["mount #2"].runs == 1
    steps = rec.metadata["workload"]["steps"]
    assert [s["label"] for s in steps] == [r.label for r in rec.rows]
    w = next(s for s in steps if s["op"] == "write")
    assert w["calls"] == 3 and w["bytes_total"] == 27000
    assert w["p50_ms"] <= w["p99_ms"] <= w["max_ms"] and w["max_ms"] == rows["write /d/f{i}.bin x3"].time_ms_max
    assert next(s for s in steps if s["label"] == "list /d")["entries"] == 3
    if spiffs:  # no directories: mkdir and the removal of /d are skipped, and said so
        assert any("mkdir /d" in w and "skipped" in w for w in rec.warnings)
        assert "delete /d" not in rows
    else:
        assert "delete /d" in rows and not [w for w in rec.warnings if w.startswith("workload.")]


def test_simulated_runs_are_deterministic(tmp_path):
    path = scenario(tmp_path, ALL_OPS.format(part="flash_spiffs"), FLASH.format(size=0x40000))
    a, b = run(path), run(path)
    assert [r.to_dict() for r in a.rows] == [r.to_dict() for r in b.rows]
    assert a.metadata == b.metadata
    assert any(r.time_ms > 0 for r in a.rows)


def test_repeat_puts_every_run_in_the_same_rows(tmp_path):
    body = steps_toml('op = "format"', 'op = "mount"', 'op = "write"\npath = "/a{i}"\ncount = 2',
                      'op = "read"\npath = "/a{i}"\ncount = 2', 'op = "unmount"')
    rec = run(scenario(tmp_path, body, FLASH.format(size=0x40000)), "workload.repeat=3")
    assert [(r.label, r.runs) for r in rec.rows] == [("format", 3), ("mount", 3), ("write /a{i} x2", 6),
                                                    ("read /a{i} x2", 6), ("unmount", 3)]


def test_the_pattern_is_the_seeds(tmp_path):
    a, b = fw.Pattern(1), fw.Pattern(2)
    assert a.data(5, 0, 9000) == fw.Pattern(1).data(5, 0, 9000) != b.data(5, 0, 9000)
    assert a.data(5, 0, 4096) != a.data(6, 0, 4096)             # another write
    assert a.data(5, 0, 4096) != a.data(5, 4096, 4096)          # another block
    assert a.data(5, 100, 3000) == a.data(5, 0, 4000)[100:3100]
    assert a.content([(5, 10), (6, 20)]) == a.data(5, 0, 10) + a.data(6, 0, 20)
    assert a.content([(5, 10), (6, 20)], 8, 4) == a.data(5, 8, 2) + a.data(6, 0, 2)


# ---- the data check ---------------------------------------------------------------------------------

def test_a_read_of_other_data_fails_the_run_naming_the_file(tmp_path, monkeypatch):
    real = fw.Pattern.data
    calls = []

    def first_write_corrupt(self, gen, offset, n):  # the first file's data on the medium differ by one byte
        out = real(self, gen, offset, n)
        calls.append(gen)
        if len(calls) == 1 and n > 100:
            out = out[:100] + bytes([out[100] ^ 1]) + out[101:]
        return out

    monkeypatch.setattr(fw.Pattern, "data", first_write_corrupt)
    body = steps_toml('op = "format"', 'op = "mount"', 'op = "write"\npath = "/f{i}.bin"\ncount = 2',
                      'op = "read"\npath = "/f{i}.bin"\ncount = 2')
    with pytest.raises(fw.DataMismatch, match=r"workload.steps\[3\] \(read /f\{i\}.bin x2\): /f0.bin: .* byte 100"):
        run(scenario(tmp_path, body, FLASH.format(size=0x40000)))


def test_a_listing_without_a_written_file_fails(tmp_path, monkeypatch):
    from sdbench.fs.littlefs import LittleFsFileSystem

    real = LittleFsFileSystem._listdir
    monkeypatch.setattr(LittleFsFileSystem, "_listdir", lambda self, p: [n for n in real(self, p) if n != "b"])
    body = steps_toml('op = "format"', 'op = "mount"', 'op = "create"\npath = "/a"', 'op = "create"\npath = "/b"',
                      'op = "list"')
    with pytest.raises(fw.DataMismatch, match=r"/ does not list 'b'"):
        run(scenario(tmp_path, body, FLASH.format(size=0x40000)))


def test_compare_names_the_first_difference():
    with pytest.raises(fw.DataMismatch, match="x.bin: data differ from what was written at byte 12"):
        fw.compare(b"a" * 10 + b"b", b"a" * 10 + b"c", "x.bin", 2, "step")
    with pytest.raises(fw.DataMismatch, match="read 3 B from byte 0, expected 4 B"):
        fw.compare(b"abc", b"abcd", "x.bin", 0, "step")


def test_a_full_filesystem_names_the_step_and_file(tmp_path):
    # SPIFFS in 512 KiB (ESP-IDF's configuration) holds four 88 KiB files, not five (docs/protocols.md)
    with pytest.raises(FileSystemError, match=r"workload.steps\[2\] \(write /f\{i\}.bin x5\), /f4.bin: spiffs: "
                                              r"file system full"):
        run_scenario(scen.load("workload-flash-512k-spiffs", ["workload.size_bytes=90112"]))


# ---- checks before any work ---------------------------------------------------------------------------

BAD_LISTS = [
    (['op = "wrte"'], r"workload.steps\[0\].op = 'wrte' is not one of format, mount"),
    (['label = "x"'], r"workload.steps\[0\].op: missing"),
    (['op = "format"', 'op = "mount"', 'op = "write"'], r"workload.steps\[2\].path: missing"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/a"\nsize_bytes = -5'],
     r"workload.steps\[2\].size_bytes = -5 B is below the minimum"),
    (['op = "format"', 'op = "mount"', 'op = "read"\npath = "/x.bin"'],
     r"workload.steps\[2\].path: read of /x.bin, which does not exist at that point \(no earlier step wrote it\)"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/f{i}"\ncount = 2', 'op = "delete"\npath = "/f1"',
      'op = "read"\npath = "/f{i}"\ncount = 2'],
     r"workload.steps\[4\].path: read of /f1, .* \(an earlier step removed or renamed it\) \(i = 1\)"),
    (['op = "format"', 'op = "write"\npath = "/a"'],
     r"workload.steps\[1\].op: a write step needs a mounted filesystem \(add a mount step before it\)"),
    (['op = "format"', 'op = "mount"', 'op = "mount"'], r"workload.steps\[2\].op: the filesystem is mounted already"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/a"', 'op = "truncate"\npath = "/a"\nsize_bytes = 2000'],
     r"workload.steps\[3\].size_bytes: truncate of /a to 2000 B, but it holds 1000 B"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/a"', 'op = "seek"\npath = "/a"\noffset_bytes = 1001'],
     r"workload.steps\[3\].offset_bytes: seek to 1001 in /a, which holds 1000 B"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/a"', 'op = "write"\npath = "/b"',
      'op = "rename"\npath = "/a"\nto = "/b"'], r"workload.steps\[4\].to: rename onto /b, which exists"),
    (['op = "format"', 'op = "mount"', 'op = "rename"\npath = "/a"'], r"workload.steps\[2\].to: missing"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/a"', 'op = "read"\npath = "/a"\nsize_bytes = 5'],
     r"workload.steps\[3\].size_bytes: a read step does not use it \(it takes path, chunk_bytes\)"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/f{n}"'],
     r"workload.steps\[2\].path = '/f\{n\}': only \{i\}"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/f{i:s}"'], r"\{i:s\} is not an integer format"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/f{i"'], r"workload.steps\[2\].path = '/f\{i'"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/../a"'], r"'..' is not allowed"),
    (['op = "format"', 'op = "mount"', 'op = "write"\npath = "/d/a"'],
     r"workload.steps\[2\].path: /d does not exist at that point \(add a mkdir step for it\)"),
    (['op = "format"', 'op = "mount"', 'op = "mkdir"\npath = "/d"', 'op = "write"\npath = "/d/a"',
      'op = "delete"\npath = "/d"'], r"workload.steps\[4\].path: delete of directory /d, which is not empty"),
    (['op = "format"\nlabel = "x"', 'op = "mount"\nlabel = "x"'],
     r"workload.steps\[1\].label: 'x' is already the label of workload.steps\[0\]"),
    (['op = "mount"\ncount = 2'], r"workload.steps\[0\].count = 2: a mount step runs once"),
    (['op = "format"', 'op = "mount"', 'op = "list"\npath = "/nope"'],
     r"workload.steps\[2\].path: list of /nope, which does not exist"),
]


@pytest.mark.parametrize("steps,message", BAD_LISTS)
def test_the_step_list_is_checked_when_the_scenario_loads(tmp_path, steps, message):
    path = scenario(tmp_path, steps_toml(*steps))
    with pytest.raises(ConfigError, match=message) as e:
        scen.load(str(path))
    assert "\n" not in str(e.value)


def test_steps_must_be_a_list_of_tables(tmp_path):
    for body, message in (('[workload]\nsteps = []', "non-empty list of tables"),
                          ('[workload]\nsteps = [1]', r"workload.steps\[0\] must be a table"),
                          ('[workload]\npart = "nand"', "workload.part = 'nand' is not one of")):
        with pytest.raises(ConfigError, match=message):
            scen.load(str(scenario(tmp_path, body)))


def test_a_failing_second_run_of_the_list_is_named(tmp_path):
    body = steps_toml('op = "format"', 'op = "mount"', 'op = "mkdir"\npath = "/d"', 'op = "unmount"',
                      part="flash_fatfs")
    scen.load(str(scenario(tmp_path, body)))
    body = steps_toml('op = "mount"', 'op = "mkdir"\npath = "/d"', 'op = "unmount"')
    with pytest.raises(ConfigError, match=r"workload.steps\[1\].path: mkdir of /d, which exists at that point "
                                          r"in run 2 of the list"):
        scen.load(str(scenario(tmp_path, body)), ["workload.repeat=2"])


def _refused(path: Path, *sets: str) -> str:
    with pytest.raises(ConfigError) as e:
        run(path, *sets)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_preflight_refuses_what_the_stack_cannot_run(tmp_path):
    ok = steps_toml('op = "format"', 'op = "mount"', 'op = "write"\npath = "/a"')
    assert "workload.part = sd_fatfs: this stack has no such filesystem (it has: flash_fatfs, flash_littlefs, " \
           "flash_spiffs)" in _refused(scenario(tmp_path, ok), "workload.part=sd_fatfs")
    big = steps_toml('op = "format"', 'op = "mount"', 'op = "write"\npath = "/f{i}"\ncount = 3\nsize_bytes = 100000')
    msg = _refused(scenario(tmp_path, big, FLASH.format(size=0x40000)))
    assert msg.startswith("workload: the files hold 300000 B after workload.steps[2] (write /f{i} x3), but part "
                          "flash_littlefs's filesystem holds at most ")
    long = steps_toml('op = "format"', 'op = "mount"', 'op = "write"\npath = "/a-name-that-is-too-long-for-spiffs"',
                      part="flash_spiffs")
    assert "workload.steps[2].path: /a-name-that-is-too-long-for-spiffs is 35 B long; SPIFFS names hold at most 31" \
        in _refused(scenario(tmp_path, long))
    blank = steps_toml('op = "mount"', 'op = "write"\npath = "/a"')
    assert "mount of a blank simulated medium; format it first" in _refused(scenario(tmp_path, blank))


def test_fat_on_wear_levelling_needs_528_kib(tmp_path):
    body = steps_toml('op = "format"', 'op = "mount"', 'op = "write"\npath = "/a"', part="flash_fatfs")
    assert "too small for FAT (at least 128)" in _refused(scenario(tmp_path, body, FLASH.format(size=0x83000)))
    assert run(scenario(tmp_path, body, FLASH.format(size=0x84000))).status == "complete"


def test_retarget_follows_the_command_line():
    cfg = fw.load_options({"part": "flash_littlefs"})
    assert fw.retarget(cfg, "dir").part == "dir"
    assert fw.retarget(cfg, "device").part == "sd_littlefs"
    with pytest.raises(ConfigError, match="SPIFFS needs NOR flash"):
        fw.retarget(fw.load_options({"part": "flash_spiffs"}), "device")


# ---- a directory ------------------------------------------------------------------------------------

def _in_dir(path: Path, d: Path):
    sc = scen.load(str(path))
    spec = protocol("workload")
    return replace(sc, sd={}, flash={}, directory=str(d),
                   options={**sc.options, "workload": spec.on_media(spec.config_of(sc), "dir")})


def test_a_directory_run_does_every_op_and_leaves_nothing_behind(tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    (d / "mine.txt").write_text("the user's file")
    rec = run_scenario(_in_dir(scenario(tmp_path, ALL_OPS.format(part="flash_littlefs")), d))
    assert rec.status == "complete" and rec.clock == "wall"
    assert {r.op for r in rec.rows} == set(fw.OPS) - {"format"}
    assert any("format" in w and "never formatted; skipped" in w for w in rec.warnings)
    assert sorted(os.listdir(d)) == ["mine.txt"]   # the workload's files are gone, the user's file stays
    assert (d / "mine.txt").read_text() == "the user's file"


def test_a_failed_directory_run_leaves_nothing_behind(tmp_path, monkeypatch):
    d = tmp_path / "mnt"
    d.mkdir()
    monkeypatch.setattr(fw.runner, "compare", lambda *a: (_ for _ in ()).throw(fw.DataMismatch("boom")))
    body = steps_toml('op = "mount"', 'op = "mkdir"\npath = "/d"', 'op = "write"\npath = "/d/f{i}"\ncount = 3',
                      'op = "read"\npath = "/d/f{i}"\ncount = 3')
    with pytest.raises(fw.DataMismatch):
        run_scenario(_in_dir(scenario(tmp_path, body), d))
    assert os.listdir(d) == []


def test_a_directory_run_never_touches_existing_names(tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    (d / "a").write_text("keep")
    body = steps_toml('op = "mount"', 'op = "write"\npath = "/a"')
    with pytest.raises(ConfigError, match=r"workload: /a exists in .*mnt; the workload only creates new names"):
        run_scenario(_in_dir(scenario(tmp_path, body), d))
    assert (d / "a").read_text() == "keep"


# ---- the command line and the examples ------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SDBENCH, *args], capture_output=True, text=True, timeout=120)


def test_list_protocols_shows_it_with_its_media():
    r = _cli("list", "protocols")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("| workload |"))
    assert "| device, dir, image, memory, sim, sim-nor | filesystem | workload.repeat |" in line


def test_cli_runs_sets_repeat_and_dir_cleans_up(tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    path = scenario(tmp_path, ALL_OPS.format(part="flash_fatfs"))
    r = _cli("run", str(path), "--dir", str(d), "--runs", "2", "--no-range", "--no-save", "-f", "json")
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)["runs"][0]
    assert rec["status"] == "complete"
    assert {row["label"]: row["runs"] for row in rec["rows"]}["write /d/f{i}.bin x3"] == 6
    assert os.listdir(d) == []


def test_a_bad_step_is_one_error_line(tmp_path):
    path = scenario(tmp_path, steps_toml('op = "format"', 'op = "mount"', 'op = "read"\npath = "/x"'))
    r = _cli("run", str(path), "--no-range")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == ["error: workload.steps[2].path: read of /x, which does not exist at that "
                                             "point (no earlier step wrote it)"]


@pytest.mark.parametrize("name", ["workload-flash-512k-fat", "workload-flash-512k-spiffs",
                                  "workload-flash-512k-littlefs", "workload-sd-1000-small-files"])
def test_the_examples_run(name):
    sets = ["workload.count=2"] if name.startswith("workload-sd") else []
    rec = run_scenario(scen.load(name, sets))
    assert rec.status == "complete"
    ops = [r.op for r in rec.rows]
    assert {"format", "mount", "write", "read", "delete"} <= set(ops)
    write = next(r for r in rec.rows if r.op == "write")
    if name.startswith("workload-flash"):
        assert write.runs == 5 and write.bytes == 88000
    else:
        assert write.runs == 2 and write.bytes == 200 and "list" in ops


def test_fat_on_512_kib_of_flash_needs_the_512_byte_wear_levelling_sectors():
    # 4096-byte WL sectors leave 124 sectors, fewer than FatFs formats; refused before any I/O
    with pytest.raises(ConfigError, match="124 sectors of 4096 B are too small for FAT"):
        run_scenario(scen.load("workload-flash-512k-fat", ["flash.wl.sector_size_bytes=4096",
                                                           "flash.fat.sector_size_bytes=4096"]))
    with pytest.raises(ConfigError, match="flash.fat.sector_size_bytes = 512 B but the device has 4096 B"):
        run_scenario(scen.load("workload-flash-512k-fat", ["flash.wl.sector_size_bytes=4096"]))
