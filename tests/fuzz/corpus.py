"""Case generators: every case is a pure function of (kind, seed, index).

A case is a JSON-able dict::

    {"id": "scenario-1-17", "kind": "scenario", "seed": 1, "index": 17,
     "desc": "what was mutated",
     "files": [{"path": "scen.toml", "b64": ...} | {"path": "fifo", "fifo": true} | {"path": "d", "dir": true}
               | {"path": "img.bin", "size": 1048576}],
     "env": {"SDBENCH_DB": "@CASE@/x.db" | None},      # None: unset; @CASE@: the case directory
     "steps": [{"argv": [...]}, {"action": "sql", "args": {...}}, ...],
     "plan": {...}}                                     # what build() made the case from (for shrinking)

``generate(kind, seed, index, ctx)`` draws a plan with a seeded RNG and
``build(kind, plan, ctx)`` turns it into a case, so a failure can be shrunk by
rebuilding from a plan with fewer ops.  ``check_safe`` refuses any case that
could reach outside its directory (block devices, --allow-write on a device,
--drop-caches, absolute paths).
"""
from __future__ import annotations

import base64
import copy
import inspect
import json
import math
import random
import tomllib
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from .actions import CASE_TOKEN
from .mutate import (apply_text_ops, apply_tree_ops, describe_op, gentle_tree_op, huge_string, json_dumps, paths,
                     pool_value, random_text_op, random_tree_op, toml_dumps, toml_value)

REPO = Path(__file__).resolve().parents[2]
SCENARIO_DIR = REPO / "src" / "sdbench" / "data" / "scenarios"
TEST_DATA = REPO / "tests" / "data"
KINDS = ("scenario", "set", "import", "argv", "store")

#: built-in scenarios that run in well under a second with --runs 1
CHEAP_SCENARIOS = ["espidf-memory", "esp32s3-sdmmc4-40mhz", "esp32s3-spi20mhz", "p2-spi25-350mhz-pny-16gb",
                   "espidf-esp32-sdmmc4-40mhz", "espidf-esp32-spiflash", "esp32s3-usbmsc-spi20mhz",
                   "mpy-esp32s3-sdspi"]
SIM_SD_SCENARIOS = ["esp32s3-sdmmc4-40mhz", "esp32s3-spi20mhz", "p2-spi25-350mhz-pny-16gb",
                    "espidf-esp32-sdmmc4-40mhz"]
#: the only device nodes a case may name
SAFE_DEVICES = ("/dev/null", "/dev/full", "/dev/zero")
#: options never generated: they write outside the case directory or are interactive by design
FORBIDDEN_OPTIONS = {"--drop-caches"}
DASK_GARBAGE = ["", "x", "tcp://", "nonsense://a", "tcp://:0"]

RESULTS_SAMPLE_ARGV = ["run", "espidf-esp32-sdmmc4-40mhz", "esp32s3-sdmmc4-40mhz", "-f", "json", "--runs", "2",
                       "--no-save", "-q", "--set", 'espidf.parts=["sd_raw", "sd_fatfs"]']


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def text_file(path: str, text: str) -> dict:
    return {"path": path, "b64": b64(text.encode("utf-8", "surrogatepass"))}


# ---- context -------------------------------------------------------------------------------------

@dataclass
class OptionModel:
    decls: list[str]          # e.g. ["--format", "-f"] (a "--x/--no-x" flag gives both names)
    kind: str                 # flag, int, float, str, path, choice, list
    choices: list[str] = field(default_factory=list)
    min: float | None = None
    max: float | None = None


@dataclass
class CommandModel:
    path: list[str]
    options: list[OptionModel]
    arguments: list[tuple[str, str, bool]]   # (name, kind, variadic)


class Context:
    """What generators need from the project: scenario texts, samples, the CLI's shape."""

    def __init__(self, results_json: str | None = None) -> None:
        self.scenarios = {p.stem: p.read_text() for p in sorted(SCENARIO_DIR.glob("*.toml"))}
        self.cheap = [n for n in CHEAP_SCENARIOS if n in self.scenarios] or sorted(
            n for n in self.scenarios if not n.startswith("_"))[:3]
        self.samples = {
            "espidf": (TEST_DATA / "espidf_esp32_sdmmc.log").read_bytes(),
            "fio": (TEST_DATA / "fio_sdcard.json").read_bytes(),
            "sdfat": (TEST_DATA / "sdfat_bench_esp32.txt").read_bytes(),
        }
        if results_json:
            self.samples["json"] = results_json.encode()
        self._schema: dict[tuple, list[str]] | None = None
        self._cli: list[CommandModel] | None = None

    # the merged TOML tree of a built-in scenario ('extends' resolved as sdbench does)
    def tree(self, name: str, merged: bool = True) -> dict:
        data = tomllib.loads(self.scenarios[name])
        if merged and isinstance(data.get("extends"), str) and data["extends"] in self.scenarios:
            base = self.tree(data.pop("extends"))
            base.pop("name", None)
            data = _merge(base, data)
        return data

    @property
    def schema(self) -> dict[tuple, list[str]]:
        """Known option names per section, read from the config dataclasses (best effort)."""
        if self._schema is None:
            self._schema = _introspect_schema()
        return self._schema

    def schema_keys(self) -> list[tuple]:
        return [sec + (name,) for sec, names in self.schema.items() for name in names]

    @property
    def cli(self) -> list[CommandModel]:
        if self._cli is None:
            self._cli = _introspect_cli()
        return self._cli

    def command(self, *path: str) -> CommandModel | None:
        for c in self.cli:
            if c.path == list(path):
                return c
        return None


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _introspect_schema() -> dict[tuple, list[str]]:
    out: dict[tuple, list[str]] = {}

    def add(section: tuple, cls: Any, depth: int = 0) -> None:
        if not (is_dataclass(cls) and isinstance(cls, type)) or depth > 3:
            return
        try:
            hints = typing.get_type_hints(cls)
        except Exception:
            hints = {}
        names = out.setdefault(section, [])
        for f in fields(cls):
            if f.name not in names:
                names.append(f.name)
            t = hints.get(f.name)
            if is_dataclass(t) and isinstance(t, type):
                add(section + (f.name,), t, depth + 1)

    try:
        from sdbench import scenarios as scen

        from sdbench.workloads.registry import protocols

        for spec in protocols().values():
            add((spec.table,), spec.config)
        for sec in ("sd_fat", "sd_littlefs"):
            add((sec,), type(getattr(scen.Scenario("x"), sec)))
        for kind, entry in scen.MEDIA.items():
            add((entry.section,), entry.config)
        out.setdefault(("sd",), []).append("media")
        out.setdefault(("flash",), []).append("media")
    except Exception:
        pass
    for modname, clsname, section in (("sdbench.cache", "CacheConfig", ("sd", "cache")),
                                      ("sdbench.media.sim.bus", "BusConfig", ("sd", "bus"))):
        try:
            mod = __import__(modname, fromlist=[clsname])
            add(section, getattr(mod, clsname))
        except Exception:
            pass
    out.setdefault((), []).extend(["name", "description", "protocol", "seed", "extends"])
    return out


