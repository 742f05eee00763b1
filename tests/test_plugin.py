"""The example plugin (examples/plugin) installed as a user installs it: its entry points alone make
its protocol and filesystem part of sdbench.

The plugin is installed offline into a temporary directory with pip (``--no-deps --no-build-isolation
--no-index --target``) and sdbench runs in subprocesses with that directory on PYTHONPATH, so the
registries find it through the installed dist-info.  Where pip cannot build it here (setuptools older
than 70.1 builds wheels only with the ``wheel`` package), the pip test is skipped with pip's reason and
the others use the same layout written by hand: the package and a dist-info holding the entry points
of its pyproject.toml, which is what the registries read.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import sdbench as sdbench_pkg
from sdbench.errors import ConfigError, FileSystemError
from sdbench.media import Geometry, MemoryDevice
from sdbench.testing import FileSystemSuite

PLUGIN = Path(__file__).resolve().parent.parent / "examples" / "plugin"
PACKAGE = "sdbench_example_plugin"

SIM = """\
description = "file-roundtrip example on a simulated SD card"
protocol = "file-roundtrip"

[sd]
media = "sim"
host = "esp32-sdmmc"
card = "generic-sdhc"

[file-roundtrip]
file_bytes = 131072
chunk_bytes = 4096
runs = 2
"""

IMAGE = """\
protocol = "file-roundtrip"

[sd]
media = "image"
path = "card.img"
size_bytes = 8388608

