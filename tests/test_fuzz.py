"""Bad input never crashes sdbench: a seeded fuzz campaign over scenario files,
``--set`` values, import files, command lines and results stores.

The goal: 0 tracebacks, 0 signals, 0 hangs, every refusal exit 2 (1 for a
failed run) with one line on stderr, nothing written outside the case's
directory.  ``python -m tests.fuzz --help`` runs larger campaigns by hand.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.fuzz import corpus, runner  # noqa: E402

QUICK_CASES = 200
QUICK_SEED = 1
LONG_CASES = 3000
LONG_SEED = 2


@pytest.fixture(scope="module")
def ctx():
    return corpus.Context(results_json=None)


def test_cases_are_a_function_of_seed_and_index(ctx):
    for kind in corpus.KINDS:
        for index in range(0, 60, 7):
            a = corpus.generate(kind, 5, index, ctx)
            b = corpus.generate(kind, 5, index, ctx)
            assert json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)
            rebuilt = corpus.build(kind, a["plan"], ctx)
            assert rebuilt["steps"] == a["steps"] and rebuilt["files"] == a["files"]
    assert corpus.generate("argv", 5, 1, ctx) != corpus.generate("argv", 6, 1, ctx)


def test_generated_cases_stay_inside_their_directory(ctx):
    for kind in corpus.KINDS:
        for index in range(150):
            case = corpus.generate(kind, QUICK_SEED, index, ctx)  # raises UnsafeCase otherwise
            toks = [t for s in case["steps"] for t in s.get("argv", [])]
            assert "--drop-caches" not in toks
            if any(t.startswith("/dev/") or "=/dev/" in t for t in toks):
                assert not {"--allow-write", "--yes", "-y"} & set(toks), case["id"]


@pytest.mark.parametrize("argv", [
    ["run", "--device", "/dev/sda", "--allow-write"],
    ["run", "--device", "/dev/null", "--allow-write", "--yes"],
    ["fio", "--dir", "/tmp"],
    ["stream", "--dir", "x", "--drop-caches"],
    ["sweep", "spec.toml", "--dask", "tcp://10.0.0.1:8786"],
    ["export", "latest", "-o", "../../outside.json"],
])
def test_unsafe_cases_are_refused(argv):
    with pytest.raises(corpus.UnsafeCase):
        corpus.check_safe({"files": [], "env": {}, "steps": [{"argv": argv}]})


def _res(rc, stderr="", **kw):
    return {"step": 0, "rc": rc, "stderr": stderr, **kw}


@pytest.mark.parametrize("res, cls", [
    (_res(0), "ok"),
    (_res(2, "error: bad value\n"), "refusal"),
    (_res(1, "error: the card failed\n"), "failed_run"),
    (_res(2, ""), "bad_message"),
    (_res(2, "error: one\nerror: two\n"), "bad_message"),
    (_res(2, "Usage: sdbench\n"), "bad_message"),
    (_res(2, "running x: y\nerror: bad\n"), "refusal_after_notes"),
    (_res(0, "note: hi\n"), "quiet_but_noisy"),
    (_res(3, "error: internal error (KeyError: 'x'); this is a bug in sdbench\n"), "internal_error"),
    (_res(130, "aborted\n"), "bad_exit"),
    (_res(1, 'Traceback (most recent call last):\n  File "/x/src/sdbench/a.py", line 3, in f\n    g()\n'
             'ValueError: no\n', escaped=True), "traceback"),
    ({"step": 0, "hang": True, "rc": None, "stderr": "", "stack": ""}, "hang"),
    ({"step": 0, "died": True, "rc": -11, "stderr": "", "stack": ""}, "signal"),
    (_res(2, "error: x\n", violations=["open for writing: /etc/x"]), "side_effect"),
])
def test_classification(res, cls):
    assert runner.classify({"argv": ["run", "-q"]}, res, "/tmp/case").cls == cls


def test_traceback_key_names_the_sdbench_frame():
    err = ('Traceback (most recent call last):\n'
           '  File "/w/src/sdbench/cli/__init__.py", line 70, in main\n    app()\n'
           '  File "/w/src/sdbench/scenarios/__init__.py", line 312, in _load_raw\n    p.is_file()\n'
           '  File "/usr/lib/python3.11/pathlib.py", line 1013, in stat\n    return os.stat(self)\n'
           'OSError: [Errno 36] File name too long: \'x\'\n')
    tb = runner.parse_traceback(err)
    assert tb["type"] == "OSError"
    assert tb["sdbench_frame"].endswith("sdbench/scenarios/__init__.py:312 in _load_raw")


def test_write_guard_allows_only_the_case_directory(tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
    try:
        import worker
    finally:
        sys.path.remove(str(ROOT / "tests" / "fuzz"))
    g = worker.Guard()
    g.roots = (str(tmp_path),)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert g.allowed("out.json") and g.allowed(str(tmp_path / "a" / "b")) and g.allowed("/dev/null")
        assert not g.allowed("/etc/passwd") and not g.allowed("../x") and not g.allowed("/dev/.null.tmp")
        assert not g.allowed("/dev/sda")
    finally:
        os.chdir(cwd)


def test_regression_cases_are_safe(ctx):
    for i in range(corpus.regression_count()):
        case = corpus.generate("regress", 0, i, ctx)  # raises UnsafeCase otherwise
        assert case["steps"] and case["desc"].startswith("regression: ")


def _campaign(cases: int, seed: int, timeout: float, tmp_path: Path, **kw) -> None:
    # the minimal cases of earlier findings run first, then the seeded corpus
    rep = runner.run(list(corpus.KINDS), cases, seed, timeout=timeout, root=tmp_path / "fuzz", regressions=True,
                     **kw)
    text = runner.format_report(rep)
    print(text)
    assert rep.cases >= cases * 0.95, text
    assert not rep.failures, "\n" + text


def test_fuzz_quick(tmp_path):
    """A seeded campaign small enough for every test run (about a minute on two cores)."""
    _campaign(QUICK_CASES, QUICK_SEED, 10.0, tmp_path, shrink=False, confirm=False, max_repro=5)


@pytest.mark.slow
def test_fuzz_long(tmp_path):
    """Thousands of cases; failures are shrunk and re-run in a fresh worker before they are reported."""
    _campaign(LONG_CASES, LONG_SEED, 20.0, tmp_path, shrink=True, confirm=True)
