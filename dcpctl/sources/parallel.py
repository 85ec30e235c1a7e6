"""Decoding captures on two cores: the stateful half in a child process, the records in this one.

Theory of operation. Everything that needs the capture's order and state (reading frames, TCP reassembly,
framing, decoding enough to follow each connection's negotiation and streams) runs once, in a forked
child, as :class:`CaptureDecoder` with ``defer``: each message comes out as plain data (its bytes, the
options it was decoded with, and what the tracker found). The child sends them in batches over a pipe
(``marshal``: plain data only, nothing executable crosses). This process decodes each message again from
its bytes (the decoder is a pure function of bytes and options) and annotates it with
:func:`finish_message`, the serial path's own function, so both paths give identical items in identical
order; only the work is split: the record and its JSON, the costlier half, run here, next to the writer.

With ``lines`` (every message printed as its JSON line, unfiltered), plain stream items skip the record
altogether: the child hands the decoder's item sink runs of them (:class:`_Runs`: the bytes of items back
to back, each one's stream vbucket, its capture time and frames), and this process walks each run again
with the compiled readers of ``plain_item_at`` (``itemreader``) and writes the lines from templates
(``render.lines.plain_item_lines``, given by the command), byte for byte the records' lines (a test holds them equal).

The child never writes to standard output. Errors reading a file travel as items and are raised here as
the serial path raises them. When this side stops early (``--count``, a closed pipe, Ctrl-C), the child is
terminated and reaped; a child that dies without its end marker is reported with its exit status or
signal, never silently truncated. A bug in decoding (an exception in the child) ends the child after it
sends what it decoded before it and the exception in one line, raised here as :class:`ChildError` after
those items: the serial path's output, and its cause.
"""

from __future__ import annotations

import contextlib
import marshal
import multiprocessing
import os
import signal
import traceback
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection
from typing import Any, Final

from dcpctl.dcp.session import ConnectionTracker
from dcpctl.protocol.diagnostic import Diagnostic
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, HEADER_LENGTH, Skipped
from dcpctl.protocol.itemreader import ItemReaders
from dcpctl.protocol.message import DecodeOptions, PlainItem, decode
from dcpctl.sources.capture import CaptureDecoder, Item, ItemSink, finish_message
from dcpctl.sources.pcap import CaptureError, read_segments
from dcpctl.sources.tcp import DEFAULT_MAX_CONNECTIONS

BATCH: Final = 2048  # items per pipe message: large enough to amortise, small enough to stream

# item tags (first element of every non-message tuple; messages are the untagged 10-tuples)
_SKIPPED, _NOTICE, _FILE, _PROGRESS, _ERROR, _DONE, _RUN, _CRASH = range(8)
RUNS_BATCH: Final = 1 << 20  # bytes of item runs per pipe message (``lines``)
# A plain item's JSON line (``render.lines.LineMaker``): the reading, its stream offset, ts, frames, stream
# vbucket, the options it was read with and the buffer it was read from.
LineMaker = Callable[[PlainItem, int, float, list[int], int | None, DecodeOptions, bytes], bytes]


