"""Mutation primitives: a pool of hostile values, tree edits for TOML/JSON
documents, byte-level edits for text files, and a TOML writer that can express
every value the pool produces (nan, inf, huge integers, nested inline tables).

Every mutation is a plain JSON-able list (an "op") so a case can be rebuilt
from a subset of its ops when a failure is shrunk.
"""
from __future__ import annotations

import base64
import copy
import json
import math
import random
import re
from typing import Any

HUGE_INT = 2 ** 70

#: values of every type a configuration field should refuse (or accept) cleanly
FIXED_VALUES: list[Any] = [
    math.nan, math.inf, -math.inf, -1, 0, 1, 2, 3, 2 ** 31, 2 ** 32, 2 ** 63 - 1, 2 ** 63, 2 ** 64, HUGE_INT,
    -HUGE_INT, 1e308, -1e308, 5e-324, 0.5, -0.0, 1.5, 511, 513, 4095, 65537,
    "", "x", "4k", "1M", "-1", "nan", "0x10", " ", "true", "é😀", "\x1b[31mred", "a\nb", "../x", "\\",
    [], [1, 2], ["x"], [[]], [{}], [math.nan], {}, {"a": 1}, {"a": {"b": {}}},
    True, False,
]


def odd_power_of_two(rng: random.Random) -> int:
    return 2 ** rng.choice(range(1, 66, 2))


def huge_string(rng: random.Random, slash: bool = True) -> str:
    unit = rng.choice(["A", "é", "/" if slash else "_", "%s", "{", "\t"])
    return unit * rng.choice([256, 4096, 100_000])


def pool_value(rng: random.Random, current: Any = None) -> Any:
    """A hostile value, sometimes derived from the field's current value."""
    r = rng.random()
    if isinstance(current, (int, float)) and not isinstance(current, bool) and r < 0.3 or \
            isinstance(current, int) and not isinstance(current, bool) and rng.random() < 0.3:
        if isinstance(current, float) and not math.isfinite(current):
            return rng.choice([0, 1, -1])
        f = rng.choice([0.5, 2, 10, -1, 100, 1 / 3])
        v = current * f
        if isinstance(current, int) and rng.random() < 0.7:
            try:
                v = int(v) + rng.choice([-1, 0, 0, 1])
            except (OverflowError, ValueError):
                pass
        return v
    if r < 0.32:
        return odd_power_of_two(rng)
    if r < 0.36:
        return huge_string(rng)
    if isinstance(current, str) and r < 0.45:
        return rng.choice([current.upper(), current + "x", current[:-1], current * 3, " " + current,
                           current.replace("-", "_")])
    if isinstance(current, list) and r < 0.5:
        return rng.choice([current * 2, current[:1], list(reversed(current)), current + [1],
                           [current]])
    return copy.deepcopy(rng.choice(FIXED_VALUES))


# ---- TOML writer ---------------------------------------------------------------------------------

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_str(s: str) -> str:
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{o:04X}")
        elif 0xD800 <= o <= 0xDFFF:
            out.append("\\uFFFD")  # lone surrogates cannot be written as UTF-8
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_key(k: Any) -> str:
    k = str(k)
    return k if _BARE.match(k) else toml_str(k)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v if x is not None) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(x)}" for k, x in v.items() if x is not None) + "}"
    return toml_str(str(v))


def toml_dumps(tree: dict[str, Any]) -> str:
    lines: list[str] = []

    def emit(table: dict[str, Any], path: list[str]) -> None:
        for k, v in table.items():
            if v is not None and not isinstance(v, dict):
                lines.append(f"{toml_key(k)} = {toml_value(v)}")
        for k, v in table.items():
            if isinstance(v, dict):
                lines.append("")
                lines.append("[" + ".".join(toml_key(p) for p in path + [k]) + "]")
                emit(v, path + [k])

    emit(tree, [])
    return "\n".join(lines) + "\n"


def json_dumps(tree: Any) -> str:
    return json.dumps(tree, indent=1, allow_nan=True, ensure_ascii=False, default=str)


# ---- tree edits ----------------------------------------------------------------------------------

def paths(tree: Any, prefix: tuple = (), max_depth: int = 12) -> list[tuple]:
    """Every path (tuple of keys / list indexes) below ``tree``, tables and leaves alike."""
    out: list[tuple] = []
    if len(prefix) >= max_depth:
        return out
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.append(prefix + (k,))
            out.extend(paths(v, prefix + (k,), max_depth))
    elif isinstance(tree, list):
        for i, v in enumerate(tree[:50]):
            out.append(prefix + (i,))
            out.extend(paths(v, prefix + (i,), max_depth))
    return out