def _kind_of(annotation: Any, info: Any) -> tuple[str, list[str]]:
    t = annotation
    origin = typing.get_origin(t)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        args = [a for a in typing.get_args(t) if a is not type(None)]
        t = args[0] if args else str
        origin = typing.get_origin(t)
    if origin in (list, tuple):
        return "list", []
    if isinstance(t, type) and issubclass(t, Enum):
        return "choice", [str(m.value) for m in t]
    if t is bool:
        return "flag", []
    if t is int:
        return "int", []
    if t is float:
        return "float", []
    if isinstance(t, type) and issubclass(t, Path):
        return "path", []
    return "str", []


def _introspect_cli() -> list[CommandModel]:
    from sdbench.cli import _load_commands, app

    _load_commands()
    out: list[CommandModel] = []

    def walk(typer_app: Any, prefix: list[str]) -> None:
        for ci in typer_app.registered_commands:
            cb = ci.callback
            name = ci.name or cb.__name__.replace("_", "-")
            try:
                hints = typing.get_type_hints(cb)
            except Exception:
                hints = {}
            opts, argsm = [], []
            for pname, p in inspect.signature(cb).parameters.items():
                info = p.default
                kind, choices = _kind_of(hints.get(pname, str), info)
                cls = type(info).__name__
                if cls == "OptionInfo":
                    decls: list[str] = []
                    for d in (info.param_decls or ()):
                        decls.extend(x for x in d.split("/") if x.startswith("-"))
                    if not decls:
                        decls = ["--" + pname.replace("_", "-")]
                    opts.append(OptionModel(decls, kind, choices, getattr(info, "min", None),
                                            getattr(info, "max", None)))
                elif cls == "ArgumentInfo":
                    argsm.append((pname, kind if kind != "list" else "str", kind == "list"))
            out.append(CommandModel(prefix + [name], opts, argsm))
        for gi in getattr(typer_app, "registered_groups", []):
            sub = gi.typer_instance
            gname = gi.name or getattr(sub.info, "name", None)
            if sub is not None and gname:
                walk(sub, prefix + [gname])

    walk(app, [])
    return out


# ---- safety --------------------------------------------------------------------------------------

class UnsafeCase(Exception):
    pass


def _tokens_of(case: dict) -> list[str]:
    toks: list[str] = []
    for s in case["steps"]:
        toks.extend(s.get("argv", []))
    return toks


def check_safe(case: dict) -> None:
    """Refuse a case that could touch anything outside its directory."""
    toks = _tokens_of(case)
    names_device = False
    for t in toks:
        vals = [t] + ([t.split("=", 1)[1]] if t.startswith("-") and "=" in t else [])
        if t.startswith("-") and "=" in t:
            vals = vals[1:]  # --opt=value: check the value
        for v in vals:
            if v.startswith("/"):
                if v in SAFE_DEVICES:
                    names_device = True
                elif not v.startswith(CASE_TOKEN):
                    raise UnsafeCase(f"absolute path outside the case: {v!r}")
            if "/dev/" in v and v not in SAFE_DEVICES:
                raise UnsafeCase(f"device path {v!r}")
            if ".." in v.split("/") and not t.startswith("--set"):
                raise UnsafeCase(f"path leaves the case directory: {v!r}")
        if t in FORBIDDEN_OPTIONS:
            raise UnsafeCase(f"forbidden option {t}")
    if names_device and any(t in ("--allow-write", "--yes", "-y") for t in toks):
        raise UnsafeCase("--allow-write/--yes together with a device path")
    for i, t in enumerate(toks):
        if t == "--dask" and (i + 1 >= len(toks) or toks[i + 1] not in DASK_GARBAGE):
            raise UnsafeCase("--dask with a usable address")
        if t.startswith("--dask=") and t[7:] not in DASK_GARBAGE:
            raise UnsafeCase("--dask with a usable address")
    for f in case["files"]:
        p = f["path"]
        if p.startswith("/") or ".." in p.split("/"):
            raise UnsafeCase(f"file outside the case: {p}")
        if "b64" in f and p.endswith(".toml"):  # files sdbench may open as configuration
            text = base64.b64decode(f["b64"])
            for dev in _device_mentions(text):
                if dev not in SAFE_DEVICES:
                    raise UnsafeCase(f"file {p} names device {dev}")
    for k, v in case.get("env", {}).items():
        if isinstance(v, str) and v.startswith("/") and not v.startswith(CASE_TOKEN) and v not in SAFE_DEVICES:
            raise UnsafeCase(f"environment {k}={v!r} outside the case")


def _device_mentions(data: bytes) -> list[str]:
    out = []
    start = 0
    while True:
        i = data.find(b"/dev/", start)
        if i < 0:
            return out
        j = i + 5
        while j < len(data) and (chr(data[j]).isalnum() or data[j] in b"_-./"):
            j += 1
        out.append(data[i:j].decode("ascii", "replace").rstrip("."))
        start = j


# ---- fixtures every case directory has -----------------------------------------------------------

def fixtures(ctx: Context) -> list[dict]:
    cheap = ctx.scenarios.get("espidf-memory") or next(iter(ctx.scenarios.values()))
    sweep_spec = ('base = "esp32s3-sdmmc4-40mhz"\nname = "tiny"\n\n[fixed]\n"raw.total_bytes" = 65536\n\n'
                  '[grid]\n"raw.passes" = [1, 2]\n')
    job = 'rw = "write"\nbs = "4k"\nsize = "256k"\n\n[seqw]\n\n[seqr]\nrw = "read"\n'
    return [
        {"path": "dir", "dir": True},
        {"path": "dir.toml", "dir": True},
        {"path": "fifo", "fifo": True},
        {"path": "fifo.toml", "fifo": True},
        text_file("empty.txt", ""),
        text_file("text.txt", "hello\nworld\n"),
        {"path": "img.bin", "size": 4 << 20},
        {"path": "img511.bin", "size": 511},
        {"path": "img0.bin", "size": 0},
        text_file("loop_a.toml", 'extends = "loop_b.toml"\n'),
        text_file("loop_b.toml", 'extends = "loop_a.toml"\n'),
        text_file("valid.toml", cheap),
        text_file("bad.toml", "[sd\nmedia = \n"),
        text_file("spec.toml", sweep_spec),
        text_file("job.toml", job),
        {"path": "espidf.log", "b64": b64(ctx.samples["espidf"])},
        {"path": "fio.json", "b64": b64(ctx.samples["fio"])},
        {"path": "sdfat.txt", "b64": b64(ctx.samples["sdfat"])},
    ] + ([{"path": "results.json", "b64": b64(ctx.samples["json"])}] if "json" in ctx.samples else [])


# ---- kind: scenario files ------------------------------------------------------------------------

