"""Redacting a capture file: frames in, the same frames out in the same order, their DCP bytes redacted.

Theory of operation. Every frame of the input becomes an entry of one output queue, in input order. A frame
that carries TCP payload of a decoded connection is *held*: its payload is a span of its direction's byte
stream (``Reassembler.locate``), and it leaves the queue only when every byte of the span is final. Bytes
become final when the direction's framer has moved past them: by then each message that covered them has
been decoded (with the options its connection negotiated), redacted by the pure core
(:class:`dcpctl.redact.core.Redactor`, same length but for the edits below) and written into the
direction's *store* of final bytes.
Bytes no message covered stay zero in the store: those before the first message of a connection whose
start the capture missed and after a gap (the framer resynchronises on the first plausible header, as
``decode`` does), garbage, the tail of a capture cut inside a message. The first message after such a skip
is kept only if it decodes cleanly (else it is likely a document's bytes that look like a header: zeroed too).
A message more than the history past the store's end (after a gap) starts a new store; the one before
stays, for the frames still waiting on it, and the gap is never filled with zeros.
A frame's payload is then copied from the store (a retransmission gets the redacted copy
of what it repeats; a retransmission older than the store's history gets zeros) and its checksums are
recomputed.

Length rewriting. A message whose redacted bytes are not as long as its input (a snappy value compressed
again, ``--values drop``) is an *edit* of its direction: input offsets map to output offsets (``_Edit.out``),
monotonically, each input byte to its place in the output while there is one. A frame's payload becomes the
output bytes of its input range; its sequence number, and the acknowledgement number and SACK edges the
other direction's frames carry, are fix-ups: zero-length spans held like payload until the offset they name
is final, then moved by what the stream gained or lost before it. A segment left empty, and a pure ACK that
acknowledges removed bytes only, are left out (kept, they would be duplicate ACKs the input lacked). IP
lengths, the wire length and checksums follow. Edits are kept as long as the store's history.

Invariants: frames come out in input order, with their capture times and link-layer headers; every payload
byte of a kept frame is either part of a redacted message or zero; at most ``max_held_bytes`` of frames, and
``max_held_frames``, wait in the queue (past that, the oldest is written with the bytes final so far and the
rest zero, counted as ``held_too_long``). What cannot be parsed at all is dropped and counted by reason
unless ``keep_unparsed``: frames that are not TCP to or from a decoded port, and TLS connections.
"""

from __future__ import annotations

import bisect
import struct
from collections import Counter, deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Final, Protocol

from dcpctl.dcp.observed import Observed
from dcpctl.dcp.session import ConnectionTracker
from dcpctl.protocol.constants import Opcode
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, Skipped
from dcpctl.protocol.message import DecodeOptions, Message
from dcpctl.protocol.registry import PUBLIC_STATS
from dcpctl.redact.address import AddressMap
from dcpctl.redact.core import Redactor
from dcpctl.sources.capture import RESYNC_EVENTS, CaptureDecoder
from dcpctl.sources.compressed import compression, streamed
from dcpctl.sources.pcap import (
    DLT_EN10MB,
    IPV6_EXTENSIONS,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    TLS_PORTS,
    CaptureNotice,
    FileFrames,
    Ring,
    TcpSegment,
    interface_types,
    named,
    nanosecond_times,
    network_layer,
    open_offline,
    parse_any_frame,
    read_segments,
    reader_segments,
)
from dcpctl.sources.pcapwriter import TCP_OPTION_SACK, PcapngWriter, PcapWriter, internet_checksum, ones_sum
from dcpctl.sources.tcp import (
    ACK,
    DEFAULT_MAX_CONNECTIONS,
    FIN,
    RECENT_BYTES,
    RST,
    SYN,
    ConnectionId,
    Reassembler,
    StreamData,
    StreamEvent,
)

# Frames held in the output queue waiting for the messages they carry to end: room for two of the largest
# messages the framer accepts, so a direction blocked on one big item never forces another's frames out.
DEFAULT_MAX_HELD_BYTES: Final = 2 * DEFAULT_MAX_BODY_LENGTH + (1 << 20)
# The smallest segment a sender cuts a large message into (TCP's default MSS): frames held are also bounded in
# number, by two of the largest messages in such segments, since a small frame costs far more memory than its
# bytes (a queue of 54-byte ACKs behind one held frame took about a kilobyte each).
SMALLEST_SEGMENT: Final = 536
# Final bytes kept per direction for retransmissions: as many as the reassembler compares copies against.
HISTORY_BYTES: Final = RECENT_BYTES
TCP: Final = 6
UDP: Final = 17
ETHERTYPE_IPV4: Final = 0x0800
ETHERTYPE_IPV6: Final = 0x86DD
# The output's snap length: the largest frame libpcap reads, so no frame of the input is cut again.
OUTPUT_SNAPLEN: Final = 262144

# Why frames were left out (the summary's words).
NOT_TCP = "not TCP over IP"
OTHER_PORT = "TCP on a port not decoded"
TLS = "TLS (encrypted: cannot be redacted)"
MALFORMED = "malformed frame"
# TCP options kept as they are: end, no-op, MSS, window scale, SACK permitted, SACK (its edges rewritten),
# timestamps (RFC 9293, 7323, 2018); any other's data is zeroed (_scrub_tcp_options)
KEPT_TCP_OPTIONS: Final = frozenset({0, 1, 2, 3, 4, TCP_OPTION_SACK, 8})
MAX_STAT_REQUESTS: Final = 256  # STAT requests remembered per connection, until their group's end
EMPTIED = "segment emptied: all its bytes removed, or an ACK of removed bytes only"
SEQUENCE_SPACE: Final = 1 << 32


@dataclass(slots=True)
class HeldFrame:
    """A frame of the input in the output queue, until its bytes are final."""

    ts: float
    data: bytearray
    wire_length: int
    held: int = 0  # spans of this frame's payload not final yet
    drop: str | None = None  # why it is left out (unless keep_unparsed)
    claimed: bool = False  # the reader kept it as a segment of a decoded port
    changed: bool = False
    size: int = 0  # its length as it was queued (its payload may change length before it leaves)
    flags: int = 0  # its TCP flags
    resized: int = 0  # payload bytes added (removed when negative) by messages whose length changed
    emptied: bool = False  # its payload was all removed: left out (see _write_back)
    tcp_at: int | None = None  # where its TCP header starts, found once when the reader claims it
    original: bytes | None = None  # a frame the snap length cut, as it came: its checksum is updated from it
    # an ACK of a followed connection: that connection's last ACKs written (not the connection: a frame waiting
    # in the queue must not keep an ended connection's streams alive), its direction, the acknowledgement it
    # carried, and whether it is a pure ACK (no payload, no FIN or RST)
    ack_of: tuple[dict[bool, tuple[int, int]], bool, int, bool] | None = None
    writer: PcapWriter | None = None  # the output of its input file (the engine's, as it came)
    linktype: int = 0  # its link type: its file's, or in a pcapng file of several, its interface's
    number: int = 0  # its frame number in the file, when a worker of several redacts it (redactjobs)


