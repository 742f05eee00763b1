"""The matrix: every cell of a run, in worker processes or on a Dask cluster (:func:`run_matrix`)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .cell import run_cell
from .results import Cell, CellResult
from .workload import LogReplayConfig, WorkloadConfig


def _cell_job(job: tuple[int, str, list[str], Cell, Any]) -> tuple[int, CellResult]:
    """One cell in a worker process: the scenario is loaded there from its name and overrides."""
    from ..scenarios import load

    i, name, sets, cell, cfg = job
    return i, run_cell(load(name, sets), cell, cfg)


def run_matrix(name: str, sets: list[str], cell_list: list[Cell], cfg: WorkloadConfig | LogReplayConfig, *,
               workers: int = 1, dask: str | None = None,
               done: Callable[[int], None] | None = None) -> list[CellResult]:
    """Every cell, in ``workers`` processes (or on a Dask cluster: "local" or a scheduler address)."""
    from ..parallel import run_dask, run_pool

    jobs = [(i, name, list(sets), c, cfg) for i, c in enumerate(cell_list)]
    tick = (lambda i, _cell: done(i)) if done is not None else (lambda i, _cell: None)
    out = (run_dask(jobs, dask, workers, True, tick, fn=_cell_job) if dask
           else run_pool(jobs, workers, tick, fn=_cell_job))
    return [out[i] for i in range(len(jobs))]
