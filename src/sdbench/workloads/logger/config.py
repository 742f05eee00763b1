"""The data logger's options: the record, its rate, the sync policy, the files, the RAM buffer; and what a
stack must offer before a log begins."""
from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ...errors import ConfigError
from ...options import opt

KIB = 1024
PARTS = ("sd_fatfs", "sd_littlefs", "flash_fatfs", "flash_littlefs", "flash_spiffs", "dir")
#: most records one session may produce (per-record arrays are kept in memory)
MAX_RECORDS = 5_000_000
#: most files one session may create (rotated names have four digits)
MAX_FILES = 9999
#: the kinds of timed call
WRITE, SYNC, ROTATE = 0, 1, 2
OP_NAMES = ("write", "sync", "rotate")


@dataclass(frozen=True)
class LoggerConfig:
    part: str = opt("sd_fatfs", choices=PARTS, help="filesystem the log goes to: a part of the stack, or dir "
                                                    "(sdbench run --dir)")
    record_bytes: int = opt(64, unit="B", min=1, max=1 << 20, help="bytes per record (one write() call each)")
    rate_hz: float = opt(200.0, unit="Hz", min=0.01, max=100_000.0, help="records produced per second")
    duration_s: float = opt(60.0, unit="s", min=0.001, max=86_400.0, help="length of the log, per session")
    sync_every_records: int = opt(0, unit="records", min=0, help="sync the file after this many records; 0 = off")
    sync_every_ms: float = opt(1000.0, unit="ms", min=0.0, max=3_600_000.0,
                               help="sync the file after the first write at or past each multiple of this since "
                                    "the log began; 0 = off")
    buffer_bytes: int = opt(4096, unit="B", min=1, max=1 << 30,
                            help="RAM buffer between producer and writer, for records lost (at least one record)")
    rotate_bytes: int = opt(0, unit="B", min=0, max=1 << 40,
                            help="start a new file when the current one would grow past this; 0 = one file")
    keep_files: int = opt(0, unit="files", min=0, max=MAX_FILES,
                          help="with rotate_bytes: at a rotation delete the oldest files so at most this many "
                               "remain (a ring); 0 = keep all")
    jitter_ms: float = opt(0.0, unit="ms", min=0.0, max=3_600_000.0,
                           help="each record comes up to this much after k / rate_hz (uniform, seeded); below "
                                "the record period")
    file_name: str = opt("log.bin", help="log file in the root directory (rotated files: log-0000.bin, ...)")
    runs: int = opt(1, unit="sessions", min=1, max=1000, help="logging sessions one after the other (--runs)")

    def __post_init__(self) -> None:
        n = self.records
        if n > MAX_RECORDS:
            raise ConfigError(f"logger.duration_s = {self.duration_s:g} s at logger.rate_hz = {self.rate_hz:g} Hz "
                              f"is {n} records; at most {MAX_RECORDS} per session")
        if self.buffer_bytes < self.record_bytes:
            raise ConfigError(f"logger.buffer_bytes = {self.buffer_bytes} B holds no record of logger.record_bytes "
                              f"= {self.record_bytes} B")
        if self.rotate_bytes and self.rotate_bytes < self.record_bytes:
            raise ConfigError(f"logger.rotate_bytes = {self.rotate_bytes} B holds no record of "
                              f"logger.record_bytes = {self.record_bytes} B")
        if self.keep_files and not self.rotate_bytes:
            raise ConfigError("logger.keep_files needs logger.rotate_bytes (files are deleted at a rotation)")
        if self.files_per_session() > MAX_FILES:
            raise ConfigError(f"logger.rotate_bytes = {self.rotate_bytes} B makes {self.files_per_session()} files "
                              f"per session; at most {MAX_FILES}")
        if self.jitter_ms * 1e6 >= self.period_ns:
            raise ConfigError(f"logger.jitter_ms = {self.jitter_ms:g} ms is not below the record period "
                              f"({self.period_ns / 1e6:g} ms at logger.rate_hz = {self.rate_hz:g} Hz)")
        name = self.file_name
        ok = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        if not name or len(name) > 30 or not set(name) <= ok or name.startswith("."):
            raise ConfigError(f"logger.file_name = {name!r:.40}: a name of 1..30 letters, digits, '.', '_' or '-' "
                              f"in the root directory (not starting with '.')")

    @property
    def records(self) -> int:
        """Records per session: every k with k / rate_hz < duration_s (at least record 0, at t = 0)."""
        return max(1, math.ceil(self.duration_s * self.rate_hz - 1e-9))

    @property
    def period_ns(self) -> float:
        return 1e9 / self.rate_hz

    def file_names(self, count: int) -> list[str]:
        """The first ``count`` log files: ``/log.bin``, or with rotation ``/log-0000.bin``, ``/log-0001.bin``..."""
        if not self.rotate_bytes:
            return [f"/{self.file_name}"]
        stem, dot, ext = self.file_name.rpartition(".")
        if not dot or not stem:
            stem, ext = self.file_name, ""
        return [f"/{stem}-{i:04d}{'.' + ext if ext else ''}" for i in range(count)]

    def stored_bytes(self) -> int:
        """The most bytes of log the medium holds at once: the whole log, or the ring of ``keep_files`` files."""
        whole = self.records * self.record_bytes
        if self.keep_files:
            per_file = (self.rotate_bytes // self.record_bytes) * self.record_bytes
            return min(whole, self.keep_files * per_file)
        return whole

    def files_per_session(self) -> int:
        if not self.rotate_bytes:
            return 1
        per_file = self.rotate_bytes // self.record_bytes
        return -(-self.records // per_file)

    def syncs_per_session(self) -> int:
        """About how many syncs a session makes (for progress): by count, by time, and the final one."""
        n = self.records
        by_count = n // self.sync_every_records if self.sync_every_records else 0
        by_time = int(self.duration_s * 1000.0 / self.sync_every_ms) if self.sync_every_ms else 0
        return by_count + by_time + 1


def config_of(sc: Any) -> LoggerConfig:
    cfg = sc.options.get("logger")
    return cfg if cfg is not None else LoggerConfig()


def retarget(cfg: LoggerConfig, kind: str) -> LoggerConfig:
    """``sdbench run --dir``: the log goes to the directory; ``--device``: to FAT or LittleFS on the device."""
    if kind == "dir":
        return replace(cfg, part="dir")
    if kind == "device" and not cfg.part.startswith("sd_"):
        return replace(cfg, part="sd_fatfs")
    return cfg


def timed_calls(sc: Any) -> int:
    cfg = config_of(sc)
    return cfg.runs * (cfg.records + cfg.syncs_per_session() + cfg.files_per_session() - 1)


def preflight(sc: Any, built: Any, capacity: Callable[[str], int | None]) -> None:
    """Refuse, before any I/O, a part the stack has not, a log that does not fit it, or a directory that holds a
    file of the log already (ConfigError naming the option)."""
    cfg = config_of(sc)
    parts = built.target.fs_factories
    if cfg.part not in parts:
        if cfg.part == "dir":
            raise ConfigError("logger.part = \"dir\" needs a directory: sdbench run --dir DIR")
        have = ", ".join(sorted(parts)) or "none"
        raise ConfigError(f"logger.part = {cfg.part!r}: this stack has no such filesystem (it has: {have})")
    need = cfg.stored_bytes()
    if cfg.part == "dir":
        fs = built.target.make_fs("dir")
        root = getattr(fs, "root", None)
        for name in cfg.file_names(cfg.files_per_session()):
            if fs.exists(name):
                raise ConfigError(f"logger.file_name: {name.lstrip('/')} exists in {root or 'the directory'}; the "
                                  f"logger does not overwrite files (remove it or choose another name)")
        if root is not None and shutil.disk_usage(root).free < need:
            raise ConfigError(f"logger.duration_s: the log's {need} B do not fit the {shutil.disk_usage(root).free} "
                              f"B free in {root}")
        return
    cap = capacity(cfg.part)  # also checks the filesystem's configuration against its device
    if cap is not None and need > cap:
        if cfg.keep_files:
            raise ConfigError(f"logger.keep_files = {cfg.keep_files} files of logger.rotate_bytes = "
                              f"{cfg.rotate_bytes} B = {need} B do not fit {cfg.part}'s {cap} B")
        raise ConfigError(f"logger.duration_s = {cfg.duration_s:g} s x logger.rate_hz = {cfg.rate_hz:g} Hz x "
                          f"logger.record_bytes = {cfg.record_bytes} B = {need} B do not fit {cfg.part}'s "
                          f"{cap} B")

