"""Captured traffic to messages in their context: TCP segments -> reassembly -> framing -> decoding -> state.

Theory of operation. Segments from the pcap reader go through the reassembler, which hands over each
connection direction's bytes in order. Each direction has its own framer; a gap in the capture resets it
into resynchronising mode and the next message carries a ``capture_gap`` diagnostic. Every message is
decoded with the options its connection's tracker gives (collections as negotiated), observed by the
tracker, and comes out as an :class:`~dcpctl.dcp.observed.Observed`: the packet as decode made it, with the
capture time of its first byte, its connection, direction, the frame numbers it came from, and what the
tracker said of it. Connection-level findings (a TLS port, the capture ending inside a packet) come
out as :class:`Diagnostic` notices for standard error.

The first bytes of each direction's stream are held back from the framer's events until they say whether
the connection is TLS (``sources.tls``: at most six bytes, and one byte for a memcached stream, whose magic
is no TLS record type). A TLS connection gets one ``tls_port`` notice, the one the pcap reader gives for
port 11207, and none of its bytes are framed from then on, in either direction.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from dcpctl.dcp.observed import Observed
from dcpctl.dcp.session import MAX_STORIES, ConnectionTracker, RollbackStory
from dcpctl.protocol.constants import MAGIC_CLASS
from dcpctl.protocol.diagnostic import Diagnostic, diagnostic
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, Framer, Skipped
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.protocol.reader import ItemReaders
from dcpctl.sources.pcap import CaptureNotice, FileStart, TcpSegment, tls_notice
from dcpctl.sources.tcp import DEFAULT_MAX_CONNECTIONS, ConnectionId, Reassembler, StreamData, StreamEvent
from dcpctl.sources.tls import TLS_PROBE_LENGTH, tls_hello

# Byte ranges remembered per direction to name the frames a message came from; older ones are dropped
# once the framer has consumed them, so this only bounds pathological captures.
MAX_SPANS: Final = 65536
# Rollback negotiations kept from connections that ended, for ``rollback explain``: 64 connections' worth of
# MAX_STORIES; a capture with more is a flood, not a rebalance.
MAX_ENDED_STORIES: Final = 64 * MAX_STORIES


@dataclass
class _Direction:
    framer: Framer
    spans: deque[tuple[int, int, float, tuple[int, ...]]] = field(default_factory=deque)
    gap: str | None = None  # a gap not yet reported on a message
    probe: bytes | None = b""  # the stream's first bytes while they may still open TLS; None once decided


@dataclass
class _Connection:
    tracker: ConnectionTracker
    directions: dict[bool, _Direction]
    label: str
    sink: ItemSink | None
    readers: ItemReaders  # the producer's plain items, compiled per shape
    tls: bool = False  # its stream opened with a TLS handshake: nothing of it is framed


Item = Observed | Skipped | Diagnostic
# Where plain items go instead of coming out of feed() (see CaptureDecoder): the plain reader's message
# (no Observed made), ts, connection label, frames, the stream's vbucket (or None), the connection's tracker.
ItemSink = Callable[[Message, float, str, list[int], int | None, ConnectionTracker], None]
ItemSinks = Callable[[str], ItemSink]  # a connection's sink, given its label
# Reassembly events after which a direction's framer starts again unsynchronised: bytes were lost (a gap), cut
# by the snap length, or given up on (the out-of-order buffer full)
RESYNC_EVENTS: Final = frozenset({"gap", "reassembly_overflow", "snaplen_truncated"})
_CLIENT: Final = "client>server"
_SERVER: Final = "server>client"

def notice_diagnostic(notice: CaptureNotice) -> Diagnostic:
    """A capture reader's notice as the diagnostic decode reports (damage of any kind is a capture gap). The
    port hint is about the whole capture: no frame number."""
    if notice.name == "protocol_on_other_port":
        return diagnostic(notice.name, notice.message)
    where = f"frame {notice.frame}: " if notice.frame else ""  # 0: the file's own header, before any frame
    return diagnostic(notice.name if notice.name == "tls_port" else "capture_gap", where + notice.message)


def finish_message(msg: Message, ts: float, label: str, from_client: bool, frames: list[int],
                   fields: dict[str, Any], diagnostics: list[Diagnostic]) -> Observed:
    """The message with the capture context every message carries, before the packet's own fields (one
    place for both the serial path and the second core's)."""
    return Observed(msg, {"ts": ts, "connection": label, "direction": _CLIENT if from_client else _SERVER,
                          "frames": frames}, fields, diagnostics)


