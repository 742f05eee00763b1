"""sdbench's real-media engine against fio on the same target in the same run.

Target: a loop device (``losetup --direct-io=on`` where the kernel allows it)
over an image file in tmpfs (``/dev/shm``) when running as root with a working
losetup, otherwise the image file itself.  tmpfs keeps the disk's own
second-to-second noise out, so the comparison shows the engines' overhead
through the real block layer; a card is far slower than either engine.
Both tools use O_DIRECT.  sdbench runs its default ``ioengine = "auto"``, which takes
its io_uring engine at QD1 (one ring, each I/O submitted and then waited for) and at
QD32 (one ring per CPU, in forked processes); the text says which engine ran, and
psync's threads if io_uring is unavailable.  fio runs ``ioengine=io_uring``, and at QD1
also ``ioengine=psync`` in the same rounds (its synchronous engine, fio's default), so
each QD1 measurement has a row against either:

* sequential 1 MiB writes (with a final fsync) and reads, going round a
  256 MiB region: sdbench should reach at least 0.95x fio's throughput;
* random 4 KiB reads at QD1: at least 0.95x fio's IOPS; random 4 KiB writes
  at QD1 (each write's buffer stamped first): at least 0.8x;
* random 4 KiB reads at QD32: at least 0.95x fio's IOPS.

Beside the rates, each row shows the CPU time each tool spent per I/O
(user + system; fio's usr_cpu and sys_cpu, sdbench's job CPU time).  A
shared machine's load moves the rates from run to run; the CPU time per I/O
moves much less and shows what each engine costs.

Every measurement runs for a fixed time.  Shared machines are noisy from
second to second, so the tools run in adjacent rounds (one run of each, the
order turning from round to round) and the verdict uses the median of the
per-round ratios; the medians of
each tool's figures are shown beside it.  When the interval of that median
ratio has the target inside it, the verdict says so: the run does not settle
which side of the target the engine is on.
fio comes from Debian's package; it is installed with apt-get when missing
(as root), otherwise this section says it was skipped.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

from sdbench.media.linux import LinuxBlockDevice
from sdbench.workloads.fio import JobConfig, run_job

MIB = 1 << 20
SIZE_BYTES = 256 * MIB
RUNTIME_S = 1.0
#: adjacent rounds per measurement (one run of each tool).  On a 2-CPU virtual machine one 1-s run of either tool
#: varies by about +-10 % from the next, so one round's ratio spreads over 0.8-1.2x; rows whose target sits close
#: to parity (0.95x) take more rounds so that their median is known to within a few per cent.  At QD1 on a loop
#: device a run settles into one of two states: the I/O thread shares its CPU with the loop's worker and the
#: completion's softirq thread (three context switches per I/O there), or runs on the other CPU, about twice as
#: fast; which one moves from run to run, for both tools.
ROUNDS = 15
ROUNDS_NEAR_PARITY = 21
#: confidence of the interval shown around each median ratio
CONFIDENCE = 0.90
CASES = [  # label, rw, bs, timed?, metric, target ratio, queue depth
    ("sequential write 1 MiB QD1", "write", MIB, True, "MiB/s", 0.95, 1),
    ("sequential read 1 MiB QD1", "read", MIB, True, "MiB/s", 0.95, 1),
    ("random read 4 KiB QD1", "randread", 4096, True, "IOPS", 0.95, 1),
    ("random write 4 KiB QD1", "randwrite", 4096, True, "IOPS", 0.8, 1),
    ("random read 4 KiB QD32", "randread", 4096, True, "IOPS", 0.95, 32),
]
#: fio's engines run beside sdbench at each queue depth; the first is the one the verdict's sentence names
FIO_ENGINES = {1: ("io_uring", "psync"), 32: ("io_uring",)}


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A distribution-free interval for the median of ``values``: the order statistics k and n+1-k, with k the
    largest rank for which at least ``confidence`` of samples would put the median between them."""
    from scipy.stats import binom

    xs = sorted(values)
    n = len(xs)
    k = 1
    while k + 1 <= n // 2 and 1 - 2 * binom.cdf(k, n, 0.5) >= confidence:
        k += 1
    return xs[k - 1], xs[n - k]