class ChildError(Exception):
    """The decoding process ended without finishing (killed, out of memory, or a bug)."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _produce(pipe: Connection, paths: list[str], options: DecodeOptions, ports: frozenset[int],
             max_body_length: int, lines: bool, max_connections: int) -> None:
    batch: list[Any] = []
    send = pipe.send_bytes
    dumps = marshal.dumps
    read = 0

    def tap(_ts: float, data: bytes, _wire: int) -> None:
        nonlocal read
        read += len(data) + 16

    try:
        for path in paths:
            batch.append((_FILE, path))
            plain = _Runs() if lines else None
            decoder = CaptureDecoder(options, ports, max_body_length, defer=True,
                                     items=plain.sink if plain is not None else None, max_connections=max_connections)
            try:
                for segment in read_segments(path, ports, tap=tap):
                    events = decoder.feed(segment)
                    batch.extend(map(_plain, events if plain is None else plain.between(events)))
                    if len(batch) >= BATCH or (plain is not None and plain.written >= RUNS_BATCH):
                        batch.append((_PROGRESS, read))
                        read = 0
                        send(dumps(batch))
                        batch = []
                        if plain is not None:
                            plain.written = 0
                events = decoder.finish()
                batch.extend(map(_plain, events if plain is None else plain.between(events)))
            except (CaptureError, FileNotFoundError) as exc:
                batch.append((_ERROR, path, str(exc), isinstance(exc, FileNotFoundError)))
                send(dumps(batch))
                return
            except Exception as exc:  # noqa: BLE001 - any bug: reported whole to the other side, never lost
                # a bug in decoding: what was decoded before it goes out first, as --jobs 1 prints it
                if plain is not None:
                    batch.extend(plain.between(()))
                batch.append((_CRASH, _cause(exc)))
                with contextlib.suppress(OSError):
                    send(dumps(batch))
                return
        batch.append((_PROGRESS, read))
        batch.append((_DONE,))
        send(dumps(batch))
    except (KeyboardInterrupt, OSError):
        pass  # the reading side went away or the user interrupted: it reports, not us
    finally:
        pipe.close()


def _cause(exc: BaseException) -> str:
    """An exception in one line: its type, message and where it was raised (for the bug report)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (in {frames[-1].name}, {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


class _Runs:
    """The child's item sinks with ``lines``: plain items are gathered into runs, a connection's items back
    to back in one buffer, sent as (_RUN, connection label, collections option, stream offset, the run's
    bytes, each item's stream vbucket, [(index of the first item with this ts and these frames, ts,
    frames)]). This process reads the run's items again with plain_item_at's compiled readers (it finds what
    the child found: same bytes, same options) and writes their lines. :meth:`between` puts each run in its
    place among the decoder's other items."""

    def __init__(self) -> None:
        self.runs: list[tuple[Any, ...]] = []
        self.written = 0  # bytes of runs sent (the caller resets it)
        self.buf: bytes | None = None  # the open run: its buffer, label, collections, offset, start, end
        self.label, self.offset, self.start, self.end = "", 0, 0, 0
        self.collections: bool | None = None
        self.vbuckets: list[int | None] = []
        self.groups: list[tuple[int, float, list[int]]] = []
        self.last: tuple[float, list[int] | None] = (0.0, None)

    def sink(self, label: str) -> ItemSink:
        def add(item: PlainItem, offset: int, ts: float, _label: str, frames: list[int], stream_vbucket: int | None,
                tracker: ConnectionTracker, buf: bytes) -> None:
            end = item[0]
            start = end - HEADER_LENGTH - item[1][6]
            if buf is not self.buf or start != self.end or label != self.label:
                self._close()
                self.buf, self.label, self.collections = buf, label, tracker.options().collections
                self.offset, self.start = offset, start
            self.end = end
            if ts != self.last[0] or frames is not self.last[1]:
                self.last = (ts, frames)
                self.groups.append((len(self.vbuckets), ts, frames))
            self.vbuckets.append(stream_vbucket)

        return add

    def _close(self) -> None:
        if self.buf is not None and self.vbuckets:
            data = self.buf[self.start:self.end]
            self.runs.append((_RUN, self.label, self.collections, self.offset, data, self.vbuckets, self.groups))
            self.written += len(data)
            self.vbuckets, self.groups = [], []
        self.buf, self.last = None, (0.0, None)

    def between(self, events: Iterable[Any]) -> Iterator[Any]:
        """``events`` (from feed() or finish()), each after the runs read before it, and then the rest."""
        for event in events:
            self._close()
            if self.runs:
                yield from self.runs
                self.runs.clear()
            yield event
        self._close()
        if self.runs:
            yield from self.runs
            self.runs.clear()


def _lines(run: tuple[Any, ...], options: DecodeOptions, readers: ItemReaders,
           lines_of: Callable[[str], LineMaker]) -> bytes:
    """A run's JSON lines (see :class:`_Runs`); ``readers``: the compiled readers kept for ``options``."""
    _, label, _, offset, data, vbuckets, groups = run
    line = lines_of(label)
    out = []
    pos, n, group, ts, frames = 0, len(data), 0, 0.0, []
    for index, stream_vbucket in enumerate(vbuckets):
        if group < len(groups) and groups[group][0] == index:
            _, ts, frames = groups[group]
            group += 1
        reader = readers.at(data, pos, n, options)  # plain_item_at, compiled for the item's shape
        item = reader(data, pos, n) if reader is not None else None
        if item is None:
            raise ChildError("the decoding process sent a run of items that do not read back")
        out.append(line(item, offset + pos, ts, frames, stream_vbucket, options, data))
        pos = item[0]
    return b"".join(out)


def _status(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running, but its pipe closed"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def _plain(item: Any) -> Any:
    if isinstance(item, tuple):
        return item
    if isinstance(item, Skipped):
        return (_SKIPPED, item.offset, item.length, item.reason)
    assert isinstance(item, Diagnostic)
    return (_NOTICE, item.name, item.message, item.offset, item.length)


def decode_files(paths: list[str], options: DecodeOptions, ports: frozenset[int],
                 max_body_length: int = DEFAULT_MAX_BODY_LENGTH, *,
                 on_file: Callable[[str], None] | None = None,
                 on_progress: Callable[[int], None] | None = None,
                 plain_lines: Callable[[str], LineMaker] | None = None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Iterator[Item | bytes]:
    """The items ``decode_segments`` gives for each file in turn, decoded on two cores. ``plain_lines``: a
    connection's line maker, given its label (``render.lines.plain_item_lines``): plain items come out as
    their JSON lines (bytes, many at a time), as ``decode_segments`` gives them with ``PlainLines``.

    Raises what reading a file raises (``CaptureError``, ``FileNotFoundError``), after the items before it.
    """
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    lines = plain_lines is not None
    child = context.Process(target=_produce, args=(sender, paths, options, ports, max_body_length, lines,
                                                   max_connections),
                            name="dcpctl-decode", daemon=True)
    child.start()
    sender.close()
    variants: dict[bool | None, tuple[DecodeOptions, ItemReaders]] = {}
    makers: dict[str, LineMaker] = {}

    def lines_of(label: str) -> LineMaker:
        found = makers.get(label)
        if found is None:
            assert plain_lines is not None
            found = makers[label] = plain_lines(label)
        return found

    def variant(collections: bool | None) -> tuple[DecodeOptions, ItemReaders]:
        """The options a message was decoded with in the child, and the readers compiled for them."""
        found = variants.get(collections)
        if found is None:
            found = variants[collections] = (DecodeOptions(options.dialect, collections, options.show_secrets,
                                                           options.lenient), ItemReaders())
        return found

    loads = marshal.loads
    try:
        while True:
            try:
                batch = loads(receiver.recv_bytes())
            except (EOFError, OSError):  # OSError: the pipe ended inside a message
                child.join(5)  # the pipe closes as the process ends: its exit status follows at once
                raise ChildError(f"the decoding process ended unexpectedly ({_status(child.exitcode)}); "
                                 "the output above is complete up to that point") from None
            for item in batch:
                if len(item) == 9:
                    raw, offset, collections, ts, label, from_client, frames, fields, diags = item
                    msg = decode(raw, offset, variant(collections)[0])
                    yield finish_message(msg, ts, label, from_client, frames, fields,
                                         [Diagnostic(*d) for d in diags] if diags else [])
                    continue
                tag = item[0]
                if tag == _RUN:
                    yield _lines(item, *variant(item[2]), lines_of)
                elif tag == _SKIPPED:
                    yield Skipped(*item[1:])
                elif tag == _NOTICE:
                    yield Diagnostic(*item[1:])
                elif tag == _FILE:
                    if on_file is not None:
                        on_file(item[1])
                elif tag == _PROGRESS:
                    if on_progress is not None:
                        on_progress(item[1])
                elif tag == _ERROR:
                    raise (FileNotFoundError if item[3] else CaptureError)(item[2])
                elif tag == _CRASH:
                    raise ChildError(f"the decoding process failed: {item[1]}; the output above is complete up "
                                     "to that point (a bug: please report it)")
                else:
                    return
    finally:
        receiver.close()
        if child.is_alive():
            child.terminate()
        with contextlib.suppress(Exception):
            child.join(5)
