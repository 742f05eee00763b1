"""fio's value syntax: sizes, times, booleans, per-direction lists, block size splits, distributions, patterns.

Everything here turns the text of one fio option into plain values; which
field a value lands in, and its range, is the job of the option table
(:mod:`.fiooptions`) and the declaration (:class:`.jobs.JobConfig`).

Facts of fio's syntax followed here (fio's HOWTO, "Parameter types"):

* sizes: ``4k``, ``1M``, ``2g``, ``4096b``, hex ``0x1000``; with ``kb_base=1024``
  (fio's default) the prefixes are binary except written the IEC way with a
  byte unit (``4KiB`` is 4000 B in fio, and here), with ``kb_base=1000`` the
  IEC prefixes are binary and the SI ones decimal;
* times: a number with ``d``, ``h``, ``m``, ``s``/``sec``, ``ms``/``msec``,
  ``us``/``usec``; without a unit the option's default unit (seconds for most,
  microseconds for ``thinktime`` and the latency options);
* a numeric value in parentheses is an expression (``+ - * / % ^``), and
  ``$pagesize``, ``$mb_memory`` and ``$ncpus`` stand for the machine's values;
* ``bs``-like options take up to three comma-separated values (reads, writes,
  trims); a value not followed by a comma applies to the directions after it.
"""
from __future__ import annotations

import ast
import math
import operator
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar

from ...errors import ConfigError

T = TypeVar("T")

_PREFIXES = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_SIZE = re.compile(r"^(0x[0-9a-f]+|\d+(?:\.\d*)?|\.\d+)\s*([kmgtp]?)(i?)(b?)$", re.IGNORECASE)
_TIME_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "msec": 1e-3, "us": 1e-6,
               "usec": 1e-6, "ns": 1e-9, "nsec": 1e-9}
_TIME = re.compile(r"^(\d+(?:\.\d*)?(?:e[+-]?\d+)?|\.\d+)\s*([a-z]*)$", re.IGNORECASE)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def shown(text: str, limit: int = 40) -> str:
    """A value as an error line shows it: quoted, cut to ``limit`` characters."""
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


# ---- reserved keywords and expressions ----------------------------------------------------------------------
def machine_keywords() -> dict[str, int]:
    """fio's reserved keywords and this machine's values for them."""
    try:
        mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // (1 << 20)
    except (ValueError, OSError, AttributeError):
        mb = 0
    return {"$pagesize": os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096, "$mb_memory": mb,
            "$ncpus": os.cpu_count() or 1}


_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Mod: operator.mod, ast.BitXor: operator.pow, ast.Pow: operator.pow}


def _evaluate(node: ast.AST, what: str) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body, what)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _evaluate(node.operand, what)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = _evaluate(node.left, what), _evaluate(node.right, what)
        if isinstance(node.op, (ast.BitXor, ast.Pow)) and (abs(b) > 64 or abs(a) > 1 << 32):
            raise ConfigError(f"{what}: the expression's power is out of range")
        try:
            return _OPS[type(node.op)](a, b)
        except ZeroDivisionError:
            raise ConfigError(f"{what}: the expression divides by zero") from None
    raise ConfigError(f"{what}: not an arithmetic expression (+ - * / % ^ on numbers)")


def expand(text: str, what: str) -> str:
    """``$keyword`` replaced by the machine's value; a value in parentheses evaluated (fio's expressions)."""
    if "$" in text:
        for k, v in machine_keywords().items():
            text = text.replace(k, str(v))
    t = text.strip()
    if t.startswith("(") and t.endswith(")"):
        body = t[1:-1]
        m = re.fullmatch(r"(.*?)([a-zA-Z]*)", body.strip())
        expr, unit = (m.group(1), m.group(2)) if m else (body, "")
        if len(expr) > 200 or not re.fullmatch(r"[0-9.\s+\-*/%^()]*", expr):
            raise ConfigError(f"{what}: {shown(t)} is not an arithmetic expression")
        try:
            tree = ast.parse(expr.replace("^", "**").strip() or "0", mode="eval")
        except (SyntaxError, ValueError, RecursionError):
            raise ConfigError(f"{what}: {shown(t)} is not an arithmetic expression") from None
        v = _evaluate(tree, what)
        if not math.isfinite(v):
            raise ConfigError(f"{what}: {shown(t)} is out of range")
        return (str(int(v)) if float(v).is_integer() else repr(float(v))) + unit
    return text


