"""Options are declared once, as dataclass fields with unit, range and help.

TOML loading, validation, ``--set section.field=value`` overrides and the
reference tables in docs/scenarios.md are all derived from these declarations::

    @dataclass(frozen=True)
    class BusConfig:
        clock_hz: int = opt(40_000_000, unit="Hz", min=100_000, help="bus clock")

A class may list options it no longer takes in a ``RETIRED_OPTIONS`` class
variable (name -> what to write instead); a table naming one is refused with
that text rather than as an unknown option.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import stat
import tomllib
import types
import typing
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError

T = TypeVar("T")

#: integers beyond int64 describe no physical quantity here, and SQLite, numpy and the C libraries cannot hold them
INT_LIMIT = 1 << 63


def opt(default: Any = MISSING, *, unit: str = "", help: str = "", min: float | None = None,
        max: float | None = None, choices: tuple[Any, ...] | None = None, factory: Any = MISSING) -> Any:
    """A declared option: a dataclass field carrying its unit, range and help."""
    meta = {"unit": unit, "help": help, "min": min, "max": max, "choices": choices}
    if factory is not MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class OptionInfo:
    name: str
    type: str
    unit: str
    default: Any
    help: str
    min: float | None
    max: float | None
    choices: tuple[Any, ...] | None


@functools.lru_cache(maxsize=None)
def type_hints(cls: type) -> typing.Mapping[str, Any]:
    """``typing.get_type_hints(cls)`` of an options class, worked out once per class (building a scenario asks
    for the hints of its classes thousands of times in a fit); read-only."""
    return types.MappingProxyType(typing.get_type_hints(cls))


def option_info(cls: type) -> list[OptionInfo]:
    hints = type_hints(cls)
    out = []
    for f in fields(cls):
        m = f.metadata
        default = f.default if f.default is not MISSING else (
            f.default_factory() if f.default_factory is not MISSING else None)  # type: ignore[misc]
        out.append(OptionInfo(f.name, _type_name(hints[f.name]), m.get("unit", ""), default, m.get("help", ""),
                              m.get("min"), m.get("max"), m.get("choices")))
    return out


def _type_name(t: Any) -> str:
    if isinstance(t, type):
        return t.__name__
    return str(t).replace("typing.", "")


def _coerce(value: Any, t: Any, where: str) -> Any:
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if t is Any:
        return value
    if is_dataclass(t) and isinstance(t, type):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        return from_mapping(t, value, where)
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        inner = args[0] if args else Any
        items = [_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        return dict(value)
    # types are exact: a string is never read as a number or a truth value ("42" is a string, 42 a number)
    if t is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {_shown(value)}")
    if t is int:
        n: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        elif isinstance(value, float) and value.is_integer():
            n = int(value)  # 1e6 is TOML's float, and a whole number
        if n is None:
            raise ConfigError(f"{where}: expected an integer, got {_shown(value)}{_unquote_hint(value)}")
        if not -INT_LIMIT < n < INT_LIMIT:
            raise ConfigError(f"{where}: {_shown(value)} is out of range (integers are limited to ±2^63)")
        return n
    if t is float:
        x: float | None = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                x = float(value)
            except OverflowError:  # an integer beyond any float
                x = math.inf
        if x is None:
            raise ConfigError(f"{where}: expected a number, got {_shown(value)}{_unquote_hint(value)}")
        if not math.isfinite(x):
            raise ConfigError(f"{where}: expected a finite number, got {_shown(value)}")
        return x
    if t is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {_shown(value)}")
    return value


def _unquote_hint(value: Any) -> str:
    """For a number written as a string: how to write it as a number."""
    if isinstance(value, str):
        try:
            x = float(value.replace("_", ""))
        except ValueError:
            return ""
        return " (a number is written without quotes)" if math.isfinite(x) else ""
    return ""


def _key(name: str) -> str:
    """A table key as an error line shows it: as written when printable and short, else quoted and cut."""
    return name if name.isprintable() and 0 < len(name) <= 60 else _shown(name)


def _shown(value: Any, limit: int = 60) -> str:
    """A value as an error line shows it: repr, cut to ``limit`` characters (a typo can be megabytes long)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def from_mapping(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build ``cls`` from a TOML table, checking names, types and ranges."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or cls.__name__}: expected a table, got {_shown(data)}")
    hints = type_hints(cls)
    by_name = {f.name: f for f in fields(cls)}  # type: ignore[arg-type]
    # an option a class no longer takes is refused with what to write instead, not as a typo
    retired: dict[str, str] = getattr(cls, "RETIRED_OPTIONS", {})
    old = sorted(set(data) & set(retired))
    if old:
        raise ConfigError(f"{where or cls.__name__}: {old[0]} is no longer an option: {retired[old[0]]}")
    unknown = sorted(set(data) - set(by_name))
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigError(f"unknown option {prefix}{_key(unknown[0])} (known: {', '.join(sorted(by_name))})")
    kwargs = {}
    for name, value in data.items():
        f = by_name[name]
        w = f"{where}.{name}" if where else name
        if isinstance(value, dict) and is_dataclass(hints[name]):
            # a partial nested table changes only what it names: the rest stays this field's default
            # (e.g. [flash.fat] keeps the flash target's 4096-byte sectors), not the nested class's
            value = _merged(to_mapping(_default_of(f)), value)
        v = _coerce(value, hints[name], w)
        # a list option's bounds and choices hold for each of its items
        items = list(enumerate(v)) if isinstance(v, (list, tuple)) else [(None, v)]
        for i, item in items:
            _check_bounds(item, f.metadata, w if i is None else f"{w}[{i}]")
        kwargs[name] = v
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def _default_of(f: Any) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _merged(base: Any, over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base) if isinstance(base, dict) else {}
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _check_bounds(v: Any, m: Any, where: str) -> None:
    unit = f" {m['unit']}" if m.get("unit") else ""
    if m.get("choices") is not None and v not in m["choices"]:
        raise ConfigError(f"{where} = {_shown(v)} is not one of {', '.join(map(str, m['choices']))}")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        if m.get("min") is not None and v < m["min"]:
            raise ConfigError(f"{where} = {v}{unit} is below the minimum {m['min']}{unit}")
        if m.get("max") is not None and v > m["max"]:
            raise ConfigError(f"{where} = {v}{unit} is above the maximum {m['max']}{unit}")


