"""Run fuzz cases in a worker process, classify every command's outcome, report failures.

Outcome classes of one command (a step of a case):

========================  =======================================================================
ok                        exit 0
refusal                   exit 2, exactly one stderr line, starting with ``error:``
failed_run                exit 1 with at most one stderr line (e.g. an A1 preset that fails)
refusal_after_notes       exit 2, the last line ``error: ...`` after progress/warning notes only
                          (commands run without -q); reported, not counted as a failure
traceback *               a Python traceback on stderr, or an exception escaped ``main()``
internal_error *          a stderr line saying "internal error" (a catch-all handler fired)
bad_message *             exit 2 (or 1) without exactly one ``error:`` line
bad_exit *                any other exit code (e.g. 130 after a prompt read end of input)
signal *                  the worker died from a signal (segfault, abort, out of memory kill)
hang *                    no answer within the step timeout
side_effect *             a write outside the case directory was attempted (and refused)
harness_error *           a corruption step of the harness itself failed
========================  =======================================================================

Classes marked * are failures.  Failures are deduplicated by a key: for
tracebacks the exception type and the innermost sdbench frame, for hangs the
frame the main thread was in, for messages the normalised message.
"""
from __future__ import annotations

import base64
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import corpus
from .actions import CASE_TOKEN

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKER = HERE / "worker.py"

FAIL_CLASSES = ("traceback", "internal_error", "bad_message", "bad_exit", "signal", "hang", "side_effect",
                "harness_error")
OK_CLASSES = ("ok", "refusal", "failed_run", "refusal_after_notes", "quiet_but_noisy")
NOTE_PREFIXES = ("running ", "warning:", "saved as run", "sweep ", "simulating ", "fitting ", "wrote ", "note:",
                 "saved ", "[", "progress: ")


class WorkerError(Exception):
    pass


# ---- the worker process --------------------------------------------------------------------------

