"""Ctrl-C stops any run, also inside the C filesystem libraries (littlefs, FatFs) and their callbacks; a device
error under FatFs is the error it was, never an internal one."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sdbench import scenarios as scen
from sdbench.errors import ConfigError, FileSystemError
from sdbench.fs.fat import FatFileSystem
from sdbench.fs.littlefs import LFS_BLOCK_MAX, LittleFsFileSystem
from sdbench.media.base import BlockDeviceError
from sdbench.media.memory import MemoryDevice

SDBENCH = [sys.executable, "-m", "sdbench"]


class Tripping(MemoryDevice):
    """A device whose n-th write from now raises ``exc`` (a Ctrl-C or a failing sector inside a callback)."""

    def __init__(self) -> None:
        super().__init__(MemoryDevice.of_size(8 << 20).geometry)
        self.trip_in: int | None = None
        self.exc: BaseException = KeyboardInterrupt()
        self.ops = 0

    def _write(self, lba, data, buf_addr):
        self.ops += 1
        if self.trip_in is not None:
            self.trip_in -= 1
            if self.trip_in <= 0:
                raise self.exc
        super()._write(lba, data, buf_addr)


class TrippingReads(MemoryDevice):
    """A device whose reads raise ``exc`` once ``trip`` is set (littlefs' fused read callback)."""

    def __init__(self) -> None:
        super().__init__(MemoryDevice.of_size(8 << 20).geometry)
        self.trip = False
        self.exc: BaseException = KeyboardInterrupt()

    def _read(self, lba, count, buf_addr):
        if self.trip:
            raise self.exc
        return super()._read(lba, count, buf_addr)


def _with_open_file(fs_class, dev):
    """A filesystem of ``fs_class`` formatted and mounted on ``dev``, and /a.bin open for writing on it."""
    fs = fs_class(dev)
    fs.format()
    fs.mount()
    return fs, fs.open("/a.bin", "w")


def test_a_keyboard_interrupt_in_a_read_callback_stops_littlefs():
    """The same through littlefs' read callback (one function of the context's values, holding it weakly)."""
    dev = TrippingReads()
    fs, f = _with_open_file(LittleFsFileSystem, dev)
    f.write(bytes(64 << 10))
    f.close()
    fs.unmount()
    dev.trip = True
    with pytest.raises(KeyboardInterrupt):
        fs.mount()
    with pytest.raises(KeyboardInterrupt):  # and every later call
        fs.mount()


def test_a_dropped_littlefs_filesystem_is_freed_at_once():
    """Its context's read callback does not hold the context: no cycle left for the collector (a power-loss
    matrix mounts thousands of filesystems over devices of megabytes)."""
    import gc
    import weakref
    gc.disable()
    try:
        fs = LittleFsFileSystem(MemoryDevice.of_size(1 << 20))
        fs.format()
        ctx = weakref.ref(fs._ctx)
        del fs
        assert ctx() is None
    finally:
        gc.enable()


def test_littlefs_block_size_is_bounded():
    """Issue 32, defect 4: sd_littlefs.block_size = 2 GiB was accepted and ran for minutes."""
    with pytest.raises(ConfigError, match=f"block_size = 2147483648 B is above the maximum {LFS_BLOCK_MAX} B"):
        scen.load("logger-sd-littlefs-pauses", ["sd_littlefs.block_size=2147483648"])


@pytest.mark.parametrize("fs_class", [LittleFsFileSystem, FatFileSystem])
def test_a_keyboard_interrupt_in_a_callback_stops_the_filesystem(fs_class):
    """Issue 32, defect 4: a KeyboardInterrupt inside a littlefs callback was printed and ignored (the run went
    on); under FatFs it became an internal error. It stops the call, and every later call of that filesystem."""
    dev = Tripping()
    fs, f = _with_open_file(fs_class, dev)
    dev.trip_in = 2
    with pytest.raises(KeyboardInterrupt):
        f.write(bytes(64 << 10))
        f.sync()
    before = dev.ops
    with pytest.raises(KeyboardInterrupt):  # the cleanup a run does next cannot hide the interrupt
        f.close()
    with pytest.raises(KeyboardInterrupt):
        fs.unmount()
    assert dev.ops == before  # nothing more reached the device
    fs.crash()  # let go of the volume as a power cut would (FatFs in fatfs-ng holds one at a time)
    fresh = fs_class(MemoryDevice.of_size(8 << 20))  # another filesystem is not affected
    fresh.format()
    fresh.mount()
    fresh.unmount()


def test_a_device_error_under_fatfs_is_a_filesystem_error():
    """fatfs-ng leaves a callback's exception set: it surfaced as SystemError (an internal error, exit 3)."""
    dev = Tripping()
    fs, f = _with_open_file(FatFileSystem, dev)
    dev.trip_in, dev.exc = 1, BlockDeviceError("sector 77 failed")
    try:
        with pytest.raises(FileSystemError, match="write /a.bin: sector 77 failed"):
            f.write(bytes(64 << 10))
            f.sync()
    finally:
        fs.crash()


def _stop_a_run(argv: list[str], sig: int, cwd: object, sigint: object = signal.SIG_DFL,
                db: object = None) -> tuple[int, str]:
    """Start ``sdbench run ARGV`` (SIGINT's disposition ``sigint``; stored in ``db``, if given), send ``sig`` once
    the run is two seconds in; its exit code and stderr."""
    save = ["--db", str(db)] if db is not None else ["--no-save"]
    p = subprocess.Popen([*SDBENCH, "run", *argv, *save, "--no-range"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, cwd=cwd,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
    try:
        assert p.stderr is not None
        line = p.stderr.readline()  # "running ...": the stack is built, the run begins
        assert line.startswith("running "), line
        time.sleep(2.0)
        assert p.poll() is None, "the run ended before it could be stopped"
        t0 = time.monotonic()
        p.send_signal(sig)
        err = p.stderr.read()
        rc = p.wait(timeout=20)
        assert time.monotonic() - t0 < 10
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()
    assert "Traceback" not in err and "Exception ignored" not in err and "internal error" not in err, err
    return rc, err


@pytest.mark.parametrize("argv", [
    ["logger-sd-littlefs-pauses", "--set", "sd_littlefs.block_size=4194304"],   # minutes inside littlefs
    ["espidf-esp32-spiflash", "--set", 'espidf.parts=["flash_fatfs"]', "--set", "espidf.runs=1000"],  # FatFs on WL
], ids=["littlefs", "fatfs"])
def test_ctrl_c_stops_a_run_inside_the_filesystem_library(argv, tmp_path):
    """Issue 32, defect 4: Ctrl-C printed "Exception ignored in: 'littlefs.lfs._lfs_prog'" and the run went on
    (only SIGKILL ended it). SIGINT a run once it is inside the library: exit 130, no traceback."""
    rc, err = _stop_a_run(argv, signal.SIGINT, tmp_path)
    assert rc == 130, err
    assert err.rstrip().endswith("interrupted"), err  # one line says why the run stopped


@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"])
def test_sigterm_stops_a_run_as_ctrl_c_does(tmp_path, sigint):
    """timeout(1) and service managers send SIGTERM: the run stops through the Ctrl-C path (inside the
    filesystem library too), says so in one line and exits 143, instead of dying with its files left behind.
    Also where SIGINT is ignored (a background job of a shell script): raised inside a littlefs callback, the
    signal was printed as ignored and the run went on."""
    rc, err = _stop_a_run(["logger-sd-littlefs-pauses", "--set", "sd_littlefs.block_size=4194304"], signal.SIGTERM,
                          tmp_path, sigint)
    assert rc == 143, err
    assert err.rstrip().endswith("terminated (SIGTERM)"), err


@pytest.mark.parametrize("sig, why", [(signal.SIGINT, "interrupted"), (signal.SIGTERM, "terminated (SIGTERM)")])
def test_a_stopped_run_is_stored_saying_what_stopped_it(tmp_path, sig, why):
    db = tmp_path / "runs.db"
    rc, err = _stop_a_run(["logger-sd-littlefs-pauses", "--set", "sd_littlefs.block_size=4194304"], sig, tmp_path,
                          db=db)
    assert rc == (130 if sig == signal.SIGINT else 143), err
    listed = subprocess.run([*SDBENCH, "runs", "--db", str(db), "-f", "json"], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    (run,) = json.loads(listed.stdout)
    assert run["status"] == f"failed: {why}"


def test_a_process_forked_from_another_thread_still_defers_ctrl_c():
    # after a fork from a worker thread that thread is the child's main thread: the child's library calls must
    # defer a Ctrl-C as the parent's do
    import threading
    from sdbench.fs.interrupts import DeferredSigint
    read_end, write_end = os.pipe()

    def forker() -> None:
        pid = os.fork()
        if pid == 0:  # the child never returns into the test run, whatever happens
            try:
                # Python's own handler, as an interactive run has it (a runner started in the background by a
                # shell without job control inherits SIGINT ignored, and an ignored SIGINT stays ignored)
                signal.signal(signal.SIGINT, signal.default_int_handler)
                verdict = b"no KeyboardInterrupt"
                try:
                    with DeferredSigint() as d:
                        if d.previous is None:
                            verdict = b"not deferred"
                        else:
                            os.kill(os.getpid(), signal.SIGINT)
                except KeyboardInterrupt:
                    verdict = b"KeyboardInterrupt at exit"
                os.write(write_end, verdict)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)

    t = threading.Thread(target=forker)
    t.start()
    t.join()
    os.close(write_end)
    assert os.read(read_end, 100) == b"KeyboardInterrupt at exit"
    os.close(read_end)


def test_a_ctrl_c_while_the_commands_load_is_one_line(monkeypatch, capsys):
    """The console script imported the command line before any handling: a Ctrl-C in its first tenth of a
    second printed a traceback."""
    import types

    import sdbench.__main__ as start

    class Loading(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            raise KeyboardInterrupt  # as if the Ctrl-C came while the module was loading

    monkeypatch.setitem(sys.modules, "sdbench.cli", Loading("sdbench.cli"))
    with pytest.raises(SystemExit) as stop:
        start.entry()
    assert stop.value.code == 130 and capsys.readouterr().err == "interrupted\n"


def test_sigterm_inside_a_library_call_waits_for_it_to_return_whatever_sigint_is(monkeypatch):
    """The SIGTERM handler raised at once where SIGINT is ignored, also inside a littlefs or FatFs callback."""
    from sdbench.cli import _on_sigterm
    from sdbench.fs.interrupts import DeferredSigint, pending

    for disposition in (signal.SIG_IGN, signal.default_int_handler):
        previous = signal.signal(signal.SIGINT, disposition)
        try:
            with pytest.raises(KeyboardInterrupt):
                with DeferredSigint():
                    _on_sigterm(signal.SIGTERM, None)  # in a callback: no raise here ...
                    assert pending()                   # ... the callbacks fail at once instead
            assert not pending()                       # ... and the call's end raised it
            with pytest.raises(KeyboardInterrupt):     # outside a library call: at once
                _on_sigterm(signal.SIGTERM, None)
        finally:
            signal.signal(signal.SIGINT, previous)


def test_a_forked_process_keeps_sigterms_default():
    """Pool.terminate and the fio engine end their forked processes with SIGTERM: there it must end them, not
    take the parent's stop path."""
    from sdbench.cli import _catch_sigterm, _on_sigterm

    previous = _catch_sigterm()
    assert previous is not None and signal.getsignal(signal.SIGTERM) is _on_sigterm
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child never returns into the test run
            try:
                os.write(write_end, b"D" if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL else b"H")
            finally:
                os._exit(0)
        os.close(write_end)
        os.waitpid(pid, 0)
        assert os.read(read_end, 1) == b"D"
        os.close(read_end)
    finally:
        signal.signal(signal.SIGTERM, previous)
