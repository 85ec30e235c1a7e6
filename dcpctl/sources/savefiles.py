"""The live commands' capture files: one pcap file, or with a size a ring of them, as tcpdump writes them.

``capture -w`` and ``stream --write`` both save with :class:`Savefiles`. With ``-C`` a new file is begun
once the current one would pass the size (each file a whole pcap, a record never spans two), named as
tcpdump names them: FILE, FILE1, FILE2 ...; with ``-W`` as well, FILE0 ... FILE<N-1>, the oldest
overwritten. With ``-G`` a new file is begun every so many seconds, FILE a strftime format.
``dcpctl decode FILE*`` reads such files as the one capture they were cut from.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Final, Protocol, cast

from dcpctl.sources.pcapwriter import LINKTYPE_ETHERNET, PcapWriter

_FILE_HEADER: Final = 24  # a pcap file's global header
_RECORD_HEADER: Final = 16  # and each record's


class Sink(Protocol):
    """Where one file's bytes go: a file object, or :class:`WholeRecords`."""

    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class WholeRecords:
    """A file written unbuffered: each record the pcap writer writes goes out whole, or the writing fails.
    Then the file is cut back to its last whole record (a reader never sees half a frame) and the error
    raised. For ``capture -w``, whose file must read whole at every moment of a capture left running."""

    def __init__(self, path: Path) -> None:
        self.file = path.open("wb", buffering=0)
        self.whole = 0  # bytes of whole records (and the file header) written

    def write(self, data: bytes, /) -> int:
        view = memoryview(data)
        try:
            while view:
                written = self.file.write(view)  # a full disk or a file size limit may take part of it
                view = view[written or 0:]
        except OSError:
            with contextlib.suppress(OSError):
                self.file.truncate(self.whole)
            raise
        self.whole += len(data)
        return len(data)

    def flush(self) -> None:
        """Nothing is held: every write went out."""

    def close(self) -> None:
        with contextlib.suppress(OSError):  # an unbuffered file has nothing left to write: closing cannot lose data
            self.file.close()


def buffered(path: Path) -> Sink:
    """A file written through Python's buffer, flushed by its command (``stream --write``)."""
    return path.open("wb")


class Savefiles(PcapWriter):
    """``-w FILE``, or with ``size`` (bytes) the files one after the other; with ``count`` as well, a ring of
    that many. With ``seconds``, a new file once a frame comes that many seconds after the current file was
    begun, named by ``time.strftime`` of FILE at that moment, in local time, as tcpdump -G names them (with
    ``size`` too, numbered within each). A failure to write or to open the next file is kept in ``error``
    and raised; ``records`` and ``name`` are then the file that holds the frames saved before it. ``now``:
    the time the first file is begun (the capture's clock; the wall clock by default)."""

    def __init__(self, path: Path, linktype: int = LINKTYPE_ETHERNET, size: int | None = None,
                 count: int | None = None, opener: Callable[[Path], Sink] = WholeRecords,
                 seconds: float | None = None, now: float | None = None) -> None:
        self.path, self.size, self.count, self.opener, self.seconds = path, size, count, opener, seconds
        self.begun_at = time.time() if now is None else now
        self.base = self._base(self.begun_at)
        self.number = 0
        self.error: OSError | None = None
        # the files begun, oldest first (of a ring, those it holds: a capture may run for weeks)
        self.begun: deque[Path] = deque([self._named(0)], maxlen=count)
        self.used = set(self.begun) if seconds is not None else set()  # -G: names never written twice
        self.file = opener(self.begun[0])
        try:
            super().__init__(cast(BinaryIO, self.file), linktype)
        except OSError as exc:
            self.error = exc
            self.file.close()
            raise
        self.bytes, self.records = _FILE_HEADER, 0

    def _base(self, ts: float) -> Path:
        return self.path if self.seconds is None else Path(time.strftime(str(self.path), time.localtime(ts)))

    def _named(self, number: int, base: Path | None = None) -> Path:
        base = self.base if base is None else base
        if self.count is not None:
            return Path(f"{base}{number % self.count:0{len(str(self.count - 1))}d}")
        return base if number == 0 else Path(f"{base}{number}")

    @property
    def name(self) -> Path:
        """The file being written."""
        return self.begun[-1]

    @property
    def names(self) -> list[Path]:
        """Every file written, in the order they were begun (with ``count``, those the ring still holds)."""
        return list(self.begun)

    def write(self, ts: float, frame: bytes, wire_length: int | None = None, linktype: int | None = None) -> None:
        record = _RECORD_HEADER + min(len(frame), self.snaplen)
        try:
            if self.seconds is not None and ts >= self.begun_at + self.seconds:
                self._next(ts)
            elif self.size is not None and self.records > 0 and self.bytes + record > self.size:
                self._next()
            super().write(ts, frame, wire_length, linktype)
        except OSError as exc:
            self.error = exc
            raise
        self.bytes += record
        self.records += 1

    def _next(self, ts: float | None = None) -> None:
        """The next file (``ts``: the next time slice's, begun at ``ts``), opened (its header written) before
        the current one is closed: a failure leaves the current file whole and named as the one holding the
        last frames. With ``seconds``, a name this run has written already (a time format coarser than the
        interval) is numbered on, never written over."""
        base = self.base if ts is None else self._base(ts)
        number = self.number + 1 if base == self.base else 0
        while self.seconds is not None and self._named(number, base) in self.used:
            number += 1
        following = self.opener(self._named(number, base))
        try:
            following.write(self._file_header())
            self.file.close()  # a buffered file's last records go out here, and may fail to
        except OSError:
            with contextlib.suppress(OSError):
                following.close()
            raise
        self.file, self.stream = following, cast(BinaryIO, following)
        self.base, self.number = base, number
        self.begun.append(self._named(number))
        if self.seconds is not None:
            self.used.add(self.begun[-1])
        if ts is not None:
            self.begun_at = ts
        self.bytes, self.records = _FILE_HEADER, 0

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> Savefiles:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):  # the command reports a failure it saw; one at closing it cannot
            self.close()
