"""Every protocol on every stack where it makes sense, through the one stack builder.

fio jobs and presets on simulated cards (behind a USB bridge too), memory, images and directories; the P2
protocol on images, memory and directories; [sd.bridge] as a stack layer; the options a protocol keeps when the
command line moves a scenario onto other media.
"""
from __future__ import annotations

import json
import os

import pytest
from conftest import sim_sd_toml, write_file

from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.card import CardProfile
from sdbench.media.sim.host import HostProfile
from sdbench.media.sim.sdhost import SdHostDriver
from sdbench.media.usbmsc import MODES, UsbMscBridge
from sdbench.protocols import run_scenario
from sdbench.records import Results
from sdbench.testing import BlockDeviceSuite
from sdbench.workloads.registry import protocol

READER = "cdm-usb2-reader-sandisk-extreme-64gb"


# ---- fio on every stack ------------------------------------------------------------------------------------

def test_cdm_on_a_simulated_usb_reader_is_deterministic():
    over = ["fio.size_bytes=4194304"]
    a = run_scenario(scen.load(READER, over))
    b = run_scenario(scen.load(READER, over))
    assert Results(runs=(a,)).to_json() == Results(runs=(b,)).to_json()
    assert a.clock == "virtual" and a.source == "simulated" and a.protocol == "fio"
    by = {r.label: r for r in a.rows}
    assert set(by) == {f"{t} {k}" for t in ("SEQ1M Q8T1", "SEQ1M Q1T1", "RND4K Q32T1", "RND4K Q1T1")
                       for k in ("read", "write")}
    # sequential 1 MiB requests beat random 4 KiB ones, and nothing beats the USB 2.0 high-speed payload limit
    assert by["SEQ1M Q1T1 read"].reported_value > by["RND4K Q1T1 read"].reported_value > 0
    assert all(0 < r.reported_value < 53.3 for r in a.rows)
    # an SD bus takes one command at a time: deeper queues are said to be served in order
    assert any("served one at a time" in w for w in a.warnings)
    assert a.stack["sd"]["bridge"]["link"]["packet_bytes"] == 512
    assert a.metadata["fio"]["preset"] == "cdm"


def test_the_usb_bridge_costs_time_against_the_bare_card(tmp_path):
    bare = write_file(tmp_path, "bare.toml", 'protocol = "raw"\n' + sim_sd_toml())
    bridged = write_file(tmp_path, "bridged.toml", 'protocol = "raw"\n' + sim_sd_toml('[sd.bridge]\nmode = "multi-sector"'))
    r0 = {r.label: r for r in run_scenario(scen.load(bare)).rows}
    r1 = {r.label: r for r in run_scenario(scen.load(bridged)).rows}
    for label in r0:
        # full-speed USB (1.216 MB/s payload at most) is far slower than a 4-bit 40 MHz bus
        assert r1[label].time_ms > 2 * r0[label].time_ms
        assert r1[label].reported_value < 1.216


def test_fio_jobs_from_a_scenario_on_a_simulated_card(tmp_path):
    path = write_file(tmp_path, "jobs.toml", 'protocol = "fio"\n' + sim_sd_toml() + """
[fio]
preset = "jobs"
loops = 2
[[fio.jobs]]
name = "w"
rw = "write"
bs = "64k"
size = "2M"
verify = "crc32c"
[[fio.jobs]]
name = "r"
rw = "randread"
bs = "4k"
size = "2M"
loops = 1
""")
    rec = run_scenario(scen.load(path))
    labels = [r.label for r in rec.rows]
    assert labels == ["w write", "r read"]
    jobs = rec.metadata["fio"]["jobs"]
    assert [j["loops"] for j in jobs] == [2, 1]  # fio.loops for a job without its own
    assert rec.metadata["fio"]["verify"]["w"]["ok"] is True
    # --runs sets fio.loops
    sc = scen.load(path, [f"{protocol('fio').runs_option}=3"])
    assert protocol("fio").config_of(sc).jobs[0].loops == 3


