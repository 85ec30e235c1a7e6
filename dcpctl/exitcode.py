"""Exit codes: one table, documented in dcpctl(1)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0  # done; diagnostics, if any, were reported
    FAILURE = 1  # an unexpected internal error (a bug: please report it)
    USAGE = 2  # bad command line
    INPUT = 3  # input missing, unreadable or not in any supported form
    DIAGNOSTICS = 4  # --strict and a message had an error-severity diagnostic or bytes were skipped
    CONNECTION = 5  # the server could not be reached or dropped the connection
    TIMEOUT = 6  # the server did not answer in time
    AUTH = 7  # authentication or authorisation failed
    PROTOCOL = 8  # the server answered with an error the command cannot go on from
    ROLLBACK = 9  # a rollback was required and --on-rollback fail was given
    INTERRUPTED = 130  # Ctrl-C


class CommandError(Exception):
    """A one-line error for the user, with the exit code to leave with."""

    def __init__(self, message: str, code: ExitCode = ExitCode.INPUT) -> None:
        super().__init__(message)
        self.code = code
