"""Profiles are TOML data: shipped ones in ``sdbench/data/<folder>/<name>.toml``,
or a user's file given by path.  One loader serves hosts, cards and flash chips."""
from __future__ import annotations

from dataclasses import is_dataclass
import copy
import functools
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError
from .options import from_mapping, is_shipped_name, parse_toml, read_toml_file, type_hints

DATA = resources.files("sdbench") / "data"
T = TypeVar("T")
#: the header `sdbench calibrate` writes into a profile it fitted
FITTED_MARK = "fitted by `sdbench calibrate"


#: help of the ``fit_rel_sd`` field every fitted profile kind declares
FIT_REL_SD_HELP = ("fitted fields -> relative standard deviation of the fit (σ / value, from its covariance); "
                   "written by sdbench calibrate")


#: help of the ``unfitted`` field every fitted profile kind declares
UNFITTED_HELP = "fitted fields -> their value before sdbench calibrate fitted them (a source or an estimate)"


def check_fit_rel_sd(profile: Any) -> None:
    """``profile.fit_rel_sd`` names numeric fields of the profile, each with a finite σ/value >= 0, and
    ``profile.unfitted`` (where the profile has it) numeric fields with finite values >= 0 (ValueError)."""
    from dataclasses import fields

    numeric = {f.name for f in fields(profile) if isinstance(getattr(profile, f.name), (int, float))
               and not isinstance(getattr(profile, f.name), bool)}
    for name, sd in profile.fit_rel_sd.items():
        if name not in numeric:
            raise ValueError(f"fit_rel_sd: {name!r:.60} is not a numeric field of the profile")
        if isinstance(sd, bool) or not isinstance(sd, (int, float)) or not 0 <= sd < 1e6:
            raise ValueError(f"fit_rel_sd.{name} = {sd!r:.60} is not a relative standard deviation (0 <= x < 1e6)")
    for name, value in getattr(profile, "unfitted", {}).items():
        if name not in numeric:
            raise ValueError(f"unfitted: {name!r:.60} is not a numeric field of the profile")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e15:
            raise ValueError(f"unfitted.{name} = {value!r:.60} is not a field value (0 <= x < 1e15)")


def shipped(folder: str) -> list[str]:
    return sorted(p.name[:-5] for p in (DATA / folder).iterdir() if p.name.endswith(".toml"))


def load_table(folder: str, name: str, base_dir: Path | None = None, *, what: str = "profile") -> dict[str, Any]:
    """The TOML table of a shipped profile ``name``, or of a file when ``name`` ends in .toml
    (relative paths are relative to ``base_dir``, e.g. the scenario file's folder)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{what}: expected a shipped name or a .toml file, got {name!r:.60}")
    if name.endswith(".toml"):
        p = Path(name)
        if not p.is_absolute() and base_dir is not None:
            p = base_dir / p
        table = read_toml_file(p, f"{what} file")
        if not table:  # an empty file would silently be the defaults: most likely the wrong file
            raise ConfigError(f"{what} file {p}: holds no field (it would be all defaults); write "
                              "at least its name")
        return table
    res = DATA / folder / f"{name}.toml"
    if not is_shipped_name(name) or not res.is_file():
        raise ConfigError(f"unknown {what} {name!r:.60} (shipped: {', '.join(shipped(folder))})")
    return copy.deepcopy(_shipped_table(folder, name))


@functools.lru_cache(maxsize=None)
def shipped_text(folder: str, name: str) -> str:
    """The text of shipped profile ``folder/name.toml``, read once (:func:`forget` after writing the data
    folder)."""
    return (DATA / folder / f"{name}.toml").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def _shipped_table(folder: str, name: str) -> dict[str, Any]:
    return parse_toml(shipped_text(folder, name), f"{folder}/{name}.toml")


def forget() -> None:
    """Drop the shipped profiles read so far: `sdbench calibrate` writing into the data folder changes them."""
    shipped_text.cache_clear()
    _shipped_table.cache_clear()


def load(cls: type[T], folder: str, name: str, overrides: dict[str, Any] | None = None,
         base_dir: Path | None = None, *, what: str = "profile") -> T:
    table = load_table(folder, name, base_dir, what=what)
    if overrides is not None and not isinstance(overrides, dict):
        raise ConfigError(f"{what} {name}: overrides must be a table, got {overrides!r:.60}")
    blocks = {k for k, t in type_hints(cls).items() if is_dataclass(t)}
    for key, value in (overrides or {}).items():  # a block's override changes what it names, not the whole block
        held = table.get(key)
        merge = key in blocks and isinstance(held, dict) and isinstance(value, dict)
        table[key] = {**held, **value} if merge else value
    return from_mapping(cls, table, f"{what} {name}")
