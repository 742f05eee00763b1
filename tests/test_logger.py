"""The data logger protocol: buffer figures, records lost, stall causes, FAT and LittleFS, directories, checks."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest
from conftest import sim_sd_toml, write_file

from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.fs.base import File, FileStat, FileSystem
from sdbench.protocols import run_scenario
from sdbench.records import Results
from sdbench.runner import Context
from sdbench.workloads import logger
from sdbench.workloads.registry import protocol

FAT = "logger-sd-fat-pauses"
LFS = "logger-sd-littlefs-pauses"


# ---- a constructed case: a stub filesystem on a virtual clock, one write stalls ----------------------------

class _StubFile(File):
    def __init__(self, fs: "_StubFs", path: str, mode: str) -> None:
        super().__init__(fs, path, mode)
        self._fs = fs

    def write(self, data: bytes, *, buf_addr: int = 0) -> int:
        fs = self._fs
        fs.calls += 1
        fs.clock.advance_ns(fs.stall_ns if fs.calls == fs.stall_at else fs.write_ns, "card")
        fs.files[self.path] += len(data)
        return len(data)

    def sync(self) -> None:
        self._fs.clock.advance_ns(self._fs.write_ns, "card")

    def read(self, size: int = -1, *, buf_addr: int = 0) -> bytes:
        return b""

    def seek(self, offset: int, whence: int = 0) -> int:
        return 0

    def tell(self) -> int:
        return self._fs.files[self.path]

    def _close(self) -> None:
        pass


class _StubFs(FileSystem):
    """Every write() costs ``write_ns`` of virtual time, except call number ``stall_at``: ``stall_ns``."""

    kind = "stub"

    def __init__(self, clock: VirtualClock, stall_at: int, stall_ns: int, write_ns: int = 10_000) -> None:
        super().__init__(None)  # type: ignore[arg-type]
        self.clock, self.stall_at, self.stall_ns, self.write_ns = clock, stall_at, stall_ns, write_ns
        self.calls = 0
        self.files: dict[str, int] = {}

    def _format(self) -> None:
        self.files.clear()

    def _mount(self) -> None:
        pass

    def _unmount(self) -> None:
        pass

    def _open(self, path: str, mode: str) -> File:
        self.files[path] = 0 if mode == "w" else self.files.get(path, 0)
        return _StubFile(self, path, mode)

    def _stat(self, path: str) -> FileStat:
        return FileStat(path, self.files[path])

    def _remove(self, path: str) -> None:
        del self.files[path]

    def _listdir(self, path: str) -> list[str]:
        return list(self.files)


def _stub_run(stall_ms: float, **options):
    clock = VirtualClock()
    cfg = logger.LoggerConfig(**{"duration_s": 2.0, "rate_hz": 200.0, "record_bytes": 64, "sync_every_ms": 0.0,
                                 **options})
    fs = _StubFs(clock, stall_at=101, stall_ns=int(stall_ms * 1e6))
    target = SimpleNamespace(make_fs=lambda part: fs, fs_factories={cfg.part: None})
    built = SimpleNamespace(target=target, metadata={}, warnings=[])
    sc = SimpleNamespace(options={"logger": cfg}, seed=1, name="stub")
    rows = list(logger.run(sc, built, Context(clock)))
    return rows, built.metadata["logger"], built.warnings


def test_the_buffer_needed_is_the_records_produced_during_a_stall():
    rows, meta, warnings = _stub_run(50.0)   # record 100 (produced at 500 ms) takes 50 ms: 10 record periods
    assert [r.label for r in rows] == ["logger write", "logger sync", "logger run", "logger buffer needed",
                                       "logger records lost", "logger longest stall", "logger write p99",
                                       "logger write p99.9", "logger writer busy"]
    by = {r.label: r for r in rows}
    # the figure rows carry the metadata's answers with their units
    assert (by["logger buffer needed"].value, by["logger buffer needed"].unit) == (640.0, "B")
    assert (by["logger records lost"].value, by["logger records lost"].unit) == (0.0, "records")
    assert by["logger longest stall"].time_ms == pytest.approx(50.0) and by["logger longest stall"].unit == "ms"
    busy = by["logger writer busy"].value
    assert by["logger writer busy"].unit == "%" and busy == pytest.approx(meta["writer_busy_pct"])
    # 399 writes of 10 µs, one of 50 ms and the final sync over a 2 s log
    assert busy == pytest.approx(100.0 * (399 * 0.01 + 50.0 + 0.01) / (meta["sessions_detail"][0]["duration_s"]
                                                                          * 1000.0), rel=1e-3)
    assert by["logger write"].runs == 400 and by["logger write"].time_ms_max == pytest.approx(50.0)
    buf = meta["buffer"]
    # records 100..109 are produced before the stalled write returns (110 comes at the same instant as the return)
    assert buf["needed_records"] == 10 and buf["needed_bytes"] == 10 * 64
    assert buf["needed_at_s"] == pytest.approx(0.55)
    assert buf["records_lost"] == 0 and not warnings
    stall = meta["longest_stall"]
    assert stall["op"] == "write" and stall["record"] == 100 and stall["ms"] == pytest.approx(50.0)
    assert meta["stalls"]["count"] == 1
    assert meta["write_latency_ms"]["max_ms"] == pytest.approx(50.0)
    assert meta["write_latency_ms"]["p50_ms"] == pytest.approx(0.01)
    assert sum(meta["histogram"]["write"]) == 400
    tl = meta["timeline"]
    assert tl["records_per_point"] == 1 and len(tl["t_s"]) == 400
    assert max(tl["held_records"]) == 10 and max(tl["age_ms"]) == pytest.approx(50.0)


@pytest.mark.parametrize("stall_ms, buffer_records", [(50.0, 4), (50.0, 9), (50.0, 10), (123.0, 7)])
def test_records_lost_are_those_that_find_the_buffer_full(stall_ms, buffer_records):
    _, meta, warnings = _stub_run(stall_ms, buffer_bytes=64 * buffer_records)
    needed = meta["buffer"]["needed_records"]
    assert needed == -(-int(stall_ms * 1e6) // 5_000_000)   # the periods the stall spans, the written one included
    lost = max(0, needed - buffer_records)
    assert meta["buffer"]["records_lost"] == lost
    assert bool(warnings) == (lost > 0)
    if lost:
        assert f"a buffer of {needed * 64} B loses none" in warnings[0]


def test_the_replay_without_a_bound_is_the_run():
    t = lambda k: k * 5_000_000  # noqa: E731
    ops = [(logger.WRITE, 10_000)] * 3 + [(logger.WRITE, 22_000_000), (logger.SYNC, 3_000_000)] + \
        [(logger.WRITE, 10_000)] * 15
    free = logger.replay(ops, 20, t, None)
    # record 3's write runs 15..37 ms: records 3..7 are held when it returns
    assert free["records_lost"] == 0 and free["most_held"] == 5
    assert logger.replay(ops, 20, t, 5)["records_lost"] == 0
    assert logger.replay(ops, 20, t, 4)["records_lost"] == 1
    tight = logger.replay(ops, 20, t, 2)   # records 5, 6 and 7 find records 3 and 4 in the buffer
    assert tight["records_lost"] == 3 and tight["first_lost_ns"] == 25_000_000


# ---- simulated cards ---------------------------------------------------------------------------------------

def test_a_card_pause_is_named_as_the_cause(tmp_path):
    path = write_file(tmp_path, "pause.toml", """protocol = "logger"
