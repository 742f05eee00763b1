"""The HTML pages as a reader sees them at 1280 px: a 3-run compare and a 12-run sweep report made by the
commands, a data logger run that falls behind, the power-loss heat map and the probe page of an image.

The figures are checked in matplotlib (every plotted series named by a legend that lies inside its figure, log
axes where values span decades, time ticks with their unit); the pages in headless Chromium (nothing wider
than the window, nothing scrolling sideways).  The browser tests skip when /usr/bin/chromium is missing."""
from __future__ import annotations

import contextlib
import io
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex, to_rgb
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.protocols import run_scenario
from sdbench.report import plots, powerloss_page, probe_page
from sdbench.report.html import ReportRun, render
from sdbench.store import open_store

from conftest import CHROMIUM



def needs_chromium(test):
    return pytest.mark.browser(pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")(test))


#: values whose largest is more than this many times the smallest span decades
DECADES = 100.0
ESPIDF = "espidf-esp32-sdmmc4-40mhz"
#: raw sectors (MiB/s) and LittleFS (KiB/s) in one run: rows three decades apart, in a second
SHORT = ["--set", "espidf.parts=['sd_raw','sd_littlefs']", "--set", "espidf.runs=2"]
SWEEP = """base = "mpy-esp32s3-sdspi"
name = "cache12"
[fixed]
"fs_tests.workloads" = ["mixed"]
"fs_tests.policies" = ["lruc"]
"fs_tests.read_ahead" = [1]
[grid]
"fs_tests.cache_blocks" = [0, 2, 8, 16, 32, 64]
"fs_tests.filesystems" = ["fat", "littlefs"]
"""


# -- what the checks look at ---------------------------------------------------------------------------------

def legends(fig: Figure) -> list[Legend]:
    out = list(fig.legends)
    for ax in fig.axes:
        out += [a for a in ax.get_children() if isinstance(a, Legend)]
    return out


def legend_texts(fig: Figure) -> list[str]:
    return [t.get_text() for leg in legends(fig) for t in leg.get_texts()]


def _line_key(line: Line2D) -> tuple[str, str, str]:
    marker, style = str(line.get_marker()), str(line.get_linestyle())
    return (to_hex(line.get_color()), "" if marker in ("None", "", " ") else marker,
            "" if style in ("None", "", " ") else style)


def series(fig: Figure) -> list[tuple[str, tuple[str, str, str]]]:
    """Every data series drawn in the figure's axes, with its look (colour, marker, line style): lines with
    data, bar groups and error bar plots (their whiskers and caps are part of the series, not series)."""
    out = []
    for ax in fig.axes:
        parts: set[int] = set()
        for c in ax.containers:
            if isinstance(c, ErrorbarContainer):
                data, caps, bars = c.lines
                parts.update(id(x) for x in (data, *caps, *bars) if x is not None)
                if data is not None and len(data.get_xdata()):
                    out.append((str(c.get_label()), _line_key(data)))
            elif isinstance(c, BarContainer) and c.patches:
                parts.update(id(p) for p in c.patches)
                out.append((str(c.get_label()), (to_hex(c.patches[0].get_facecolor()), "", "")))
        out += [(str(line.get_label()), _line_key(line)) for line in ax.get_lines()
                if id(line) not in parts and len(line.get_xdata())]
    return out


def unnamed_series(fig: Figure) -> list[str]:
    """The series no legend names: a legend entry must have the series' colour, and an entry (the same one, or
    one of a second legend drawn in grey) its marker and line style."""
    keys = []
    for leg in legends(fig):
        for h in leg.legend_handles:
            if isinstance(h, Line2D):
                keys.append(_line_key(h))
            elif isinstance(h, Rectangle):
                keys.append((to_hex(h.get_facecolor()), "", ""))
    colours, shapes = {k[0] for k in keys}, {(k[1], k[2]) for k in keys}
    return [f"{label} {k}" for label, k in series(fig)
            if k[0] not in colours or ((k[1] or k[2]) and (k[1], k[2]) not in shapes)]


def legends_cut_off(fig: Figure) -> list[str]:
    """Legends reaching past the figure's edge (drawn, then measured)."""
    FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    box = fig.bbox
    out = []
    for leg in legends(fig):
        e = leg.get_window_extent()
        if e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1:
            out.append(f"{legend_texts(fig)[:2]}: {e.bounds} outside {box.bounds}")
    return out


def spans_decades(values) -> bool:
    v = [x for x in values if x > 0 and math.isfinite(x)]
    return bool(v) and max(v) / min(v) > DECADES


def plotted(ax, axis: str) -> list[float]:
    """The x or y values of the lines (markers, error bar centres) in ``ax``."""
    return [float(v) for line in ax.get_lines() if len(line.get_xdata())
            for v in (line.get_xdata() if axis == "x" else line.get_ydata())]


def tick_texts(axis) -> list[str]:
    fmt_major, fmt_minor = axis.get_major_formatter(), axis.get_minor_formatter()
    lo, hi = sorted(axis.get_view_interval())
    out = [fmt_major(v) for v in axis.get_majorticklocs() if lo <= v <= hi]
    return out + [t for v in axis.get_minorticklocs() if lo <= v <= hi and (t := fmt_minor(v))]


def data_axes(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.has_data()]


def check_figures(figs) -> None:
    """Every series of every figure named by a legend inside the figure."""
    for stem, _, fig in figs:
        assert unnamed_series(fig) == [], stem
        assert legends_cut_off(fig) == [], stem


_LAYOUT = """<script>window.addEventListener('load', () => {
  const doc = document.documentElement;
  const wide = [...document.querySelectorAll('body *')].filter(e =>
      e.getBoundingClientRect().right > doc.clientWidth + 0.5 ||
      (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible'));
  document.body.setAttribute('data-layout', JSON.stringify({page: doc.scrollWidth, client: doc.clientWidth,
      window: window.innerWidth, tables: document.querySelectorAll('table').length,
      wide: wide.map(e => e.tagName.toLowerCase() + '.' + e.className),
      images: [...document.images].map(i => i.naturalWidth > 0 && i.getBoundingClientRect().width > 0)}));
});</script>"""


def chromium_layout(html: Path, tmp_path: Path, width: int = 1280) -> dict:
    """``html`` laid out by headless Chromium ``width`` px wide: the page's scroll width, its client width (the
    window less a scroll bar), the elements reaching past it or scrolling sideways, whether each image drew."""
    probe = tmp_path / f"{html.stem}-layout.html"
    probe.write_text(html.read_text().replace("</body>", _LAYOUT + "</body>"))
    profile = tmp_path / "chromium-profile"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", f"--window-size={width},900", "--virtual-time-budget=5000", "--dump-dom",
           probe.as_uri()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180).stdout
    shutil.rmtree(profile, ignore_errors=True)
    m = re.search(r'data-layout="([^"]*)"', out)
    assert m, "the page did not finish loading in Chromium"
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def assert_fits(html: Path, tmp_path: Path) -> dict:
    got = chromium_layout(html, tmp_path)
    assert got["window"] == 1280
    assert got["page"] <= got["client"] and got["wide"] == [], got
    assert got["images"] and all(got["images"]), got["images"]
    return got