@pytest.mark.parametrize("bad, msg", [
    ('[fio]\npreset = "crystal"', "fio.preset"),
    ('[fio]\njobs = 3', "fio.jobs"),
    ('[fio]\n[[fio.jobs]]\nrw = "sideways"', "fio.jobs[0]"),
    ('[fio]\n[[fio.jobs]]\nbogus = 1', "fio.jobs[0]"),
])
def test_bad_fio_tables_are_one_line(tmp_path, capsys, bad, msg):
    path = write_file(tmp_path, "bad.toml", 'protocol = "fio"\n' + sim_sd_toml() + bad)
    code = main(["run", path, "--no-save"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert msg in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_region_past_the_card_is_refused_before_the_run(tmp_path):
    path = write_file(tmp_path, "big.toml", 'protocol = "fio"\n' + sim_sd_toml() + '[fio]\npreset = "cdm"\nsize_bytes = 1073741824')
    with pytest.raises(ConfigError, match="fio.size_bytes"):
        run_scenario(scen.load(path))


def test_fio_on_memory_image_and_directory(tmp_path, capsys):
    mem = write_file(tmp_path, "mem.toml", """protocol = "fio"
[sd]
media = "memory"
capacity_bytes = 67108864
[fio]
preset = "sdfat"
size_bytes = 262144
""")
    rec = run_scenario(scen.load(mem))
    assert rec.clock == "wall" and [r.label for r in rec.rows] == ["sdfat write", "sdfat read"]
    assert rec.metadata["fio"]["verify"]["sdfat"]["ok"] is True

    img = tmp_path / "card.img"
    path = write_file(tmp_path, "img.toml", f"""protocol = "fio"
[sd]
media = "image"
path = "{img}"
size_bytes = 33554432
[fio]
preset = "a1"
size_bytes = 1048576
runtime_s = 0.05
""")
    rec = run_scenario(scen.load(path))
    assert img.exists() and rec.metadata["fio"]["a1"]["criteria"]

    d = tmp_path / "mnt"
    d.mkdir()
    code = main(["run", "espidf-memory", "--set", "protocol=\"fio\"", "--set", "fio.preset=\"jobs\"",
                 "--set", "fio.jobs=[{name = \"w\", rw = \"write\", bs = \"64k\", size = \"1M\"}]",
                 "--dir", str(d), "--no-save", "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert [r["label"] for r in doc["runs"][0]["rows"]] == ["w write"]
    assert doc["runs"][0]["stack"]["dir"]["path"] == str(d.resolve())


# ---- P2 on images, memory, directories ---------------------------------------------------------------

def test_p2_on_memory_has_no_card_power_up(tmp_path):
    path = write_file(tmp_path, "p2mem.toml", """protocol = "p2"
[sd]
media = "memory"
capacity_bytes = 268435456
[p2]
runs = 2
""")
    rec = run_scenario(scen.load(path))
    labels = [r.label for r in rec.rows]
    assert labels[0] == "Mount" and "Raw Read 1x512B" in labels and "File Write 32KB" in labels
    assert any("no card power-up" in w for w in rec.warnings)


def test_p2_in_a_directory_runs_the_file_metrics_and_leaves_nothing(tmp_path, capsys):
    d = tmp_path / "mnt"
    d.mkdir()
    (d / "mine.txt").write_text("keep")
    code = main(["run", "p2-spi25-350mhz-pny-16gb", "--runs", "2", "--dir", str(d), "--no-save", "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    run = json.loads(out)["runs"][0]
    assert [r["label"] for r in run["rows"]] == ["File Open", "File Read 256KB", "File Write 32KB"]
    assert any("not run in a directory" in w for w in run["warnings"])
    assert sorted(os.listdir(d)) == ["mine.txt"]


def test_p2_in_a_directory_with_no_file_metric_is_refused(tmp_path, capsys):
    d = tmp_path / "mnt"
    d.mkdir()
    code = main(["run", "p2-spi25-350mhz-pny-16gb", "--set", 'p2.metrics=["Mount"]', "--dir", str(d), "--no-save"])
    _, err = capsys.readouterr()
    assert code == 2 and "p2.metrics" in err


def test_p2_needs_the_grant_to_format_an_image(tmp_path, capsys):
    img = tmp_path / "p2.img"
    with open(img, "wb") as f:  # sparse; big enough for the scenario's FAT32 with 32 KiB clusters
        f.truncate(3 << 30)
    code = main(["run", "p2-spi25-350mhz-pny-16gb", "--runs", "1", "--device", str(img), "--no-save", "-q"])
    _, err = capsys.readouterr()
    assert code != 0 and "--allow-write" in err
    code = main(["run", "p2-spi25-350mhz-pny-16gb", "--runs", "1", "--device", str(img), "--allow-write",
                 "--yes", "--no-save", "-f", "json", "-q"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Raw Write 64x (32KB)" in [r["label"] for r in json.loads(out)["runs"][0]["rows"]]


# ---- [sd.bridge] refusals; the bridge passes the BlockDevice suite ---------------------------------------

@pytest.mark.parametrize("table, msg", [
    ('[sd.bridge]\nmode = "sideways"', "sd.bridge.mode"),
    ('[sd.bridge]\n[sd.bridge.link]\npacket_bytes = 100', "sd.bridge"),
    ('[sd.bridge]\n[sd.cache]\nblocks = 8', "sd.cache with sd.bridge"),
])
def test_bad_bridges_are_refused(tmp_path, table, msg):
    path = write_file(tmp_path, "b.toml", 'protocol = "raw"\n' + sim_sd_toml(table))
    with pytest.raises(ConfigError, match=msg.replace(".", r"\.")):
        run_scenario(scen.load(path))


def test_a_bridge_needs_a_simulated_card(tmp_path):
    path = write_file(tmp_path, "m.toml", 'protocol = "raw"\n[sd]\nmedia = "memory"\ncapacity_bytes = 67108864\n'
                                      '[sd.bridge]\nmode = "multi-sector"\n')
    with pytest.raises(ConfigError, match="simulated card"):
        run_scenario(scen.load(path))


def test_usbmsc_refuses_a_stack_bridge():
    with pytest.raises(ConfigError, match=r"remove \[sd.bridge\]"):
        run_scenario(scen.load("esp32s3-usbmsc-sdmmc4-40mhz", ['sd.bridge.mode="multi-sector"']))


def _bridge(mode: str) -> UsbMscBridge:
    host = HostProfile(driver="sdmmc", transaction_cycles=2400, cpu_hz=240_000_000)
    card = SdHostDriver(host, SdBus(BusConfig("sd4", 40_000_000)), CardProfile(capacity_bytes=16 << 20),
                        VirtualClock())
    return UsbMscBridge(card, VirtualClock(), mode=mode)


class TestUsbMscBridgeMultiSectorConformance(BlockDeviceSuite):
    def make_device(self):
        return _bridge("multi-sector")


class TestUsbMscBridgeSingleSectorConformance(BlockDeviceSuite):
    def make_device(self):
        return _bridge("single-sector")


class TestUsbMscBridgeBackgroundConformance(BlockDeviceSuite):
    def make_device(self):
        return _bridge("background")


def test_every_bridge_mode_is_in_the_suite():
    assert {c.make_device(None).mode for c in (TestUsbMscBridgeMultiSectorConformance,  # type: ignore[arg-type]
                                               TestUsbMscBridgeSingleSectorConformance,
                                               TestUsbMscBridgeBackgroundConformance)} == set(MODES)


# ---- the options a protocol keeps on other media -----------------------------------------------------

def test_espidf_keeps_its_sd_parts_on_a_device_and_runs_dir_in_a_directory():
    spec = protocol("espidf")
    cfg = spec.config_of(scen.load("espidf-esp32-sdmmc4-40mhz"))
    assert spec.on_media(cfg, "device").parts == tuple(p for p in cfg.parts if p.startswith("sd_"))
    assert spec.on_media(cfg, "dir").parts == ("dir",)
    flash_only = spec.config_of(scen.load("espidf-esp32-spiflash"))
    assert spec.on_media(flash_only, "device").parts == ("sd_raw",)
    # a protocol without a retarget hook keeps its options as they are
    p2cfg = protocol("p2").config_of(scen.load("p2-spi25-350mhz-pny-16gb"))
    assert protocol("p2").on_media(p2cfg, "dir") is p2cfg