def to_mapping(obj: Any) -> Any:
    """Dataclass -> plain dict (for JSON/TOML and stack metadata)."""
    if is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_mapping(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_mapping(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_mapping(v) for k, v in obj.items()}
    return obj


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` strings to a nested mapping (values parsed as TOML scalars)."""
    out = _deepcopy(data)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. bus.clock_hz=20000000")
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(p.strip() for p in parts):
            raise ConfigError(f"--set {_shown(item)}: expected KEY=VALUE with a dotted key, e.g. bus.clock_hz=20000000")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except (tomllib.TOMLDecodeError, RecursionError):
            value = raw
        node = out
        for i, p in enumerate(parts[:-1]):
            node = node.setdefault(p.strip(), {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {'.'.join(parts[:i + 1])} is not a table")
        node[parts[-1].strip()] = value
    return out


def _deepcopy(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _deepcopy(v) for k, v in d.items()}
    if isinstance(d, list):
        return [_deepcopy(v) for v in d]
    return d


def replace(obj: T, **changes: Any) -> T:
    return dataclasses.replace(obj, **changes)  # type: ignore[type-var]


#: scenario files, profiles, sweep specs and job files are a few kilobytes; anything far larger is not one
MAX_TOML_BYTES = 1 << 20


def toml_string(v: str) -> str:
    """``v`` as a TOML basic string: quotes and backslashes escaped, control characters (which TOML refuses
    raw, DEL included) as \\uXXXX; other characters as they are."""
    out = []
    for c in v:
        if c in '"\\':
            out.append("\\" + c)
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """TOML text as a table; any syntax problem is one ConfigError line naming ``where``."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: invalid TOML: {e}") from None
    except RecursionError:
        raise ConfigError(f"{where}: invalid TOML: nested too deeply") from None


#: a name of something sdbench ships (scenario, profile, sweep): letters, digits and ._- only
_SHIPPED_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")


def is_shipped_name(name: str) -> bool:
    """Whether ``name`` could name a shipped file (and so may be looked up as one, never as a path)."""
    return isinstance(name, str) and _SHIPPED_NAME.fullmatch(name) is not None


def stat_or_none(path: str | PathLike[str], what: str) -> os.stat_result | None:
    """``os.stat`` of a path a user gave: None when nothing is there, ConfigError when the OS cannot use it
    (a name too long, a path through a regular file, no permission to look)."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        shown = str(path) if len(str(path)) <= 120 else str(path)[:117] + "..."
        raise ConfigError(f"cannot use {shown} as {what}: {e.strerror}") from None


def read_toml_file(path: str | PathLike[str], what: str) -> dict[str, Any]:
    """A user's TOML file as a table (``what``: "scenario file", "job file"...), see :func:`read_text_file`."""
    return parse_toml(read_text_file(path, what), str(path))


def read_text_file(path: str | PathLike[str], what: str) -> str:
    """A user's input file as text: a regular UTF-8 file of at most :data:`MAX_TOML_BYTES`, checked
    before it is opened (a FIFO would block, /dev/zero never end); ConfigError otherwise."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {p}") from None
    except OSError as e:
        raise ConfigError(f"cannot read {what} {p}: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{what} {p} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{what} {p} is not a regular file")
    if st.st_size > MAX_TOML_BYTES:
        raise ConfigError(f"{what} {p} is {st.st_size} B: too large (at most {MAX_TOML_BYTES} B)")
    try:
        # without waiting, and checked again once open: a path swapped for a FIFO meanwhile cannot block
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ConfigError(f"{what} {p} is not a regular file")
            raw = f.read(MAX_TOML_BYTES + 1)  # however much it grew since stat
    except OSError as e:
        raise ConfigError(f"cannot read {what} {p}: {e.strerror}") from None
    if len(raw) > MAX_TOML_BYTES:
        raise ConfigError(f"{what} {p} is too large (at most {MAX_TOML_BYTES} B)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read {what} {p}: not UTF-8 text") from None