# -- the runs, made by the commands --------------------------------------------------------------------------

def _load(db: Path, ids) -> list[tuple[str, object]]:
    with open_store(db, create=False) as s:
        return [(f"#{i}", s.load(i)) for i in ids]


@pytest.fixture(scope="module")
def compare3(tmp_path_factory):
    """Three runs of one scenario: as shipped, with the bus at 20 MHz, with seed 7; and their HTML report."""
    d = tmp_path_factory.mktemp("compare3")
    db, html = d / "r.sqlite", d / "compare.html"
    for extra in ([], ["--set", "sd.bus.clock_hz=20000000"], ["--seed", "7"]):
        assert main(["run", ESPIDF, *SHORT, *extra, "--db", str(db), "-q"]) == 0
    assert main(["report", "1", "2", "3", "--db", str(db), "--html", str(html)]) == 0
    return html, _load(db, (1, 2, 3))


@pytest.fixture(scope="module")
def sweep12(tmp_path_factory):
    """A 12-run sweep (cache size x filesystem) and its HTML report."""
    d = tmp_path_factory.mktemp("sweep12")
    db, html, spec = d / "r.sqlite", d / "sweep.html", d / "cache12.toml"
    spec.write_text(SWEEP)
    assert main(["sweep", str(spec), "--db", str(db), "-j", "2", "-q"]) == 0
    ids = [str(i) for i in range(1, 13)]
    assert main(["report", *ids, "--db", str(db), "--html", str(html)]) == 0
    return html, _load(db, range(1, 13))


# -- a 3-run compare ---------------------------------------------------------------------------------------

def test_compare_names_every_series_and_each_run_by_what_differs(compare3):
    _, runs = compare3
    figs = plots.figures(runs)
    assert [stem for stem, *_ in figs] == ["rows", "throughput-vs-size", "breakdown-1", "breakdown-2",
                                           "breakdown-3"]
    check_figures(figs)
    rows = figs[0][2]
    names = legend_texts(rows)
    assert names == ["#1 clock_hz=40 MHz, seed 1", "#2 clock_hz=20 MHz, seed 1", "#3 clock_hz=40 MHz, seed 7"]
    # the throughput plot: runs above (in grey), row families beside each panel
    texts = legend_texts(figs[1][2])
    assert texts[:3] == names and "SD LittleFS: write" in texts and "SD LittleFS: read" in texts
    assert "Simulated time breakdown, #2 clock_hz=20 MHz, seed 1" == figs[3][1]


