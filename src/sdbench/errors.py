"""Errors that reach the user as one clear line (exit code 2, no traceback)."""
from __future__ import annotations


class SdbenchError(Exception):
    """Any error caused by input or the environment, not by a bug in sdbench.

    The CLI prints ``error: <message>`` on stderr and exits with code 2.
    """


class ConfigError(SdbenchError):
    """A scenario, profile or option value is invalid."""


class FileSystemError(SdbenchError):
    """A file system operation failed (corrupt image, missing file, full, ...)."""
