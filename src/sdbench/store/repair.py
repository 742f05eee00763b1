"""``sdbench db repair``: a damaged results store rebuilt from the runs that still read back intact."""
from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SdbenchError
from ..records import RunRecord
from . import db
from .encoding import _Damage
from .opening import open_store
from .run_info import StoredRun


@dataclass(frozen=True)
class RepairResult:
    path: Path
    backup: Path | None           # where the damaged file was kept (None: nothing was done)
    recovered: list[int]          # run ids in the rebuilt store
    lost: list[int]               # run ids that could not be read back intact
    problems: list[str] = field(default_factory=list)  # what the check found before the repair


def _sidecars(path: Path) -> list[Path]:
    return [Path(f"{path}{s}") for s in ("-wal", "-shm", "-journal")]


def repair_store(path: str | os.PathLike[str], *, force: bool = False) -> RepairResult:
    """Rebuild a damaged store from the runs that still read back intact.

    The new store takes the old one's place; the damaged file is kept next to
    it as ``<name>.damaged-<UTC time>`` (``<name>.old-<UTC time>`` when forced).  Without ``force`` a store that passes
    :meth:`Store.check` is left alone (``backup`` None).
    """
    path = Path(path).expanduser()
    db.refuse_read_only(path)
    good: list[tuple[StoredRun, RunRecord]] = []
    lost: list[int] = []
    ids: list[int] = []
    try:
        src = open_store(path, create=False, write=False, upgrade=False)
    except db.StoreDamaged as e:
        problems = [str(e)]
    else:
        try:
            _, problems = src.check()
            if not problems and not force:
                return RepairResult(path, None, [], [], [])
            ids, _ = src.run_ids()
            for rid in ids:
                try:
                    good.append(src._read(rid))
                except (_Damage, SdbenchError):
                    lost.append(rid)
        finally:
            src.close()
    tmp = path.with_name(f".{path.name}.repair-{os.getpid()}")
    for p in (tmp, *_sidecars(tmp)):
        p.unlink(missing_ok=True)
    try:
        with open_store(tmp) as dst:
            dst._restore(good, max(ids, default=0))
            dst._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        kind = "damaged" if problems else "old"
        backup = path.with_name(f"{path.name}.{kind}-{stamp}")
        n = 1
        while backup.exists():
            n += 1
            backup = path.with_name(f"{path.name}.{kind}-{stamp}-{n}")
        os.replace(path, backup)
        for side, moved in zip(_sidecars(path), _sidecars(backup)):
            if side.exists():
                os.replace(side, moved)
        os.replace(tmp, path)
    except OSError as e:
        raise SdbenchError(f"cannot repair results store {path}: {e.strerror or e}") from None
    finally:
        for p in (tmp, *_sidecars(tmp)):
            try:
                p.unlink(missing_ok=True)
            except OSError:
                pass
    return RepairResult(path, backup, [info.id for info, _ in good], lost, problems)
