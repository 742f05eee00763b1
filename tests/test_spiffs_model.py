"""Random sequences of file operations against an in-memory model, with remounts in between."""
from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sdbench.errors import FileSystemError
from sdbench.fs.spiffs import SpiffsConfig, SpiffsFileSystem
from sdbench.media import Geometry, MemoryDevice

NAMES = ("/a", "/b.bin", "/c", "/dir/d.txt")
SIZES = st.one_of(st.sampled_from([0, 1, 5, 250, 251, 252, 255, 256, 502, 503, 1000, 25_853, 25_854]),
                  st.integers(0, 12_000))
CHUNKS = st.sampled_from([None, 1, 7, 100, 255, 256, 1000])
BUDGET = 48_000     # live bytes kept well below what SPIFFS reliably uses of the 512 KiB partition

OPS = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(NAMES), SIZES, CHUNKS, st.integers(0, 2**32)),
    st.tuples(st.just("append"), st.sampled_from(NAMES), SIZES, CHUNKS, st.integers(0, 2**32)),
    st.tuples(st.just("overwrite"), st.sampled_from(NAMES), st.floats(0, 1), SIZES, st.integers(0, 2**32)),
    st.tuples(st.just("truncate"), st.sampled_from(NAMES)),
    st.tuples(st.just("read"), st.sampled_from(NAMES), st.floats(0, 1)),
    st.tuples(st.just("remove"), st.sampled_from(NAMES)),
    st.tuples(st.just("remount")),
)


def _write_chunked(f, data: bytes, chunk: int | None) -> None:
    if chunk is None:
        f.write(data)
        return
    # at most 64 calls: without the write cache every small append rewrites the index header
    chunk = max(chunk, -(-len(data) // 64))
    for i in range(0, len(data), chunk):
        f.write(data[i:i + chunk])


def _check(fs: SpiffsFileSystem, model: dict[str, bytes]) -> None:
    assert sorted(fs.listdir("/")) == sorted(p[1:] for p in model)
    for path, data in model.items():
        assert fs.stat(path).size == len(data)
        with fs.open(path, "r") as f:
            assert f.read() == data, path


def run_ops(fs: SpiffsFileSystem, ops: list[tuple]) -> dict[str, bytes]:
    model: dict[str, bytes] = {}
    for op in ops:
        kind = op[0]
        total = sum(len(v) for v in model.values())
        if kind in ("write", "append"):
            _, path, size, chunk, seed = op
            data = random.Random(seed).randbytes(size)
            old = model.get(path, b"")
            new = data if kind == "write" else old + data
            if total - len(old) + len(new) > BUDGET:
                continue
            with fs.open(path, "w" if kind == "write" else "a") as f:
                _write_chunked(f, data, chunk)
            model[path] = new
        elif kind == "overwrite":
            _, path, where, size, seed = op
            if path not in model:
                continue
            old = model[path]
            off = int(where * len(old))
            data = random.Random(seed).randbytes(size)
            new = old[:off] + data + old[off + size:]
            if total - len(old) + len(new) > BUDGET:
                continue
            with fs.open(path, "r+") as f:
                assert f.seek(off) == off
                f.write(data)
                assert f.tell() == off + size
            model[path] = new
        elif kind == "truncate":
            _, path = op
            with fs.open(path, "w"):
                pass
            model[path] = b""
        elif kind == "read":
            _, path, where = op
            if path not in model:
                try:
                    fs.open(path, "r")
                except FileSystemError:
                    continue
                raise AssertionError(f"{path} opened but should not exist")
            data = model[path]
            off = int(where * len(data))
            with fs.open(path, "r") as f:
                f.seek(off)
                assert f.read(len(data) - off + 10) == data[off:]
        elif kind == "remove":
            _, path = op
            if path in model:
                fs.remove(path)
                del model[path]
            else:
                try:
                    fs.remove(path)
                except FileSystemError:
                    continue
                raise AssertionError(f"removing missing {path} succeeded")
        elif kind == "remount":
            fs.unmount()
            fs.mount()
            _check(fs, model)
    return model


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OPS, min_size=1, max_size=40), write_cache=st.booleans())
def test_random_operations_match_model(ops, write_cache):
    dev = MemoryDevice(Geometry(sector_size=1, sector_count=512 << 10, erase_size=4096, erase_value=0xFF),
                       program_and=True)
    fs = SpiffsFileSystem(dev, SpiffsConfig(write_cache=write_cache))
    fs.format()
    fs.mount()
    model = run_ops(fs, ops)
    _check(fs, model)
    fs.unmount()
    fs.mount()
    _check(fs, model)
