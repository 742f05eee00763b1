"""Reference tables of declared options, generated into the docs.

Options are declared once (:func:`sdbench.options.opt`); the tables that list
them in the docs are written from those declarations, between marker
comments::

    <!-- options: sdbench.media.sim.host:HostProfile -->
    | field | unit | default | range | meaning |
    ...
    <!-- end options -->

The begin marker names a class by module path (``module:Class``), or a field
of a class whose type is an options class (``module:Class.field``): then the
table lists that type's fields with the defaults the field starts from, e.g.
``sdbench.scenarios:Scenario.sd_fat`` shows FAT with the scenario's own
defaults.

``python -m sdbench.docgen`` rewrites the regions of ``docs/*.md`` and
``README.md`` in place; ``--check`` changes nothing and exits 1 naming the
files whose tables differ from the declarations; ``--table SPEC`` prints one
table.  A table's "meaning" column is the field's ``help=``: a better wording
goes into the declaration, never into the Markdown.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import re
import sys
import typing
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError

BEGIN_RE = re.compile(r"^<!-- options: (?P<spec>\S+) -->$")
END = "<!-- end options -->"
HEADER = ("| field | unit | default | range | meaning |", "|---|---|---|---|---|")
#: a help string longer than this makes a table cell that wraps badly in a terminal: shorten it
HELP_MAX = 120


class DocgenError(ConfigError):
    """A marker names no options class, or a region is not closed."""


@dataclass(frozen=True)
class Row:
    """One declared option as a table shows it."""

    name: str
    unit: str
    default: str
    range: str
    help: str


@dataclass(frozen=True)
class Region:
    """A generated region of a docs file: lines ``begin`` (the marker) to ``end`` (the end marker)."""

    spec: str
    begin: int
    end: int


# -- resolving a marker --------------------------------------------------------------------------

def resolve(spec: str) -> tuple[type, Any]:
    """``module:Class`` or ``module:Class.field[.field...]`` -> (options class, instance with the defaults or None)."""
    module, sep, path = spec.partition(":")
    if not sep or not module or not path:
        raise DocgenError(f"options marker {spec!r}: expected module:Class or module:Class.field")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise DocgenError(f"options marker {spec!r}: cannot import {module}: {e}") from None
    names = path.split(".")
    obj = getattr(mod, names[0], None)
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise DocgenError(f"options marker {spec!r}: {module} has no dataclass {names[0]}")
    cls: type = obj
    instance: Any = None
    for name in names[1:]:
        by_name = {f.name: f for f in dataclasses.fields(cls)}
        if name not in by_name:
            raise DocgenError(f"options marker {spec!r}: {cls.__name__} has no field {name}")
        f = by_name[name]
        t = typing.get_type_hints(cls)[name]
        if not (isinstance(t, type) and dataclasses.is_dataclass(t)):
            raise DocgenError(f"options marker {spec!r}: {cls.__name__}.{name} is not an options class")
        if instance is not None:
            instance = getattr(instance, name)
        elif f.default is not MISSING:
            instance = f.default
        elif f.default_factory is not MISSING:
            instance = f.default_factory()
        cls = t
    if not any("unit" in f.metadata for f in dataclasses.fields(cls)):
        raise DocgenError(f"options marker {spec!r}: {cls.__name__} declares no options (fields made with opt())")
    return cls, instance


# -- rendering -----------------------------------------------------------------------------------

_BINARY = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def _int(n: int) -> str:
    """An integer as TOML writes it, digits grouped from six on (``40_000_000``, ``65536``)."""
    return f"{n:_}" if abs(n) >= 100_000 else str(n)


def _float(x: float) -> str:
    if x.is_integer() and abs(x) < 1e15:
        return _int(int(x)) + ".0"
    return repr(x)


def toml_value(value: Any, unit: str = "") -> str:
    """``value`` as a user writes it in a TOML file (addresses in hex)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if unit == "address":
            return f"0x{value:X}" if value >= 0 else f"-0x{-value:X}"
        return _int(value)
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v, unit) for v in value) + "]"
    if isinstance(value, dict):
        return _inline_table({str(k): toml_value(v) for k, v in value.items()})
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _inline_table(_changed_fields(value))
    return str(value)