class CaptureDecoder:
    """Stateful: feed it segments and notices, get messages and notices back (see the module docstring)."""

    def __init__(self, options: DecodeOptions, server_ports: frozenset[int],
                 max_body_length: int = DEFAULT_MAX_BODY_LENGTH, *,
                 items: ItemSinks | None = None, max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        """``items``: each connection's sink (asked for once per connection, with its label) for plain items
        (a producer's pushed mutation, deletion or expiration about which the compiled plain reader
        (``protocol.reader``) and the tracker's :meth:`~ConnectionTracker.plain_item` have nothing to
        say, so that decoding and observing it would add no diagnostic) go to this sink instead of coming out of
        :meth:`feed`, read in place, with no :class:`Observed` made: the fast path of consumers of millions of
        items. Every other message comes out as usual. ``max_connections``: connections followed at once (the
        reassembler's limit); a connection's state is kept from its first data to its end."""
        self.options = options
        self.items = items
        self.max_body_length = max_body_length
        self.server_ports, self.max_connections = server_ports, max_connections
        self.stories: list[tuple[str, RollbackStory]] = []  # of connections that ended (``rollback explain``)
        self.known_opcodes = frozenset(opcode for _, opcode in options.dialect.table)
        self.path: str | None = None  # the file being read, when the input says (:class:`FileStart`)
        self._start()

    def _start(self) -> None:
        """A capture's state, from nothing (at first, and at each file that is a capture of its own)."""
        self.reassembler = Reassembler(self.server_ports, max_connections=self.max_connections)
        self.connections: dict[ConnectionId, _Connection] = {}  # those with data so far; forgotten as they end
        self.opened: set[ConnectionId] = set()  # connections whose SYN was seen, before their first data
        self.dropped = 0  # connections no longer followed because of max_connections
        self.last_tracker: ConnectionTracker | None = None  # the tracker that observed the last message

    def _framer(self, synced: bool, offset: int = 0) -> Framer:
        return Framer(self.max_body_length, self.known_opcodes, synced, offset)

    def _connection(self, conn: ConnectionId) -> _Connection:
        found = self.connections.get(conn)
        if found is None:
            from_start = conn in self.opened
            self.opened.discard(conn)
            label = conn.label()
            # a TLS hello opens a connection: one whose start was not captured is not looked at for one
            probe = b"" if from_start else None
            found = _Connection(ConnectionTracker(self.options, from_start),
                                {True: _Direction(self._framer(from_start), probe=probe),
                                 False: _Direction(self._framer(from_start), probe=probe)}, label,
                                self.items(label) if self.items is not None else None,
                                ItemReaders(self.max_body_length))
            self.connections[conn] = found
        return found

    def feed(self, item: TcpSegment | CaptureNotice | FileStart | StreamData | StreamEvent) -> Iterator[Item]:
        """What a segment or notice of the capture brings out (or a file's start, when it reads several);
        or, reassembled elsewhere (``parallel``), what one of the reassembler's events brings out."""
        cls = type(item)
        if cls is StreamData or cls is StreamEvent:
            yield from self._event(item)  # type: ignore[arg-type]
            return
        if isinstance(item, CaptureNotice):
            yield notice_diagnostic(item)
            return
        if cls is FileStart:
            yield from self._file(item)  # type: ignore[arg-type]
            return
        assert isinstance(item, TcpSegment)
        for event in self.reassembler.push(item):
            yield from self._event(event)

    def _file(self, start: FileStart) -> Iterator[Item]:
        """A file begins: one joined to the one before continues its connections; any other begins a capture
        of its own, so what was followed before ends as at the end of a capture, and is forgotten."""
        for state in self.connections.values():
            self._place(state.tracker.pending_stories())
        if not start.joined:
            yield from self.finish()
            self.keep_stories(state for state in self.connections.values())
            self._start()
        self.path = start.path

    def _place(self, stories: list[RollbackStory]) -> None:
        """The stories seen since the last file began were seen in the file being read."""
        for story in stories:
            if story.source is None:
                story.source = self.path

    def keep_stories(self, states: Iterable[_Connection]) -> None:
        """Keeps the connections' rollback stories (they end, or the capture does), each with its file."""
        for state in states:
            stories = state.tracker.pending_stories()
            self._place(stories)
            if stories and len(self.stories) < MAX_ENDED_STORIES:
                self.stories += [(state.label, story) for story in stories[:MAX_ENDED_STORIES - len(self.stories)]]

    def finish(self) -> Iterator[Item]:
        for event in self.reassembler.flush():
            yield from self._event(event)
        for conn, state in self.connections.items():
            yield from self._tails(conn, state)
            yield from _unanswered(state)
        if self.dropped > 1:
            yield diagnostic("connection_limit", f"{self.dropped} connections in all were no longer followed "
                             "(more than --max-connections open at once)")

    def _tails(self, conn: ConnectionId, state: _Connection) -> Iterator[Item]:
        """What is left in a connection's framers: a packet cut short, or garbage."""
        for from_client, direction in state.directions.items():
            offset, tail = direction.framer.remainder()
            out = self._message(conn, state, from_client, direction, tail, offset) if tail else None
            if out is not None:
                yield out

    def _end(self, event: StreamEvent) -> Iterator[Item]:
        """The reassembler forgot a connection (closed, reset, reused, or over the limit): so does this."""
        self.opened.discard(event.conn)
        state = self.connections.pop(event.conn, None)
        if state is None:
            return
        yield from self._tails(event.conn, state)
        yield from _unanswered(state)
        self.keep_stories((state,))

    def _event(self, event: StreamData | StreamEvent) -> Iterator[Item]:
        if isinstance(event, StreamEvent):
            name = event.name
            if name == "connection_open":
                self.opened.add(event.conn)
            elif name == "connection_end":
                yield from self._end(event)
            elif name == "connection_limit":
                self.dropped += 1
                if self.dropped == 1:
                    yield diagnostic("connection_limit", f"{event.conn.label()}: {event.message} (raise "
                                     "--max-connections to follow more; further ones are counted at the end)")
            elif name == "midstream" and event.from_client is not None:
                # one side's start missed (its SYN-ACK lost): that side is framed as a connection begun
                # before the capture is, from the first plausible header
                state = self._connection(event.conn)
                if not state.tls:
                    state.directions[event.from_client] = _Direction(self._framer(synced=False), probe=None)
            elif name == "overlap_conflict":
                yield diagnostic("overlap_conflict", f"{event.conn.label()} "
                                 f"{_CLIENT if event.from_client else _SERVER}: frame {event.frame}: {event.message}")
            if name not in RESYNC_EVENTS or event.from_client is None:
                return
            state = self._connection(event.conn)
            if state.tls:
                return
            direction = state.directions[event.from_client]
            direction.probe = None  # bytes after a gap are not the stream's first
            offset, tail = direction.framer.remainder()
            out = self._message(event.conn, state, event.from_client, direction, tail, offset) if tail else None
            if out is not None:
                yield out
            resume = event.offset + event.length if event.offset is not None else 0
            direction.framer = self._framer(synced=False, offset=resume)  # offsets stay the stream's
            direction.gap = f"{event.length} bytes missing from the capture ({event.message})"
            yield diagnostic("capture_gap", f"{event.conn.label()} "
                             f"{'client>server' if event.from_client else 'server>client'}: {event.message}")
            return
        state = self._connection(event.conn)
        if state.tls:
            return
        direction = state.directions[event.from_client]
        if len(direction.spans) >= MAX_SPANS:
            direction.spans.popleft()
        direction.spans.append((event.offset, event.offset + len(event.data), event.ts, event.frames))
        framer = direction.framer
        framer.feed(event.data)
        if direction.probe is not None:
            found = self._probe(event, state, direction)
            if found is not None:
                yield found
                return
            if direction.probe is not None:
                return  # the first bytes may still open TLS: nothing is framed yet
        if self.items is not None and not event.from_client:
            yield from self._items(event.conn, state, direction)
            return
        conn, from_client, message = event.conn, event.from_client, self._message
        for item in framer.events():
            if isinstance(item, Skipped):
                yield item
            else:
                out = message(conn, state, from_client, direction, item.data, item.offset)
                if out is not None:
                    yield out

    def _probe(self, event: StreamData, state: _Connection, direction: _Direction) -> Diagnostic | None:
        """The TLS notice when a direction's first bytes open TLS (the connection is then set aside); else
        None, with ``direction.probe`` left as it is while too few bytes are in to say."""
        assert direction.probe is not None
        if not direction.probe and event.offset:  # the stream's start was not captured
            direction.probe = None
            return None
        direction.probe += event.data[:TLS_PROBE_LENGTH - len(direction.probe)]
        hello = tls_hello(direction.probe)
        if hello is None:
            return None
        direction.probe = None
        if not hello:
            return None
        state.tls = True
        for side in state.directions:  # the bytes held are TLS: no message, no tail
            state.directions[side] = _Direction(self._framer(synced=True), probe=None)
        return notice_diagnostic(tls_notice(event.frames[0] if event.frames else 0, event.ts, state.label, hello))

    def _items(self, conn: ConnectionId, state: _Connection, direction: _Direction) -> Iterator[Item]:
        """The producer's direction with an item sink: runs of plain items are walked in place and handed to
        the sink; at the first packet the plain reader or the tracker declines, one event goes the
        general way, then the walk resumes."""
        framer, tracker, sink, label, spans = direction.framer, state.tracker, state.sink, state.label, direction.spans
        read = state.readers.read
        assert sink is not None
        self.last_tracker = tracker
        while True:
            buf, pos = framer.window()
            if framer.synced and direction.gap is None:
                base, n, options = framer.offset - pos, len(buf), tracker.options()
                span: tuple[int, int, float, tuple[int, ...]] | None = None
                frames: list[int] = []
                while True:
                    item = read(buf, pos, n, base, options)
                    if item is None:
                        break
                    length = item.body_end
                    handled, stream_vbucket = tracker.plain_item(item)
                    if not handled:
                        break
                    end = pos + length
                    offset, stop = base + pos, base + end
                    while spans and spans[0][1] <= offset:
                        spans.popleft()
                    first = spans[0] if spans else None
                    if first is not None and first[0] <= offset and stop <= first[1]:  # inside one span
                        if first is not span:
                            span, frames = first, list(first[3])  # one list for the span's items
                        ts = first[2]
                    else:
                        ts, frames = _spanned(spans, offset, stop)
                        span = None
                    sink(item, ts, label, frames, stream_vbucket, tracker)
                    pos = end
                framer.consume(pos)
            event = next(framer.events(), None)
            if event is None:
                return
            if isinstance(event, Skipped):
                yield event
                continue
            out = self._message(conn, state, False, direction, event.data, event.offset)  # noqa: FBT003
            if out is not None:
                yield out

    def _message(self, conn: ConnectionId, state: _Connection, from_client: bool, direction: _Direction,
                 data: bytes, offset: int) -> Observed | Skipped | None:
        if not data or (data[0] not in MAGIC_CLASS and len(data) < 24):
            return Skipped(offset, len(data), "garbage")  # no magic byte first: not a packet's start
        end = offset + len(data)
        spans = direction.spans
        while spans and spans[0][1] <= offset:
            spans.popleft()
        if spans and spans[0][0] <= offset and end <= spans[0][1]:  # the usual case: inside one span
            ts, frames = spans[0][2], list(spans[0][3])
        else:
            ts, frames = _spanned(spans, offset, end)
        tracker = self.last_tracker = state.tracker
        msg = decode(data, offset, tracker.options())
        note = tracker.observe(msg, from_client, ts)
        diags = note.diagnostics
        if direction.gap is not None:
            diags = [diagnostic("capture_gap", direction.gap), *diags]
            direction.gap = None
        return finish_message(msg, ts, state.label, from_client, frames, note.fields, diags)


def _unanswered(state: _Connection) -> Iterator[Diagnostic]:
    """A takeover step the connection ended (or the capture ended) without answering."""
    for vbucket, what, offset in state.tracker.unanswered_takeover_steps():
        yield diagnostic("takeover_unanswered", f"{state.label}: vbucket {vbucket}: the producer's {what} "
                         f"(@{offset}) was never answered: the takeover, and so the rebalance, waits for it")


def _spanned(spans: Iterable[tuple[int, int, float, tuple[int, ...]]], offset: int, end: int
             ) -> tuple[float, list[int]]:
    """The capture time of a message's first byte and every frame its bytes came from."""
    ts = 0.0
    frames: dict[int, None] = {}  # ordered, and each frame once however many spans it gave
    for start, stop, span_ts, span_frames in spans:
        if start >= end:
            break
        if stop > offset:
            if not frames:
                ts = span_ts
            frames.update(dict.fromkeys(span_frames))
    return ts, list(frames)


class PlainSinks(Protocol):
    """Where a consumer of every message takes plain items instead of messages (``render.lines.PlainLines``
    writes their JSON lines): a sink per connection, and what the sinks made, in its place among the
    decoder's other items."""

    def sink(self, label: str) -> ItemSink: ...

    def between(self, events: Iterable[Any]) -> Iterator[Any]: ...

    def take(self) -> Any: ...

    @property
    def parts(self) -> list[Any]: ...


def decode_segments(items: Iterable[TcpSegment | CaptureNotice | FileStart | StreamData | StreamEvent],
                    options: DecodeOptions,
                    server_ports: frozenset[int], max_body_length: int = DEFAULT_MAX_BODY_LENGTH,
                    max_connections: int = DEFAULT_MAX_CONNECTIONS, plain: PlainSinks | None = None
                    ) -> Iterator[Any]:
    """Every message and notice of a capture (its segments, or its reassembled streams), in order.
    ``plain``: plain items go to its sinks (see :class:`CaptureDecoder`'s ``items``), and what those made
    comes out in their place (bytes of JSON lines for ``render.lines.PlainLines``)."""
    if plain is None:
        decoder = CaptureDecoder(options, server_ports, max_body_length, max_connections=max_connections)
        for item in items:
            yield from decoder.feed(item)
        yield from decoder.finish()
        return
    decoder = CaptureDecoder(options, server_ports, max_body_length, items=plain.sink,
                             max_connections=max_connections)
    try:
        for item in items:
            yield from plain.between(decoder.feed(item))
        yield from plain.between(decoder.finish())
    except Exception:
        if plain.parts:  # what the sinks made before a failure is output before it
            yield plain.take()
        raise


def rollback_stories(items: Iterable[TcpSegment | CaptureNotice | FileStart], options: DecodeOptions,
                     server_ports: frozenset[int]) -> list[tuple[str, RollbackStory]]:
    """Every rollback negotiation in a capture, with its connection's label (``rollback explain``); each
    story's ``source`` is the file it was seen in, where the input says (:func:`~dcpctl.sources.pcap.read_files`)."""
    decoder = CaptureDecoder(options, server_ports)
    for item in items:
        for _ in decoder.feed(item):
            pass
    for _ in decoder.finish():
        pass
    decoder.keep_stories(decoder.connections.values())
    return decoder.stories
