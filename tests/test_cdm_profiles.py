"""CrystalDiskMark-style profiles (default, peak, real) and the read/write mix rows: on a simulated card on its
virtual clock, in memory, and through `sdbench preset cdm` (refusals exit 2 before any I/O)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from sdbench.cli import main
from sdbench.clock import VirtualClock, WallClock
from sdbench.errors import ConfigError
from sdbench.media.base import BlockDeviceWrapper, Geometry, ReadOnlyError
from sdbench.media.memory import MemoryDevice
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.sdhost import SdHostDriver
from sdbench.records import MIB, Results
from sdbench.stack.sd import load_card, load_host
from sdbench.store import open_store
from sdbench.workloads import fio
from sdbench.workloads.fio import presets


def card(capacity: int = 64 * MIB) -> SdHostDriver:
    return SdHostDriver(load_host("esp32-sdmmc"), SdBus(BusConfig("sd4", 40_000_000)),
                        load_card("generic-sdhc", {"capacity_bytes": capacity}), VirtualClock())


class CountOps(BlockDeviceWrapper):
    """Counts the device's reads and writes by request size (bytes)."""

    kind = "count"

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.reads: dict[int, int] = {}
        self.writes: dict[int, int] = {}

    def _read(self, lba, count, buf_addr):
        n = count * self.geometry.sector_size
        self.reads[n] = self.reads.get(n, 0) + 1
        return self.inner.read(lba, count, buf_addr=buf_addr)

    def _write(self, lba, data, buf_addr):
        self.writes[len(data)] = self.writes.get(len(data), 0) + 1
        self.inner.write(lba, data, buf_addr=buf_addr)


@pytest.fixture
def jobs_run(monkeypatch) -> list[fio.JobConfig]:
    """Every job the preset hands the engine, in order."""
    seen: list[fio.JobConfig] = []
    real = presets.run_job

    def spy(target, job, **kw):
        seen.append(job)
        return real(target, job, **kw)

    monkeypatch.setattr(presets, "run_job", spy)
    return seen


def test_peak_profile_runs_seq1m_q8t1_and_rnd4k_q32t16(jobs_run):
    rec = fio.run_cdm(card(), size_bytes=4 * MIB, loops=1, runtime_s=0.05, profile="peak")
    assert [r.label for r in rec.rows] == ["SEQ1M Q8T1 read", "RND4K Q32T16 read", "SEQ1M Q8T1 write",
                                           "RND4K Q32T16 write"]
    # the prefill, then reads and writes of each test: 16 threads x 32 queued is 512, cut to a job's 256
    assert [(j.rw, j.bs_bytes, j.iodepth) for j in jobs_run] == [
        ("write", MIB, 1), ("read", MIB, 8), ("randread", 4096, 256), ("write", MIB, 8), ("randwrite", 4096, 256)]
    tests = rec.metadata["tests"]
    assert [(t["label"], t["queues"], t["threads"], t["iodepth"]) for t in tests] == [
        ("SEQ1M Q8T1", 8, 1, 8), ("RND4K Q32T16", 32, 16, 256)]
    assert (rec.metadata["profile"], rec.metadata["profile_title"]) == ("peak", "Peak Performance")
    assert rec.scenario == "CrystalDiskMark-style (Peak Performance)" and rec.clock == "virtual"
    assert any("512 I/Os in flight; run with 256" in w for w in rec.warnings)
    assert "job cdm: iodepth 256 on sim-sd: requests are served one at a time" in rec.warnings
    assert all(r.unit == "MB/s" and r.value > 0 for r in rec.rows)