def _special_scenario_op(rng: random.Random, tree: dict) -> list:
    r = rng.random()
    if r < 0.3:
        v = rng.choice(["missing-scenario", "missing.toml", "scen.toml", "loop_a.toml", "dir.toml", "fifo.toml",
                        "valid.toml", "bad.toml", "_p2-spi25", "espidf-memory", "", " ", 1, [], {}, True,
                        ["espidf-memory"], "text.txt", "@CASE@/valid.toml", huge_string(rng)])
        if v == "fifo.toml" and rng.random() < 0.7:
            v = "dir.toml"  # keep FIFOs (which block readers) rare
        return ["set", ["extends"], v]
    if r < 0.5:
        return ["set", ["protocol"], rng.choice(["espidf", "p2", "raw", "fs_tests", "usbmsc", "ESPIDF", "nope", "",
                                                 ["espidf"], 1, {}, "raw "])]
    if r < 0.8:
        media = rng.choice(["device", "image", "image", "device", "memory", "sim", "sim-nor", "nope", "", 3,
                            ["sim"]])
        sd = {"media": media}
        if media in ("device", "image"):
            sd["path"] = rng.choice(["img.bin", "img.bin", "img511.bin", "img0.bin", "missing.bin", "dir", "fifo",
                                     "", "@CASE@/img.bin", "text.txt", "/dev/null", "/dev/zero", "/dev/full"])
            if media == "device":
                if sd["path"] in SAFE_DEVICES:
                    sd["allow_write"] = False
                else:
                    sd["allow_write"] = rng.random() < 0.7
                    sd["yes"] = rng.random() < 0.9
                if rng.random() < 0.5:
                    sd[rng.choice(["offset_bytes", "size_bytes"])] = pool_value(rng, 4096)
                if rng.random() < 0.3:
                    sd["direct"] = rng.choice(["auto", "on", "off", "x", True])
            if rng.random() < 0.3:
                sd["sector_size_bytes"] = rng.choice([512, 4096, 0, 1000, -512])
        elif media == "memory" and rng.random() < 0.7:
            sd["capacity_bytes"] = pool_value(rng, 16_000_000)
        return ["set", ["sd"], sd]
    return ["set", [rng.choice(["espidf", "p2", "raw", "sd", "flash", "sd_fat", "sd_littlefs", "fs_tests",
                                "usbmsc"])], rng.choice([1, "x", [], [{}], True, math.nan])]


def gen_scenario(rng: random.Random, ctx: Context) -> dict:
    base = rng.choice(ctx.cheap)
    merged = rng.random() < 0.7
    tree = ctx.tree(base, merged=merged)
    extra = [k for k in ctx.schema_keys() if k and k[0] in tree]
    ops: list[list] = []
    gentle = rng.random() < 0.4  # plausible numeric edits: get past validation into the protocols
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3, 4])):
        cur = apply_tree_ops(tree, ops)
        op = gentle_tree_op(rng, cur) if gentle else None
        if op is None:
            op = _special_scenario_op(rng, cur) if rng.random() < 0.25 else random_tree_op(rng, cur, extra)
        ops.append(op)
    if not gentle and rng.random() < 0.12:
        data = toml_dumps(apply_tree_ops(tree, ops)).encode()
        ops.append(random_text_op(rng, data))
    extra_args = rng.choice([[], [], [], ["-f", "json"], ["-f", "md"], ["--json", "out.json"],
                             ["-f", "espidf", "--json", "@CASE@/out.json"]])
    return {"base": base, "merged": merged, "ops": ops, "args": extra_args, "save": rng.random() < 0.1}


def build_scenario(plan: dict, ctx: Context) -> dict:
    tree = ctx.tree(plan["base"], merged=plan["merged"])
    tree = apply_tree_ops(tree, plan["ops"])
    data = apply_text_ops(toml_dumps(tree).encode("utf-8", "surrogatepass"), plan["ops"])
    argv = ["run", "scen.toml", "-q", "--runs", "1"] + (["--save"] if plan["save"] else ["--no-save"]) + plan["args"]
    steps = [{"argv": argv}]
    if plan["save"]:
        steps.append({"argv": ["show", "latest"]})
    return {"files": [{"path": "scen.toml", "b64": b64(data)}], "steps": steps, "env": {},
            "desc": f"{plan['base']}{'' if plan['merged'] else ' (extends kept)'}: "
                    + "; ".join(describe_op(o) for o in plan["ops"])}


# ---- kind: --set values --------------------------------------------------------------------------

SET_GARBAGE = ["", "=", "[", "{", "'", '"', "x y", "1 2", "4k", "1e999", "+1", "-0", "0b102", "--runs", "nan",
               "[1,", "{a=", "'''", "\\", "é", "1979-05-27T07:32:00Z", "07:32:00", "1979-05-27", "0x", "1__0",
               "[[]]", "{a={b={c=1}}}", "[1, 'a', 2.5, true]", "inf", "-inf", "0o777", "1.7976931348623157e309",
               "\x1b[0m", "\udcff", "true false"]
WEIRD_KEYS = ["zz.unknown", "espidf.zz", "a..b", ".a", "a.", "", " ", "=", "espidf.runs.x", "sd", "espidf",
              "protocol", "extends", "name", "seed", "sd.media", "sd.cache.blocks", "sd.cache", "é.ü",
              "sd.bus.clock_hz.hz", "espidf..runs", "  espidf.runs  ", "ESPIDF.RUNS", "raw.passes", "description",
              "sd.path", "flash.media", "fs_tests.cache_blocks", "usbmsc.request_bytes", "sd.card", "sd.host"]


def _dotted_keys(tree: dict) -> list[str]:
    return [".".join(map(str, p)) for p in paths(tree) if all(isinstance(x, str) for x in p)]


def gen_set(rng: random.Random, ctx: Context) -> dict:
    base = rng.choice(ctx.cheap)
    tree = ctx.tree(base)
    keys = _dotted_keys(tree)
    known = [".".join(k) for k in ctx.schema_keys()]
    items = []
    gentle = rng.random() < 0.4
    for _ in range(rng.choice([1, 1, 1, 2, 2, 3])):
        op = gentle_tree_op(rng, tree) if gentle else None
        if op is not None:
            items.append(".".join(map(str, op[1])) + "=" + toml_value(op[2]))
            continue
        r = rng.random()
        key = rng.choice(keys) if r < 0.5 else (rng.choice(known) if r < 0.8 and known else rng.choice(WEIRD_KEYS))
        if rng.random() < 0.65:
            cur = None
            try:
                cur = _get_dotted(tree, key)
            except Exception:
                pass
            value = toml_value(pool_value(rng, cur))
        else:
            value = rng.choice(SET_GARBAGE + [huge_string(rng, slash=False)])
        items.append(key if rng.random() < 0.04 else f"{key}={value}")
    flags = rng.choice([[], [], [], ["--seed", str(rng.choice([0, -1, 2 ** 64, 7]))], ["-f", "json"]])
    return {"base": base, "ops": [["setarg", s] for s in items], "args": flags}


def _get_dotted(tree: dict, key: str) -> Any:
    node: Any = tree
    for p in key.split("."):
        node = node[p]
    return node


def build_set(plan: dict, ctx: Context) -> dict:
    argv = ["run", plan["base"], "--no-save", "-q", "--runs", "1"] + plan["args"]
    for op in plan["ops"]:
        argv += ["--set", op[1]]
    return {"files": [], "steps": [{"argv": argv}], "env": {},
            "desc": f"{plan['base']} " + " ".join(f"--set {op[1][:80]!r}" for op in plan["ops"])}


