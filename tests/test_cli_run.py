"""`sdbench run` and friends from the user's side: output, JSON, bad input."""
from __future__ import annotations

import json

import pytest

from sdbench.cli import main


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("sdbench ")


def test_scenarios_lists_default(capsys):
    code, out, _ = run(capsys, "scenarios")
    assert code == 0
    assert "espidf-esp32-sdmmc4-40mhz (default)" in out and out.startswith("| scenario | description |")


def test_run_memory_prints_every_row_in_espidf_format(capsys, tmp_path):
    j = tmp_path / "out.json"
    code, out, err = run(capsys, "run", "espidf-memory", "--runs", "2", "--json", str(j), "-q")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 40
    import re

    pat = re.compile(r"^\[.{55}\] \(\d+x\) [ \d.]{8} ms [ \d.]{8} kB [ \d.]{10} MB/s$")
    assert all(pat.match(l) for l in lines), lines[:3]
    doc = json.loads(j.read_text())
    assert doc["sdbench_version"] and doc["runs"][0]["clock"] == "wall"
    row = doc["runs"][0]["rows"][0]
    for key in ("label", "op", "bytes", "runs", "time_ms", "time_ms_median", "time_ms_min", "time_ms_max",
                "time_ms_stdev", "mib_s", "counters"):
        assert key in row
    assert row["runs"] == 2 and len(row["samples_ms"]) == 2
    assert row["counters"]["writes"] == 2


def test_table_format_is_markdown(capsys):
    code, out, _ = run(capsys, "run", "--runs", "1", "-f", "md", "-q", "--set", "espidf.parts=['sd_raw']")
    assert code == 0
    assert "| label | runs |" in out and "| SD raw write [16 kB label] | 1 |" in out


def test_table_has_a_column_for_every_time_component(capsys):
    # behind a USB bridge the PC's time includes the link: the table says how much
    code, out, _ = run(capsys, "run", "esp32s3-usbmsc-sdmmc4-40mhz", "--runs", "2", "-f", "md", "-q",
                       "--no-save", "--no-range")
    assert code == 0
    head = next(line for line in out.splitlines() if line.startswith("| label"))
    assert "| host ms | usb ms | bus ms | card ms |" in head and "rtos ms" not in head
    row = next(line for line in out.splitlines() if line.startswith("| USB MSC"))
    usb_ms = float(row.split("|")[head.split("|").index(" usb ms ")])
    assert usb_ms > 0


@pytest.mark.parametrize("args,msg", [
    (["run", "no-such-scenario"], "unknown scenario"),
    (["run", "--set", "espidf.runs=0"], "below the minimum"),
    (["run", "--set", "espidf.target_size_bytes=1000"], "multiple of 512"),
    (["run", "--set", "espidf.parts=['sd_bogus']"], "unknown part"),
    (["run", "--set", "espidf.parts=[]"], "espidf.parts: name at least one part"),
    (["run", "--set", "espidf.sd_modes=[]"], "espidf.sd_modes: name at least one mode"),
    (["run", "p2-spi25-350mhz-pny-16gb", "--set", "p2.metrics=[]"], "p2.metrics: name at least one metric"),
    (["run", "/nonexistent/scenario.toml"], "not found"),
    (["run", "--json", "/nonexistent-dir/out.json"], "does not exist"),
    # a protocol's own format for another protocol's run: refused before it runs, not after (nothing stored)
    (["run", "-f", "sdfat", "--no-save"], "scenario espidf-esp32-sdmmc4-40mhz runs espidf"),
])
def test_bad_input_is_one_line_exit_2(capsys, args, msg):
    code, out, err = run(capsys, *args)
    assert code == 2
    assert msg in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_bad_runs_value_is_usage_error(capsys):
    code, _, err = run(capsys, "run", "--runs", "0")
    assert code == 2 and "Traceback" not in err


