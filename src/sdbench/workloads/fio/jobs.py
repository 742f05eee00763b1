"""Job configuration: :class:`JobConfig`, fio-style sizes and TOML job files."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ConfigError
from ...options import from_mapping, opt, read_toml_file
from ...records import MIB

RW_MODES = ("read", "write", "randread", "randwrite", "randrw")

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_ALIASES = {"bs": "bs_bytes", "size": "size_bytes", "offset": "offset_bytes", "runtime": "runtime_s",
            "blocksize": "bs_bytes", "readwrite": "rw"}
_BYTE_FIELDS = ("bs_bytes", "size_bytes", "offset_bytes")


def parse_size(value: int | str, what: str = "size") -> int:
    """``4096``, ``"4k"``, ``"1M"``, ``"64MiB"``, ``"1g"`` -> bytes (k, M, G, T are binary, as in fio)."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ConfigError(f"{what}: {value!r} is not a size (e.g. 4096, 4k, 1M, 64MiB)")
    mult = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    n = float(m.group(1)) * mult
    if not n.is_integer():
        raise ConfigError(f"{what}: {value!r} is not a whole number of bytes")
    return int(n)


@dataclass(frozen=True)
class JobConfig:
    name: str = opt("job", help="job name; rows are labelled '<name> read' / '<name> write'")
    rw: str = opt("read", choices=RW_MODES, help="read, write (sequential), randread, randwrite, randrw")
    bs_bytes: int = opt(4096, unit="B", min=512, max=64 * MIB, help="bytes per I/O")
    size_bytes: int = opt(64 * MIB, unit="B", min=0, help="region size (0: to the end of a device target)")
    offset_bytes: int = opt(0, unit="B", min=0, help="start of the region in the target")
    iodepth: int = opt(1, min=1, max=256, help="I/Os in flight (one thread each, synchronous I/O)")
    direct: bool = opt(True, help="O_DIRECT: bypass the page cache")
    runtime_s: float = opt(0.0, unit="s", min=0.0, help="stop after this long (0: no limit)")
    time_based: bool = opt(False, help="repeat the region until runtime_s has passed")
    loops: int = opt(1, min=1, max=1000, help="run the job this many times")
    rwmixread: int = opt(50, unit="%", min=0, max=100, help="share of reads in randrw")
    verify: str = opt("none", choices=("none", "crc32c"),
                      help="crc32c: stamp written blocks and check every one after the job")
    fsync_on_end: bool = opt(True, help="fdatasync at the end of a job that writes (inside its time)")
    seed: int = opt(0, help="seed for the random order and the data")

    def __post_init__(self) -> None:
        if self.rw not in RW_MODES:
            raise ConfigError(f"rw = {self.rw!r} is not one of {', '.join(RW_MODES)}")
        if self.bs_bytes < 512 or self.bs_bytes % 512:
            raise ConfigError(f"bs = {self.bs_bytes} B must be a multiple of 512 B")
        if self.size_bytes and self.size_bytes < self.bs_bytes:
            raise ConfigError(f"size = {self.size_bytes} B is smaller than one block (bs = {self.bs_bytes} B)")
        if self.offset_bytes % 512:
            raise ConfigError(f"offset = {self.offset_bytes} B must be a multiple of 512 B")
        if self.time_based and self.runtime_s <= 0:
            raise ConfigError("time_based needs runtime_s > 0")
        if self.verify != "none" and not self.writes:
            raise ConfigError(f"job {self.name}: verify needs a job that writes (rw = write, randwrite or randrw)")
        if self.iodepth < 1:
            raise ConfigError("iodepth must be at least 1")

    @property
    def writes(self) -> bool:
        return self.rw in ("write", "randwrite", "randrw")

    @property
    def reads(self) -> bool:
        return self.rw in ("read", "randread", "randrw")

    @property
    def random(self) -> bool:
        return self.rw.startswith("rand")


def job_from_mapping(data: dict[str, Any], where: str = "job") -> JobConfig:
    """A JobConfig from a TOML table or CLI values, accepting fio names (bs, size, offset, runtime)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = _ALIASES.get(k, k)
        if key in out:
            raise ConfigError(f"{where}: {k} given twice")
        if key in _BYTE_FIELDS and isinstance(v, str):
            v = parse_size(v, f"{where}.{k}")
        out[key] = v
    return from_mapping(JobConfig, out, where)


def load_job_file(path: str | os.PathLike[str]) -> list[JobConfig]:
    """Jobs from a TOML file: top-level keys (or a [global] table) are defaults, each other table a job."""
    p = Path(path)
    data = read_toml_file(p, "job file")
    glob = {k: v for k, v in data.items() if not isinstance(v, dict)}
    if isinstance(data.get("global"), dict):
        glob.update(data["global"])
    tables = [(k, v) for k, v in data.items() if isinstance(v, dict) and k != "global"]
    if not tables:
        tables = [(p.stem, {})]
    jobs = []
    for name, table in tables:
        merged = {"name": name, **glob, **table}
        jobs.append(job_from_mapping(merged, f"{p.name}:{name}"))
    return jobs
