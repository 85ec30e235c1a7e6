"""A frame's capture time, kept to the nanosecond where the file gives it so."""

from __future__ import annotations

from typing import Final

NANOS: Final = 1_000_000_000


class FrameTime(float):
    """Seconds since the epoch, as the float every reader of a time takes, that also keeps the exact time the
    file gave, ``nanos``: a float of today's times resolves about a quarter of a microsecond, so a copy of a
    nanosecond capture (redact's) writes this instead."""

    __slots__ = ("nanos",)
    nanos: int

    def __new__(cls, nanos: int) -> FrameTime:
        made = super().__new__(cls, nanos / NANOS)  # an int's true division by an int is correctly rounded
        made.nanos = nanos
        return made
