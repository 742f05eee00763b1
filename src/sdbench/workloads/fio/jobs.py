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

RW_MODES = ("read", "write", "randread", "randwrite", "rw", "randrw")
#: fio's other spellings of rw values
_RW_VALUES = {"readwrite": "rw", "randreadwrite": "randrw"}

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_ALIASES = {"bs": "bs_bytes", "size": "size_bytes", "offset": "offset_bytes", "runtime": "runtime_s",
            "blocksize": "bs_bytes", "readwrite": "rw"}
_BYTE_FIELDS = ("bs_bytes", "size_bytes", "offset_bytes")
#: ``ioengine`` names (fio's) and the engine that runs each on a real device or file: the synchronous family as a
#: thread per I/O in flight (psync), the asynchronous family on io_uring rings; auto: see AUTO_QUEUED_MIN_IODEPTH
IOENGINES = {"auto": "auto", "psync": "psync", "sync": "psync", "pvsync": "psync", "pvsync2": "psync",
             "io_uring": "io_uring", "libaio": "io_uring", "posixaio": "io_uring"}
#: ``ioengine = "auto"`` queues on a ring from this depth: 4 KiB random reads on a RAM-backed loop device ran as
#: fast or faster on 2 or 4 threads of psync than on a ring; from 8 on the ring wins, by more the deeper the queue
AUTO_QUEUED_MIN_IODEPTH = 8


