"""Fuzz harness for sdbench's handling of bad input.

Five kinds of case, each a pure function of (seed, index): mutated scenario
files, ``--set`` values, mutated import files, random command lines and
corrupted results stores.  Cases run in a worker process that calls
``sdbench.cli.main`` in-process; the parent enforces a timeout per command,
classifies every outcome (see :mod:`.runner`) and writes a reproducer for
each distinct failure.

Run it from the repository root::

    python -m tests.fuzz --cases 500 --seed 1 --kind all

The goal it checks: 0 tracebacks, 0 signals, 0 hangs, every refusal exit 2
(1 for a failed run) with one line on stderr, and nothing written outside
the case's own directory.
"""
from __future__ import annotations

from .runner import FAIL_CLASSES, OK_CLASSES, Fuzzer, Report, format_report, plan_cases, run

__all__ = ["FAIL_CLASSES", "OK_CLASSES", "Fuzzer", "Report", "format_report", "plan_cases", "run"]
