"""Redacting a capture on several cores: its TCP connections shared out among worker processes.

Theory of operation. Redaction is a matter of each connection alone: a placeholder depends on the salt and
the bytes it replaces, and a connection's state (what it negotiated, its frames held, the lengths it
rewrote) on its own frames. So each of ``jobs`` forked workers reads the whole capture (every file of a
ring, in turn, ``redaction.Capture`` deciding which files continue the capture before them, as for one process)
and redacts the connections given to it, whole (both directions, every reuse of its four-tuple), with the
serial path's engine, :class:`~dcpctl.sources.redaction.CaptureRedactor`; the frames no connection claims
(not TCP, another port) go to the first worker, which drops or keeps them as the serial path does.
Connections are given out by their weight in a sample of the files' frames (``pcapchunks.plan``: classic
pcap files), the heaviest first to the least loaded worker; one the sample missed goes by a CRC of its ends.

A worker sends the frames it writes, each with its number in the capture (counted across its files), in
batches over a pipe (``marshal``: plain data only), each batch with a *mark*: no frame it writes later has
a lower number (the oldest frame it still holds, else the last frame it read). The first worker also says
where each file begins. This process merges the workers' frames into the capture's order and writes them
through the file's writer, entering each file's output in turn as its first frame comes (or a later file's):
a frame goes out once every other worker has either sent a frame numbered above it or marked past it. It
buffers up to :data:`MERGE_BYTES` of frames that wait, then reads only from the worker that holds the rest
back. The output is the serial path's, frame for frame and byte for byte, and so is the summary, the
workers' counts added up.

Two things are per worker, not per capture: ``--max-held-bytes`` bounds each worker's queue (a frame forced
out in one process need not be in the other), and ``--max-connections`` each worker's connections. What
:func:`shareable` refuses is redacted by one process: standard input (read once), compressed files (each
worker would decompress them whole), a pcapng file of several link types, and the options whose state spans
connections (``--hash-names`` remembers names to find them again in any message; ``--map-addresses`` counts
the distinct addresses it maps).

A worker never writes to standard output. Its errors reading a file travel as items and are raised here as
the serial path raises them; a worker that dies or fails is reported with its exit status or its exception
in one line, and the others are terminated.
"""

from __future__ import annotations

import contextlib
import marshal
import multiprocessing
import zlib
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from multiprocessing.connection import Connection, wait
from typing import Any, BinaryIO, Final

from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.message import DecodeOptions
from dcpctl.redact.core import Redactor
from dcpctl.sources.compressed import compressed, streamed
from dcpctl.sources.frametime import FrameTime
from dcpctl.sources.parallel import ChildError, cause, exit_status
from dcpctl.sources.pcap import (
    TLS_PORTS,
    CaptureError,
    CaptureNotice,
    FileFrames,
    TcpSegment,
    named,
    open_offline,
)
from dcpctl.sources.pcapchunks import Endpoints, plan
from dcpctl.sources.pcapwriter import PcapWriter
from dcpctl.sources.redaction import (
    DEFAULT_MAX_HELD_BYTES,
    Capture,
    CaptureRedactor,
    HeldFrame,
    Summary,
    capture_items,
    copy_writer,
    linktypes_of_several,
)
from dcpctl.sources.tcp import DEFAULT_MAX_CONNECTIONS

BATCH_FRAMES: Final = 2048  # frames read between two batches: a batch also carries the worker's mark on
BATCH_BYTES: Final = 1 << 20  # bytes of frames written per batch, at most (one frame more)
# Frames this process holds for the merge: past it, it reads only from the worker that holds the rest back
MERGE_BYTES: Final = 16 << 20
MAX_JOBS: Final = 64
_BATCH, _FILE, _DONE, _ERROR, _CRASH = range(5)
_END: Final = 1 << 62  # a finished worker's mark: past every frame


