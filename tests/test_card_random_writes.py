"""The card's random-write area: small scattered writes fast until it fills, then a fold per few writes."""
from __future__ import annotations

import random

import pytest

from sdbench.media.sim.card import CardModel, CardProfile
from sdbench.protocols import run_scenario
from sdbench.scenarios import load

AU = 1 << 20
#: a card with a 256 KiB random-write area of 4 KiB units (64 units), 1 ms per unit, and an expensive fold
CARD = dict(page_bytes=16384, au_bytes=AU, update_block_bytes=AU, open_aus=2, merge_base_ms=10.0,
            merge_copy_us_per_kib=100.0, write_busy_end_us=0.0, write_busy_single_us=0.0, preconditioned=True,
            random_area_bytes=256 * 1024, random_unit_bytes=4096, random_write_us=1000.0)


def _scattered(card: CardModel, n: int, span_aus: int, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    busy = []
    for _ in range(n):
        au = rng.randrange(span_aus)
        offset = au * AU + 4096 * rng.randrange(1, AU // 4096)  # never the AU's start: not a stream
        busy.append(card.write_done_busy_ns(offset // 512, 8, 512, True))
    return busy


def test_scattered_writes_cost_their_units_until_the_area_fills_then_folds():
    card = CardModel(CardProfile(**CARD))
    busy = _scattered(card, 64, span_aus=64)
    assert busy == [pytest.approx(1e6)] * 64  # one 4 KiB unit each, no merge: the area holds 64
    assert card.merges == 0 and card.folds == 0 and card.random_writes == 64
    more = _scattered(card, 200, span_aus=64, seed=2)
    assert card.folds > 0
    fold = 10e6 + (AU // 1024) * 100.0 * 1e3  # merge base + the whole AU's valid data copied
    assert max(more) >= fold
    # over a span of 64 AUs an area of 64 units frees one or two units per fold: the collapse, tens of times
    # slower than while the area had room
    assert sum(more) / len(more) > 20 * 1e6


def test_without_an_area_every_scattered_write_opens_its_au_and_merges():
    card = CardModel(CardProfile(**{**CARD, "random_area_bytes": 0}))
    busy = _scattered(card, 20, span_aus=64)
    assert card.random_writes == 0 and card.merges >= 17
    assert sum(busy) / len(busy) > 10e6


def test_streams_and_writes_into_open_aus_keep_the_update_block_path():
    """A stream from an AU's start opens the AU as before; a small write into an open AU with room goes to its
    update block: the area changes nothing for them."""
    with_area, without = CardModel(CardProfile(**CARD)), CardModel(CardProfile(**{**CARD, "random_area_bytes": 0}))
    for card in (with_area, without):
        for i in range(3 * AU // 2 // 65536):  # one and a half AUs written front to back in 64 KiB writes
            card.write_done_busy_ns(i * 128, 128, 512, True)
        card.write_done_busy_ns(AU // 512 + 8, 8, 512, True)  # a small write into the open second AU
    assert with_area.random_writes == 0
    assert (with_area.merges, with_area.nand_programmed_bytes) == (without.merges, without.nand_programmed_bytes)


def test_a_small_write_into_a_full_update_block_goes_to_the_area():
    """An AU written front to back fills its update block: a small write into it then merges the block (a
    switch, no copy) and goes to the area; it does not leave a one-page block whose eviction copies the AU."""
    card = CardModel(CardProfile(**CARD))
    for i in range(AU // 65536):
        card.write_done_busy_ns(i * 128, 128, 512, True)
    busy = card.write_done_busy_ns(8, 8, 512, True)
    assert card.random_writes == 1 and card.merges == 1
    assert busy == pytest.approx(CardProfile().switch_merge_ms * 1e6 + CARD["random_write_us"] * 1e3)
    for i in range(2 * AU // 65536):  # two more AUs, which would evict a block left open in AU 0
        card.write_done_busy_ns(AU // 512 + i * 128, 128, 512, True)
    assert card.nand_programmed_bytes == 3 * AU + 4096  # the host's data, nothing copied


def test_a_stream_past_its_update_block_is_merged_with_it():
    """A small write took space in an AU's update block; a stream over the whole AU then runs past the block's
    end: the merge takes the stream's last pages, the AU closes, and no second block holds them (whose eviction
    would copy the rest of the AU)."""
    card = CardModel(CardProfile(**{**CARD, "random_area_bytes": 0}))
    card.write_done_busy_ns(10 * 16384 // 512, 8, 512, True)  # 4 KiB inside page 10
    for i in range(AU // 65536):
        card.write_done_busy_ns(i * 128, 128, 512, True)
    assert 0 not in card._open and card.merges == 1
    assert card.nand_programmed_bytes == 4096 + AU  # every page rewritten: nothing copied
    for i in range(2 * AU // 65536):
        card.write_done_busy_ns(AU // 512 + i * 128, 128, 512, True)
    assert card.nand_programmed_bytes == 4096 + 3 * AU


def test_an_au_opened_for_a_stream_takes_its_area_entries_along():
    """Small writes in the area for an AU, then a stream over the whole AU: no fold when it opens (a copy of the
    whole AU); the merge switches, the stream having rewritten every page."""
    card = CardModel(CardProfile(**CARD))
    card.write_done_busy_ns((2 * AU + 8192) // 512, 8, 512, True)
    assert card.random_writes == 1
    before = card.nand_programmed_bytes
    for i in range(AU // 65536):
        card.write_done_busy_ns((2 * AU + i * 65536) // 512, 128, 512, True)
    assert card.folds == 0 and card._log_units == 0
    card.write_done_busy_ns(3 * AU // 512, 128, 512, True)
    card.write_done_busy_ns(4 * AU // 512, 128, 512, True)  # evicts AU 2: front to back, a switch merge
    assert card.nand_programmed_bytes - before == AU + 2 * 65536


def test_discarding_a_whole_au_drops_its_entries():
    card = CardModel(CardProfile(**CARD))
    card.write_done_busy_ns((3 * AU + 8192) // 512, 8, 512, True)
    assert card._log_units == 1
    card.discard(3 * AU // 512, AU // 512, 512)
    assert card._log_units == 0


def test_an_area_smaller_than_a_unit_is_refused():
    with pytest.raises(ValueError, match="random_area_bytes"):
        CardProfile(random_area_bytes=2048, random_unit_bytes=4096)


def test_random_writes_are_in_the_ledger():
    sc = load("espidf-esp32-sdmmc4-40mhz", ["espidf.parts=['sd_raw']", "espidf.runs=2",
                                            "sd.card_params.random_area_bytes=33554432",
                                            "sd.card_params.random_write_us=500.0"])
    rec = run_scenario(sc)
    # the raw test writes 64 KiB streams at LBA 0: the area takes none of it
    assert not any("random_write_us" in k for v in rec.metadata["ledger"].values() for k in v)


def test_a_write_the_area_takes_costs_its_program_there_not_the_sequential_flush():
    card = CardModel(CardProfile(**{**CARD, "write_busy_end_us": 500.0, "write_busy_single_us": 300.0}))
    assert card.write_done_busy_ns((5 * AU + 8192) // 512, 8, 512, True) == pytest.approx(1e6)
    assert dict(card.busy_parts)["sd.card.random_write_us"] == pytest.approx(1e6)
    # a stream's write keeps its flush
    assert card.write_done_busy_ns(0, 128, 512, True) == pytest.approx(500e3)


def test_a_small_write_at_an_aus_start_is_scattered_unless_a_stream_crosses_into_it():
    card = CardModel(CardProfile(**CARD))
    card.write_done_busy_ns(7 * AU // 512, 8, 512, True)        # AU 7's start, nothing before it open
    assert card.random_writes == 1 and 7 not in card._open
    for i in range(AU // 4096):                                # AU 2 front to back in 4 KiB writes, then AU 3
        card.write_done_busy_ns((2 * AU + i * 4096) // 512, 8, 512, True)
    card.write_done_busy_ns(3 * AU // 512, 8, 512, True)
    assert 3 in card._open and card.random_writes == 2          # AU 2's first write had no stream before it