def _ensure_fio() -> str | None:
    if shutil.which("fio"):
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "fio is not installed and cannot be installed here (needs root and apt-get)"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "fio"]):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode:
            return f"installing fio failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
    return None if shutil.which("fio") else "fio still missing after apt-get install"


def _fs_of(path: Path) -> str:
    from sdbench.media.safety import read_mounts

    real = str(path.resolve()) + "/"
    best = max((m for m in read_mounts() if real.startswith(m.mount_point.rstrip("/") + "/")),
               key=lambda m: len(m.mount_point), default=None)
    return f"{best.fstype} ({best.source})" if best else "an unknown filesystem"


def _attach_loop(img: Path) -> tuple[str | None, str]:
    if os.geteuid() != 0 or not shutil.which("losetup"):
        return None, "not root or no losetup"
    for extra in (["--direct-io=on"], []):
        r = subprocess.run(["losetup", "--find", "--show", *extra, str(img)], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip(), "direct-io on" if extra else "direct-io off"
    return None, r.stderr.strip()


def _fio(target: str, rw: str, bs: int, timed: bool, qd: int, engine: str) -> tuple[float, float]:
    """fio's rate (IOPS or MiB/s) and its CPU time per I/O (us)."""
    cmd = ["fio", "--output-format=json", "--name=bench", f"--filename={target}", f"--rw={rw}", f"--bs={bs}",
           f"--size={SIZE_BYTES}", "--direct=1", f"--ioengine={engine}", f"--iodepth={qd}", "--randrepeat=0"]
    if timed:
        cmd += [f"--runtime={RUNTIME_S}", "--time_based"]
    if "write" in rw:
        cmd += ["--end_fsync=1"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"fio failed: {r.stderr.strip()}")
    job = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]
    side = job["write" if "write" in rw else "read"]
    cpu_us = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] * 1000 / max(side["total_ios"], 1)
    return (side["iops"] if rw.startswith("rand") else side["bw_bytes"] / MIB), cpu_us


#: the engine sdbench ran each queue depth with (JobResult.ioengine)
ENGINES_USED: dict[int, set[str]] = {}


def _sdbench(dev: LinuxBlockDevice, rw: str, bs: int, timed: bool, qd: int = 1) -> tuple[float, float]:
    """sdbench's rate (IOPS or MiB/s) and its CPU time per I/O (us)."""
    job = JobConfig(name="bench", rw=rw, bs_bytes=bs, size_bytes=SIZE_BYTES, iodepth=qd, direct=True,
                    runtime_s=RUNTIME_S if timed else 0.0, time_based=timed, fsync_on_end=True)
    res = run_job(dev, job)
    ENGINES_USED.setdefault(qd, set()).add(res.ioengine or "?")
    lp = res.loops[0]
    kind = "write" if "write" in rw else "read"
    secs = lp.duration_ns / 1e9
    cpu_us = (res.stats.cpu["usr_s"] + res.stats.cpu["sys_s"]) * 1e6 / max(lp.ops[kind], 1)
    return (lp.ops[kind] / secs if rw.startswith("rand") else lp.ops[kind] * bs / MIB / secs), cpu_us


