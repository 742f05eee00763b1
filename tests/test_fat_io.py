"""What the FAT layer hands the device: transfer sizes and discards of freed clusters."""
from __future__ import annotations

import pytest

from sdbench.fs.fat import FatConfig, FatFileSystem
from sdbench.media.base import Geometry
from sdbench.media.memory import MemoryDevice
from sdbench.media.trace import TraceDevice

CLUSTER = 2048


_made: list[FatFileSystem] = []


def _fs(fat_type: str = "fat32", **cfg) -> tuple[FatFileSystem, TraceDevice]:
    size = (256 << 20) if fat_type == "fat32" else (64 << 20)
    trace = TraceDevice(MemoryDevice(Geometry(sector_size=512, sector_count=size // 512)))
    fs = FatFileSystem(trace, FatConfig(fat_type=fat_type, allocation_unit_bytes=CLUSTER, trim_on_format=False,
                                        **cfg))
    _made.append(fs)
    fs.format()
    fs.mount()
    return fs, trace


def _ops(trace: TraceDevice, kind: str) -> list[tuple[int, int]]:
    return [(e.lba, e.count) for e in trace.ops() if e.op == kind]


@pytest.fixture(autouse=True)
def _unmount_after():
    """FatFs has one volume per process: a failed test must not leave it mounted."""
    yield
    while _made:
        fs = _made.pop()
        if fs.mounted:
            fs.unmount()


@pytest.mark.parametrize("limit", [0, 1, 2])
def test_max_transfer_sectors_splits_file_io(limit):
    fs, trace = _fs(max_transfer_sectors=limit)
    data = bytes(range(256)) * 128  # 32 KiB
    trace.entries.clear()
    with fs.open("/a.bin", "w") as f:
        f.write(data)
    with fs.open("/a.bin", "r") as f:
        assert f.read(len(data)) == data
    writes, reads = _ops(trace, "write"), _ops(trace, "read")
    if limit:
        assert max(n for _, n in writes + reads) == limit
    else:  # FatFs moves a whole cluster per request
        assert max(n for _, n in writes) == max(n for _, n in reads) == fs.layout.sectors_per_cluster
    # the same sectors move whatever the limit
    assert sum(n for _, n in writes) >= len(data) // 512
    fs.unmount()


@pytest.mark.parametrize("fat_type", ["fat32", "fat16"])
def test_remove_discards_the_freed_clusters_in_one_run(fat_type):
    fs, trace = _fs(fat_type)
    with fs.open("/a.bin", "w") as f:
        f.write(b"x" * (3 * CLUSTER))
    data_writes = [(lba, n) for lba, n in _ops(trace, "write") if lba >= fs.layout.data_start]
    file_lbas = sorted({lba + i for lba, n in data_writes for i in range(n)})
    trace.entries.clear()
    fs.remove("/a.bin")
    trims = _ops(trace, "trim")
    spc = fs.layout.sectors_per_cluster
    # one discard over the file's three clusters (its data sectors are among them)
    assert len(trims) == 1
    lba, n = trims[0]
    assert n == 3 * spc
    assert set(range(lba, lba + n)) >= set(file_lbas[-3 * spc:])
    assert not fs.exists("/a.bin")
    fs.unmount()


def test_create_over_an_existing_file_discards_its_clusters():
    fs, trace = _fs()
    with fs.open("/a.bin", "w") as f:
        f.write(b"x" * (2 * CLUSTER))
    with fs.open("/b.bin", "w") as f:  # a neighbour that must stay
        f.write(b"y" * CLUSTER)
    trace.entries.clear()
    with fs.open("/a.bin", "w") as f:
        f.write(b"z" * 100)
    trims = _ops(trace, "trim")
    assert [n for _, n in trims] == [2 * fs.layout.sectors_per_cluster]
    with fs.open("/b.bin", "r") as f:
        assert f.read() == b"y" * CLUSTER
    with fs.open("/a.bin", "r") as f:
        assert f.read() == b"z" * 100
    fs.unmount()


def test_no_discards_when_trim_is_off():
    fs, trace = _fs(trim_freed_clusters=False)
    with fs.open("/a.bin", "w") as f:
        f.write(b"x" * (3 * CLUSTER))
    fs.remove("/a.bin")
    assert _ops(trace, "trim") == []
    fs.unmount()


def test_fragmented_file_is_discarded_run_by_run():
    fs, trace = _fs()
    # a, b, a again: a's chain gets a hole where b sits
    with fs.open("/a.bin", "w") as f:
        f.write(b"a" * CLUSTER)
    with fs.open("/b.bin", "w") as f:
        f.write(b"b" * CLUSTER)
    with fs.open("/a.bin", "a") as f:
        f.write(b"a" * CLUSTER)
    trace.entries.clear()
    fs.remove("/a.bin")
    spc = fs.layout.sectors_per_cluster
    trims = _ops(trace, "trim")
    assert [n for _, n in trims] == [spc, spc]
    assert trims[1][0] - trims[0][0] == 2 * spc  # b's cluster in between is kept
    with fs.open("/b.bin", "r") as f:
        assert f.read() == b"b" * CLUSTER
    fs.unmount()
