"""Refusal checks before anything is written to a real device or image file.

:func:`check_writable_target` looks at the whole family of a block device (the
disk, its partitions, whatever is stacked on them -- device-mapper, md -- and
what they sit on) and refuses when any member

* holds the root filesystem,
* is an active swap area (or holds a swap file),
* is mounted anywhere (``/proc/self/mountinfo``), or
* is held by another kernel driver (``holders/``: LVM, dm-crypt, RAID),

or when the device is read-only (an SD card's lock switch sets ``ro``).  For an
image file it refuses when the file is a swap file or backs a loop device that
is attached.  Opening a block device for writing additionally uses
``O_EXCL``, so the kernel itself refuses a device it has claimed (mounted,
in a RAID, ...): the checks here give the clear message, O_EXCL is the
backstop for anything they miss.

Every refusal is one :class:`~sdbench.errors.SdbenchError` line naming the
device and the reason.  The ``proc_root``/``sys_root``/``root_path``
arguments exist so tests can describe a system with fake trees.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SdbenchError


class UnsafeTargetError(SdbenchError):
    """Writing to this target could destroy data the system is using."""


@dataclass(frozen=True)
class Mount:
    devno: tuple[int, int]  # st_dev of the mounted filesystem (0:N for btrfs, overlay, ...)
    mount_point: str
    fstype: str
    source: str


@dataclass(frozen=True)
class BlockNode:
    name: str              # kernel name: sda, sda1, mmcblk0p1, loop3, dm-0
    devno: tuple[int, int]
    sysfs: str             # resolved /sys/devices/... directory

    @property
    def dev_path(self) -> str:
        return f"/dev/{self.name}"


@dataclass
class TargetCheck:
    """What was checked (kept with run metadata)."""

    path: str
    kind: str                               # "block" or "file"
    device: str = ""                        # kernel name of the block device
    family: list[str] = field(default_factory=list)
    inode: tuple[int, int] = (0, 0)          # (st_dev, st_ino) of what was checked, see check_opened


def stat_target(p: str) -> os.stat_result:
    """os.stat with the one-line errors a user should see for a device or image path."""
    try:
        return os.stat(p)
    except FileNotFoundError:
        raise SdbenchError(f"no such device or file: {p}") from None
    except PermissionError:
        raise SdbenchError(f"no permission to look at {p}") from None
    except OSError as e:  # a name too long, a path through a regular file, a loop of links
        raise SdbenchError(f"cannot use {p[:120]}: {e.strerror}") from None


def _unescape(s: str) -> str:
    # mountinfo and /proc/swaps escape space, tab, newline and backslash as \ooo
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 4 <= len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def read_mounts(proc_root: str = "/proc") -> list[Mount]:
    try:
        text = Path(proc_root, "self", "mountinfo").read_text()
    except OSError:
        return []
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 7 or "-" not in parts:
            continue
        sep = parts.index("-")
        try:
            major, minor = (int(x) for x in parts[2].split(":"))
        except ValueError:
            continue
        fstype = parts[sep + 1] if len(parts) > sep + 1 else ""
        source = _unescape(parts[sep + 2]) if len(parts) > sep + 2 else ""
        mounts.append(Mount((major, minor), _unescape(parts[4]), fstype, source))
    return mounts


def read_swaps(proc_root: str = "/proc") -> list[tuple[str, str]]:
    """(filename, type) of active swap areas."""
    try:
        lines = Path(proc_root, "swaps").read_text().splitlines()[1:]
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 2:
            out.append((_unescape(parts[0]), parts[1]))
    return out


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_opened(fd: int, checked: TargetCheck) -> None:
    """Refuse when the file opened is not the one the checks looked at (its path was swapped in between)."""
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != checked.inode:
        raise UnsafeTargetError(f"refusing to write to {checked.path}: it was replaced while it was being checked")


def _rdev_of(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if stat.S_ISBLK(st.st_mode):
        return os.major(st.st_rdev), os.minor(st.st_rdev)
    return None


class _Sysfs:
    def __init__(self, sys_root: str) -> None:
        self.root = sys_root

    def node_for_devno(self, devno: tuple[int, int]) -> BlockNode | None:
        link = os.path.join(self.root, "dev", "block", f"{devno[0]}:{devno[1]}")
        if not os.path.exists(link):
            return None
        real = os.path.realpath(link)
        return BlockNode(os.path.basename(real), devno, real)

    def node_by_name(self, name: str) -> BlockNode | None:
        link = os.path.join(self.root, "class", "block", name)
        if not os.path.exists(link):
            return None
        real = os.path.realpath(link)
        try:
            major, minor = (int(x) for x in Path(real, "dev").read_text().strip().split(":"))
        except (OSError, ValueError):
            return None
        return BlockNode(name, (major, minor), real)

    def _names(self, node: BlockNode, sub: str) -> list[str]:
        try:
            return sorted(os.listdir(os.path.join(node.sysfs, sub)))
        except OSError:
            return []

    def is_partition(self, node: BlockNode) -> bool:
        return os.path.exists(os.path.join(node.sysfs, "partition"))

    def disk_of(self, node: BlockNode) -> BlockNode:
        if not self.is_partition(node):
            return node
        parent = self.node_by_name(os.path.basename(os.path.dirname(node.sysfs)))
        return parent or node

    def partitions(self, disk: BlockNode) -> list[BlockNode]:
        out = []
        for name in self._names(disk, ""):
            if os.path.exists(os.path.join(disk.sysfs, name, "partition")):
                n = self.node_by_name(name)
                if n:
                    out.append(n)
        return out

    def holders(self, node: BlockNode) -> list[BlockNode]:
        return [n for n in (self.node_by_name(x) for x in self._names(node, "holders")) if n]

    def slaves(self, node: BlockNode) -> list[BlockNode]:
        return [n for n in (self.node_by_name(x) for x in self._names(node, "slaves")) if n]

    def read_only(self, node: BlockNode) -> bool:
        try:
            return Path(node.sysfs, "ro").read_text().strip() == "1"
        except OSError:
            return False

    def loop_backing_files(self) -> dict[str, str]:
        """loop device name -> backing file path, for attached loop devices."""
        out = {}
        base = os.path.join(self.root, "block")
        try:
            names = os.listdir(base)
        except OSError:
            return out
        for name in names:
            if name.startswith("loop"):
                try:
                    out[name] = Path(base, name, "loop", "backing_file").read_text().strip()
                except OSError:
                    pass
        return out


def _closure_up(sysfs: _Sysfs, start: list[BlockNode]) -> list[BlockNode]:
    seen: dict[str, BlockNode] = {}
    todo = list(start)
    while todo:
        n = todo.pop()
        if n.name in seen:
            continue
        seen[n.name] = n
        todo.extend(sysfs.holders(n))
    return list(seen.values())


def device_family(node: BlockNode, sys_root: str = "/sys") -> list[BlockNode]:
    """Every block device whose data a write to ``node`` could touch or be touched by.

    Upwards: partitions of a whole disk (or the disk of a partition) and
    everything stacked on them.  Downwards: the devices ``node`` is built on
    (dm/md slaves) and their disks and partitions.  Deliberately broad: for
    an LVM volume this includes its volume group's other volumes.
    """
    sysfs = _Sysfs(sys_root)
    base: list[BlockNode] = [node]
    disk = sysfs.disk_of(node)
    if disk.name == node.name:
        base += sysfs.partitions(node)
    else:
        base.append(disk)
    down: list[BlockNode] = []
    todo = sysfs.slaves(node)
    seen = {node.name}
    while todo:
        s = todo.pop()
        if s.name in seen:
            continue
        seen.add(s.name)
        down.append(s)
        d = sysfs.disk_of(s)
        down.append(d)
        down += sysfs.partitions(d)
        todo += sysfs.slaves(s)
    family = _closure_up(sysfs, base + down)
    return sorted(family, key=lambda n: (n.name != node.name, n.name))


def _describe_member(member: BlockNode, target: BlockNode, sysfs: _Sysfs) -> str:
    if member.name == target.name:
        return "it"
    if sysfs.is_partition(member) and sysfs.disk_of(member).name == target.name:
        return f"its partition {member.dev_path}"
    return member.dev_path


def check_writable_target(path: str | os.PathLike[str], *, proc_root: str = "/proc", sys_root: str = "/sys",
                          root_path: str = "/") -> TargetCheck:
    """Raise :class:`UnsafeTargetError` when writing to ``path`` is unsafe; else say what was checked."""
    p = os.fspath(path)
    st = stat_target(p)
    swaps = read_swaps(proc_root)
    mounts = read_mounts(proc_root)
    sysfs = _Sysfs(sys_root)

    if stat.S_ISREG(st.st_mode):
        if not st.st_mode & 0o222:
            # root may write any file; a file nobody may write was made read-only on purpose (never chmod it)
            raise UnsafeTargetError(f"refusing to write to {p}: it is read-only (mode {stat.S_IMODE(st.st_mode):04o})")
        if not os.access(p, os.W_OK):
            raise SdbenchError(f"no permission to write {p}")
        for m in mounts:
            # a filesystem mounted straight from this file (FUSE and the like); loop mounts are caught below
            if m.source.startswith("/") and _same_file(m.source, p):
                raise UnsafeTargetError(f"refusing to write to {p}: the filesystem in it is mounted on "
                                        f"{m.mount_point} ({m.fstype}); unmount it first")
        for fname, _ in swaps:
            try:
                if os.path.samefile(fname, p):
                    raise UnsafeTargetError(f"refusing to write to {p}: it is an active swap file")
            except OSError:
                pass
        for loop, backing in sysfs.loop_backing_files().items():
            if _same_file(backing.removesuffix(" (deleted)"), p):
                raise UnsafeTargetError(f"refusing to write to {p}: it backs the attached loop device /dev/{loop} "
                                        f"(detach it first: losetup -d /dev/{loop})")
        return TargetCheck(p, "file", inode=(st.st_dev, st.st_ino))

    if not stat.S_ISBLK(st.st_mode):
        raise SdbenchError(f"{p} is neither a block device nor a regular file")

    devno = (os.major(st.st_rdev), os.minor(st.st_rdev))
    node = sysfs.node_for_devno(devno)
    if node is None:
        raise UnsafeTargetError(f"refusing to write to {p}: cannot find {devno[0]}:{devno[1]} in {sys_root} "
                                f"to check whether it is in use")
    family = device_family(node, sys_root)
    by_devno = {m.devno: m for m in family}

    # the root filesystem: st_dev of "/" and the source of the "/" mount (btrfs reports 0:N as st_dev)
    root_devs = set()
    try:
        rst = os.stat(root_path)
        root_devs.add((os.major(rst.st_dev), os.minor(rst.st_dev)))
    except OSError:
        pass
    for m in mounts:
        if m.mount_point == "/":
            root_devs.add(m.devno)
            rd = _rdev_of(m.source) if m.source.startswith("/") else None
            if rd:
                root_devs.add(rd)
    for d in root_devs:
        if d in by_devno:
            who = _describe_member(by_devno[d], node, sysfs)
            raise UnsafeTargetError(f"refusing to write to {p}: {who} holds the root filesystem (/)")

    for fname, kind in swaps:
        if kind == "partition" or fname.startswith("/dev/"):
            d = _rdev_of(fname)
            if d in by_devno:
                who = _describe_member(by_devno[d], node, sysfs)
                raise UnsafeTargetError(f"refusing to write to {p}: {who} is an active swap area ({fname})")
        else:
            try:
                fst = os.stat(fname)
            except OSError:
                continue
            d = (os.major(fst.st_dev), os.minor(fst.st_dev))
            if d in by_devno:
                who = _describe_member(by_devno[d], node, sysfs)
                raise UnsafeTargetError(f"refusing to write to {p}: {who} holds the active swap file {fname}")

    for m in mounts:
        hit = by_devno.get(m.devno)
        if hit is None and m.source.startswith("/dev/"):
            rd = _rdev_of(m.source)
            hit = by_devno.get(rd) if rd else None
        if hit is not None:
            who = _describe_member(hit, node, sysfs)
            raise UnsafeTargetError(f"refusing to write to {p}: {who} is mounted on {m.mount_point} "
                                    f"({m.fstype}); unmount it first")

    # stacked drivers on the target itself, its partitions or its whole disk
    for member in [node, *sysfs.partitions(node), sysfs.disk_of(node)]:
        holders = sysfs.holders(member)
        if holders:
            who = _describe_member(member, node, sysfs)
            raise UnsafeTargetError(f"refusing to write to {p}: {who} is in use by "
                                    f"{', '.join('/dev/' + h.name for h in holders)} (device-mapper, LVM or RAID)")

    if sysfs.read_only(node):
        raise SdbenchError(f"cannot write to {p}: the device is read-only (write-protect switch or ro flag)")
    return TargetCheck(p, "block", node.name, [m.name for m in family], (st.st_dev, st.st_ino))
