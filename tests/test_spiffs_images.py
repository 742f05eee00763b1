"""SPIFFS images made by other implementations (ESP-IDF's spiffsgen.py and the C library).

The images live in the shared data folder next to the repository and are
never copied into it; without that folder these tests skip.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from sdbench.fs.spiffs import SpiffsConfig, SpiffsFileSystem
from sdbench.media import Geometry, MemoryDevice

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "spiffs"
MANIFEST = DATA / "manifest.json"


def _manifest() -> list[dict]:
    if not MANIFEST.is_file():
        return []
    return json.loads(MANIFEST.read_text())["images"]


IMAGES = _manifest()


def _need_data() -> None:
    if not MANIFEST.is_file():
        pytest.skip(f"shared SPIFFS data not found at {DATA}")


def config_for(entry: dict) -> SpiffsConfig:
    c = entry["config"]
    assert c.get("endianness", "little") == "little"
    return SpiffsConfig(page_size_bytes=c["page_size"], block_size_bytes=c["block_size"],
                        obj_name_len=c["obj_name_len"], meta_len=c["meta_len"], use_magic=c["use_magic"],
                        use_magic_len=c["use_magic_len"], obj_id_len=c["obj_id_len"], span_ix_len=c["span_ix_len"],
                        page_ix_len=c["page_ix_len"], block_ix_len=c["block_ix_len"],
                        aligned_obj_ix_tables=c["aligned_obj_ix_tables"])


def load(entry: dict) -> tuple[MemoryDevice, bytes]:
    raw = (DATA / entry["file"]).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == entry["image_sha256"], "shared image changed"
    dev = MemoryDevice(Geometry(sector_size=1, sector_count=len(raw), erase_size=entry["config"]["block_size"],
                                erase_value=0xFF), program_and=True)
    dev.write_bytes(0, raw)
    return dev, raw


def expected_content(f: dict, default_rule: str | None = None) -> bytes | None:
    if "text" in f:
        return f["text"].encode()
    if "seed" in f:
        return random.Random(f["seed"]).randbytes(f["size"])
    if "rule_k" in f:
        k = f["rule_k"]
        return bytes((i * 31 + k * 17 + (i >> 8)) & 0xFF for i in range(f["size"]))
    return None


@pytest.mark.parametrize("entry", IMAGES or [None], ids=[e["file"] for e in IMAGES] or ["no-data"])
def test_image_mounts_lists_and_reads(entry):
    _need_data()
    dev, raw = load(entry)
    fs = SpiffsFileSystem(dev, config_for(entry))
    fs.mount()
    want = sorted(f["path"] for f in entry["files"])
    assert sorted("/" + n for n in fs.listdir("/")) == want
    for f in entry["files"]:
        assert fs.stat(f["path"]).size == f["size"]
        with fs.open(f["path"], "r") as fh:
            data = fh.read()
        assert len(data) == f["size"]
        assert hashlib.sha256(data).hexdigest() == f["sha256"], f["path"]
        rule = expected_content(f)
        if rule is not None:
            assert data == rule
    fs.unmount()
    assert dev.read_bytes(0, len(raw)) == raw        # reading never programs the flash


def _entry(name: str) -> dict:
    _need_data()
    for e in IMAGES:
        if e["file"] == name:
            return e
    pytest.skip(f"{name} not in the manifest")


def test_runtime_image_keeps_working_through_gc():
    """Continue where the C library left off: delete, write, collect garbage, remount."""
    entry = _entry("runtime-gc-2mib.bin")
    dev, _raw = load(entry)
    fs = SpiffsFileSystem(dev, config_for(entry))
    fs.mount()
    files = {f["path"]: f for f in entry["files"]}
    doomed = sorted(files)[::2]
    for p in doomed:
        fs.remove(p)
    rng = random.Random(5)
    new = {}
    erases = fs.core.gc.erases
    # the image has 3 free blocks and ~7300 deleted pages: collection starts at once
    for i in range(12):
        data = rng.randbytes(rng.randrange(10_000, 40_000))
        with fs.open(f"/n{i % 8}.bin", "w") as f:
            f.write(data)
        new[f"/n{i % 8}.bin"] = data
    assert fs.core.gc.erases > erases                 # blocks written by the C library were collected
    fs.unmount()
    fs.mount()
    for p, f in files.items():
        if p in doomed:
            assert not fs.exists(p)
            continue
        with fs.open(p, "r") as fh:
            assert hashlib.sha256(fh.read()).hexdigest() == f["sha256"]
    for p, data in new.items():
        with fs.open(p, "r") as fh:
            assert fh.read() == data


def test_generated_image_can_be_modified():
    entry = _entry("esp-idf-2mib.bin")
    dev, _raw = load(entry)
    fs = SpiffsFileSystem(dev, config_for(entry))
    fs.mount()
    with fs.open("/hello.txt", "a") as f:
        f.write(b"and from sdbench\n")
    with fs.open("/target.bin", "r+") as f:
        f.seek(1000)
        f.write(b"\0" * 10)
    fs.remove("/less.bin")
    fs.unmount()
    fs.mount()
    with fs.open("/hello.txt", "r") as f:
        assert f.read() == b"hello from spiffs\nand from sdbench\n"
    target = bytearray(random.Random(1).randbytes(65536))
    target[1000:1010] = bytes(10)
    with fs.open("/target.bin", "r") as f:
        assert f.read() == bytes(target)
    assert fs.listdir("/") == ["hello.txt", "more.bin", "target.bin", "tiny.bin"]
