"""sdbench powerloss: the known answers, reproducible losses, the matrix and its page."""
from __future__ import annotations

import json

import pytest

from sdbench import powerloss as pl
from sdbench import scenarios as scen
from sdbench.cli import main

from conftest import CHROMIUM, chromium_screenshot

SD = "espidf-esp32-sdmmc4-40mhz"
SMALL = ["sd.capacity_bytes=67108864"]
FLASH = "espidf-esp32-spiflash"
BAD = ("lost_acknowledged", "corrupted", "needs_repair", "unmountable")


def _cell(fs, cache="none", bridge="none", *, sets=(), cuts=40, name=SD):
    cfg = pl.WorkloadConfig(cuts=cuts)
    return pl.run_cell(scen.load(name, [*SMALL, *sets] if name == SD else list(sets)), pl.Cell(fs, cache, bridge), cfg)


@pytest.mark.parametrize("cache,bridge", [("none", "none"), ("write-through", "none"), ("write-back", "none"),
                                          ("none", "multi-sector"), ("none", "background")])
def test_littlefs_on_an_honest_stack_never_loses_what_it_acknowledged(cache, bridge):
    r = _cell("littlefs", cache, bridge)
    assert len(r.cuts) == 40 and r.ops >= 40
    assert all(r.count(c) == 0 for c in BAD), r.to_dict(1)
    assert r.count("lost_unacknowledged") > 0      # the cuts did land inside unfinished writes


def test_fat_can_be_left_needing_repair_but_keeps_what_it_acknowledged():
    r = _cell("fat", cuts=80)
    d = r.to_dict(1)
    assert d["needs_repair"] > 0 and d["lost_acknowledged"] == 0 and d["unmountable"] == 0
    assert "lost cluster" in r.first_loss.detail and r.first_loss.layer == "filesystem"


@pytest.mark.parametrize("cache,bridge,layer", [("write-back", "none", "block cache"),
                                                ("none", "background", "USB bridge")])
def test_write_back_cache_and_background_bridge_lose_acknowledged_writes(cache, bridge, layer):
    r = _cell("raw", cache, bridge)
    assert r.count("lost_acknowledged") > 0 and r.first_loss.layer.startswith(layer)
    assert sum(c.lost_acknowledged_bytes for c in r.cuts) > 0


@pytest.mark.parametrize("cache,bridge", [("none", "none"), ("write-through", "none"), ("none", "multi-sector")])
def test_raw_writes_acknowledged_by_an_honest_stack_survive(cache, bridge):
    r = _cell("raw", cache, bridge)
    assert all(r.count(c) == 0 for c in BAD)


def test_a_card_that_loses_its_volatile_cache_breaks_even_littlefs_promise():
    r = _cell("littlefs", sets=["sd.faults.volatile_sectors=64"])
    assert r.count("lost_acknowledged") + r.count("corrupted") + r.count("unmountable") > 0
    assert r.first_loss.layer == "card (volatile write cache)"


def test_flash_target_cells():
    cfg = pl.WorkloadConfig(cuts=30)
    sc = scen.load(FLASH, [])
    lfs = pl.run_cell(sc, pl.Cell("littlefs"), cfg)
    spiffs = pl.run_cell(sc, pl.Cell("spiffs"), cfg)
    assert len(lfs.cuts) == len(spiffs.cuts) == 30
    assert all(lfs.count(c) == 0 for c in BAD) and spiffs.count("unmountable") == 0
    assert pl.run_cell(sc, pl.Cell("fat", "none", "background"), cfg).skipped.startswith("USB bridges")
    assert pl.run_cell(sc, pl.Cell("spiffs", "write-back"), cfg).skipped.startswith("on SPI flash a block cache")


@pytest.mark.parametrize("fs", ["fat", "littlefs"])
def test_flash_target_has_write_back_and_write_through_cells(fs):
    """Issue 32: the SPI-flash matrix had only cache = none cells; FAT and LittleFS get a block cache as on SD
    ([flash.cache]): write-through keeps every promise, and the cells run (a fresh cache after each cut)."""
    cfg = pl.WorkloadConfig(cuts=12)
    sc = scen.load(FLASH, [])
    through = pl.run_cell(sc, pl.Cell(fs, "write-through"), cfg)
    back = pl.run_cell(sc, pl.Cell(fs, "write-back"), cfg)
    assert not through.skipped and not back.skipped and len(through.cuts) == len(back.cuts) == 12
    assert through.count("lost_acknowledged") == through.count("corrupted") == 0
    assert through.count("unmountable") == 0
    # the cache is in the stack the cell measured: a write-back cache changes the cost of the workload
    assert back.workload_ms != through.workload_ms
    if fs == "fat":   # its dirty blocks go out in the cache's order at sync: cuts leave FAT needing repair
        assert back.count("needs_repair") + back.count("corrupted") > 0
        assert back.first_loss.layer.startswith("block cache")
    else:             # littlefs syncs the device at each commit: the cache keeps no promise back
        assert all(back.count(c) == 0 for c in BAD)