# ---- scalars ------------------------------------------------------------------------------------------------
def fio_size(text: str, what: str, kb_base: int = 1024) -> int:
    """A size in bytes as fio reads it."""
    t = expand(str(text), what).strip()
    m = _SIZE.match(t)
    if not m:
        raise ConfigError(f"{what}: {shown(text)} is not a size (e.g. 4096, 4k, 1M, 2g, 0x1000)")
    num, prefix, i_mark, b_mark = m.group(1), m.group(2).lower(), bool(m.group(3)), bool(m.group(4))
    n = float(int(num, 16)) if num.lower().startswith("0x") else float(num)
    # kb_base=1024, fio's compatibility mode: KiB, MiB... (an i and a B) are powers of ten, the rest binary;
    # kb_base=1000: the IEC prefixes (Ki, Mi...) are binary, the SI ones decimal
    binary = not (i_mark and b_mark) if kb_base == 1024 else i_mark
    base = 1024 if binary else 1000
    value = n * base ** _PREFIXES[prefix]
    if not math.isfinite(value) or value >= 1 << 63:
        raise ConfigError(f"{what}: {shown(text)} is out of range (at most 2^63 B)")
    if not value.is_integer():
        raise ConfigError(f"{what}: {shown(text)} is not a whole number of bytes")
    return int(value)


def fio_size_or_pct(text: str, what: str, kb_base: int = 1024) -> tuple[int, float]:
    """``size=20%`` -> (0, 20.0); ``size=1G`` -> (bytes, 0.0).  Zones (``8z``) are a zoned device's unit."""
    t = expand(str(text), what).strip()
    if t.endswith("%"):
        pct = fio_float(t[:-1], what)
        if not 0 < pct <= 100:
            raise ConfigError(f"{what}: {shown(text)} is not a percentage between 1 and 100")
        return 0, pct
    if t.lower().endswith("z") and re.fullmatch(r"\d+z", t, re.IGNORECASE):
        raise ConfigError(f"{what}: {shown(text)} counts zones, which only zoned block devices have "
                          f"(zonemode=zbd)")
    return fio_size(t, what, kb_base), 0.0


def fio_time(text: str, what: str, unit_s: float = 1.0) -> float:
    """A duration in seconds; a bare number is in ``unit_s`` seconds (1 for seconds, 1e-6 for microseconds)."""
    t = expand(str(text), what).strip()
    m = _TIME.match(t)
    if not m:
        raise ConfigError(f"{what}: {shown(text)} is not a time (e.g. 30, 30s, 2m, 500ms, 100us)")
    unit = m.group(2).lower()
    if unit and unit not in _TIME_UNITS:
        raise ConfigError(f"{what}: {shown(text)}: unknown time unit {unit!r} (d, h, m, s, ms, us)")
    try:
        v = float(m.group(1)) * (_TIME_UNITS[unit] if unit else unit_s)
    except OverflowError:
        v = math.inf
    if not math.isfinite(v):
        raise ConfigError(f"{what}: {shown(text)} is out of range")
    return v


def fio_int(text: str, what: str, *, suffixes: bool = False, kb_base: int = 1024) -> int:
    """A whole number (decimal or 0x hex; with ``suffixes``, k/M/G... as for sizes)."""
    t = expand(str(text), what).strip()
    if suffixes:
        return fio_size(t, what, kb_base)
    try:
        return int(t, 0) if t.lower().startswith(("0x", "-0x")) else int(t)
    except ValueError:
        try:
            f = float(t)
        except ValueError:
            raise ConfigError(f"{what}: {shown(text)} is not a whole number") from None
        if not f.is_integer():
            raise ConfigError(f"{what}: {shown(text)} is not a whole number") from None
        return int(f)


