"""Errors that reach the user as one clear line (exit code 2, no traceback)."""
from __future__ import annotations


class SdbenchError(Exception):
    """Any error caused by input or the environment, not by a bug in sdbench.

    The CLI prints ``error: <message>`` on stderr and exits with :attr:`exit_code`.
    """

    #: 2: refused before any work started (bad input, unsafe target, not confirmed)
    exit_code = 2


class ConfigError(SdbenchError):
    """A scenario, profile or option value is invalid."""


class FileSystemError(SdbenchError):
    """A file system operation failed (corrupt image, missing file, full, ...)."""


class RunFailedError(SdbenchError):
    """A run that had started failed part-way (I/O error, full medium...); it is stored as failed."""

    exit_code = 1


class InternalError(RuntimeError):
    """A bug in sdbench itself (a model's arithmetic gone wrong, a stack wired against its own rules), never
    the user's input: the CLI reports it as an internal error (exit 3), not as a refusal."""
