"""Importing SdFat bench output."""
from __future__ import annotations

from pathlib import Path

import pytest

from sdbench.errors import SdbenchError
from sdbench.importers import parse_text, sdfat
from sdbench.records import MIB

TEXT = (Path(__file__).parent / "data" / "sdfat_bench_esp32.txt").read_text()


def test_passes_become_rows():
    fmt, [run] = parse_text(TEXT, name="bench.txt")
    assert fmt == "sdfat" and run.protocol == "sdfat"
    assert [r.label for r in run.rows] == ["sdfat write", "sdfat read"]
    w, r = run.rows
    # as sdbench's own SdFat rows: the whole file per pass, one sample per pass (whole ms)
    assert (w.op, w.bytes, w.runs, w.samples_ms) == ("write", 5_000_000, 2, (1754.0, 1743.0))
    assert r.samples_ms == (1854.0, 1851.0)
    assert w.unit == "KB/s" and w.value == pytest.approx(5_000_000 / 1748.5)
    assert w.mib_s == pytest.approx(5_000_000 / MIB / 1.7485)
    passes = run.metadata["rows"]["sdfat write"]["passes"]
    assert passes[0] == {"kb_s": 2850.63, "max_us": 9120, "min_us": 174, "avg_us": 177}
    assert run.metadata["rows"]["sdfat read"]["calls_per_pass"] == 9765
    assert run.metadata["device"]["product"] == "SC32G" and run.metadata["device"]["name"] == "SC32G"
    assert run.stack["fs_type"] == "FAT32" and run.stack["file_size_bytes"] == 5_000_000
    assert run.warnings == ()


@pytest.mark.parametrize("cut,msg", [
    ("2696.87,1342,186,188\n2701.24,1209,186,188\n\nDone", "Done"),     # stopped during the read passes
    ("\nDone", "Done"),
])
def test_truncated_output_is_refused(cut, msg):
    with pytest.raises(SdbenchError, match=msg):
        sdfat.parse(TEXT.split(cut)[0], name="b.txt")


def test_garbled_line_and_error_are_refused():
    with pytest.raises(SdbenchError, match="cut off or garbled"):
        sdfat.parse(TEXT.replace("2868.62,5204,174,176", "2868.62,52"), name="b.txt")
    with pytest.raises(SdbenchError, match="reported an error"):
        sdfat.parse(TEXT.replace("Starting read test", "error: read failed\nStarting read test"), name="b.txt")
