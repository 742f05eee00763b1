"""Re-pricing a recorded run (sdbench.ledger, sdbench.repricing) gives what running it again gives.

For every shipped simulated scenario that can be re-priced, each range member's rows re-priced from the recorded
reduced central run must agree with the member's own run within 0.1 % (they agree exactly: the same driver code
times the same requests).  The quick test takes a few scenarios of each kind of stack; the slow one all of them.
"""
from __future__ import annotations

import pytest

from sdbench import population, protocols
from sdbench import scenarios as scen
from sdbench.errors import InternalError, SdbenchError
from sdbench.ledger import Price, Recording, replay
from sdbench.repricing import check_replay, member_unpriceable, replayed_rows

#: relative agreement a re-priced row must have with the run it stands for
TOLERANCE = 1e-3
#: one scenario of each kind of stack: SD sdmmc with FAT/LittleFS, SD over SPI (P2), a streaming driver (SdFat
#: SPI), the ESP32 SPI flash target (wear levelling, SPIFFS, LittleFS), a file workload
QUICK = ["esp32s3-sdmmc4-40mhz", "p2-spi25-350mhz-pny-16gb", "sdfat-bench-due-sdfat-spi",
         "workload-flash-512k-spiffs", "workload-flash-512k-littlefs"]


def _recorded(name: str, **over):
    sc = scen.load(name, [f"{k}={v}" for k, v in over.items()])
    pl = population.plan(sc, simulated=True)
    runs, k = population.budget(sc, len(pl.members))
    reduced = population.with_runs(sc, runs)
    rec = Recording()
    central = protocols._run_once(reduced, recording=rec).rows
    return reduced, rec, central, population.select(pl.members, k)


def _check(name: str, members_checked: int) -> int:
    reduced, rec, central, members = _recorded(name)
    assert rec.repriceable, rec.reasons
    assert check_replay(reduced, rec, central) == ""
    checked = 0
    for m in members[:members_checked]:
        if member_unpriceable(m.overrides):
            continue
        msc = population.member_scenario(reduced, m)
        try:
            ran = protocols._run_once(msc).rows
        except SdbenchError:
            # a drawn value the model refuses (a ratio above 1): the range leaves such a member out, with a
            # warning; re-pricing must refuse it too
            with pytest.raises(SdbenchError):
                replayed_rows(msc, rec, central)
            continue
        priced = replayed_rows(msc, rec, central)
        for a, b in zip(priced, ran):
            assert a.label == b.label
            assert a.runs == b.runs
            assert a.time_ms == pytest.approx(b.time_ms, rel=TOLERANCE, abs=1e-9), (name, m.name, a.label)
        checked += 1
    return checked


@pytest.mark.parametrize("name", QUICK)
def test_repriced_members_agree_with_their_runs(name):
    assert _check(name, 2) >= 1


@pytest.mark.slow
def test_every_shipped_scenario_repriced_or_said_why():
    for name in scen.builtin_names():
        sc = scen.load(name)
        if sc.clock_kind() != "virtual" or not population.plan(sc, simulated=True).members:
            continue
        spec = protocols.protocol(sc.protocol)
        if spec.paced is not None and spec.paced(sc):
            continue
        reduced, rec, central, members = _recorded(name)
        if not rec.repriceable:
            assert rec.reasons[0]  # it says why; its members run instead
            continue
        _check(name, len(members))


def test_members_change_nothing_the_range_depends_on_but_their_fields():
    """A member varies profile fields only; one that changes what the layers above the drivers read (the CPU
    clock a cache and the filesystems price their cycles at) is run, not re-priced."""
    assert member_unpriceable({("sd", "card_params"): {"write_busy_end_us": 900.0}}) == ""
    assert "cpu_hz" in member_unpriceable({("sd", "host_params"): {"cpu_hz": 80_000_000}})