def test_rows_by_run_is_compact_with_its_legend_above_the_rows(compare3):
    _, runs = compare3
    fig = plots.figures(runs)[0][2]
    labels = {lbl for _, rec in runs for lbl in (r.label for r in rec.rows)}
    assert len(labels) == 24
    # 2,800 px for 40 rows before: now about a fifth of an inch a row label (96 px per inch in a browser)
    assert fig.get_size_inches()[1] <= 0.2 * len(labels) + 2.5
    FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    [leg] = legends(fig)
    top = max(ax.get_window_extent().y1 for ax in data_axes(fig))
    assert leg.get_window_extent().y0 >= top                    # above the first row, not at the bottom


def test_log_axes_where_values_span_decades(compare3, sweep12):
    _, runs = compare3
    figs = {stem: fig for stem, _, fig in plots.figures(runs)}
    [rate] = data_axes(figs["rows"])                             # every row moves data: one panel, MiB/s
    assert spans_decades(plotted(rate, "x")) and rate.get_xscale() == "log"
    for ax in data_axes(figs["throughput-vs-size"]):                # x: bytes per call, always log
        assert ax.get_yscale() == ("log" if spans_decades(plotted(ax, "y")) else "linear")
    total, share = data_axes(figs["breakdown-1"])                # ms rows and second rows
    assert spans_decades(plotted(total, "x")) and total.get_xscale() == "log"
    assert share.get_xscale() == "linear" and share.get_xlim() == (0.0, 100.0)
    assert {"1 ms", "10 ms", "100 ms", "1 s"} <= set(tick_texts(total.xaxis))
    # and linear where they do not: the sweep's KiB/s rows
    _, sweep = sweep12
    [rate] = data_axes(plots.figures(sweep)[0][2])
    assert not spans_decades(plotted(rate, "x")) and rate.get_xscale() == "linear"


def test_compare_page_fits_1280px_with_plots_first_and_each_field_once(compare3, tmp_path):
    html, _ = compare3
    text = html.read_text()
    assert text.index("<h2>Plots</h2>") < text.index("<table") < text.index("<h2>Stack differences</h2>")
    diff = text[text.index("<h2>Stack differences</h2>"):]
    assert "sd.bus.clock_hz" in diff and "sd.device.bus.clock_hz" not in diff
    assert "<dt>#2</dt><dd>sd.bus.clock_hz=20 MHz, seed 1</dd>" in text
    assert "<h2>Run #3 <span class=\"muted\">(sd.bus.clock_hz=40 MHz, seed 7)</span></h2>" in text


@needs_chromium
@pytest.mark.parametrize("which", ["compare3", "sweep12"])
def test_reports_fit_1280px_in_headless_chromium(which, request, tmp_path):
    html, runs = request.getfixturevalue(which)
    got = assert_fits(html, tmp_path)
    assert got["tables"] >= 2 + len(runs)                   # comparison, best per metric, a table per run


# -- a 12-run sweep -------------------------------------------------------------------------------------------

def test_sweep_runs_are_named_by_their_parameters_and_drawn_apart(sweep12):
    _, runs = sweep12
    figs = plots.figures(runs)
    check_figures(figs)
    names = legend_texts(figs[0][2])
    assert names[0] == "#1 cache_blocks=0, filesystems=fat" and names[11] == "#12 cache_blocks=64, filesystems=littlefs"
    # twelve runs, twelve looks
    looks = {k for _, k in series(figs[0][2])}
    assert len(looks) == 12 and len({k[0] for k in looks}) == 12


# -- a data logger that falls behind ------------------------------------------------------------------------

def test_logger_timeline_covers_the_whole_run_and_marks_the_longest_stall():
    # 8 s of records at 1 kHz on LittleFS: the writer falls behind and writes until about 25 s
    rec = run_scenario(scen.load("logger-sd-littlefs-pauses", ["logger.duration_s=8", "logger.rate_hz=1000"]))
    stall = rec.metadata["logger"]["longest_stall"]
    assert stall["at_s"] > 8.0
    [(_, _, fig)] = [f for f in plots.figures([("#1", rec)]) if f[0] == "logger-1"]
    assert unnamed_series(fig) == [] and legends_cut_off(fig) == []
    top = fig.axes[0]
    assert top.get_xlim()[1] >= stall["at_s"] + stall["ms"] / 1000
    writes = top.lines[0]
    assert max(writes.get_xdata()) > 8.0
    marked = [ln for ln in top.lines if ln.get_label().startswith("longest stall")]
    assert len(marked) == 1 and marked[0].get_xdata()[0] == pytest.approx(stall["at_s"])
    # the worst write drawn where the run says the stall began (a point is the worst of a few records)
    worst = max(range(len(writes.get_ydata())), key=lambda i: writes.get_ydata()[i])
    assert writes.get_xdata()[worst] == pytest.approx(stall["at_s"], abs=0.1)
    ticks = tick_texts(top.yaxis)
    assert len(ticks) >= 3 and all(re.fullmatch(r"[\d.]+ (µs|ms|s)", t) for t in ticks), ticks


