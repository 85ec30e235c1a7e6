"""Opening inputs: a path or ``-`` for standard input, with one-line errors; capture files named by paths and globs."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import re
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


def _numbered(name: str) -> tuple[tuple[str | int, ...], str]:
    """A name's sort key with its numbers compared as numbers: tcpdump -C names a ring cap, cap1 ... cap10."""
    return tuple(int(part) if odd else part for odd, part in zip(itertools.cycle((False, True)),
                                                                  re.split(r"(\d+)", name))), name


def expand(paths: list[str]) -> list[str]:
    """The files named, globs expanded (a name that exists is that file's, never a pattern), in the order of
    their first frames' times (``in_time_order``; equal times by name, numbers in names compared as numbers)."""
    out: list[str] = []
    for path in paths:
        # a file that exists is itself, whatever its name holds: cap[1].pcap is not a pattern for cap1.pcap
        pattern = any(c in path for c in "*?[") and not os.path.lexists(path)
        matches = sorted(glob.glob(path), key=_numbered) if pattern else [path]
        if not matches:
            raise CommandError(f"{path}: no file matches", ExitCode.INPUT)
        out.extend(matches)
    from dcpctl.sources.pcap import in_time_order  # noqa: PLC0415 - libpcap only for those reading captures

    return in_time_order(out)