# ---- kind: import files --------------------------------------------------------------------------

def _json_tree_op(rng: random.Random, tree: Any) -> list:
    return random_tree_op(rng, tree, ())


def gen_import(rng: random.Random, ctx: Context) -> dict:
    source = rng.choice([s for s in ("espidf", "fio", "sdfat", "json", "json") if s in ctx.samples])
    data = ctx.samples[source]
    ops: list[list] = []
    structured = source in ("fio", "json") and rng.random() < 0.5
    if structured:
        prefix, tree = _split_json(data)
        for _ in range(rng.choice([1, 1, 2, 3])):
            ops.append(_json_tree_op(rng, apply_tree_ops(tree, ops)))
        data = prefix + json_dumps(apply_tree_ops(tree, ops)).encode("utf-8", "surrogatepass")
    n_text = rng.choice([0, 1, 1, 2, 3]) if structured else rng.choice([1, 1, 2, 3, 4])
    for _ in range(n_text):
        if source in ("fio", "json") and rng.random() < 0.08:
            ops.append(["nest", rng.randrange(50), rng.choice([50, 5000, 200_000])])
        else:
            ops.append(random_text_op(rng, data))
    fmt = None
    if rng.random() < 0.15:
        fmt = rng.choice(["espidf", "fio", "sdfat", "json"])
    scenario = rng.choice([None] * 8 + ["", "x", huge_string(rng, slash=False), "espidf-memory"])
    follow = ["runs", "show"]
    follow.append(rng.choice(["export-json", "export-csv", "export-md", "export-espidf"]))
    if rng.random() < 0.4:
        follow.append("compare")
    if rng.random() < 0.15:
        follow.append("report")
    return {"source": source, "structured": structured, "ops": ops, "fmt": fmt, "scenario": scenario,
            "follow": follow}


def _split_json(data: bytes) -> tuple[bytes, Any]:
    """(text before the document, the parsed document): fio prints notes before its JSON."""
    i = data.find(b"{")
    return data[:i], json.loads(data[i:])


def _apply_nest(data: bytes, op: list) -> bytes:
    import re

    matches = list(re.finditer(rb"-?\d+(?:\.\d+)?", data))
    if not matches:
        return data
    m = matches[min(op[1], len(matches) - 1)]
    n = op[2]
    return data[:m.start()] + b"[" * n + m.group() + b"]" * n + data[m.end():]


def _follow_steps(follow: list[str], db: list[str]) -> list[dict]:
    steps = []
    for f in follow:
        if f == "runs":
            steps.append({"argv": ["runs"] + db})
        elif f == "show":
            steps.append({"argv": ["show", "latest"] + db})
        elif f == "export-both":
            steps.append({"argv": ["export", "1", "latest", "-f", "csv"] + db})
        elif f.startswith("export-"):
            steps.append({"argv": ["export", "latest", "-f", f[7:]] + db})
        elif f == "compare":
            steps.append({"argv": ["compare", "1", "latest"] + db})
        elif f == "compare-table":
            steps.append({"argv": ["compare", "latest", "--table"] + db})
        elif f == "report":
            steps.append({"argv": ["report", "latest", "--html", "out.html"] + db})
        elif f == "runs-filtered":
            steps.append({"argv": ["runs", "--since", "1d", "--status", "complete", "-n", "2"] + db})
        elif f == "show-1":
            steps.append({"argv": ["show", "1", "-f", "md"] + db})
        elif f.startswith("import-"):
            steps.append({"argv": ["import", {"espidf": "espidf.log", "json": "results.json",
                                              "fio": "fio.json"}[f[7:]]] + db})
        elif f.startswith("db "):
            steps.append({"argv": f.split() + db})
    return steps


def build_import(plan: dict, ctx: Context) -> dict:
    data = ctx.samples[plan["source"]]
    if plan["structured"]:
        prefix, tree = _split_json(data)
        data = prefix + json_dumps(apply_tree_ops(tree, plan["ops"])).encode("utf-8", "surrogatepass")
    for op in plan["ops"]:
        if op[0] == "nest":
            data = _apply_nest(data, op)
        elif op[0] not in ("set", "del", "wrap"):
            data = apply_text_ops(data, [op])
    name = {"espidf": "in.log", "fio": "in.json", "sdfat": "in.txt", "json": "in.json"}[plan["source"]]
    db = ["--db", "t.db"]
    argv = ["import", name] + db
    if plan["fmt"]:
        argv += ["-f", plan["fmt"]]
    if plan["scenario"] is not None:
        argv += ["--scenario", plan["scenario"]]
    steps = [{"argv": argv}] + _follow_steps(plan["follow"], db)
    return {"files": [{"path": name, "b64": b64(data)}], "steps": steps, "env": {},
            "desc": f"{plan['source']} sample: " + "; ".join(describe_op(o) for o in plan["ops"])}


# ---- kind: store files ---------------------------------------------------------------------------

RECORD_PATHS = ["$.scenario", "$.stack", "$.metadata", "$.warnings", "$.source", "$.clock", "$.seed", "$.protocol",
                "$.metadata.device", "$.stack.sd", "$.metadata.p2_summary", "$.metadata.rows", "$.rows",
                "$.started_utc", "$.format_version", "$.extra"]
ROW_PATHS = ["$.label", "$.samples_ms", "$.counters", "$.time_ms", "$.runs", "$.bytes", "$.op", "$.mib_s",
             "$.time_ms_median", "$.time_ms_stdev", "$.reported_value", "$.figure", "$.counters.writes",
             "$.samples_ms[0]", "$.unit"]
JSON_VALUES = ["null", "json('[]')", "json('{}')", "1e308", "-1", "'x'", "json('[1, \"a\"]')",
               "9223372036854775807", "json('{\"a\": {\"b\": []}}')", "''", "0", "json('[null]')", "-1e308",
               "json('\"\"')", "json('[[[[[[[[[[[]]]]]]]]]]]')"]
RAW_JSON = ["", "{", "null", "[]", "1", '"x"', '{"rows": 1}', '{"scenario": null}', "NaN", "[" * 5000 + "]" * 5000,
            '{"scenario": "s", "rows": [], "stack": 5}', "\x00", "{}"]


