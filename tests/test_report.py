"""`sdbench report`: one self-contained HTML file, plot files, and a headless-browser check."""
from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sdbench.cli import main
from sdbench.importers import parse_file
from sdbench.records import RunRecord, make_row
from sdbench.report.html import ReportRun, render
from sdbench.store import ENV_VAR, open_store

from conftest import CHROMIUM, chromium_screenshot

DATA = Path(__file__).parent / "data"


def run(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def simulated(scale: float = 1.0, label_extra: str = "") -> RunRecord:
    rows = []
    for what, size in (("target", 65536), ("more than target", 78643), ("less than target", 54613), ("tiny", 255)):
        for op, ms in (("write", 6.0), ("read", 4.0)):
            t = ms * scale * (size / 65536) ** 0.8
            bd = {"host": 0.1 * t, "bus": 0.55 * t, "card": 0.3 * t, "fs": 0.05 * t}
            rows.append(make_row(f"SD FATFS (new file): {op} {what} size{label_extra}", op, size,
                                 [round(t * 1e6)] * 10, breakdown_ns={k: round(v * 1e6 * 10) for k, v in bd.items()}))
    rows.append(make_row("Mount", "mount", 0, [round(12e6 * scale)] * 10))
    return RunRecord(scenario="espidf-esp32-sdmmc4-40mhz", stack={"sd": {"bus": "sdmmc", "width_bits": 4,
                                                                         "clock_hz": 40_000_000}},
                     clock="virtual", rows=tuple(rows), seed=1, protocol="espidf", source="simulated")


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "r.sqlite"
    monkeypatch.setenv(ENV_VAR, str(path))
    _, [imported] = parse_file(DATA / "espidf_esp32_sdmmc.log")
    with open_store(path) as s:
        s.save_many([imported, simulated(), simulated(0.8)])
    return path


def test_html_is_self_contained_with_tables_metadata_and_plots(capsys, db, tmp_path):
    out_file = tmp_path / "report.html"
    code, out, err = run(capsys, "report", "1", "2", "3", "--html", out_file, "--title", "Cards <A> & B")
    assert code == 0, err
    html = out_file.read_text()
    assert html.startswith("<!DOCTYPE html>") and "<title>Cards &lt;A&gt; &amp; B</title>" in html
    # no network: nothing loaded from elsewhere, no scripts
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "<style>" in html
    uris = re.findall(r'src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(uris) == 4  # rows, throughput vs size, one breakdown per simulated run
    for u in uris:
        ET.fromstring(base64.b64decode(u))  # each is a well-formed SVG
    assert "SD raw write [16 kB label]" in html and "SD64G" in html
    assert "sd.clock_hz" in html and "40000000" in html          # stack metadata
    assert "Comparison" in html and "Best per metric" in html and "#3 speed ×" in html
    assert 'class="num best"' in html


def test_render_escapes_untrusted_text():
    rec = RunRecord(scenario="<script>alert(1)</script>", stack={"x": "<b>"}, clock="wall",
                    rows=(make_row("<img src=x>", "read", 512, [1000, 2000]),))
    html = render([ReportRun("#1", rec)])
    assert "<script>alert" not in html and "<img src=x>" not in html and "&lt;img src=x&gt;" in html


def test_plot_files(capsys, db, tmp_path):
    code, out, err = run(capsys, "report", "2", "3", "--png", tmp_path / "png", "--svg", tmp_path / "svg")
    assert code == 0, err
    pngs = sorted(p.name for p in (tmp_path / "png").iterdir())
    svgs = sorted(p.name for p in (tmp_path / "svg").iterdir())
    assert pngs == ["breakdown-2.png", "breakdown-3.png", "rows.png", "throughput-vs-size.png"]
    assert [s.replace(".svg", ".png") for s in svgs] == pngs
    assert all((tmp_path / "png" / p).read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in pngs)
    ET.parse(tmp_path / "svg" / "rows.svg")


def test_report_errors(capsys, db, tmp_path):
    code, _, err = run(capsys, "report", "1")
    assert code == 2 and "--html FILE" in err
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = run(capsys, "report", "1", "--png", f)
    assert code == 2 and "not a directory" in err
    code, _, err = run(capsys, "report", "42", "--html", tmp_path / "r.html")
    assert code == 2 and "no run 42" in err and not (tmp_path / "r.html").exists()


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")
def test_report_renders_in_headless_chromium(tmp_path):
    html = tmp_path / "report.html"
    html.write_text(render([ReportRun("#1", simulated()), ReportRun("#2", simulated(0.7))]))
    img = chromium_screenshot(html, tmp_path, 4000)
    assert img.shape[0] >= 3000 and img.shape[1] >= 1200
    assert float(img.std()) > 0.05                               # not blank
    assert (img.mean(axis=2) < 0.5).mean() > 0.002               # text and lines drawn
    blue = (img[..., 2] - img[..., 0]) > 0.35                    # the first run's blue, the host's share: plots drawn
    assert blue.sum() > 2000
