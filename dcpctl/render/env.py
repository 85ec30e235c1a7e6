"""The one object that knows about the terminal: streams, TTY state, colour (replaced in tests)."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from dataclasses import dataclass, field
from typing import BinaryIO, TextIO, TypeVar

from rich.console import Console

from dcpctl.safetext import shown

Choice = TypeVar("Choice")


class OutputError(OSError):
    """Standard output cannot take what is written (a full disk, a closed or read-only descriptor). A
    closed pipe stays a :class:`BrokenPipeError`: the reader went away, which is not an error."""


class _StdoutFile(io.FileIO):
    """Descriptor 1, whose failed writes say they were standard output's. Under the usual buffered text
    stream, so every command's writes (text, bytes, rich) pass here and the top level reports them once."""

    discarding = False

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.discarding:
            return len(data)
        try:
            written: int = super().write(data)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(exc.errno, exc.strerror) from None
        return written


class _ClosedStdout(_StdoutFile):
    """Standard output that was closed when dcpctl started (``>&-``): every write fails as a write to a
    closed descriptor does. It holds descriptor 1 (on the null device) so no file opened later lands there."""

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.discarding:
            return len(data)
        raise OutputError(errno.EBADF, os.strerror(errno.EBADF))


class _Console(Console):
    """rich's console, but a closed pipe is left to the top level (rich's own answer is exit 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def checked_stdout() -> None:
    """Put standard output on :class:`_StdoutFile` (called once, as the process starts)."""
    old = sys.stdout
    try:
        os.fstat(1)
        raw: _StdoutFile = _StdoutFile(1, "wb", closefd=False)
    except OSError:  # closed: the null device takes descriptor 1 (the lowest free one) and keeps it
        raw = _ClosedStdout(os.open(os.devnull, os.O_RDONLY), "rb", closefd=False)
    if old is not None:
        old.flush()
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=getattr(old, "encoding", None) or "utf-8",
                                  errors=getattr(old, "errors", None) or "strict",
                                  line_buffering=bool(getattr(old, "line_buffering", False)))


def discard_stdout() -> None:
    """After standard output failed and that was said: what is still buffered goes nowhere, so the
    interpreter's last flush does not fail again."""
    stream = sys.stdout
    raw = getattr(getattr(stream, "buffer", None), "raw", None)
    if isinstance(raw, _StdoutFile):
        raw.discarding = True


@dataclass
class Environment:
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    stdin: BinaryIO = field(default_factory=lambda: sys.stdin.buffer)
    stdout_isatty: bool = field(default_factory=lambda: sys.stdout.isatty())  # noqa: PLW0108 - at creation
    stderr_isatty: bool = field(default_factory=lambda: sys.stderr.isatty())  # noqa: PLW0108 - at creation
    color: bool | None = None  # None: colour when writing to a terminal and NO_COLOR is unset
    width: int | None = None

    def stdin_isatty(self) -> bool:
        try:
            return self.stdin.isatty()
        except (AttributeError, ValueError, OSError):
            return False

    def use_color(self) -> bool:
        if self.color is not None:
            return self.color
        return self.stdout_isatty and not os.environ.get("NO_COLOR")

    def console(self) -> Console:
        return _Console(file=self.stdout, force_terminal=self.use_color(), no_color=not self.use_color(),
                       highlight=False, width=self.width or (None if self.stdout_isatty else 200),
                       soft_wrap=not self.stdout_isatty)

    def error_console(self) -> Console:
        color = self.stderr_isatty and not os.environ.get("NO_COLOR")
        # not a terminal (decode --summary -F json > out 2> summary.txt): as wide as stdout's, not rich's 80
        # columns, which cut every cell of the summary table
        return _Console(file=self.stderr, force_terminal=color, no_color=not color, highlight=False,
                       soft_wrap=True, width=self.width or (None if self.stderr_isatty else 200))

    def warn(self, message: str) -> None:
        """One line on standard error, ``dcpctl:`` first; a standard error that is gone stops nothing."""
        with contextlib.suppress(OSError):
            self.error_console().print(f"dcpctl: {shown(message)}", style="yellow", markup=False, highlight=False)

    def output_format(self, chosen: Choice | None, terminal: Choice, piped: Choice) -> Choice:
        """The format asked for; without one, ``terminal``'s (made to read) on a terminal and ``piped``'s
        (machine-readable) when piped, as kcat and httpie choose. Every command asks here."""
        if chosen is not None:
            return chosen
        return terminal if self.stdout_isatty else piped