def run() -> str:
    head = ["## Real media: sdbench vs fio (same target, same run)", ""]
    why = _ensure_fio()
    if why:
        return "\n".join(head + [f"Skipped: {why}.", ""])
    fio_version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    load_1min = os.getloadavg()[0]
    cpus = os.cpu_count() or 1
    base = None
    for cand in ("/dev/shm", "/var/tmp"):
        if os.path.isdir(cand) and os.access(cand, os.W_OK) and shutil.disk_usage(cand).free > 2 * SIZE_BYTES:
            base = cand
            break
    workdir = Path(tempfile.mkdtemp(prefix="sdbench-bench-", dir=base))
    img = workdir / "target.img"
    loop = None
    try:
        with open(img, "wb") as f:  # real data everywhere: reads must not hit holes
            chunk = os.urandom(MIB)
            for _ in range(SIZE_BYTES // MIB):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        loop, how = _attach_loop(img)
        target = loop or str(img)
        fs_type = _fs_of(workdir)
        where = (f"loop device {loop} ({how}) over a {SIZE_BYTES // MIB} MiB image file on {fs_type}"
                 if loop else f"image file ({SIZE_BYTES // MIB} MiB) on {fs_type} -- loop devices "
                              f"unavailable: {how}")
        dev = LinuxBlockDevice(target, allow_write=True)
        rows = []
        try:
            for label, rw, bs, timed, metric, goal, qd in CASES:
                engines = FIO_ENGINES[qd]
                runners = [("sdbench", lambda: _sdbench(dev, rw, bs, timed, qd))] + [
                    (e, lambda e=e: _fio(target, rw, bs, timed, qd, e)) for e in engines]
                got: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in runners}
                for i in range(ROUNDS_NEAR_PARITY if goal >= 0.95 else ROUNDS):
                    turn = i % len(runners)  # each tool first in turn
                    for name, fn in runners[turn:] + runners[:turn]:
                        got[name].append(fn())
                s_vals = [v for v, _ in got["sdbench"]]
                s_cpu = statistics.median(c for _, c in got["sdbench"])
                for engine in engines:
                    f_vals = [v for v, _ in got[engine]]
                    f_med, s_med = statistics.median(f_vals), statistics.median(s_vals)
                    ratios = [s / f for s, f in zip(s_vals, f_vals) if f]
                    ratio = statistics.median(ratios)
                    low, high = median_interval(ratios)
                    verdict = "ok" if ratio >= goal else "BELOW"
                    if low < goal <= high:  # the median's side of the target is not settled by this run
                        verdict += " (interval spans the target)"
                    rows.append(f"| {label} | fio {engine} | {metric} | {len(ratios)} | {f_med:,.0f} | {s_med:,.0f} "
                                f"| {ratio:.2f}x | {low:.2f}-{high:.2f}x | >= {goal}x | {verdict} "
                                f"| {statistics.median(c for _, c in got[engine]):.1f} / {s_cpu:.1f} |")
        finally:
            dev.close()
    finally:
        if loop:
            subprocess.run(["losetup", "-d", loop], capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
    def ran(qd: int, what: str) -> str:
        used = sorted(ENGINES_USED.get(qd, set()))
        return f"io_uring ({what})" if used == ["io_uring"] else " and ".join(used) or "nothing"
    return "\n".join(head + [
        f"Target: {where}. {fio_version}, O_DIRECT, ioengine=io_uring, and at QD1 also ioengine=psync; sdbench's "
        f"ioengine=auto ran {ran(1, 'one ring, each I/O submitted, then waited for')} at QD1 and "
        f"{ran(32, 'one ring per CPU, in forked processes')} at QD32; each run {RUNTIME_S:g} s; adjacent rounds "
        f"(one run of each tool, each first in turn); ratios are sdbench's over fio's of the same round, and the "
        f"interval is a {CONFIDENCE:.0%} distribution-free interval of their median. "
        f"Load average at the start: {load_1min:.1f} on {cpus} CPU(s)"
        + (" -- a busy machine: RAM-speed I/O becomes CPU-bound and noisy, rerun when idle." if load_1min > cpus / 2
           else "."), "",
        "| measurement | against | unit | rounds | fio (median) | sdbench (median) | sdbench/fio (median of rounds) "
        f"| {CONFIDENCE:.0%} interval | target | verdict | CPU us per I/O, fio / sdbench (medians) |",
        "|---|---|---|---:|---|---|---|---|---|---|---|",
        *rows, ""])


if __name__ == "__main__":
    print(run())
