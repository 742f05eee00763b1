"""What a stack must offer a workload, checked before any I/O: the part, the operations of its filesystem, room
for the files, SPIFFS name lengths, new names in a directory, a format before a blank medium's first mount."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ...errors import ConfigError
from ...fs.base import OPTIONAL_OPS, bare
from .loading import config_of
from .model import check


def preflight(sc: Any, built: Any, capacity: Callable[[str], int | None]) -> None:
    """Refuse, before any I/O, what this stack cannot run: the part is missing, the filesystem cannot do a step,
    the files do not fit, names are too long for SPIFFS, a directory already holds a name the workload creates."""
    cfg = config_of(sc)
    part = cfg.part
    have = built.target.fs_factories
    if part not in have:
        raise ConfigError(f"workload.part = {part}: this stack has no such filesystem (it has: "
                          f"{', '.join(sorted(have)) or 'none'})")
    plan = check(cfg, part)  # again: --dir / --device may have changed the part
    fs = built.target.make_fs(part, cfg.api, cfg.stdio, where="workload.api")
    for k, s in enumerate(cfg.steps):
        if s.op == "mkdir" and not fs.has_directories:
            continue  # skipped with a warning when it runs
        if s.op in OPTIONAL_OPS and not fs.supports(s.op):
            raise ConfigError(f"workload.steps[{k}].op = {s.op}: the {fs.kind} filesystem of part {part} "
                              f"cannot {s.op}")
    root = bare(fs)
    cap = capacity(part)
    holds = f"part {part}'s filesystem holds at most {cap} B"
    if cap is None and part == "dir":
        st = os.statvfs(root.root)  # type: ignore[attr-defined]
        cap = st.f_bavail * st.f_frsize
        holds = f"the directory's filesystem has {cap} B free"
    if cap is not None and plan.peak_bytes > cap:
        raise ConfigError(f"workload: the files hold {plan.peak_bytes} B {plan.peak_where}, but {holds}")
    if fs.kind == "spiffs":
        name_len = getattr(getattr(root, "config", None), "obj_name_len", 32)
        n, path, field = plan.longest_path
        if n > name_len - 1:
            raise ConfigError(f"{field}: {path} is {n} B long; SPIFFS names hold at most {name_len - 1} "
                              f"(flash.spiffs.obj_name_len = {name_len})")
    if part == "dir":
        for p in sorted(plan.created):
            if os.path.lexists(root.host_path(p)):  # type: ignore[attr-defined]
                raise ConfigError(f"workload: {p} exists in {root.root}; the workload only creates new names "  # type: ignore[attr-defined]
                                  f"there (and removes them at the end): move it or change the step's path")
    blank = part.startswith("flash_") or (part != "dir" and built.stack.get("sd", {}).get("media") in ("sim", "memory"))
    if blank:
        for k, s in enumerate(cfg.steps):
            if s.op == "format":
                break
            if s.op == "mount":
                raise ConfigError(f"workload.steps[{k}]: mount of a blank simulated medium; format it first "
                                  f"(add a format step before the mount)")
