"""`sdbench logger`: the data-logger question answered in one decision table."""
from __future__ import annotations

import json
import re

import pytest

from sdbench.cli import main
from sdbench.errors import ConfigError
from sdbench.logger_advisor import Question
from sdbench.logger_advisor.question import sync_fields, sync_name
from sdbench.store import open_store


def run(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_short_sd_question_fills_every_column_and_is_not_silent_about_its_length(capsys, tmp_path):
    db = tmp_path / "r.sqlite"
    code, out, err = run(capsys, "logger", "--fs", "fat", "--cache", "none,write-back", "--duration", "12",
                         "--cuts", "12", "--members", "2", "-j", "1", "--db", str(db), "-f", "json",
                         "--html", str(tmp_path / "l.html"))
    assert code == 0, err
    doc = json.loads(out)
    assert [c["name"] for c in doc["configurations"]] == ["fat / cache none / sync 1 s",
                                                          "fat / cache write-back / sync 1 s"]
    # 12 s of a 51.2 kB/s log cross no 4 MiB allocation unit: said in the document and on stderr
    assert "shorter than the 246 s" in doc["run"]["too_short"] and "warning: --duration 12 s is shorter" in err
    assert any("allocation unit" in n or "shorter" in n for n in doc["notes"])
    for c in doc["configurations"]:
        assert c["keeps_up"] and c["margin_x"] > 1
        for name in ("stall_p99_ms", "stall_p99_9_ms", "stall_max_ms", "buffer_p99_bytes", "buffer_max_bytes"):
            lo, hi = c["figures"][name]["range"]
            assert lo <= c["figures"][name]["value"] <= hi
        assert c["powerloss"]["cuts"] == 12 and c["powerloss"]["workload"]["record_bytes"] == 512
        assert c["wear"]["medium"] == "sd card" and c["wear"]["write_amplification"] >= 1.0
        assert c["life"]["years"] > 0 and len(c["life"]["years_range"]) == 2
        assert c["run_id"] is not None
    wb = doc["configurations"][1]
    assert wb["cache_bytes"] == 64 * 512 and wb["powerloss"]["cache_config"]["write_mode"] == "write-back"
    assert doc["range"]["method"] == "population" and len(doc["range"]["members"]) == 2
    assert "wall_s" not in doc and "workers" not in doc  # the same question gives the same document
    assert doc["endurance"]["estimate"] and doc["endurance"]["cycles_range"] == [1000.0, 3000.0]
    rec = doc["recommendation"]
    assert rec["index"] in (0, 1) and rec["reason"]
    html = (tmp_path / "l.html").read_text()
    assert "Recommended: #" in html and html.count("<figure>") == 4
    assert re.search(r"&middot; \d+\.\d s on \d+ processes</p>", html)  # what the run took here, not blanks
    # the runs are in the store with their figure rows: show and compare read them
    with open_store(db, create=False) as store:
        saved = store.load(doc["configurations"][0]["run_id"])
    labels = [r.label for r in saved.rows]
    assert "logger buffer needed" in labels and "logger write amplification" in labels
    assert saved.metadata["logger_decision"]["configuration"] == "fat / cache none / sync 1 s"
    code, out, err = run(capsys, "compare", str(doc["configurations"][0]["run_id"]),
                         str(doc["configurations"][1]["run_id"]), "--db", str(db), "-f", "md")
    assert code == 0, err
    assert "logger buffer needed" in out and " B" in out


def test_the_flash_question_has_fat_on_wear_levelling_littlefs_and_spiffs(capsys):
    code, out, err = run(capsys, "logger", "--flash", "--duration", "4", "--cuts", "8", "--members", "2", "-j",
                         "1", "--no-save", "-q")
    assert code == 0, err
    head = out.splitlines()[2]
    assert "Keeps up" in head and "Life" in head
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert [r.split(" | ")[1] for r in rows] == ["fat / cache none / sync 1 s", "littlefs / cache none / sync 1 s",
                                                 "spiffs / cache none / sync 1 s"]
    assert "**Recommended: #" in out and "100,000 P/E cycles" in out


@pytest.mark.parametrize("args, message", [
    (["--rate", "0"], "rate_hz = 0"),
    (["--record", "32k", "--ram", "16k"], "larger than --ram"),
    (["--fs", "ntfs"], "ntfs"),
    (["--fs", "spiffs"], "SPIFFS runs on SPI flash only"),
    (["--flash", "--cache", "write-back"], "block caches are modelled in front of SD cards only"),
    (["--sync", "often"], "--sync 'often'"),
    (["--record", "lots"], "not a size"),
    (["--pe-cycles", "3000", "--tbw", "40T"], "not both"),
    (["--clock", "fast"], "--clock"),
    (["--rate", "100", "--jitter", "10"], "jitter_ms = 10 ms is not below the record period"),
    (["espidf-memory"], "needs a simulated medium"),   # a RAM-backed card on the wall clock
    # a configuration the medium cannot hold says which one, and how to leave it out
    (["workload-flash-512k-spiffs"], "configuration fat / cache none / sync 1 s: FAT: "),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    code, out, err = run(capsys, "logger", "--no-save", *args)
    assert code == 2, (out, err)
    assert message in err and len(err.strip().splitlines()) == 1 and not out


def test_sync_policies():
    assert sync_fields("1s") == {"sync_every_ms": 1000.0, "sync_every_records": 0}
    assert sync_fields("250ms") == {"sync_every_ms": 250.0, "sync_every_records": 0}
    assert sync_fields("100") == {"sync_every_ms": 0.0, "sync_every_records": 100}
    assert sync_fields("none") == {"sync_every_ms": 0.0, "sync_every_records": 0}
    assert [sync_name(s) for s in ("1s", "250ms", "100", "none")] == ["sync 1 s", "sync 250 ms", "sync 100 records",
                                                                      "sync at end only"]
    with pytest.raises(ConfigError, match="at least one policy"):
        Question(syncs=())


def test_figure_rows_compare_by_their_figure_lower_is_better():
    from sdbench.compare import card_table, compare_runs
    from sdbench.records import RunRecord
    from sdbench.workloads.logger.figures import _figure

    def rec(buffer: float) -> RunRecord:
        return RunRecord("x", {}, "virtual", (_figure("logger buffer needed", "B", buffer),), protocol="logger",
                         source="simulated")

    cmp = compare_runs([("a", rec(4096)), ("b", rec(1024))])
    assert cmp.lines[0].cells[1].speed_x == pytest.approx(4.0)   # b needs a quarter of a's RAM
    [metric] = card_table([rec(4096), rec(1024)])
    assert metric.unit == "B" and metric.best == 1


@pytest.mark.slow
@pytest.mark.parametrize("flash", [False, True])
def test_the_done_when_examples_fill_every_column(capsys, flash):
    """The issue's two examples with their defaults: every column filled, ranges on buffer and stall, a
    recommendation (their times are measured in docs/logger.md, not here)."""
    code, out, err = run(capsys, "logger", *(["--flash"] if flash else []), "--no-save", "-q", "-f", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["configurations"]) == (3 if flash else 6)
    assert not doc["run"]["too_short"]
    for c in doc["configurations"]:
        assert c["powerloss"]["cuts"] == 200
        assert all(c["figures"][k]["range"] is not None for k in ("stall_p99_ms", "stall_max_ms",
                                                                  "buffer_p99_bytes", "buffer_max_bytes"))
        assert c["wear"]["write_amplification"] > 0 and c["life"]["years"] > 0
    assert doc["recommendation"]["index"] is not None and doc["recommendation"]["reason"]