def parse_size(value: int | str, what: str = "size") -> int:
    """``4096``, ``"4k"``, ``"1M"``, ``"64MiB"``, ``"1g"``, ``"1e6"`` -> bytes (k, M, G, T are binary, as in
    fio; an exponent is decimal)."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ConfigError(f"{what}: {value!r} is not a size (e.g. 4096, 4k, 1M, 64MiB, 1e6)")
    mult = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    n = float(m.group(1)) * mult
    if not n.is_integer():
        raise ConfigError(f"{what}: {value!r} is not a whole number of bytes")
    return int(n)


@dataclass(frozen=True)
class JobConfig:
    name: str = opt("job", help="job name; rows are labelled '<name> read' / '<name> write'")
    rw: str = opt("read", choices=RW_MODES,
                  help="read, write (sequential), randread, randwrite; rw, randrw: reads and writes mixed (rwmixread)")
    bs_bytes: int = opt(4096, unit="B", min=512, max=64 * MIB, help="bytes per I/O")
    size_bytes: int = opt(64 * MIB, unit="B", min=0, help="region size (0: to the end of a device target)")
    offset_bytes: int = opt(0, unit="B", min=0, help="start of the region in the target")
    iodepth: int = opt(1, min=1, max=256, help="I/Os in flight (psync: a thread each; io_uring: queued on rings)")
    ioengine: str = opt("auto", choices=tuple(IOENGINES),
                        help=f"psync (sync, pvsync...), io_uring (libaio, posixaio); auto: io_uring from iodepth "
                             f"{AUTO_QUEUED_MIN_IODEPTH}")
    direct: bool = opt(True, help="O_DIRECT: bypass the page cache")
    runtime_s: float = opt(0.0, unit="s", min=0.0, help="stop after this long (0: no limit)")
    time_based: bool = opt(False, help="repeat the region until runtime_s has passed")
    loops: int = opt(1, min=1, max=1000, help="run the job this many times")
    rwmixread: int = opt(50, unit="%", min=0, max=100, help="share of reads in rw and randrw")
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
            raise ConfigError(f"job {self.name}: verify needs a job that writes (rw = write, randwrite, rw or randrw)")
        if self.iodepth < 1:
            raise ConfigError("iodepth must be at least 1")

    @property
    def writes(self) -> bool:
        return self.rw in ("write", "randwrite", "rw", "randrw")

    @property
    def reads(self) -> bool:
        return self.rw in ("read", "randread", "rw", "randrw")

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
        if key == "rw" and isinstance(v, str):
            v = _RW_VALUES.get(v, v)
        out[key] = v
    return from_mapping(JobConfig, out, where)


#: fio job-file options read from an INI job file, and what they become here ("" = accepted, no effect)
FIO_INI_KEYS = {"rw": "rw", "readwrite": "rw", "bs": "bs_bytes", "blocksize": "bs_bytes", "size": "size_bytes",
                "offset": "offset_bytes", "iodepth": "iodepth", "numjobs": "numjobs", "direct": "direct",
                "runtime": "runtime_s", "time_based": "time_based", "loops": "loops", "rwmixread": "rwmixread",
                "verify": "verify", "randseed": "seed", "ioengine": "ioengine", "filename": "", "group_reporting": "",
                "name": "", "stonewall": "", "thread": ""}
#: fio's engines whose I/O these jobs reproduce (IOENGINES says which engine runs each)
FIO_ENGINES = tuple(n for n in IOENGINES if n != "auto")
_RUNTIME_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h)?\s*$", re.IGNORECASE)


def _fio_runtime(value: str, where: str) -> float:
    m = _RUNTIME_RE.match(value)
    if not m:
        raise ConfigError(f"{where}: runtime {value!r:.30} is not a time (e.g. 30, 30s, 2m)")
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[(m.group(2) or "s").lower()]
    return float(m.group(1)) * scale


def parse_fio_ini(text: str, name: str) -> list[JobConfig]:
    """Jobs from a fio INI job file: ``[global]`` holds defaults, every other section is a job.  The common
    options are read (FIO_INI_KEYS); any other is refused by name rather than ignored.  ``numjobs = N`` runs
    as N threads on one region (fio gives each clone a region of its own)."""
    sections: list[tuple[str, dict[str, str]]] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(";", 1)[0].split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            sections.append((line[1:-1].strip(), {}))
            continue
        if not sections:
            raise ConfigError(f"{name}:{n}: an option before the first [section]")
        key, sep, value = line.partition("=")
        key, value = key.strip().lower(), value.strip()
        if key not in FIO_INI_KEYS:
            raise ConfigError(f"{name}:{n}: fio option {key!r:.30} is not supported (supported: "
                              f"{', '.join(sorted(k for k, v in FIO_INI_KEYS.items() if v))})")
        sections[-1][1][key] = value if sep else "1"
    glob: dict[str, str] = {}
    jobs: list[JobConfig] = []
    for section, opts in sections:
        if section.lower() == "global":
            glob.update(opts)
            continue
        merged = {**glob, **opts}
        where = f"{name}:[{section}]"
        out: dict[str, Any] = {"name": section}
        numjobs = 1
        for key, value in merged.items():
            field = FIO_INI_KEYS[key]
            if not field:
                continue
            try:
                if field in _BYTE_FIELDS:
                    out[field] = parse_size(value, f"{where}.{key}")
                elif field == "runtime_s":
                    out[field] = _fio_runtime(value, where)
                elif field in ("direct", "time_based"):
                    out[field] = value not in ("0", "false")
                elif field == "verify":
                    out[field] = "none" if value in ("0", "none") else value
                elif field in ("rw", "ioengine"):
                    value = value.split(":", 1)[0]
                    out[field] = _RW_VALUES.get(value, value) if field == "rw" else value
                elif field == "numjobs":
                    numjobs = int(value)
                else:
                    out[field] = int(value)
            except ValueError:
                raise ConfigError(f"{where}: {key} = {value!r:.30} is not a whole number") from None
        if numjobs < 1:
            raise ConfigError(f"{where}: numjobs = {numjobs} must be at least 1")
        out["iodepth"] = out.get("iodepth", 1) * numjobs
        jobs.append(from_mapping(JobConfig, out, where))
    if not jobs:
        raise ConfigError(f"{name}: no job section (only [global])")
    return jobs


def load_job_file(path: str | os.PathLike[str]) -> list[JobConfig]:
    """Jobs from a job file: fio's INI format (files named ``*.fio``, ``*.ini``, ``*.job``), or TOML: top-level
    keys (or a [global] table) are defaults, each other table a job."""
    p = Path(path)
    if p.suffix.lower() in (".fio", ".ini", ".job"):
        try:
            return parse_fio_ini(p.read_text(errors="replace"), p.name)
        except OSError as e:
            raise ConfigError(f"cannot read job file {p}: {e.strerror}") from None
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
