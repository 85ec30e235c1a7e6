"""Compressed capture files (gzip, bzip2, xz; zstd and lz4 through their programs), read as libpcap reads any
file: through a pipe that a child process fills with the decompressed bytes; and written (redact's output)
through a child that compresses.

A thread cannot fill the pipe: pcapy holds the interpreter's lock while libpcap waits on it. The child reads
the file from the descriptor this process opened (so a missing or unreadable file is this process's error,
said as for any capture), and says on its standard error why the data does not decompress. Compressing in a
child likewise takes the work to the other core.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import shutil
import signal
import stat
import subprocess
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO, Final, cast

# Each format's magic number, and the standard library module that reads it.
FORMATS: Final = {"gzip": (b"\x1f\x8b", "gzip"), "bzip2": (b"BZh", "bz2"), "xz": (b"\xfd7zXZ\x00", "lzma")}
# Formats Wireshark reads that the standard library does not, by magic number: read by their own programs
# (``zstd -dcq``, ``lz4 -dcq``: they check the data's checksums and say where it stops short), when installed.
PROGRAMS: Final = {"zstd": b"\x28\xb5\x2f\xfd", "lz4": b"\x04\x22\x4d\x18"}
_CHUNK: Final = 1 << 20
# The child: the named module's reader over standard input, or the named program's output, copied to standard
# output. A reader that went away (a decode stopped by --count) is no error: the child leaves at once, its
# buffer unflushed (a program then stops at its next write). A damaged stream is said in one line, exit status
# 1: a program's own words, from its exit. read1: what decompressed before a damage is written first.
_CHILD: Final = f"""
import importlib, os, subprocess, sys
kind, name = sys.argv[1:3]
try:
    if kind == "module":
        program, data = None, importlib.import_module(name).open(sys.stdin.buffer, "rb")
    else:
        program = subprocess.Popen([name, "-d", "-c", "-q"], stdin=sys.stdin.buffer, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        data = program.stdout
    with data:
        read, write = data.read1, sys.stdout.buffer.write
        while chunk := read({_CHUNK}):
            write(chunk)
    sys.stdout.flush()
    if program is not None and program.wait():
        words = " ".join(program.stderr.read().decode(errors="replace").split()).removeprefix("/*stdin*\\\\ : ")
        raise ValueError(words or f"exit status {{program.returncode}}")
except (BrokenPipeError, KeyboardInterrupt):
    os._exit(0)
except Exception as exc:
    sys.stderr.write(str(exc) or type(exc).__name__)
    sys.exit(1)
"""
_DAMAGED: Final = 1  # the child's exit status for data that does not decompress
# The compressing child: standard input to standard output. A gzip header names no file and no time (the
# temporary file's name and the hour of the redaction are nobody's business).
_COMPRESS: Final = f"""
import importlib, os, sys
name, out = sys.argv[1], sys.stdout.buffer
try:
    module = importlib.import_module(name)
    with (module.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) if name == "gzip"
          else module.open(out, "wb")) as data:
        read, write = sys.stdin.buffer.read1, data.write
        while chunk := read({_CHUNK}):
            write(chunk)
    out.flush()
except KeyboardInterrupt:
    os._exit(1)
except OSError as exc:
    sys.stderr.write(exc.strerror or str(exc))
    sys.exit(1)
