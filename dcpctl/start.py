"""The console script's first code: the stop signals are dcpctl's before anything heavy is imported.

Importing typer, rich and a command's modules takes about half a second. A signal in it found Python's
defaults: a KeyboardInterrupt traceback for Ctrl-C, and for SIGTERM and SIGHUP a kill (exit 143, 129), where
``stream``, ``serve`` and ``capture`` promise that their stop signals end them cleanly with exit 0. From the
first line a stop signal raises KeyboardInterrupt (:func:`dcpctl.stopsignal.starting`), which is reported in
one line with the command's exit code (here while importing, by the root command after). Each command then
takes the signals over with its own handlers; when it gives them back to this one the process is ending: a
clean stop's signals are then ignored, so a second one during the teardown cannot kill dcpctl after a
clean stop.
"""

from __future__ import annotations

import signal
import sys
from typing import NoReturn

from dcpctl.exitcode import ExitCode
from dcpctl.stopsignal import CLEAN_STOPS, starting, stop_signals


def run() -> NoReturn:
    """The console script: the stop signals owned, then the command line run."""
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    signals = stop_signals(command)
    for sig in signals:
        signal.signal(sig, starting)
    try:
        from dcpctl import cli  # noqa: PLC0415 - the heavy imports, once the signals are owned
    except KeyboardInterrupt:
        sys.stderr.write("dcpctl: interrupted while starting\n")
        sys.exit(ExitCode.OK if command in CLEAN_STOPS else ExitCode.INTERRUPTED)
    code = cli.launch()
    if command in CLEAN_STOPS:
        for sig in signals:  # done: a further signal changes nothing during the interpreter's teardown
            signal.signal(sig, signal.SIG_IGN)
    sys.exit(code)