def _inline_table(items: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k} = {v}" for k, v in items.items()) + "}" if items else "{}"


def _changed_fields(obj: Any) -> dict[str, str]:
    """The fields of a nested options value that differ from its class's defaults (all, if it has no defaults)."""
    try:
        base = type(obj)()
    except Exception:  # no defaults, or defaults its checks refuse: show every field
        base = None
    out = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if base is None or v != getattr(base, f.name):
            out[f.name] = toml_value(v, f.metadata.get("unit", ""))
    return out


def _bound(x: float, unit: str) -> str:
    """A range bound: bytes in binary units where exact, large powers of two as 2^k."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        x = int(x)
    if isinstance(x, float):
        return f"{x:g}"
    if unit == "address":
        return toml_value(x, unit)
    if unit == "B" and x > 0:
        for size, name in _BINARY:
            if x % size == 0:
                return f"{x // size} {name}"
    if x >= 1 << 20:
        k = x.bit_length()
        if x == 1 << (k - 1):
            return f"2^{k - 1}"
        if x == (1 << k) - 1:
            return f"2^{k}-1"
    return _int(x)


def range_text(min_: float | None, max_: float | None, unit: str) -> str:
    """``min..max unit``, or ``>= min unit`` / ``<= max unit`` when one side is open."""
    if min_ is None and max_ is None:
        return ""
    lo = _bound(min_, unit) if min_ is not None else ""
    hi = _bound(max_, unit) if max_ is not None else ""
    suffix = f" {unit}" if unit and unit != "address" else ""
    if unit == "B" and (lo.endswith("iB") or hi.endswith("iB")):  # then each bound carries its own unit
        lo, hi = (b if not b or b.endswith("iB") else f"{b} B" for b in (lo, hi))
        suffix = ""
    if min_ is not None and max_ is not None:
        return f"{lo}..{hi}{suffix}"
    return f">= {lo}{suffix}" if min_ is not None else f"<= {hi}{suffix}"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: ``|`` escaped everywhere, and outside code spans ``<``
    before a letter (GitHub would take ``<prefix>`` for an HTML tag)."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    for i in range(0, len(parts), 2):  # even pieces lie outside code spans
        parts[i] = re.sub(r"<(?=[A-Za-z/!])", r"\\<", parts[i])
    return "`".join(parts)


def _code(text: str) -> str:
    return f"`{text}`" if text else ""


def rows(cls: type, instance: Any = None) -> list[Row]:
    """The table rows of ``cls``'s declared options; defaults from ``instance`` when given."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        m = f.metadata
        unit = m.get("unit", "")
        if instance is not None:
            default = toml_value(getattr(instance, f.name), unit)
        elif f.default is not MISSING:
            default = toml_value(f.default, unit)
        elif f.default_factory is not MISSING:
            default = toml_value(f.default_factory(), unit)
        else:
            default = ""
        t = hints[f.name]
        if m.get("choices") is not None:
            rng = ", ".join(_code(toml_value(c, unit)) for c in m["choices"])
        elif isinstance(t, type) and dataclasses.is_dataclass(t):
            rng = f"table of `{t.__name__}`"
        elif typing.get_origin(t) is dict or t is dict:
            rng = "table"
        else:
            rng = range_text(m.get("min"), m.get("max"), unit)
        out.append(Row(f.name, unit, default, rng, m.get("help", "")))
    return out