[file-roundtrip]
file_bytes = 131072
chunk_bytes = 8192
fs_options = { max_files = 8 }
"""


def _plugin_on_path() -> None:
    """Import the plugin from the source tree: using its classes in-process needs no entry points."""
    if str(PLUGIN) not in sys.path:
        sys.path.insert(0, str(PLUGIN))


def _pip_install(src: Path, target: Path) -> str | None:
    """Install the plugin with pip, offline; None when done, else why pip could not."""
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
           "--disable-pip-version-check", "--quiet", "--target", str(target), str(src)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"pip did not run: {e}"
    if proc.returncode == 0 and any(target.glob("sdbench_example_plugin-*.dist-info")):
        return None
    lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    why = next((ln for ln in lines if "error: invalid command" in ln or "No module named" in ln), None)
    return why or (lines[-1] if lines else f"pip exited {proc.returncode}")


def _install_by_hand(src: Path, target: Path) -> None:
    """What installing the wheel lays out: the package, and a dist-info with the metadata and entry points."""
    project = tomllib.loads((src / "pyproject.toml").read_text())["project"]
    shutil.copytree(src / PACKAGE, target / PACKAGE)
    info = target / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = [f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
              for group, eps in project["entry-points"].items()]
    (info / "entry_points.txt").write_text("\n".join(groups))


@pytest.fixture(scope="module")
def install(tmp_path_factory) -> tuple[Path, str | None]:
    """(directory the plugin is installed in, why pip could not install it or None)."""
    tmp = tmp_path_factory.mktemp("plugin")
    src = tmp / "src"  # pip builds in the source tree: a copy keeps examples/plugin clean
    shutil.copytree(PLUGIN, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = tmp / "site"
    why = _pip_install(src, site)
    if why is not None:
        shutil.rmtree(site, ignore_errors=True)
        site.mkdir()
        _install_by_hand(src, site)
    return site, why


def sdbench(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``sdbench ARGS`` in a subprocess that sees the installed plugin (and this sdbench, however it is installed)."""
    path = [str(site), str(Path(sdbench_pkg.__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p),
           "SDBENCH_DB": str(site.parent / "results.sqlite")}
    return subprocess.run([sys.executable, "-m", "sdbench", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def scenario(tmp: Path, name: str, text: str) -> Path:
    p = tmp / f"{name}.toml"
    p.write_text(text)
    return p


def test_pip_installs_the_plugin_offline(install):
    site, why = install
    if why is not None:
        pytest.skip(f"pip cannot build the plugin offline here: {why}")
    eps = next(site.glob("sdbench_example_plugin-*.dist-info")) / "entry_points.txt"
    assert "file-roundtrip = sdbench_example_plugin:PROTOCOL" in eps.read_text()


def test_list_shows_the_plugin(install):
    site, _ = install
    p = sdbench(site, "list", "protocols")
    assert p.returncode == 0, p.stderr
    row = next(ln for ln in p.stdout.splitlines() if ln.startswith("| file-roundtrip |"))
    assert "device, dir, image, memory, sim |" in row and "file-roundtrip.runs" in row
    f = sdbench(site, "list", "filesystems")
    assert f.returncode == 0, f.stderr
    assert any(ln.startswith("| flatfs | block | FlatFsConfig |") for ln in f.stdout.splitlines()), f.stdout


def _rows(out: str, prefix: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith(f"| {prefix} ")]


def test_run_on_a_simulated_card_is_deterministic(install, tmp_path):
    site, _ = install
    sc = scenario(tmp_path, "sim", SIM)
    first = sdbench(site, "run", str(sc), "-q", "--no-save")
    assert first.returncode == 0, first.stderr
    rows = _rows(first.stdout, "flatfs")
    assert [r.split("|")[1].strip() for r in rows] == ["flatfs write", "flatfs read"], first.stdout
    assert all("| 64 |" in r for r in rows), rows  # 2 runs x 32 calls of 4 KiB
    again = sdbench(site, "run", str(sc), "-q", "--no-save")
    assert again.returncode == 0 and again.stdout == first.stdout


def test_run_on_a_new_image_file(install, tmp_path):
    site, _ = install
    sc = scenario(tmp_path, "image", IMAGE)
    p = sdbench(site, "run", str(sc), "-q", "--no-save")
    assert p.returncode == 0, p.stderr
    assert len(_rows(p.stdout, "flatfs")) == 2, p.stdout
    assert (tmp_path / "card.img").stat().st_size == 8 << 20


def test_run_in_a_directory_never_formats_it(install, tmp_path):
    site, _ = install
    sc = scenario(tmp_path, "sim", SIM)
    d = tmp_path / "mnt"
    d.mkdir()
    (d / "keep.txt").write_text("the user's file")
    p = sdbench(site, "run", str(sc), "--dir", str(d), "-q", "--no-save")
    assert p.returncode == 0, p.stderr
    assert [r.split("|")[1].strip() for r in _rows(p.stdout, "dir")] == ["dir write", "dir read"], p.stdout
    assert sorted(x.name for x in d.iterdir()) == ["keep.txt"]  # its own file removed, the user's kept
    assert (d / "keep.txt").read_text() == "the user's file"


def test_a_bad_option_is_one_error_line(install, tmp_path):
    site, _ = install
    sc = scenario(tmp_path, "bad", SIM.replace("chunk_bytes = 4096", "chunk_bytes = 0"))
    p = sdbench(site, "run", str(sc), "-q", "--no-save")
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr == "error: file-roundtrip.chunk_bytes = 0 B is below the minimum 1 B\n" and p.stdout == ""


@pytest.mark.parametrize("table,msg", [
    ({"filesystem": "nosuch"}, "unknown filesystem 'nosuch' (known: fat, littlefs, spiffs"),
    ({"filesystem": "spiffs"}, "file-roundtrip.filesystem = 'spiffs' needs flash media"),
    ({"filesystem": "fat", "fs_options": {"n_fats": 3}}, "file-roundtrip.fs_options.n_fats = 3 is above"),
    ({"file_bytes": 10000, "chunk_bytes": 3000}, "file_bytes = 10000 B is not a multiple of"),
])
def test_options_are_checked_across_fields_and_against_the_registry(table, msg):
    _plugin_on_path()
    from sdbench_example_plugin.roundtrip import load_options

    with pytest.raises(ConfigError) as e:
        load_options(table)
    assert msg in str(e.value)


# ---- flatfs passes the shared FileSystem conformance suite ---------------------------------------------

def _flatfs(device, **options):
    _plugin_on_path()
    from sdbench_example_plugin.flatfs import FlatFs, FlatFsConfig

    return FlatFs(device, FlatFsConfig(**options))


class TestFlatFs(FileSystemSuite):
    def make_fs(self):
        return _flatfs(MemoryDevice.of_size(4 << 20))


class TestFlatFs4096ByteSectorsFewFiles(FileSystemSuite):
    def make_fs(self):
        return _flatfs(MemoryDevice(Geometry(sector_size=4096, sector_count=256)), max_files=8, name_bytes=12)


def test_flatfs_moves_a_growing_file_past_its_neighbour_and_reuses_space():
    fs = _flatfs(MemoryDevice.of_size(1 << 20), max_files=4)
    fs.format()
    fs.mount()
    with fs.open("/a", "w") as a, fs.open("/b", "w") as b:
        a.write(b"A" * 1000)
        b.write(b"B" * 1000)
        a.write(b"a" * 3000)  # /b is in the way: /a moves behind it
    with fs.open("/c", "w") as c:
        c.write(b"C" * 1000)  # first fit: the run /a left
    fs.unmount()
    fs.mount()
    with fs.open("/a") as a, fs.open("/b") as b, fs.open("/c") as c:
        assert a.read() == b"A" * 1000 + b"a" * 3000 and b.read() == b"B" * 1000 and c.read() == b"C" * 1000
    assert fs._files["c"].start == fs.data_start  # noqa: SLF001 - the layout is what this checks
    with pytest.raises(FileSystemError, match="file table is full"):
        for name in ("d", "e"):
            fs.open("/" + name, "w").close()
    fs.unmount()