def test_cells_are_deterministic():
    a, b = _cell("fat", cuts=25), _cell("fat", cuts=25)
    assert a.to_dict(1) == b.to_dict(1)


def test_replay_reproduces_the_first_loss(capsys):
    assert main(["powerloss", SD, "--set", SMALL[0], "--fs", "raw", "--bridge", "background", "--cuts", "30",
                 "-f", "json", "-q", "-j", "1"]) == 0
    cell = json.loads(capsys.readouterr().out)["cells"][0]
    first = cell["first_loss"]
    assert first and first["class"] == "lost_acknowledged" and first["seed"] == 1
    assert main(["powerloss", SD, "--set", SMALL[0], "--fs", "raw", "--bridge", "background",
                 "--replay", str(first["op"]), "-f", "json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["op"], again["class"], again["detail"], again["layer"]) == \
        (first["op"], first["class"], first["detail"], first["layer"])


def test_matrix_json_covers_every_cell_and_says_which_do_not_apply(capsys):
    assert main(["powerloss", FLASH, "--matrix", "--bridge", "none", "--cuts", "10", "-f", "json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cells = {(c["fs"], c["cache"]): c for c in doc["cells"]}
    assert len(cells) == 4 * 3
    assert "skipped" in cells[("spiffs", "write-back")] and "skipped" not in cells[("fat", "write-back")]
    run = cells[("spiffs", "none")]
    assert set(run) >= {"cuts", "clean", "lost_acknowledged_bytes", "corrupted_files", "unmountable", "first_loss"}


@pytest.mark.parametrize("args,msg", [
    (["--fs", "ntfs"], "--fs 'ntfs'"),
    (["--workload", "files"], "KEY=VALUE"),
    (["--workload", "file_bytes=1"], "file_bytes"),
    (["--fs", "fat,raw", "--replay", "3"], "one cell"),
    (["--cuts", "0"], "--cuts"),
    (["--fs", "spiffs"], "no cell can run: SPIFFS runs on SPI flash only"),  # every cell skipped: nothing cut
    (["--seed", "-1"], "powerloss.seed = -1 is below the minimum 0"),
])
def test_bad_input_is_one_line(args, msg, capsys):
    assert main(["powerloss", SD, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") or "Error" in err
    assert msg in err and err.count("\n") <= 2


def test_a_scenario_without_a_simulated_medium_is_refused(capsys):
    assert main(["powerloss", "espidf-memory"]) == 2
    assert "simulated medium" in capsys.readouterr().err


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")
def test_heat_map_page_renders_in_headless_chromium(tmp_path, capsys):
    html = tmp_path / "pl.html"
    assert main(["powerloss", SD, "--set", SMALL[0], "--fs", "raw,littlefs", "--cache", "none,write-back",
                 "--cuts", "20", "-q", "--html", str(html)]) == 0
    text = html.read_text()
    assert text.index("<img") < text.index("<table") and "KiB/s" in text
    img = chromium_screenshot(html, tmp_path, 1600)
    red = (img[..., 0] > 0.6) & (img[..., 1] < 0.3) & (img[..., 2] < 0.3)      # raw + write-back: unsafe
    g = img[..., 1]
    green = (g > 0.3) & (g > img[..., 0] + 0.2) & (g > img[..., 2] + 0.1)         # littlefs: safe
    assert red.sum() > 2000 and green.sum() > 2000


def test_a_fat_cell_does_not_depend_on_the_hash_seed():
    """A device that failed under FatFs left its exception set in fatfs-ng while FatFs went on, and what the
    cut left behind then varied with the process's hash seed; the same cell, two seeds, one result."""
    import os
    import subprocess
    import sys

    code = ("from sdbench import powerloss as pl, scenarios as scen; import json; "
            "r = pl.run_cell(scen.load('espidf-esp32-spiflash', []), pl.Cell('fat', 'write-through'), "
            "pl.WorkloadConfig(cuts=12)); print(json.dumps(r.to_dict(1)))")
    got = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")]
    assert got[0] == got[1] and json.loads(got[0])["lost_acknowledged"] == 0