class Worker:
    """One long-lived ``worker.py`` process; restarted after a hang or a crash."""

    def __init__(self, scratch: Path, python: str = sys.executable, mem_mb: int = 6144, fsize_mb: int = 512,
                 start_timeout: float = 180.0, debug: bool = True) -> None:
        self.scratch = scratch
        self.debug = debug
        self.python = python
        self.mem_mb = mem_mb
        self.fsize_mb = fsize_mb
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.cases_run = 0

    def start(self) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        env = dict(os.environ)
        env.update({"SDBENCH_FUZZ_MEM_MB": str(self.mem_mb), "SDBENCH_FUZZ_FSIZE_MB": str(self.fsize_mb),
                    "PYTHONDONTWRITEBYTECODE": "1", "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8",
                    "PYTHONFAULTHANDLER": "1", "MPLBACKEND": "Agg"})
        env.pop("PYTHONIOENCODING", None)
        env.pop("SDBENCH_DEBUG", None)
        if self.debug:
            # the CLI's catch-all for bugs re-raises: the traceback names the file and line
            env["SDBENCH_DEBUG"] = "1"
        self.log_path = self.scratch / "worker.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([self.python, str(WORKER), str(cmd_r), str(res_w), str(self.scratch)],
                                         pass_fds=(cmd_r, res_w), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         start_new_session=True, cwd=str(self.scratch), env=env)
        os.close(cmd_r)
        os.close(res_w)
        self.cmd_fd = cmd_w
        self.res_fd = res_r
        self.buf = b""
        self.starts += 1
        self.cases_run = 0
        msg = self._recv(time.monotonic() + self.start_timeout)
        if msg is None or not msg.get("ready"):
            tail = self._log_tail()
            self.kill()
            raise WorkerError(f"worker did not start: {msg!r}\n{tail}")

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def _recv(self, deadline: float) -> dict | None | str:
        """Next message; None at end of file; "timeout" when the deadline passes."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return "timeout"
            r, _, _ = select.select([self.res_fd], [], [], min(left, 1.0))
            if not r:
                continue
            chunk = os.read(self.res_fd, 1 << 20)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def kill(self) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and the processes it started
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self.cmd_fd, self.res_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self.proc = None

    def stacks(self) -> str:
        try:
            return (self.scratch / "stacks.txt").read_text(errors="replace")
        except OSError:
            return ""

    def run_case(self, case: dict, case_dir: Path, timeout: float) -> list[dict]:
        """Results of each step; a hung or crashed step ends the case (and the worker)."""
        if self.proc is None:
            self.start()
        try:
            (self.scratch / "stacks.txt").write_text("")
        except OSError:
            pass
        msg = {"dir": str(case_dir), "env": case.get("env", {}), "steps": case["steps"]}
        data = (json.dumps(msg) + "\n").encode()
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.cmd_fd, view)
                view = view[n:]
        except BrokenPipeError:
            self.kill()
            self.start()
            return self.run_case(case, case_dir, timeout)
        results: list[dict] = []
        current = -1
        deadline = time.monotonic() + timeout
        while True:
            m = self._recv(deadline)
            if m == "timeout":
                step = max(current, 0)
                stack = self._dump_stacks()
                self.kill()
                results.append({"step": step, "hang": True, "rc": None, "stderr": "", "stack": stack,
                                "seconds": timeout})
                return results
            if m is None:
                rc = self.proc.wait() if self.proc else None
                stack = self.stacks()
                self.kill()
                results.append({"step": max(current, 0), "died": True, "rc": rc, "stderr": "", "stack": stack,
                                "log": self._log_tail()[-1500:]})
                return results
            assert isinstance(m, dict)
            if m.get("done"):
                self.cases_run += 1
                return results
            if m.get("start"):
                current = m["step"]
                deadline = time.monotonic() + timeout
                continue
            results.append(m)

    def _dump_stacks(self) -> str:
        if self.proc is None:
            return ""
        try:
            os.kill(self.proc.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return self.stacks()
        t0 = time.monotonic()
        text = ""
        while time.monotonic() - t0 < 3:
            time.sleep(0.1)
            text = self.stacks()
            if "File" in text:
                time.sleep(0.2)
                return self.stacks()
        return text


# ---- case directories ----------------------------------------------------------------------------

def materialize(case: dict, case_dir: Path) -> None:
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    (case_dir / ".tmp").mkdir()
    for f in case["files"]:
        p = case_dir / f["path"]
        p.parent.mkdir(parents=True, exist_ok=True)
        if f.get("dir"):
            p.mkdir(exist_ok=True)
        elif f.get("fifo"):
            os.mkfifo(p)
        elif "size" in f:
            with open(p, "wb") as fh:
                fh.truncate(int(f["size"]))
        else:
            data = base64.b64decode(f["b64"])
            if CASE_TOKEN.encode() in data:
                data = data.replace(CASE_TOKEN.encode(), str(case_dir).encode())
            p.write_bytes(data)


def remove_tree(path: Path) -> None:
    def onerror(func: Callable, p: str, exc: Any) -> None:
        try:
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass
    shutil.rmtree(path, onerror=onerror)


# ---- classification ------------------------------------------------------------------------------

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in | in )(?P<func>.*)$')


def _rel(path: str) -> str:
    for root in (str(REPO) + "/", "/site-packages/"):
        i = path.find(root)
        if i >= 0:
            return path[i + len(root):]
    return path


def parse_traceback(err: str) -> dict:
    """Exception type/message, innermost frame and innermost sdbench frame of the last traceback."""
    i = err.rfind("Traceback (most recent call last):")
    block = err[i:] if i >= 0 else err
    frames = []
    exc_line = ""
    for line in block.splitlines():
        m = _FRAME.match(line)
        if m:
            frames.append((m["file"], int(m["line"]), m["func"].strip()))
        elif line and not line.startswith((" ", "\t", "Traceback")) and re.match(r"^[\w.]+(:|$)", line):
            exc_line = line
    exc_type = exc_line.split(":", 1)[0].strip() or "?"
    last = frames[-1] if frames else ("?", 0, "?")
    sdb = next((f for f in reversed(frames) if "/sdbench/" in f[0] and "/tests/fuzz/" not in f[0]), None)
    return {"type": exc_type, "message": exc_line[:300], "frame": f"{_rel(last[0])}:{last[1]} in {last[2]}",
            "sdbench_frame": f"{_rel(sdb[0])}:{sdb[1]} in {sdb[2]}" if sdb else None}


def parse_stacks(text: str) -> str | None:
    """The innermost sdbench frame (else the innermost frame) of the main thread in a faulthandler dump."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text)
    if not blocks:
        return None
    main = next((b for b in blocks if b.startswith("Current thread")), blocks[-1] if blocks else "")
    frames = [(_m["file"], _m["line"], _m["func"]) for _m in
              (_FRAME.match(l) for l in main.splitlines()) if _m]
    if not frames:
        return None
    # faulthandler lists the most recent call first
    sdb = next((f for f in frames if "/sdbench/" in f[0] and "/tests/fuzz/" not in f[0]), None)
    f = sdb or frames[0]
    return f"{_rel(f[0])}:{f[1]} in {f[2].strip()}"


