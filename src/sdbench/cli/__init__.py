"""The ``sdbench`` command line.

Each ``cmd_*.py`` module in this package adds its commands through
``register(app)``; they are loaded here, so a new command is one new module.
Errors caused by input (:class:`sdbench.errors.SdbenchError`) print one line on
stderr and exit with code 2, without a traceback.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import signal
import threading
from typing import Any

import typer

from .. import __version__
from ..errors import SdbenchError

app = typer.Typer(
    name="sdbench",
    help="Measure and predict SD card and flash storage performance: real media and simulated embedded targets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sdbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.",
                                       callback=_version, is_eager=True)) -> None:
    """sdbench: storage benchmarks for SD cards and flash."""


_loaded = False


def _load_commands() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    # simulated/run commands first in --help, then results, real media, sweeps; new modules after them
    first = ["cmd_run", "cmd_calibrate", "cmd_validate", "cmd_trace", "cmd_store", "cmd_real", "cmd_sweep"]
    rank = {n: i for i, n in enumerate(first)}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: (rank.get(m.name, len(first)), m.name)):
        if info.name.startswith("cmd_"):
            mod = importlib.import_module(f"{__name__}.{info.name}")
            mod.register(app)


def fail(message: str) -> "typer.Exit":
    """Print ``error: message`` on stderr; return an Exit(2) to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def main(argv: list[str] | None = None) -> int:
    previous = None
    _Term.received = False
    try:
        from ..parallel import end_workers_with_parent

        end_workers_with_parent()  # a killed sdbench leaves no worker or I/O process running on
        previous = _catch_sigterm()
        rc = _main(argv)
    except KeyboardInterrupt:  # a Ctrl-C before the command's own handling began
        typer.echo(stop_reason(), err=True)
        rc = INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if rc == INTERRUPTED and _Term.received:  # stopped by SIGTERM (timeout, a service manager): said as such
        return TERMINATED
    return rc


class _Term:
    received = False


def _on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM takes the Ctrl-C path, so a run stops the same way: files it made removed, the run stored as
    interrupted.  Inside a C filesystem library's call it is deferred until the call returns, as a Ctrl-C is,
    also where SIGINT is ignored (a background job of a shell script): raised inside a callback, littlefs
    prints it and goes on, FatFs fails with it set."""
    from ..fs import interrupts

    _Term.received = True
    if interrupts.in_library_call():
        interrupts.defer()
    else:
        raise KeyboardInterrupt


def _catch_sigterm() -> Any:
    """Install :func:`_on_sigterm` where SIGTERM has its default action; the handler it replaces, or None."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None
    global _fork_hook
    if not _fork_hook:  # a forked worker or job process ends on SIGTERM as any process does (Pool.terminate)
        os.register_at_fork(after_in_child=_sigterm_default_in_child)
        _fork_hook = True
    return signal.signal(signal.SIGTERM, _on_sigterm)


_fork_hook = False


def _sigterm_default_in_child() -> None:
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:  # not the interpreter's main thread: nothing to reset there
            pass


def stop_reason() -> str:
    """Why a run stopped early, as its stored record and the last line say."""
    return "terminated (SIGTERM)" if _Term.received else "interrupted"


def _main(argv: list[str] | None) -> int:
    try:
        _load_commands()  # most of the start-up time: a Ctrl-C here is an interruption like any other
        # without standalone mode click returns the code of a typer.Exit(n) instead of raising it
        rc = app(args=argv, prog_name="sdbench", standalone_mode=False)
        if rc == INTERRUPTED:  # typer returns a Ctrl-C as this code, silently
            typer.echo(stop_reason(), err=True)
        return rc if isinstance(rc, int) else 0
    except SdbenchError as e:
        typer.echo(f"error: {_one_line(str(e))}", err=True)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        typer.echo("aborted", err=True)
        return INTERRUPTED
    except KeyboardInterrupt:
        typer.echo(stop_reason(), err=True)
        return INTERRUPTED
    except Exception as e:
        # click's usage/parameter errors (typer ships its own click): print them as click does
        if type(e).__name__ == "NoArgsIsHelpError":  # a bare command: its help, as it is
            typer.echo(e.format_message(), err=True)  # type: ignore[attr-defined]
            return 2
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
            hint = ""
            ctx = getattr(e, "ctx", None)
            if ctx is not None:
                hint = f" (see '{ctx.command_path} --help')"
            typer.echo(f"error: {_one_line(e.format_message())}{hint}", err=True)
            return 2
        if os.environ.get("SDBENCH_DEBUG"):
            raise
        what = f"{type(e).__name__}: {_one_line(str(e))}"
        plugin = _plugin_of(e)
        if plugin:
            typer.echo(f"error: plugin {plugin} failed ({what}); report it to the plugin's authors "
                       f"(SDBENCH_DEBUG=1 shows the traceback)", err=True)
        else:  # a bug in sdbench, not the user's input: one line, and the way to see more
            typer.echo(f"error: internal error ({what}); this is a bug in sdbench, please report it with the "
                       f"command line (SDBENCH_DEBUG=1 shows the traceback)", err=True)
        return INTERNAL_ERROR


#: exit code of a bug in sdbench itself (2 is bad input, 1 a failed run or check)
INTERNAL_ERROR = 3
#: exit code of a run stopped by Ctrl-C (the shells' 128 + SIGINT)
INTERRUPTED = 130
#: exit code of a run stopped by SIGTERM (128 + SIGTERM)
TERMINATED = 143


def _plugin_of(e: BaseException) -> str | None:
    """The loaded plugin whose code raised ``e`` (the innermost plugin frame), if any."""
    from ..registry import PLUGIN_MODULES

    found = None
    tb = e.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", "")).split(".")[0]
        if module in PLUGIN_MODULES:
            found = module
        tb = tb.tb_next
    return found


def _one_line(text: str, limit: int = 500) -> str:
    """An error message as one line: newlines folded, cut at ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
