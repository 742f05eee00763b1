"""A fitted card's fields that no train row measures: held at the population's value, and spanned by its ranges."""
from __future__ import annotations

import statistics

import pytest

from sdbench import population
from sdbench import profiles
from sdbench import scenarios as scen
from sdbench.media.sim.card import CardProfile
from sdbench.protocols import run_scenario
from sdbench.report.tables import range_summary
from sdbench.stack.cardpop import card_population
from sdbench.stack.sd import fitted_values, load_card, population_held, spread_values

SD = "espidf-esp32-sdmmc4-40mhz"
CARD = "esp32-perfbench-card"
#: the FAT part in append mode only: its unaligned appends write one sector at a time (CMD24); 44 runs let the
#: members run 4 calls each (the first append of a file is aligned, the next ones are not)
APPEND = ["espidf.parts=['sd_fatfs']", "espidf.sd_modes=['normal']", "espidf.runs=44", "sd.host_params.fit_rel_sd={}"]


@pytest.fixture(autouse=True)
def _no_model_error(monkeypatch):
    # the parameters' spread alone: the model error that widens every range has its own tests
    monkeypatch.setattr(population, "structural_error", lambda klass="neither": ({}, {}, {}))


def test_population_held_fields_of_a_table():
    assert population_held({"read_access_us": 1.0}) == ()
    held = population_held({"timing_from": "population", "read_access_us": 1.0}, {"init_ms": 5.0})
    assert "read_access_us" not in held and "init_ms" not in held and "write_busy_single_us" in held
    assert not {"name", "capacity_bytes", "fit_rel_sd"} & set(held)


def test_the_shipped_card_takes_the_one_sector_busy_from_the_cards_that_fitted_it():
    table = profiles.load_table("cards", CARD)
    assert "write_busy_single_us" in population_held(table)
    fitted = [load_card(n) for n in card_population().cards]
    values = [c.write_busy_single_us for c in fitted if "write_busy_single_us" in c.fit_rel_sd]
    assert len(values) >= 3 and fitted_values()["write_busy_single_us"] == tuple(sorted(values))
    assert load_card(CARD).write_busy_single_us == pytest.approx(statistics.median(values))
    # the default the profile used to carry is not what it gets now
    assert load_card(CARD).write_busy_single_us != CardProfile().write_busy_single_us


def test_a_held_field_is_not_one_of_the_population_values():
    pop = card_population()
    med, names = pop.medians, pop.cards
    assert CARD in names
    holding = {n for n in names if "write_busy_single_us" in population_held(profiles.load_table("cards", n))}
    assert CARD in holding and len(holding) < len(names)
    others = [profiles.load(CardProfile, "cards", n) for n in names if n not in holding]
    assert med["write_busy_single_us"] == pytest.approx(statistics.median(
        c.write_busy_single_us for c in others if "write_busy_single_us" in c.fit_rel_sd))


def test_one_population_for_profiles_members_and_calibrate_from():
    """generic-sdhc, an uncalibrated card's range members and calibrate --from read one population: a member
    carries its card's fitted values and, for a field its card did not fit, the median generic-sdhc has."""
    pop = card_population()
    generic = load_card("generic-sdhc")
    members, varied = population.shipped_population()
    for f, med in pop.medians.items():
        assert getattr(generic, f) == pytest.approx(med), f
    for name, m in members:
        for f in pop.medians:
            want = pop.fitted[name].get(f, pop.medians[f])
            assert m[f] == pytest.approx(want), (name, f)


def test_a_card_holds_exactly_the_fields_a_fitted_card_fitted():
    # pause_sigma: no shipped card fits it, so a card with timing_from keeps the default, as any profile does
    assert "pause_sigma" not in fitted_values()
    held = population_held({"timing_from": "population", "random_area_bytes": 1 << 26})
    assert set(held) == set(fitted_values()) and "write_busy_single_us" in held
    assert population_held({"timing_from": "population", "random_area_bytes": 1 << 26, "pause_sigma": 0.5}) == held
    # a field that does nothing on the card is not held: the area's program time without an area
    assert "random_write_us" in held
    assert "random_write_us" not in population_held({"timing_from": "population", "random_area_bytes": 0})


def test_forget_drops_the_cached_population(monkeypatch):
    monkeypatch.undo()  # the real, cached model error
    fitted_values()
    card_population()
    population.shipped_population()
    population.forget()
    from sdbench.stack import cardpop
    assert cardpop.card_population.cache_info().currsize == 0
    assert population.shipped_population.cache_info().currsize == 0