def _normalise(msg: str, case_dir: str) -> str:
    msg = msg.replace(case_dir, "<case>")
    msg = re.sub(r"'[^']*'", "'…'", msg)
    msg = re.sub(r'"[^"]*"', '"…"', msg)
    msg = re.sub(r"\d+(\.\d+)?", "N", msg)
    return msg[:120]


def _command_of(argv: list[str]) -> str:
    words = [a for a in argv if not a.startswith("-")][:1]
    return words[0] if words else (argv[0] if argv else "")


def loose_key(key: str) -> str:
    """A key without line numbers: the tree may be edited while a campaign runs."""
    return re.sub(r"\.py:\d+", ".py", key)


@dataclass
class Outcome:
    cls: str
    key: str
    detail: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.cls in FAIL_CLASSES


def classify(step: dict, res: dict, case_dir: str) -> Outcome:
    argv = step.get("argv", [])
    cmd = _command_of(argv) if argv else step.get("action", "?")
    if res.get("hang"):
        where = parse_stacks(res.get("stack", "")) or "?"
        return Outcome("hang", f"hang: {cmd} @ {where}", {"stack": res.get("stack", "")[-6000:]})
    if res.get("died"):
        rc = res.get("rc")
        name = signal.Signals(-rc).name if isinstance(rc, int) and rc < 0 else f"exit {rc}"
        where = parse_stacks(res.get("stack", "")) or "?"
        cls = "signal" if isinstance(rc, int) and rc < 0 else "bad_exit"
        return Outcome(cls, f"{name}: {cmd} @ {where}", {"stack": res.get("stack", "")[-6000:],
                                                          "log": res.get("log", "")})
    if res.get("action_failed"):
        return Outcome("harness_error", f"harness action {step.get('action')} failed: "
                       + res["stderr"].strip().splitlines()[-1][:120], {})
    if res.get("violations"):
        v = res["violations"][0]
        return Outcome("side_effect", f"side effect: {cmd}: {_normalise(v, case_dir)}",
                       {"violations": res["violations"]})
    err = res.get("stderr", "")
    rc = res.get("rc")
    if "Traceback (most recent call last)" in err or res.get("escaped"):
        tb = parse_traceback(err)
        where = tb["sdbench_frame"] or tb["frame"]
        return Outcome("traceback", f"{tb['type']} @ {where}", tb)
    lines = [l for l in err.splitlines() if l.strip()]
    if any("internal error" in l.lower() for l in lines):
        line = next(l for l in lines if "internal error" in l.lower())
        return Outcome("internal_error", f"internal error: {cmd}: {_normalise(line, case_dir)}", {})
    if rc == 0:
        if lines and ("-q" in argv or "--quiet" in argv):
            return Outcome("quiet_but_noisy", f"stderr despite -q: {cmd}: {_normalise(lines[0], case_dir)[:60]}")
        return Outcome("ok", "")
    errors = [l for l in lines if l.startswith("error:")]
    if rc == 2:
        if len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) > 8:
            return Outcome("refusal", "")
        if len(errors) == 1 and lines[-1].startswith("error:") and all(l.startswith(NOTE_PREFIXES)
                                                                         for l in lines[:-1]):
            return Outcome("refusal_after_notes", f"notes before error: {cmd}: {_normalise(lines[0], case_dir)[:12]}")
        first = _normalise(lines[0], case_dir) if lines else "(nothing on stderr)"
        return Outcome("bad_message", f"exit 2 with {min(len(lines), 3)}{'+' if len(lines) > 3 else ''} "
                                      f"stderr lines: {cmd}: {first}", {})
    if rc == 1:
        if len(lines) <= 1 or (len(errors) == 1 and lines[-1].startswith("error:")
                               and all(l.startswith(NOTE_PREFIXES) for l in lines[:-1])):
            return Outcome("failed_run", "")
        return Outcome("bad_message", f"exit 1 with {len(lines)} stderr lines: {cmd}: "
                                      f"{_normalise(lines[0], case_dir)}", {})
    last = _normalise(lines[-1], case_dir) if lines else "(nothing on stderr)"
    return Outcome("bad_exit", f"exit {rc}: {cmd}: {last}", {})


