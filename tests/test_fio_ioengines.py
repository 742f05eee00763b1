"""The descriptor engine's I/O engines: io_uring against psync on image files and loop devices, the fallback
where io_uring is unavailable, failed I/Os on a ring, and the ``ioengine`` option."""
from __future__ import annotations

import array
import errno
import json
import os
import struct
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from sdbench.clock import VirtualClock
from sdbench.errors import ConfigError
from sdbench.media.base import BlockDeviceError
from sdbench.media.linux import AlignedBuffer, LinuxBlockDevice
from sdbench.media.sim.bus import BusConfig, SdBus
from sdbench.media.sim.sdhost import SdHostDriver
from sdbench.records import MIB, Results
from sdbench.stack.sd import load_card, load_host
from sdbench.workloads import fio
from sdbench.workloads.fio.engine import JobContext, pick_ioengine
from sdbench.workloads.fio.ioengine import Control, LoopIO, Slot
from sdbench.workloads.fio.plan import PassIO
from sdbench.workloads.fio.jobs import AUTO_QUEUED_MIN_IODEPTH, IOENGINES
from sdbench.workloads.fio.uring import UringEngine, open_ring

#: why io_uring cannot run here (None: it can)
NO_URING = UringEngine().unavailable()
needs_uring = pytest.mark.skipif(NO_URING is not None, reason=f"io_uring unavailable: {NO_URING}")


def image(tmp_path: Path, size: int = 4 * MIB) -> LinuxBlockDevice:
    p = tmp_path / "card.img"
    p.write_bytes(os.urandom(size))
    return LinuxBlockDevice(str(p), allow_write=True)


def counts(res: fio.JobResult) -> tuple:
    """What two engines must agree on: I/Os and bytes per direction, and what verify checked."""
    ops = tuple(sum(lp.ops[k] for lp in res.loops) for k in ("read", "write"))
    v = res.verify or {}
    return ops, tuple(n * res.job.bs_bytes for n in ops), v.get("checked_blocks"), v.get("bad_blocks"), v.get("ok")


# ---- the option -------------------------------------------------------------------------------------------
def test_ioengine_takes_fios_names_and_refuses_others():
    assert fio.JobConfig().ioengine == "auto"
    assert {IOENGINES[n] for n in ("psync", "sync", "pvsync", "pvsync2")} == {"psync"}
    assert {IOENGINES[n] for n in ("io_uring", "libaio", "posixaio")} == {"io_uring"}
    (job,) = fio.parse_fio_ini("[global]\nioengine=libaio\n[j]\nrw=randread\niodepth=4\n", "x.fio")
    assert (job.ioengine, job.iodepth) == ("libaio", 4)
    with pytest.raises(ConfigError, match=r"ioengine = 'mmap' is not one of auto, psync"):
        fio.job_from_mapping({"ioengine": "mmap"})


def test_auto_is_io_uring_at_depth_1_and_deep_queues_and_psync_between():
    assert AUTO_QUEUED_MIN_IODEPTH == 8
    ring = "io_uring" if NO_URING is None else "psync"
    assert pick_ioengine(fio.JobConfig(iodepth=1))[0].name == ring
    assert [pick_ioengine(fio.JobConfig(iodepth=d))[0].name for d in range(2, 8)] == ["psync"] * 6
    assert pick_ioengine(fio.JobConfig(iodepth=1, ioengine="psync"))[0].name == "psync"
    assert pick_ioengine(fio.JobConfig(iodepth=32, ioengine="psync"))[0].name == "psync"
    deep, warnings = pick_ioengine(fio.JobConfig(iodepth=8))
    assert deep.name == ("io_uring" if NO_URING is None else "psync")
    assert bool(warnings) == (NO_URING is not None)