def test_the_fit_plan_spans_the_held_field():
    sc = scen.load(SD, APPEND)
    pl = population.plan(sc, simulated=True)
    values = fitted_values()["write_busy_single_us"]
    assert pl.method == "fit" and pl.held["write_busy_single_us"] == values
    assert set(pl.held) <= set(spread_values())  # every held field two or more cards fitted
    drawn = sorted(m.overrides[("sd", "card_params")]["write_busy_single_us"] for m in pl.members)
    assert len(set(drawn)) == population.FIT_MEMBERS and values[0] <= drawn[0] < drawn[-1] <= values[-1]
    lo, hi = (m.overrides[("sd", "card_params")]["write_busy_single_us"] for m in pl.extremes)
    assert lo == pytest.approx(population.percentile(list(values), 10))
    assert hi == pytest.approx(population.percentile(list(values), 90))
    assert population.plan(sc, simulated=True) == pl  # the same members every time
    # a scenario that sets the field holds it no more at the population's value
    pinned = scen.load(SD, [*APPEND, "sd.card_params.write_busy_single_us=900"])
    assert "write_busy_single_us" not in population.plan(pinned, simulated=True).held


def test_append_rows_range_over_the_held_busy_and_say_so():
    held = run_scenario(scen.load(SD, APPEND), ranges=True)
    value = load_card(CARD).write_busy_single_us
    pinned = run_scenario(scen.load(SD, [*APPEND, f"sd.card_params.write_busy_single_us={value}"]), ranges=True)
    info = held.metadata["range"]
    values = fitted_values()["write_busy_single_us"]
    assert info["population_fields"] == {"write_busy_single_us": [values[0], values[-1]]}
    assert "write_busy_single_us" in range_summary(info) and "no train row" in range_summary(info)
    assert f"({values[0]:.4g}–{values[-1]:.4g} µs)" in range_summary(info)  # the span in the field's unit
    by_label = {r.label: r for r in pinned.rows}
    for r in held.rows:
        # the central figures are the card's own; only the range changes
        assert r.time_ms == pytest.approx(by_label[r.label].time_ms)
    row = next(r for r in held.rows if r.label == "SD FATFS: write more than target size")
    lo, hi = row.time_ms_range
    p_lo, p_hi = by_label[row.label].time_ms_range
    assert lo < p_lo and hi > 1.2 * p_hi  # one-sector writes by the hundred: the span of the busy shows
    read = next(r for r in held.rows if r.label == "SD FATFS: read more than target size")
    r_lo, r_hi = read.time_ms_range
    assert r_hi / r_lo < 1.1 < 1.5 < hi / lo  # reads never wait for a write busy


def test_few_runs_still_reach_the_one_sector_appends():
    # at 10 runs the members run 2 calls each: the second append of a file is the unaligned one, whose
    # one-sector writes wait for the held busy (one call each would see only the aligned first append)
    few = [*APPEND[:-2], "espidf.runs=10", APPEND[-1]]
    held = run_scenario(scen.load(SD, few), ranges=True)
    assert held.metadata["range"]["runs"]["members"] == population.MIN_RUNS
    value = load_card(CARD).write_busy_single_us
    pinned = run_scenario(scen.load(SD, [*few, f"sd.card_params.write_busy_single_us={value}"]), ranges=True)
    label = "SD FATFS: write more than target size"
    hi = next(r for r in held.rows if r.label == label).time_ms_range[1]
    p_hi = next(r for r in pinned.rows if r.label == label).time_ms_range[1]
    assert hi > 1.2 * p_hi


def test_a_population_card_without_fitted_cards_is_refused(monkeypatch):
    from sdbench.errors import ConfigError
    from sdbench.stack import cardpop

    monkeypatch.setattr(cardpop, "_fitted_names", lambda: ())
    cardpop.forget()
    with pytest.raises(ConfigError, match="no fitted card profile is shipped"):
        load_card("generic-sdhc")
    assert load_card("lexar-v30-64gb").name == "lexar-v30-64gb"  # a card that holds nothing still loads
    monkeypatch.undo()
    cardpop.forget()


def test_population_members_carry_their_cards_flash_layout():
    """A member of an uncalibrated card's range is a whole card: its own random-write area (or none), not the
    generic card's estimate."""
    pop = card_population()
    for name in pop.cards:
        assert pop.member(name)["random_area_bytes"] == load_card(name).random_area_bytes
    kinds = {bool(pop.member(n)["random_area_bytes"]) for n in pop.cards}
    assert kinds == {True, False}  # the shipped population holds both kinds


def test_a_range_on_few_members_keeps_one_card_of_each_kind():
    pl = population.plan(scen.load("logger-esp32s3-sdspi"), simulated=True)
    assert pl.method == "population" and "random_area_bytes" in pl.fields
    for k in (2, 3, 5):
        chosen = population.select(pl.members, k)
        assert chosen[0] is pl.members[0] and chosen[-1] is pl.members[-1]  # the extremes stay
        assert {m.variant for m in chosen} == {m.variant for m in pl.members}
        assert len(chosen) <= k + 1
    assert population.select(pl.members, len(pl.members)) == pl.members
