"""Importing ESP-IDF perf_benchmark monitor logs."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sdbench.errors import SdbenchError
from sdbench.importers import espidf, parse_text
from sdbench.records import MIB

DATA = Path(__file__).parent / "data"
FULL = (DATA / "espidf_esp32_sdmmc.log").read_text()
SIZES = {"target": 65536, "more than target": 78643, "less than target": 54613, "tiny": 255}


def expected_labels() -> list[str]:
    out = ["SPI Flash raw write", "SPI Flash raw read"]
    for fam in ("SPI FATFS (new file)", "SPI SPIFFS (new file)", "SPI LittleFS (new file)"):
        out += [f"{fam}: {op} {w} size" for w in SIZES for op in ("write", "read")]
    out += [f"SD raw {op} [{k} kB label]" for k in (16, 32, 48, 64) for op in ("write", "read")]
    for fam in ("SD FATFS (new file)", "SD FATFS", "SD LittleFS (new file)", "SD LittleFS"):
        out += [f"{fam}: {op} {w} size" for w in SIZES for op in ("write", "read")]
    return out


def parse(text: str, **kw):
    return espidf.parse(text, name="test.log", **kw)


def test_full_log_gives_every_row():
    [run] = parse(FULL)
    assert len(run.rows) == 66
    assert [r.label for r in run.rows] == expected_labels()
    assert run.source == "imported" and run.protocol == "espidf" and run.clock == "wall"
    for r in run.rows:
        assert r.runs == (1 if "SPIFFS" in r.label else 10), r.label
        assert r.samples_ms == () and r.time_ms_median is None and r.time_ms_stdev is None
        assert r.op == ("write" if " write" in r.label else "read")
        m = re.search(r"(write|read) (.+) size$", r.label)
        if m:
            assert r.bytes == SIZES[m.group(2)] and r.reported_bytes is None
        else:
            assert r.bytes == 65536
        assert r.mib_s == pytest.approx(r.bytes / MIB / (r.time_ms / 1000))
    assert run.warnings == ()


@pytest.mark.parametrize("label,time_ms,runs,nbytes,reported", [
    ("SPI Flash raw write", 712.402, 10, 65536, None),
    ("SPI SPIFFS (new file): write tiny size", 2.041, 1, 255, None),
    ("SPI FATFS (new file): read more than target size", 10.448, 10, 78643, None),
    ("SD raw write [16 kB label]", 7.114, 10, 65536, 16384),
    ("SD raw read [48 kB label]", 3.860, 10, 65536, 49152),
    ("SD raw write [64 kB label]", 5.203, 10, 65536, 65536),
    ("SD FATFS: write more than target size", 12.603, 10, 78643, None),
    ("SD LittleFS (new file): write less than target size", 15.862, 10, 54613, None),
    ("SD LittleFS: read tiny size", 0.087, 10, 255, None),
])
def test_row_figures(label, time_ms, runs, nbytes, reported):
    row = parse(FULL)[0].row(label)
    assert (row.time_ms, row.runs, row.bytes, row.reported_bytes) == (time_ms, runs, nbytes, reported)


def test_card_info_and_log_facts():
    run = parse(FULL)[0]
    assert run.metadata["device"] == {
        "name": "SD64G", "type": "SDHC", "speed": "40.00 MHz (limit: 40.00 MHz)", "freq_khz": 40000,
        "size_mib": 60906, "csd": {"ver": 2, "sector_size": 512, "capacity": 124735488, "read_bl_len": 9},
        "ssr": {"bus_width": 4}}
    s = run.stack
    assert s["target_size_bytes"] == 65536 and s["sd_interface"] == "SDMMC" and s["idf_version"] == "v5.3.1"
    assert s["sd_fat_cluster_bytes"] == 65536 and s["cpu_freq_hz"] == 160_000_000
    assert run.metadata["imported_from"] == "test.log"


def test_scenario_name_is_chosen_by_the_user():
    assert parse(FULL, scenario="espidf-esp32-sdmmc4-40mhz")[0].scenario == "espidf-esp32-sdmmc4-40mhz"
    assert parse(FULL)[0].scenario == espidf.DEFAULT_SCENARIO


def test_plain_crlf_and_timestamped_captures_parse_the_same():
    base = parse(FULL)[0]
    plain = re.sub(r"\x1b\[[0-9;]*m", "", FULL)
    assert parse(plain.replace("\n", "\r\n"))[0].rows == base.rows
    stamped = "\n".join(f"12:00:{i % 60:02d}.123 > {ln}" for i, ln in enumerate(plain.splitlines()))
    assert parse(stamped)[0].rows == base.rows


def test_bits_mode_sizes_are_converted():
    def to_bits(m: re.Match[str]) -> str:
        kb = float(m.group(1)) * 8
        return f"{kb:8.2f} kb {m.group(2)} Mb/s"

    bits = re.sub(r"([\d.]+) kB\s+([\d.]+) MB/s", to_bits, FULL)
    assert " kb " in bits
    run = parse(bits)[0]
    assert [(r.label, r.bytes, r.reported_bytes) for r in run.rows] == \
        [(r.label, r.bytes, r.reported_bytes) for r in parse(FULL)[0].rows]
    assert run.stack["size_units"] == "bits"


def test_only_sd_raw_configured():
    lines = [ln for ln in FULL.splitlines() if not ln.startswith("[") or ln.startswith("[SD raw")]
    run = parse("\n".join(lines))[0]
    assert [r.label for r in run.rows] == [lbl for lbl in expected_labels() if lbl.startswith("SD raw")]


def _cut_after(label_prefix: str, n: int = 1) -> str:
    out, seen = [], 0
    for ln in FULL.splitlines():
        out.append(ln)
        if ln.startswith(f"[{label_prefix}"):
            seen += 1
            if seen == n:
                break
    return "\n".join(out) + "\n"


def _rows_only(text: str) -> str:
    return "".join(ln + "\n" for ln in text.splitlines() if ln.startswith("["))


@pytest.mark.parametrize("text,msg", [
    (_cut_after("SD FATFS: read tiny"), "ends inside a test part"),      # stopped after a complete group
    (_rows_only(_cut_after("SD FATFS: read tiny").replace("[SD FATFS:", "[SD FATFZ:")), "SD FATFS has 0 of 8"),
    (_cut_after("SD FATFS (new file): read more"), "SD FATFS.*of 8 rows"),
    (_cut_after("SD raw read", 3), "SD raw has 6 of 8 rows"),
    (FULL[:FULL.index("[SD LittleFS: read less")] + "[SD LittleFS: read less than target size     ] (10x)   5.0",
     "cut-off|cut off"),
    (FULL.replace("[SD FATFS: write tiny size", "[SD FATFS: write tiny size", 1).replace(
        "(10x)    0.118 ms", "(10x)    0.1x8 ms"), "cut off or garbled"),
])
def test_truncated_logs_are_refused(text, msg):
    with pytest.raises(SdbenchError, match=msg):
        parse(text)


def test_crash_is_refused():
    crashed = _cut_after("SD FATFS (new file): read tiny") + (
        "Guru Meditation Error: Core  0 panic'ed (LoadProhibited). Exception was unhandled.\n")
    with pytest.raises(SdbenchError, match="crashed"):
        parse(crashed)


def test_two_runs_in_one_log():
    runs = parse(FULL + "\n" + FULL)
    assert len(runs) == 2 and runs[0].rows == runs[1].rows


def test_repeated_label_without_restart_is_refused():
    body = FULL.replace("I (547) example: Starting benchmark test with target size 65536 bytes", "")
    with pytest.raises(SdbenchError, match="appears again"):
        parse(body + body)


def test_short_write_becomes_a_warning():
    text = FULL.replace("[SD FATFS: write tiny size", "E (9999) fs_test: Could not write full buffer size. "
                        "Actually wrote bytes: 128.\n[SD FATFS: write tiny size", 1)
    run = parse(text)[0]
    assert any("SD FATFS: write tiny size: short write" in w for w in run.warnings)


def test_no_rows_is_refused():
    with pytest.raises(SdbenchError, match="no perf_benchmark result lines"):
        parse("I (31) boot: ESP-IDF v5.3.1 2nd stage bootloader\nhello\n")


def test_sdbench_espidf_lines_import_back():
    from sdbench.report.export import to_espidf

    run = parse(FULL)[0]
    again = parse(to_espidf(run))[0]
    assert [(r.label, r.runs, r.bytes, r.reported_bytes, r.time_ms) for r in again.rows] == \
        [(r.label, r.runs, r.bytes, r.reported_bytes, r.time_ms) for r in run.rows]


def test_other_target_size():
    text = FULL.replace("target size 65536 bytes", "target size 32768 bytes")
    for kb in (16, 32, 48, 64):
        text = text.replace(f"{kb:8.2f} kB", f"{kb / 2:8.2f} kB")
    text = re.sub(r"\(10x\)\s+([\d.]+) ms\s+76\.80 kB", lambda m: m.group(0).replace("76.80", "38.40"), text)
    text = re.sub(r"53\.33 kB", "26.66 kB", text)
    run = parse(text)[0]
    raw = [r for r in run.rows if r.label.startswith("SD raw")]
    assert [r.label for r in raw][:2] == ["SD raw write [8 kB label]", "SD raw read [8 kB label]"]
    assert all(r.bytes == 32768 for r in raw)
    assert run.row("SD FATFS: write more than target size").bytes == 39321
    assert run.row("SD FATFS: write less than target size").bytes == 27306


def test_format_registry_detects_espidf():
    fmt, runs = parse_text(FULL, name="x.log")
    assert fmt == "espidf" and len(runs[0].rows) == 66
