"""Printing a rich table whole.

rich fits a table to the terminal by cutting cells (a seqno range ``201-203`` shows as ``201…``, a time as
``0.0…``), which reads as another number, and it may cut a column below its longest word even when the
table would fit. So each column here is given at least its longest word and the terminal's other columns in
proportion to what its text would still take; text of several words wraps in its cell (headers too, but
never inside a word). Where that does not fit, the table is printed at its least width: the terminal wraps it
and ``less -S`` scrolls it, as psql prints a wide result.
"""

from __future__ import annotations

from typing import Final

from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table

_UNBOUNDED: Final = 1 << 16  # wide enough to measure anything unclamped


def print_table(console: Console, table: Table) -> None:
    options = console.options.update_width(_UNBOUNDED)
    widths = [_widths(console, column) for column in table.columns]
    most = [high for _, high in widths]
    overhead = Measurement.get(console, options, table).maximum - sum(most)
    room = console.width - overhead
    if sum(most) <= room:
        console.print(table)
        return
    least = [low for low, _ in widths]
    room = max(room, sum(least))
    wants = [high - low for low, high in zip(least, most, strict=True)]
    spare = room - sum(least)
    given = [low + spare * want // max(1, sum(wants)) for low, want in zip(least, wants, strict=True)]
    for index in sorted(range(len(given)), key=lambda i: -wants[i])[:room - sum(given)]:
        given[index] += 1  # what rounding down left, to the columns that want the most
    for column, share in zip(table.columns, given, strict=True):
        column.width = share
    terminal = console.width
    console.width = room + overhead
    try:
        console.print(table)
    finally:
        console.width = terminal


def _widths(console: Console, column: Column) -> tuple[int, int]:
    """The least width of a column's text (its longest word, the header's included) and the most (its longest
    line), padding apart."""
    options = console.options.update_width(_UNBOUNDED)
    found = [Measurement.get(console, options, console.render_str(cell) if isinstance(cell, str) else cell)
             for cell in (column.header, *column.cells)]
    return max(m.minimum for m in found), max(m.maximum for m in found)