# ---- io_uring against psync -------------------------------------------------------------------------------
@needs_uring
@pytest.mark.parametrize("rw, iodepth, verify", [
    ("randread", 4, "none"), ("read", 3, "none"), ("randwrite", 8, "crc32c"), ("write", 2, "none"),
    ("randrw", 6, "crc32c"), ("randread", 32, "none"),
    # depth 1: the lone loops (reads; writes without verify), and the general ones with verify or a mix
    ("randread", 1, "none"), ("write", 1, "none"), ("randwrite", 1, "crc32c"), ("randrw", 1, "none"),
])
def test_io_uring_and_psync_move_the_same_bytes_on_an_image(tmp_path, rw, iodepth, verify):
    dev = image(tmp_path)
    try:
        got = {}
        for engine in ("io_uring", "psync"):
            job = fio.JobConfig(name="j", rw=rw, bs_bytes=4096, size_bytes=2 * MIB, iodepth=iodepth, verify=verify,
                                ioengine=engine, seed=5, loops=2)
            res = fio.run_job(dev, job)
            assert res.ioengine == engine and not res.warnings
            for kind in ("read", "write"):
                d = res.stats.dirs.get(kind)
                ops = sum(lp.ops[kind] for lp in res.loops)
                assert (d.lat.n if d else 0) == ops
                if d is not None:   # every completion inside its loop, every latency measured
                    assert d.lat.h.min_ns > 0 and d.sec.ios.sum() == ops
                    assert res.stats.start_ns <= d.sec.t0 and d.sec.ios.size <= 1 + (
                        res.loops[-1].stop_ns - d.sec.t0) // 10**9
            got[engine] = counts(res)
        assert got["io_uring"] == got["psync"]
        ops, _, checked, bad, ok = got["io_uring"]
        assert sum(ops) == 2 * 512                               # every block once per loop
        if verify != "none":
            assert ok and bad == 0 and 0 < checked <= 512
    finally:
        dev.close()


@needs_uring
def test_rings_in_forked_processes_write_every_block_once(tmp_path):
    dev = image(tmp_path)
    job = fio.JobConfig(name="w", rw="randwrite", bs_bytes=4096, size_bytes=2 * MIB, iodepth=32, seed=9)
    rec = fio.run_jobs(dev, [job])
    dev.close()
    assert rec.metadata["rows"]["w write"]["ioengine"] == "io_uring"
    assert rec.metadata["rows"]["w write"]["ops"] == 512
    raw = (tmp_path / "card.img").read_bytes()
    stamps = [struct.unpack_from("<QQ", raw, b * 4096) for b in range(512)]
    assert len({run for run, _ in stamps}) == 1                   # this run's blocks, all of them
    assert sorted(seq for _, seq in stamps) == list(range(512))   # each I/O number once, whichever process


@needs_uring
@pytest.mark.parametrize("bs", [4096, MIB])   # 8 write buffers, stamped ahead; one, stamped after each write
def test_depth_1_writes_on_a_ring_stamp_each_block_with_its_own_number(tmp_path, bs):
    dev = image(tmp_path)
    job = fio.JobConfig(name="w", rw="randwrite", bs_bytes=bs, size_bytes=2 * MIB, seed=3, ioengine="io_uring")
    res = fio.run_job(dev, job)
    dev.close()
    assert res.ioengine == "io_uring"
    nblocks = 2 * MIB // bs
    raw = (tmp_path / "card.img").read_bytes()
    stamps = [struct.unpack_from("<QQ", raw, b * bs) for b in range(nblocks)]
    assert len({run for run, _ in stamps}) == 1
    assert sorted(seq for _, seq in stamps) == list(range(nblocks))
    # and the block each I/O number went to is the plan's: the same as psync's, run for run
    dev = image(tmp_path)
    fio.run_job(dev, replace(job, ioengine="psync"))
    dev.close()
    again = (tmp_path / "card.img").read_bytes()
    assert [seq for _, seq in stamps] == [struct.unpack_from("<QQ", again, b * bs)[1] for b in range(nblocks)]


@needs_uring
def test_time_based_io_uring_reports_progress_and_stops_on_time(tmp_path):
    dev = image(tmp_path, MIB)
    seen: list[float] = []
    res = fio.run_job(dev, fio.JobConfig(rw="randread", bs_bytes=4096, size_bytes=MIB, iodepth=4, runtime_s=0.3,
                                         time_based=True, ioengine="io_uring"),
                      progress=lambda label, frac: seen.append(frac))
    dev.close()
    lp = res.loops[0]
    assert res.ioengine == "io_uring" and lp.ops["read"] > 256   # went round the region
    assert 0.25e9 < lp.duration_ns < 1.5e9
    assert seen and all(0 <= f <= 1 for f in seen)