def _store_corruption(rng: random.Random) -> dict:
    r = rng.random()
    p = "store.db"
    if r < 0.14:
        edits = []
        for _ in range(rng.choice([1, 1, 2, 8, 64])):
            where = rng.choice([0, 16, 18, 24, 28, 40, 44, 48, 52, 56, 60, 64, 68, 92, 96, 100, rng.random(),
                                rng.random(), rng.random()])
            edits.append([where, b64(bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 4, 16, 512]))))])
        return {"action": "corrupt_bytes", "args": {"path": p, "edits": edits}}
    if r < 0.22:
        return {"action": "truncate", "args": {"path": p, **rng.choice([{"size": 0}, {"size": 100}, {"size": 512},
                                                                        {"size": 4096}, {"frac": 0.5},
                                                                        {"frac": 0.9}])}}
    if r < 0.27:
        return {"action": "write", "args": {"path": p, "drop_wal": True,
                                            "text": rng.choice(["hello", "SQLite format 3", "", "{}\n",
                                                                "SQLite format 3\x00" + "x" * 200])}}
    if r < 0.31:
        return {"action": "foreign_sqlite", "args": {"path": p}}
    if r < 0.35:
        return {"action": "replace_with", "args": {"path": p, "what": rng.choice(["dir", "empty", "dir", "fifo"])}}
    if r < 0.39:
        return {"action": "write", "args": {"path": p + "-wal", "b64": b64(bytes(rng.randrange(256)
                                                                                for _ in range(4096)))}}
    # SQL edits
    stmts: list[Any]
    s = rng.random()
    if s < 0.12:
        stmts = [rng.choice(["PRAGMA user_version = 99", "PRAGMA user_version = 0", "PRAGMA user_version = -1",
                             "PRAGMA application_id = 1", "PRAGMA application_id = 0",
                             "PRAGMA user_version = 2147483647"])]
    elif s < 0.4:
        col = rng.choice(["record_json", "record_json", "host_json", "device_json"])
        if rng.random() < 0.6 and col == "record_json":
            stmts = [f"UPDATE runs SET record_json = json_set(record_json, '{rng.choice(RECORD_PATHS)}', "
                     f"{rng.choice(JSON_VALUES)})"]
        else:
            stmts = [[f"UPDATE runs SET {col} = ?", [rng.choice(RAW_JSON)]]]
    elif s < 0.6:
        if rng.random() < 0.6:
            stmts = [f"UPDATE rows SET row_json = json_set(row_json, '{rng.choice(ROW_PATHS)}', "
                     f"{rng.choice(JSON_VALUES)})" + rng.choice(["", " WHERE seq = 0"])]
        else:
            stmts = [["UPDATE rows SET row_json = ?", [rng.choice(RAW_JSON)]]]
    elif s < 0.8:
        stmts = [rng.choice([
            "UPDATE runs SET status = 'weird'", "UPDATE runs SET status = 'incomplete', finished_utc = NULL",
            "UPDATE runs SET created_utc = 'yesterday'", "UPDATE runs SET created_utc = ''",
            "UPDATE runs SET seed = 'x'", "UPDATE runs SET seed = 9223372036854775807",
            "UPDATE runs SET source = 'alien'", "UPDATE runs SET clock = 'sundial'",
            "UPDATE runs SET scenario = ''", "UPDATE runs SET sdbench_version = '99.0'",
            "UPDATE runs SET id = -5", "UPDATE runs SET id = 9223372036854775807",
            "UPDATE rows SET time_ms = 'x'", "UPDATE rows SET bytes = -1", "UPDATE rows SET runs = 0",
            "UPDATE rows SET mib_s = 1e308", "UPDATE rows SET seq = seq + 1000", "UPDATE rows SET label = ''",
            "UPDATE rows SET time_ms = -1e308", "UPDATE rows SET runs = 'many'", "UPDATE rows SET op = 'x'",
            "UPDATE runs SET finished_utc = 'never'", "UPDATE runs SET sweep_id = 'x'",
        ])]
    else:
        stmts = [rng.choice([
            "DELETE FROM runs", "DELETE FROM rows", "DROP TABLE rows", "DROP TABLE runs",
            "ALTER TABLE runs RENAME COLUMN record_json TO rj", "ALTER TABLE rows DROP COLUMN row_json",
            "DROP INDEX runs_by_created", "CREATE TABLE extra (x)",
            "INSERT INTO rows SELECT run_id + 100, seq, label, op, bytes, runs, time_ms, mib_s, row_json FROM rows",
            "DELETE FROM rows WHERE seq % 2 = 0",
        ])]
    return {"action": "sql", "args": {"path": p, "statements": stmts}}


def gen_store(rng: random.Random, ctx: Context) -> dict:
    sample = rng.choice([s for s in ("espidf", "json", "fio") if s in ctx.samples])
    twice = rng.random() < 0.5
    ops = [["act", _store_corruption(rng)] for _ in range(rng.choice([1, 1, 1, 2]))]
    menu = ["show", "runs-filtered", "show-1", "export-json", "export-csv", "export-md", "export-both", "compare",
            "compare-table", "report", "import-espidf", "import-json"]
    db_cmd = [" ".join(c.path) for c in ctx.cli if c.path and c.path[0] == "db"]
    menu += db_cmd * 3
    follow = ["runs"] + rng.sample(menu, k=min(len(menu), rng.choice([2, 3, 4])))
    if "report" in follow and rng.random() < 0.6:
        follow.remove("report")
    return {"sample": sample, "twice": twice, "ops": ops, "follow": follow}


def build_store(plan: dict, ctx: Context) -> dict:
    src = {"espidf": "espidf.log", "json": "results.json", "fio": "fio.json"}[plan["sample"]]
    db = ["--db", "store.db"]
    steps = [{"argv": ["import", src] + db}]
    if plan["twice"]:
        steps.append({"argv": ["import", "espidf.log"] + db})
    for op in plan["ops"]:
        steps.append(op[1])
    steps += _follow_steps([f.replace("import-json", "import-json" if "json" in ctx.samples else "import-espidf")
                            for f in plan["follow"]], db)
    desc = "; ".join(f"{o[1]['action']} {json.dumps(o[1]['args'])[:120]}" for o in plan["ops"])
    return {"files": [], "steps": steps, "env": {}, "desc": f"store from {plan['sample']}: {desc}"}


# ---- kind: CLI argv ------------------------------------------------------------------------------

INT_GARBAGE = ["-1", "0", "1", "2", "100000", "100001", "9999999999999999999999", "nan", "inf", "1.5", "x", "",
               "0x10", "1e3", "-0", " 1", "\uff11", "--", "-"]
FLOAT_GARBAGE = ["nan", "inf", "-inf", "-1", "0", "1e-9", "1e308", "1e999", "x", "", "0.5", "-0", "1,5", "NaN"]
STR_GARBAGE = ["", "x", " ", "-", "--", "é😀", "\x1b[31m", "%s%n", "{}", "a\nb", "\udcff", "latest", "0", "-1"]
SIZE_VALUES = ["1M", "4k", "0", "-1", "x", "", "1.5M", "nan", "1e3", "18446744073709551616", "99999999999999999999T",
               "512", "511", "4K", "1m", "64k", "inf", "-4k", "0x1000", "1 M", "256k"]
OUT_PATHS = ["out.json", "sub/out.json", "dir", "fifo", "/dev/null", "/dev/full", "", ".", "text.txt", "-",
             "~/o.json", "@CASE@/abs.json", "x" * 300, "a\nb.json", "dir/", "empty.txt/x"]
IN_PATHS = ["missing.txt", "dir", "fifo", "/dev/null", "/dev/zero", "empty.txt", "text.txt", "", ".", "bad.toml",
            "valid.toml", "espidf.log", "fio.json", "img.bin", "x" * 300]