# ---- watching the rest of the machine ------------------------------------------------------------

def _watch_roots() -> list[Path]:
    roots = [REPO / "src" / "sdbench" / "data", REPO / "tests" / "data"]
    try:
        import platformdirs

        roots.append(Path(platformdirs.user_data_dir("sdbench")))
    except Exception:
        roots.append(Path.home() / ".local" / "share" / "sdbench")
    env_db = os.environ.get("SDBENCH_DB")
    if env_db:
        roots.append(Path(env_db).expanduser())
    return roots


def snapshot(roots: list[Path]) -> dict[str, tuple[int, int]]:
    """Sizes and mtimes of the watched files, plus the names at the top of the repository."""
    snap: dict[str, tuple[int, int]] = {}
    for root in roots:
        if root.is_file():
            st = root.stat()
            snap[str(root)] = (st.st_size, st.st_mtime_ns)
            continue
        if not root.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for n in filenames:
                p = os.path.join(dirpath, n)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                snap[p] = (st.st_size, st.st_mtime_ns)
    for p in REPO.iterdir():
        snap.setdefault(str(p), (-1, -1))
    return snap


def diff_snapshots(a: dict, b: dict) -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        if k not in a:
            out.append(f"new: {k}")
        elif k not in b:
            out.append(f"removed: {k}")
        elif a[k] != b[k] and a[k] != (-1, -1):
            out.append(f"changed: {k}")
    return out


# ---- the run -------------------------------------------------------------------------------------

@dataclass
class Failure:
    cls: str
    key: str
    kind: str
    case_id: str
    step: int
    argv: list[str]
    stderr: str
    detail: dict
    desc: str
    count: int = 1
    case: dict | None = None
    shrunk: bool = False
    confirmed: bool | None = None
    repro_dir: str | None = None


@dataclass
class Report:
    seed: int
    root: str
    counts: dict = field(default_factory=lambda: defaultdict(Counter))        # kind -> class -> steps
    case_counts: dict = field(default_factory=lambda: defaultdict(Counter))   # kind -> worst class -> cases
    failures: dict = field(default_factory=dict)                               # key -> Failure
    soft: dict = field(default_factory=dict)                                   # key -> Failure (not failing)
    repo_changes: list = field(default_factory=list)
    cases: int = 0
    steps: int = 0
    seconds: float = 0.0
    worker_starts: int = 0
    notes: list = field(default_factory=list)
    slow_steps: list = field(default_factory=list)
    refusals: dict = field(default_factory=lambda: defaultdict(Counter))      # kind -> normalised message -> n
    kind_seconds: dict = field(default_factory=lambda: defaultdict(float))    # kind -> wall seconds of its cases

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def failure_count(self) -> int:
        return sum(f.count for f in self.failures.values())


_SEVERITY = {c: i for i, c in enumerate(("ok", "quiet_but_noisy", "failed_run", "refusal", "refusal_after_notes",
                                         "bad_message",
                                         "bad_exit", "internal_error", "side_effect", "harness_error", "traceback",
                                         "signal", "hang"))}


