"""Fuzz worker: runs cases in-process with ``sdbench.cli.main`` and reports each step.

Started by :mod:`runner` as ``python worker.py CMD_FD RESULT_FD SCRATCH_DIR``.
It reads one JSON case per line from CMD_FD and writes JSON messages, one per
line, to RESULT_FD::

    {"ready": true, "pid": ...}                 once, after importing sdbench
    {"step": i, "start": true}                  before each step
    {"step": i, "rc": ..., "stderr": ..., ...}  after each step
    {"done": true}                              after the last step of a case

Every step runs with cwd = the case directory and HOME, XDG_*, TMPDIR and
SDBENCH_DB pointing into it.  File descriptors 1 and 2 are redirected to
capture files for the step, so output written below Python (C libraries,
child processes) is captured too.  An audit hook refuses any write outside the
case directory (and the worker's scratch directory) and records the attempt:
a fuzz case must not be able to change anything else on the machine.

This file is a script on purpose: it imports only the standard library,
:mod:`sdbench` and the sibling :mod:`actions` module.
"""
from __future__ import annotations

import errno
import faulthandler
import gc
import io
import json
import os
import resource
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import actions  # noqa: E402  (sibling module; see the docstring)

CASE_TOKEN = actions.CASE_TOKEN
STDERR_LIMIT = 64 * 1024
STDOUT_LIMIT = 4 * 1024

#: writes allowed outside the case directory: harmless character devices (exact paths)
ALLOWED_DEVICES = {"/dev/null", "/dev/full", "/dev/zero"}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: audit events that change the file system, with the positions of their path arguments
_PATH_EVENTS = {
    "os.mkdir": (0,), "os.rename": (0, 1), "os.remove": (0,), "os.rmdir": (0,), "os.chmod": (0,),
    "os.chown": (0,), "os.truncate": (0,), "os.symlink": (1,), "os.link": (1,), "os.utime": (0,),
    "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.move": (1,), "os.mkfifo": (0,), "os.mknod": (0,),
    "os.removexattr": (0,), "os.setxattr": (0,),
}


class Guard:
    """State of the audit hook: which directories a case may write, what it tried elsewhere."""

    def __init__(self) -> None:
        self.active = False
        self.roots: tuple[str, ...] = ()
        self.violations: list[str] = []
        self.subprocesses: list[str] = []

    def allowed(self, path: object) -> bool:
        if isinstance(path, int) or path is None:
            return True
        try:
            p = os.fsdecode(path)  # type: ignore[arg-type]
        except Exception:
            return True
        if p in ("", ":memory:") or p.startswith("file::memory:"):
            return True
        if p.startswith("file:"):
            p = p[5:].split("?", 1)[0]
        full = os.path.realpath(os.path.join(os.getcwd(), p))
        if full in ALLOWED_DEVICES:
            return True
        if "__pycache__" in full.split(os.sep):
            return True  # the interpreter's own byte-code cache
        return any(full == r or full.startswith(r + os.sep) for r in self.roots)

    def refuse(self, what: str, path: object) -> None:
        shown = os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path)
        self.violations.append(f"{what}: {shown}")
        raise PermissionError(errno.EACCES, "write outside the fuzz case directory refused by the harness", shown)


GUARD = Guard()


def _audit(event: str, args: tuple) -> None:
    g = GUARD
    if not g.active:
        return
    if event == "open":
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        writing = False
        if isinstance(flags, int) and flags & _WRITE_FLAGS:
            writing = True
        elif isinstance(mode, str) and any(c in mode for c in "wax+"):
            writing = True
        if writing and not g.allowed(path):
            g.refuse("open for writing", path)
    elif event == "sqlite3.connect":
        if args and not g.allowed(args[0]):
            g.refuse("sqlite3.connect", args[0])
    elif event in _PATH_EVENTS:
        dir_fd_given = event in ("os.mkdir", "os.remove", "os.rmdir", "os.chmod") and len(args) >= 3 and \
            args[-1] not in (None, -1)
        if dir_fd_given:
            return
        for i in _PATH_EVENTS[event]:
            if i < len(args) and not g.allowed(args[i]):
                g.refuse(event, args[i])
    elif event == "subprocess.Popen":
        try:
            g.subprocesses.append(" ".join(map(str, args[1] or [args[0]])))
        except Exception:
            pass


def _send(fd: int, msg: dict) -> None:
    data = (json.dumps(msg) + "\n").encode()
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_lines(fd: int):
    buf = b""
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)


def _subst(value, case_dir: str):
    if isinstance(value, str):
        return value.replace(CASE_TOKEN, case_dir)
    if isinstance(value, list):
        return [_subst(v, case_dir) for v in value]
    return value


class Capture:
    """Redirect fds 1 and 2 (and sys.stdin/stdout/stderr) to files for one step."""

    def __init__(self, scratch: str) -> None:
        self.out_path = os.path.join(scratch, "step.stdout")
        self.err_path = os.path.join(scratch, "step.stderr")
        self.saved_fds = (os.dup(1), os.dup(2))

    def __enter__(self) -> "Capture":
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:
                pass
        self._out = os.open(self.out_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        self._err = os.open(self.err_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(self._out, 1)
        os.dup2(self._err, 2)
        # what the interpreter gives a program whose output is a file under a UTF-8 locale
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="strict")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True)
        sys.stdin = io.TextIOWrapper(io.FileIO(os.open(os.devnull, os.O_RDONLY), "r", closefd=True),
                                     encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except Exception:
                pass
        try:
            sys.stdin.close()
        except Exception:
            pass
        sys.stdout, sys.stderr, sys.stdin = sys.__stdout__, sys.__stderr__, sys.__stdin__
        os.dup2(self.saved_fds[0], 1)
        os.dup2(self.saved_fds[1], 2)
        os.close(self._out)
        os.close(self._err)

    def read(self) -> tuple[str, str, int]:
        with open(self.out_path, "rb") as f:
            out = f.read()
        with open(self.err_path, "rb") as f:
            err = f.read()
        return out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), len(out)