def fio_float(text: str, what: str) -> float:
    t = expand(str(text), what).strip()
    try:
        v = float(t)
    except ValueError:
        raise ConfigError(f"{what}: {shown(text)} is not a number") from None
    if not math.isfinite(v):
        raise ConfigError(f"{what}: {shown(text)} is not a finite number")
    return v


def fio_bool(text: str | None, what: str) -> bool:
    """``1``/``0`` (and true/false, yes/no, on/off); a bare option means true."""
    if text is None or text == "":
        return True
    t = str(text).strip().lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    try:
        return int(t, 0) != 0
    except ValueError:
        raise ConfigError(f"{what}: {shown(text)} is not a boolean (1 or 0)") from None


def fio_choice(text: str, what: str, choices: dict[str, T]) -> T:
    t = str(text).strip().lower()
    if t not in choices:
        raise ConfigError(f"{what}: {shown(text)} is not one of {', '.join(choices)}")
    return choices[t]


# ---- per-direction lists ------------------------------------------------------------------------------------
def per_direction(text: str, what: str, parse: Callable[[str], T], default: T, n: int = 3) -> tuple[T, ...]:
    """fio's ``read,write,trim`` values: ``a`` -> (a, a, a); ``a,b`` -> (a, b, b); ``a,b,`` -> (a, b, default);
    ``,b`` -> (default, b, b); ``a,`` -> (a, default, default)."""
    parts = str(text).split(",")
    if len(parts) > n + (1 if parts[-1] == "" else 0):
        raise ConfigError(f"{what}: {shown(text)} has more than {n} comma-separated values "
                          f"({'reads, writes, trims' if n == 3 else 'reads, writes'})")
    trailing = len(parts) > 1 and parts[-1].strip() == ""
    if trailing:
        parts = parts[:-1]
    out: list[T] = []
    last: T = default
    for p in parts:
        last = parse(p.strip()) if p.strip() else default
        out.append(last)
    while len(out) < n:
        out.append(default if trailing else last)
    return tuple(out[:n])


# ---- block size splits and ranges ---------------------------------------------------------------------------
def _split_entries(text: str, what: str, limit: int) -> list[list[str]]:
    entries = [e for e in text.split(":") if e.strip()]
    if len(entries) > limit:
        raise ConfigError(f"{what}: at most {limit} entries, not {len(entries)}")
    return [[f.strip() for f in e.split("/")] for e in entries]


def fill_shares(shares: list[float | None], what: str) -> list[float]:
    """Blank shares get the remainder evenly (fio's rule); shares adding up to less than 100 leave the rest to the
    largest; more than 100 is refused."""
    given = sum(s for s in shares if s is not None)
    missing = sum(1 for s in shares if s is None)
    if given > 100.0 + 1e-9:
        raise ConfigError(f"{what}: the percentages add up to {given:g}, more than 100")
    if missing:
        fill = (100.0 - given) / missing
        return [fill if s is None else float(s) for s in shares]
    out = [float(s) for s in shares]  # type: ignore[arg-type]
    if out and given < 100.0 - 1e-9:
        out[out.index(max(out))] += 100.0 - given
    return out


def bssplit(text: str, what: str, kb_base: int = 1024) -> list[tuple[int, float]]:
    """``4k/10:64k/50:32k/`` -> [(4096, 10.0), (65536, 50.0), (32768, 40.0)] (one direction)."""
    entries = _split_entries(text, what, 64)
    if not entries:
        return []
    sizes, shares = [], []
    for e in entries:
        if len(e) > 2:
            raise ConfigError(f"{what}: {shown('/'.join(e))} is not size/percentage")
        sizes.append(fio_size(e[0], what, kb_base))
        shares.append(fio_float(e[1], what) if len(e) > 1 and e[1] else None)
    return list(zip(sizes, fill_shares(shares, what)))


