"""Running a workload: every repetition of every step is one timed call through the FileSystem interface
(open ... close for a file step), checked against the volume model as it goes; one row per step."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ...errors import ConfigError, FileSystemError, SdbenchError
from ...fs.base import FileSystem
from ...fs.stdio import StdioFileSystem
from ...options import to_mapping
from ...records import Row
from ...runner import Context
from .loading import config_of
from .model import StepRefused, VolumeModel, flavour
from .pattern import DataMismatch, Pattern, compare
from .preflight import bare
from .stats import StepRun, finish
from .steps import StepConfig, WorkloadConfig, expand


def run(sc: Any, built: Any, ctx: Context) -> Iterator[Row]:
    """Run the steps ``repeat`` times; yields each step's row after its last run."""
    cfg = config_of(sc)
    part = cfg.part
    fs = built.target.make_fs(part, cfg.api, cfg.stdio, where="workload.api")
    kind = flavour(part)
    devs = built.target.devices_for(part, fs.device)
    pattern = Pattern(sc.seed)
    rows: dict[int, StepRun] = {}
    summary: list[dict[str, Any]] = []
    built.metadata["workload"] = {"part": part, "filesystem": fs.kind, "repeat": cfg.repeat, "api": cfg.api,
                                  "sample": "one repetition of a step (a file step: open ... close)",
                                  "steps": summary}
    if isinstance(fs, StdioFileSystem):
        built.metadata["workload"]["stdio"] = {**to_mapping(cfg.stdio), "file_buffer_bytes": fs.buffer_bytes()}
    warned: set[tuple[int, str]] = set()

    def skip(k: int, why: str) -> None:
        if (k, why) not in warned:
            warned.add((k, why))
            built.warnings.append(f"workload.steps[{k}] ({cfg.steps[k].label}): {why}")

    # the model walks the list as it runs, so every repetition knows the data it writes and expects
    done_ok = False
    try:
        if kind == "dir" and fs.mounted:
            fs.unmount()  # the model starts unmounted: the directory is synced and counts as unmounted
        model = VolumeModel(kind)
        last = cfg.repeat - 1
        for run_ix in range(cfg.repeat):
            for k, s in enumerate(cfg.steps):
                for i in range(s.count):
                    p, to = expand(s.path, i), expand(s.to, i)
                    try:
                        got = model.apply(s, p, to)
                    except StepRefused as e:  # checked in preflight; a scenario changed in between
                        raise ConfigError(f"workload.steps[{k}].{e.field}: {e.text}") from None
                    if s.op == "format" and kind == "dir":
                        skip(k, "a directory is never formatted; skipped (it counts as unmounted afterwards)")
                        fs.unmount()
                        continue
                    if (s.op == "mkdir" or (s.op == "delete" and got == "dir")) and not fs.has_directories:
                        skip(k, f"{fs.kind} has no directories; {s.op} skipped")
                        continue
                    sr = rows.get(k)
                    if sr is None:
                        sr = rows[k] = StepRun(ctx.row(s.label, s.op, 0, devs))
                    try:
                        _one(fs, s, p, to, got, sr, pattern, cfg, model, k)
                    except FileSystemError as e:  # a full volume, an I/O error: say which step and file
                        raise FileSystemError(f"workload.steps[{k}] ({s.label}){', ' + p if p else ''}: {e}") \
                            from None
                if run_ix == last and k in rows:
                    yield finish(rows[k], s, k, summary)
        done_ok = True
    finally:
        _end(fs, part, done_ok, built)


