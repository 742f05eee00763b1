"""Progress of long work (issue 32, "Progress and long work"): a line every few seconds on stderr when it is
not a terminal, bars that keep their label, count and ETA on narrow terminals, counts from the start."""
from __future__ import annotations

import io
import re
import time

import pytest

from sdbench import progress as P
from sdbench.cli import main


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


def test_off_a_terminal_a_line_every_few_seconds_and_one_at_the_end():
    log = io.StringIO()
    p = P.Progress(48, "powerloss x", stream=log, unit="cells", interval_s=0.2)
    p.advance("fat done")          # too soon for a line
    assert log.getvalue() == ""
    time.sleep(0.5)                # nothing reported meanwhile: the lines come all the same
    assert "1/48 cells, fat done, elapsed 0:00, ETA" in log.getvalue()
    p.advance("raw done")
    p.close()
    lines = log.getvalue().splitlines()
    assert 2 <= len(lines) <= 5 and all(ln.startswith("progress: powerloss x, ") for ln in lines), lines
    assert "2/48 cells, raw done" in lines[-1] and "ETA" not in lines[-1]   # the last line: where it ended


def test_fraction_and_unknown_length_work_have_lines_too():
    log = io.StringIO()
    p = P.Progress(None, "probe", stream=log, fraction=True, interval_s=60)
    p._last_line = 0   # a line is due
    p("open units", 0.25)
    q = P.Progress(None, "calibrate", stream=log, interval_s=60)
    q._last_line = 0
    q.say("fitting p2")
    p.close()
    q.close()
    lines = log.getvalue().splitlines()
    assert lines[0] == "progress: probe, 25%, open units, elapsed 0:00, ETA 0:00"
    assert lines[1] == "progress: calibrate, fitting p2, elapsed 0:00"


def test_quiet_prints_nothing():
    log = Terminal()
    p = P.Progress(10, "x", stream=log, enabled=False, interval_s=0)
    for _ in range(10):
        p.advance()
    p.close()
    assert log.getvalue() == ""


@pytest.mark.parametrize("columns", [40, 60, 100, 160])
def test_bars_on_narrow_terminals_keep_label_count_and_eta(columns, monkeypatch):
    """On a narrow terminal the bar showed `408/... ETA 0:00:...`: columns are dropped instead of squeezed."""
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setattr(P, "BAR_DELAY_S", 0.0)
    term = Terminal()
    p = P.Progress(1200, "espidf-esp32-sdmmc4-40mhz", stream=term, unit="calls")
    p.advance("SD raw write [64 kB label]", 408)
    p._bar.refresh()
    p.close()
    line = _plain(term.getvalue()).replace("\r", "\n").strip().splitlines()[-1]
    assert len(line) <= columns and "408/1200" in line and re.search(r"ETA (\d+:\d\d:\d\d|-:--:--)$", line), line
    assert line.startswith("SD raw writ")  # the label is cut (…) before anything else is


def test_the_matrix_bar_starts_at_zero(monkeypatch):
    """The matrix bar started at "36/48 cells 0%": the count is there from the first refresh."""
    monkeypatch.setattr(P, "BAR_DELAY_S", 0.0)
    monkeypatch.setenv("COLUMNS", "100")
    term = Terminal()
    p = P.Progress(48, "powerloss", stream=term, unit="cells")
    p.advance("", 0)
    p._bar.refresh()
    p.close()
    assert "0/48" in _plain(term.getvalue())


def test_a_long_command_off_a_terminal_prints_progress_lines(capsys, monkeypatch):
    """The power-loss matrix printed nothing for minutes in a CI log; now every long command has lines."""
    monkeypatch.setattr(P, "LINE_INTERVAL_S", 0.0)
    assert main(["powerloss", "espidf-esp32-spiflash", "--fs", "littlefs,spiffs", "--cuts", "3", "-j", "1"]) == 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("progress: ")]
    assert lines and "cells" in lines[0] and lines[-1].startswith("progress: powerloss espidf-esp32-spiflash, 2/2")
