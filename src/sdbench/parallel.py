"""Executors for independent simulated runs (sweep points, power-loss cells, scenarios, range members):
a local process pool or a Dask distributed cluster.  A simulated run's result depends only on its scenario
and seed, never on the worker that ran it, so callers keep results in their own order.

Workers end with the process that started them: a killed ``sdbench`` (SIGKILL, a closed terminal) leaves no
worker running on under PID 1. Every process sdbench forks (pool workers, the fio engine's I/O processes)
asks the kernel for SIGKILL when its parent goes (:func:`end_workers_with_parent`); pool workers started
another way (a fork server, spawn) do so as they start.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .errors import SdbenchError
from .progress import THREAD_NAME as PROGRESS_THREAD

#: prctl(2) option: the signal a process gets when its parent (the thread that forked it) ends
PR_SET_PDEATHSIG = 1


def _libc_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return prctl


_prctl = _libc_prctl()
_forking_parent = os.getpid()
_hooked = False


def end_with_parent(parent: int) -> None:
    """In a worker: end when ``parent`` (the process that started it) ends."""
    if _prctl is not None and _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
        if os.getppid() != parent:  # it ended before the request was made
            os._exit(1)
        return

    def watch() -> None:  # no prctl (not Linux): look every half second
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()


def _before_fork() -> None:
    global _forking_parent
    _forking_parent = os.getpid()


def _after_fork_in_child() -> None:
    if _prctl is not None:  # the watcher thread of end_with_parent is for pool workers only
        end_with_parent(_forking_parent)


def _pool_worker() -> None:
    """A pool worker, however it was started (forked here, by a fork server, spawned): it ends with its parent
    (the fork server ends with the process that started it)."""
    end_with_parent(os.getppid())


def end_workers_with_parent() -> None:
    """From now on every process this one forks ends when this one ends (the command line calls it once)."""
    global _hooked
    if not _hooked:
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
        _hooked = True


def mp_context() -> multiprocessing.context.BaseContext:
    """Fork workers from this (warmed-up, single-threaded) process when possible: they start at once
    with sdbench imported and no filesystem mounted; with other threads around, fork is unsafe, so
    a fork server (sdbench preloaded) or spawn."""
    methods = multiprocessing.get_all_start_methods()
    others = [t for t in threading.enumerate() if t is not threading.current_thread() and t.name != PROGRESS_THREAD]
    if "fork" in methods and not others:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["sdbench.sweep", "sdbench.protocols"])
        return ctx
    return multiprocessing.get_context("spawn")


def run_pool(jobs: list[Any], workers: int, done: Callable[[int, Any], None],
             fn: Callable[[Any], tuple[int, Any]]) -> dict[int, Any]:
    """``fn(job) -> (index, result)`` for every job, in ``workers`` processes (``fn`` a module-level
    function: it is sent to them); ``done(index, result)`` as each finishes."""
    out: dict[int, Any] = {}
    if workers <= 1:
        for job in jobs:
            i, rec = fn(job)
            out[i] = rec
            done(i, rec)
        return out
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ex = ProcessPoolExecutor(max_workers=workers, mp_context=mp_context(), initializer=_pool_worker)
    try:
        futs = [ex.submit(fn, job) for job in jobs]
        for f in as_completed(futs):
            i, rec = f.result()
            out[i] = rec
            done(i, rec)
    except BaseException:
        # stopped (Ctrl-C, SIGTERM to this process alone) or failed: the jobs still queued are dropped and the
        # running ones ended, not waited for (leaving the executor's block waits for every job)
        workers_now = list((getattr(ex, "_processes", None) or {}).values())
        ex.shutdown(wait=False, cancel_futures=True)
        for proc in workers_now:
            if proc.is_alive():
                proc.terminate()
        raise
    ex.shutdown(wait=True)
    return out


def run_dask(jobs: list[Any], address: str, workers: int, processes: bool, done: Callable[[int, Any], None],
             fn: Callable[[Any], tuple[int, Any]]) -> dict[int, Any]:
    """As :func:`run_pool`, on a Dask distributed cluster: ``address`` of its scheduler, or "local" for a
    LocalCluster of ``workers`` (processes, or threads with ``processes=False``)."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:  # pragma: no cover - dask is a dependency
        raise SdbenchError("--dask needs the 'distributed' package") from None
    cluster = None
    try:
        if address == "local":
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=processes,
                                   dashboard_address=None)
            client = Client(cluster)
        else:
            try:
                client = Client(address, timeout="10s")
            except (OSError, TimeoutError) as e:
                raise SdbenchError(f"cannot reach the Dask scheduler at {address}: {e}") from None
        try:
            futs = client.map(fn, jobs, pure=False)
            out: dict[int, Any] = {}
            for f in as_completed(futs):
                i, rec = f.result()
                out[i] = rec
                done(i, rec)
            return out
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()
