"""Opening inputs: a path or ``-`` for standard input, with one-line errors; capture files named by paths and globs."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
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


def expand(paths: list[str], twice: Callable[[str], None] | None = None) -> list[str]:
    """The files named, globs expanded (a name that exists is that file's, never a pattern), in the order of
    their first frames' times (``in_time_order``; equal times by name, numbers in names compared as numbers).
    A file named twice (overlapping globs, a link) is read once: its second copy would only repeat every
    message, as a second connection; ``twice`` is told which name was left out."""
    out: list[str] = []
    seen: dict[tuple[int, int], str] = {}
    for path in paths:
        # a file that exists is itself, whatever its name holds: cap[1].pcap is not a pattern for cap1.pcap
        pattern = any(c in path for c in "*?[") and not os.path.lexists(path)
        matches = sorted(glob.glob(path), key=_numbered) if pattern else [path]
        if not matches:
            raise CommandError(f"{path}: no file matches", ExitCode.INPUT)
        for match in matches:
            identity = _identity(match)
            first = seen.get(identity) if identity is not None else None
            if first is None:
                if identity is not None:
                    seen[identity] = match
                out.append(match)
            elif twice is not None:
                twice(f"{match}: the same file as {first}, read once" if match != first
                      else f"{match}: named twice, read once")
    from dcpctl.sources.pcap import in_time_order  # noqa: PLC0415 - libpcap only for those reading captures

    return in_time_order(out)


def _identity(path: str) -> tuple[int, int] | None:
    """A regular file's device and inode, which two names of one file share; None for standard input, a
    pipe or what cannot be looked at (read as named, its error said by its reader)."""
    if path == "-":
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISREG(found.st_mode) else None


def unreadable(failures: list[tuple[str, str]], rest: Sequence[str] = ()) -> CommandError:
    """The error a read of capture files ends with: each file of ``failures`` (path, reason) and of ``rest``
    (the files not read yet) that does not open either, so that one run names every file to mend."""
    from dcpctl.sources.pcap import open_error  # noqa: PLC0415 - libpcap only for those reading captures

    found = [*failures, *((path, why) for path in rest if (why := open_error(path)) is not None)]
    named = "; ".join(f"{path}: {why}" for path, why in found)
    return CommandError(named if len(found) == 1 else f"{len(found)} files cannot be read: {named}", ExitCode.INPUT)


def after(paths: list[str], path: str) -> list[str]:
    """The files of ``paths`` after ``path`` (those a read that stopped at it did not reach)."""
    return paths[paths.index(path) + 1:] if path in paths else []
