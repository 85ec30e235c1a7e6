"""Opening inputs: a path or ``-`` for standard input, with one-line errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from dcpctl.exitcode import CommandError, ExitCode


@contextlib.contextmanager
def open_input(path: str, stdin: BinaryIO) -> Iterator[BinaryIO]:
    if path == "-":
        yield stdin
        return
    p = Path(path)
    try:
        handle = p.open("rb")
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file", ExitCode.INPUT) from None
    except IsADirectoryError:
        raise CommandError(f"{path}: is a directory", ExitCode.INPUT) from None
    except PermissionError:
        raise CommandError(f"{path}: permission denied", ExitCode.INPUT) from None
    with handle:
        yield handle