def render_table(cls: type, instance: Any = None) -> list[str]:
    """The Markdown table of ``cls``'s declared options, one string per line."""
    lines = list(HEADER)
    for r in rows(cls, instance):
        cells = (_code(r.name), _cell(r.unit), _cell(_code(r.default)), _cell(r.range), _cell(r.help))
        lines.append("|" + "|".join(f" {c} " if c else " " for c in cells) + "|")
    return lines


# -- docs files ----------------------------------------------------------------------------------

def regions(lines: Sequence[str], where: str = "") -> Iterator[Region]:
    """The generated regions of a file's lines, checked for pairing."""
    begin: tuple[int, str] | None = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        m = BEGIN_RE.match(stripped)
        if m:
            if begin is not None:
                raise DocgenError(f"{where}:{begin[0] + 1}: options region not closed before line {i + 1} "
                                  f"(expected {END})")
            begin = (i, m.group("spec"))
        elif stripped == END:
            if begin is None:
                raise DocgenError(f"{where}:{i + 1}: {END} without an options marker")
            yield Region(begin[1], begin[0], i)
            begin = None
        elif stripped.startswith("<!-- options:"):
            raise DocgenError(f"{where}:{i + 1}: malformed marker {stripped!r} "
                              f"(expected <!-- options: module:Class -->)")
    if begin is not None:
        raise DocgenError(f"{where}:{begin[0] + 1}: options region not closed (expected {END})")


def render_text(text: str, where: str = "") -> str:
    """``text`` with every generated region rewritten from the declarations."""
    lines = text.split("\n")
    out: list[str] = []
    pos = 0
    for reg in list(regions(lines, where)):
        cls, instance = resolve(reg.spec)
        out.extend(lines[pos:reg.begin + 1])
        out.extend(render_table(cls, instance))
        pos = reg.end
    out.extend(lines[pos:])
    return "\n".join(out)


def default_root() -> Path:
    """The source tree's root (the folder holding ``docs/``), else the working directory."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "docs").is_dir() else Path.cwd()


def doc_files(root: Path) -> list[Path]:
    files = sorted((root / "docs").glob("*.md"))
    readme = root / "README.md"
    return files + [readme] if readme.is_file() else files


def documented(paths: Sequence[Path]) -> list[tuple[Path, str, list[str]]]:
    """(file, marker spec, lines of its region) for every generated region in ``paths``."""
    out = []
    for p in paths:
        lines = p.read_text(encoding="utf-8").split("\n")
        for reg in regions(lines, str(p)):
            out.append((p, reg.spec, lines[reg.begin + 1:reg.end]))
    return out


def update(paths: Sequence[Path], write: bool) -> list[Path]:
    """The files whose regions differ from the declarations; rewritten when ``write``."""
    stale = []
    for p in paths:
        text = p.read_text(encoding="utf-8")
        new = render_text(text, str(p))
        if new != text:
            stale.append(p)
            if write:
                p.write_text(new, encoding="utf-8")
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sdbench.docgen",
                                 description="Write the option tables in the docs from the option declarations.")
    ap.add_argument("files", nargs="*", type=Path, help="Markdown files (default: docs/*.md and README.md)")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    ap.add_argument("--root", type=Path, help="source tree root (default: this package's)")
    ap.add_argument("--table", metavar="SPEC", help="print the table of module:Class[.field] and exit")
    args = ap.parse_args(argv)
    try:
        if args.table:
            print("\n".join(render_table(*resolve(args.table))))
            return 0
        root = args.root or default_root()
        paths = args.files or doc_files(root)
        stale = update(paths, write=not args.check)
    except (DocgenError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    shown = [_relative(p, root) for p in stale]
    if args.check:
        for s in shown:
            print(f"{s}: option tables differ from the declarations")
        if stale:
            print("run `python -m sdbench.docgen` to rewrite them", file=sys.stderr)
            return 1
        return 0
    for s in shown:
        print(f"rewrote {s}")
    return 0


def _relative(p: Path, root: Path) -> str:
    try:
        return str(p.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(p)


if __name__ == "__main__":
    sys.exit(main())
