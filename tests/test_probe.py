"""sdbench probe: flashbench-like tests recover what a simulated card's profile set; a profile made of them
runs; real devices are probed read-only unless allowed, and writes stay inside the range."""
from __future__ import annotations

import hashlib
import json

import pytest

from sdbench import scenarios as scen
from sdbench.cli import main
from sdbench.clock import VirtualClock
from sdbench.probe import Prober
from sdbench.probe.profile import card_from_probe
from sdbench.stack.sd import load_card

from conftest import sim_sd_toml, write_file

MIB = 1 << 20
#: a USB 2.0 high-speed reader answers in packet slots of this many µs (the reader profile)
USB_SLOT_US = 9.6
READER = "usb2-reader-generic-sdhc"


def _probe(sets: list[str], *, writes: bool = True, name: str = READER):
    built = scen.load(name, sets).build()
    try:
        dev = built.target.sd_device
        return Prober(dev, target="sim", writes=writes).run(), dev
    finally:
        built.close()


def _card(**fields) -> list[str]:
    return [f"sd.card_params.{k}={v}" for k, v in fields.items()]


# ---- the mechanism the alignment test reads ------------------------------------------------------------------
def test_a_read_across_a_page_or_au_boundary_costs_its_extra():
    parts = scen.load("espidf-esp32-sdmmc4-40mhz", _card(read_page_cross_us=30, read_au_cross_us=200,
                                                         page_bytes=16384)).build().sd_parts
    dev = parts.driver(VirtualClock())
    page, au = 16384 // 512, (4 << 20) // 512

    def t(lba):
        t0 = dev.clock.now_ns()
        dev.read(lba, 2)
        return (dev.clock.now_ns() - t0) / 1e3

    inside = t(page + 4)
    assert t(page - 1) - inside == pytest.approx(30, abs=0.01)        # one page boundary
    assert t(au - 1) - inside == pytest.approx(30 + 200, abs=0.01)    # an AU boundary is a page boundary too
    plain = scen.load("espidf-esp32-sdmmc4-40mhz", []).build().sd_parts.driver(VirtualClock())
    t0 = plain.clock.now_ns()
    plain.read(au - 1, 2)
    assert (plain.clock.now_ns() - t0) / 1e3 == pytest.approx(inside, abs=0.01)  # shipped cards: no extra


# ---- the probe recovers what the card profile set --------------------------------------------------------------
@pytest.mark.parametrize("au_mib,open_aus", [(4, 2), (8, 6), (4, 6), (8, 2)])
def test_probe_recovers_au_and_open_units_through_a_usb_reader(au_mib, open_aus):
    res, _ = _probe(_card(au_bytes=au_mib * MIB, update_block_bytes=au_mib * MIB, open_aus=open_aus))
    assert res.open_aus == open_aus
    assert res.au_bytes_write == au_mib * MIB
    # a merge per write beyond the open units: the population card's merge of an AU less one 16 KiB chunk
    card = load_card("generic-sdhc")
    merge_us = card.merge_base_ms * 1e3 + (au_mib * 1024 - 16) * card.merge_copy_us_per_kib
    assert res.merge_us == pytest.approx(merge_us, rel=0.01)
    # shipped cards have no read boundary costs: the reads find nothing, and say so
    assert res.page_bytes is None and res.au_bytes_read is None
    assert "took longer" in res.not_measured["page_bytes"]


def test_alignment_finds_page_and_au_from_reads_alone():
    res, dev = _probe(_card(page_bytes=8192, au_bytes=8 * MIB, update_block_bytes=8 * MIB,
                            read_page_cross_us=20, read_au_cross_us=100), writes=False)
    assert (res.page_bytes, res.au_bytes_read) == (8192, 8 * MIB)
    # seen through the reader's 9.6 µs USB packet slots: within one slot (where the times fall in a slot
    # follows the card's other timings, the population's medians here)
    assert res.page_cross_us == pytest.approx(20, abs=USB_SLOT_US) and res.au_cross_us == pytest.approx(100, abs=USB_SLOT_US)
    assert dev.stats.writes == 0 and res.open_aus is None
    assert res.not_measured["open_aus"] == "write tests need --allow-write"


def test_profile_fits_the_card_fields_through_the_setup():
    truth = dict(read_access_us=500.0, read_block_gap_us=10.0, write_busy_single_us=3000.0,
                 write_busy_block_us=40.0, write_busy_end_us=2500.0, page_bytes=8192, au_bytes=8 * MIB,
                 update_block_bytes=8 * MIB, open_aus=6, read_page_cross_us=20.0, read_au_cross_us=100.0)
    res, dev = _probe(_card(**truth))
    card = card_from_probe(res, name="t", setup=READER, sets=[], capacity_bytes=dev.geometry.size_bytes)
    for k, v in truth.items():
        if k in ("read_page_cross_us", "read_au_cross_us"):  # differences of two times in 9.6 µs USB slots
            assert card.table[k] == pytest.approx(v, abs=USB_SLOT_US), k
        else:
            assert card.table[k] == pytest.approx(v, rel=0.03), k
    # ERASE is not in USB mass storage: left at the population, with the reason
    assert "no erase command" in card.left["erase_busy_us"]