def bsrange(text: str, what: str, kb_base: int = 1024, unaligned: bool = False) -> list[tuple[int, float]]:
    """``1k-4k`` (or ``1k:4k``) -> every size from the low to the high end in steps of the low end (of 512 B with
    ``bs_unaligned``), with equal shares: fio draws a size in the range and rounds it down to such a step."""
    parts = re.split(r"[-:]", text.strip(), maxsplit=1)
    if len(parts) != 2:
        lo = hi = fio_size(text, what, kb_base)
    else:
        lo, hi = fio_size(parts[0], what, kb_base), fio_size(parts[1], what, kb_base)
    lo, hi = min(lo, hi), max(lo, hi)
    if lo < 512:
        raise ConfigError(f"{what}: block sizes start at 512 B, not {lo} B")
    step = 512 if unaligned else lo
    sizes = list(range(lo, hi + 1, step))
    if len(sizes) > 4096:
        raise ConfigError(f"{what}: {shown(text)} spans {len(sizes)} block sizes (at most 4096)")
    return [(s, 100.0 / len(sizes)) for s in sizes]


def cmdprio_bssplit(text: str, what: str, kb_base: int = 1024) -> list[tuple[int, float, int | None, int | None,
                                                                           int | None]]:
    """``64k/25/1/1:1M/10/2/0/1`` -> (size, percent, class, level, hint) with None for fields left out."""
    out = []
    for e in _split_entries(text, what, 64):
        if not 2 <= len(e) <= 5:
            raise ConfigError(f"{what}: {shown('/'.join(e))} is not size/percentage[/class/level[/hint]]")
        vals = [fio_int(x, what) if x else None for x in e[2:]] + [None] * (5 - len(e))
        out.append((fio_size(e[0], what, kb_base), fio_float(e[1], what), vals[0], vals[1], vals[2]))
    return out


# ---- distributions ------------------------------------------------------------------------------------------
def distribution(text: str, what: str, kb_base: int = 1024) -> dict[str, Any]:
    """fio's random_distribution for one direction -> the JobConfig fields it sets."""
    t = text.strip()
    name, _, rest = t.partition(":")
    name = name.lower()
    if name == "gauss":
        name = "normal"
    if name == "random":
        return {"random_distribution": "random"}
    if name in ("zipf", "pareto", "normal"):
        vals = [v for v in rest.split(":")] if rest else []
        if not vals or not vals[0]:
            raise ConfigError(f"{what}: {name} needs a value ({name}:1.2)")
        if len(vals) > 2:
            raise ConfigError(f"{what}: {shown(text)} has more than two values")
        out: dict[str, Any] = {"random_distribution": name, "distribution_param": fio_float(vals[0], what)}
        if len(vals) == 2:
            center = fio_float(vals[1], what)
            if not 0 <= center <= 1:
                raise ConfigError(f"{what}: the centre {center:g} is not between 0 and 1")
            out["distribution_center"] = center
        return out
    if name in ("zoned", "zoned_abs"):
        absolute = name == "zoned_abs"
        entries = _split_entries(rest, what, 256)
        if not entries:
            raise ConfigError(f"{what}: {name} needs zones (e.g. {name}:60/10:40/90)")
        access: list[float | None] = []
        sizes: list[Any] = []
        for e in entries:
            if len(e) != 2:
                raise ConfigError(f"{what}: {shown('/'.join(e))} is not access%/size")
            access.append(fio_float(e[0], what) if e[0] else None)
            if absolute:
                sizes.append(fio_size(e[1], what, kb_base))
            else:
                sizes.append(fio_float(e[1], what) if e[1] else None)
        if sum(a for a in access if a is not None) < 100.0 - 1e-9 and None not in access:
            raise ConfigError(f"{what}: the access percentages add up to "
                              f"{sum(a for a in access if a is not None):g}, not 100")
        acc = fill_shares(access, what)
        if absolute:
            zones = [{"access_pct": a, "size_bytes": s} for a, s in zip(acc, sizes)]
        else:
            given = sum(s for s in sizes if s is not None)
            missing = sizes.count(None)
            if given > 100.0 + 1e-9:
                raise ConfigError(f"{what}: the zone sizes add up to {given:g} %, more than 100")
            fill = (100.0 - given) / missing if missing else 0.0
            zones = [{"access_pct": a, "size_pct": fill if s is None else s} for a, s in zip(acc, sizes)]
        return {"random_distribution": name, "zones": zones}
    raise ConfigError(f"{what}: {shown(text)}: not one of random, zipf, pareto, normal, zoned, zoned_abs")