def test_a_paced_or_unattributed_run_is_not_repriced():
    """The logger's records follow the clock: its ranges run their members; so does a stack with a USB bridge,
    whose charges above the card name no parameter."""
    out = protocols.run_scenario(scen.load("logger-sd-fat-pauses", ["logger.duration_s=2"]), ranges=True)
    pricing = out.metadata["range"].get("pricing", {})
    assert pricing.get("re-priced", 0) == 0
    reduced, rec, _, _ = _recorded("esp32s3-usbmsc-spi20mhz")
    assert not rec.repriceable and "names no parameter" in rec.reasons[0]


def test_ranges_say_how_their_members_were_made():
    out = protocols.run_scenario(scen.load("p2-spi25-350mhz-pny-16gb"), ranges=True)
    info = out.metadata["range"]
    assert info["pricing"] == {"re-priced": info["members"], "re-run": 0} and info["members"] >= 2


def test_replay_refuses_what_it_cannot_stand_for():
    rec = Recording()
    rec.start()
    rec.unpriced("a charge that names no parameter")
    with pytest.raises(InternalError):
        replay(rec, [], None, lambda p: 0.0)


def test_a_price_is_its_field_in_its_unit():
    class Host:
        cpu_hz = 200_000_000
        fs_call_cycles = 1000
        poll_yield_after_us = 2.5
    assert Price("sd.host", "fs_call_cycles").ns(Host()) == pytest.approx(5000.0)
    assert Price("sd.host", "fs_call_cycles", 3).ns(Host()) == pytest.approx(15000.0)
    assert Price("sd.host", "cpu_hz", 400).ns(Host()) == pytest.approx(2000.0)
    assert Price("sd.host", "poll_yield_after_us").ns(Host()) == pytest.approx(2500.0)


PI = "pidramble-4b-sandisk-ultra-16gb"
#: jobs of a set size: the same requests whatever the profiles
SIZED_JOBS = ["fio.jobs=[{name='dd', rw='write', bs=524288, offset=1073741824, size=8388608}, "
              "{name='rand', rw='randread', bs=4096, offset=2147483648, size=1048576}]"]


def test_a_fio_job_of_a_set_size_is_repriced_like_a_run():
    sc = scen.load(PI, SIZED_JOBS)
    assert protocols.protocol("fio").paced(sc) == ""
    rec = Recording()
    central = protocols._run_once(sc, recording=rec).rows
    assert rec.repriceable and check_replay(sc, rec, central) == ""
    other = scen.load(PI, SIZED_JOBS + ["sd.card_params.write_busy_block_us=100", "sd.card_params.read_access_us=900"])
    priced, ran = replayed_rows(other, rec, central), protocols._run_once(other).rows
    assert [r.label for r in priced] == [r.label for r in ran] == ["dd write", "rand read"]
    for a, b, c in zip(priced, ran, central):
        assert a.time_ms == pytest.approx(b.time_ms, rel=TOLERANCE) and a.bytes == b.bytes
        assert abs(a.time_ms / c.time_ms - 1) > 0.05  # the fields moved the figure: the check could fail
    info = protocols.run_scenario(sc, ranges=True).metadata["range"]
    assert info["pricing"] == {"re-priced": info["members"], "re-run": 0}


@pytest.mark.parametrize("job, why", [
    ("{name='t', rw='randread', bs=4096, size=1048576, runtime_s=1.0}", "runs for a time"),
    ("{name='r', rw='write', bs=4096, size=1048576, rate_iops=[0, 100, 0]}", "is paced"),
    ("{name='l', rw='read', bs=4096, size=1048576, loops=2}", "several loops"),
])
def test_fio_jobs_whose_requests_follow_the_clock_run_their_members_again(job, why):
    assert why in protocols.protocol("fio").paced(scen.load(PI, [f"fio.jobs=[{job}]"]))
    assert "preset 'cdm'" in protocols.protocol("fio").paced(scen.load("usb2-reader-generic-sdhc"))