def test_profile_fits_erase_where_the_host_sends_it(tmp_path):
    # the reader's SD controller without the USB side: ERASE reaches the card, and DAT0 busy is timed exactly
    setup = write_file(tmp_path, "reader.toml", 'protocol = "fio"\n' + sim_sd_toml().replace(
        '"esp32-sdmmc"', '"usb2-card-reader"'))
    res, dev = _probe(_card(erase_busy_us=5000.0, erase_busy_per_sector_us=0.5), name=setup)
    card = card_from_probe(res, name="t", setup=setup, sets=[], capacity_bytes=dev.geometry.size_bytes)
    assert [e["kind"] for e in res.erase] == ["erase", "erase", "trim"]
    assert card.table["erase_busy_us"] == pytest.approx(5000, rel=0.03)
    assert card.table["erase_busy_per_sector_us"] == pytest.approx(0.5, rel=0.03)


def test_probe_is_deterministic():
    a, _ = _probe(_card(open_aus=3))
    b, _ = _probe(_card(open_aus=3))
    da, db = a.to_dict(), b.to_dict()
    da.pop("elapsed_s"), db.pop("elapsed_s")
    assert da == db


# ---- the command -------------------------------------------------------------------------------------------------
def test_cli_profile_runs_the_espidf_protocol_on_the_esp32(tmp_path, capsys):
    prof, page = tmp_path / "card.toml", tmp_path / "probe.html"
    assert main(["probe", "--scenario", READER, "--set", "sd.card_params.open_aus=5", "--allow-write", "-q",
                 "-f", "json", "--profile", str(prof), "--html", str(page)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["open_aus"] == 5 and doc["profile"]["fields"]["open_aus"]
    text = prof.read_text()
    assert "open_aus = 5" in text and 'timing_from = "population"' in text
    html = page.read_text()
    assert html.count("data:image/svg+xml;base64,") == 2 and "Open units" in html
    assert main(["run", "espidf-esp32-sdmmc4-40mhz", "--set", f"sd.card={prof}", "--set", "espidf.runs=1",
                 "--no-save", "--no-range", "-q", "-f", "json"]) == 0
    run = json.loads(capsys.readouterr().out)["runs"][0]
    assert run["stack"]["sd"]["card"]["open_aus"] == 5
    assert all(r["time_ms"] > 0 for r in run["rows"])


@pytest.mark.parametrize("args,msg", [
    ([], "give a TARGET"),
    (["x.img", "--scenario", READER], "not both"),
    (["--scenario", READER, "--offset", "4096"], "--offset"),
    (["--scenario", "espidf-memory"], "no simulated SD card"),
    (["--scenario", READER, "--profile", "card.txt"], "a card profile is a .toml file"),
    (["--scenario", READER, "--set", "sd.card_params.open_aus=0"], "open_aus"),
    (["/nonexistent/card.img"], "no such"),
])
def test_cli_bad_input_is_one_line(args, msg, capsys):
    assert main(["probe", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and msg in err and "\n" not in err


def test_cli_existing_profile_needs_force(tmp_path, capsys):
    prof = tmp_path / "card.toml"
    prof.write_text("# mine\n")
    assert main(["probe", "--scenario", READER, "-q", "--profile", str(prof)]) == 2
    assert "--force" in capsys.readouterr().err and prof.read_text() == "# mine\n"


def test_cli_image_read_only_unless_allowed(tmp_path, capsys):
    img = tmp_path / "card.img"
    img.write_bytes(bytes(range(256)) * (64 * MIB // 256))
    before = hashlib.sha256(img.read_bytes()).digest()
    assert main(["probe", str(img), "-q"]) == 0
    out = capsys.readouterr().out
    assert "| Open units" in out and "write tests need --allow-write" in out
    assert "| Range probed | 67,108,864 B (64 MiB) |" in " ".join(out.split())
    assert hashlib.sha256(img.read_bytes()).digest() == before
    # a range that does not start at byte 0 says where it starts
    assert main(["probe", str(img), "-q", "--offset", "16M", "--size", "8M"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "| Range probed | 8,388,608 B (8 MiB) from byte 16,777,216 (16 MiB) |" in out
    assert main(["probe", str(img), "-q", "--offset", "16M", "--size", "8M", "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["offset_bytes"], doc["range_bytes"]) == (16 * MIB, 8 * MIB)
    assert main(["probe", str(img), "-q", "--allow-write"]) == 2       # no --yes and no terminal: refused
    assert hashlib.sha256(img.read_bytes()).digest() == before


# ---- real block devices (root) -------------------------------------------------------------------------------------
def test_loop_device_writes_stay_in_the_range_and_it_says_what_it_could_not_measure(loopdev, tmp_path, capsys):
    dev, img = loopdev
    with open(dev, "r+b") as f:
        f.write(bytes(range(256)) * (32 * MIB // 256))
    with open(dev, "rb") as f:
        data = f.read()
    lo, hi = 8 * MIB, 24 * MIB
    assert main(["probe", dev, "--allow-write", "--yes", "--offset", str(lo), "--size", str(hi - lo), "-q",
                 "-f", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["range_bytes"] == hi - lo and doc["offset_bytes"] == lo and doc["writes"]
    # a loop device merges nothing: the open-unit test says so rather than guess
    assert doc["open_aus"] is None and "did not slow down" in doc["not_measured"]["open_aus"]
    assert doc["page_bytes"] is None and doc["not_measured"]["page_bytes"]
    assert doc["latency"] and all(x["median_us"] > 0 for x in doc["latency"])
    with open(dev, "rb") as f:
        after = f.read()
    assert after[:lo] == data[:lo] and after[hi:] == data[hi:]
    assert after[lo:hi] != data[lo:hi]