# ---- patterns -----------------------------------------------------------------------------------------------
def pattern_hex(text: str, what: str) -> str:
    """fio's buffer and verify patterns -> their bytes as hex: ``0xaa55``, a decimal number, a ``"string"``, or
    several joined with ``|`` ; ``%o`` (the offset, filled in per block) is not taken."""
    out = bytearray()
    for part in re.split(r"\|", text.strip()):
        p = part.strip()
        if not p:
            continue
        if p.startswith(("'", '"')) and p.endswith(p[0]) and len(p) >= 2:
            out += p[1:-1].encode("utf-8")
        elif p.lower().startswith("0x"):
            digits = p[2:]
            if not re.fullmatch(r"[0-9a-fA-F]+", digits):
                raise ConfigError(f"{what}: {shown(p)} is not hex")
            if len(digits) % 2:
                digits = "0" + digits
            out += bytes.fromhex(digits)
        elif p == "%o":
            raise ConfigError(f"{what}: the offset format %o is not supported (a fixed pattern is)")
        elif re.fullmatch(r"\d+", p):
            n = int(p)
            out += n.to_bytes(max(1, (n.bit_length() + 7) // 8), "little")
        else:
            raise ConfigError(f"{what}: {shown(p)} is not a pattern (0xHEX, a number or a \"string\")")
    if not out or len(out) > 4096:
        raise ConfigError(f"{what}: a pattern of 1..4096 bytes, not {len(out)}")
    return out.hex()


# ---- lists --------------------------------------------------------------------------------------------------
def float_list(text: str, what: str) -> tuple[float, ...]:
    """``99.5:99.9`` -> (99.5, 99.9)."""
    vals = tuple(fio_float(v, what) for v in str(text).split(":") if v.strip())
    if not vals or len(vals) > 20:
        raise ConfigError(f"{what}: 1..20 numbers separated by ':'")
    return vals


def cpu_list(text: str, what: str) -> tuple[int, ...]:
    """``0,5,8-15`` -> (0, 5, 8, ..., 15)."""
    out: list[int] = []
    for part in str(text).split(","):
        p = part.strip()
        if not p:
            continue
        if "-" in p:
            a, _, b = p.partition("-")
            lo, hi = fio_int(a, what), fio_int(b, what)
            if lo > hi or hi - lo > 4096:
                raise ConfigError(f"{what}: {shown(p)} is not a range of CPUs")
            out.extend(range(lo, hi + 1))
        else:
            out.append(fio_int(p, what))
    if not out or min(out) < 0 or max(out) > 8191:
        raise ConfigError(f"{what}: {shown(text)} is not a list of CPUs (e.g. 0,2-3)")
    return tuple(sorted(set(out)))


def errno_list(text: str, what: str) -> tuple[int, ...]:
    """``EAGAIN:ENOSPC:122`` -> errno numbers."""
    import errno as errno_mod

    out = []
    for part in str(text).split(":"):
        p = part.strip()
        if not p:
            continue
        if p.isdigit():
            out.append(int(p))
        elif hasattr(errno_mod, p.upper()):
            out.append(int(getattr(errno_mod, p.upper())))
        else:
            raise ConfigError(f"{what}: {shown(p)} is not an errno name or number")
    return tuple(out)