DB_PATHS = ["t.db", "sub/t.db", "dir", "empty.txt", "text.txt", "", "~/t.db", "@CASE@/t.db", "espidf.log",
            "img.bin", "fifo", "/dev/null", "x" * 300]
DEVICE_VALUES = ["/dev/null", "/dev/zero", "/dev/full", "img.bin", "img511.bin", "img0.bin", "missing.img", "dir",
                 "fifo", "", "text.txt", "@CASE@/img.bin"]
DIR_VALUES = ["dir", "@CASE@/dir", "missing_dir", "text.txt", "fifo", "", ".", "dir/sub"]
RUN_REFS = ["latest", "1", "2", "0", "-1", "abc", "99999999999999999999", "1.5", "", "latest ", " 1", "LATEST",
            "#1", "1e3", "0x1"]
SINCE_VALUES = ["1d", "90m", "12h", "2w", "2024-05-01", "2024-05-01T10:00", "0d", "-1d", "x", "", "99999999999d",
                "2024-13-45", "1y", "nan", "9999-12-31", "0001-01-01", "1e9d", "1.5h", "now"]
HEX_VALUES = ["", "x", "00", "0" * 32, "f" * 32, "0" * 31, "g" * 32, "0" * 128, "f" * 16, "0x" + "0" * 30,
              "zz", "1" * 1000, "035344534333324780" + "0" * 14]


def _value_for(opt: OptionModel, rng: random.Random, target: str | None) -> str:
    name = opt.decls[0]
    if name == "--db":
        return rng.choice(DB_PATHS)
    if name in ("--json", "--output", "--html", "--plot") or (name == "-o" and opt.kind == "path"):
        return rng.choice(OUT_PATHS)
    if name in ("--png", "--svg", "--output-dir"):
        return rng.choice(["plots", "dir", "text.txt", "fifo", "", "sub/deeper", "/dev/null", "."])
    if name in ("--data", "--job"):
        return rng.choice(IN_PATHS + (["job.toml"] * 3 if name == "--job" else []))
    if name == "--device":
        return rng.choice(DEVICE_VALUES)
    if name == "--dir":
        return rng.choice(DIR_VALUES)
    if name == "--set":
        return rng.choice(["espidf.runs=1", "x=1", "=", "", "espidf.parts=['sd_raw']", "sd.media=\"device\"",
                           "seed=-1", "a..b=1"])
    if name == "--since":
        return rng.choice(SINCE_VALUES)
    if name == "--dask":
        return rng.choice(DASK_GARBAGE)
    if name in ("--workers", "-j"):
        return rng.choice(["1", "1", "0", "-1", "x", "nan", "5000", ""])
    if name in ("--size", "--offset", "--bs", "--chunk"):
        vals = SIZE_VALUES if target != "dir" else [v for v in SIZE_VALUES if v not in
                                                     ("18446744073709551616", "99999999999999999999T")]
        return rng.choice(vals)
    if name == "--runtime-s":
        return rng.choice(["0.2", "0", "-1", "nan", "inf", "x", "", "1e-9", "-inf"])
    if name in ("--cid", "--csd", "--scr", "--ssr"):
        return rng.choice(HEX_VALUES)
    # counts: out-of-range and malformed values, but no large valid ones (they only make a valid run long)
    if name == "--runs":
        return rng.choice(["1", "1", "0", "-1", "2", "x", "", "nan", "100001", "99999999999999999999", "1.5"])
    if name in ("--loops", "--passes"):
        return rng.choice(["1", "1", "0", "-1", "2", "x", "", "nan", "1001", "99999999999999999999"])
    if name == "--iodepth":
        return rng.choice(["1", "2", "0", "-1", "x", "", "257", "99999999999999999999"])
    if name == "--rwmixread":
        return rng.choice(["0", "50", "100", "101", "-1", "x", "", "nan"])
    if name in ("--limit", "-n", "--skip"):
        return rng.choice(["1", "1", "0", "-1", "2", "x", "", "nan", "1001", "99999999999999999999"])
    if opt.kind == "int":
        return rng.choice(INT_GARBAGE)
    if opt.kind == "float":
        return rng.choice(FLOAT_GARBAGE + (["1e-6", "0.5", "1e-7"] if name == "--alpha" else []))
    if opt.kind == "choice":
        return rng.choice(opt.choices * 3 + ["", "x", opt.choices[0].upper() if opt.choices else "X"])
    if opt.kind == "path":
        return rng.choice(IN_PATHS + OUT_PATHS)
    if name in ("--rw",):
        return rng.choice(["read", "write", "randread", "randwrite", "randrw", "x", "", "READ"])
    if name == "--verify":
        return rng.choice(["none", "crc32c", "md5", ""])
    if name == "--mode":
        return rng.choice(["all", "read", "write", "x", ""])
    if name in ("--scenario", "-s"):
        return rng.choice(["esp", "", "x" * 1000, "%", "_", "'", "espidf-memory"])
    return rng.choice(STR_GARBAGE + [huge_string(rng, slash=False)[:5000]])


def _positionals(cmd: CommandModel, rng: random.Random, ctx: Context) -> list[str]:
    top = cmd.path[0]
    out: list[str] = []
    for name, kind, variadic in cmd.arguments:
        n = rng.choice([0, 1, 1, 1, 2, 3]) if variadic else rng.choice([1, 1, 1, 1, 1, 0])
        for _ in range(n):
            if top in ("run", "validate"):
                v = rng.choice(ctx.cheap * 2 + ["valid.toml", "bad.toml", "dir.toml", "missing.toml", "loop_a.toml",
                                                "nope", "", "-", "_p2-spi25", "text.txt", "espidf-memor"])
            elif top == "trace":
                v = rng.choice(SIM_SD_SCENARIOS + ["espidf-memory", "valid.toml", "bad.toml", "nope", ""])
            elif top == "calibrate":
                v = rng.choice(["nope", "", "x" * 100, "-"])
            elif top in ("show", "export", "compare", "report"):
                v = rng.choice(RUN_REFS)
            elif top == "import":
                v = rng.choice(IN_PATHS + ["results.json", "sdfat.txt", "espidf.log", "fio.json"] * 2)
            elif top == "preset":
                v = rng.choice(["cdm", "a1", "sdfat", "cdm", "x", ""])
            elif top == "info":
                v = rng.choice(DEVICE_VALUES)
            elif top == "sweep":
                v = rng.choice(["spec.toml", "spec.toml", "bad.toml", "missing.toml", "dir", "text.txt", "nope", ""])
            elif kind == "path":
                v = rng.choice(IN_PATHS + DB_PATHS)
            elif kind == "int":
                v = rng.choice(INT_GARBAGE)
            else:
                v = rng.choice(RUN_REFS + STR_GARBAGE)
            out.append(v)
    if top == "calibrate" and not out:
        out.append("nope")  # never run the real fits: they take minutes
    if top == "validate" and not out:
        out.append(rng.choice(ctx.cheap))  # without names, validate runs every scenario
    return out


COMMAND_WEIGHTS = {"run": 6, "scenarios": 1, "calibrate": 1, "validate": 1, "trace": 2, "runs": 3, "show": 3,
                   "export": 3, "compare": 3, "import": 3, "report": 2, "fio": 3, "stream": 2, "preset": 3,
                   "info": 2, "sweep": 2}


