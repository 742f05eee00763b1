"""file-roundtrip: write one file in fixed-size calls, read it back and check it; an example protocol plugin.

Each round opens ``path`` for writing, writes ``file_bytes`` in calls of ``chunk_bytes``, closes it,
then reads it back in calls of the same size and compares.  Every write() and read() call is one timed
call; open and close are not timed.  Two rows: ``<fs> write`` and ``<fs> read``, with ``chunk_bytes``
per call.

Where it runs:

* a stack with a block device (``[sd]`` with media sim, memory, image or device): the filesystem named
  by ``filesystem`` (any of ``sdbench list filesystems`` for block media) is formatted over the device
  and mounted, with ``fs_options`` as its options;
* ``sdbench run SCENARIO --dir DIR``: the mounted directory is used as it is (never formatted); the test
  file must not exist there yet, and it is removed afterwards.
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sdbench.errors import ConfigError, SdbenchError
from sdbench.fs.base import FileSystem
from sdbench.fs.registry import filesystem
from sdbench.options import from_mapping, opt
from sdbench.records import Row
from sdbench.runner import Context
from sdbench.workloads.registry import ProtocolSpec

TABLE = "file-roundtrip"


@dataclass(frozen=True)
class RoundTripConfig:
    filesystem: str = opt("flatfs", help="filesystem formatted over the block device (`sdbench list filesystems`); "
                                         "not used with --dir")
    fs_options: dict[str, Any] = opt(factory=dict, help="that filesystem's options (a table of its fields)")
    file_bytes: int = opt(1 << 20, unit="B", min=1, max=256 << 20, help="size of the test file (held in memory)")
    chunk_bytes: int = opt(4096, unit="B", min=1, max=16 << 20,
                           help="bytes per write() and read() call; file_bytes is a multiple of it")
    runs: int = opt(1, min=1, max=1000, help="write+read rounds")
    path: str = opt("/roundtrip.bin", help="the test file")


def load_options(table: dict[str, Any]) -> RoundTripConfig:
    """The options of a scenario's [file-roundtrip] table, checked across fields and against the registry."""
    cfg = from_mapping(RoundTripConfig, table, TABLE)
    if cfg.file_bytes % cfg.chunk_bytes:
        raise ConfigError(f"{TABLE}.file_bytes = {cfg.file_bytes} B is not a multiple of {TABLE}.chunk_bytes = "
                          f"{cfg.chunk_bytes} B")
    spec = filesystem(cfg.filesystem)  # ConfigError naming the known ones
    if spec.medium != "block":
        raise ConfigError(f"{TABLE}.filesystem = {cfg.filesystem!r} needs {spec.medium} media; this protocol runs it "
                          f"over an SD card, image or block device")
    spec.options(cfg.fs_options, f"{TABLE}.fs_options")  # refuse a bad field before any work
    return cfg


def timed_calls(sc: Any) -> int:
    cfg = PROTOCOL.config_of(sc)
    return 2 * cfg.runs * (cfg.file_bytes // cfg.chunk_bytes)


def _stack(sc: Any, built: Any) -> tuple[str, FileSystem | None]:
    """(row label prefix, unformatted filesystem over the block device or None for a directory stack)."""
    cfg = PROTOCOL.config_of(sc)
    device = built.target.sd_device
    if device is not None:
        spec = filesystem(cfg.filesystem)
        return cfg.filesystem, spec.make(device, spec.options(cfg.fs_options, f"{TABLE}.fs_options"))
    if "dir" in built.target.fs_factories:
        return "dir", None
    raise ConfigError(f"scenario {sc.name}: protocol {TABLE} needs an [sd] block device or --dir DIR")


def preflight(sc: Any, built: Any) -> None:
    """Refuse what cannot run, before any I/O."""
    cfg = PROTOCOL.config_of(sc)
    _, fs = _stack(sc, built)  # makes the filesystem object: its own checks of the device run here
    if fs is not None:
        size = fs.device.geometry.size_bytes
        if cfg.file_bytes > size:
            raise ConfigError(f"{TABLE}.file_bytes = {cfg.file_bytes} B does not fit the {size} B device")
    else:
        d = built.target.make_fs("dir")
        if d.exists(cfg.path):
            raise ConfigError(f"{cfg.path} exists in {d.describe().get('path', 'the directory')}: {TABLE} writes "
                              f"only a file it creates (remove it or set {TABLE}.path)")


def run(sc: Any, built: Any, ctx: Context) -> Iterator[Row]:
    cfg = PROTOCOL.config_of(sc)
    name, fs = _stack(sc, built)
    if fs is None:
        fs = built.target.make_fs("dir")  # a mounted directory: used as it is, never formatted
    else:
        fs.format()
        built.metadata["filesystem"] = {"name": name, **fs.describe()}  # goes into the run's metadata
    fs.mount()
    devices = (fs.device,) if fs.device is not None else ()
    data = random.Random(sc.seed).randbytes(cfg.file_bytes)
    n = cfg.chunk_bytes
    w = ctx.row(f"{name} write", "write", n, devices)
    r = ctx.row(f"{name} read", "read", n, devices)
    done = False
    try:
        for _ in range(cfg.runs):
            with fs.open(cfg.path, "w") as f:
                for off in range(0, cfg.file_bytes, n):
                    chunk = data[off:off + n]  # sliced outside the timed call
                    w.time(lambda: f.write(chunk))
            got = bytearray()
            with fs.open(cfg.path, "r") as f:
                for _ in range(cfg.file_bytes // n):
                    got += r.time(lambda: f.read(n))
            if got != data:
                bad = next((i for i, (a, b) in enumerate(zip(got, data)) if a != b), min(len(got), len(data)))
                raise SdbenchError(f"{name}: {cfg.path} read back differs from what was written at byte {bad} "
                                   f"(read {len(got)} B of {len(data)} B)")
        fs.remove(cfg.path)
        done = True
    finally:
        if not done and name == "dir":
            try:  # leave the user's directory as it was, also after a failure
                if fs.exists(cfg.path):
                    fs.remove(cfg.path)
            except SdbenchError:
                pass  # the error that ended the run is the one to report
        fs.unmount()
    yield w.finish()
    yield r.finish()


PROTOCOL = ProtocolSpec(
    "file-roundtrip", "example plugin: write a file in fixed-size calls, read it back and check it",
    TABLE, RoundTripConfig, "runs", frozenset({"sim", "memory", "image", "device", "dir"}),
    frozenset({"block", "filesystem"}),
    run=run, timed_calls=timed_calls, preflight=preflight, load_options=load_options)