[logger]
duration_s = 0.5
sync_every_ms = 100.0
""" + sim_sd_toml("""[sd.card_params]
pause_probability = 1.0
pause_median_ms = 300.0
pause_sigma = 0.0
"""))
    rec = run_scenario(scen.load(path))
    meta = rec.metadata["logger"]
    stall = meta["longest_stall"]
    assert stall["cause"] == "card background pause"
    assert stall["ms"] > 300.0 and stall["card"]["pauses"] >= 1
    assert stall["shares_ms"]["card background pause"] == pytest.approx(300.0 * stall["card"]["pauses"])
    assert set(meta["stalls"]["by_cause"]) == {"card background pause"}
    # every write command pauses 300 ms: at 5 ms per record, records pile up
    assert meta["buffer"]["needed_records"] >= 60
    assert meta["buffer"]["records_lost"] > 0 and any("records lost" in w for w in rec.warnings)


def test_fat_and_littlefs_both_log_with_their_own_stalls():
    fat = run_scenario(scen.load(FAT, ["logger.duration_s=3"]))
    lfs = run_scenario(scen.load(LFS, ["logger.duration_s=3"]))
    for rec, kind in ((fat, "fat"), (lfs, "littlefs")):
        assert [r.label for r in rec.rows][:3] == ["logger write", "logger sync", "logger run"]
        assert all(r.label.startswith("logger ") and not r.samples_ms for r in rec.rows[3:])
        meta = rec.metadata["logger"]
        assert meta["filesystem"] == kind and meta["clock"] == "virtual" and meta["records"] == 600
        # at 1 s, 2 s, at 3 s when stalls have delayed the last records past it, and after the last record
        assert meta["sync"]["count"] == 3 + (rec.rows[2].time_ms > 3000.0)
        assert meta["buffer"]["needed_bytes"] >= 64
        assert meta["longest_stall"]["cause"] in logger.CAUSES
        assert rec.rows[2].value == pytest.approx(600 * 64 / 1024 / (rec.rows[2].time_ms / 1000.0), rel=0.01)
        assert 2990.0 <= rec.rows[2].time_ms < 3300.0
    # esp_littlefs erases a 512-byte block every 8 records and the SDMMC driver waits for it in RTOS ticks
    by_cause = lfs.metadata["logger"]["stalls"]["by_cause"]
    assert by_cause["erase wait"]["count"] > 10
    assert lfs.rows[0].commands.get("CMD38", 0) > 0 and not fat.rows[0].commands.get("CMD38")


def test_simulated_runs_are_deterministic_and_sessions_differ():
    over = ["logger.duration_s=2", "logger.runs=2", "logger.rotate_bytes=8192"]
    a = run_scenario(scen.load(FAT, over))
    b = run_scenario(scen.load(FAT, over))
    assert Results(runs=(a,)).to_json() == Results(runs=(b,)).to_json()
    meta = a.metadata["logger"]
    assert meta["sessions"] == 2 and meta["records"] == 800 and meta["files"] == 2 * 4
    assert [r.label for r in a.rows][:4] == ["logger write", "logger sync", "logger rotate", "logger run"]
    assert a.rows[0].runs == 800 and a.rows[3].runs == 2
    assert [s["files"] for s in meta["sessions_detail"]] == [4, 4]
    other = run_scenario(scen.load(FAT, [*over, "seed=2"]))
    assert other.rows[0].samples_ms != a.rows[0].samples_ms   # another seed: other pauses


def test_stall_attribution_from_counters():
    from sdbench.media.sim.card import CardProfile

    p = CardProfile()
    pause = {"breakdown_ns": {"card": 100_400_000, "host": 50_000, "rtos": 5_000_000}, "commands": {"CMD24": 1},
             "fs_ops": {"writes": 1}, "device_ops": {}, "card": {"pauses": 1, "pause_ns": 105_000_000, "merges": 0}}
    cause, shares = logger.attribute(pause, 105_450_000, op=logger.WRITE, offset=512, nbytes=64, fs_kind="fat",
                                     profile=p)
    assert cause == "card background pause" and shares["card background pause"] == 105_000_000
    merge = {"breakdown_ns": {"card": 60_400_000, "host": 50_000}, "commands": {"CMD24": 1}, "fs_ops": {"writes": 1},
             "device_ops": {}, "card": {"pauses": 0, "pause_ns": 0, "merges": 1}}
    cause, shares = logger.attribute(merge, 60_450_000, op=logger.WRITE, offset=512, nbytes=64, fs_kind="fat",
                                     profile=p)
    assert cause == "card merge (garbage collection)"
    assert shares["card merge (garbage collection)"] == pytest.approx(60_000_000)
    erase = {"breakdown_ns": {"card": 300_000, "rtos": 9_500_000, "host": 50_000},
             "commands": {"CMD38": 1, "CMD24": 1}, "fs_ops": {"writes": 1, "erases": 1}, "device_ops": {},
             "card": {"pauses": 0, "pause_ns": 0, "merges": 0}}
    assert logger.attribute(erase, 9_850_000, op=logger.WRITE, offset=0, nbytes=64, fs_kind="littlefs",
                            profile=p)[0] == "erase wait"
    fat = {"breakdown_ns": {"card": 2_000_000, "host": 200_000, "bus": 100_000}, "commands": {"CMD24": 4, "CMD17": 1},
           "fs_ops": {"reads": 1, "writes": 4}, "device_ops": {}, "card": {"pauses": 0, "pause_ns": 0, "merges": 0}}
    assert logger.attribute(fat, 2_300_000, op=logger.WRITE, offset=65536, nbytes=64, fs_kind="fat",
                            profile=p)[0] == "FAT allocation"
    scan = {"breakdown_ns": {"card": 250_000_000, "host": 60_000_000, "bus": 30_000_000},
            "commands": {"CMD17": 980, "CMD24": 1}, "fs_ops": {"reads": 980, "writes": 1}, "device_ops": {},
            "card": {"pauses": 0, "pause_ns": 0, "merges": 0}}
    assert logger.attribute(scan, 340_000_000, op=logger.WRITE, offset=100, nbytes=64, fs_kind="littlefs",
                            profile=p)[0] == "LittleFS compaction"
    nor = {"breakdown_ns": {"flash": 40_000_000, "host": 100_000}, "commands": {"SE": 1}, "fs_ops": {"erases": 1},
           "device_ops": {}}
    assert logger.attribute(nor, 40_100_000, op=logger.WRITE, offset=0, nbytes=64,
                            fs_kind="spiffs")[0] == "flash program/erase busy"
    wall = {"breakdown_ns": {}, "commands": {}, "fs_ops": {}, "device_ops": {}}
    assert logger.attribute(wall, 5, op=logger.SYNC, offset=0, nbytes=64, fs_kind="dir") == \
        ("other", {**dict.fromkeys(logger.CAUSES, 0.0), "other": 5.0})


# ---- real media: a directory on the wall clock ---------------------------------------------------------------

def test_a_directory_run_leaves_nothing_behind(tmp_path, capsys):
    d = tmp_path / "mnt"
    d.mkdir()
    (d / "mine.txt").write_text("keep")
    code = main(["run", FAT, "--dir", str(d), "--set", "logger.duration_s=0.2", "--set", "logger.sync_every_ms=50",
                 "--set", "logger.rotate_bytes=1024", "--no-save", "--no-range", "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    run = json.loads(out)["runs"][0]
    assert run["clock"] == "wall"
    meta = run["metadata"]["logger"]
    assert meta["part"] == "dir" and meta["records"] == 40 and meta["files"] == 3
    assert [r["label"] for r in run["rows"]][:4] == ["logger write", "logger sync", "logger rotate", "logger run"]
    assert meta["longest_stall"]["cause"] == "other"
    assert sorted(os.listdir(d)) == ["mine.txt"] and (d / "mine.txt").read_text() == "keep"


def test_a_directory_holding_the_log_file_is_refused(tmp_path, capsys):
    d = tmp_path / "mnt"
    d.mkdir()
    (d / "log.bin").write_text("earlier log")
    code = main(["run", FAT, "--dir", str(d), "--set", "logger.duration_s=0.1", "--no-save", "--no-range"])
    err = capsys.readouterr().err
    assert code == 2 and "logger.file_name: log.bin exists" in err
    assert (d / "log.bin").read_text() == "earlier log" and sorted(os.listdir(d)) == ["log.bin"]


# ---- checks before any work ---------------------------------------------------------------------------------

@pytest.mark.parametrize("over, msg", [
    (["logger.buffer_bytes=32"], "logger.buffer_bytes = 32 B holds no record of logger.record_bytes = 64 B"),
    (["logger.rotate_bytes=10"], "logger.rotate_bytes = 10 B holds no record"),
    (["logger.duration_s=86400", "logger.rate_hz=1000"], "logger.duration_s = 86400 s at logger.rate_hz = 1000 Hz"),
    (["logger.part=\"nand\""], "logger.part = 'nand' is not one of"),
    (["logger.rate_hz=0"], "logger.rate_hz"),
    (["logger.file_name=\"logs/a.bin\""], "logger.file_name = 'logs/a.bin'"),
    (["logger.syncs=3"], "unknown option logger.syncs"),
])
def test_bad_options_are_one_line_naming_the_option(over, msg, capsys):
    code = main(["run", FAT, *sum((["--set", o] for o in over), []), "--no-save"])
    err = capsys.readouterr().err
    assert code == 2 and msg in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error:")


@pytest.mark.parametrize("over, msg", [
    (["logger.part=\"flash_littlefs\""], "logger.part = 'flash_littlefs': this stack has no such filesystem"),
    (["logger.part=\"dir\""], "logger.part = \"dir\" needs a directory"),
    (["sd.capacity_bytes=67108864", "logger.rate_hz=10000", "logger.duration_s=200"], "do not fit sd_fatfs's"),
])
def test_what_the_stack_cannot_hold_is_refused_before_the_run(over, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(")):
        run_scenario(scen.load(FAT, over))


def test_the_protocol_is_listed_and_moves_with_the_command_line(capsys):
    assert main(["list", "protocols"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "logger" in x)
    assert "logger.runs" in line and "dir" in line and "sim" in line
    spec = protocol("logger")
    cfg = logger.LoggerConfig(part="sd_littlefs")
    assert spec.on_media(cfg, "dir").part == "dir"
    assert spec.on_media(cfg, "device").part == "sd_littlefs"
    assert spec.on_media(logger.LoggerConfig(part="flash_littlefs"), "device").part == "sd_fatfs"
    sc = scen.load(FAT, ["logger.runs=3"])
    assert spec.timed_calls(sc) == 3 * (12000 + 60 + 1)


def test_a_flash_part_logs_through_its_filesystem():
    rec = run_scenario(scen.load("espidf-esp32-spiflash", ["protocol=\"logger\"", "logger.part=\"flash_littlefs\"",
                                                           "logger.duration_s=1"]))
    meta = rec.metadata["logger"]
    assert meta["filesystem"] == "littlefs" and meta["records"] == 200 and meta["clock"] == "virtual"
    assert rec.rows[0].commands.get("PP", 0) > 0


def test_the_report_plots_latency_over_time_and_the_histogram():
    from sdbench.report import plots

    rec = run_scenario(scen.load("logger-sd-fat-pauses", ["logger.duration_s=2"]))
    figs = {stem: fig for stem, _, fig in plots.figures([("log", rec)])}
    fig = figs["logger-log"]
    top, bottom = fig.axes
    assert top.get_yscale() == "log" and top.lines and len(top.lines[0].get_xdata()) > 100
    # one bar series per operation that has calls, each labelled
    assert {t.get_text() for t in bottom.get_legend().get_texts()} == {"write", "sync"}