def gen_argv(rng: random.Random, ctx: Context) -> dict:
    cmds = [c for c in ctx.cli]
    weights = [COMMAND_WEIGHTS.get(c.path[0], 2) for c in cmds]
    r = rng.random()
    if r < 0.04:
        return {"cmd": [], "ops": [[rng.choice(["--version", "--help", "nope", "", "--nope", "-x", "run --help"])]],
                "env": {}, "prepare": False}
    cmd = rng.choices(cmds, weights)[0]
    target = None
    opts = [o for o in cmd.options if not set(o.decls) & FORBIDDEN_OPTIONS]
    groups: list[list[str]] = []
    pos = _positionals(cmd, rng, ctx)
    for v in pos:
        groups.append([v])
    names = {o.decls[0] for o in opts}
    if "--device" in names and "--dir" in names and rng.random() < 0.85:
        target = rng.choice(["device", "dir", "dir"])
    chosen = rng.sample(opts, k=min(len(opts), rng.choice([0, 1, 2, 2, 3, 4, 5])))
    for o in opts:
        if target and o.decls[0] == f"--{target}" and o not in chosen:
            chosen.append(o)
    for o in chosen:
        if o.decls[0] == "--dask" and rng.random() < 0.7:
            continue
        decl = rng.choice(o.decls)
        if o.kind == "flag":
            groups.append([decl])
            continue
        v = _value_for(o, rng, target)
        style = rng.random()
        if style < 0.05:
            groups.append([decl])  # value missing
        elif style < 0.12 and decl.startswith("--"):
            groups.append([f"{decl}={v}"])
        else:
            groups.append([decl, v])
    if rng.random() < 0.08:
        groups.append([rng.choice(["--nope", "-Z", "--runs=", "--", "--db", "extra-arg"])])
    rng.shuffle(groups)
    env: dict[str, Any] = {}
    e = rng.random()
    if e < 0.08:
        env["SDBENCH_DB"] = None
    elif e < 0.16:
        env["SDBENCH_DB"] = rng.choice(["", "dir", "fifo", "~/x.db", "text.txt", "@CASE@/sub/deeper/x.db",
                                        "espidf.log"])
    prepare = cmd.path[0] in ("show", "export", "compare", "report", "runs") and rng.random() < 0.7
    return {"cmd": cmd.path, "ops": groups, "env": env, "prepare": prepare}


def _argv_guards(cmd: list[str], argv: list[str]) -> list[str]:
    """Keep a valid real-media or simulation case short: small sizes and times unless the case set them."""
    def has(*names: str) -> bool:
        return any(a in names or any(a.startswith(n + "=") for n in names) for a in argv)

    top = cmd[0] if cmd else ""
    extra: list[str] = []
    if top in ("run", "trace") and not has("--runs"):
        extra += ["--runs", "1"]
    if top == "run" and not has("--save", "--no-save") and not has("--db"):
        extra += ["--no-save"]
    if top == "stream" and not has("--size"):
        extra += ["--size", "1M"]
    if top == "fio":
        if not has("--size") and not has("--job"):
            extra += ["--size", "256k"]
        if not has("--runtime-s"):
            extra += ["--runtime-s", "1"]
    if top == "preset":
        if not has("--size"):
            extra += ["--size", "1M"]
        if not has("--runtime-s"):
            extra += ["--runtime-s", "0.2"]
        if not has("--loops"):
            extra += ["--loops", "1"]
    if top == "sweep" and not has("--workers", "-j"):
        extra += ["--workers", "1"]
    # `--` ends the options: guards go before it
    if "--" in argv:
        i = argv.index("--")
        return argv[:i] + extra + argv[i:]
    return argv + extra


def build_argv(plan: dict, ctx: Context) -> dict:
    argv = list(plan["cmd"])
    for g in plan["ops"]:
        argv += g
    argv = _argv_guards(plan["cmd"], argv)
    toks = argv
    if any(t in SAFE_DEVICES or any(t.endswith("=" + d) for d in SAFE_DEVICES) for t in toks):
        argv = [t for t in argv if t not in ("--allow-write", "--yes", "-y")]
    steps = []
    if plan.get("prepare"):
        steps.append({"argv": ["import", "espidf.log"]})
        steps.append({"argv": ["import", "results.json" if "json" in ctx.samples else "espidf.log"]})
    steps.append({"argv": argv})
    return {"files": [], "steps": steps, "env": dict(plan.get("env", {})),
            "desc": "sdbench " + " ".join(_short(a) for a in argv)}


def _short(a: str) -> str:
    a = repr(a) if (not a or any(c.isspace() for c in a) or not a.isprintable()) else a
    return a if len(a) <= 60 else a[:40] + f"...({len(a)} chars)"


# ---- dispatch ------------------------------------------------------------------------------------

GENERATORS = {"scenario": (gen_scenario, build_scenario), "set": (gen_set, build_set),
              "import": (gen_import, build_import), "argv": (gen_argv, build_argv),
              "store": (gen_store, build_store)}


def rng_for(kind: str, seed: int, index: int) -> random.Random:
    return random.Random(f"sdbench-fuzz:{kind}:{seed}:{index}")


def generate(kind: str, seed: int, index: int, ctx: Context) -> dict:
    if kind == "regress":
        return generate_regression(index, ctx)
    gen, _ = GENERATORS[kind]
    plan = gen(rng_for(kind, seed, index), ctx)
    case = build(kind, plan, ctx)
    case.update({"id": f"{kind}-{seed}-{index}", "kind": kind, "seed": seed, "index": index})
    return case


def build(kind: str, plan: dict, ctx: Context) -> dict:
    _, b = GENERATORS[kind]
    case = b(copy.deepcopy(plan), ctx)
    case["files"] = fixtures(ctx) + case["files"]
    case["plan"] = plan
    case["kind"] = kind
    check_safe(case)
    return case


def shrink_candidates(plan: dict) -> list[dict]:
    """Plans with one op fewer (the generator's ops are independent edits)."""
    out = []
    ops = plan.get("ops", [])
    for i in range(len(ops)):
        p = copy.deepcopy(plan)
        del p["ops"][i]
        out.append(p)
    for key in ("follow",):
        if key in plan:
            for i in range(len(plan[key])):
                p = copy.deepcopy(plan)
                del p[key][i]
                out.append(p)
    if plan.get("args"):
        p = copy.deepcopy(plan)
        p["args"] = []
        out.append(p)
    return out


# ---- regression cases: minimal forms of failures found by the campaigns --------------------------

LONG_NAME = "A" * 256  # one path component longer than NAME_MAX


