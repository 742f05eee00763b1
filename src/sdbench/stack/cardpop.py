"""The card population: the shipped fitted card profiles and what each of them fitted.

One reading of the shipped cards serves every place that needs "a card of no product": a profile with
``timing_from = "population"`` (``generic-sdhc``, the named cards of published setups) takes each timing field it
does not set from :attr:`CardPopulation.medians`; the ranges of an uncalibrated card run one member per fitted
card (:meth:`CardPopulation.member`); ``sdbench calibrate --from`` starts from the same medians; ``sdbench list
cards`` shows the same.  A card's value counts for a field only where its fit measured it (the field is in its
``fit_rel_sd``): a default a card never measured is nobody's value.
"""
from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass, field, fields
from typing import Any

from .. import profiles
from ..errors import ConfigError
from ..media.sim.card import NOT_TIMING, CardProfile


#: how a card's flash translation layer is laid out (pages, allocation units, open units, its random-write area):
#: not fitted, each card's own (a datasheet, or an estimate in its profile). A member of an uncalibrated card's
#: range carries its card's, so the range spans cards with and without a random-write area
STRUCTURE_FIELDS = ("page_bytes", "small_write_unit_bytes", "au_bytes", "update_block_bytes", "open_aus",
                    "random_area_bytes", "random_unit_bytes", "random_max_bytes")


@dataclass(frozen=True)
class CardPopulation:
    """The shipped fitted cards (by name, sorted), per card the timing fields its fit measured and its flash
    translation layer's layout (:data:`STRUCTURE_FIELDS`)."""

    cards: tuple[str, ...]
    fitted: dict[str, dict[str, Any]]
    structure: dict[str, dict[str, Any]] = field(default_factory=dict)

    @functools.cached_property
    def values(self) -> dict[str, tuple[Any, ...]]:
        """Timing field -> its values over the cards that fitted it, ascending."""
        out: dict[str, list[Any]] = {}
        for c in self.cards:
            for f, v in self.fitted[c].items():
                out.setdefault(f, []).append(v)
        order = [f.name for f in fields(CardProfile)]
        return {f: tuple(sorted(out[f])) for f in order if f in out}

    @functools.cached_property
    def medians(self) -> dict[str, Any]:
        """Timing field -> the median of its values (integer fields the lower median: a value a card has)."""
        return {f: statistics.median_low(v) if all(isinstance(x, int) for x in v) else float(statistics.median(v))
                for f, v in self.values.items()}

    def spread(self) -> dict[str, tuple[Any, ...]]:
        """The fields at least two cards fitted, with their values: the population's spread a range spans."""
        return {f: v for f, v in self.values.items() if len(v) >= 2}

    def member(self, card: str) -> dict[str, Any]:
        """Card ``card`` as a member of an uncalibrated card's range: its fitted fields, its flash translation
        layer's layout, and for every other field some card fitted, the population's median (its profile's
        default there was never measured)."""
        return {**self.medians, **self.structure.get(card, {}), **self.fitted[card]}

    def without(self, card: str) -> "CardPopulation":
        """The population less one card (leave-one-card-out cross-validation)."""
        return CardPopulation(tuple(c for c in self.cards if c != card),
                              {c: v for c, v in self.fitted.items() if c != card},
                              {c: v for c, v in self.structure.items() if c != card})


def _fitted_names() -> tuple[str, ...]:
    """The shipped card profiles whose first comment says `sdbench calibrate` fitted them."""
    def first_comment(text: str) -> str:
        return next((ln for ln in text.splitlines() if ln.strip().startswith("#")), "")

    return tuple(n for n in profiles.shipped("cards")
                 if profiles.FITTED_MARK in first_comment((profiles.DATA / "cards" / f"{n}.toml").read_text()))


@functools.lru_cache(maxsize=1)
def card_population() -> CardPopulation:
    """The shipped card population (read once; :func:`forget` after writing profiles).  ConfigError when no
    fitted card is shipped."""
    names = _fitted_names()
    if not names:
        raise ConfigError("no fitted card profile is shipped to take population values from")
    fitted: dict[str, dict[str, Any]] = {}
    structure: dict[str, dict[str, Any]] = {}
    for n in names:
        # a fitted card's own table: the fields it takes from the population are not its values
        card = profiles.load(CardProfile, "cards", n, what="card profile")
        fitted[n] = {f: getattr(card, f) for f in card.fit_rel_sd if f not in NOT_TIMING}
        structure[n] = {f: getattr(card, f) for f in STRUCTURE_FIELDS}
    return CardPopulation(names, fitted, structure)


def forget() -> None:
    """Drop the cached population: after a fit wrote the shipped profiles, the next reading sees them."""
    card_population.cache_clear()
