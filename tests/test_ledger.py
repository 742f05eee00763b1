"""The cost ledger: every simulated row's time by the profile parameter it comes from."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.clock import UNATTRIBUTED, ClockDelta, TimeOnlyClock, VirtualClock
from sdbench.ledger import Recording, compact, per_call
from sdbench.protocols import protocol, run_scenario

#: one of each driver kind: ESP-IDF sdmmc (CMD13 polling, RTOS ticks, FAT and LittleFS), P2 SPI, SdFat SPI
#: (streams, ready waits), an MCU's SDIO, the ESP32 SPI flash target
KINDS = ["espidf-esp32-sdmmc4-40mhz", "p2-spi25-350mhz-pny-16gb", "sdfat-bench-due-sdfat-spi",
         "sdfat-bench-stm32f4-sdio", "espidf-esp32-spiflash", "mpy-esp32s3-sdspi", "esp32s3-usbmsc-spi20mhz"]


def _few_runs(name: str):
    base = scen.load(name)
    spec = protocol(base.protocol)
    return run_scenario(scen.load(name, [f"{spec.runs_option}=2"]))


@pytest.mark.parametrize("name", KINDS)
def test_every_row_is_its_ledger(name):
    """The ledger of a row sums to the row's time (four significant digits per entry) and names a parameter
    for all of it: no model charges time without saying where it comes from."""
    rec = _few_runs(name)
    ledger = rec.metadata["ledger"]
    for row in rec.rows:
        entries = ledger.get(row.label, {})
        if row.time_ms == 0:
            continue
        assert sum(entries.values()) == pytest.approx(row.time_ms, rel=5e-3), row.label
        assert not [k for k in entries if k.startswith(UNATTRIBUTED)], (row.label, entries)
        assert all(v >= -1e-9 for v in entries.values()), (row.label, entries)


def test_a_busy_wait_is_charged_to_what_made_the_card_busy():
    """A FAT write of many single-sector commands on the ESP-IDF card: most of it is the card's one-sector
    write busy, and one call takes about as many of it as the row's CMD24s."""
    rec = _few_runs("espidf-esp32-sdmmc4-40mhz")
    label = "SD FATFS: write more than target size"
    row = rec.row(label)
    entries = rec.metadata["ledger"][label]
    busy = entries["sd.card.write_busy_single_us"]
    assert busy / row.time_ms > 0.8
    card = rec.stack["sd"]["card"]
    assert busy * 1e3 / card["write_busy_single_us"] == pytest.approx(row.commands["CMD24"], rel=0.02)


def test_the_clock_attributes_recorded_costs_and_waits():
    clock = VirtualClock()
    clock.advance_ns(1000, "host", "sd.host.block_cycles")
    clock.advance_ns(500, "card", "")
    clock.attribute((("sd.card.write_busy_end_us", 400.0), ("sd.wait.polling", 100.0)))
    clock.advance_ns(7, "bus")
    m = clock.mark()
    clock.advance_ns(10, "bus", "sd.bus.clock_hz")
    cost = clock.delta_since(m)
    clock.charge(cost, 3)
    assert clock.ledger_ns() == {"sd.host.block_cycles": 1000, "sd.card.write_busy_end_us": 400,
                                 "sd.wait.polling": 100, UNATTRIBUTED + "bus": 7, "sd.bus.clock_hz": 40}
    assert clock.now_ns() == 1547


def test_compact_keeps_the_large_entries_and_sums_the_rest():
    got = compact({"a": 9_000_000.0, "b": 990_000.0, "c": 4_000.0, "d": 5_000.0})
    assert got == {"a": 9.0, "b": 0.99, "rest": 0.009}


def test_per_call_says_how_many_of_each_parameter():
    sections = {"sd.card": {"write_busy_end_us": 800.0}, "sd.host": {"cpu_hz": 160_000_000, "block_cycles": 100},
                "sd.bus": {"clock_hz": 40_000_000}}
    assert per_call("sd.card.write_busy_end_us", 1.6e6, sections) == ("800 µs", "2.00 x")
    assert per_call("sd.host.block_cycles", 1250.0, sections) == ("100 cycles", "2.00 x")
    assert per_call("sd.bus.clock_hz", 1000.0, sections) == ("40 MHz", "40 clocks")
    assert per_call("sd.wait.polling", 1000.0, sections) == ("", "")