class Fuzzer:
    def __init__(self, *, seed: int = 1, timeout: float = 20.0, root: Path | None = None, python: str = sys.executable,
                 keep_cases: bool = False, shrink: bool = True, confirm: bool = True, max_repro: int = 20,
                 mem_mb: int = 6144, fsize_mb: int = 512, recycle: int = 400, debug: bool = True,
                 log: Callable[[str], None] | None = None) -> None:
        self.seed = seed
        self.timeout = timeout
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="sdbench-fuzz-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.root = self.root.resolve()
        self.python = python
        self.keep_cases = keep_cases
        self.shrink = shrink
        self.confirm = confirm
        self.max_repro = max_repro
        self.recycle = recycle
        self.mem_mb = mem_mb
        self.fsize_mb = fsize_mb
        self.log = log or (lambda s: None)
        self.worker = Worker(self.root / "worker", python=python, mem_mb=mem_mb, fsize_mb=fsize_mb, debug=debug)
        self.report = Report(seed=seed, root=str(self.root))
        self.ctx: corpus.Context | None = None
        self._n = 0

    # -- set-up
    def context(self) -> corpus.Context:
        if self.ctx is None:
            results_json = self._results_sample()
            self.ctx = corpus.Context(results_json)
            if results_json is None:
                self.report.notes.append("no sdbench results JSON sample (its set-up run failed): the import and "
                                         "store kinds use the other samples only")
        return self.ctx

    def _results_sample(self) -> str | None:
        case = {"files": [], "env": {}, "steps": [{"argv": corpus.RESULTS_SAMPLE_ARGV, "keep_stdout": 50 << 20}]}
        d = self.root / "cases" / "setup"
        materialize(case, d)
        self._start_worker()
        res = self.worker.run_case(case, d, max(self.timeout, 60))
        remove_tree(d)
        if len(res) == 1 and res[0].get("rc") == 0:
            text = res[0].get("stdout", "")
            try:
                doc = json.loads(text)
                if doc.get("runs"):
                    return text
            except (ValueError, AttributeError):
                pass
        self.report.notes.append(f"results sample run failed: {json.dumps(res)[:500]}")
        return None

    # -- one case
    def execute(self, case: dict) -> list[tuple[dict, dict, Outcome]]:
        self._n += 1
        case_dir = self.root / "cases" / f"c{self._n % 4}"
        materialize(case, case_dir)
        if self.recycle and self.worker.cases_run >= self.recycle:
            self.worker.kill()
        if self.worker.proc is None:
            self._start_worker()
        results = self.worker.run_case(case, case_dir, self.timeout)
        out = []
        for res in results:
            step = case["steps"][res["step"]]
            out.append((step, res, classify(step, res, str(case_dir))))
        if not self.keep_cases:
            remove_tree(case_dir)
        return out

    def _start_worker(self, attempts: int = 6, pause: float = 10.0) -> None:
        """Start the worker; the tree may be half-edited for a moment, so retry before giving up."""
        for i in range(attempts):
            try:
                self.worker.start()
                return
            except WorkerError as e:
                last = e
                if i + 1 < attempts:
                    time.sleep(pause)
        raise last

    def run_cases(self, cases: list[tuple[str, int]], *, max_seconds: float | None = None,
                  progress: Callable[[int, int], None] | None = None) -> Report:
        ctx = self.context()
        rep = self.report
        watch = _watch_roots()
        before = snapshot(watch)
        t0 = time.monotonic()
        for n, (kind, index) in enumerate(cases):
            if max_seconds is not None and time.monotonic() - t0 > max_seconds:
                rep.notes.append(f"stopped after {max_seconds:.0f} s: {n} of {len(cases)} cases run")
                break
            try:
                case = corpus.generate(kind, self.seed, index, ctx)
            except corpus.UnsafeCase as e:
                rep.notes.append(f"{kind}-{self.seed}-{index}: generator made an unsafe case, skipped ({e})")
                continue
            t_case = time.monotonic()
            try:
                outcomes = self.execute(case)
            except WorkerError as e:
                rep.notes.append(f"stopped at {case['id']}: the worker cannot start (sdbench does not import?): "
                                 + str(e).strip().splitlines()[-1][:300])
                break
            rep.kind_seconds[kind] += time.monotonic() - t_case
            rep.cases += 1
            worst = "ok"
            for step, res, oc in outcomes:
                if "action" in step and not oc.failed:
                    continue  # the harness's own corruption steps
                rep.steps += 1
                rep.counts[kind][oc.cls] += 1
                if _SEVERITY.get(oc.cls, 99) > _SEVERITY.get(worst, 99):
                    worst = oc.cls
                if oc.cls in ("refusal", "failed_run"):
                    lines = [l for l in res.get("stderr", "").splitlines() if l.strip()]
                    msg = _normalise(lines[-1], str(self.root)) if lines else "(silent)"
                    rep.refusals[kind][f"{_command_of(step.get('argv', []))}: {msg[:90]}"] += 1
                if res.get("seconds", 0) > 5 and not res.get("hang"):
                    rep.slow_steps.append((round(res["seconds"], 1), case["id"], step.get("argv")))
                if oc.failed or oc.cls in ("refusal_after_notes", "quiet_but_noisy"):
                    self._record(case, step, res, oc)
            rep.case_counts[kind][worst] += 1
            after = snapshot(watch)
            changes = diff_snapshots(before, after)
            if changes:
                rep.repo_changes.append((case["id"], changes[:10]))
                before = after
            if progress:
                progress(n + 1, len(cases))
        rep.seconds = time.monotonic() - t0
        rep.worker_starts = self.worker.starts
        self._finish()
        return rep

    def _record(self, case: dict, step: dict, res: dict, oc: Outcome) -> None:
        rep = self.report
        table = rep.failures if oc.failed else rep.soft
        key = f"{case['kind']}: {oc.key}" if oc.cls in ("bad_message", "bad_exit") else oc.key
        lk = loose_key(key)
        if lk in table:
            table[lk].count += 1
            return
        table[lk] = Failure(oc.cls, key, case["kind"], case["id"], res["step"], step.get("argv", []),
                             res.get("stderr", "")[-4000:], oc.detail, case.get("desc", ""), case=case)
        self.log(f"new {oc.cls}: {key}  [{case['id']}]")

    # -- after the run: shrink, confirm, write reproducers
    def _finish(self) -> None:
        rep = self.report
        by_class: dict[str, int] = Counter()
        for f in sorted(rep.failures.values(), key=lambda f: (f.cls, f.case_id)):
            try:
                if self.shrink and f.cls not in ("hang", "signal"):
                    self._shrink(f)
                if self.confirm:
                    self._confirm(f)
            except WorkerError as e:
                rep.notes.append(f"{f.case_id}: not shrunk or confirmed, the worker cannot start: "
                                 + str(e).strip().splitlines()[-1][:200])
            by_class[f.cls] += 1
            if by_class[f.cls] <= self.max_repro:
                f.repro_dir = str(self._write_repro(f))
        self.worker.kill()

    def _same_key(self, case: dict, f: Failure) -> tuple[bool, Any]:
        for step, res, oc in self.execute(case):
            k = f"{case['kind']}: {oc.key}" if oc.cls in ("bad_message", "bad_exit") else oc.key
            if oc.cls == f.cls and loose_key(k) == loose_key(f.key):
                return True, (step, res)
        return False, None

    def _shrink(self, f: Failure, budget: int = 16) -> None:
        assert f.case is not None and self.ctx is not None
        plan = f.case["plan"]
        tries = 0
        improved = True
        while improved and tries < budget:
            improved = False
            for cand in corpus.shrink_candidates(plan):
                if tries >= budget:
                    break
                tries += 1
                try:
                    case = corpus.build(f.kind, cand, self.ctx)
                except corpus.UnsafeCase:
                    continue
                case.update({k: f.case[k] for k in ("id", "seed", "index")})
                ok, hit = self._same_key(case, f)
                if ok:
                    plan = cand
                    f.case = case
                    f.desc = case.get("desc", f.desc)
                    step, res = hit
                    f.argv = step.get("argv", [])
                    f.step = res["step"]
                    f.stderr = res.get("stderr", "")[-4000:]
                    f.shrunk = True
                    improved = True
                    break

    def _confirm(self, f: Failure) -> None:
        """Re-run the case in a freshly started worker: no state left over from earlier cases."""
        self.worker.kill()
        try:
            self._start_worker(attempts=3)
            ok, _ = self._same_key(f.case, f)
        except WorkerError:
            ok = False
        f.confirmed = ok

    def _write_repro(self, f: Failure) -> Path:
        slug = re.sub(r"[^A-Za-z0-9]+", "-", f.key)[:60].strip("-")
        d = self.root / "repro" / f.cls / f"{f.case_id}-{slug}"
        case = f.case or {}
        case_dir = d / "case"
        if d.exists():
            remove_tree(d)
        d.mkdir(parents=True)
        materialize(case, case_dir)
        (d / "case.json").write_text(json.dumps(case, indent=1, default=str))
        (d / "stderr.txt").write_text(f.stderr)
        if f.detail.get("stack"):
            (d / "stack.txt").write_text(f.detail["stack"])
        (d / "repro.sh").write_text(repro_script(case, case_dir, self.python))
        os.chmod(d / "repro.sh", 0o755)
        return d

    def close(self) -> None:
        self.worker.kill()


