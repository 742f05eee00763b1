"""The options of a workload: ``[workload]`` and its ``[[workload.steps]]`` (declarations, the ops and the fields each
takes), and the path templates of the steps (``{i}``)."""
from __future__ import annotations

import re
import string
from dataclasses import dataclass

from ...errors import ConfigError
from ...fs.base import normpath
from ...fs.stdio import API_HELP, APIS, StdioOptions
from ...options import opt

#: the filesystems of a stack a workload can run on (Target.fs_factories' keys)
PARTS = ("sd_fatfs", "sd_littlefs", "flash_fatfs", "flash_spiffs", "flash_littlefs", "dir")
OPS = ("format", "mount", "unmount", "mkdir", "create", "open", "write", "append", "read", "seek", "sync",
       "truncate", "rename", "delete", "list")
#: steps without a path: each runs once
VOLUME_OPS = ("format", "mount", "unmount")
#: the step fields each op takes besides op, label and count
FIELDS = {
    "format": (), "mount": (), "unmount": (), "mkdir": ("path",), "create": ("path",),
    "open": ("path", "mode"), "write": ("path", "size_bytes", "chunk_bytes"),
    "append": ("path", "size_bytes", "chunk_bytes"), "read": ("path", "chunk_bytes"),
    "seek": ("path", "offset_bytes", "size_bytes", "chunk_bytes"), "sync": ("path", "size_bytes", "chunk_bytes"),
    "truncate": ("path", "size_bytes"), "rename": ("path", "to"), "delete": ("path",), "list": ("path",),
}
MAX_FILE_BYTES = 256 << 20
MAX_PATH_BYTES = 1024
#: the format of {i}: an optional 0 and width (at most 2 digits), then d, x, X, o or b
_INDEX_FORMAT = re.compile(r"0?\d{0,2}[dxXob]?")
#: repetitions of all steps over all runs at most (the list is checked step by step before it runs)
MAX_CALLS = 10_000_000
#: simulated address of the caller's buffer (ESP32 internal DRAM, 4-byte aligned), as the espidf protocol
DEFAULT_BUF_ADDR = 0x3FFB_0000


@dataclass(frozen=True)
class StepConfig:
    """One step of a workload: ``[[workload.steps]]``."""

    op: str = opt("", choices=OPS, help="what the step does (docs/protocols.md, `workload`)")
    path: str = opt("", help="file or directory; {i} (or {i:04d}) is the repetition's index; list: default /")
    to: str = opt("", help="rename: the new path ({i} as in path)")
    count: int = opt(0, min=0, max=1_000_000,
                     help="repetitions; 0: workload.count if the path has {i}, else 1")
    size_bytes: int = opt(-1, unit="B", min=-1, max=MAX_FILE_BYTES,
                          help="write, append: file size (-1: workload.size_bytes); seek: bytes read; sync: "
                               "bytes appended; truncate: new size")
    chunk_bytes: int = opt(0, unit="B", min=0, max=16 << 20,
                           help="bytes per read() or write() call (0: workload.chunk_bytes)")
    offset_bytes: int = opt(0, unit="B", min=0, max=MAX_FILE_BYTES, help="seek: where to read from")
    mode: str = opt("r", choices=("r", "r+", "w", "a"), help="open: the open mode")
    label: str = opt("", help="the row's label (default e.g. 'write /f{i}.bin x5')")


def _default_steps() -> tuple[StepConfig, ...]:
    return (StepConfig("format"), StepConfig("mount"), StepConfig("write", "/file{i}.bin"),
            StepConfig("read", "/file{i}.bin"), StepConfig("list", "/"), StepConfig("delete", "/file{i}.bin"),
            StepConfig("unmount"))


@dataclass(frozen=True)
class WorkloadConfig:
    """Options of the workload protocol (table ``[workload]``; steps in ``[[workload.steps]]``)."""

    part: str = opt("sd_fatfs", choices=PARTS, help="the filesystem of the stack the steps run on")
    repeat: int = opt(1, min=1, max=100_000, help="runs of the whole step list (--runs sets it); one row per step")
    count: int = opt(1, min=1, max=1_000_000, help="repetitions of steps whose path has {i} and no count")
    size_bytes: int = opt(4096, unit="B", min=0, max=MAX_FILE_BYTES,
                          help="file size of write and append steps without size_bytes")
    chunk_bytes: int = opt(4096, unit="B", min=1, max=16 << 20,
                           help="bytes per read() or write() call of steps without chunk_bytes")
    buf_addr: int = opt(DEFAULT_BUF_ADDR, unit="address", min=0,
                        help="simulated address of the caller's buffer (alignment matters to DMA drivers)")
    api: str = opt("posix", choices=APIS, help=API_HELP)
    stdio: StdioOptions = opt(factory=StdioOptions,
                              help="api = stdio: the FILE buffer (setvbuf) and the C calls of a step's writes and reads")
    steps: tuple[StepConfig, ...] = opt(factory=_default_steps,
                                        help="the steps in order (default: format, mount, write, read, list, "
                                             "delete, unmount)")


# ---- path templates ---------------------------------------------------------------------------------

def check_template(text: str, where: str) -> bool:
    """Check a path with at most the field {i} (with an optional integer format, e.g. {i:04d}); whether it has
    the field."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as e:
        raise ConfigError(f"{where} = {text!r:.60}: {e} (write {{i}} for the index, {{{{ for a brace)") from None
    has_i = False
    for _lit, name, spec, conv in parsed:
        if name is None:
            continue
        has_i = True
        if name != "i" or conv:
            raise ConfigError(f"{where} = {text!r:.60}: only {{i}} may stand in braces (the repetition's index)")
        if not _INDEX_FORMAT.fullmatch(spec):
            raise ConfigError(f"{where} = {text!r:.60}: {{i:{spec}}} is not an integer format (e.g. {{i:04d}})")
    p = expand(text, 0)
    if len(p.encode("utf-8", "replace")) > MAX_PATH_BYTES:
        raise ConfigError(f"{where}: a path of more than {MAX_PATH_BYTES} bytes")
    if ".." in p.split("/"):
        raise ConfigError(f"{where} = {text!r:.60}: '..' is not allowed in a path")
    if "\x00" in p:
        raise ConfigError(f"{where}: a path cannot hold a NUL character")
    return has_i


def expand(text: str, i: int) -> str:
    """A step's path for repetition ``i``, normalised ("" stays "")."""
    return normpath(text.format(i=i)) if text else ""