def _one(fs: FileSystem, s: StepConfig, p: str, to: str, got: Any, sr: StepRun, pattern: Pattern,
         cfg: WorkloadConfig, model: VolumeModel, k: int) -> None:
    """One timed repetition of step ``s`` on path ``p``; checks what it read."""
    op, chunk, addr = s.op, s.chunk_bytes, cfg.buf_addr
    t = sr.timer
    where = f"workload.steps[{k}] ({s.label})"
    sr.calls += 1
    if op == "format":
        t.time(fs.format)
    elif op == "mount":
        t.time(fs.mount)
    elif op == "unmount":
        t.time(fs.unmount)
    elif op == "mkdir":
        t.time(lambda: fs.mkdir(p))
    elif op in ("create", "open"):
        mode = "w" if op == "create" else s.mode

        def openclose() -> None:
            fs.open(p, mode).close()
        t.time(openclose)
    elif op in ("write", "append", "sync"):
        data = pattern.data(got, 0, s.size_bytes)
        mode = "w" if op == "write" else "a"

        def put() -> None:
            f = fs.open(p, mode)
            try:
                for off in range(0, len(data), chunk):
                    f.write(data[off:off + chunk], buf_addr=addr)
                if op == "sync":
                    f.sync()
            finally:
                f.close()
        t.time(put)
        sr.bytes_total += len(data)
    elif op == "read":
        size = sum(n for _, n in got)
        box: list[bytes] = []

        def get() -> None:
            f = fs.open(p, "r")
            try:
                parts, n = [], 0
                while n <= size:  # to EOF: a short read ends it; more data than written is a mismatch
                    b = f.read(chunk, buf_addr=addr)
                    parts.append(b)
                    n += len(b)
                    if len(b) < chunk:
                        break
                box.append(b"".join(parts))
            finally:
                f.close()
        t.time(get)
        compare(box[0], pattern.content(got), p, 0, where)
        sr.bytes_total += len(box[0])
    elif op == "seek":
        size = sum(n for _, n in got)
        want_n = min(s.size_bytes, size - s.offset_bytes)
        box = []

        def seek_read() -> None:
            f = fs.open(p, "r")
            try:
                f.seek(s.offset_bytes)
                parts, n = [], 0
                while n < want_n:
                    b = f.read(min(chunk, want_n - n), buf_addr=addr)
                    if not b:
                        break
                    parts.append(b)
                    n += len(b)
                box.append(b"".join(parts))
            finally:
                f.close()
        t.time(seek_read)
        compare(box[0], pattern.content(got, s.offset_bytes, want_n), p, s.offset_bytes, where)
        sr.bytes_total += len(box[0])
    elif op == "truncate":
        def cut() -> None:
            f = fs.open(p, "r+")
            try:
                f.truncate(s.size_bytes)
            finally:
                f.close()
        t.time(cut)
    elif op == "rename":
        t.time(lambda: fs.rename(p, to))
    elif op == "delete":
        t.time(lambda: fs.remove(p))
    elif op == "list":
        names: list[list[str]] = []
        t.time(lambda: names.append(fs.listdir(p)))
        listed = set(names[0])
        sr.entries = len(listed)
        want: set[str] = got
        if fs.kind == "fat":  # FAT names are case-insensitive
            listed, want = {n.lower() for n in listed}, {n.lower() for n in want}
        missing = sorted(want - listed)
        if missing:
            raise DataMismatch(f"{where}: {p} does not list {missing[0]!r}, which the workload made there "
                               f"({len(missing)} of {len(want)} missing)")
        if model.complete and model.flavour != "dir" and listed != want:
            extra = sorted(listed - want)
            raise DataMismatch(f"{where}: {p} lists {extra[0]!r}, which the workload did not make or removed")
    else:  # pragma: no cover
        raise AssertionError(op)


def _end(fs: FileSystem, part: str, ok: bool, built: Any) -> None:
    """Unmount what is still mounted (untimed; its errors count only when the run went well) and, in a directory,
    remove everything the workload created."""
    try:
        if part != "dir" and fs.mounted:
            fs.unmount()
    except SdbenchError:
        if ok:
            raise
    finally:
        if part == "dir":
            root = bare(fs)
            root.cleanup()  # type: ignore[attr-defined]
            for w in getattr(root, "warnings", ()):
                if w not in built.warnings:
                    built.warnings.append(w)
