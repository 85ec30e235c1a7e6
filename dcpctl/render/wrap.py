"""A line of text with a hanging indent: what wraps continues under the line's first column, not at column 0."""

from __future__ import annotations

from typing import Final

from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.text import Text

# Narrower than this, indenting the continuation leaves too little room to read: wrap at this width instead
# (and let the terminal fold it), as a hanging indent on a 30-column pane would hold a word a line.
MIN_WRAP_WIDTH: Final = 20


class Hanging:
    """``text`` printed ``indent`` columns in; on a console that wraps (a terminal), every wrapped line
    continues ``hang`` columns in. Where the console does not wrap (piped: soft wrap), the line is one
    line, however long, as a program reading it expects."""

    def __init__(self, text: Text, *, indent: int = 0, hang: int | None = None) -> None:
        self.text = text
        self.indent = indent
        self.hang = indent if hang is None else hang

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        # segments, not Text: a Text yielded here would be wrapped a second time (append_text keeps a
        # line's own base style as a span, which render would otherwise drop)
        if options.no_wrap:
            yield from Text(" " * self.indent).append_text(self.text).render(console, end="")
            yield Segment.line()
            return
        width = max(options.max_width - max(self.indent, self.hang), MIN_WRAP_WIDTH)
        for number, line in enumerate(self.text.wrap(console, width)):
            line.rstrip()  # the space a line broke at
            yield from Text(" " * (self.hang if number else self.indent)).append_text(line).render(console, end="")
            yield Segment.line()