def get_path(tree: Any, path: list | tuple) -> Any:
    node = tree
    for p in path:
        node = node[p]
    return node


def _container(tree: Any, path: list, create: bool) -> Any:
    node = tree
    for p in path[:-1]:
        if isinstance(node, dict):
            if p not in node or not isinstance(node[p], (dict, list)):
                if not create:
                    return None
                node[p] = {}
            node = node[p]
        elif isinstance(node, list) and isinstance(p, int) and 0 <= p < len(node):
            node = node[p]
        else:
            return None
    return node


def apply_tree_op(tree: Any, op: list) -> None:
    """Apply one op in place; ops whose path no longer exists are skipped."""
    kind, path = op[0], list(op[1])
    if not path:
        return
    if kind == "set":
        node = _container(tree, path, create=True)
        last = path[-1]
        if isinstance(node, dict):
            node[last] = copy.deepcopy(op[2])
        elif isinstance(node, list) and isinstance(last, int) and 0 <= last < len(node):
            node[last] = copy.deepcopy(op[2])
    elif kind == "del":
        node = _container(tree, path, create=False)
        last = path[-1]
        if isinstance(node, dict):
            node.pop(last, None)
        elif isinstance(node, list) and isinstance(last, int) and 0 <= last < len(node):
            del node[last]
    elif kind == "wrap":  # deep nesting: value -> [[[...value...]]]
        node = _container(tree, path, create=False)
        last = path[-1]
        if node is None:
            return
        try:
            v = node[last]
        except (KeyError, IndexError, TypeError):
            return
        for _ in range(int(op[2])):
            v = [v]
        node[last] = v


def apply_tree_ops(tree: Any, ops: list[list]) -> Any:
    out = copy.deepcopy(tree)
    for op in ops:
        if op[0] in ("set", "del", "wrap"):
            apply_tree_op(out, op)
    return out


def random_tree_op(rng: random.Random, tree: Any, extra_keys: list[tuple] = ()) -> list:
    """One random edit of ``tree`` (evaluated against its current state)."""
    ps = paths(tree)
    r = rng.random()
    if (r < 0.45 or not extra_keys) and ps:
        p = rng.choice(ps)
        try:
            cur = get_path(tree, p)
        except (KeyError, IndexError, TypeError):
            cur = None
        if isinstance(cur, dict) and rng.random() < 0.5:
            return ["set", list(p), rng.choice([0, "", "x", [], [cur], True, math.nan])]  # table -> scalar
        if not isinstance(cur, (dict, list)) and rng.random() < 0.1:
            return ["set", list(p), rng.choice([{}, {"a": 1}, {str(cur): cur}])]  # scalar -> table
        return ["set", list(p), pool_value(rng, cur)]
    if r < 0.7 and extra_keys:
        p = rng.choice(list(extra_keys))
        return ["set", list(p), pool_value(rng)]
    if r < 0.82 and ps:
        return ["del", list(rng.choice(ps))]
    # an unknown key somewhere
    tables = [p for p in ps if isinstance(get_path(tree, p), dict)]
    parent = list(rng.choice(tables)) if tables and rng.random() < 0.7 else []
    key = rng.choice(["zz_unknown", "", " ", "a.b", "runs ", "RUNS", "é", "0", "extends", "media", "__class__",
                      "name"])
    return ["set", parent + [key], pool_value(rng)]


def gentle_value(rng: random.Random, cur: int | float) -> int | float:
    """A plausible neighbour of a numeric value: the kind of edit a user makes."""
    if isinstance(cur, float):
        return rng.choice([cur * 2, cur / 2, cur * 10, cur / 10, 0.0, cur + 1])
    c = int(cur)
    near = 1 << max(c.bit_length() - 1, 0)
    return rng.choice([c * 2, c // 2, c * 10, c // 10, c + 1, max(c - 1, 0), c * 3, near, near * 4, near // 4,
                       0, 1, 2, 512, 4096])


def gentle_tree_op(rng: random.Random, tree: Any) -> list | None:
    leaves = []
    for p in paths(tree):
        try:
            v = get_path(tree, p)
        except (KeyError, IndexError, TypeError):
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool) and p[-1] != "seed":
            leaves.append((p, v))
    if not leaves:
        return None
    p, v = rng.choice(leaves)
    return ["set", list(p), gentle_value(rng, v)]


