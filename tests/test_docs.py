"""The option tables in the docs are generated from the declarations and must not drift from them."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sdbench import docgen
from sdbench.options import opt

ROOT = Path(__file__).resolve().parents[1]
DOCS = docgen.doc_files(ROOT)

#: classes whose fields a user sets in scenario, profile or configuration files: each has a generated table
MUST_BE_DOCUMENTED = {
    "sdbench.workloads.espidf:EspIdfConfig",
    "sdbench.workloads.p2:P2Config",
    "sdbench.workloads.rawseq:RawSeqConfig",
    "sdbench.workloads.fstests:FsTestsConfig",
    "sdbench.media.sim.mpy_sdcard:MpySdDriverConfig",
    "sdbench.workloads.usbmsc:UsbMscProtocolConfig",
    "sdbench.media.usbmsc:UsbMscConfig",
    "sdbench.stack.media:MemoryMediaConfig",
    "sdbench.stack.media:ImageMediaConfig",
    "sdbench.stack.media:DeviceMediaConfig",
    "sdbench.stack.sd:SimSdConfig",
    "sdbench.media.sim.bus:BusConfig",
    "sdbench.media.sim.host:HostProfile",
    "sdbench.media.sim.card:CardProfile",
    "sdbench.stack.flash:SimFlashConfig",
    "sdbench.media.sim.nor:FlashChipProfile",
    "sdbench.media.sim.nor:NorChipConfig",
    "sdbench.media.sim.esp_flash:EspFlashHostProfile",
    "sdbench.media.wl:WlConfig",
    "sdbench.fs.fat:FatConfig",
    "sdbench.fs.littlefs:LittleFsConfig",
    "sdbench.fs.spiffs.config:SpiffsConfig",
    "sdbench.cache.block_cache:CacheConfig",
    "sdbench.stack.bridge:SdBridgeConfig",
    "sdbench.workloads.fio.jobs:JobConfig",
}


def _registered() -> set[str]:
    """Every registered protocol's options and every media kind's: a new one needs its table in the docs."""
    from sdbench.stack import MEDIA
    from sdbench.workloads.registry import protocols

    classes = [spec.config for spec in protocols().values() if spec.config.__module__.startswith("sdbench.")]
    classes += [kind.config for kind in MEDIA.values()]
    return {f"{c.__module__}:{c.__qualname__}" for c in classes}

#: help strings known to be longer than docgen.HELP_MAX; shorten the help= and remove its entry here
LONG_HELP_PENDING = {
    "EspIdfConfig.parts",
    "FsTestsConfig.blockdev_call_cycles",
    "FsTestsConfig.cache",
    "MpySdDriverConfig.poll_cycles",
    "UsbMscProtocolConfig.rows",
}


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _documented() -> list[tuple[Path, str, type, list[str]]]:
    return [(p, spec, docgen.resolve(spec)[0], lines) for p, spec, lines in docgen.documented(DOCS)]


def test_docs_match_the_declarations() -> None:
    stale = docgen.update(DOCS, write=False)
    assert not stale, (f"option tables in {', '.join(str(p.relative_to(ROOT)) for p in stale)} differ from the "
                       f"declarations: run `python -m sdbench.docgen` (and edit help= in the code, not the tables)")


def test_every_declared_field_appears_in_its_table() -> None:
    for path, spec, cls, lines in _documented():
        text = "\n".join(lines)
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in text, f"{path.name}: the table of {spec} lacks the field {f.name}"


def test_the_configuration_classes_are_documented() -> None:
    found = {_name(cls) for _, _, cls, _ in _documented()}
    missing = sorted((MUST_BE_DOCUMENTED | _registered()) - found)
    assert not missing, f"no generated table (<!-- options: ... -->) in docs/ for {', '.join(missing)}"


def test_help_strings_fit_a_table_cell() -> None:
    long = set()
    for _, spec, cls, _ in _documented():
        for f in dataclasses.fields(cls):
            text = f.metadata.get("help", "")
            key = f"{cls.__name__}.{f.name}"
            assert text.strip(), f"{spec}: {f.name} has no help="
            if len(text) > docgen.HELP_MAX:
                long.add(key)
                assert key in LONG_HELP_PENDING, (f"{key}: help= is {len(text)} characters; shorten it to at most "
                                                  f"{docgen.HELP_MAX} (details go into the docs' prose)")
    fixed = sorted(LONG_HELP_PENDING - long)
    assert not fixed, f"help= of {', '.join(fixed)} fits now: remove it from LONG_HELP_PENDING"


def test_check_command_exits_0_on_current_docs() -> None:
    r = subprocess.run([sys.executable, "-m", "sdbench.docgen", "--check", "--root", str(ROOT)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# -- the generator itself ------------------------------------------------------------------------

@dataclass(frozen=True)
class Inner:
    size_bytes: int = opt(512, unit="B", min=512, max=16 << 20, help="block size")
    mode: str = opt("fast", choices=("fast", "slow"), help="how")


@dataclass(frozen=True)
class Sample:
    clock_hz: int = opt(40_000_000, unit="Hz", min=100_000, max=208_000_000, help="bus clock")
    buf_addr: int = opt(0x3FFB0000, unit="address", min=0, help="buffer address")
    ratio: float = opt(0.25, unit="cycles/B", min=0.0, help="cost | per byte")
    label: str = opt("raw", help="rows are '<prefix> write'")
    parts: tuple[str, ...] = opt(factory=lambda: ("a", "b"), help="parts")
    params: dict = opt(factory=dict, help="overrides")
    inner: Inner = opt(factory=lambda: Inner(size_bytes=4096), help="nested")
    on: bool = opt(True, help="switch")


@dataclass(frozen=True)
class Holder:
    sample: Sample = dataclasses.field(default_factory=lambda: Sample(clock_hz=20_000_000))


def test_values_are_shown_as_toml() -> None:
    assert docgen.toml_value(True) == "true"
    assert docgen.toml_value(40_000_000) == "40_000_000"
    assert docgen.toml_value(65536) == "65536"
    assert docgen.toml_value(0x3FFB0000, "address") == "0x3FFB0000"
    assert docgen.toml_value(250.0) == "250.0"
    assert docgen.toml_value("lru") == '"lru"'
    assert docgen.toml_value(("a", "b")) == '["a", "b"]'
    assert docgen.toml_value([[63, 32]]) == "[[63, 32]]"
    assert docgen.toml_value({}) == "{}"
    assert docgen.toml_value(Inner(size_bytes=4096)) == "{size_bytes = 4096}"
    assert docgen.toml_value(Inner()) == "{}"


def test_ranges_carry_the_unit() -> None:
    assert docgen.range_text(100_000, 208_000_000, "Hz") == "100_000..208_000_000 Hz"
    assert docgen.range_text(0, None, "cycles") == ">= 0 cycles"
    assert docgen.range_text(None, 1000, "Hz") == "<= 1000 Hz"
    assert docgen.range_text(512, 16 << 20, "B") == "512 B..16 MiB"
    assert docgen.range_text(2, 255, "B") == "2..255 B"
    assert docgen.range_text(1, 1 << 24, "blocks") == "1..2^24 blocks"
    assert docgen.range_text(0, (1 << 32) - 1, "sectors") == "0..2^32-1 sectors"
    assert docgen.range_text(0.0, 1.0, "") == "0..1"
    assert docgen.range_text(None, None, "B") == ""


def test_table_rows() -> None:
    lines = docgen.render_table(Sample)
    assert lines[:2] == list(docgen.HEADER)
    body = "\n".join(lines[2:])
    assert "| `clock_hz` | Hz | `40_000_000` | 100_000..208_000_000 Hz | bus clock |" in body
    assert "| `buf_addr` | address | `0x3FFB0000` | >= 0x0 | buffer address |" in body
    assert "| `ratio` | cycles/B | `0.25` | >= 0 cycles/B | cost \\| per byte |" in body  # '|' escaped
    assert "rows are '\\<prefix> write'" in body  # not an HTML tag on GitHub
    assert docgen._cell('`"<a>"` or <b>') == '`"<a>"` or \\<b>'  # code spans show text as it is
    assert "| `parts` | | `[\"a\", \"b\"]` | | parts |" in body
    assert "| `params` | | `{}` | table | overrides |" in body
    assert "| `inner` | | `{size_bytes = 4096}` | table of `Inner` | nested |" in body
    assert "| `on` | | `true` | | switch |" in body
    assert len(lines) == 2 + len(dataclasses.fields(Sample))


def test_a_field_marker_takes_the_defaults_of_that_field() -> None:
    cls, instance = docgen.resolve(f"{__name__}:Holder.sample")
    assert cls is Sample and instance == Sample(clock_hz=20_000_000)
    assert "| `clock_hz` | Hz | `20_000_000` |" in "\n".join(docgen.render_table(cls, instance))
    cls, instance = docgen.resolve(f"{__name__}:Holder.sample.inner")
    assert cls is Inner and instance == Inner(size_bytes=4096)


def test_bad_markers_are_refused() -> None:
    for spec in ("nocolon", f"{__name__}:Missing", f"{__name__}:Holder.nothing", f"{__name__}:Sample.on",
                 "sdbench.no_such_module:X", f"{__name__}:Holder"):
        with pytest.raises(docgen.DocgenError):
            docgen.resolve(spec)
    with pytest.raises(docgen.DocgenError, match="not closed"):
        docgen.render_text(f"<!-- options: {__name__}:Inner -->\ntext\n")
    with pytest.raises(docgen.DocgenError, match="not closed"):
        docgen.render_text(f"<!-- options: {__name__}:Inner -->\n<!-- options: {__name__}:Inner -->\n"
                           f"<!-- end options -->\n")
    with pytest.raises(docgen.DocgenError, match="without"):
        docgen.render_text("<!-- end options -->\n")
    with pytest.raises(docgen.DocgenError, match="malformed"):
        docgen.render_text("<!-- options: two words -->\n")


def test_rewrite_keeps_the_prose_and_check_reports_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "page.md"
    spec = "sdbench.media.sim.bus:BusConfig"
    page.write_text(f"# Bus\n\nProse before.\n\n<!-- options: {spec} -->\n| old | table |\n<!-- end options -->\n\n"
                    f"Prose after.\n", encoding="utf-8")
    (docs / "plain.md").write_text("no tables here\n", encoding="utf-8")
    args = ["--root", str(tmp_path)]

    assert docgen.main(args + ["--check"]) == 1
    out = capsys.readouterr()
    assert "docs/page.md" in out.out and "plain.md" not in out.out
    assert "python -m sdbench.docgen" in out.err
    assert "| old | table |" in page.read_text(encoding="utf-8")  # --check changes nothing

    assert docgen.main(args) == 0
    assert "rewrote docs/page.md" in capsys.readouterr().out
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# Bus\n\nProse before.\n\n") and text.endswith("<!-- end options -->\n\nProse after.\n")
    assert "| `clock_hz` | Hz | `40_000_000` |" in text and "| old | table |" not in text
    assert docgen.main(args + ["--check"]) == 0


def test_a_bad_marker_is_an_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "bad.md").write_text("<!-- options: sdbench.options:Nothing -->\n<!-- end options -->\n")
    assert docgen.main(["--check", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Nothing" in err


def test_table_option_prints_one_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert docgen.main(["--table", "sdbench.media.sim.bus:BusConfig"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == list(docgen.HEADER) and out[2].startswith("| `kind` |")
