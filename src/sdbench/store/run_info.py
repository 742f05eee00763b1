"""What the store knows about a run besides its record (:class:`StoredRun`), and the host and device it records
with each run."""
from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Any

from .. import __version__


def host_identity() -> dict[str, str]:
    return {"hostname": platform.node(), "platform": platform.platform(), "python": platform.python_version(),
            "sdbench_version": __version__}


def device_of(meta: dict[str, Any]) -> Any:
    """The device a run measured: ``metadata["device"]`` (importers, callers) or ``["identity"]`` (real media)."""
    return meta.get("device") if meta.get("device") is not None else meta.get("identity")


@dataclass(frozen=True)
class StoredRun:
    """What the store knows about a run besides its record."""

    id: int
    created_utc: str
    finished_utc: str | None
    status: str                   # complete, incomplete, failed
    scenario: str
    protocol: str
    source: str                   # measured, simulated, imported
    clock: str                    # wall, virtual
    seed: int | None
    sweep_id: str | None
    host: dict[str, Any]
    device: dict[str, Any] | None
    sdbench_version: str
    rows: int                     # number of stored rows
    status_reason: str = ""       # why a failed run failed
    problem: str | None = None    # why the run is damaged in the store (None: it reads back intact)

    @property
    def device_name(self) -> str:
        d = self.device or {}
        return str(d.get("name") or d.get("product") or d.get("model") or d.get("summary") or "")

    @property
    def status_text(self) -> str:
        """``complete``, ``incomplete``, ``failed: <reason>`` or ``damaged``."""
        if self.problem:
            return "damaged"
        if self.status == "failed" and self.status_reason:
            return f"failed: {self.status_reason}"
        return self.status
