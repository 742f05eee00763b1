"""The medium a cut run starts from: every operation of a clean run (:class:`MediumLog`, :class:`Recording`), the
formatted medium's image and an untimed device holding it, what recovery reads, and the built stack's block cache."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..media.base import BlockDevice, BlockDeviceWrapper, bottom
from ..media.memory import MemoryDevice


class MediumLog(BlockDeviceWrapper):
    """Passes every operation through and keeps the writes (with their data), erases and trims in order, with
    ``state()`` (the workload's bookkeeping) as it was when each was issued."""

    kind = "medium-log"

    def __init__(self, inner: BlockDevice, state: Callable[[], Any] | None = None) -> None:
        super().__init__(inner)
        self._state = state
        self.ops: list[tuple[str, int, Any]] = []
        self.states: list[Any] = []

    def _note(self, what: str, lba: int, arg: Any) -> None:
        self.ops.append((what, lba, arg))
        self.states.append(self._state() if self._state is not None else None)

    def _write(self, lba: int, data: bytes, buf_addr: int) -> None:
        self._note("write", lba, bytes(data))
        self.inner.write(lba, data, buf_addr=buf_addr)

    def _erase(self, lba: int, count: int) -> None:
        self._note("erase", lba, count)
        self.inner.erase(lba, count)

    def _trim(self, lba: int, count: int) -> None:
        self._note("trim", lba, count)
        self.inner.trim(lba, count)

    def replay(self, device: BlockDevice, first: int = 0) -> None:
        """Make the same operations on ``device``, in order from the ``first``, until one raises (a power
        cut)."""
        for what, lba, arg in self.ops[first:]:
            if what == "write":
                device.write(lba, arg)
            elif what == "erase":
                device.erase(lba, arg)
            else:
                device.trim(lba, arg)


@dataclass(frozen=True)
class Recording:
    """A clean run as the medium saw it: the workload, the operations before the set-up and before the workload,
    every operation from the set-up on, and the medium's contents once set up (None: not taken)."""

    cfg: Any
    begun: int
    start: int
    log: MediumLog
    image: Any = None


def _medium_image(fault: Any) -> Any:
    """The simulated medium's contents under the fault wrapper (a card's store; the NOR partition's bytes), or
    None for a medium that cannot give them."""
    low = bottom(fault)
    store = getattr(low, "store", None)
    if isinstance(store, MemoryDevice) and store.geometry == fault.geometry:
        return store.snapshot()
    chip = getattr(low, "chip", None)
    if chip is not None and hasattr(low, "offset_bytes") and low.geometry == fault.geometry:
        return chip.peek(low.offset_bytes, low.geometry.size_bytes)
    return None


def _image_device(geometry: Any, image: Any) -> MemoryDevice:
    """An untimed medium holding ``image``: a card's sectors, or a NOR partition (programs only clear bits, an
    erase sets them, as on the chip).  A cut run replays into it and recovers from it: data is all a cut's
    outcome depends on, and the bus and card models would only add time."""
    if isinstance(image, dict):
        mem = MemoryDevice(geometry)
        mem.restore(image)
    else:
        mem = MemoryDevice(geometry, program_and=True)
        mem.write_bytes(0, image)
    return mem


def _untimed(fault: Any) -> BlockDevice:
    """What recovery reads: the simulated card's store itself (the same bytes, no timing: reading a log back
    through the bus model would cost more than the run), unless the fault wrapper changes reads (bit flips, bad
    sectors) or the medium has no store."""
    store = getattr(bottom(fault), "store", None)
    cfg = fault.config
    if store is None or cfg.bitflip_probability or cfg.bad_sectors or store.geometry != fault.geometry:
        return fault
    return store


def cache_detail(built: Any) -> dict[str, Any]:
    """The block cache of a built stack: its size and policy (empty without one)."""
    cfg = getattr(built, "sd_cache", None)
    if cfg is None:
        return {}
    dev = built.target.sd_device
    block = int(getattr(dev, "block_bytes", 0))
    return {"blocks": cfg.blocks, "block_bytes": block, "bytes": cfg.blocks * block, "policy": cfg.policy,
            "write_mode": cfg.write_mode, "evict_flush": cfg.evict_flush}
