"""`sdbench sweep`: grids over scenario parameters on a process pool or a Dask cluster."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdbench import sweep as sw
from sdbench.cli import main
from sdbench.errors import ConfigError
from sdbench.store import open_store

USB_SPEC = """
base = "esp32s3-usbmsc-sdmmc4-40mhz"
name = "usb-small"
[fixed]
usbmsc.total_bytes = 32768
usbmsc.rows = ["multi-sector write", "multi-sector read"]
[grid]
"sd.bus.clock_hz" = [20000000, 40000000]
usbmsc.request_bytes = [4096, 8192]
[plot]
x = "usbmsc.request_bytes"
series = "sd.bus.clock_hz"
y = "USB MSC multi-sector read"
"""


def write(tmp_path: Path, text: str, name: str = "spec.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def strip(rec) -> dict:
    d = rec.to_dict()
    d["metadata"] = {k: v for k, v in d["metadata"].items() if k != "sweep"}
    return d


def test_spec_grid_is_the_cartesian_product_and_dotted_keys_mean_the_same(tmp_path):
    spec = sw.load_spec(write(tmp_path, USB_SPEC))
    assert spec.keys == ["sd.bus.clock_hz", "usbmsc.request_bytes"]
    assert spec.configurations() == [{"sd.bus.clock_hz": c, "usbmsc.request_bytes": r}
                                     for c in (20000000, 40000000) for r in (4096, 8192)]
    assert spec.overrides(spec.configurations()[0])[-1] == "usbmsc.request_bytes=4096"
    assert 'usbmsc.rows=["multi-sector write", "multi-sector read"]' in spec.overrides({})


def test_process_pool_results_do_not_depend_on_the_worker_count(tmp_path):
    spec = sw.load_spec(write(tmp_path, USB_SPEC))
    one = sw.run_sweep(spec, workers=1)
    two = sw.run_sweep(spec, workers=2)
    assert two.workers == 2 and one.workers == 1
    assert [strip(r) for r in one.records] == [strip(r) for r in two.records]
    assert [r.metadata["sweep"]["params"] for r in two.records] == spec.configurations()
    faster = two.records[1].row("USB MSC multi-sector read").value
    slower = two.records[0].row("USB MSC multi-sector read").value
    assert faster > slower  # 8 KiB requests: fewer CBW/CSW per byte


def test_cli_sweep_on_a_local_dask_cluster_saves_runs_table_json_and_plot(tmp_path, capsys):
    spec = write(tmp_path, USB_SPEC)
    db, js, png = tmp_path / "r.sqlite", tmp_path / "r.json", tmp_path / "r.png"
    code, out, err = run(capsys, "sweep", str(spec), "--dask", "local", "--workers", "2", "--db", str(db),
                         "--json", str(js), "--plot", str(png), "-q")
    assert code == 0, err
    lines = [l for l in out.splitlines() if l.startswith("| ")]
    assert lines[0].startswith("| # | sd.bus.clock_hz | usbmsc.request_bytes | USB MSC multi-sector write (MB/s)")
    assert len(lines) == 1 + 4
    doc = json.loads(js.read_text())
    sid = doc["sweep"]["id"]
    assert len(doc["runs"]) == 4 and doc["runs"][3]["metadata"]["sweep"]["params"]["usbmsc.request_bytes"] == 8192
    with open_store(db) as store:
        runs = store.list_runs()
        assert len(runs) == 4 and {r.sweep_id for r in runs} == {sid}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("text,message", [
    ("base = 'x'\n[grid]\n", "needs at least one key"),
    ("[grid]\na = [1]\n", "'base' must name a scenario"),
    ("base = 'espidf-memory'\n[grid]\na = 1\n", "grid.a must be a non-empty list"),
    ("base = 'espidf-memory'\nworkers = 2\n[grid]\na = [1]\n", "unknown key 'workers'"),
    ("base = 'espidf-memory'\n[grid]\na = [1]\n[fixed]\na = 2\n", "both"),
    ("base = 'espidf-memory'\n[grid\n", "invalid TOML"),
])
def test_bad_spec_files_are_one_line_errors(tmp_path, capsys, text, message):
    p = write(tmp_path, text)
    with pytest.raises(ConfigError, match=message):
        sw.load_spec(p)
    code, out, err = run(capsys, "sweep", str(p), "--no-save", "-q")
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1 and out == ""


def test_bad_parameter_values_fail_before_anything_runs(tmp_path, capsys):
    p = write(tmp_path, 'base = "mpy-esp32s3-sdspi"\n[grid]\n"fs_tests.policies" = [["lru"], ["mru"]]\n')
    code, out, err = run(capsys, "sweep", str(p), "--no-save", "-q")
    assert code == 2 and "configuration 2" in err and "mru" in err and len(err.strip().splitlines()) == 1
    p = write(tmp_path, 'base = "esp32s3-usbmsc-spi20mhz"\n[grid]\n"sd.card_params.speed" = [1]\n')
    code, _, err = run(capsys, "sweep", str(p), "--no-save", "-q")
    assert code == 2 and "speed" in err
    code, _, err = run(capsys, "sweep", str(tmp_path / "missing.toml"), "-q")
    assert code == 2 and "not found" in err


def test_plot_options_are_checked(tmp_path, capsys):
    p = write(tmp_path, USB_SPEC)
    code, _, err = run(capsys, "sweep", str(p), "--no-save", "-q", "--plot", str(tmp_path / "f.png"),
                       "--x", "sd.card")
    assert code == 2 and "not a grid key" in err
    db = tmp_path / "r.sqlite"
    code, out, err = run(capsys, "sweep", str(p), "--db", str(db), "-q", "--workers", "1", "--plot",
                         str(tmp_path / "f.png"), "--y", "no such row")
    assert code == 2 and "no configuration has a row" in err
    # known only once the runs are done, yet refused before anything is printed, saved or written
    assert not out and not db.exists() and not (tmp_path / "f.png").exists()
    code, out, err = run(capsys, "sweep", str(p), "--db", str(db), "-q", "--workers", "1", "--row", "no such row")
    assert code == 2 and "no configuration has a row" in err and not out and not db.exists()


def test_label_templates_fill_grid_values():
    assert sw.fill_label("{fs_tests.filesystems} mixed read", {"fs_tests.filesystems": "fat"}) == "fat mixed read"
    with pytest.raises(Exception, match="not a grid key"):
        sw.fill_label("{nope} read", {"a": 1})


def test_sweep_values_become_overrides_that_parse_back_to_the_same_value():
    import tomllib

    from sdbench.sweep import toml_value

    for v in ("plain", "µs ×2", "del\x7f", "new\nline", 'q"b\\', ["a\x01", 3, 2.5, True], {"k\x7f": "v"}):
        assert tomllib.loads(f"x = {toml_value(v)}")["x"] == v


LOGGER_SPEC = """
base = "logger-sd-fat-pauses"
name = "logger-cache"
[fixed]
logger.duration_s = 2.0
[grid]
"sd.cache.blocks" = [0, 16]
"sd.cache.write_mode" = ["write-through", "write-back"]
"""


def test_a_sweep_says_no_cache_and_carries_the_logger_figures_with_units(tmp_path, capsys):
    spec = sw.load_spec(write(tmp_path, LOGGER_SPEC))
    res = sw.run_sweep(spec, workers=1)
    caches = [rec.stack["sd"]["device"]["kind"] for rec in res.records]
    assert caches[:2] == ["sim-sd", "sim-sd"] and set(caches[2:]) == {"cache"}
    # no cache is the same run whatever write_mode says
    a, b = (next(r for r in rec.rows if r.label == "logger write") for rec in res.records[:2])
    assert a.samples_ms == b.samples_ms
    text = sw.markdown(res, ["logger buffer needed", "logger records lost", "logger longest stall"])
    assert "logger buffer needed (B)" in text and "logger records lost (records)" in text
    assert "logger longest stall (ms)" in text
    png = sw.plot_png(res, x="sd.cache.blocks", series="sd.cache.write_mode", y="logger buffer needed")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