@dataclass(slots=True)
class _Span:
    frame: HeldFrame
    at: int  # where the payload starts in the frame (a sequence number field's place for a fix-up)
    start: int  # stream offset of its first byte (the offset a sequence number names, for a fix-up)
    length: int
    seq: int | None = None  # a fix-up: the sequence number at ``at``, moved as the stream before it resized


@dataclass(slots=True)
class _Edit:
    """A message whose redacted bytes are not as long as its input bytes (``--values drop``, snappy)."""

    start: int  # its input stream offset
    length: int  # its input length
    data: bytes  # its output bytes
    shift: int  # output offset minus input offset at its start (what earlier edits added)

    def out(self, offset: int) -> int:
        """The output offset of input offset ``offset`` (at or after this edit's start): a byte of the message
        maps to its place in the output while there is one; the output's extra bytes go with its last byte."""
        if offset < self.start + self.length:
            return self.start + self.shift + min(offset - self.start, len(self.data))
        return offset + self.shift + len(self.data) - self.length


@dataclass(slots=True)  # two for every connection followed, up to --max-connections: slots keep them small
class _Stream:
    spans: deque[_Span] = field(default_factory=deque)
    store: bytearray = field(default_factory=bytearray)  # final bytes from stream offset ``base``
    base: int = 0
    # the stores a gap left behind (base, bytes): kept while a waiting span needs them, never filled with
    # the gap's zeros (a sequence number moved by 2**31 would be 2 GiB of them)
    older: list[tuple[int, bytearray]] = field(default_factory=list)
    edits: list[_Edit] = field(default_factory=list)  # in stream order, those the history still needs
    starts: list[int] = field(default_factory=list)  # their starts, to bisect
    shift: int = 0  # output minus input offset before the first edit kept
    resynced: bool = False  # the framer skipped bytes: its next message is checked before it is trusted
    # it skipped bytes at some point: later messages are redacted by Redactor.distrusted, not their rows alone
    distrusted: bool = False

    def skipped(self) -> None:
        self.resynced = self.distrusted = True


@dataclass(slots=True)
class _Conn:
    label: str
    drop: str | None = None
    unparsed: bool = False  # some of its bytes were skipped by the framer (counted once per connection)
    # its STAT requests by opaque, oldest first: whether their group may print documents (_stat_request)
    stats: dict[int, bool] = field(default_factory=dict)
    midstream: bool = False  # its start was not seen: each direction's first message is checked before trusted
    # each direction's stream, made when first needed: a connection that only opens (a SYN flood, up to
    # --max-connections of them) has none
    streams: dict[bool, _Stream] = field(default_factory=dict)
    acks: dict[bool, tuple[int, int]] = field(default_factory=dict)  # last ACK written per direction: in, out

    def stream(self, from_client: bool) -> _Stream:
        found = self.streams.get(from_client)
        if found is None:
            found = self.streams[from_client] = _Stream(resynced=self.midstream, distrusted=self.midstream)
        return found

    def final_shift(self, from_client: bool) -> int:
        stream = self.streams.get(from_client)
        return _final_shift(stream) if stream is not None else 0


@dataclass
class Summary:
    """What redaction did: the core's counts, frames written and dropped by reason."""

    counts: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    dropped_connections: Counter[str] = field(default_factory=Counter)
    frames_in: int = 0
    frames_out: int = 0
    messages: int = 0


