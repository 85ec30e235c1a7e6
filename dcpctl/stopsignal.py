"""The stop signals each command owns from dcpctl's first line (see :mod:`dcpctl.start`), and their handler
until the command installs its own."""

from __future__ import annotations

import signal
from typing import Final

# The commands for which these signals are the normal way to stop, exit 0 (their man pages' EXIT STATUS);
# any other command's Ctrl-C is an interruption, exit 130, and its SIGTERM and SIGHUP keep their defaults.
CLEAN_STOPS: Final = {
    "stream": (signal.SIGINT, signal.SIGTERM, signal.SIGHUP),
    "serve": (signal.SIGINT, signal.SIGTERM),
    "capture": (signal.SIGINT, signal.SIGTERM, signal.SIGHUP),
}


def starting(_signum: int, _frame: object) -> None:
    """The handler from dcpctl's start until a command installs its own (and given back to when it is done)."""
    raise KeyboardInterrupt


def stop_signals(command: str) -> tuple[signal.Signals, ...]:
    """The signals ``command`` (a command line's first word) takes as its stop."""
    return CLEAN_STOPS.get(command, (signal.SIGINT,))
