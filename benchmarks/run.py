"""Run every benchmarks/bench_*.py and write docs/performance.md.

Each module exposes ``run() -> str`` returning a Markdown section.  Figures are
wall-clock on this machine and compared as ratios measured in the same run
where a target is a ratio; they are never asserted in unit tests.
"""
from __future__ import annotations

import datetime as dt
import importlib.util
import os
import platform
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "docs" / "performance.md"
sys.path.insert(0, str(HERE))  # the benchmarks share reference.py


def main(argv: list[str]) -> int:
    only = set(argv)
    sections = []
    failed = 0
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem[len("bench_"):]
        if only and name not in only:
            continue
        print(f"benchmark {name} ...", file=sys.stderr, flush=True)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)
            sections.append(mod.run().rstrip() + "\n")
        except Exception:  # a broken benchmark is reported, the others still run
            failed += 1
            sections.append(f"## {name}\n\nfailed:\n\n```\n{traceback.format_exc()}```\n")
    head = [
        "# Performance",
        "",
        "Written by `make bench` (benchmarks/run.py). Wall-clock figures depend on the machine and its load;",
        "ratios are measured in the same run.",
        "",
        f"- date (UTC): {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M')}",
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "",
    ]
    text = "\n".join(head) + "\n" + "\n".join(sections)
    if not only:
        OUT.write_text(text)
        print(f"wrote {OUT}", file=sys.stderr)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