def _regressions() -> list[tuple[str, dict]]:
    db = ["--db", "store.db"]
    return [
        ("scenario name longer than NAME_MAX", {"steps": [{"argv": ["run", LONG_NAME, "--no-save", "-q"]}]}),
        ("extends longer than NAME_MAX", {
            "files": [text_file("scen.toml", f'extends = "{LONG_NAME}"\n')],
            "steps": [{"argv": ["run", "scen.toml", "--no-save", "-q", "--runs", "1"]}]}),
        ("sd.host longer than NAME_MAX", {
            "files": [text_file("scen.toml", f'[sd]\nmedia = "sim"\nhost = "{LONG_NAME}"\n')],
            "steps": [{"argv": ["run", "scen.toml", "--no-save", "-q", "--runs", "1"]}]}),
        ("--db longer than NAME_MAX", {"steps": [{"argv": ["runs", "--db", LONG_NAME]},
                                                 {"argv": ["show", "latest", "--db", LONG_NAME]},
                                                 {"argv": ["db", "check", "--db", LONG_NAME]},
                                                 {"argv": ["import", "espidf.log", "--db", LONG_NAME]}]}),
        ("--json/-o longer than NAME_MAX", {"steps": [
            {"argv": ["run", "esp32s3-sdmmc4-40mhz", "--runs", "1", "--no-save", "-q", "--json", LONG_NAME]},
            {"argv": ["import", "espidf.log"]},
            {"argv": ["export", "latest", "-o", LONG_NAME]}]}),
        ("[sd] media = sim-nor", {
            "files": [text_file("scen.toml", 'protocol = "espidf"\n\n[espidf]\nruns = 1\nparts = ["sd_raw"]\n\n'
                                             '[sd]\nmedia = "sim-nor"\n')],
            "steps": [{"argv": ["run", "scen.toml", "--no-save", "-q", "--runs", "1"]}]}),
        ("store with a negative schema version", {"steps": [
            {"argv": ["import", "espidf.log"] + db},
            {"action": "sql", "args": {"path": "store.db", "statements": ["PRAGMA user_version = -100"]}},
            {"argv": ["runs"] + db}, {"argv": ["import", "espidf.log"] + db}]}),
        ("store with schema version -1", {"steps": [
            {"argv": ["import", "espidf.log"] + db},
            {"action": "sql", "args": {"path": "store.db", "statements": ["PRAGMA user_version = -1"]}},
            {"argv": ["runs"] + db}, {"argv": ["import", "espidf.log"] + db}]}),
        ("measurements CSV that is a FIFO (validate)", {
            "steps": [{"argv": ["validate", "--data", "fifo", "espidf-memory"]}]}),
        ("measurements CSV that is a FIFO (calibrate)", {"steps": [{"argv": ["calibrate", "--data", "fifo", "nope"]}]}),
        ("fio job file that is a FIFO", {"steps": [{"argv": ["fio", "--job", "fifo", "--dir", "dir"]}]}),
        ("inputs that are FIFOs", {"steps": [{"argv": ["import", "fifo"]},
                                             {"argv": ["run", "fifo.toml", "--no-save", "-q"]},
                                             {"argv": ["sweep", "fifo", "--workers", "1"]},
                                             {"argv": ["runs", "--db", "fifo"]}]}),
        ("outputs that are devices or FIFOs", {"steps": [
            {"argv": ["run", "esp32s3-sdmmc4-40mhz", "--runs", "1", "--no-save", "-q", "--json", "/dev/null"]},
            {"argv": ["run", "esp32s3-sdmmc4-40mhz", "--runs", "1", "--no-save", "-q", "--json", "/dev/full"]},
            {"argv": ["run", "esp32s3-sdmmc4-40mhz", "--runs", "1", "--no-save", "-q", "--json", "fifo"]},
            {"argv": ["import", "espidf.log"]},
            {"argv": ["export", "latest", "-o", "/dev/full"]},
            {"argv": ["report", "latest", "--html", "/dev/null"]}]}),
        ("refusal of a real target after the 'running' note", {
            "steps": [{"argv": ["run", "--device", "fifo", "--no-save", "--runs", "1"]}]}),
        # issue 32: seven defects found by an independent campaign
        ("calibrate -o a character device or a FIFO (the fit ran, then exit 3)", {"steps": [
            {"argv": ["calibrate", "p2", "-o", "/dev/null", "-q"]}, {"argv": ["calibrate", "p2", "-o", "fifo", "-q"]},
            {"argv": ["calibrate", "--model-error", "-o", "img.bin", "-q"]}]}),
        ("sd.bridge on the Teensy SDIO target (card operations out of time order)", {"steps": [
            {"argv": ["run", "sdfat-bench-teensy41-sdio", "--set", "sd.bridge.link.frame_us=1000", "--set",
                      "sdfat_bench.file_bytes=16384", "--no-save", "-q", "--no-range"]}]}),
        ("a quoted number taken as a number", {"steps": [
            {"argv": ["run", "usb2-reader-generic-sdhc", "--set", 'sd.bridge.link.frame_us="42"', "--no-save",
                      "-q"]}]}),
        ("littlefs block_size of 2 GiB (ran for minutes, Ctrl-C ignored)", {"steps": [
            {"argv": ["run", "logger-sd-littlefs-pauses", "--set", "sd_littlefs.block_size=2147483648",
                      "--no-save", "-q"]}]}),
        ("read-ahead larger than the cache (4096 blocks per 512-byte read)", {"steps": [
            {"argv": ["run", "sdfat-bench-esp32c3-sdspi", "--set", "sd.cache.read_ahead_blocks=4095", "--no-save",
                      "-q"]}]}),
        ("a store without a write bit (import and run appended to it as root)", {"steps": [
            {"argv": ["import", "espidf.log"] + db},
            {"action": "chmod", "args": {"path": "store.db", "mode": 0o444}},
            {"argv": ["import", "espidf.log"] + db}, {"argv": ["run", "espidf-memory", "--runs", "1", "-q"] + db},
            {"argv": ["db", "vacuum"] + db}, {"argv": ["runs"] + db}, {"argv": ["export", "latest", "-f", "csv"] + db}]}),
        ("a bad sector under FatFs (SystemError, exit 3)", {"steps": [
            {"argv": ["run", "espidf-esp32-sdmmc4-40mhz", "--set", "sd.capacity_bytes=67108864", "--set",
                      "sd.faults.bad_sectors=[104]", "--set", 'espidf.parts=["sd_fatfs"]', "--no-save", "-q",
                      "--no-range", "--runs", "2"]}]}),
        ("sizes with suffixes", {"steps": [
            {"argv": ["run", "--device", "img.bin", "--offset", "1M", "--size", "1M", "--no-save", "-q", "--runs",
                      "1"]}, {"argv": ["probe", "img.bin", "--offset", "1x"]}]}),
    ]


def regression_count() -> int:
    return len(_regressions())


def build_regression(plan: dict, ctx: Context) -> dict:
    name, spec = _regressions()[plan["index"] % len(_regressions())]
    return {"files": list(spec.get("files", [])), "steps": spec["steps"], "env": dict(spec.get("env", {})),
            "desc": f"regression: {name}"}


GENERATORS["regress"] = (lambda rng, ctx: {"index": 0, "ops": []}, build_regression)


def generate_regression(index: int, ctx: Context) -> dict:
    case = build("regress", {"index": index, "ops": []}, ctx)
    case.update({"id": f"regress-{index}", "kind": "regress", "seed": 0, "index": index})
    return case