def shareable(redactor: Redactor, paths: list[str]) -> bool:
    """Whether files can be shared out among workers with this redactor: read by name (not standard input),
    not compressed (each worker would decompress the whole file), each of one link type, and no option whose
    state spans connections."""
    if redactor.addresses is not None or redactor.policy.hash_names:
        return False
    try:
        return all(not streamed(path) and not compressed(path) and not linktypes_of_several(path) for path in paths)
    except (CaptureError, OSError, ValueError):  # one process reads it, and says why it cannot in one line
        return False


def owners(paths: list[str], jobs: int) -> dict[Endpoints, int]:
    """The worker of each connection a sample of the files' frames weighs: the heaviest first, each to the
    least loaded worker. A file that cannot be planned (pcapng, damaged: the workers report damage as the
    serial path does) adds none; every connection not weighed goes by :func:`owner`."""
    weights: dict[Endpoints, int] = {}
    for path in paths:
        with contextlib.suppress(CaptureError, OSError, KeyError, ValueError):
            plan(path, weights=weights)
    loads = [0] * jobs
    given: dict[Endpoints, int] = {}
    for ends, weight in sorted(weights.items(), key=lambda item: (-item[1], item[0])):
        worker = loads.index(min(loads))
        given[ends] = worker
        loads[worker] += weight
    return given


def owner(ends: Endpoints, jobs: int) -> int:
    """The worker of a connection the sample missed: the same in every process (not ``hash``: salted)."""
    return zlib.crc32(repr(ends).encode()) % jobs


class _Outbox:
    """A worker's frames out since its last batch, and how it sends a batch (``send(mark)``)."""

    def __init__(self, send: Callable[[int], None]) -> None:
        self.send = send
        self.frames: list[tuple[int, float | int, bytes, int, int]] = []  # number, time, bytes, length, type
        self.size = 0