def test_trace_ledger_prints_tables(capsys):
    assert main(["trace", "p2-spi25-350mhz-pny-16gb", "--ledger", "--row", "Raw Write 64x (32KB)",
                 "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert "| parameter | value | per call | ms per call | share |" in out
    assert "sd.card.write_busy_block_us" in out and "µs" in out
    assert main(["trace", "p2-spi25-350mhz-pny-16gb", "--ledger", "--row", "no such row"]) == 2


def test_a_pricer_charges_as_advance_priced_does_and_a_recording_sees_it():
    from sdbench.ledger import Price, Recording
    price = Price("sd.host", "fs_call_cycles")
    steps = [(1234.4, price), (0.3, price), (99.5, None), (0.0, None)]
    plain, fast = VirtualClock(), VirtualClock()
    for ns, p in steps * 3:
        plain.advance_priced(ns, "host", p)
        fast.pricer(ns, "host", p)()
    assert fast.now_ns() == plain.now_ns() == 3 * (1234 + 100)
    assert fast.breakdown_ns() == plain.breakdown_ns()
    assert fast.ledger_ns() == plain.ledger_ns()
    # while the clock carries a recording every call reaches it, as advance_priced's do
    rec, ref = Recording(), Recording()
    rec.start()
    ref.start()
    fast.recording, plain.recording = rec, ref
    fast.pricer(500.0, "host", price)()
    plain.advance_priced(500.0, "host", price)
    assert rec._charges and rec._charges == ref._charges
    assert fast.ledger_ns() == plain.ledger_ns()
    with pytest.raises(Exception):
        VirtualClock().pricer(-1.0, "host", price)()


def test_a_price_keeps_its_hash_but_never_sends_it_to_another_process():
    import pickle
    from sdbench.ledger import Price
    p = Price("sd.host", "copy_cycles_per_byte", 64)
    assert hash(p) == hash(Price("sd.host", "copy_cycles_per_byte", 64.0))
    assert "_hash" in vars(p)
    back = pickle.loads(pickle.dumps(p))
    assert back == p and "_hash" not in vars(back) and hash(back) == hash(p)


def test_a_pricers_batch_records_what_its_calls_one_by_one_record():
    # a charge no price sets is kept as a float sum: k at once must round as k one by one do
    from sdbench.ledger import Recording
    import random
    rng = random.Random(1)
    for _ in range(300):
        a, b, k = round(rng.uniform(1, 5000), 1), round(rng.uniform(1, 5000), 1), rng.randint(2, 8)
        got = []
        for batched in (False, True):
            clock, rec = VirtualClock(), Recording()
            rec.start()
            clock.recording = rec
            clock.advance_priced(a, "host", None)
            charge = clock.pricer(b, "host", None)
            if batched:
                charge(k)
            else:
                for _ in range(k):
                    charge()
            charge(0)  # nothing
            got.append((rec._charges, clock.now_ns(), clock.breakdown_ns(), clock.ledger_ns()))
        assert got[0] == got[1]


def test_a_time_only_clock_keeps_the_same_time_as_a_full_one():
    """A replay's clock (TimeOnlyClock) keeps no tables, but every step moves it as VirtualClock moves: the
    same rounding of each step (ties included), the same recorded costs, chargers, pricers and one-step costs."""
    import random
    rng = random.Random(11)
    full, lean = VirtualClock(), TimeOnlyClock()
    cost = ClockDelta(1234, (("bus", 1000), ("host", 234)), (("CMD17", 1),))
    for clock in (full, lean):
        clock.charge(cost)  # a charger needs its cost charged once
    chargers = [c.charger(cost) for c in (full, lean)]
    pricers = [c.pricer(812.5, "host", None) for c in (full, lean)]
    for _ in range(3000):
        kind = rng.randrange(6)
        ns = rng.choice([rng.uniform(0, 5e6), rng.randrange(0, 10**6) + 0.5, float(rng.randrange(10**5))])
        times = rng.randrange(0, 4)
        for i, clock in enumerate((full, lean)):
            if kind == 0:
                clock.advance_ns(ns, "card", "")
            elif kind == 1:
                clock.charge(cost, times)
            elif kind == 2:
                chargers[i]()
            elif kind == 3:
                pricers[i](times)
            elif kind == 4:
                clock.apply_parts(int(ns), (("flash", int(ns)),), (("PP", 1),), (("flash.chip.program", int(ns)),))
            else:
                clock.attribute((("sd.card.erase_busy_us", ns),))
                clock.count_command("CMD38")
        assert lean.now_ns() == full.now_ns()
    assert lean.breakdown_ns() == {} and lean.commands_snapshot() == {}
    with pytest.raises(Exception, match="cannot advance a clock"):
        lean.advance_ns(-1.0)


_rec_steps = st.lists(st.one_of(
    st.tuples(st.just("read"), st.integers(0, 1), st.sampled_from([1, 8]), st.integers(0, 999)),
    st.tuples(st.just("charge"), st.sampled_from([10.0, 20.0])),
    st.tuples(st.just("op"), st.integers(0, 1)),
    st.tuples(st.just("mark"), st.sampled_from(["a", "b"])),
    st.tuples(st.just("start")),
), max_size=60)


@settings(max_examples=150, deadline=None)
@given(_rec_steps)
def test_reads_appended_while_the_epoch_stays_are_recorded_as_read_records_them(steps):
    """A fused read appends to the list Recording.read_slot gave while Recording.epoch is unchanged: the same
    items as Recording.read, whatever comes between (charges, requests, marks, the stack being built)."""
    plain, fused = Recording(), Recording()
    slots: dict[tuple[int, int], list] = {}
    for step in steps:
        if step[0] == "read":
            _, driver, key, lba = step
            plain.read(driver, key, lba, key)
            slot = slots.setdefault((driver, key), [-1, None])
            if slot[0] == fused.epoch:
                slot[1] += (lba, key)
            else:
                fused.read_slot(slot, driver, key, lba, key)
        else:
            for rec in (plain, fused):
                if step[0] == "charge":
                    rec.charge(step[1], "host", None)
                elif step[0] == "op":
                    rec.op(step[1], "write", (0, 1))
                elif step[0] == "mark":
                    rec.mark(step[1])
                elif not rec.live:
                    rec.start()
    for rec in (plain, fused):
        rec.mark("end")
    assert fused.items == plain.items
