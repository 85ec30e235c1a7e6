"""Decoding captures on two cores: reading and TCP reassembly in a child process, the rest in this one.

Theory of operation. The work splits where the capture becomes byte streams. A forked child reads the
capture's frames and reassembles each connection's two directions (:class:`~dcpctl.sources.tcp.Reassembler`:
the capture's order, its own state); it sends what the reassembler gives, each direction's bytes in order with
their stream offset, capture time and frame numbers, and the connection events (open, end, gaps), as plain
tuples in batches over a pipe (``marshal``: plain data only, nothing executable crosses). This process feeds
them to a :class:`CaptureDecoder`, the serial path's own, from framing on: every message is framed, decoded,
tracked and rendered once, here, so both paths give identical items in identical order by construction
(plain items through the same sinks, ``decode --format jsonl``'s lines included). No message is read twice,
and nothing but the reassembled bytes and their context crosses the pipe.

The child never writes to standard output. Errors reading a file travel as items and are raised here as
the serial path raises them. When this side stops early (``--count``, a closed pipe, Ctrl-C), the child is
terminated and reaped; a child that dies without its end marker is reported with its exit status or
signal, never silently truncated. A bug in the child (an exception while reading or reassembling) ends the
child after it sends what it read before it and the exception in one line, raised here as
:class:`ChildError` after the items decoded from what came before it.
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

from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.message import DecodeOptions
from dcpctl.sources.capture import PlainSinks, decode_segments
from dcpctl.sources.pcap import CaptureError, CaptureNotice, FileStart, TcpSegment, read_files
from dcpctl.sources.tcp import DEFAULT_MAX_CONNECTIONS, ConnectionId, Reassembler, StreamData, StreamEvent

BATCH: Final = 2048  # items per pipe message: large enough to amortise, small enough to stream
# Bytes of stream data per pipe message: some 700 full-sized segments, about a megabyte held in each process.
BATCH_BYTES: Final = 1 << 20

# item tags (first element of every tuple but stream data's, which are untagged 6-tuples)
_EVENT, _NOTICE, _FILE, _PROGRESS, _ERROR, _DONE, _CRASH = range(7)


class ChildError(Exception):
    """The decoding process ended without finishing (killed, out of memory, or a bug)."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _produce(pipe: Connection, paths: list[str], ports: frozenset[int], max_connections: int) -> None:
    batch: list[Any] = []
    send = pipe.send_bytes
    dumps = marshal.dumps
    read = 0
    pending = 0  # bytes of stream data in the batch

    def tap(_ts: float, data: bytes, _wire: int) -> None:
        nonlocal read
        read += len(data) + 16

    def add(events: Iterable[StreamData | StreamEvent]) -> None:
        nonlocal pending
        for event in events:
            if type(event) is StreamData:
                conn = event.conn
                batch.append(((conn.client, conn.server, conn.generation), event.from_client, event.ts,
                              event.frames, event.offset, event.data))
                pending += len(event.data)
            else:
                assert isinstance(event, StreamEvent)
                conn = event.conn
                batch.append((_EVENT, (conn.client, conn.server, conn.generation), event.from_client, event.ts,
                               event.frame, event.name, event.message, event.offset, event.length))

    current = [""]  # the file being opened or read, for its error

    def opening(path: str) -> Callable[[float, bytes, int], None]:
        current[0] = path
        return tap

    try:
        reassembler = Reassembler(ports, max_connections=max_connections)
        try:
            for segment in read_files(paths, ports, tap=opening):
                if type(segment) is TcpSegment:
                    add(reassembler.push(segment))
                elif isinstance(segment, CaptureNotice):
                    batch.append((_NOTICE, segment.frame, segment.ts, segment.name, segment.message))
                else:
                    assert isinstance(segment, FileStart)
                    if not segment.joined:  # a capture of its own: the one before ends here
                        add(reassembler.flush())
                        reassembler = Reassembler(ports, max_connections=max_connections)
                    batch.append((_FILE, segment.path, segment.joined))
                if len(batch) >= BATCH or pending >= BATCH_BYTES:
                    batch.append((_PROGRESS, read))
                    read = pending = 0
                    send(dumps(batch))
                    batch = []
            add(reassembler.flush())
        except (CaptureError, FileNotFoundError) as exc:
            batch.append((_ERROR, current[0], str(exc), isinstance(exc, FileNotFoundError)))
            send(dumps(batch))
            return
        except Exception as exc:  # noqa: BLE001 - any bug: reported whole to the other side, never lost
            batch.append((_CRASH, cause(exc)))  # after what was read before it, as --jobs 1 prints it
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