class _Share(CaptureRedactor):
    """The serial engine, its frames out put in the worker's outbox with their numbers instead of written; a
    batch goes once they pass BATCH_BYTES (a held message's frames, released at once, go a batch at a time)."""

    def __init__(self, outbox: _Outbox, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outbox = outbox

    def _write(self, frame: HeldFrame, data: bytes, wire_length: int) -> None:
        outbox = self.outbox
        ts = frame.ts  # marshal takes no float of a subclass: an exact time goes as its int of nanoseconds
        outbox.frames.append((frame.number, ts.nanos if isinstance(ts, FrameTime) else ts, data, wire_length,
                              frame.linktype))
        outbox.size += len(data)
        if outbox.size >= BATCH_BYTES:
            outbox.send(frame.number)  # frames leave in order: any later one of this worker is numbered above


def _work(pipe: Connection, index: int, jobs: int, given: dict[Endpoints, int], paths: list[str],
          redactor: Redactor, options: DecodeOptions, ports: frozenset[int], tls_ports: frozenset[int],
          settings: dict[str, Any]) -> None:
    """One worker: every file read in turn, its connections' frames (and, for the first, the unclaimed ones)
    through its own engine (a new one for each file that does not continue the capture before it:
    ``redaction.Capture`` decides, as for one process), what it writes sent on. The first worker also says where each
    file begins, and sends the reader's notices."""
    send, dumps = pipe.send_bytes, marshal.dumps
    number, read, sent_at = 0, 0, 0
    pending: tuple[float, bytes, int, int | None, int] | None = None  # the frame read, not yet given out
    notices: list[tuple[int, float, str, str]] = []
    summary = Summary(counts=redactor.counts)
    capture = Capture(lambda kind: _Share(outbox, redactor, None, kind[0], options, ports, tls_ports,
                                          summary=summary, **settings))
    current = [""]

    def batch(mark: int) -> None:
        """The frames written since the last batch, and the worker's mark."""
        nonlocal read, sent_at
        send(dumps((_BATCH, mark, read, outbox.frames)))
        outbox.frames.clear()
        outbox.size = read = 0
        sent_at = number

    outbox = _Outbox(batch)

    def give(frame: tuple[float, bytes, int, int | None, int]) -> None:
        assert capture.engine is not None  # made at the file's first frame
        capture.engine.tap(*frame[:4], number=frame[4])

    try:
        for path in paths:
            current[0] = path
            reader = open_offline(path)
            linktype = int(reader.datalink())
            frames = FileFrames()
            if index == 0:
                send(dumps((_FILE, path, number + 1, linktype)))

            def tap(ts: float, data: bytes, wire_length: int, frame_linktype: int | None = None,
                    linktype: int = linktype, frames: FileFrames = frames) -> None:
                nonlocal pending, number, read
                if pending is not None and index == 0:  # no segment claimed it: the first worker says why
                    give(pending)
                pending = None
                ended = capture.engine
                if capture.frame(frames, ts, (linktype,)) is not ended and ended is not None:
                    batch(number + 1)  # what the capture before wrote as it ended
                number += 1
                read += len(data) + 16
                pending = (ts, data, wire_length, frame_linktype, number)

            for item in capture_items(path, reader, ports, tls_ports, tap, several=False):
                if type(item) is TcpSegment:
                    ends = (item.src, item.dst) if item.src <= item.dst else (item.dst, item.src)
                    worker = given.get(ends)
                    if worker is None:  # not remembered: a flood of connections costs a CRC each, not memory
                        worker = owner(ends, jobs)
                    if worker == index and pending is not None:
                        give(pending)
                        assert capture.engine is not None
                        capture.engine.segment(item)
                    pending = None
                elif index == 0 and isinstance(item, CaptureNotice):
                    notice = named(item, path) if len(paths) > 1 else item
                    notices.append((notice.frame, notice.ts, notice.name, notice.message))
                if number - sent_at >= BATCH_FRAMES:
                    queue = capture.engine.queue if capture.engine is not None else None
                    batch(queue[0].number if queue else number)
            if pending is not None and index == 0:
                give(pending)
            pending = None
            capture.ring.ends(frames)
        if capture.engine is not None:
            capture.engine.finish()
        batch(_END)
        send(dumps((_DONE, dict(summary.counts), dict(summary.dropped), dict(summary.dropped_connections),
                    summary.frames_in, summary.frames_out, summary.messages, notices)))
    except (CaptureError, FileNotFoundError) as exc:
        with contextlib.suppress(OSError):
            send(dumps((_ERROR, current[0], str(exc), isinstance(exc, FileNotFoundError))))
    except (KeyboardInterrupt, BrokenPipeError):
        pass  # the merging side went away or the user interrupted: it reports, not us
    except Exception as exc:  # noqa: BLE001 - any bug: reported whole to the other side, never lost
        with contextlib.suppress(OSError):
            send(dumps((_CRASH, cause(exc))))
    finally:
        pipe.close()


def redact_jobs(paths: list[str], output: Callable[[str], AbstractContextManager[BinaryIO]], redactor: Redactor,
                options: DecodeOptions, ports: frozenset[int], tls_ports: frozenset[int] = TLS_PORTS, *,
                jobs: int, keep_unparsed: bool = False, max_body_length: int = DEFAULT_MAX_BODY_LENGTH,
                max_connections: int = DEFAULT_MAX_CONNECTIONS, max_held_bytes: int = DEFAULT_MAX_HELD_BYTES,
                on_file: Callable[[str], None] | None = None, on_progress: Callable[[int], None] | None = None
                ) -> tuple[Summary, list[CaptureNotice]]:
    """``redaction.redact_capture``'s output and summary for one file, ``redact_captures``'s for several (a
    ring's files continue its capture), the work shared among ``jobs`` processes (the files must be
    :func:`shareable`). ``output(path)``: each file's output, entered in the files' order, left once its
    frames are written. ``on_file``: a file begins (or failed); ``on_progress``: the bytes of frames read.
    Raises what reading a file raises (``CaptureError``, ``FileNotFoundError``), and ``ChildError``."""
    given = owners(paths, jobs)
    settings = {"keep_unparsed": keep_unparsed, "max_body_length": max_body_length,
                "max_connections": max_connections, "max_held_bytes": max_held_bytes}
    context = multiprocessing.get_context("fork")
    pipes: list[Connection] = []
    workers = []
    summary = Summary(counts=redactor.counts)
    notices: list[CaptureNotice] = []
    files: deque[tuple[str, int, int]] = deque()  # files begun but not entered yet: path, first frame, link type
    writer: PcapWriter | None = None
    stack = ExitStack()  # the output being written
    try:
        for index in range(jobs):
            receiver, sender = context.Pipe(duplex=False)
            worker = context.Process(target=_work, name=f"dcpctl-redact-{index}", daemon=True,
                                     args=(sender, index, jobs, given, paths, redactor, options, ports,
                                           tls_ports, settings))
            worker.start()
            sender.close()
            pipes.append(receiver)
            workers.append(worker)
        queues: list[deque[tuple[int, float | int, bytes, int, int]]] = [deque() for _ in range(jobs)]
        marks = [0] * jobs
        active = set(range(jobs))
        held = 0  # bytes of frames waiting in the queues

        def enter(upto: int) -> None:
            """Enter the outputs of the files that begin at or before frame ``upto``, leaving each before."""
            nonlocal writer
            while files and files[0][1] <= upto:
                path, _, linktype = files.popleft()
                stack.close()
                # the file's header is written after the workers are forked: none holds a buffered copy
                writer = copy_writer(path, stack.enter_context(output(path)), linktype, [])  # shareable: one type

        def receive(index: int) -> None:
            nonlocal held
            try:
                item = marshal.loads(pipes[index].recv_bytes())  # noqa: S302 - our own child, plain data
            except (EOFError, OSError):  # OSError: the pipe ended inside a message
                workers[index].join(5)
                raise ChildError(f"a redacting process ended unexpectedly ({exit_status(workers[index].exitcode)})"
                                 ) from None
            tag = item[0]
            if tag == _BATCH:
                queues[index].extend(item[3])
                held += sum(len(frame[2]) for frame in item[3])
                marks[index] = item[1]
                if on_progress is not None and index == 0:
                    on_progress(item[2])
            elif tag == _FILE:
                files.append(item[1:])
                if on_file is not None:
                    on_file(item[1])
            elif tag == _DONE:
                active.discard(index)
                marks[index] = _END
                counts, dropped, dropped_connections, frames_in, frames_out, messages, found = item[1:]
                summary.counts.update(counts)
                summary.dropped.update(dropped)
                summary.dropped_connections.update(dropped_connections)
                summary.frames_in += frames_in
                summary.frames_out += frames_out
                summary.messages += messages
                notices.extend(CaptureNotice(*notice) for notice in found)
            elif tag == _ERROR:
                if on_file is not None:
                    on_file(item[1])
                raise (FileNotFoundError if item[3] else CaptureError)(item[2])
            else:
                raise ChildError(f"a redacting process failed: {item[1]} (a bug: please report it)")

        def merge() -> None:
            """Write every frame no worker can still precede."""
            nonlocal held
            while True:
                first, lowest = -1, _END
                for index, queue in enumerate(queues):
                    if queue and queue[0][0] < lowest:
                        first, lowest = index, queue[0][0]
                if first < 0 or any(marks[index] < lowest for index in active if not queues[index]):
                    return
                number, ts, data, wire_length, linktype = queues[first].popleft()
                held -= len(data)
                enter(number)
                assert writer is not None  # the first worker says where a file begins before its frames
                writer.write(FrameTime(ts) if type(ts) is int else ts, data, wire_length, linktype)

        while active:
            merge()
            if held < MERGE_BYTES:
                ready = wait([pipes[index] for index in active])
            else:  # only the worker that holds the rest back
                waiting = [index for index in active if not queues[index]]
                ready = [pipes[min(waiting, key=marks.__getitem__)]]
            for index in [index for index in active if pipes[index] in ready]:
                receive(index)
        merge()
        enter(_END)  # the files left without a frame, each still copied
        stack.close()
    finally:
        for pipe in pipes:
            pipe.close()
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
            with contextlib.suppress(Exception):
                worker.join(5)
        stack.close()
    return summary, notices
