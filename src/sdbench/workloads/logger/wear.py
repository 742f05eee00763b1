"""What the log costs the medium: bytes programmed per byte logged, and the time until the rated endurance is used.

A simulated SD card counts the bytes its FTL programs into NAND (``CardModel.nand_programmed_bytes``: the host's
data plus the pages a merge copies); a NOR chip counts the bytes it programs and the 4 KiB sectors it erases.  The
write amplification of the whole stack (filesystem, cache, wear levelling, FTL) is programmed bytes / logged
bytes.  The life estimate assumes the medium spreads its wear evenly over all its blocks (an SD card's wear
levelling over its capacity; on NOR, wear levelling, LittleFS' block cycling or SPIFFS' page allocation over the
partition), so it is an upper bound for a medium that levels less.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...media.base import BlockDevice, bottom

#: seconds in a (Julian) year
YEAR_S = 365.25 * 86400.0


@dataclass(frozen=True)
class Endurance:
    """A rated endurance: P/E (program/erase) cycles per block, or TBW (bytes the host may write), and where the
    figure comes from."""

    cycles: float | None = None
    tbw_bytes: float | None = None
    source: str = ""


class WearMeter:
    """The medium's counters around the log (not the format and set-up)."""

    def __init__(self, fs_device: BlockDevice | None) -> None:
        low = bottom(fs_device) if fs_device is not None else None
        self.low = low
        card = getattr(low, "card", None)
        self.card = card if card is not None and hasattr(card, "nand_programmed_bytes") else None
        chip = getattr(low, "chip", None)
        self.chip = chip if chip is not None and hasattr(chip, "erase_counts") else None
        self.logged = 0
        self.written = 0      # bytes the host wrote to the medium (SD: to the card; NOR: programmed)
        self.programmed = 0   # bytes the medium programmed (SD: into NAND; NOR: programmed)
        self.erases = 0       # NOR: 4 KiB sector erases
        self._mark: tuple[int, int, int] | None = None

    @property
    def medium(self) -> str:
        return "sd card" if self.card is not None else "nor flash" if self.chip is not None else ""

    def _now(self) -> tuple[int, int, int]:
        if self.card is not None:
            return self.low.stats.bytes_written, self.card.nand_programmed_bytes, 0  # type: ignore[union-attr]
        if self.chip is not None:
            st = self.chip.stats
            return st.bytes_programmed, st.bytes_programmed, int(self.chip.erase_counts.sum())
        return 0, 0, 0

    def start(self) -> None:
        self._mark = self._now()

    def stop(self, logged_bytes: int) -> None:
        if self._mark is None:
            return
        w, p, e = self._now()
        self.written += w - self._mark[0]
        self.programmed += p - self._mark[1]
        self.erases += e - self._mark[2]
        self.logged += logged_bytes
        self._mark = None

    def summary(self, log_s: float) -> dict[str, Any]:
        """The counts, the write amplification and, for NOR, the chip's rated erase cycles (its profile)."""
        if not self.medium:
            return {}
        out: dict[str, Any] = {"medium": self.medium, "logged_bytes": self.logged, "log_s": log_s,
                               "written_bytes": self.written, "programmed_bytes": self.programmed,
                               "write_amplification": self.programmed / self.logged if self.logged else 0.0}
        if self.card is not None:
            out["medium_bytes"] = int(self.card.p.capacity_bytes)
            out["au_bytes"] = int(self.card.p.au_bytes)
        else:
            assert self.chip is not None and self.low is not None
            out["medium_bytes"] = int(self.low.geometry.size_bytes)   # the partition the log lives in
            out["erases"] = self.erases
            out["erase_bytes"] = 4096
            out["endurance_cycles"] = int(self.chip.profile.endurance_cycles)
            out["endurance_source"] = f"flash chip profile {self.chip.profile.name} (endurance_cycles)"
        return out


def life_s(wear: dict[str, Any], endurance: Endurance, data_rate_bytes_s: float) -> float | None:
    """Seconds of logging at ``data_rate_bytes_s`` (the records' bytes per second) until the rated endurance is
    used, at the wear per byte logged that the run measured (None: no figure).

    P/E cycles: the medium's bytes x cycles over the bytes it programs per second (NOR: its sectors x cycles
    over the sector erases per second); TBW: the bytes the host may write over the bytes it writes per second."""
    logged = float(wear.get("logged_bytes") or 0)
    if logged <= 0 or data_rate_bytes_s <= 0:
        return None
    per_s = data_rate_bytes_s / logged   # the run's counts per byte logged, at the logging rate
    if endurance.tbw_bytes is not None:
        rate = wear["written_bytes"] * per_s
        return endurance.tbw_bytes / rate if rate > 0 else None
    if endurance.cycles is None:
        return None
    if wear["medium"] == "nor flash":
        sectors = wear["medium_bytes"] / wear["erase_bytes"]
        rate = wear.get("erases", 0) * per_s
        return endurance.cycles * sectors / rate if rate > 0 else None
    rate = wear["programmed_bytes"] * per_s
    return endurance.cycles * wear["medium_bytes"] / rate if rate > 0 else None
