"""Reading ``[workload]`` from a scenario: each step's defaults filled in, the list checked against the volume model;
and what the command line changes (``--dir``, ``--device``, ``--runs``)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...errors import ConfigError
from ...options import from_mapping
from .model import check
from .steps import FIELDS, OPS, VOLUME_OPS, StepConfig, WorkloadConfig, check_template


def config_of(sc: Any) -> WorkloadConfig:
    """The scenario's workload options (the defaults when it has none)."""
    cfg = sc.options.get("workload")
    return cfg if cfg is not None else load_options({})


def load_options(table: dict[str, Any]) -> WorkloadConfig:
    """``[workload]`` with its ``[[workload.steps]]``: each step's defaults filled in, the list checked against
    a model of the volume (ConfigError naming the field)."""
    if not isinstance(table, dict):
        raise ConfigError(f"[workload] must be a table, not {table!r:.60}")
    cfg = from_mapping(WorkloadConfig, {k: v for k, v in table.items() if k != "steps"}, "workload")
    if "stdio" in table and "api" not in table:  # an api given as posix (--set) leaves the table unused
        raise ConfigError("workload.stdio: set without workload.api = \"stdio\" (the stdio options apply to that "
                          "api only)")
    if "steps" in table:
        items = table["steps"]
        if not isinstance(items, list) or not items:
            raise ConfigError("workload.steps must be a non-empty list of tables ([[workload.steps]])")
        steps = []
        for k, item in enumerate(items):
            where = f"workload.steps[{k}]"
            if not isinstance(item, dict):
                raise ConfigError(f"{where} must be a table, not {item!r:.60}")
            if "op" not in item:
                raise ConfigError(f"{where}.op: missing (one of {', '.join(OPS)})")
            step = from_mapping(StepConfig, item, where)
            given = set(item) - {"op", "label", "count"}
            extra = sorted(given - set(FIELDS[step.op]))
            if extra:
                takes = ", ".join(FIELDS[step.op]) or "nothing but label"
                raise ConfigError(f"{where}.{extra[0]}: a {step.op} step does not use it (it takes {takes})")
            steps.append(step)
    else:
        steps = list(cfg.steps)
    cfg = replace(cfg, steps=_resolve(cfg, steps))
    check(cfg, cfg.part)
    return cfg


def _resolve(cfg: WorkloadConfig, steps: list[StepConfig]) -> tuple[StepConfig, ...]:
    """The steps with their defaults filled in: count, sizes, chunk, path and label."""
    out: list[StepConfig] = []
    seen: dict[str, int] = {}
    for k, s in enumerate(steps):
        where = f"workload.steps[{k}]"
        path = s.path
        if s.op in VOLUME_OPS:
            if s.count > 1:
                raise ConfigError(f"{where}.count = {s.count}: a {s.op} step runs once")
            count = 1
        else:
            if not path:
                if s.op != "list":
                    raise ConfigError(f"{where}.path: missing (a {s.op} step needs a path)")
                path = "/"
            has_i = check_template(path, f"{where}.path")
            if s.op == "rename":
                if not s.to:
                    raise ConfigError(f"{where}.to: missing (a rename step needs the new path)")
                has_i = check_template(s.to, f"{where}.to") or has_i
            count = s.count or (cfg.count if has_i else 1)
        size = s.size_bytes
        if size < 0:
            size = {"write": cfg.size_bytes, "append": cfg.size_bytes, "seek": s.chunk_bytes or cfg.chunk_bytes,
                    "truncate": 0}.get(s.op, 0)
        chunk = s.chunk_bytes or cfg.chunk_bytes
        label = s.label or _default_label(s.op, path, s.to, count, s.mode, s.offset_bytes)
        if label in seen:
            if s.label:
                raise ConfigError(f"{where}.label: {label!r:.60} is already the label of "
                                  f"workload.steps[{seen[label]}] (each step is one row)")
            n = 2
            while f"{label} #{n}" in seen:
                n += 1
            label = f"{label} #{n}"
        seen[label] = k
        out.append(replace(s, path=path, count=count, size_bytes=size, chunk_bytes=chunk, label=label))
    return tuple(out)


def _default_label(op: str, path: str, to: str, count: int, mode: str, offset: int) -> str:
    if op in VOLUME_OPS:
        return op
    text = {"rename": f"rename {path} -> {to}", "open": f"open {path} ({mode})",
            "seek": f"seek {path} @{offset}"}.get(op, f"{op} {path}")
    return f"{text} x{count}" if count > 1 else text


# ---- what the command line changes -------------------------------------------------------------

def retarget(cfg: WorkloadConfig, kind: str) -> WorkloadConfig:
    """``sdbench run --dir`` runs the steps in the directory; ``--device`` on the device's FAT or LittleFS."""
    if kind == "dir":
        return replace(cfg, part="dir")
    if cfg.part == "flash_spiffs":
        raise ConfigError("workload.part = flash_spiffs: SPIFFS needs NOR flash, a device holds FAT or LittleFS "
                          "(add --set workload.part=sd_littlefs or sd_fatfs)")
    part = {"flash_fatfs": "sd_fatfs", "flash_littlefs": "sd_littlefs", "dir": "sd_fatfs"}.get(cfg.part, cfg.part)
    return replace(cfg, part=part)


def timed_calls(sc: Any) -> int:
    """Timed calls of the scenario's workload (steps the part skips do not count)."""
    cfg = config_of(sc)
    skipped = {"dir": ("format",), "flash_spiffs": ("mkdir",)}.get(cfg.part, ())
    return sum(s.count for s in cfg.steps if s.op not in skipped) * cfg.repeat