def repro_script(case: dict, case_dir: Path, python: str) -> str:
    sdbench = str(Path(python).parent / "sdbench")
    lines = ["#!/bin/sh", f"# {case.get('id')}: {case.get('desc', '')[:300]}".replace("\n", " "),
             "# every step of the case, in order, on the real command line", 'cd "$(dirname "$0")/case" || exit 1',
             'export HOME="$PWD" XDG_DATA_HOME="$PWD/.local/share" XDG_CONFIG_HOME="$PWD/.config" '
             'XDG_CACHE_HOME="$PWD/.cache" TMPDIR="$PWD/.tmp" SDBENCH_DB="$PWD/results.sqlite" SDBENCH_DEBUG=1',
             'mkdir -p .tmp']
    for k, v in case.get("env", {}).items():
        if v is None:
            lines.append(f"unset {k}")
        else:
            lines.append(f"export {k}={_sh(v, case_dir)}")
    for step in case.get("steps", []):
        if "action" in step:
            lines.append(f"{shlex.quote(python)} {shlex.quote(str(HERE / 'actions.py'))} {step['action']} "
                         f"{shlex.quote(json.dumps(step.get('args', {})))}")
        else:
            lines.append(f"{shlex.quote(sdbench)} " + " ".join(_sh(a, case_dir) for a in step["argv"])
                         + '; echo "exit $?" >&2')
    return "\n".join(lines) + "\n"


