"""Scenarios: a board + bus + card (or flash) + filesystem configs + protocol,
as data (TOML).  Built-in scenarios live in ``sdbench/data/scenarios``; a user
passes their own file to ``sdbench run my.toml``.

A scenario file may say ``extends = "other-scenario"`` to start from another
one; tables are merged key by key.  Media are chosen by ``media = ...`` in the
``[sd]`` / ``[flash]`` tables (the kinds of :data:`sdbench.stack.MEDIA`); the
stack builder (:mod:`sdbench.stack`) makes what a scenario describes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, is_dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ..cache import CacheConfig
from ..errors import ConfigError
from ..fs.fat import FatConfig
from ..fs.littlefs import LittleFsConfig
from ..media.faults import FaultConfig
from ..media.sim.card import CardProfile
from ..media.sim.esp_flash import EspFlashHostProfile
from ..media.sim.host import HostProfile
from ..media.sim.nor import FlashChipProfile
from ..media.realtarget import NO_WRITES, WriteGrant
from ..options import (apply_overrides, from_mapping, is_shipped_name, parse_toml, read_toml_file, to_mapping,
                       type_hints)
from ..stack import MEDIA, Built, build
from ..stack.bridge import SdBridgeConfig
from ..stack.flash import SimFlashConfig
from ..stack.sd import SimSdConfig
from ..workloads.registry import protocols

DATA = resources.files("sdbench") / "data"
DEFAULT_SCENARIO = "espidf-esp32-sdmmc4-40mhz"


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str = ""
    protocol: str = "espidf"
    seed: int = 1
    sd: dict[str, Any] = field(default_factory=dict)
    flash: dict[str, Any] = field(default_factory=dict)
    sd_fat: FatConfig = field(default_factory=lambda: FatConfig(allocation_unit_bytes=65536, partition_start_lba=63))
    sd_littlefs: LittleFsConfig = field(default_factory=LittleFsConfig)
    #: every protocol table the scenario has, checked: table -> options (ProtocolSpec.config_of reads it)
    options: dict[str, Any] = field(default_factory=dict)
    directory: str = ""   # a mounted directory for the 'dir' part (sdbench run --dir)
    directory_drop_caches: bool = False
    source_dir: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)      # the merged TOML, for --set and metadata
    #: permission to write real media: set by the command line only, never from the scenario's data
    write_grant: WriteGrant = field(default=NO_WRITES, compare=False, repr=False)

    def media_config(self, section: str) -> tuple[str, Any]:
        table = dict(getattr(self, section))
        kind = table.pop("media", None)
        table.pop("cache", None)  # [sd.cache]: a BlockCache around the device, see build()
        table.pop("bridge", None)  # [sd.bridge]: a USB bridge in front of a simulated card
        table.pop("faults", None)  # [sd.faults] / [flash.faults]: a fault wrapper on the medium, see build()
        for key in ("allow_write", "yes"):  # a file may describe real media, never grant writing them
            if key in table:
                raise ConfigError(f"{section}.{key}: permission to write real media comes from the command line "
                                  f"only (--allow-write, --yes), never from a scenario file or --set")
        here = [k for k, m in MEDIA.items() if m.section == section]
        if kind is None:
            raise ConfigError(f"scenario {self.name}: [{section}] needs media = one of {', '.join(here)}")
        if not isinstance(kind, str) or kind not in here:
            raise ConfigError(f"scenario {self.name}: unknown {section}.media {kind!r:.60} (known: {', '.join(here)})")
        return kind, from_mapping(MEDIA[kind].config, table, section)

    def cache_config(self, host: Any = None, section: str = "sd") -> CacheConfig | None:
        """``[sd.cache]`` (or ``[flash.cache]``) as a CacheConfig (cpu_hz defaults to the host profile's), or
        None: no table, or ``blocks = 0`` (no cache, as a sweep grid can say)."""
        media = getattr(self, section)
        table = media.get("cache") if media else None
        if table is None:
            return None
        if not isinstance(table, dict):
            raise ConfigError(f"[{section}.cache] must be a table")
        if host is not None and "cpu_hz" not in table:
            table = {**table, "cpu_hz": host.cpu_hz}
        cfg = from_mapping(CacheConfig, table, f"{section}.cache")
        return cfg if cfg.blocks else None

    def bridge_config(self) -> SdBridgeConfig | None:
        """``[sd.bridge]`` as an SdBridgeConfig, or None."""
        table = self.sd.get("bridge") if self.sd else None
        return None if table is None else from_mapping(SdBridgeConfig, table, "sd.bridge")

    def faults_config(self, section: str) -> FaultConfig | None:
        """``[sd.faults]`` or ``[flash.faults]`` as a FaultConfig, or None."""
        table = getattr(self, section).get("faults") if getattr(self, section) else None
        return None if table is None else from_mapping(FaultConfig, table, f"{section}.faults")

    def clock_kind(self) -> str:
        kinds = {MEDIA[t["media"]].clock for t in (self.sd, self.flash) if t and t.get("media") in MEDIA}
        return "virtual" if "virtual" in kinds else "wall"

    def build(self, recording: Any = None) -> Built:
        """The stack this scenario describes, built (see sdbench.stack); ``recording``: a
        :class:`sdbench.ledger.Recording` for a simulated stack's clock (re-pricing)."""
        return build(self, recording)


#: the stack's own keys; each protocol's option table is a key too (the protocol registry names them)
_SCENARIO_KEYS = {"name", "description", "protocol", "seed", "sd", "flash", "sd_fat", "sd_littlefs", "extends"}


def builtin_names() -> list[str]:
    """Built-in scenarios; files starting with '_' are bases for ``extends`` and not listed."""
    return sorted(p.name[:-5] for p in (DATA / "scenarios").iterdir()
                  if p.name.endswith(".toml") and not p.name.startswith("_"))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _load_raw(name_or_path: str, seen: tuple[str, ...] = ()) -> tuple[dict[str, Any], Path | None]:
    if not isinstance(name_or_path, str) or not name_or_path:
        where = f"scenario {seen[-1]}: " if seen else ""
        raise ConfigError(f"{where}extends must name a scenario or a .toml file, not {name_or_path!r:.60}")
    if name_or_path in seen:
        raise ConfigError(f"scenario {name_or_path}: 'extends' loops ({' -> '.join(seen + (name_or_path,))})")
    if len(seen) > 16:
        raise ConfigError(f"scenario {seen[0]}: 'extends' goes more than 16 levels deep")
    p = Path(name_or_path)
    if name_or_path.endswith(".toml"):
        data, src = read_toml_file(p, "scenario file"), p.resolve().parent
        data.setdefault("name", p.stem)
    else:
        res = DATA / "scenarios" / f"{name_or_path}.toml"
        if not is_shipped_name(name_or_path) or not res.is_file():
            import difflib

            close = difflib.get_close_matches(name_or_path, builtin_names(), n=1)
            hint = f" (did you mean {close[0]}?)" if close else " (see `sdbench scenarios`)"
            raise ConfigError(f"unknown scenario {name_or_path[:80]!r}{hint}")
        data, src = parse_toml(res.read_text(), f"scenario {name_or_path}"), None
        data.setdefault("name", name_or_path)
    parent = data.pop("extends", None)
    if parent is not None:
        base, base_src = _load_raw(parent, seen + (name_or_path,))
        base.pop("name", None)
        for section in ("sd", "flash"):
            # another kind of media shares none of its fields with the base's: the table replaces the base's
            mine, theirs = data.get(section), base.get(section)
            if isinstance(mine, dict) and isinstance(theirs, dict) and "media" in mine \
                    and mine["media"] != theirs.get("media"):
                base.pop(section)
        data = _merge(base, data)
        src = src or base_src
    return data, src


def load(name_or_path: str, overrides: list[str] | None = None) -> Scenario:
    """Load a built-in scenario by name or a user's TOML file, with ``a.b=value`` overrides.

    The file must be valid as written: an override (``--set``, ``--runs``) never hides a bad value in it."""
    data, src = _load_raw(name_or_path)
    sc = _from_data(data, src)
    if overrides:
        changed = apply_overrides(data, overrides)
        sc = _from_data(changed, src)
        # the file's text describes the file's values: a run with other values says which
        note = changes_text(data, changed, overrides)
        if note:
            sc = replace(sc, description=f"{sc.description}; {note}" if sc.description else note)
    return sc


#: tables inside [sd] and [flash] that are not fields of the media's options (Scenario.media_config pops them)
_SIDE_TABLES: dict[str, type] = {"cache": CacheConfig, "bridge": SdBridgeConfig, "faults": FaultConfig}
#: the profile whose fields a media option's override table holds
_PROFILE_OVERRIDES: dict[tuple[type, str], type] = {
    (SimSdConfig, "host_params"): HostProfile, (SimSdConfig, "card_params"): CardProfile,
    (SimFlashConfig, "host_params"): EspFlashHostProfile, (SimFlashConfig, "chip_params"): FlashChipProfile}


def changes_text(before: dict[str, Any], after: dict[str, Any], overrides: list[str]) -> str:
    """What ``overrides`` changed in a scenario's table, as "changed: sd.bus.clock_hz = 20000000 Hz, ..."
    (each value with its declared unit, in the order the overrides name them); "" when nothing changed."""
    old, new = dict(_leaves(before)), _leaves(after)
    # a description set by an override is the user's own text: it needs no note of itself
    keys = [k for k, v in new if k != "description" and (k not in old or old[k] != v or type(old[k]) is not type(v))]
    named = [".".join(p.strip() for p in o.split("=", 1)[0].split(".")) for o in overrides]

    def order(key: str) -> int:
        return next((i for i, n in enumerate(named) if key == n or key.startswith(n + ".")), len(named))
    values = dict(new)
    shown = []
    for k in sorted(keys, key=order):
        unit = _unit_at(after, k.split("."))
        shown.append(f"{k} = {_value_text(values[k])}" + (f" {unit}" if unit and unit != "address" else ""))
    return f"changed: {', '.join(shown)}" if shown else ""


def _leaves(table: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(table, dict) and (table or not prefix):
        return [kv for k, v in table.items() for kv in _leaves(v, f"{prefix}.{k}" if prefix else str(k))]
    return [(prefix, table)]


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False, default=str)  # strings quoted, as in TOML


def _unit_at(data: dict[str, Any], parts: list[str]) -> str:
    """The declared unit of the option at ``parts`` of a scenario table; "" when it has none or is not known."""
    head, rest = parts[0], parts[1:]
    cls: Any = None
    if head in ("sd", "flash"):
        if rest and rest[0] in _SIDE_TABLES:
            cls, rest = _SIDE_TABLES[rest[0]], rest[1:]
        else:
            media = data.get(head, {}).get("media") if isinstance(data.get(head), dict) else None
            cls = MEDIA[media].config if isinstance(media, str) and media in MEDIA else None
    elif head == "sd_fat":
        cls = FatConfig
    elif head == "sd_littlefs":
        cls = LittleFsConfig
    else:
        cls = next((p.config for p in protocols().values() if p.table == head), None)
    while cls is not None and rest:
        f = next((f for f in fields(cls) if f.name == rest[0]), None)
        if f is None:
            return ""
        if len(rest) == 1:
            return str(f.metadata.get("unit", ""))
        inner = type_hints(cls).get(f.name)
        cls, rest = _PROFILE_OVERRIDES.get((cls, f.name), inner if is_dataclass(inner) else None), rest[1:]
    return ""


def _scalar(data: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    """A top-level scalar of a scenario (name, protocol, seed, description), of exactly ``kind``."""
    v = data.get(key, default)
    if not isinstance(v, kind) or isinstance(v, bool):
        what = "an integer" if kind is int else "a string"
        raise ConfigError(f"scenario {str(data.get('name'))[:60]}: {key} must be {what}, not {v!r:.60}")
    return v


def _from_data(data: dict[str, Any], src: Path | None) -> Scenario:
    name = _scalar(data, "name", str, "")
    specs = protocols()
    tables = {p.table: p for p in specs.values()}  # every protocol's option table
    unknown = sorted(k for k in data if k not in _SCENARIO_KEYS and k not in tables)
    if unknown:
        raise ConfigError(f"scenario {name}: unknown key {unknown[0]!r:.60}")
    protocol = _scalar(data, "protocol", str, "espidf")
    if protocol not in specs:
        raise ConfigError(f"scenario {name}: unknown protocol {protocol!r:.60} (known: {', '.join(specs)})")
    seed = _scalar(data, "seed", int, 1)
    if not 0 <= seed < 1 << 63:
        raise ConfigError(f"scenario {name}: seed = {seed!r:.60} is outside 0..2^63-1")
    description = _scalar(data, "description", str, "")
    for section in ("sd", "flash", "sd_fat", *tables):
        if section in data and not isinstance(data[section], dict):
            raise ConfigError(f"scenario {name}: [{section}] must be a table, not {data[section]!r:.60}")
    # every protocol's table is checked, whichever protocol runs: a typo is refused before any work
    options = {t: spec.options(data[t]) for t, spec in tables.items() if t in data}
    kw: dict[str, Any] = {}
    if "sd_fat" in data:
        kw["sd_fat"] = from_mapping(FatConfig, _merge(to_mapping(Scenario("x").sd_fat), data["sd_fat"]), "sd_fat")
    if "sd_littlefs" in data:
        kw["sd_littlefs"] = from_mapping(LittleFsConfig, data["sd_littlefs"], "sd_littlefs")
    sc = Scenario(name=name, description=description, protocol=protocol, seed=seed, sd=data.get("sd", {}),
                  flash=data.get("flash", {}), options=options, source_dir=src, raw=data, **kw)
    # validate media tables and the protocols' own tables now, so errors come before any work
    for section in ("sd", "flash"):
        if getattr(sc, section):
            sc.media_config(section)
    sc.cache_config()
    sc.cache_config(section="flash")
    sc.bridge_config()
    return sc


def describe_all() -> list[tuple[str, str]]:
    out = []
    for n in builtin_names():
        data, _ = _load_raw(n)
        out.append((n, str(data.get("description", ""))))
    return out
