"""``python -m tests.fuzz``: run a seeded fuzz campaign and print the failures."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import corpus
from .runner import format_report, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__)
    ap.add_argument("--cases", type=int, default=200, help="number of cases (spread over the kinds)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kind", default="all", help="scenario, set, import, argv, store, regress (the minimal "
                    "cases of earlier findings), all (every kind but regress), or a comma list")
    ap.add_argument("--regressions", action="store_true", help="run the regression cases first")
    ap.add_argument("--start", type=int, default=0, help="first case index (to resume or split a campaign)")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per command before it counts as a hang")
    ap.add_argument("--max-seconds", type=float, default=None, help="stop starting new cases after this long")
    ap.add_argument("--out", type=Path, default=None, help="work directory (default: a new one under $TMPDIR)")
    ap.add_argument("--no-shrink", action="store_true", help="do not shrink failing cases")
    ap.add_argument("--no-confirm", action="store_true", help="do not re-run failures in a fresh worker")
    ap.add_argument("--keep-cases", action="store_true", help="keep every case directory")
    ap.add_argument("--mem-mb", type=int, default=6144, help="address-space limit of the worker (0: none)")
    ap.add_argument("--python", default=sys.executable, help="interpreter with sdbench installed")
    ap.add_argument("--no-debug", action="store_true", help="run without SDBENCH_DEBUG=1 (bugs then show as "
                    "'internal error' lines instead of tracebacks)")
    ap.add_argument("--refusals", type=int, default=0, metavar="N",
                    help="also list the N most frequent refusal messages per kind (coverage check)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    ap.add_argument("--case", default=None, metavar="KIND:INDEX", help="print one case (its steps and plan) as JSON "
                    "and exit")
    args = ap.parse_args(argv)

    kinds = list(corpus.KINDS) if args.kind == "all" else [k.strip() for k in args.kind.split(",")]
    for k in kinds:
        if k not in corpus.KINDS + ("regress",):
            ap.error(f"unknown kind {k!r} (known: {', '.join(corpus.KINDS)}, regress, all)")
    if args.case:
        import json

        kind, index = args.case.split(":")
        case = corpus.generate(kind, args.seed, int(index), corpus.Context())
        print(json.dumps({k: v for k, v in case.items() if k != "files"}, indent=1, default=str))
        return 0
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    rep = run(kinds, args.cases, args.seed, timeout=args.timeout, root=args.out, start=args.start,
              max_seconds=args.max_seconds, shrink=not args.no_shrink, confirm=not args.no_confirm,
              keep_cases=args.keep_cases, regressions=args.regressions, log=log, python=args.python, mem_mb=args.mem_mb,
              debug=not args.no_debug)
    print(format_report(rep, refusals=args.refusals))
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
