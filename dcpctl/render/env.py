"""The one object that knows about the terminal: streams, TTY state, colour (replaced in tests)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import BinaryIO, TextIO

from rich.console import Console


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
        return Console(file=self.stdout, force_terminal=self.use_color(), no_color=not self.use_color(),
                       highlight=False, width=self.width or (None if self.stdout_isatty else 200),
                       soft_wrap=not self.stdout_isatty)

    def error_console(self) -> Console:
        color = self.stderr_isatty and not os.environ.get("NO_COLOR")
        return Console(file=self.stderr, force_terminal=color, no_color=not color, highlight=False,
                       soft_wrap=True)

    def default_format(self) -> str:
        """pretty on a terminal, JSON lines when piped (kcat, httpie)."""
        return "pretty" if self.stdout_isatty else "jsonl"