class CaptureRedactor:
    """Feeds a capture's frames through reassembly, decoding and the core; writes the redacted frames."""

    def __init__(self, redactor: Redactor, writer: PcapWriter | None, linktype: int, options: DecodeOptions,
                 ports: frozenset[int], tls_ports: frozenset[int], *, keep_unparsed: bool = False,
                 max_body_length: int = DEFAULT_MAX_BODY_LENGTH, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 max_held_bytes: int = DEFAULT_MAX_HELD_BYTES, summary: Summary | None = None) -> None:
        """``summary``: the one to add to (that of captures redacted before, each its own engine)."""
        self.redactor = redactor
        self.addresses = redactor.addresses  # --map-addresses: the frames' headers, by the redactor's map
        self.writer = writer
        self.linktype = linktype
        self.ports = ports
        self.tls_ports = tls_ports
        self.keep_unparsed = keep_unparsed
        self.max_held_bytes = max_held_bytes
        self.max_held_frames = 2 * (max_body_length // SMALLEST_SEGMENT + 1)
        self.reassembler = Reassembler(ports, max_connections=max_connections)
        # plain items (most of a DCP capture) come to _plain from the compiled plain readers, with no Observed
        self.decoder = CaptureDecoder(options, ports, max_body_length, max_connections=max_connections,
                                      items=lambda _label: self._plain)
        self.queue: deque[HeldFrame] = deque()
        self.queued_bytes = 0
        self.conns: dict[ConnectionId, _Conn] = {}
        self.labels: dict[str, ConnectionId] = {}
        # the final shift of each direction of connections that ended, for the ACKs that follow their end
        self.closed: dict[tuple[tuple[str, int], tuple[str, int]], tuple[int, int]] = {}
        self.max_connections = max_connections
        self.summary = summary if summary is not None else Summary(counts=redactor.counts)
        self._last: HeldFrame | None = None

    # --- input ----------------------------------------------------------------------------------------
    def tap(self, ts: float, data: bytes, wire_length: int, linktype: int | None = None, number: int = 0) -> None:
        """Every frame of the input, in order (the pcap reader's tap); ``linktype``: the frame's, when it is
        not the capture's (a pcapng file of several); ``number``: its frame number, for :meth:`_write`."""
        self._settle_last()
        frame = HeldFrame(ts, bytearray(data), wire_length, size=len(data), writer=self.writer,
                          linktype=self.linktype if linktype is None else linktype, number=number)
        if wire_length > len(data):
            frame.original = data
        self.summary.frames_in += 1
        self.queue.append(frame)
        self.queued_bytes += len(data)
        self._last = frame
        self._flush()

    def _settle_last(self) -> None:
        """A frame the reader did not keep as a segment: say why it is left out."""
        frame = self._last
        if frame is None or frame.claimed:
            return
        parsed = parse_any_frame(frame.linktype, bytes(frame.data), frame.wire_length, 0, frame.ts)
        if parsed is None:
            frame.drop = NOT_TCP
        elif isinstance(parsed, str):
            frame.drop = MALFORMED
        elif parsed.src[1] in self.tls_ports or parsed.dst[1] in self.tls_ports:
            frame.drop = TLS
        else:
            frame.drop = OTHER_PORT

    def segment(self, seg: TcpSegment) -> None:
        frame = self._last
        assert frame is not None
        frame.claimed = True
        frame.tcp_at = tcp_at = _tcp_header(frame.linktype, frame.data)
        if tcp_at is not None and _scrub_tcp_options(frame.data, tcp_at):
            frame.changed = True
        datagram_end = seg.payload_at + seg.wire_length
        if tcp_at is not None and not seg.truncated and datagram_end < len(frame.data):
            # bytes after the IP datagram (an Ethernet trailer, padding) are no protocol's, and padding has been
            # known to hold other packets' bytes: zeroed (the checksums do not cover them)
            frame.data[datagram_end:] = bytes(len(frame.data) - datagram_end)
        key, from_client, conn_id, offset = self.reassembler.locate(seg)
        frame.flags = seg.flags
        acked = self._acknowledged(frame, key, not from_client, seg) if conn_id is not None else []
        events = self.reassembler.push(seg)
        if conn_id is None:  # a new connection: the one the events name (the newest for a reused 4-tuple)
            named = [event.conn for event in events if event.conn.client == key[0] and event.conn.server == key[1]]
            conn_id = max(named, key=lambda conn: conn.generation) if named else None
        for event in events:
            if isinstance(event, StreamEvent) and event.name in ("connection_open", "midstream"):
                opened = self._conn(event.conn)
                if event.name == "midstream" and event.from_client is not None:  # one side's start missed
                    opened.stream(event.from_client).skipped()
                elif event.name == "midstream":  # its first message may be found inside another's bytes
                    opened.midstream = True
                    for stream in opened.streams.values():
                        stream.skipped()
        conn = self.conns.get(conn_id) if conn_id is not None else None
        if conn is not None and conn.drop is not None:
            frame.drop = conn.drop
        if conn is None and key in self.closed:  # the last ACK of a closed connection: its final shifts
            self._shift_closed(frame, from_client, *self.closed[key])
        if conn is not None and conn.drop is None and not seg.flags & SYN:
            if tcp_at is not None:  # its sequence number, moved as its direction's bytes before it resized
                conn.stream(from_client).spans.append(_Span(frame, tcp_at + 4, offset, 0, seg.seq))
                frame.held += 1
            other = conn.stream(not from_client)
            final = self._final(conn_id, not from_client)
            for at, acked_offset, number in acked:
                if not other.spans and acked_offset <= final:  # already final (as a rule, an ACK's is): now
                    self._move(frame, at, number, _out_offset(other, acked_offset) - acked_offset)
                    continue
                other.spans.append(_Span(frame, at, acked_offset, 0, number))
                frame.held += 1
            if acked:
                pure = not seg.payload and not seg.truncated and not seg.flags & (FIN | RST)
                frame.ack_of = (conn.acks, from_client, seg.ack, pure)
        if conn is not None and seg.payload:
            stream = conn.stream(from_client)
            stream.spans.append(_Span(frame, seg.payload_at, offset, len(seg.payload)))
            frame.held += 1
        for event in events:
            self._event(event)
        if conn is not None and conn_id in self.conns:
            self._settle(conn_id, conn, from_client)
            self._settle(conn_id, conn, not from_client)
        self._flush()

    def _shift_closed(self, frame: HeldFrame, from_client: bool, client: int, server: int) -> None:
        tcp_at = frame.tcp_at
        if tcp_at is None:
            return
        own, other = (client, server) if from_client else (server, client)
        for at, moved in ((tcp_at + 4, own), (tcp_at + 8, other if frame.flags & ACK else 0)):
            if moved:
                number = struct.unpack_from("!I", frame.data, at)[0]
                struct.pack_into("!I", frame.data, at, (number + moved) % SEQUENCE_SPACE)
                frame.changed = True

    def _acknowledged(self, frame: HeldFrame, key: tuple[tuple[str, int], tuple[str, int]], other: bool,
                      seg: TcpSegment) -> list[tuple[int, int, int]]:
        """The sequence numbers a segment names in the other direction: its acknowledgement number and its
        SACK blocks' edges, each as (its place in the frame, the stream offset it names, its value)."""
        tcp_at = frame.tcp_at
        if tcp_at is None or not seg.flags & ACK:
            return []
        numbers = [(tcp_at + 8, seg.ack)]
        options_end = min(len(frame.data), tcp_at + (frame.data[tcp_at + 12] >> 4) * 4)
        at = tcp_at + 20
        while at < options_end:  # the options: kind, length, data (kinds 0 and 1 are one byte)
            kind = frame.data[at]
            if kind == 0:
                break
            if kind == 1:
                at += 1
                continue
            if at + 1 >= options_end or frame.data[at + 1] < 2:
                break
            size = frame.data[at + 1]
            if kind == TCP_OPTION_SACK:
                numbers.extend((edge, struct.unpack_from("!I", frame.data, edge)[0])
                               for edge in range(at + 2, min(at + size, options_end) - 3, 4))
            at += size
        out = []
        for place, number in numbers:
            offset = self.reassembler.stream_offset(key, other, number)
            if offset is not None:
                out.append((place, offset, number))
        return out

    def _conn(self, conn_id: ConnectionId) -> _Conn:
        found = self.conns.get(conn_id)
        if found is None:
            found = self.conns[conn_id] = _Conn(conn_id.label())
            self.labels[found.label] = conn_id
        return found

    def _event(self, event: StreamData | StreamEvent) -> None:
        for item in self.decoder.feed(event):
            if isinstance(item, Observed):
                self._message(item)
            elif isinstance(item, Skipped):
                self._skipped(event.conn, item.length, event.from_client)
        if isinstance(event, StreamEvent) and event.name in RESYNC_EVENTS and event.from_client is not None:
            conn = self.conns.get(event.conn)
            if conn is not None:  # the framer resynchronises after a gap, a frame cut short, a full buffer
                conn.stream(event.from_client).skipped()
        if isinstance(event, StreamEvent) and event.name == "connection_end":
            conn = self.conns.pop(event.conn, None)
            if conn is not None:
                self.labels.pop(conn.label, None)
                for from_client in (True, False):
                    self._settle(event.conn, conn, from_client, everything=True)
                self.closed[(event.conn.client, event.conn.server)] = (conn.final_shift(from_client=True),
                                                                        conn.final_shift(from_client=False))
                while len(self.closed) > self.max_connections:
                    del self.closed[next(iter(self.closed))]

    def _skipped(self, conn_id: ConnectionId, length: int, from_client: bool | None) -> None:
        """Bytes the framer skipped (no message starts there): they stay zero in the store; counted."""
        conn = self.conns.get(conn_id)
        if conn is None or conn.drop is not None or not length:
            return
        self.summary.counts["unparsed_bytes"] += length
        if not conn.unparsed:
            conn.unparsed = True
            self.summary.counts["unparsed_connections"] += 1
        if from_client is not None:
            conn.stream(from_client).skipped()

    def _message(self, observed: Observed) -> None:
        first = observed.first
        conn_id = self.labels.get(first["connection"])
        conn = self.conns.get(conn_id) if conn_id is not None else None
        if conn is None or conn.drop is not None:
            return
        self.summary.messages += 1
        stream = conn.stream(first["direction"] == "client>server")
        msg = observed.packet
        if msg.opcode == Opcode.STAT and not msg.is_response:
            _stat_request(conn, msg, trusted=not stream.distrusted)
        if stream.resynced:
            stream.resynced = False
            if msg.variant is None or msg.diagnostics:  # the packet's own, not its context's
                # the first header found after a skip does not decode cleanly: likely bytes of a document
                # that look like a header, so none of it is kept
                assert conn_id is not None
                self._skipped(conn_id, len(msg.raw), None)
                return
            # it decodes, but may still be a document's bytes: its numbers kept, its text not trusted
            self._store(stream, msg.offset, self.redactor.untrusted(msg), len(msg.raw))
            return
        if msg.opcode == Opcode.STAT and msg.is_response and not stream.distrusted:
            self._store(stream, msg.offset, self._stat_answer(conn, msg), len(msg.raw))
            return
        redacted = self.redactor.distrusted(msg) if stream.distrusted else self.redactor.message(msg)
        self._store(stream, msg.offset, redacted, len(msg.raw))

    def _stat_answer(self, conn: _Conn, msg: Message) -> bytes:
        """A STAT answer's text is the protocol's only when the capture showed its request, for one of the
        PUBLIC_STATS groups; the answers to another (``_hash-dump``, ``range-scans``, ``connections``: they may
        print documents or a client's agent), and those whose request it does not show (lost, captured after
        them, found after a skip), have their values replaced whole. The group's empty answer ends it."""
        documents = conn.stats.get(msg.opaque)
        if not msg.key and not msg.value:
            conn.stats.pop(msg.opaque, None)
            return self.redactor.message(msg)
        return self.redactor.stat_dump(msg) if documents is None or documents else self.redactor.message(msg)

    def _plain(self, msg: Message, _ts: float, label: str, _frames: list[int], _vbucket: int | None,
               _tracker: ConnectionTracker) -> None:
        """A plain item of a server's direction, read by the decoder's compiled plain reader."""
        conn_id = self.labels.get(label)
        conn = self.conns.get(conn_id) if conn_id is not None else None
        if conn is None or conn.drop is not None:
            return
        self.summary.messages += 1
        stream = conn.stream(from_client=False)
        if stream.resynced:  # the first message after a skip (see _message)
            stream.resynced = False
            self._store(stream, msg.offset, self.redactor.untrusted(msg), len(msg.raw))
            return
        self._store(stream, msg.offset, self.redactor.plain_item(msg), len(msg.raw))

    def _store(self, stream: _Stream, offset: int, data: bytes, length: int | None = None) -> None:
        """A message's redacted bytes into its direction's store of final bytes; one ``length`` input bytes
        long that became another length is an edit (the store keeps zeros in its place)."""
        if length is not None and len(data) != length:
            stream.edits.append(_Edit(offset, length, data, _final_shift(stream)))
            stream.starts.append(offset)
            data = bytes(length)
        at = offset - stream.base
        if at < 0:  # older than the history kept (cannot happen while spans wait for it): the rest only
            data, at = data[-at:], 0
        if at > len(stream.store) + HISTORY_BYTES:  # after a gap: no byte before it comes from a message now
            stream.older.append((stream.base, stream.store))
            stream.store, stream.base, at = bytearray(), offset, 0
        end = at + len(data)
        if end > len(stream.store):
            stream.store.extend(bytes(end - len(stream.store)))
        stream.store[at:end] = data

    def _settle(self, conn_id: ConnectionId, conn: _Conn, from_client: bool, everything: bool = False) -> None:
        """Write back the spans whose bytes are final (all of them when the connection ended)."""
        state = self.decoder.connections.get(conn_id)
        if state is not None and state.tls and conn.drop is None:
            conn.drop = TLS
            self.summary.dropped_connections[TLS] += 1
        stream = conn.streams.get(from_client)
        if stream is None or not stream.spans:  # nothing waits (the history was trimmed when the last span left)
            return
        if everything or state is None or conn.drop is not None:
            final = None
        else:
            final = state.directions[from_client].framer.offset
        spans = stream.spans
        while spans and (final is None or spans[0].start + spans[0].length <= final):
            self._write_back(stream, spans.popleft(), conn.drop)
        # keep the history retransmissions may repeat, and whatever a waiting span still needs
        keep_from = min(spans[0].start if spans else stream.base + len(stream.store),
                        stream.base + len(stream.store) - HISTORY_BYTES)
        while stream.older and stream.older[0][0] + len(stream.older[0][1]) <= keep_from:
            del stream.older[0]
        if keep_from - stream.base > 2 * HISTORY_BYTES:
            del stream.store[:keep_from - stream.base]
            stream.base = keep_from
            done = bisect.bisect_right(stream.starts, keep_from - 1)
            while done and stream.edits[done - 1].start + stream.edits[done - 1].length > keep_from:
                done -= 1
            if done:
                last = stream.edits[done - 1]
                stream.shift = last.shift + len(last.data) - last.length
                del stream.edits[:done], stream.starts[:done]

    def _write_back(self, stream: _Stream, span: _Span, drop: str | None) -> None:
        frame = span.frame
        frame.held -= 1
        if drop is not None:
            frame.drop = drop
            if self.keep_unparsed:
                return
        if span.seq is not None:  # a sequence number: moved by what the stream before it gained or lost
            self._move(frame, span.at, span.seq, _out_offset(stream, span.start) - span.start)
            return
        data = self._output_bytes(stream, span.start, span.start + span.length)
        if frame.data[span.at:span.at + span.length] != data:
            frame.data[span.at:span.at + span.length] = data
            frame.changed = True
            frame.resized += len(data) - span.length
            # a segment whose bytes were all removed is left out: kept as a pure ACK it would be a duplicate
            # ACK to TCP analysis; later segments carry its acknowledgement and window on
            frame.emptied = not data and not frame.flags & (SYN | FIN | RST)

    @staticmethod
    def _move(frame: HeldFrame, at: int, number: int, moved: int) -> None:
        """A sequence number of a frame moved by what the stream before it gained or lost."""
        if moved:
            struct.pack_into("!I", frame.data, at, (number + moved) % SEQUENCE_SPACE)
            frame.changed = True

    def _final(self, conn_id: ConnectionId | None, from_client: bool) -> int:
        """The stream offset up to which a direction's bytes are final (-1: none known)."""
        state = self.decoder.connections.get(conn_id) if conn_id is not None else None
        return state.directions[from_client].framer.offset if state is not None else -1

    def _output_bytes(self, stream: _Stream, start: int, end: int) -> bytes:
        """The output bytes an input range of a stream becomes: the store's, and the edits' inside it."""
        out = bytearray()
        edits, at = stream.edits, bisect.bisect_right(stream.starts, start) - 1
        if at >= 0 and edits[at].start + edits[at].length <= start:
            at += 1
        at = max(at, 0)
        position = start
        while position < end:
            edit = edits[at] if at < len(edits) else None
            if edit is not None and edit.start <= position:
                stop = min(end, edit.start + edit.length)
                out += edit.data[edit.out(position) - edit.start - edit.shift:edit.out(stop) - edit.start - edit.shift]
                position, at = stop, at + 1
                continue
            stop = min(end, edit.start) if edit is not None else end
            out += _stored(stream, position, stop)
            position = stop
        return bytes(out)

    # --- output ---------------------------------------------------------------------------------------
    def _flush(self) -> None:
        queue = self.queue
        while queue and (queue[0].held == 0 or self.queued_bytes > self.max_held_bytes
                         or len(queue) > self.max_held_frames):
            if queue[0] is self._last and not queue[0].claimed:
                return  # the reader may still claim it
            frame = queue.popleft()
            self.queued_bytes -= frame.size
            if frame.held:
                self.summary.counts["held_too_long"] += 1
                self._force(frame)
            self._output(frame)

    def _force(self, frame: HeldFrame) -> None:
        """A frame out before its bytes are final: what is final is written, the rest zeroed. Spans wait in
        the order their frames came, and every older frame has left the queue: the oldest frame's spans are
        first in each stream, so each stream is looked at once, not walked whole for every forced frame."""
        for conn in self.conns.values():
            for stream in conn.streams.values():
                spans = stream.spans
                while spans and spans[0].frame is frame:
                    self._write_back(stream, spans.popleft(), conn.drop)

    def _output(self, frame: HeldFrame) -> None:
        if frame.drop is not None and not self.keep_unparsed:
            self.summary.dropped[frame.drop] += 1
            return
        if frame.emptied or self._acks_removed_bytes_only(frame):
            self.summary.dropped[EMPTIED] += 1
            return
        if frame.resized:
            _resize_ip(frame.linktype, frame.data, frame.resized)
        if frame.changed or self.addresses is not None:
            rewrite_headers(frame.linktype, frame.data, self.addresses, ip_checksum=bool(frame.resized),
                            original=frame.original)
        self._write(frame, bytes(frame.data), frame.wire_length + frame.resized)
        self.summary.frames_out += 1

    def _write(self, frame: HeldFrame, data: bytes, wire_length: int) -> None:
        """A frame out, redacted, to the writer of its file (a worker of several sends it on instead)."""
        assert frame.writer is not None
        frame.writer.write(frame.ts, data, wire_length, frame.linktype)

    def _acks_removed_bytes_only(self, frame: HeldFrame) -> bool:
        """A pure ACK whose acknowledgement moved in the input but not in the output: it acknowledges removed
        bytes only. Kept, it would be a duplicate ACK (or a window update) the input did not have; the next
        ACK carries its acknowledgement and window on."""
        if frame.ack_of is None:
            return False
        acks, from_client, ack_in, pure = frame.ack_of
        tcp_at = frame.tcp_at
        if tcp_at is None:
            return False
        ack_out = struct.unpack_from("!I", frame.data, tcp_at + 8)[0]
        last = acks.get(from_client)
        acks[from_client] = (ack_in, ack_out)
        return pure and last is not None and last[0] != ack_in and last[1] == ack_out

    def finish(self, *, last: bool = True) -> None:
        """Everything out. ``last``: no engine follows with the same redactor (its address map's counts, which
        are the map's, not this engine's, go into the summary once)."""
        self._settle_last()
        for event in self.reassembler.flush():
            self._event(event)
        for conn_id in list(self.decoder.connections):  # ended here, so their tails are told by connection
            self._event(StreamEvent(conn_id, None, 0.0, 0, "connection_end", "end of the capture"))
        for item in self.decoder.finish():
            if isinstance(item, Observed):
                self._message(item)
        for conn_id, conn in list(self.conns.items()):
            for from_client in (True, False):
                self._settle(conn_id, conn, from_client, everything=True)
        self.conns.clear()
        self._last = None
        self.max_held_bytes = -1  # everything out
        self._flush()
        if last and self.addresses is not None:
            self.summary.counts.update(self.addresses.counts())


def _final_shift(stream: _Stream) -> int:
    """Output minus input offset past every message of a stream."""
    last = stream.edits[-1] if stream.edits else None
    return last.shift + len(last.data) - last.length if last is not None else stream.shift


def _stored(stream: _Stream, start: int, stop: int) -> bytes | bytearray:
    """A stream's final bytes from ``start`` to ``stop``, zeros where the store has none: before its history,
    after its end, in a gap."""
    first = start - stream.base
    if first >= 0 and not stream.older:
        piece = stream.store[first:stop - stream.base]
        return piece if len(piece) == stop - start else piece.ljust(stop - start, b"\x00")
    out = bytearray(stop - start)
    for base, store in (*stream.older, (stream.base, stream.store)):
        low, high = max(start, base), min(stop, base + len(store))
        if low < high:
            out[low - start:high - start] = store[low - base:high - base]
    return out


def _out_offset(stream: _Stream, offset: int) -> int:
    """The output stream offset input offset ``offset`` of a stream maps to."""
    at = bisect.bisect_right(stream.starts, offset) - 1
    if at < 0:
        return offset + stream.shift
    return stream.edits[at].out(offset)


def _tcp_header(linktype: int, data: bytearray) -> int | None:
    """Where a frame's TCP header starts (IPv4 or IPv6 after its extension headers), None if it has none."""
    network = network_layer(linktype, data)  # the whole frame, not a copy of a prefix a stack of tags outruns
    if network is None:
        return None
    ethertype, offset = network
    if ethertype == ETHERTYPE_IPV4 and len(data) >= offset + 20:
        protocol, at = data[offset + 9], offset + data[offset] % 16 * 4
    elif ethertype == ETHERTYPE_IPV6 and len(data) >= offset + 40:
        protocol, at = data[offset + 6], offset + 40
        while protocol in IPV6_EXTENSIONS and at + 8 <= len(data):
            protocol, at = data[at], at + (data[at + 1] + 1) * 8
    else:
        return None
    return at if protocol == TCP and at + 20 <= len(data) else None


def _resize_ip(linktype: int, data: bytearray, resized: int) -> None:
    """A frame whose TCP payload gained ``resized`` bytes: its IP length field says so."""
    network = network_layer(linktype, data)  # the whole frame, not a copy of a prefix a stack of tags outruns
    if network is None:
        return
    ethertype, offset = network
    at = offset + 2 if ethertype == ETHERTYPE_IPV4 else offset + 4 if ethertype == ETHERTYPE_IPV6 else None
    if at is not None and len(data) >= at + 2:
        struct.pack_into("!H", data, at, struct.unpack_from("!H", data, at)[0] + resized)


def _scrub_tcp_options(data: bytearray, tcp_at: int) -> bool:
    """Zero the data of a TCP header's options other than KEPT_TCP_OPTIONS (and whatever follows one that
    does not parse): a signature (TCP-MD5, TCP-AO) or an MPTCP data checksum covers the original payload, so
    it would let a guess at the bytes replaced be tested, as a checksum left alone would. True if it changed."""
    end = min(len(data), tcp_at + (data[tcp_at + 12] >> 4) * 4)
    at, changed = tcp_at + 20, False
    while at < end:
        kind = data[at]
        if kind == 0:
            break
        if kind == 1:
            at += 1
            continue
        size = data[at + 1] if at + 1 < end else 0
        if size < 2 or at + size > end:  # not an option: nothing after it is known to be the protocol's
            changed |= any(data[at:end])
            data[at:end] = bytes(end - at)
            break
        if kind not in KEPT_TCP_OPTIONS and any(data[at + 2:at + size]):
            data[at + 2:at + size] = bytes(size - 2)
            changed = True
        at += size
    return changed


def _stat_request(conn: _Conn, msg: Message, *, trusted: bool) -> None:
    """Remember a STAT request's group for its answers (see ``_stat_answer``). One found after skipped bytes
    may be a document's bytes: it can mark its opaque's answers as printing documents, never as not."""
    documents = msg.key.split(b" ", 1)[0] not in PUBLIC_STATS
    if documents or conn.stats.get(msg.opaque):
        conn.stats[msg.opaque] = True
    elif trusted:
        conn.stats[msg.opaque] = False
    while len(conn.stats) > MAX_STAT_REQUESTS:
        del conn.stats[next(iter(conn.stats))]


def rewrite_headers(linktype: int, data: bytearray, addresses: AddressMap | None, ip_checksum: bool = False,
                    original: bytes | None = None) -> None:
    """Map a frame's MAC and IP addresses and clients' ports (when asked) and recompute its checksums: the
    IPv4 header's, and the TCP or UDP one over the pseudo-header (IPv4 or IPv6). A frame cut by the snap
    length cannot be summed whole: given its ``original`` bytes (the same length), its checksum is updated
    by the difference (RFC 1624), so it depends on the redacted bytes and no more on those they replaced."""
    if addresses is not None:
        _map_link_addresses(linktype, data, addresses)
    layout = _transport(linktype, data, addresses, ip_checksum=ip_checksum)
    if layout is None:
        return
    protocol, transport_at, end, pseudo = layout
    at = {TCP: 16, UDP: 6}.get(protocol)
    if at is not None and addresses is not None and transport_at + 4 <= len(data):
        source, destination = struct.unpack_from("!HH", data, transport_at)
        struct.pack_into("!HH", data, transport_at, addresses.port(source), addresses.port(destination))
    field = transport_at + at if at is not None else -1
    if at is None or field + 2 > min(end, len(data)):
        return
    if protocol == UDP and data[field:field + 2] == b"\x00\x00":
        return  # an IPv4 UDP datagram without a checksum
    old = struct.unpack_from("!H", data, field)[0]
    data[field:field + 2] = b"\x00\x00"
    if end <= len(data):
        check = internet_checksum(pseudo + bytes(data[transport_at:end]))
        data[field:field + 2] = struct.pack("!H", check or 0xFFFF if protocol == UDP else check)
        return
    before = _transport(linktype, bytearray(original), None) \
        if original is not None and len(original) == len(data) else None
    if original is None or before is None or before[1:3] != (transport_at, end):
        data[field:field + 2] = struct.pack("!H", old)  # nothing known to subtract: kept as it was
        return
    # the bytes not captured sum to the old total less the old captured bytes' sum (the field zeroed)
    gone = ones_sum(before[3] + original[transport_at:field] + b"\x00\x00" + original[field + 2:])
    total = ((~old & 0xFFFF) - gone + ones_sum(pseudo + bytes(data[transport_at:]))) % 0xFFFF
    check = ~(total or 0xFFFF) & 0xFFFF
    data[field:field + 2] = struct.pack("!H", check or 0xFFFF if protocol == UDP else check)


def _transport(linktype: int, data: bytearray, addresses: AddressMap | None, *,
               ip_checksum: bool = False) -> tuple[int, int, int, bytes] | None:
    """The IP header's addresses mapped (when asked) and its IPv4 checksum recomputed (when it changed), then
    what the transport checksum covers: (protocol, where the transport header starts, where the datagram
    ends, the pseudo-header). None: no IP header, a malformed one, or a later IPv4 fragment."""
    network = network_layer(linktype, data)  # the whole frame, not a copy of a prefix a stack of tags outruns
    if network is None:
        return None
    ethertype, offset = network
    if ethertype == ETHERTYPE_IPV4 and len(data) >= offset + 20:
        ihl = data[offset] % 16 * 4  # the IPv4 header length nibble, in words
        total = struct.unpack_from("!H", data, offset + 2)[0]
        if addresses is not None:
            data[offset + 12:offset + 16] = addresses(bytes(data[offset + 12:offset + 16]))
            data[offset + 16:offset + 20] = addresses(bytes(data[offset + 16:offset + 20]))
            # options (a recorded or source route, timestamps) may hold addresses: zeros, the end of the list
            data[offset + 20:min(offset + ihl, len(data))] = bytes(max(0, min(offset + ihl, len(data)) - offset - 20))
        if ihl < 20 or total < ihl:
            return None  # a malformed header (a frame --keep-unparsed keeps): its addresses hidden, nothing to sum
        if addresses is not None or ip_checksum:
            data[offset + 10:offset + 12] = b"\x00\x00"
            data[offset + 10:offset + 12] = struct.pack("!H", internet_checksum(bytes(data[offset:offset + ihl])))
        protocol, transport_at, end = data[offset + 9], offset + ihl, offset + total
        if struct.unpack_from("!H", data, offset + 6)[0] & 0x1FFF:
            return None  # a later fragment: no transport header in it
        return protocol, transport_at, end, bytes(data[offset + 12:offset + 20]) + struct.pack(
            "!xBH", protocol, end - transport_at)
    if ethertype == ETHERTYPE_IPV6 and len(data) >= offset + 40:
        if addresses is not None:
            data[offset + 8:offset + 24] = addresses(bytes(data[offset + 8:offset + 24]))
            data[offset + 24:offset + 40] = addresses(bytes(data[offset + 24:offset + 40]))
        payload_length = struct.unpack_from("!H", data, offset + 4)[0]
        protocol, transport_at, end = data[offset + 6], offset + 40, offset + 40 + payload_length
        while protocol in IPV6_EXTENSIONS and transport_at + 8 <= len(data):
            following = transport_at + (data[transport_at + 1] + 1) * 8
            if addresses is not None:
                # a routing header's addresses, a home address option: zeros (padding), the chain kept
                stop = min(following, len(data))
                data[transport_at + 2:stop] = bytes(stop - transport_at - 2)
            protocol, transport_at = data[transport_at], following
        if end < transport_at:
            return None  # extension headers longer than the payload: malformed, nothing to sum
        return protocol, transport_at, end, bytes(data[offset + 8:offset + 40]) + struct.pack(
            "!IxxxB", end - transport_at, protocol)
    return None


def _map_link_addresses(linktype: int, data: bytearray, addresses: AddressMap) -> None:
    """A frame's MAC addresses mapped: Ethernet's two, the one a Linux cooked header (``-i any``) gives."""
    if linktype == DLT_EN10MB and len(data) >= 12:
        data[0:6] = addresses.mac(bytes(data[0:6]))
        data[6:12] = addresses.mac(bytes(data[6:12]))
    elif linktype == LINKTYPE_LINUX_SLL and len(data) >= 14 and struct.unpack_from("!H", data, 4)[0] == 6:
        data[6:12] = addresses.mac(bytes(data[6:12]))
    elif linktype == LINKTYPE_LINUX_SLL2 and len(data) >= 20 and data[11] == 6:
        data[12:18] = addresses.mac(bytes(data[12:18]))


def redact_capture(path: str, out: BinaryIO, redactor: Redactor, options: DecodeOptions, ports: frozenset[int],
                   tls_ports: frozenset[int] = TLS_PORTS, *, keep_unparsed: bool = False,
                   max_body_length: int = DEFAULT_MAX_BODY_LENGTH, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                   max_held_bytes: int = DEFAULT_MAX_HELD_BYTES,
                   progress: Callable[[float, bytes, int], None] | None = None
                   ) -> tuple[Summary, list[CaptureNotice]]:
    """Redact the capture at ``path`` into ``out`` (classic pcap, the input's link type; pcapng for a pcapng
    file whose interfaces have several): what was done, and the reader's notices (a damaged file, a TLS
    port: each kind once, so few). ``progress`` sees every frame read, as the engine does."""
    reader = open_offline(path)
    linktype = int(reader.datalink())
    types = linktypes_of_several(path)
    writer = copy_writer(path, out, linktype, types)
    engine = CaptureRedactor(redactor, writer, linktype, options, ports, tls_ports, keep_unparsed=keep_unparsed,
                             max_body_length=max_body_length, max_connections=max_connections,
                             max_held_bytes=max_held_bytes)
    notices: list[CaptureNotice] = []
    tap: Tap = engine.tap
    if progress is not None:
        def tap(ts: float, data: bytes, wire_length: int, linktype: int | None = None) -> None:
            engine.tap(ts, data, wire_length, linktype)
            progress(ts, data, wire_length)

    for item in capture_items(path, reader, ports, tls_ports, tap, several=bool(types)):
        if isinstance(item, TcpSegment):
            engine.segment(item)
        else:
            notices.append(item)
    engine.finish()
    return engine.summary, notices


# A pcapng file that describes an interface of another link type only after its first frame: its copy was
# begun as a classic pcap, of one link type
ONE_LINKTYPE: Final = ("redact writes a pcap of one link type when the file describes one before its first "
                       "frame, and this file describes another after it")


class Tap(Protocol):
    """A frame tap that takes the frame's link type too, when it is not the capture's."""

    def __call__(self, ts: float, data: bytes, wire_length: int, linktype: int | None = None, /) -> None: ...


def copy_writer(path: str, out: BinaryIO, linktype: int, types: list[int]) -> PcapWriter:
    """The writer of the copy of the capture file ``path`` (libpcap gave ``linktype``, its first): a pcapng file
    of its interfaces' link types when they are several (``types``, :func:`linktypes_of_several`'s), else a
    classic pcap file; to the nanosecond when the file's times are read so
    (:func:`~dcpctl.sources.pcap.nanosecond_times`)."""
    nanos = nanosecond_times(path)
    if types:
        return PcapngWriter(out, types, OUTPUT_SNAPLEN, nanos=nanos)
    return PcapWriter(out, linktype, OUTPUT_SNAPLEN, nanos=nanos)


def linktypes_of_several(path: str) -> list[int]:
    """The link types of a pcapng file's interfaces, when they are several (its copy is then a pcapng file of
    them); [] otherwise."""
    types = interface_types(path)
    return types if len(set(types)) > 1 else []


def capture_items(path: str, reader: Any, ports: frozenset[int], tls_ports: frozenset[int], tap: Tap, *,
           several: bool) -> Iterator[TcpSegment | CaptureNotice]:
    """A file's segments and notices, every frame through ``tap``. Standard input and a compressed file are
    opened once: read by the reader their link type came from; a file is read again by read_segments, which
    reads a short snap length's records whole, a pcapng file of ``several`` link types on where libpcap
    stops, each frame's link type given to the tap, and one of nanosecond times (compressed too) to the
    nanosecond."""
    if several:
        return read_segments(path, ports, tls_ports, typed_tap=tap, exact=True)
    if streamed(path) or (compression(path) is not None and not nanosecond_times(path)):
        return reader_segments(reader, ports, tls_ports, tap=tap, unmixed=ONE_LINKTYPE)
    if compression(path) is not None:
        reader.close()  # its decompressor stopped: read_segments decompresses the file in this process
    return read_segments(path, ports, tls_ports, tap=tap, unmixed=ONE_LINKTYPE, exact=True)


class Capture:
    """The engine that follows one capture across the files of a ring: a file whose first frame continues
    the capture before it (``pcap.Ring``), with the same link types, keeps the engine, so a message the
    rotation cut is redacted whole; any other file ends it (``finish(last=False)``) and gets a new one,
    ``make(kind)``. One decision for :func:`redact_captures` and ``redactjobs``' workers alike."""

    def __init__(self, make: Callable[[tuple[int, ...]], CaptureRedactor]) -> None:
        self.make = make
        self.engine: CaptureRedactor | None = None
        self.kind: tuple[int, ...] = ()  # the link types of the capture the engine follows
        self.ring = Ring()

    def frame(self, frames: FileFrames, ts: float, kind: tuple[int, ...]) -> CaptureRedactor:
        """The engine of a frame of the file ``frames`` counts (it is counted), its file of link types ``kind``."""
        if frames.first is None:  # the file's first frame: does it continue the capture before?
            frames.first = ts
            engine = self.engine
            if not (self.ring.begins(frames) and engine is not None and self.kind == kind):
                if engine is not None:
                    engine.finish(last=False)
                self.engine, self.kind = self.make(kind), kind
        frames.last = ts
        frames.count += 1
        assert self.engine is not None
        return self.engine


def redact_captures(paths: list[str], output: Callable[[str], AbstractContextManager[BinaryIO]],
                    redactor: Redactor, options: DecodeOptions, ports: frozenset[int],
                    tls_ports: frozenset[int] = TLS_PORTS, *, keep_unparsed: bool = False,
                    max_body_length: int = DEFAULT_MAX_BODY_LENGTH, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                    max_held_bytes: int = DEFAULT_MAX_HELD_BYTES,
                    progress: Callable[[str], Callable[[float, bytes, int], None] | None] | None = None
                    ) -> tuple[Summary, list[CaptureNotice]]:
    """Redact several capture files, each into its own output (``output(path)``, entered as the file begins
    and left once its last frame is written). ``progress(path)``: called before the file is opened, gives
    the tap that sees its frames. A file that continues the one before (``pcap.Ring``: a
    ring of files) with the same link type continues its capture: its connections are followed on, so a
    message the rotation cut is redacted whole, its frames written to the files they came from. The
    notices name their files."""
    summary = Summary(counts=redactor.counts)
    notices: list[CaptureNotice] = []
    capture = Capture(lambda kind: CaptureRedactor(redactor, None, kind[0], options, ports, tls_ports,
                                                   keep_unparsed=keep_unparsed, max_body_length=max_body_length,
                                                   max_connections=max_connections,
                                                   max_held_bytes=max_held_bytes, summary=summary))
    open_files: deque[tuple[PcapWriter, ExitStack]] = deque()  # oldest first; the last is being read

    def close_written() -> None:
        """Leaves the outputs all of whose frames are out (frames leave in order: the queue's head tells)."""
        engine = capture.engine
        while len(open_files) > 1 and (engine is None or not engine.queue
                                       or engine.queue[0].writer is not open_files[0][0]):
            open_files.popleft()[1].close()

    try:
        for path in paths:
            close_written()
            watched = progress(path) if progress is not None else None
            reader = open_offline(path)
            types = linktypes_of_several(path)
            linktype = int(reader.datalink())
            stack = ExitStack()
            writer = copy_writer(path, stack.enter_context(output(path)), linktype, types)
            open_files.append((writer, stack))
            frames = FileFrames()

            def tap(ts: float, data: bytes, wire_length: int, linktype: int | None = None,
                    kind: tuple[int, ...] = tuple(types) or (linktype,), writer: PcapWriter = writer,
                    watched: Callable[[float, bytes, int], None] | None = watched, frames: FileFrames = frames
                    ) -> None:
                engine = capture.frame(frames, ts, kind)
                engine.writer = writer  # its frames go to the output of the file they came from
                engine.tap(ts, data, wire_length, linktype)
                if watched is not None:
                    watched(ts, data, wire_length)

            for item in capture_items(path, reader, ports, tls_ports, tap, several=bool(types)):
                if isinstance(item, TcpSegment):
                    assert capture.engine is not None  # its frame came first
                    capture.engine.segment(item)
                    if len(open_files) > 1:
                        close_written()
                else:
                    notices.append(named(item, path))
            capture.ring.ends(frames)
        if capture.engine is not None:
            capture.engine.finish()
        elif redactor.addresses is not None:
            summary.counts.update(redactor.addresses.counts())
    finally:
        while open_files:
            open_files.popleft()[1].close()
    return summary, notices