@needs_uring
@pytest.mark.parametrize("rw", ["randread", "randwrite"])
def test_depth_1_on_a_ring_reports_progress_stops_on_time_and_on_request(tmp_path, rw):
    dev = image(tmp_path, MIB)
    try:
        seen: list[float] = []
        job = fio.JobConfig(rw=rw, bs_bytes=4096, size_bytes=MIB, runtime_s=0.3, time_based=True,
                            ioengine="io_uring")
        res = fio.run_job(dev, job, progress=lambda label, frac: seen.append(frac))
        lp = res.loops[0]
        kind = "read" if rw == "randread" else "write"
        assert res.ioengine == "io_uring" and lp.ops[kind] > 256
        assert 0.25e9 < lp.duration_ns < 1.5e9
        assert res.stats.dirs[kind].lat.n == lp.ops[kind]      # every I/O's latency recorded
        assert len(seen) >= 2 and all(0 <= f <= 1 for f in seen)
        # a stop from outside (Ctrl-C) ends the loop at its next report, long before its 30 s
        control = Control()
        timer = threading.Timer(0.3, control.stop)
        timer.start()
        res = fio.run_job(dev, replace(job, runtime_s=30.0), ctx=JobContext(control=control))
        timer.join()
        assert 0.25e9 < res.loops[0].duration_ns < 3e9
    finally:
        dev.close()


def test_simulated_cards_ignore_the_engine():
    def card() -> SdHostDriver:
        return SdHostDriver(load_host("esp32-sdmmc"), SdBus(BusConfig("sd4", 40_000_000)),
                            load_card("generic-sdhc", {"capacity_bytes": 64 * MIB}), VirtualClock())

    docs = []
    for engine in ("io_uring", "psync", "auto"):
        job = fio.JobConfig(name="r", rw="randrw", bs_bytes=4096, size_bytes=MIB, iodepth=8, verify="crc32c",
                            ioengine=engine)
        rec = fio.run_jobs(card(), [job])
        assert "ioengine" not in rec.metadata["rows"]["r read"]
        doc = json.loads(Results(runs=(rec,)).to_json())["runs"][0]
        for j in doc["metadata"]["jobs"]:
            assert j.pop("ioengine") == engine
        doc.pop("started_utc", None), doc.pop("finished_utc", None)
        docs.append(doc)
    assert docs[0] == docs[1] == docs[2]


# ---- where io_uring is unavailable ------------------------------------------------------------------------
def _fallback_run(tmp_path: Path, ioengine: str = "io_uring") -> fio.JobResult:
    dev = image(tmp_path, MIB)
    try:
        return fio.run_job(dev, fio.JobConfig(name="f", rw="randrw", bs_bytes=4096, size_bytes=MIB, iodepth=8,
                                              verify="crc32c", ioengine=ioengine))
    finally:
        dev.close()


def test_falls_back_to_psync_when_the_binding_does_not_load(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "liburing", None)   # import liburing raises ImportError
    for asked in ("io_uring", "libaio", "auto"):
        res = _fallback_run(tmp_path, asked)
        assert res.ioengine == "psync"
        assert len(res.warnings) == 1
        assert res.warnings[0].startswith("job f: io_uring is not available here: the liburing binding does not load")
        assert res.warnings[0].endswith("iodepth 8 runs as psync (a thread of synchronous I/O per I/O in flight)")
        ops, nbytes, checked, bad, ok = counts(res)
        assert sum(ops) == 256 and ok and checked == ops[1]
    assert not _fallback_run(tmp_path, "psync").warnings


@pytest.mark.parametrize("err, where", [(errno.ENOSYS, "io_uring_queue_init"), (errno.EPERM, "io_uring_queue_init"),
                                        (errno.EPERM, "io_uring_submit_and_wait")])
def test_falls_back_when_the_kernel_refuses_io_uring(tmp_path, monkeypatch, err, where):
    lib = pytest.importorskip("liburing")

    def refuse(*args, **kw):
        raise OSError(err, os.strerror(err))
    monkeypatch.setattr(lib, where, refuse)
    res = _fallback_run(tmp_path)
    assert res.ioengine == "psync" and res.verify["ok"]
    assert res.warnings == [f"job f: io_uring is not available here: the kernel refuses io_uring ({os.strerror(err)}); "
                            f"iodepth 8 runs as psync (a thread of synchronous I/O per I/O in flight)"]


@needs_uring
def test_a_kernel_without_the_set_up_flags_gets_a_plain_ring(monkeypatch):
    import liburing as lib

    real, flags_seen = lib.io_uring_queue_init, []

    def old_kernel(entries, ring, flags=0):
        flags_seen.append(flags)
        if flags:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(entries, ring, flags)
    monkeypatch.setattr(lib, "io_uring_queue_init", old_kernel)
    lib.io_uring_queue_exit(open_ring(lib, 4))
    single = lib.IORING_SETUP_SINGLE_ISSUER
    # deferred completions (6.1), then cooperative ones (6.0), then none
    assert flags_seen == [single | lib.IORING_SETUP_DEFER_TASKRUN, single | lib.IORING_SETUP_COOP_TASKRUN, 0]


