"""A killed sdbench leaves no worker running (issue 32, defect 7): SIGKILL the parent of every kind of pool once
its workers have started, and none of them outlives it."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SDBENCH = [sys.executable, "-m", "sdbench"]


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(d))
    return out


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for c in _children(todo.pop()):
            found.append(c)
            todo.append(c)
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan waits for its new parent to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("argv", [
    ["run", "mpy-esp32s3-sdspi", "-j", "2", "--no-save"],     # a run's range members (run, not re-priced)
    ["sweep", "mpy-cache-size", "-j", "2", "--no-save"],                            # sweep points
    ["powerloss", "espidf-esp32-sdmmc4-40mhz", "--matrix", "-j", "2"],              # power-loss cells
    ["fio", "--device", "@IMG@", "--rw", "randread", "--numjobs", "2", "--runtime-s", "60", "--time-based",
     "--size", "16M", "--no-save"],                                                 # one process per fio job
], ids=["range-members", "sweep", "powerloss-matrix", "fio-job-processes"])
def test_a_killed_parent_leaves_no_worker(argv, tmp_path):
    img = tmp_path / "card.img"
    with open(img, "wb") as f:
        f.truncate(32 << 20)
    argv = [str(img) if a == "@IMG@" else a for a in argv]
    p = subprocess.Popen([*SDBENCH, *argv, "-q"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            seen = _descendants(p.pid)
            if len(seen) >= 2:
                break
            time.sleep(0.1)
        assert len(seen) >= 2 and p.poll() is None, "the workers never started"
        time.sleep(0.5)  # mid-job
        seen = sorted(set(seen) | set(_descendants(p.pid)))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_running(w) for w in seen):
            time.sleep(0.1)
        survivors = [w for w in seen if _running(w)]
        assert not survivors, f"workers {survivors} outlived their parent"
    finally:
        for w in [p.pid, *seen]:
            try:
                os.kill(w, signal.SIGKILL)
            except OSError:
                pass
        p.wait()


def _nap(seconds: float) -> tuple[float, float]:
    time.sleep(seconds)
    return seconds, seconds


def test_a_stopped_pool_ends_its_workers_instead_of_waiting_for_them():
    """SIGTERM to sdbench alone (kill PID, docker stop) left the pool's block, which waited for every queued
    job: validate took half a minute to stop.  Stopped, the pool drops the queue and ends the running jobs."""
    from sdbench.parallel import run_pool

    def stop(i: float, rec: float) -> None:
        raise KeyboardInterrupt  # as the signal handler does, once the first job is back

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_pool([0.1, 30.0, 30.0, 30.0], 2, stop, _nap)
    assert time.monotonic() - t0 < 10
