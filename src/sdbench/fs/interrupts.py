"""Ctrl-C while a C filesystem library (littlefs, FatFs) runs: deferred until the library has returned.

Python raises KeyboardInterrupt wherever the interpreter happens to be when SIGINT arrives: inside a block-device
callback the library made, also before the callback's ``try``, where the binding can only print it and go on
(littlefs-python), or return with the exception set (fatfs-ng: a SystemError). While a library call runs,
:class:`DeferredSigint` turns SIGINT into a flag the callbacks read (:func:`pending`): they fail at once, the
library unwinds, and KeyboardInterrupt is raised when the call returns. The filesystem then refuses every
later call with KeyboardInterrupt again, so the cleanup that follows (closing files, unmounting) cannot replace
it with an error of a volume left half-way.
"""
from __future__ import annotations

import _signal
import signal
import threading
from typing import Any


class _State:
    pending = False


#: library calls the main thread is inside (a list, not a class attribute: setting one of those costs each call
#: the type's attribute cache)
_DEPTH = [0]


def pending() -> bool:
    """A Ctrl-C arrived while a library call runs: callbacks fail at once."""
    return _State.pending


def in_library_call() -> bool:
    """Whether the main thread is inside a library call (a signal handler must then defer, not raise)."""
    return _DEPTH[0] > 0


def defer() -> None:
    """Stop as a Ctrl-C in a library call does: callbacks fail at once, KeyboardInterrupt once it returns (how
    another signal that stops the run, SIGTERM, arrives there, whatever SIGINT's disposition)."""
    _State.pending = True


#: the flag :func:`pending` reads, as an attribute (``FLAG.pending``) for a callback made a million times a run
FLAG = _State


_SIGINT = int(signal.SIGINT)
_DEFAULT_INT_HANDLER = signal.default_int_handler


def _defer(signum: int, frame: Any) -> None:
    _State.pending = True


class DeferredSigint:
    """Around one library call. Only Python's own SIGINT handler in the main thread is replaced (an ignored
    SIGINT stays ignored; a call inside another keeps the outer one's handler).  FatFs calls come by the hundred
    thousand in a protocol run: the handler is read and set through ``_signal`` (what ``signal.getsignal`` and
    ``signal.signal`` call, without their conversions to enums) and the thread compared by its id (the main
    thread's asked each time: a process forked from another thread has that one as its main thread)."""

    def __enter__(self) -> "DeferredSigint":
        self.previous: Any = None
        self.main = threading.get_ident() == threading.main_thread().ident
        if self.main:
            _DEPTH[0] += 1
            if _signal.getsignal(_SIGINT) is _DEFAULT_INT_HANDLER:
                self.previous = _signal.signal(_SIGINT, _defer)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.main:
            _DEPTH[0] -= 1
        if self.previous is not None:
            _signal.signal(_SIGINT, self.previous)
        if _State.pending:
            _State.pending = False
            raise KeyboardInterrupt