def _sh(a: str, case_dir: Path) -> str:
    if CASE_TOKEN in a:
        return '"$PWD"' + shlex.quote(a.replace(CASE_TOKEN, "", 1)) if a.startswith(CASE_TOKEN) else shlex.quote(a)
    try:
        a.encode("utf-8")
        return shlex.quote(a)
    except UnicodeEncodeError:  # surrogate-escaped bytes: spell them with printf
        raw = a.encode("utf-8", "surrogateescape")
        return '"$(printf \'' + "".join(f"\\{b:03o}" for b in raw) + '\')"'


# ---- planning and printing -----------------------------------------------------------------------

def plan_cases(kinds: list[str], total: int, start: int = 0, regressions: bool = False) -> list[tuple[str, int]]:
    """``total`` cases spread over ``kinds``, interleaved so a partial run covers every kind;
    with ``regressions``, the minimal cases of earlier findings first."""
    reg = [("regress", i) for i in range(corpus.regression_count())] if regressions else []
    kinds = [k for k in kinds if k != "regress"]
    if not kinds:
        return reg
    per = {k: total // len(kinds) + (1 if i < total % len(kinds) else 0) for i, k in enumerate(kinds)}
    out: list[tuple[str, int]] = []
    i = 0
    while len(out) < total:
        for k in kinds:
            if i < per[k]:
                out.append((k, start + i))
        i += 1
    return reg + out


def format_report(rep: Report, verbose: bool = True, refusals: int = 0) -> str:
    lines = [f"sdbench fuzz: seed {rep.seed}, {rep.cases} cases, {rep.steps} commands in {rep.seconds:.1f} s "
             f"({rep.seconds / max(rep.cases, 1):.2f} s per case), worker started {rep.worker_starts}x",
             f"work directory: {rep.root}", ""]
    classes = [c for c in OK_CLASSES + FAIL_CLASSES if any(rep.counts[k][c] for k in rep.counts)]
    kinds = list(rep.counts)
    if kinds:
        w = max(len(c) for c in classes) + 2
        lines.append("commands per outcome".ljust(w) + "".join(k.rjust(10) for k in kinds) + "total".rjust(10))
        for c in classes:
            row = [rep.counts[k][c] for k in kinds]
            mark = " *" if c in FAIL_CLASSES else ""
            lines.append((c + mark).ljust(w) + "".join(str(x).rjust(10) for x in row) + str(sum(row)).rjust(10))
        lines.append("cases".ljust(w) + "".join(str(sum(rep.case_counts[k].values())).rjust(10) for k in kinds))
        lines.append("s per case".ljust(w) + "".join(
            f"{rep.kind_seconds[k] / max(sum(rep.case_counts[k].values()), 1):.2f}".rjust(10) for k in kinds))
        lines.append("")
    if rep.failures:
        lines.append(f"FAILURES: {len(rep.failures)} distinct, {rep.failure_count()} commands")
        for f in sorted(rep.failures.values(), key=lambda f: (f.cls, -f.count)):
            fresh = {None: "", True: ", reproduced in a fresh worker",
                     False: ", NOT reproduced in a fresh worker"}[f.confirmed]
            lines.append(f"- [{f.cls}] {f.key}  (x{f.count}, first {f.case_id} step {f.step}"
                         f"{', shrunk' if f.shrunk else ''}{fresh})")
            if verbose:
                lines.append(f"    case: {f.desc[:300]}")
                lines.append(f"    argv: sdbench {' '.join(corpus._short(a) for a in f.argv)}")
                if f.cls == "traceback":
                    lines.append(f"    raised: {f.detail.get('message', '')[:200]}")
                    lines.append(f"    at: {f.detail.get('frame')}  (sdbench: {f.detail.get('sdbench_frame')})")
                else:
                    tail = [l for l in f.stderr.splitlines() if l.strip()][-3:]
                    for l in tail:
                        lines.append(f"    stderr: {l[:200]}")
                if f.repro_dir:
                    lines.append(f"    reproducer: {f.repro_dir}/repro.sh")
        lines.append("")
    else:
        lines.append("no failures")
        lines.append("")
    if rep.soft:
        lines.append(f"not counted as failures: {len(rep.soft)} distinct")
        for f in rep.soft.values():
            lines.append(f"- [{f.cls}] {f.key} (x{f.count}, first {f.case_id})")
        lines.append("")
    if rep.repo_changes:
        lines.append("files outside the cases changed during the run (other work on the tree may explain them):")
        for cid, ch in rep.repo_changes[:20]:
            lines.append(f"- after {cid}: {'; '.join(ch)}")
        lines.append("")
    if rep.slow_steps:
        lines.append(f"slow commands (> 5 s): {len(rep.slow_steps)}")
        for s, cid, argv in sorted(rep.slow_steps, key=lambda x: -x[0])[:5]:
            lines.append(f"- {s} s {cid}: sdbench {' '.join(corpus._short(a) for a in (argv or []))}")
        lines.append("")
    if refusals:
        for kind, msgs in rep.refusals.items():
            lines.append(f"most frequent refusals ({kind}):")
            for m, n in msgs.most_common(refusals):
                lines.append(f"  {n:5d}  {m}")
        lines.append("")
    for n in rep.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines).rstrip() + "\n"


def run(kinds: list[str], cases: int, seed: int = 1, *, timeout: float = 20.0, root: Path | None = None,
        start: int = 0, max_seconds: float | None = None, shrink: bool = True, confirm: bool = True,
        keep_cases: bool = False, regressions: bool = False, log: Callable[[str], None] | None = None,
        **kw: Any) -> Report:
    fz = Fuzzer(seed=seed, timeout=timeout, root=root, shrink=shrink, confirm=confirm, keep_cases=keep_cases,
                log=log, **kw)
    try:
        return fz.run_cases(plan_cases(kinds, cases, start, regressions or "regress" in kinds),
                            max_seconds=max_seconds)
    finally:
        fz.close()
