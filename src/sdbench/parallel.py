"""Executors for independent simulated runs (sweep points, power-loss cells, scenarios, range members):
a local process pool or a Dask distributed cluster.  A simulated run's result depends only on its scenario
and seed, never on the worker that ran it, so callers keep results in their own order.
"""
from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable
from typing import Any

from .errors import SdbenchError


def mp_context() -> multiprocessing.context.BaseContext:
    """Fork workers from this (warmed-up, single-threaded) process when possible: they start at once
    with sdbench imported and no filesystem mounted; with other threads around, fork is unsafe, so
    a fork server (sdbench preloaded) or spawn."""
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
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

    with ProcessPoolExecutor(max_workers=workers, mp_context=mp_context()) as ex:
        futs = [ex.submit(fn, job) for job in jobs]
        for f in as_completed(futs):
            i, rec = f.result()
            out[i] = rec
            done(i, rec)
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
