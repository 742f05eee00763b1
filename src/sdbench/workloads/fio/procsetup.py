"""A job's process: its CPUs, NUMA nodes, nice value, I/O priority and name (fio's cpus_allowed, numa_*, nice,
prio, prioclass, priohint, comm).

Each is checked before any job starts (:func:`check_process_settings`) and
applied in the job's own process (:func:`apply_process_settings`).  NUMA
nodes are taken as the kernel takes a node mask: the listed nodes this
machine has (a warning names those it lacks; none at all is refused); the
memory policy is set with ``set_mempolicy`` and the CPUs with
``sched_setaffinity``.  The I/O priority is Linux's ``ioprio_set`` (class,
level and hint as ``ionice`` and fio take them).
"""
from __future__ import annotations

import ctypes
import os
import platform
from pathlib import Path

from ...errors import ConfigError
from .fiosyntax import cpu_list
from .jobs import JobConfig

#: syscall numbers by machine
_SYSCALLS = {"x86_64": {"ioprio_set": 251, "set_mempolicy": 238},
             "aarch64": {"ioprio_set": 30, "set_mempolicy": 237},
             "riscv64": {"ioprio_set": 30, "set_mempolicy": 237}}
_MPOL = {"default": 0, "prefer": 1, "bind": 2, "interleave": 3, "local": 4}
_NODES = Path("/sys/devices/system/node")


def needs_process(job: JobConfig) -> bool:
    """Whether the job changes anything about the process it runs in."""
    return bool(job.cpus_allowed or job.numa_cpu_nodes or job.numa_mem_policy or job.nice or job.prio >= 0
                or job.prioclass >= 0 or job.priohint or job.comm)


def _online_nodes() -> dict[int, tuple[int, ...]]:
    out = {}
    for d in _NODES.glob("node[0-9]*"):
        try:
            cpus = cpu_list(d.joinpath("cpulist").read_text().strip() or "", "cpulist") \
                if d.joinpath("cpulist").read_text().strip() else ()
        except (OSError, ConfigError):
            cpus = ()
        out[int(d.name[4:])] = cpus
    return out


def _nodes(text: str, what: str, job: JobConfig) -> tuple[list[int], list[int]]:
    """(nodes this machine has, listed nodes it lacks) of a node list (``all``: every node)."""
    online = _online_nodes()
    if not online:
        raise ConfigError(f"job {job.name}: {what}: this machine reports no NUMA nodes")
    listed = sorted(online) if text == "all" else list(cpu_list(text, what))
    have = [n for n in listed if n in online]
    missing = [n for n in listed if n not in online]
    if not have:
        raise ConfigError(f"job {job.name}: {what} = {text}: this machine has node(s) "
                          f"{', '.join(map(str, sorted(online)))} only")
    return have, missing


def _syscall(name: str) -> int:
    nums = _SYSCALLS.get(platform.machine())
    if nums is None:
        raise ConfigError(f"{name} is not available on {platform.machine()}")
    return nums[name]


def check_process_settings(job: JobConfig, own_process: bool) -> list[str]:
    """Refuse settings this machine cannot honour (ConfigError); the warnings for partial ones."""
    notes: list[str] = []
    if not needs_process(job):
        return notes
    cpus = set(range(os.cpu_count() or 1))
    if job.cpus_allowed:
        listed = set(cpu_list(job.cpus_allowed, "cpus_allowed"))
        if not listed & cpus:
            raise ConfigError(f"job {job.name}: cpus_allowed = {job.cpus_allowed}: this machine has CPUs "
                              f"0-{max(cpus)}")
    if job.numa_cpu_nodes:
        _, missing = _nodes(job.numa_cpu_nodes, "numa_cpu_nodes", job)
        if missing:
            notes.append(f"job {job.name}: numa_cpu_nodes: node(s) {', '.join(map(str, missing))} do not exist here; "
                         f"the job runs on the CPUs of the others, as the kernel takes a node mask")
    if job.numa_mem_policy:
        mode, _, nodes = job.numa_mem_policy.partition(":")
        if nodes:
            _, missing = _nodes(nodes, "numa_mem_policy", job)
            if missing:
                notes.append(f"job {job.name}: numa_mem_policy: node(s) {', '.join(map(str, missing))} do not exist "
                             f"here; the kernel keeps the policy to the others")
        _syscall("set_mempolicy")
    if job.prio >= 0 or job.prioclass >= 0 or job.priohint:
        _syscall("ioprio_set")
    return notes


def apply_process_settings(job: JobConfig, index: int) -> None:
    """In the job's own process: name, nice, CPUs, NUMA memory policy, I/O priority."""
    libc = ctypes.CDLL(None, use_errno=True)
    if job.comm:
        libc.prctl(15, job.comm.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    if job.nice:
        os.setpriority(os.PRIO_PROCESS, 0, job.nice)
    cpus: set[int] | None = None
    if job.cpus_allowed:
        cpus = set(cpu_list(job.cpus_allowed, "cpus_allowed")) & set(range(os.cpu_count() or 1))
        if job.cpus_allowed_policy == "split":
            ordered = sorted(cpus)
            cpus = {ordered[index % len(ordered)]}
    if job.numa_cpu_nodes:
        have, _ = _nodes(job.numa_cpu_nodes, "numa_cpu_nodes", job)
        online = _online_nodes()
        node_cpus = {c for n in have for c in online.get(n, ())}
        cpus = node_cpus if cpus is None else (cpus & node_cpus or node_cpus)
    if cpus:
        os.sched_setaffinity(0, cpus)
    if job.numa_mem_policy:
        mode, _, nodes = job.numa_mem_policy.partition(":")
        mask = 0
        if nodes:
            for n in _nodes(nodes, "numa_mem_policy", job)[0]:
                mask |= 1 << n
        arr = (ctypes.c_ulong * 16)()
        arr[0] = mask
        r = libc.syscall(_syscall("set_mempolicy"), _MPOL[mode], ctypes.byref(arr) if nodes else None,
                         ctypes.c_ulong(64 * 16 if nodes else 0))
        if r != 0:
            e = ctypes.get_errno()
            raise ConfigError(f"job {job.name}: numa_mem_policy = {job.numa_mem_policy}: {os.strerror(e)}")
    if job.prio >= 0 or job.prioclass >= 0 or job.priohint:
        cls = job.prioclass if job.prioclass >= 0 else 2  # best effort, the kernel's default class
        value = (cls << 13) | (job.priohint << 3) | max(job.prio, 0)
        r = libc.syscall(_syscall("ioprio_set"), 1, 0, value)  # IOPRIO_WHO_PROCESS, this process
        if r != 0:
            e = ctypes.get_errno()
            raise ConfigError(f"job {job.name}: I/O priority class {cls} level {max(job.prio, 0)}: {os.strerror(e)}")


def set_thread_ioprio(value: int) -> None:
    """This thread's I/O priority (Linux's value; 0: the default): requests it submits from now take it."""
    import threading

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_syscall("ioprio_set"), 1, threading.get_native_id(), value) != 0:
        e = ctypes.get_errno()
        raise ConfigError(f"I/O priority {value:#x}: {os.strerror(e)}")