# -- the power-loss heat map ------------------------------------------------------------------------------------

def _luminance(rgb) -> float:
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb[:3]]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def _contrast(a, b) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_heat_map_text_reads_on_every_cell_colour():
    # a cell for every tenth of the colour scale: 0 of 20 cuts unsafe (dark green) to 20 of 20 (dark red)
    cells = [{"fs": "fat", "cache": "none", "bridge": f"b{k}", "cuts": 20, "clean": 20 - 2 * k,
              "lost_unacknowledged": 0, "lost_acknowledged": 2 * k, "corrupted": 0, "needs_repair": 0,
              "unmountable": 0, "throughput_kib_s": 100.0 + k} for k in range(11)]
    fig = powerloss_page.heat_map(cells)
    ax = fig.axes[0]
    [im] = ax.get_images()
    texts = [t for t in ax.texts if "unsafe" in t.get_text()]
    assert len(texts) == 11
    for t in texts:
        c, r = (round(v) for v in t.get_position())
        background = im.cmap(im.norm(im.get_array()[r][c]))
        assert _contrast(to_rgb(t.get_color()), background) >= 4.5, (t.get_text(), background, t.get_color())


# -- the probe page of an image ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def probed_image(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe")
    img, html = d / "card.img", d / "probe.html"
    with open(img, "wb") as f:
        f.truncate(32 << 20)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["probe", str(img), "--allow-write", "--yes", "-f", "json", "--html", str(html), "-q"]) == 0
    return json.loads(buf.getvalue()), html


def test_probe_page_draws_only_what_was_measured_with_times_in_their_unit(probed_image):
    doc, html = probed_image
    assert doc["open_streams"] and not doc["au_spacing"]        # an image keeps every stream open: no spacing test
    fig = probe_page._streams(doc)
    assert len(fig.axes) == 1 and all(ax.has_data() for ax in fig.axes)
    [ax] = fig.axes
    ticks = tick_texts(ax.yaxis)
    assert ticks and all(re.fullmatch(r"[\d.]+ (µs|ms|s)", t) or t == "0" for t in ticks), ticks
    assert unnamed_series(fig) == [] and legends_cut_off(fig) == []
    align = probe_page._alignment(doc)
    assert unnamed_series(align) == [] and all(re.fullmatch(r"[\d.]+ (µs|ms)", t) for t in tick_texts(
        align.axes[0].yaxis))
    assert html.read_text().count("data:image/svg+xml;base64,") == 2


@needs_chromium
def test_probe_and_powerloss_pages_fit_1280px_in_headless_chromium(probed_image, tmp_path):
    _, html = probed_image
    assert_fits(html, tmp_path)
    cells = [{"fs": fs, "cache": cache, "bridge": "none", "cuts": 10, "clean": 10 - k, "lost_unacknowledged": 0,
              "lost_acknowledged": k, "corrupted": 0, "needs_repair": 0, "unmountable": 0,
              "throughput_kib_s": 300.0, "first_loss": {"op": 12, "class": "lost_acknowledged",
                                                       "layer": "block cache (write-back: dirty blocks are "
                                                                "written at sync)"} if k else None}
             for k, (fs, cache) in enumerate((f, c) for f in ("fat", "littlefs") for c in
                                             ("none", "write-through", "write-back"))]
    head = {"scenario": ESPIDF, "section": "sd", "seed": 1, "cuts_per_cell": 10,
            "workload": {"file_bytes": 8192, "chunk_bytes": 1024, "sync_every": 4}}
    page = tmp_path / "pl.html"
    page.write_text(powerloss_page.render(head, cells, title="powerloss"))
    assert_fits(page, tmp_path)


def test_a_report_of_one_run_has_no_comparison_sections():
    rec = run_scenario(scen.load("logger-sd-fat-pauses", ["logger.duration_s=1"]))
    text = render([ReportRun("#1", rec)])
    assert "<h2>Runs</h2>" not in text and "<h2>Comparison</h2>" not in text and "Stack differences" not in text
    assert "<h2>Run #1</h2>" in text and text.count("data:image/svg+xml;base64,") == 3