"""
# Output names whose suffix asks for a compressed file.
SUFFIXES: Final = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd", ".lz4": "lz4"}
_REASON_LIMIT: Final = 200  # characters of the child's reason kept for the message
_GRACE: Final = 5.0  # seconds a child whose output has ended may take to exit
_EARLY_GRACE: Final = 0.2  # the same, when libpcap stopped before the end (a damage makes the child exit at once)


def streamed(path: str) -> bool:
    """Whether ``path`` can be read only once, front to back: ``-`` (standard input), or a pipe, socket or
    terminal named by a path (``<(ssh node cat cap.pcap)``, a FIFO tcpdump writes to). A look at its first
    bytes would take them from its reader, so it is read as standard input is: never looked at before (not
    decompressed, its snap length not read ahead), by one process, the files given with it in their order."""
    if path == "-":
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:  # the reader says why
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISBLK(mode))


def compression(path: str) -> str | None:
    """The compression format of the file at ``path`` from its first bytes (None: not compressed, a
    :func:`streamed` file, or one that cannot be read here: the capture reader says why). Raises ValueError
    for a format not read here."""
    if streamed(path):
        return None
    try:
        with Path(path).open("rb") as stream:
            head = stream.read(6)
    except OSError:
        return None
    for name, magic in PROGRAMS.items():
        if head.startswith(magic):
            why = missing_program(name)
            if why is not None:
                raise ValueError(f"{why}, or decompress it first ({name} -dc FILE | dcpctl ... -)")
            return name
    return next((name for name, (magic, _) in FORMATS.items() if head.startswith(magic)), None)


def missing_program(name: str) -> str | None:
    """Why a file of format ``name`` cannot be read or written here (its program is not installed), or None."""
    if name in PROGRAMS and shutil.which(name) is None:
        return f"compressed with {name}: that needs the {name} program (Debian: apt-get install {name})"
    return None


def compressed(path: str) -> bool:
    """Whether the file at ``path`` is compressed (in any format, read here or not)."""
    try:
        return compression(path) is not None
    except ValueError:
        return True


class Decompressed:
    """The decompressed bytes of a file, as a path libpcap opens (``/dev/fd/N`` of the pipe), until
    :meth:`close`. :meth:`failure` says why the child stopped short, once it has stopped."""

    def __init__(self, path: str, name: str) -> None:
        reader = ["module", FORMATS[name][1]] if name in FORMATS else ["program", shutil.which(name) or name]
        self.name = name
        with Path(path).open("rb") as source:
            # S603: this interpreter, dcpctl's own code; the file goes in as a descriptor, not as an argument
            self._child = subprocess.Popen([sys.executable, "-I", "-S", "-c", _CHILD, *reader], stdin=source,  # noqa: S603
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self._child.stdout is not None
        self._out: IO[bytes] = self._child.stdout
        self.path = f"/dev/fd/{self._out.fileno()}"
        self._closed = weakref.finalize(self, _stop, self._child)

    def failure(self, *, early: bool = False) -> str | None:
        """Why the data did not decompress whole, once libpcap has stopped reading (None: it did, or the
        child was still writing: libpcap stopped at a record it cannot read, which is its own to tell). At
        the pipe's end the child has exited or is exiting; ``early`` (libpcap stopped before the end), it
        may be blocked writing, and is stopped."""
        self._out.close()
        try:
            code = self._child.wait(timeout=_EARLY_GRACE if early else _GRACE)
        except subprocess.TimeoutExpired:  # blocked on the pipe, which libpcap still holds open
            self.close()
            return None
        if code == 0:
            return None
        if code != _DAMAGED:
            return f"the {self.name} decompressor stopped (exit status {code})"
        assert self._child.stderr is not None
        reason = self._child.stderr.read(_REASON_LIMIT * 4).decode(errors="replace").strip()[:_REASON_LIMIT]
        return f"the {self.name} data is damaged ({reason})"

    def readinto(self, buffer: Any) -> int:
        """The next decompressed bytes, read by this process (0: their end)."""
        return cast(io.BufferedReader, self._out).readinto(buffer)  # Popen's stdout pipe, buffered

    def close(self) -> None:
        self._closed()


class DamagedDataError(OSError):
    """Decompressed data that stopped short: its text is the whole reason, the format named."""


class _Pipe(io.RawIOBase):
    """A :class:`Decompressed` file's bytes as a stream read in this process; at their end, a damage raises
    DamagedDataError with its reason (an OSError, as the reader of a stdlib module's file raises)."""

    def __init__(self, data: Decompressed) -> None:
        self._data = data

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self._data.readinto(buffer)
        if not count:
            why = self._data.failure()
            if why is not None:
                raise DamagedDataError(why)
        return count

    def close(self) -> None:
        if not self.closed:
            self._data.close()
        super().close()


def opened(path: str, name: str) -> BinaryIO:
    """The decompressed bytes of the file at ``path`` (format ``name``) as a stream read in this process."""
    if name in FORMATS:
        return cast(BinaryIO, importlib.import_module(FORMATS[name][1]).open(path, "rb"))
    return cast(BinaryIO, io.BufferedReader(_Pipe(Decompressed(path, name)), _CHUNK))


class CompressionError(OSError):
    """The compressing child could not write the file (its reason, as an OSError's strerror)."""


@contextlib.contextmanager
def compressing(target: BinaryIO, name: str) -> Iterator[BinaryIO]:
    """A stream whose bytes reach ``target`` compressed in format ``name``, by a child process; complete
    when the block ends without an error (raises CompressionError when the child could not write)."""
    writer = ([sys.executable, "-I", "-S", "-c", _COMPRESS, FORMATS[name][1]] if name in FORMATS
              else [shutil.which(name) or name, "-c", "-q"])  # zstd and lz4: their checksums on, as by default
    # S603: this interpreter and dcpctl's own code, or a compressor found on PATH; the output goes in as a
    # descriptor
    child = subprocess.Popen(writer, stdin=subprocess.PIPE, stdout=target, stderr=subprocess.PIPE)  # noqa: S603
    assert child.stdin is not None
    cut = False  # the child stopped reading before the end (a full disk): its reason is the error
    try:
        yield cast(BinaryIO, child.stdin)
        child.stdin.close()
    except BrokenPipeError:
        cut = True
    except BaseException:
        _stop(child)
        raise
    code = child.wait()
    assert child.stderr is not None
    reason = child.stderr.read(_REASON_LIMIT * 4).decode(errors="replace").strip()[:_REASON_LIMIT]
    _stop(child)
    if code or cut:
        stopped = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
        raise CompressionError(0, reason or f"the {name} compressor stopped ({stopped})")


def _stop(child: subprocess.Popen[bytes]) -> None:
    """The child stopped (it may still be writing to a reader that is gone) and its pipes closed."""
    if child.poll() is None:
        child.terminate()
    child.wait()
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):  # what a gone child did not read is not wanted
                stream.close()