def cause(exc: BaseException) -> str:
    """An exception in one line: its type, message and where it was raised (for the bug report)."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (in {frames[-1].name}, {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def exit_status(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running, but its pipe closed"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit status {exitcode}"


def decode_files(paths: list[str], options: DecodeOptions, ports: frozenset[int],
                 max_body_length: int = DEFAULT_MAX_BODY_LENGTH, *,
                 on_file: Callable[[str], None] | None = None,
                 on_progress: Callable[[int], None] | None = None,
                 plain: Callable[[], PlainSinks] | None = None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> Iterator[Any]:
    """The items ``decode_segments`` gives for the files (``read_files``: a file that continues the one before
    continues its connections), read and reassembled in a second process. ``plain``: makes the plain-item
    sinks, as ``decode_segments`` takes them (``PlainLines``: plain items come out as their JSON lines).

    Raises what reading a file raises (``CaptureError``, ``FileNotFoundError``), after the items before it.
    """
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_produce, args=(sender, paths, ports, max_connections),
                            name="dcpctl-decode", daemon=True)
    child.start()
    sender.close()
    loads = marshal.loads
    connections: dict[Any, ConnectionId] = {}  # the child's connections, each made once

    def connection(key: Any) -> ConnectionId:
        conn = connections.get(key)
        if conn is None:
            if len(connections) >= max_connections:  # ended ones are not announced here: start afresh
                connections.clear()
            conn = connections[key] = ConnectionId(*key)
        return conn

    def batches() -> Iterator[list[Any]]:
        while True:
            try:
                yield loads(receiver.recv_bytes())
            except (EOFError, OSError):  # OSError: the pipe ended inside a message
                child.join(5)  # the pipe closes as the process ends: its exit status follows at once
                raise ChildError(f"the decoding process ended unexpectedly ({exit_status(child.exitcode)}); "
                                 "the output above is complete up to that point") from None

    received = batches()
    queue: list[Any] = []
    at = [0]

    def next_item() -> Any:
        if at[0] >= len(queue):
            queue[:] = next(received)
            at[0] = 0
        item = queue[at[0]]
        at[0] += 1
        return item

    def control(item: Any) -> None:
        """What the child sends between files and inside one alike: progress, its error, its crash."""
        tag = item[0]
        if tag == _PROGRESS:
            if on_progress is not None:
                on_progress(item[1])
        elif tag == _ERROR:
            if on_file is not None:  # the file failed as it was opened, before its start was sent
                on_file(item[1])
            raise (FileNotFoundError if item[3] else CaptureError)(item[2])
        elif tag == _CRASH:
            raise ChildError(f"the decoding process failed: {item[1]}; the output above is complete up "
                             "to that point (a bug: please report it)")
        else:
            raise ChildError(f"the decoding process sent an item out of place: tag {tag}")

    def stream() -> Iterator[StreamData | StreamEvent | CaptureNotice | FileStart]:
        """The files' reassembled data, events, notices and starts, up to the end (what the child sent)."""
        while True:
            item = next_item()
            if len(item) == 6:
                yield StreamData(connection(item[0]), item[1], item[2], item[3], item[4], item[5])
                continue
            tag = item[0]
            if tag == _EVENT:
                yield StreamEvent(connection(item[1]), *item[2:])
            elif tag == _NOTICE:
                yield CaptureNotice(*item[1:])
            elif tag == _FILE:
                if on_file is not None:
                    on_file(item[1])
                if not item[2]:
                    connections.clear()
                yield FileStart(item[1], item[2])
            elif tag == _DONE:
                return
            else:
                control(item)

    try:
        yield from decode_segments(stream(), options, ports, max_body_length, max_connections,
                                   plain() if plain is not None else None)
    finally:
        receiver.close()
        if child.is_alive():
            child.terminate()
        with contextlib.suppress(Exception):
            child.join(5)
