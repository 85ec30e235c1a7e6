"""A stop signal in dcpctl's first half second, while Python imports typer, rich and the command's modules,
and one in its last moments, after the command gave the signals back. Each process is the real entry point
(``python -m dcpctl``), sent a real signal by itself at a chosen import, so the signal lands where it is meant
to, every run."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dcpctl.commands.stream import _StopSignals
from dcpctl.exitcode import ExitCode
from dcpctl.stopsignal import CLEAN_STOPS, starting

SAMPLE = str(Path(__file__).resolve().parent.parent / "samples" / "dcp-session.pcap")

# Runs ``python -m dcpctl ARGS`` with an import hook that sends this process SIGNAL as module MODULE begins to
# be imported: argv is MODULE SIGNAL ARGS...
SIGNALLED_AT_IMPORT = """
import os, runpy, signal, sys
module, number = sys.argv[1], int(sys.argv[2])
sys.argv = ["dcpctl", *sys.argv[3:]]
class Hook:
    def find_spec(self, name, path=None, target=None):
        if name == module:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), number)
        return None
sys.meta_path.insert(0, Hook())
runpy.run_module("dcpctl", run_name="__main__", alter_sys=True)
"""


def signalled(module: str, sig: signal.Signals, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", SIGNALLED_AT_IMPORT, module, str(int(sig)), *args],
                          check=False, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DCPCTL_PASSWORD": "password"})


@contextmanager
def silent_server() -> Iterator[int]:
    """A port on loopback that accepts connections and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield listener.getsockname()[1]


@pytest.mark.parametrize("module", ["typer", "rich"])
def test_ctrl_c_while_importing_is_one_line_and_exit_130(module: str) -> None:
    done = signalled(module, signal.SIGINT, "decode", SAMPLE)
    assert done.returncode == ExitCode.INTERRUPTED, done.stderr
    assert done.stderr == "dcpctl: interrupted while starting\n"
    assert done.stdout == ""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_while_stream_imports_stops_it_cleanly(sig: signal.Signals) -> None:
    """Exit 0, as for every stream stop; before, SIGTERM and SIGHUP killed it (143, 129) and Ctrl-C was a
    KeyboardInterrupt traceback (exit 1)."""
    with silent_server() as port:
        done = signalled("typer", sig, "stream", f"127.0.0.1:{port}", "--timeout", "5")
    assert done.returncode == ExitCode.OK, done.stderr
    assert done.stderr == "dcpctl: interrupted while starting\n"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize(("module", "told"), [
    ("typer", "dcpctl: interrupted while starting\n"),  # the root command's imports
    ("dcpctl.producer", "dcpctl: interrupted\n"),  # serve's own, which the root command reports
])
def test_a_stop_signal_while_serve_imports_stops_it_cleanly(sig: signal.Signals, module: str, told: str) -> None:
    done = signalled(module, sig, "serve", "--port", "0")
    assert done.returncode == ExitCode.OK, done.stderr
    assert done.stderr == told


def test_a_stop_signal_before_streams_handlers_are_installed_is_exit_0() -> None:
    """After the root command's imports, while the command's module is imported (its handlers not yet
    installed): the root command reports it, with stream's exit status for a stop."""
    with silent_server() as port:
        done = signalled("dcpctl.commands.stream", signal.SIGTERM, "stream", f"127.0.0.1:{port}")
    assert done.returncode == ExitCode.OK, done.stderr
    assert done.stderr == "dcpctl: interrupted\n"


def test_other_commands_keep_sigterm_as_the_system_default() -> None:
    """Only a command whose man page makes SIGTERM a clean stop owns it: decode is killed, as any filter is."""
    done = signalled("typer", signal.SIGTERM, "decode", SAMPLE)
    assert done.returncode == -signal.SIGTERM


def test_streams_signals_stay_ignored_once_it_gives_them_back() -> None:
    """In the console script's process the handler stream gives the signals back to is dcpctl.start's: the
    process is ending, so they stay ignored (a signal then found Python's default for a moment: a kill after
    a clean stop). Anywhere else (a test's process) the handlers before stream's are put back."""
    before = {sig: signal.getsignal(sig) for sig in CLEAN_STOPS["stream"]}
    try:
        for sig in CLEAN_STOPS["stream"]:
            signal.signal(sig, starting)
        with _StopSignals(lambda _sig: None, lambda: False).installed():
            assert signal.getsignal(signal.SIGTERM) is not starting
        assert all(signal.getsignal(sig) == signal.SIG_IGN for sig in CLEAN_STOPS["stream"])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with _StopSignals(lambda _sig: None, lambda: False).installed():
            pass
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