def test_unwritable_json_leaves_nothing(capsys, tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        import os

        if os.access(d, os.W_OK):
            pytest.skip("running as root: permissions are not enforced")
        code, _, err = run(capsys, "run", "--runs", "1", "--json", str(d / "x.json"))
        assert code == 2 and "permission denied" in err
        assert list(d.iterdir()) == []
    finally:
        d.chmod(0o700)


def test_json_into_a_directory_is_refused(capsys, tmp_path):
    code, _, err = run(capsys, "run", "--runs", "1", "--json", str(tmp_path))
    assert code == 2 and "is a directory" in err


def test_corrupt_image_is_a_clear_error(capsys, tmp_path):
    img = tmp_path / "card.img"
    img.write_bytes(b"\x5a" * (4 << 20))
    sc = tmp_path / "mine.toml"
    sc.write_text(f'''
protocol = "espidf"
[espidf]
runs = 1
parts = ["sd_fatfs"]
[sd]
media = "image"
path = "{img}"
''')
    # an existing image is written only with --allow-write on the command line
    code, out, err = run(capsys, "run", str(sc), "-q", "--no-save")
    assert code == 2 and "without --allow-write" in err and img.read_bytes() == b"\x5a" * (4 << 20)
    # formatting is part of the protocol, so a garbage image is simply reformatted: not an error
    code, out, err = run(capsys, "run", str(sc), "-q", "--allow-write")
    assert code == 0, err
    bad = tmp_path / "bad.toml"
    bad.write_text('[sd]\nmedia = "image"\npath = "missing.img"\n')
    code, _, err = run(capsys, "run", str(bad))
    assert code == 2 and "not found" in err


def test_invalid_toml_is_a_clear_error(capsys, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = = not toml")
    code, _, err = run(capsys, "run", str(bad))
    assert code == 2 and "invalid TOML" in err


def test_run_saves_to_the_store_by_default(capsys, tmp_path):
    db = tmp_path / "r.sqlite"
    code, out, err = run(capsys, "run", "--runs", "1", "--db", str(db), "--set", "espidf.parts=['sd_raw']")
    assert code == 0
    assert "saved as run 1" in err
    code, out, _ = run(capsys, "runs", "--db", str(db))
    assert code == 0 and "espidf-esp32-sdmmc4-40mhz" in out
    code, out, err = run(capsys, "run", "--runs", "1", "--db", str(db), "--no-save", "--set", "espidf.parts=['sd_raw']")
    assert code == 0 and "saved" not in err
    from sdbench.store import open_store

    with open_store(str(db)) as store:
        runs = store.list_runs()
        assert len(runs) == 1
        rec = store.load(runs[0].id if hasattr(runs[0], "id") else runs[0].run_id)
        assert rec.rows[0].label == "SD raw write [16 kB label]" and rec.clock == "virtual"


def test_run_on_an_image_needs_allow_write_and_writes_only_in_range(capsys, tmp_path):
    img = tmp_path / "card.img"
    img.write_bytes(b"\xa5" * (48 << 20))
    code, _, err = run(capsys, "run", "--device", str(img), "--runs", "1", "--no-save")
    assert code == 2 and "--allow-write" in err
    assert img.read_bytes()[:4096] == b"\xa5" * 4096, "nothing written when refused"
    off = 8 << 20
    code, out, err = run(capsys, "run", "--device", str(img), "--allow-write", "--yes", "--offset", str(off),
                         "--size", str(32 << 20), "--runs", "1", "--no-save", "-q")
    assert code == 0, err
    assert "SD FATFS (new file): write target size" in out and "SD LittleFS: read tiny size" in out
    data = img.read_bytes()
    assert data[:off] == b"\xa5" * off and data[off + (32 << 20):] == b"\xa5" * (8 << 20)


def test_run_in_a_directory(capsys, tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    code, out, err = run(capsys, "run", "--dir", str(d), "--runs", "2", "--no-save", "-q", "-f", "md")
    assert code == 0, err
    assert "| DIR (new file): write target size |" in out and "| DIR: read tiny size |" in out
    assert list(d.iterdir()) == [], "the protocol removes its files"


def test_extends_with_another_media_kind_replaces_the_sd_table(capsys, tmp_path):
    # the base's simulated card (host, card, bus) means nothing to an image: the child's [sd] stands alone
    sc = tmp_path / "on-image.toml"
    sc.write_text('extends = "esp32s3-spi20mhz"\n[raw]\ntotal_bytes = 65536\n'
                  f'[sd]\nmedia = "image"\npath = "card.img"\nsize_bytes = {8 << 20}\n')
    code, out, err = run(capsys, "run", str(sc), "--no-save", "-q")
    assert code == 0, err
    assert "raw sectors write" in out and (tmp_path / "card.img").stat().st_size == 8 << 20


def test_p2_summary_reads_as_words_with_units(capsys):
    code, out, _ = run(capsys, "run", "p2-spi25-350mhz-pny-16gb", "--runs", "1", "-f", "md", "-q", "--no-save",
                       "--no-range")
    assert code == 0
    summary = out[out.index("| summary | value |"):]
    assert "| SPI byte rate (clock / 8) | 3052 KiB/s |" in summary
    assert "Raw write: 64 sectors per command vs 1 (throughput gain)" in summary and "_" not in summary


def test_simulated_scenarios_side_by_side_give_the_same_records(capsys, tmp_path):
    """-j 2 runs the two scenarios (and their range runs) in processes of their own; the figures, their order
    and the stored runs are those of a run one after the other."""
    from sdbench.records import RunRecord
    from sdbench.store import open_store

    args = ["run", "p2-spi25-350mhz-pny-16gb", "sdfat-bench-esp32-sdmmc", "--runs", "2", "-f", "json", "-q"]
    code1, one, _ = run(capsys, *args, "-j", "1", "--no-save")
    db = tmp_path / "runs.db"
    code2, two, _ = run(capsys, *args, "-j", "2", "--db", str(db))
    assert code1 == code2 == 0
    assert one == two
    doc = json.loads(two)
    assert [r["scenario"] for r in doc["runs"]] == ["p2-spi25-350mhz-pny-16gb", "sdfat-bench-esp32-sdmmc"]
    assert all(r["metadata"]["range"]["members"] >= 2 for r in doc["runs"])  # the ranges ran too
    with open_store(str(db)) as store:
        stored = [store.load(i) for i in (1, 2)]
    assert [s.to_dict()["rows"] for s in stored] == [RunRecord.from_dict(r).to_dict()["rows"] for r in doc["runs"]]


def test_range_runs_in_processes_give_the_same_ranges(capsys):
    args = ["run", "sdfat-bench-esp32-sdmmc", "--runs", "2", "-f", "json", "-q", "--no-save"]
    code1, one, _ = run(capsys, *args, "-j", "1")
    code2, two, _ = run(capsys, *args, "-j", "3")
    assert code1 == code2 == 0 and one == two
    assert json.loads(two)["runs"][0]["rows"][0]["time_ms_range"]


def test_a_refusal_side_by_side_is_one_line_exit_2(capsys, tmp_path):
    """A scenario refused in its worker process is reported as if it had run here: the ones before it are
    printed, then one line and exit 2."""
    tiny = tmp_path / "tiny.toml"
    tiny.write_text('extends = "espidf-esp32-sdmmc4-40mhz"\nname = "tiny-card"\n\n'
                    '[sd]\ncard_params = { capacity_bytes = 8388608 }\n\n'
                    '[espidf]\ntarget_size_bytes = 16777216\n')
    code, out, err = run(capsys, "run", "p2-spi25-350mhz-pny-16gb", str(tiny), "--runs", "1", "--no-save", "-q",
                         "-j", "2", "-f", "md")
    assert code == 2
    assert out.startswith("### p2-spi25-350mhz-pny-16gb") and "tiny-card" not in out
    assert err.strip().splitlines() == ["error: espidf.target_size_bytes = 16777216 B does not fit part sd_raw's "
                                        "device of 8388608 B (it moves the target size from offset 0)"]


@pytest.mark.parametrize("key,what", [("sd.card", "card"), ("sd.host", "host")])
def test_an_empty_profile_file_is_refused_not_taken_as_the_defaults(capsys, tmp_path, key, what):
    empty = tmp_path / "empty.toml"
    empty.write_text("# a file that sets nothing\n")
    code, out, err = run(capsys, "run", "--set", f'{key}="{empty}"', "--no-save")
    assert code == 2 and out == ""
    assert f"{what} profile file {empty}: holds no field" in err and len(err.strip().splitlines()) == 1


def test_several_scenarios_table_the_rows_they_share_side_by_side(capsys, tmp_path):
    """Issue 32: `run A B` was documented as side by side but printed one after the other."""
    slow = tmp_path / "slow.toml"
    slow.write_text('extends = "espidf-esp32-sdmmc4-40mhz"\ndescription = "at 20 MHz"\n[sd.bus]\nclock_hz = 20_000_000\n')
    code, out, err = run(capsys, "run", "espidf-esp32-sdmmc4-40mhz", str(slow), "--runs", "1", "--no-range",
                         "--no-save", "-q", "--set", "espidf.parts=['sd_raw']", "-j", "1")
    assert code == 0, err
    table = out[out.index("### side by side: 2 runs"):]
    head = table.splitlines()[2]
    assert head.startswith("| label | 1: espidf-esp32-sdmmc4-40mhz ms | 1: espidf-esp32-sdmmc4-40mhz MiB/s | 2: ")
    line = next(ln for ln in table.splitlines() if ln.startswith("| SD raw read [64 kB label] |"))
    ms = [float(c) for c in line.strip("|").split("|")[1::2]]
    assert ms[1] > ms[0]   # the 20 MHz bus reads slower
    code, out, _ = run(capsys, "run", "espidf-esp32-sdmmc4-40mhz", "--runs", "1", "--no-range", "--no-save", "-q",
                       "--set", "espidf.parts=['sd_raw']", "-f", "csv")
    assert code == 0 and out.startswith("run,scenario,") and "side by side" not in out


def test_unstable_rows_of_a_measured_run_are_one_warning(capsys):
    """Issue 32: `run --dir` printed 16 "unstable" warnings; one line names how many and the worst."""
    from sdbench.protocols import stability_warnings
    from sdbench.records import make_row

    rows = [make_row(f"row {i}", "read", 512, [1_000_000, 1_000_000 + 400_000 * (i % 3)]) for i in range(6)]
    (w,) = stability_warnings(rows)
    assert w.startswith("4 of 6 rows are unstable (stdev above 10% of the mean; worst: row 2, ")
    assert stability_warnings(rows[:1]) == []


def test_markdown_escapes_a_bar_in_a_label(capsys):
    """A label with | split its row into an extra column when pasted."""
    code, out, err = run(capsys, "run", "esp32s3-spi20mhz", "--set", 'raw.label_prefix="a|b"', "--no-save",
                         "--no-range", "-f", "md")
    assert code == 0, err
    table = [line for line in out.splitlines() if line.startswith("|")]
    assert "| a\\|b write |" in out
    assert len({line.replace("\\|", "").count("|") for line in table}) == 1  # every line has the header's cells