def test_real_and_default_profiles(jobs_run):
    rec = fio.run_cdm(card(), size_bytes=2 * MIB, loops=1, runtime_s=0.05, profile="real", mode="read")
    assert [r.label for r in rec.rows] == ["SEQ1M Q1T1 read", "RND4K Q1T1 read"]
    assert [(j.rw, j.iodepth) for j in jobs_run[1:]] == [("read", 1), ("randread", 1)]
    assert rec.scenario == "CrystalDiskMark-style (Real World Performance)"
    default = fio.run_cdm(card(), size_bytes=2 * MIB, loops=1, runtime_s=0.05, mode="read")
    assert [r.label for r in default.rows] == [f"{t} read" for t, *_ in fio.CDM_TESTS]
    assert default.scenario == "CrystalDiskMark-style" and default.metadata["profile"] == "default"
    assert "mix" not in default.metadata


@pytest.mark.parametrize("pct", [30, 70, 90])
def test_mix_rows_read_share_is_the_one_asked_for(pct):
    dev = CountOps(MemoryDevice(Geometry(sector_size=512, sector_count=16 * MIB // 512), WallClock()))
    rec = fio.run_cdm(dev, size_bytes=8 * MIB, loops=2, runtime_s=0.0, profile="real", mode="write", mix=True,
                      mix_read_pct=pct)
    seq_label, label = f"SEQ1M Q1T1 mix {pct}/{100 - pct}", f"RND4K Q1T1 mix {pct}/{100 - pct}"
    assert [r.label for r in rec.rows] == ["SEQ1M Q1T1 write", "RND4K Q1T1 write", seq_label, label]
    # the sequential mix: fio's rw, 1 MiB ops in order, the same share of reads
    seq = rec.metadata["rows"][seq_label]
    assert rec.row(seq_label).op == "rw" and seq["ops"] == 2 * 8
    assert dev.reads.get(MIB, 0) == seq["read_ops"] and 0 < seq["read_ops"] < seq["ops"]
    row, m = rec.row(label), rec.metadata["rows"][label]
    assert row.op == "randrw" and row.unit == "MB/s"
    # each loop covers the 8 MiB region once in 4 KiB ops, some read and the rest written
    assert m["ops"] == 2 * 8 * MIB // 4096 and m["read_ops"] + m["write_ops"] == m["ops"]
    assert m["read_share_pct"] == pytest.approx(pct, abs=3.0) and m["rwmixread_pct"] == pct
    # what the device saw: every 4 KiB read is the mix's; its 4 KiB writes are the RND4K write test's and the mix's
    assert dev.reads.get(4096, 0) == m["read_ops"]
    assert dev.writes[4096] == rec.metadata["rows"]["RND4K Q1T1 write"]["ops"] + m["write_ops"]
    best = max(m["loops"], key=lambda x: x["mib_s"])
    assert row.bytes == best["ops"] * 4096 and row.value == pytest.approx(row.bytes / 1e6 / (row.time_ms / 1e3))
    assert rec.metadata["mix"] == {"read_pct": pct, "write_pct": 100 - pct, "rows": [seq_label, label]}


def test_peak_mix_on_a_simulated_card_is_repeatable():
    def run():
        return fio.run_cdm(card(), size_bytes=2 * MIB, loops=1, runtime_s=0.05, profile="peak", mix=True)

    rec = run()
    assert rec.rows[-1].label == "RND4K Q32T16 mix 70/30" and rec.rows[-1].value > 0
    assert Results(runs=(rec,)).to_json() == Results(runs=(run(),)).to_json()


def test_bad_profile_or_ratio_and_read_only_targets():
    mem = MemoryDevice(Geometry(512, 8192), VirtualClock())
    for kw, msg in (({"profile": "turbo"}, "cdm.profile = 'turbo' is not one of default, peak, real"),
                    ({"mix_read_pct": 0}, "below the minimum 1 %"), ({"mix_read_pct": 100}, "above the maximum 99 %"),
                    ({"mode": "both"}, "cdm.mode = 'both' is not one of all, read, write")):
        with pytest.raises(ConfigError, match=msg):
            fio.run_cdm(mem, size_bytes=MIB, loops=1, **kw)
    ro = MemoryDevice(Geometry(512, 8192), VirtualClock(), read_only=True)
    with pytest.raises(ReadOnlyError, match="mix tests write"):
        fio.run_cdm(ro, size_bytes=MIB, loops=1, mode="read", mix=True)


# ---- through the command line ---------------------------------------------------------------------
def image(tmp_path: Path, size: int = 8 * MIB) -> Path:
    p = tmp_path / "card.img"
    p.write_bytes(b"\x5a" * size)
    return p


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("args, msg", [
    (["cdm", "--profile", "turbo"], "error: --profile = 'turbo' is not one of default, peak, real"),
    (["cdm", "--mix-read-pct", "0"], "error: --mix-read-pct = 0 % is below the minimum 1 %"),
    (["cdm", "--mix-read-pct", "100"], "error: --mix-read-pct = 100 % is above the maximum 99 %"),
    (["cdm", "--mix", "--mix-read-pct", "150"], "error: --mix-read-pct = 150 % is above the maximum 99 %"),
    (["cdm", "--mix-read-pct", "many"], "--mix-read-pct"),
    (["cdm", "--mode", "both"], "error: --mode = 'both' is not one of all, read, write"),
    (["a1", "--profile", "peak"], "error: --profile: options of preset cdm only"),
    (["sdfat", "--mix"], "error: --mix: options of preset cdm only"),
])
def test_bad_profile_or_ratio_is_one_line_exit_2_before_any_io(tmp_path, capsys, args, msg):
    img = image(tmp_path)
    before = digest(img)
    rc = main(["preset", *args, "--device", str(img), "--size", "1M", "--allow-write", "--yes"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err and msg in err, err
    assert digest(img) == before and sorted(p.name for p in tmp_path.iterdir()) == ["card.img"]


@pytest.mark.parametrize("profile", ["default", "real"])
def test_a_size_below_the_largest_block_names_the_option_and_the_test(tmp_path, capsys, profile):
    img = image(tmp_path)
    before = digest(img)
    rc = main(["preset", "cdm", "--profile", profile, "--device", str(img), "--size", "64K", "--allow-write", "--yes"])
    err = capsys.readouterr().err
    test = "SEQ1M Q8T1" if profile == "default" else "SEQ1M Q1T1"
    assert rc == 2 and err == f"error: --size = 64 KiB is smaller than one block of the {test} test (1 MiB)\n"
    assert digest(img) == before


def test_mix_through_the_cli_prints_stores_and_writes_json(tmp_path, capsys):
    img = image(tmp_path)
    js, db = tmp_path / "cdm.json", tmp_path / "runs.sqlite"
    assert main(["preset", "cdm", "--device", str(img), "--size", "2M", "--loops", "1", "--runtime-s", "0.05",
                 "--profile", "real", "--mix-read-pct", "60", "--allow-write", "--yes", "-q", "--json", str(js),
                 "--db", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| Test") and "MB/s (best loop)" in out[0] and out[0].rstrip("| ").endswith("Reads %")
    mix_line = next(line for line in out if "RND4K Q1T1 mix 60/40" in line)
    assert mix_line.rstrip(" |").split("|")[-1].strip() != "-"
    rec = Results.from_json(js.read_text()).runs[0]
    labels = ["SEQ1M Q1T1 read", "RND4K Q1T1 read", "SEQ1M Q1T1 write", "RND4K Q1T1 write", "SEQ1M Q1T1 mix 60/40",
              "RND4K Q1T1 mix 60/40"]
    assert [r.label for r in rec.rows] == labels
    with open_store(db) as store:
        (run,) = store.list_runs()
        stored = store.load(run.id)
    assert [r.label for r in stored.rows] == labels and stored.protocol == "cdm"
    assert (stored.metadata["profile"], stored.metadata["mix"]["read_pct"]) == ("real", 60)
    assert stored.metadata["rows"]["RND4K Q1T1 mix 60/40"]["rwmixread_pct"] == 60