# ---- byte-level edits ----------------------------------------------------------------------------

_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
NUMBER_REPLACEMENTS = [b"99999999999999999999999999", b"-1", b"0", b"nan", b"NaN", b"inf", b"-inf", b"Infinity",
                       b"1e308", b"1e999", b"-0", b"x", b"", b"0x10", b"1,5", b"1_0", b"18446744073709551616",
                       b"4294967296", b"0.0000001", b"-99999999", b"1e-320", b"12 34"]


def random_text_op(rng: random.Random, data: bytes) -> list:
    lines = data.count(b"\n") + 1
    r = rng.random()
    if r < 0.12:
        return ["del_lines", rng.randrange(lines), rng.choice([1, 1, 2, 5, 20])]
    if r < 0.22:
        return ["dup_lines", rng.randrange(lines), rng.choice([1, 2, 5]), rng.choice([1, 2, 10])]
    if r < 0.28:
        return ["swap_lines", rng.randrange(lines), rng.randrange(lines)]
    if r < 0.55:
        n = len(_NUMBER.findall(data))
        if n:
            return ["number", rng.randrange(n), base64.b64encode(rng.choice(NUMBER_REPLACEMENTS)).decode()]
    if r < 0.65:
        return ["truncate", round(rng.random(), 4)]
    if r < 0.8:
        raw = rng.choice([b"\x00", b"\xff\xfe", b"\x1b[2J", b"\r", b"\t", b"{", b"[", b"\"", b"\\",
                          bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 32]))), b"\n\n\n",
                          b"\xed\xa0\x80", "é".encode(), b"\x7f"])
        return ["insert", round(rng.random(), 4), base64.b64encode(raw).decode()]
    if r < 0.88:
        return ["flip", round(rng.random(), 4), rng.randrange(1, 256)]
    if r < 0.94:
        return ["repeat", rng.choice([2, 10, 100])]
    return ["replace_all", rng.choice(["empty", "space", "newlines", "bom"])]


def apply_text_op(data: bytes, op: list) -> bytes:
    kind = op[0]
    lines = data.split(b"\n")
    if kind == "del_lines":
        i = min(op[1], len(lines) - 1)
        return b"\n".join(lines[:i] + lines[i + op[2]:])
    if kind == "dup_lines":
        i = min(op[1], len(lines) - 1)
        block = lines[i:i + op[2]]
        return b"\n".join(lines[:i] + block * (op[3] + 1) + lines[i + op[2]:])
    if kind == "swap_lines":
        i, j = min(op[1], len(lines) - 1), min(op[2], len(lines) - 1)
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    if kind == "number":
        matches = list(_NUMBER.finditer(data))
        if not matches:
            return data
        m = matches[min(op[1], len(matches) - 1)]
        return data[:m.start()] + base64.b64decode(op[2]) + data[m.end():]
    if kind == "truncate":
        return data[:int(len(data) * op[1])]
    if kind == "insert":
        pos = int(len(data) * op[1])
        return data[:pos] + base64.b64decode(op[2]) + data[pos:]
    if kind == "flip":
        if not data:
            return data
        pos = min(int(len(data) * op[1]), len(data) - 1)
        return data[:pos] + bytes([data[pos] ^ op[2]]) + data[pos + 1:]
    if kind == "repeat":
        return data * op[1]
    if kind == "replace_all":
        return {"empty": b"", "space": b"   \n\t\n", "newlines": b"\n" * 1000, "bom": b"\xef\xbb\xbf" + data}[op[1]]
    return data


def apply_text_ops(data: bytes, ops: list[list]) -> bytes:
    for op in ops:
        if op[0] not in ("set", "del", "wrap"):
            data = apply_text_op(data, op)
    return data


def describe_op(op: list) -> str:
    if op[0] == "set":
        v = repr(op[2])
        return f"set {'.'.join(map(str, op[1]))} = {v if len(v) <= 60 else v[:57] + '...'}"
    if op[0] == "del":
        return f"delete {'.'.join(map(str, op[1]))}"
    if op[0] == "wrap":
        return f"nest {'.'.join(map(str, op[1]))} {op[2]} levels deep"
    if op[0] in ("number", "insert"):
        raw = base64.b64decode(op[2])
        return f"{op[0]} {op[1]}: {raw[:40]!r}"
    return " ".join(map(str, op))