# ---- failed I/O on a ring ---------------------------------------------------------------------------------
def _slots(n: int, bs: int) -> list[Slot]:
    return [Slot(i, AlignedBuffer(bs), None) for i in range(n)]


def _loop_io(job: fio.JobConfig, fd: int, nblocks: int) -> LoopIO:
    offs = array.array("q", (i * job.bs_bytes for i in range(nblocks)))
    return LoopIO(job, fd, PassIO(offs, b"\x01", job.bs_bytes), 0, 1, nblocks, [sys.maxsize], None)


@needs_uring
def test_a_failed_io_on_the_ring_names_its_offset_after_the_others_finish(tmp_path):
    job = fio.JobConfig(name="e", rw="randread", bs_bytes=4096, iodepth=4)
    p = tmp_path / "f.bin"
    p.write_bytes(bytes(8192))
    slots = _slots(4, 4096)
    # no such descriptor: every I/O fails (EBADF), the first one reaped is reported once the others are in
    with pytest.raises(BlockDeviceError, match=r"^job e: I/O at byte \d+ failed: Bad file descriptor$"):
        UringEngine().run(_loop_io(job, -1, 16), slots, None)
    # a short read (past the end of a 2-block file) is an error too, as with preadv
    fd = os.open(p, os.O_RDONLY)
    try:
        with pytest.raises(BlockDeviceError, match=r"^short read at byte (8192|12288) \(0 of 4096 B\)$"):
            UringEngine().run(_loop_io(job, fd, 16), slots, None)
        # the same at depth 1, on the lone loop
        lone = fio.JobConfig(name="e", rw="randread", bs_bytes=4096, iodepth=1)
        with pytest.raises(BlockDeviceError, match=r"^short read at byte 8192 \(0 of 4096 B\)$"):
            UringEngine().run(_loop_io(lone, fd, 16), slots[:1], None)
        with pytest.raises(BlockDeviceError, match=r"^job e: I/O at byte 0 failed: Bad file descriptor$"):
            UringEngine().run(_loop_io(lone, -1, 16), slots[:1], None)
    finally:
        os.close(fd)
        for s in slots:
            s.bufs.close()


# ---- on a loop device (root) ------------------------------------------------------------------------------
@pytest.mark.root
@needs_uring
def test_io_uring_on_a_loop_device(loopdev):
    dev = LinuxBlockDevice(loopdev[0], allow_write=True)
    try:
        assert dev.direct
        for rw, iodepth, verify in (("randread", 16, "none"), ("randwrite", 8, "crc32c")):
            got = {}
            for engine in ("io_uring", "psync"):
                res = fio.run_job(dev, fio.JobConfig(name="l", rw=rw, bs_bytes=4096, size_bytes=4 * MIB,
                                                     iodepth=iodepth, verify=verify, ioengine=engine))
                assert res.ioengine == engine
                got[engine] = counts(res)
            assert got["io_uring"] == got["psync"] and sum(got["psync"][0]) == 1024
            assert verify == "none" or got["io_uring"][4]
    finally:
        dev.close()


@needs_uring
@pytest.mark.parametrize("iodepth", [1, 8])
def test_a_ring_survives_a_storm_of_signals(tmp_path, iodepth):
    """A signal pending while io_uring starts a worker thread for an I/O cancels that I/O (ECANCELED): under a
    signal every 50 µs, writes to an image file failed ("Operation canceled") in about half the runs, at depth 1
    and 8.  Such an I/O is done again; every block is written once, with its own number."""
    import signal

    dev = image(tmp_path)
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: None)
    signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
    try:
        for bs in (4096, MIB, 4096, MIB, 4096):  # several buffers (the next stamped ahead), and one
            res = fio.run_job(dev, fio.JobConfig(name="s", rw="randwrite", bs_bytes=bs, size_bytes=2 * MIB,
                                                 ioengine="io_uring", iodepth=iodepth, loops=2))
            assert res.ioengine == "io_uring" and sum(lp.ops["write"] for lp in res.loops) == 2 * (2 * MIB // bs)
            assert res.stats.dirs["write"].lat.n == 2 * (2 * MIB // bs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        dev.close()
    raw = (tmp_path / "card.img").read_bytes()
    seqs = sorted(struct.unpack_from("<QQ", raw, b * 4096)[1] for b in range(512))
    assert seqs == list(range(512))   # the last loop: every block, each I/O number once
