"""A progress bar on standard error for commands that read big captures (decode, redact): advanced by the
bytes of each frame read, shown only where someone is watching."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

from dcpctl.render.env import Environment

# Captures smaller than this are read in a moment; a bar would only flicker.
PROGRESS_MIN_BYTES: Final = 32 * 1024 * 1024
# What a classic pcap record header adds to a frame's bytes
_RECORD_HEADER: Final = 16
_STEP: Final = 1 << 20  # bytes read between two moves of the bar


class FileProgress:
    """A progress bar on standard error, advanced by the bytes of each frame read (record header included)."""

    def __init__(self, env: Environment, total: int | None, action: str) -> None:
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                            console=env.error_console(), transient=True)
        self.task = self.bar.add_task(action, total=total)

    def start_file(self, path: str) -> None:
        self.bar.update(self.task, description=os.path.basename(path))

    def advance(self, nbytes: int) -> None:
        self.bar.advance(self.task, nbytes)

    def tap(self, path: str) -> Callable[[float, bytes, int], None]:
        """A frame tap (as the capture readers take) that advances the bar over ``path``."""
        self.start_file(path)
        pending = 0

        def advance(_ts: float, data: bytes, _wire: int) -> None:
            nonlocal pending
            pending += len(data) + _RECORD_HEADER
            if pending >= _STEP:  # the bar moves by the step: a call per frame would cost more than the bar
                self.bar.advance(self.task, pending)
                pending = 0

        return advance

    def __enter__(self) -> FileProgress:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()


def file_progress(env: Environment, paths: list[str], action: str, *, sized: bool = True) -> FileProgress | None:
    """A bar over ``paths`` when standard error is a terminal and the files are big enough to be worth one;
    never for standard input (its size is unknown). ``sized``: the bytes read add up to the files' sizes
    (not so for compressed files: their bar has no end, and shows the bytes read)."""
    if not env.stderr_isatty or "-" in paths:
        return None
    total = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
    return FileProgress(env, total if sized else None, action) if total >= PROGRESS_MIN_BYTES else None
