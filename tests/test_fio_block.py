"""fio jobs and presets on generic BlockDevices: a simulated SD card on a virtual clock, memory, wrappers."""
from __future__ import annotations

from dataclasses import replace

import pytest

from sdbench.cache import BlockCache, CacheConfig
from sdbench.clock import VirtualClock, WallClock
from sdbench.errors import ConfigError, SdbenchError
from sdbench.media.base import BlockDeviceWrapper, Geometry, ReadOnlyError
from sdbench.media.memory import MemoryDevice
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.sdhost import SdHostDriver
from sdbench.media.usbmsc import UsbMscBridge
from sdbench.records import MIB, Results
from sdbench.stack.sd import load_card, load_host
from sdbench.workloads import fio

#: payload ceiling of a 4-bit bus at 40 MHz: 4 bits x 40 MHz = 20 MB/s
BUS_LIMIT_MIB_S = 4 * 40e6 / 8 / MIB


def card(capacity: int = 64 * MIB) -> SdHostDriver:
    return SdHostDriver(load_host("esp32-sdmmc"), SdBus(BusConfig("sd4", 40_000_000)),
                        load_card("generic-sdhc", {"capacity_bytes": capacity}), VirtualClock())


def memory(size: int = 8 * MIB, **kw) -> MemoryDevice:
    return MemoryDevice(Geometry(sector_size=512, sector_count=size // 512), WallClock(), **kw)


def to_json(rec) -> str:
    return Results(runs=(rec,)).to_json()


class FlipOneByte(BlockDeviceWrapper):
    """Writes go through, except that one byte at ``offset_bytes`` (device-absolute) lands flipped."""

    kind = "flip"

    def __init__(self, inner, offset_bytes: int) -> None:
        super().__init__(inner)
        self.offset = offset_bytes

    def _write(self, lba, data, buf_addr):
        start = lba * self.geometry.sector_size
        if start <= self.offset < start + len(data):
            b = bytearray(data)
            b[self.offset - start] ^= 0x40
            data = bytes(b)
        self.inner.write(lba, data, buf_addr=buf_addr)


# ---- jobs -----------------------------------------------------------------------------------------
def test_sequential_write_then_read_on_a_simulated_card():
    dev = card()
    seen: list[tuple[str, float]] = []
    rec = fio.run_jobs(dev, [fio.JobConfig(name="w", rw="write", bs_bytes=MIB, size_bytes=4 * MIB),
                             fio.JobConfig(name="r", rw="read", bs_bytes=MIB, size_bytes=4 * MIB, loops=2)],
                       progress=lambda what, frac: seen.append((what, frac)))
    assert {w for w, _ in seen} == {"w", "r"} and all(0.0 <= f <= 1.0 for _, f in seen)
    w, r = rec.row("w write"), rec.row("r read")
    assert (w.bytes, r.bytes) == (4 * MIB, 8 * MIB)
    for row in (w, r):
        assert 0 < row.mib_s < BUS_LIMIT_MIB_S
    m = rec.metadata["rows"]["r read"]
    assert m["ops"] == 8 and len(m["loops"]) == 2 and m["lat"]["count"] == 8
    assert m["lat"]["min_us"] <= m["lat"]["p50_us"] <= m["lat"]["max_us"]
    assert (rec.clock, rec.source, rec.protocol, rec.stack["kind"]) == ("virtual", "simulated", "fio", "sim-sd")
    assert rec.warnings == ()
    again = Results.from_json(to_json(rec)).runs[0]
    assert again.row("r read").bytes == 8 * MIB


def test_large_sequential_beats_small_random():
    dev = card()
    seq = fio.run_job(dev, fio.JobConfig(name="s", rw="read", bs_bytes=MIB, size_bytes=4 * MIB))
    rnd = fio.run_job(dev, fio.JobConfig(name="r", rw="randread", bs_bytes=4096, size_bytes=4 * MIB,
                                         runtime_s=0.05))
    rate = lambda res: sum(lp.ops["read"] for lp in res.loops) * res.job.bs_bytes / sum(  # noqa: E731
        lp.duration_ns for lp in res.loops)
    assert rate(seq) > rate(rnd) > 0


def test_same_seed_gives_the_same_record_on_a_virtual_clock():
    jobs = [fio.JobConfig(name="a", rw="randrw", bs_bytes=4096, size_bytes=MIB, verify="crc32c", seed=7),
            fio.JobConfig(name="b", rw="randread", bs_bytes=8192, size_bytes=MIB, iodepth=4, seed=7)]
    one, two = (to_json(fio.run_jobs(card(), jobs, identity={"card": "sim"})) for _ in range(2))
    assert one == two
    # another seed: the blocks in another order (a mix keeps its exact share, so the amounts may not differ)
    order: dict[int, list[tuple[str, int]]] = {}
    for seed in (7, 8):
        seen = order[seed] = []

        class Tracer(BlockDeviceWrapper):
            def _read(self, lba, count, buf_addr):
                seen.append(("r", lba))
                return super()._read(lba, count, buf_addr)

            def _write(self, lba, data, buf_addr):
                seen.append(("w", lba))
                return super()._write(lba, data, buf_addr)

        fio.run_jobs(Tracer(card()), [replace(j, seed=seed) for j in jobs], identity={"card": "sim"})
    assert order[7] != order[8]


def test_random_order_covers_each_block_once_per_loop():
    seen: list[int] = []

    class Tracer(BlockDeviceWrapper):
        def _read(self, lba, count, buf_addr):
            seen.append(lba)
            return super()._read(lba, count, buf_addr)

    dev = Tracer(card())
    res = fio.run_job(dev, fio.JobConfig(rw="randread", bs_bytes=4096, size_bytes=MIB, offset_bytes=MIB, loops=2))
    assert [lp.ops["read"] for lp in res.loops] == [256, 256]
    expected = list(range(2048, 2048 + 2048, 8))
    assert sorted(seen[:256]) == expected and sorted(seen[256:]) == expected
    assert seen[:256] != expected and seen[:256] != seen[256:]   # shuffled, differently per loop


def test_randrw_mix_and_verify_on_memory_on_a_wall_clock():
    dev = memory()
    res = fio.run_job(dev, fio.JobConfig(name="m", rw="randrw", bs_bytes=4096, size_bytes=2 * MIB, rwmixread=70,
                                         verify="crc32c"))
    ops_r, ops_w = (sum(lp.ops[k] for lp in res.loops) for k in ("read", "write"))
    assert ops_r + ops_w == 512 and 0.6 < ops_r / 512 < 0.8
    assert res.verify["ok"] and res.verify["checked_blocks"] == ops_w
    rec = fio.run_jobs(dev, [res.job])
    assert (rec.clock, rec.source) == ("wall", "measured") and rec.stack["kind"] == "memory"


def test_verify_passes_and_detects_a_flipped_byte():
    job = fio.JobConfig(name="v", rw="randwrite", bs_bytes=8192, size_bytes=MIB, offset_bytes=MIB,
                        verify="crc32c")
    ok = fio.run_jobs(card(), [job])
    assert ok.metadata["verify"]["v"]["ok"] and ok.metadata["verify"]["v"]["checked_blocks"] == 128
    bad = fio.run_jobs(FlipOneByte(card(), MIB + 5 * 8192 + 100), [job])
    v = bad.metadata["verify"]["v"]
    assert not v["ok"] and v["bad_blocks"] == 1 and v["bad_offsets_bytes"] == [5 * 8192]
    assert fio.verify_failures(bad) == ["v: 1 of 128 blocks corrupted (first at byte 40960)"]


def test_verify_sees_data_written_behind_a_cache():
    dev = BlockCache(card(), CacheConfig(blocks=16))
    res = fio.run_job(dev, fio.JobConfig(name="c", rw="write", bs_bytes=4096, size_bytes=256 * 1024,
                                         verify="crc32c"))
    assert res.verify["ok"] and dev.dirty_blocks == 0   # the job's sync wrote the dirty blocks


def test_time_based_stops_at_runtime_on_the_virtual_clock():
    dev = card()
    res = fio.run_job(dev, fio.JobConfig(rw="read", bs_bytes=64 * 1024, size_bytes=MIB, runtime_s=0.2,
                                         time_based=True))
    lp = res.loops[0]
    assert lp.ops["read"] > 16                                   # went round the 1 MiB region more than once
    assert 0.2e9 <= lp.duration_ns < 0.2e9 + res.stats.dirs["read"].lat.h.max_ns + 1
    # a clock that never moves cannot end a time-based job: one pass, and a warning
    still = MemoryDevice(Geometry(512, 2048), VirtualClock())
    res = fio.run_job(still, fio.JobConfig(rw="read", size_bytes=MIB, runtime_s=1.0, time_based=True))
    assert res.loops[0].ops["read"] == 256 and "did not move" in res.warnings[0]


def test_runtime_limit_cuts_a_loop_short():
    res = fio.run_job(card(), fio.JobConfig(rw="randwrite", bs_bytes=4096, size_bytes=8 * MIB, runtime_s=0.02))
    lp = res.loops[0]
    assert 0 < lp.ops["write"] < 2048 and lp.duration_ns >= 0.02e9


def test_iodepth_warns_once_per_job():
    rec = fio.run_jobs(card(), [fio.JobConfig(name="q", rw="randread", size_bytes=MIB, iodepth=32, loops=3)])
    assert rec.warnings == ("job q: iodepth 32 on sim-sd: requests are served one at a time",)


def test_region_and_read_only_are_refused_before_any_io():
    dev = card(8 * MIB)
    with pytest.raises(SdbenchError, match="too small"):
        fio.run_job(dev, fio.JobConfig(rw="read", size_bytes=4 * MIB, offset_bytes=6 * MIB))
    with pytest.raises(SdbenchError, match="too small"):
        fio.run_job(dev, fio.JobConfig(rw="read", bs_bytes=MIB, size_bytes=0, offset_bytes=7680 * 1024))
    big = MemoryDevice(Geometry(sector_size=4096, sector_count=1024))
    with pytest.raises(ConfigError, match="multiples of the 4096-byte sector"):
        fio.run_job(big, fio.JobConfig(rw="read", bs_bytes=4096, size_bytes=MIB, offset_bytes=512))
    ro = memory(read_only=True)
    with pytest.raises(ReadOnlyError, match="read-only"):
        fio.run_job(ro, fio.JobConfig(rw="write", size_bytes=MIB))
    with pytest.raises(ReadOnlyError, match="read-only"):
        fio.run_sdfat(ro, file_bytes=10_000)
    assert dev.stats.reads == dev.stats.writes == ro.stats.reads == 0
    # size 0: to the end of the device
    res = fio.run_job(dev, fio.JobConfig(rw="read", bs_bytes=MIB, size_bytes=0, offset_bytes=6 * MIB))
    assert res.loops[0].ops["read"] == 2


def test_jobs_through_a_usb_bridge():
    dev = UsbMscBridge(card(), VirtualClock())
    rec = fio.run_jobs(dev, [fio.JobConfig(name="u", rw="write", bs_bytes=64 * 1024, size_bytes=MIB,
                                           verify="crc32c")])
    assert rec.metadata["verify"]["u"]["ok"] and rec.row("u write").mib_s > 0 and rec.clock == "virtual"


# ---- presets --------------------------------------------------------------------------------------
def test_cdm_on_a_simulated_card():
    rec = fio.run_cdm(card(), size_bytes=4 * MIB, loops=2, runtime_s=0.05)
    assert [r.label for r in rec.rows] == [f"{t} {k}" for k in ("read", "write") for t, *_ in fio.CDM_TESTS]
    assert (rec.clock, rec.source, rec.protocol) == ("virtual", "simulated", "cdm")
    assert all(0 < r.value < BUS_LIMIT_MIB_S * MIB / 1e6 for r in rec.rows)
    assert rec.row("SEQ1M Q1T1 read").value > rec.row("RND4K Q1T1 read").value
    assert "job cdm: iodepth 8 on sim-sd: requests are served one at a time" in rec.warnings
    assert to_json(rec) == to_json(fio.run_cdm(card(), size_bytes=4 * MIB, loops=2, runtime_s=0.05))
    ro = MemoryDevice(Geometry(512, 8192), VirtualClock(), read_only=True)
    with pytest.raises(ReadOnlyError, match="--mode read"):
        fio.run_cdm(ro, size_bytes=MIB, loops=1, runtime_s=0.05)
    assert len(fio.run_cdm(ro, size_bytes=MIB, loops=1, runtime_s=0.05, mode="read").rows) == 4


def test_a1_on_a_simulated_card():
    rec = fio.run_a1(card(), size_bytes=4 * MIB, runtime_s=0.05)
    crit = {c["name"]: c for c in rec.metadata["a1"]["criteria"]}
    assert set(crit) == {"sequential write", "random 4K write", "random 4K read"}
    assert all(c["value"] > 0 for c in crit.values())
    assert rec.metadata["a1"]["pass"] == all(c["pass"] for c in crit.values())
    assert (rec.clock, rec.source, rec.protocol) == ("virtual", "simulated", "a1")
    assert to_json(rec) == to_json(fio.run_a1(card(), size_bytes=4 * MIB, runtime_s=0.05))


def test_sdfat_on_a_simulated_card_and_memory():
    rec = fio.run_sdfat(card(), file_bytes=100_000, offset_bytes=MIB)
    w, r = rec.row("sdfat write"), rec.row("sdfat read")
    assert w.bytes == 195 * 512 and w.runs == 2 and r.runs == 2 and w.unit == "KB/s"
    assert 0 < w.value < BUS_LIMIT_MIB_S * MIB / 1e3 and w.value == pytest.approx(w.bytes / w.time_ms)
    p = rec.metadata["rows"]["sdfat write"]["passes"][0]
    assert p["min_us"] <= p["avg_us"] <= p["max_us"]
    assert rec.metadata["verify"]["sdfat"]["ok"] and rec.metadata["verify"]["sdfat"]["checked_chunks"] == 390
    assert (rec.clock, rec.source) == ("virtual", "simulated")
    assert to_json(rec) == to_json(fio.run_sdfat(card(), file_bytes=100_000, offset_bytes=MIB))
    bad = fio.run_sdfat(FlipOneByte(memory(), 3 * 512 + 7), file_bytes=10_000, write_passes=1, read_passes=1)
    assert bad.metadata["verify"]["sdfat"] == {"method": "compare", "checked_chunks": 19, "bad_chunks": 1,
                                               "first_bad_offset_bytes": 1536, "ok": False}
    with pytest.raises(SdbenchError, match="too small"):
        fio.run_sdfat(memory(MIB), file_bytes=2 * MIB)
