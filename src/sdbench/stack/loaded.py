"""The profiles of a simulated stack, loaded once per run with what the range code needs to know about them.

The stack builder loads each profile of a scenario's simulated media (SD card and host, flash chip and flash
host) once, with the scenario's overrides, into a :class:`LoadedProfile` that also says whether `sdbench
calibrate` fitted it, whether it counts as calibrated, which card fields it takes from the population and what
spread those have.  The driver models are built from these values, the built stack keeps them
(``Built.profiles``), and the range of the run (:mod:`sdbench.population`) takes them from there: nothing asks
the TOML files again whether a field was fitted.
"""
from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import profiles
from ..media.sim.esp_flash import load_esp_flash_host
from ..media.sim.nor import load_chip_profile
from .sd import load_card, load_host, population_held, spread_values

FITTED_MARK = profiles.FITTED_MARK


@dataclass(frozen=True)
class LoadedProfile:
    """A profile of the stack, loaded with the scenario's overrides."""

    section: str      # "sd" or "flash"
    params: str       # the scenario's override table: card_params, host_params, chip_params
    kind: str         # card, host, flash chip, flash host
    name: str         # as the scenario names it
    value: Any        # the loaded profile
    fitted: bool      # `sdbench calibrate` wrote it
    #: a host: a fit group fitted cards through it (the pair is calibrated though no field of it is)
    fit_group_host: bool = False
    held: tuple[str, ...] = ()  # card fields taken from the population (population_held)
    #: the held fields at least two fitted cards fitted -> their values (what a range spans)
    spread: dict[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def calibrated(self) -> bool:
        return self.fitted or self.fit_group_host or bool(self.value.fit_rel_sd)

    @property
    def title(self) -> str:
        return f"{self.kind} {self.name}"


def resolve(name: str, base_dir: Path | None) -> Path:
    """A profile file a scenario names (``*.toml``), relative to the scenario's folder."""
    p = Path(name)
    return p if p.is_absolute() or base_dir is None else base_dir / p


def is_fitted(folder: str, name: str, base_dir: Path | None = None) -> bool:
    """Whether `sdbench calibrate` wrote profile ``name`` (its header says so), as ``sdbench list`` tells."""
    try:
        if name.endswith(".toml"):
            text = resolve(name, base_dir).read_text(encoding="utf-8", errors="replace")
        else:
            text = profiles.shipped_text(folder, name)
    except (OSError, UnicodeDecodeError):
        return False
    return FITTED_MARK in text


@functools.lru_cache(maxsize=1)
def fit_group_hosts() -> frozenset[str]:
    """The host profiles a shipped fit group names (``host`` in ``data/fits/<group>.toml``): the cards it fitted
    were fitted through that host, so the pair is calibrated even where no field of the host itself is."""
    out = set()
    for p in sorted((profiles.DATA / "fits").iterdir(), key=lambda p: p.name):
        if p.name.endswith(".toml") and p.name != "levels.toml":
            try:
                host = tomllib.loads(p.read_text(encoding="utf-8")).get("host")
            except (OSError, tomllib.TOMLDecodeError):
                continue
            if isinstance(host, str):
                out.add(host)
    return frozenset(out)


def host_calibrated(name: str, base_dir: Path | None = None) -> bool:
    """Whether a host profile is calibrated: `sdbench calibrate` fitted fields of it, or a fit group fitted cards
    through it."""
    return is_fitted("hosts", name, base_dir) or (not name.endswith(".toml") and name in fit_group_hosts())


def sd_profiles(cfg: Any, base: Path | None) -> tuple[LoadedProfile, LoadedProfile]:
    """The card and host of a simulated SD target ([sd] media = "sim")."""
    card_over = dict(cfg.card_params)
    if cfg.capacity_bytes:
        card_over["capacity_bytes"] = cfg.capacity_bytes
    held = population_held(profiles.load_table("cards", cfg.card, base, what="card profile"), card_over)
    card = load_card(cfg.card, card_over, base)
    fitted = is_fitted("cards", cfg.card, base)
    spread = spread_values() if held and (fitted or card.fit_rel_sd) else {}
    return (LoadedProfile("sd", "card_params", "card", cfg.card, card, fitted, held=held,
                          spread={f: spread[f] for f in held if f in spread}),
            LoadedProfile("sd", "host_params", "host", cfg.host, load_host(cfg.host, cfg.host_params, base),
                          is_fitted("hosts", cfg.host, base),
                          fit_group_host=not cfg.host.endswith(".toml") and cfg.host in fit_group_hosts()))


def flash_profiles(cfg: Any, base: Path | None) -> tuple[LoadedProfile, LoadedProfile]:
    """The chip and host of a simulated flash target ([flash] media = "sim-nor")."""
    chip = str(resolve(cfg.chip, base)) if cfg.chip.endswith(".toml") else cfg.chip
    host = str(resolve(cfg.host, base)) if cfg.host.endswith(".toml") else cfg.host
    return (LoadedProfile("flash", "chip_params", "flash chip", cfg.chip,
                          load_chip_profile(chip, cfg.chip_params or None), is_fitted("flash", cfg.chip, base)),
            LoadedProfile("flash", "host_params", "flash host", cfg.host,
                          load_esp_flash_host(host, cfg.host_params or None), is_fitted("hosts", cfg.host, base),
                          fit_group_host=not cfg.host.endswith(".toml") and cfg.host in fit_group_hosts()))


def stack_profiles(sc: Any) -> tuple[LoadedProfile, ...]:
    """The loaded profiles of scenario ``sc``'s simulated media, SD then flash (none for real media): what the
    stack builder loads for a run (``Built.profiles``), for callers that have no built stack."""
    out: list[LoadedProfile] = []
    if sc.sd and sc.sd.get("media") == "sim":
        out += sd_profiles(sc.media_config("sd")[1], sc.source_dir)
    if sc.flash and sc.flash.get("media") == "sim-nor":
        out += flash_profiles(sc.media_config("flash")[1], sc.source_dir)
    return tuple(out)


def forget() -> None:
    """Drop the cached reading of the fit groups' hosts (after `sdbench calibrate` wrote the data folder)."""
    fit_group_hosts.cache_clear()
