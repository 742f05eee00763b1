"""The volume model: what the volume holds after each step, as the step list says.  It checks a step list before
anything runs (ConfigError naming the step's field) and gives the runs the data to write and expect."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from .steps import MAX_CALLS, StepConfig, WorkloadConfig, expand


def flavour(part: str) -> str:
    """How the model treats the part's filesystem: "spiffs" (no directories), "dir" (never formatted, files of
    others may be there) or "fs"."""
    return {"flash_spiffs": "spiffs", "dir": "dir"}.get(part, "fs")


class StepRefused(Exception):
    """A step that cannot run on the model's volume: the field to blame and why."""

    def __init__(self, field: str, text: str) -> None:
        super().__init__(text)
        self.field, self.text = field, text


class VolumeModel:
    """What the volume holds after each step, as the step list says: files as lists of (generation, length)
    segments of pattern data, directories, whether it is mounted. The same model checks the list before the
    run and gives the runs the data to write and expect."""

    def __init__(self, flavour: str) -> None:
        self.flavour = flavour
        self.mounted = False
        self.files: dict[str, list[tuple[int, int]]] = {}
        self.dirs: set[str] = set()
        self.ever: set[str] = set()       # every path a step created
        self.complete = False             # formatted in this run: the model knows every file there
        self.gen = 0
        self.live = 0                     # bytes of file data in the files

    # -- queries --
    def size(self, p: str) -> int:
        return sum(n for _, n in self.files[p])

    def _set(self, p: str, segs: list[tuple[int, int]]) -> None:
        self.live += sum(n for _, n in segs) - (self.size(p) if p in self.files else 0)
        self.files[p] = segs

    def snapshot(self) -> tuple[Any, ...]:
        return (self.mounted, self.complete, tuple(sorted((p, self.size(p)) for p in self.files)),
                tuple(sorted(self.dirs)))

    def _exists(self, p: str) -> bool:
        return p == "/" or p in self.files or p in self.dirs

    def _parent_ok(self, p: str, field: str = "path") -> None:
        parent = p.rsplit("/", 1)[0] or "/"
        if self.flavour != "spiffs" and parent != "/" and parent not in self.dirs:
            raise StepRefused(field, f"{parent} does not exist at that point (add a mkdir step for it)")
        if parent in self.files:
            raise StepRefused(field, f"{parent} is a file")

    def _file(self, p: str, what: str, field: str = "path") -> None:
        if p in self.dirs or p == "/":
            raise StepRefused(field, f"{what} of {p}, which is a directory")
        if p not in self.files:
            why = "an earlier step removed or renamed it" if p in self.ever else "no earlier step wrote it"
            raise StepRefused(field, f"{what} of {p}, which does not exist at that point ({why})")

    def _new_file(self, p: str) -> None:
        if p in self.dirs or p == "/":
            raise StepRefused("path", f"{p} is a directory")
        self._parent_ok(p)
        self.ever.add(p)

    def next_gen(self) -> int:
        self.gen += 1
        return self.gen

    # -- steps: check, change the model, return what the run needs --
    def apply(self, s: StepConfig, p: str, to: str) -> Any:
        """Apply one repetition of step ``s`` (on path ``p``, rename target ``to``); returns what the run needs:
        the generation a write writes, the segments a read expects, "file" or "dir" for a delete, the names a
        list expects."""
        op = s.op
        if op == "format":
            self.mounted = False
            if self.flavour != "dir":
                self.files.clear()
                self.dirs.clear()
                self.live = 0
                self.complete = True
            return None
        if op == "mount":
            if self.mounted:
                raise StepRefused("op", "the filesystem is mounted already at that point")
            self.mounted = True
            return None
        if not self.mounted:
            raise StepRefused("op", f"{'unmount' if op == 'unmount' else f'a {op} step'} needs a mounted "
                                    f"filesystem (add a mount step before it)")
        if op == "unmount":
            self.mounted = False
            return None
        if op == "mkdir":
            if self._exists(p):
                raise StepRefused("path", f"mkdir of {p}, which exists at that point")
            self._parent_ok(p)
            self.dirs.add(p)
            self.ever.add(p)
            return None
        if op in ("create", "open"):
            mode = "w" if op == "create" else s.mode
            if mode in ("r", "r+"):
                self._file(p, f"open ({mode})")
                return None
            self._new_file(p)
            if mode == "w" or p not in self.files:
                self._set(p, [])
            return None
        if op in ("write", "append", "sync"):
            self._new_file(p)
            gen = self.next_gen()
            new = [(gen, s.size_bytes)] if s.size_bytes else []
            self._set(p, new if op == "write" else self.files.get(p, []) + new)
            return gen
        if op == "read":
            self._file(p, "read")
            return list(self.files[p])
        if op == "seek":
            self._file(p, "seek")
            size = self.size(p)
            if s.offset_bytes > size:
                raise StepRefused("offset_bytes", f"seek to {s.offset_bytes} in {p}, which holds {size} B at that "
                                                  f"point (a seek stays inside the file)")
            return list(self.files[p])
        if op == "truncate":
            self._file(p, "truncate")
            size = self.size(p)
            if s.size_bytes > size:
                raise StepRefused("size_bytes", f"truncate of {p} to {s.size_bytes} B, but it holds {size} B at "
                                                f"that point (truncate only shortens a file)")
            self._set(p, cut(self.files[p], s.size_bytes))
            return None
        if op == "rename":
            if p in self.dirs:
                raise StepRefused("path", f"rename of {p}, a directory (rename moves files)")
            self._file(p, "rename")
            if self._exists(to):
                raise StepRefused("to", f"rename onto {to}, which exists at that point (rename only to a new name)")
            self._parent_ok(to, "to")
            self.files[to] = self.files.pop(p)
            self.ever.add(to)
            return None
        if op == "delete":
            if p in self.files:
                self._set(p, [])
                del self.files[p]
                return "file"
            if p in self.dirs:
                prefix = p + "/"
                if any(q.startswith(prefix) for q in (*self.files, *self.dirs)):
                    raise StepRefused("path", f"delete of directory {p}, which is not empty at that point")
                self.dirs.discard(p)
                return "dir"
            self._file(p, "delete")
        if op == "list":
            return self._listing(p)
        raise AssertionError(op)

    def _listing(self, p: str) -> set[str]:
        """The names the workload expects in directory ``p`` (as the filesystem's listdir names them)."""
        prefix = "/" if p == "/" else p + "/"
        if self.flavour == "spiffs":  # flat names: every file below, prefix stripped ("d/x.bin" for "/")
            if p != "/" and p not in self.dirs and not any(q.startswith(prefix) for q in self.files):
                raise StepRefused("path", f"list of {p}, which does not exist at that point")
            return {q[len(prefix):] for q in self.files if q.startswith(prefix)}
        if p != "/" and p not in self.dirs:
            if p in self.files:
                raise StepRefused("path", f"list of {p}, which is a file")
            raise StepRefused("path", f"list of {p}, which does not exist at that point")
        return {q[len(prefix):] for q in (*self.files, *self.dirs)
                if q.startswith(prefix) and "/" not in q[len(prefix):]}