def _case_env(case_dir: str, env: dict) -> dict[str, str | None]:
    base = {
        "HOME": case_dir,
        "XDG_DATA_HOME": os.path.join(case_dir, ".local", "share"),
        "XDG_CONFIG_HOME": os.path.join(case_dir, ".config"),
        "XDG_CACHE_HOME": os.path.join(case_dir, ".cache"),
        "XDG_STATE_HOME": os.path.join(case_dir, ".local", "state"),
        "TMPDIR": os.path.join(case_dir, ".tmp"),
        "SDBENCH_DB": os.path.join(case_dir, "results.sqlite"),
        "COLUMNS": "120",
    }
    for k, v in env.items():
        base[k] = None if v is None else _subst(v, case_dir)
    return base


def run_argv(cli_main, argv: list[str], case_dir: str, cap: Capture) -> tuple[int, bool]:
    """Run ``main(argv)``; (exit code, True if an exception escaped main)."""
    escaped = False
    with warnings.catch_warnings():  # fresh warning registries: each case warns as a new process would
        with cap:
            try:
                rc = cli_main(argv)
                if not isinstance(rc, int):
                    rc = 0 if rc is None else 1
            except SystemExit as e:
                code = e.code
                if code is None:
                    rc = 0
                elif isinstance(code, int):
                    rc = code
                else:
                    print(code, file=sys.stderr)
                    rc = 1
            except BaseException:  # what the interpreter would print for an uncaught exception
                escaped = True
                try:
                    traceback.print_exc()
                except Exception:
                    sys.__stderr__.write("worker: cannot print traceback\n")
                rc = 1
    return rc, escaped


def main() -> None:
    cmd_fd, res_fd, scratch = int(sys.argv[1]), int(sys.argv[2]), os.path.realpath(sys.argv[3])
    mem_mb = int(os.environ.get("SDBENCH_FUZZ_MEM_MB", "6144"))
    fsize_mb = int(os.environ.get("SDBENCH_FUZZ_FSIZE_MB", "2048"))
    if mem_mb > 0:
        resource.setrlimit(resource.RLIMIT_AS, (mem_mb << 20, mem_mb << 20))
    if fsize_mb > 0:
        # a case that writes huge files gets EFBIG instead of filling the disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_mb << 20, fsize_mb << 20))
    try:
        os.nice(5)
    except OSError:
        pass
    os.makedirs(os.path.join(scratch, "mpl"), exist_ok=True)
    os.environ["MPLCONFIGDIR"] = os.path.join(scratch, "mpl")
    os.environ["MPLBACKEND"] = "Agg"
    stacks = open(os.path.join(scratch, "stacks.txt"), "w")
    faulthandler.enable(stacks, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)

    from sdbench.cli import _load_commands, main as cli_main

    _load_commands()
    cap = Capture(scratch)
    GUARD.roots = (scratch,)
    sys.addaudithook(_audit)
    base_threads = threading.active_count()
    _send(res_fd, {"ready": True, "pid": os.getpid()})

    for case in _read_lines(cmd_fd):
        case_dir = os.path.realpath(case["dir"])
        env = _case_env(case_dir, case.get("env", {}))
        saved_env = {k: os.environ.get(k) for k in env}
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.makedirs(env["TMPDIR"] or os.path.join(case_dir, ".tmp"), exist_ok=True)
        tempfile.tempdir = env["TMPDIR"] or os.path.join(case_dir, ".tmp")
        for i, step in enumerate(case["steps"]):
            _send(res_fd, {"step": i, "start": True})
            os.chdir(case_dir)
            t0 = time.monotonic()
            if "action" in step:
                try:
                    note = actions.run(step["action"], step.get("args", {}), case_dir)
                    msg = {"step": i, "rc": 0, "stderr": "", "stdout": note, "action": True}
                except Exception:
                    msg = {"step": i, "rc": 1, "stderr": traceback.format_exc(), "stdout": "", "action": True,
                           "action_failed": True}
                msg["seconds"] = time.monotonic() - t0
                _send(res_fd, msg)
                continue
            argv = _subst(step["argv"], case_dir)
            GUARD.roots = (case_dir, scratch)
            GUARD.violations = []
            GUARD.subprocesses = []
            GUARD.active = True
            try:
                rc, escaped = run_argv(cli_main, argv, case_dir, cap)
            finally:
                GUARD.active = False
            seconds = time.monotonic() - t0
            out, err, out_bytes = cap.read()
            keep_out = int(step.get("keep_stdout", 0))
            msg = {
                "step": i, "rc": rc, "escaped": escaped, "seconds": seconds,
                "stderr": err[:STDERR_LIMIT], "stdout_bytes": out_bytes,
                "stdout": out[:keep_out] if keep_out else out[-STDOUT_LIMIT:],
                "violations": GUARD.violations[:20], "subprocesses": GUARD.subprocesses[:5],
                "threads": threading.active_count() - base_threads,
            }
            if "matplotlib.pyplot" in sys.modules:
                try:
                    sys.modules["matplotlib.pyplot"].close("all")
                except Exception:
                    pass
            _send(res_fd, msg)
        os.chdir(scratch)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        tempfile.tempdir = None
        gc.collect()
        _send(res_fd, {"done": True})


if __name__ == "__main__":
    main()