def cut(segs: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The segments of a file cut to ``size`` bytes."""
    out, left = [], size
    for gen, n in segs:
        if left <= 0:
            break
        out.append((gen, min(n, left)))
        left -= n
    return out


@dataclass
class Plan:
    """What checking a step list found: the peak of live file data and where, the names it creates."""

    peak_bytes: int
    peak_where: str
    created: set[str]
    longest_path: tuple[int, str, str]   # (length, path, field)


def _walk(cfg: WorkloadConfig, kind: str) -> Plan:
    """Run the step list on the model, ``repeat`` times (when one run leaves the volume as it found it, the
    rest repeat it and checking stops there)."""
    model = VolumeModel(kind)
    peak, peak_where = 0, "nothing written"
    longest = (0, "", "")
    for run in range(cfg.repeat):
        before = model.snapshot()
        for k, s in enumerate(cfg.steps):
            for i in range(s.count):
                p, to = expand(s.path, i), expand(s.to, i)
                try:
                    model.apply(s, p, to)
                except StepRefused as e:
                    at = f" (i = {i})" if s.count > 1 else ""
                    at += f" in run {run + 1} of the list" if run else ""
                    raise ConfigError(f"workload.steps[{k}].{e.field}: {e.text}{at}") from None
                if model.live > peak:
                    peak, peak_where = model.live, f"after workload.steps[{k}] ({s.label})"
                if run == 0:
                    for q, field in ((p, "path"), (to, "to")):
                        n = len(q.encode("utf-8", "replace"))
                        if n > longest[0]:
                            longest = (n, q, f"workload.steps[{k}].{field}")
        if model.snapshot() == before:
            break
    return Plan(peak, peak_where, set(model.ever), longest)


def check(cfg: WorkloadConfig, part: str) -> Plan:
    """Check the step list on ``part``'s kind of filesystem (ConfigError naming the field); returns the plan."""
    total = sum(s.count for s in cfg.steps) * cfg.repeat
    if total > MAX_CALLS:
        raise ConfigError(f"workload: {total} timed calls (the steps' counts x repeat = {cfg.repeat}) are more "
                          f"than {MAX_CALLS}")
    return _walk(cfg, flavour(part))
