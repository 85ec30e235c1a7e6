"""TCP reassembly per connection and direction (pure: segments in, ordered bytes and events out).

Theory of operation. A connection is identified by its 4-tuple, with the server side being the one on a
decoded port. Each direction keeps ``next`` (the sequence number of the next byte to deliver) and a map of
out-of-order segments. A segment at ``next`` is delivered at once and then any buffered ones that
follow it; a segment before ``next`` is a retransmission and only its new bytes, if any, are delivered
(a retransmitted byte that differs from the delivered one is reported once as ``overlap_conflict``); a
segment after ``next`` is buffered. Sequence arithmetic is modulo 2^32 (serial-number comparison), so a
wrap is invisible. When the buffer would exceed ``max_buffered_bytes`` per direction, or at the end of the
capture, the hole before the earliest buffered segment is declared a ``gap`` of exactly its size and
delivery resumes after it: the consumer resynchronises there.

Offsets are positions in the direction's byte stream (0 = the first byte after the SYN, or the first byte
seen in a capture that starts mid-connection); a gap advances them by its length, so they stay stream
positions. Invariants: every byte is delivered at most once, in order; the bytes buffered per direction
never exceed the cap; connections closed both ways (or reset) are forgotten, and at most ``max_connections``
are tracked (the least recently active is dropped first, announced as ``connection_limit``); each forgotten
connection ends with a ``connection_end`` event, after which its consumer may forget it too. Of a forgotten
connection only its generation number is kept (for the ``#n`` of a reused 4-tuple), for the most recent
``max_connections`` of them.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from dcpctl.sources.pcap import TcpSegment

# Out-of-order data held per direction: 16 MiB covers a window of several seconds on a 10 Gb/s link;
# more than that waiting for one missing segment means the segment was not captured.
DEFAULT_MAX_BUFFERED: Final = 16 * 1024 * 1024
# Connections tracked at once: a node has at most a few thousand KV connections, a client fewer; a capture
# with more open at once is a scan or a SYN flood, and each tracked connection costs about a kilobyte.
DEFAULT_MAX_CONNECTIONS: Final = 65536
FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10  # TCP header flag bits (RFC 9293), not DCP codes
_HALF: Final = 1 << 31
_MOD: Final = 1 << 32


def _diff(a: int, b: int) -> int:
    """a - b in sequence space (-2^31 .. 2^31)."""
    d = (a - b) % _MOD
    return d - _MOD if d >= _HALF else d


@dataclass(frozen=True, slots=True)
class ConnectionId:
    client: tuple[str, int]
    server: tuple[str, int]
    generation: int = 0

    def label(self) -> str:
        def side(endpoint: tuple[str, int]) -> str:
            host = f"[{endpoint[0]}]" if ":" in endpoint[0] else endpoint[0]
            return f"{host}:{endpoint[1]}"

        suffix = f"#{self.generation}" if self.generation else ""
        return f"{side(self.client)} > {side(self.server)}{suffix}"


@dataclass(frozen=True, slots=True)
class StreamData:
    conn: ConnectionId
    from_client: bool
    ts: float
    frames: tuple[int, ...]
    offset: int
    data: bytes


@dataclass(frozen=True, slots=True)
class StreamEvent:
    conn: ConnectionId
    from_client: bool | None
    ts: float
    frame: int
    name: str
    message: str
    offset: int | None = None
    length: int = 0


Event = StreamData | StreamEvent


@dataclass
class _Direction:
    next: int | None = None  # sequence number of the next byte to deliver
    isn: int | None = None
    offset: int = 0  # stream offset of ``next``
    # out-of-order segments by the stream offset of their first byte (offsets do not wrap, sequence numbers
    # do), and a heap of those offsets, so the earliest is found at once (stale entries are skipped)
    pending: dict[int, tuple[bytes, float, int]] = field(default_factory=dict)  # offset -> (data, ts, frame)
    heap: list[int] = field(default_factory=list)
    pending_bytes: int = 0
    fin: bool = False
    conflict_reported: bool = False
    # the last delivered bytes (at least RECENT_BYTES of them, at most twice that), to compare retransmissions
    recent: bytearray = field(default_factory=bytearray)

    def earliest(self) -> int | None:
        """The stream offset of the earliest buffered segment."""
        heap, pending = self.heap, self.pending
        while heap and heap[0] not in pending:
            heapq.heappop(heap)
        return heap[0] if heap else None


@dataclass
class _Connection:
    conn: ConnectionId
    directions: dict[bool, _Direction]


RECENT_BYTES: Final = 65536  # delivered bytes kept to check retransmitted copies against


class Reassembler:
    """See the module docstring."""

    def __init__(self, server_ports: frozenset[int] = frozenset({11210}),
                 max_buffered_bytes: int = DEFAULT_MAX_BUFFERED,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self.server_ports = server_ports
        self.max_buffered = max_buffered_bytes
        self.max_connections = max_connections
        self.connections: OrderedDict[tuple[tuple[str, int], tuple[str, int]], _Connection] = OrderedDict()
        # the last generation of 4-tuples no longer tracked, the most recent max_connections of them
        self.generations: OrderedDict[tuple[tuple[str, int], tuple[str, int]], int] = OrderedDict()

    def _sides(self, seg: TcpSegment) -> tuple[tuple[str, int], tuple[str, int], bool]:
        """(client, server, from_client)."""
        if seg.dst[1] in self.server_ports and seg.src[1] not in self.server_ports:
            return seg.src, seg.dst, True
        if seg.src[1] in self.server_ports and seg.dst[1] not in self.server_ports:
            return seg.dst, seg.src, False
        if seg.flags & SYN and not seg.flags & ACK:  # a SYN without ACK comes from the client
            return seg.src, seg.dst, True
        if seg.src[1] < seg.dst[1]:
            return seg.dst, seg.src, False
        return seg.src, seg.dst, True

    def locate(self, seg: TcpSegment) -> tuple[tuple[tuple[str, int], tuple[str, int]], bool, ConnectionId | None, int]:
        """Where a segment's payload belongs, before :meth:`push`: its 4-tuple (client, server), its direction,
        the connection followed so far (None when the segment opens a new one) and the stream offset of its
        first payload byte (0 for a direction not seen yet). A redactor writes bytes back to the frames that
        carried them with it; a retransmission's offset lies before the bytes already delivered."""
        client, server, from_client = self._sides(seg)
        key = (client, server)
        state = self.connections.get(key)
        if state is None:
            return key, from_client, None, 0
        direction = state.directions[from_client]
        if seg.flags & SYN and direction.isn is not None and direction.isn != seg.seq:
            return key, from_client, None, 0  # a new connection on the same 4-tuple
        if direction.next is None:
            return key, from_client, state.conn, 0
        start = (seg.seq + 1) % _MOD if seg.flags & SYN else seg.seq
        return key, from_client, state.conn, direction.offset + _diff(start, direction.next)

    def stream_offset(self, key: tuple[tuple[str, int], tuple[str, int]], from_client: bool, seq: int) -> int | None:
        """The stream offset a sequence number of one direction names (an acknowledgement, a SACK edge), None
        while that direction has delivered nothing."""
        state = self.connections.get(key)
        direction = state.directions[from_client] if state is not None else None
        if direction is None or direction.next is None:
            return None
        return direction.offset + _diff(seq, direction.next)

    def push(self, seg: TcpSegment) -> list[Event]:
        client, server, from_client = self._sides(seg)
        key = (client, server)
        out: list[Event] = []
        state = self.connections.get(key)
        if state is not None and seg.flags & SYN:
            direction = state.directions[from_client]
            if direction.isn is not None and direction.isn != seg.seq:
                out += self._retire(key, seg, "connection_reused",
                                    "the 4-tuple is reused by a new connection (new initial sequence number)")
                state = None
        if state is None:
            if not seg.flags & SYN and not seg.payload and not seg.truncated:
                return out  # a bare ACK, FIN or RST (the last ACK of a closed connection): nothing to follow
            if len(self.connections) >= self.max_connections:
                oldest = next(iter(self.connections))
                out += self._retire(oldest, seg, "connection_limit",
                                    f"more than {self.max_connections} connections at once: the least recently "
                                    "active one is no longer followed")
            generation = self.generations.pop(key, -1) + 1
            state = _Connection(ConnectionId(client, server, generation), {True: _Direction(), False: _Direction()})
            self.connections[key] = state
            if seg.flags & SYN:
                out.append(StreamEvent(state.conn, None, seg.ts, seg.frame, "connection_open", "SYN seen"))
            else:
                out.append(StreamEvent(state.conn, None, seg.ts, seg.frame, "midstream",
                                       "the capture starts in the middle of this connection"))
        else:
            self.connections.move_to_end(key)
        direction = state.directions[from_client]
        if seg.flags & SYN:
            direction.isn = seg.seq
            direction.next = (seg.seq + 1) % _MOD
        elif direction.next is None:
            direction.next = seg.seq
            if state.directions[not from_client].isn is not None:
                # the other side's SYN was seen, this side's not (its SYN-ACK lost): its first bytes seen may
                # not be its first, and nothing would say so
                out.append(StreamEvent(state.conn, from_client, seg.ts, seg.frame, "midstream",
                                       "the capture missed this side's SYN: it is followed from its first "
                                       "bytes seen"))
        if seg.payload or seg.truncated:
            out += self._data(state, from_client, direction, seg)
        if seg.flags & FIN and not direction.fin:
            direction.fin = True
            out.append(StreamEvent(state.conn, from_client, seg.ts, seg.frame, "connection_closed", "FIN"))
        if seg.flags & RST:
            out += self._retire(key, seg, "connection_reset", "RST")
        elif all(d.fin for d in state.directions.values()):
            out += self._retire(key, seg, None, "")
        return out

    def _data(self, state: _Connection, from_client: bool, d: _Direction, seg: TcpSegment) -> list[Event]:
        out: list[Event] = []
        assert d.next is not None
        payload = seg.payload
        # data on a SYN (TCP Fast Open) starts after the sequence number the SYN itself takes
        ahead = _diff((seg.seq + 1) % _MOD if seg.flags & SYN else seg.seq, d.next)
        if ahead < 0:  # retransmission or overlap: keep only what is new
            old = payload[:-ahead]
            if not d.conflict_reported and old and d.recent:
                have = d.recent[len(d.recent) + ahead:][:len(old)] if -ahead <= len(d.recent) else b""
                if have and have != old[:len(have)]:
                    d.conflict_reported = True
                    out.append(StreamEvent(state.conn, from_client, seg.ts, seg.frame, "overlap_conflict",
                                           "a retransmitted segment differs from the bytes already delivered; "
                                           "the first copy was kept"))
            payload = payload[-ahead:]
            ahead = 0
            if not payload:
                if seg.truncated:
                    out += self._truncated(state, from_client, d, seg, 0)
                return out
        if ahead == 0:
            out.append(self._deliver(state, from_client, d, payload, seg.ts, (seg.frame,)))
            if seg.truncated:
                out += self._truncated(state, from_client, d, seg, seg.wire_length - len(seg.payload))
            out += self._drain(state, from_client, d)
            return out
        at = d.offset + ahead
        held = d.pending.get(at)
        if held is None:
            heapq.heappush(d.heap, at)
        if held is None or len(held[0]) < len(payload):
            d.pending_bytes += len(payload) - (len(held[0]) if held is not None else 0)
            d.pending[at] = (payload, seg.ts, seg.frame)
        while d.pending_bytes > self.max_buffered and d.pending:
            out += self._gap(state, from_client, d, seg, "reassembly_overflow")
        return out

    def _truncated(self, state: _Connection, from_client: bool, d: _Direction, seg: TcpSegment,
                   missing: int) -> list[Event]:
        if missing <= 0:
            return []
        assert d.next is not None
        event = StreamEvent(state.conn, from_client, seg.ts, seg.frame, "snaplen_truncated",
                            f"frame {seg.frame} was cut by the snap length: {missing} bytes missing",
                            d.offset, missing)
        d.next = (d.next + missing) % _MOD
        d.offset += missing
        return [event]

    def _deliver(self, state: _Connection, from_client: bool, d: _Direction, data: bytes, ts: float,
                 frames: tuple[int, ...]) -> StreamData:
        assert d.next is not None
        event = StreamData(state.conn, from_client, ts, frames, d.offset, data)
        d.next = (d.next + len(data)) % _MOD
        d.offset += len(data)
        recent = d.recent
        recent += data
        if len(recent) > 2 * RECENT_BYTES:  # trimmed now and then: appending stays cheap
            del recent[:-RECENT_BYTES]
        return event

    def _drain(self, state: _Connection, from_client: bool, d: _Direction) -> list[Event]:
        """Deliver the buffered segments that now start at or before ``next``, earliest first."""
        out: list[Event] = []
        while (at := d.earliest()) is not None and at <= d.offset:
            heapq.heappop(d.heap)
            data, ts, frame = d.pending.pop(at)
            d.pending_bytes -= len(data)
            new = data[d.offset - at:]
            if new:
                out.append(self._deliver(state, from_client, d, new, ts, (frame,)))
        return out

    def _gap(self, state: _Connection, from_client: bool, d: _Direction, seg: TcpSegment | None,
             name: str = "gap") -> list[Event]:
        """Declare the hole before the earliest buffered segment and deliver what follows it."""
        assert d.next is not None
        first = d.earliest()
        assert first is not None
        missing = first - d.offset
        _, ts, frame = d.pending[first]
        why = ("the out-of-order buffer is full" if name == "reassembly_overflow"
               else "the capture never had them")
        event = StreamEvent(state.conn, from_client, ts, frame, name,
                            f"{missing} bytes missing at stream offset {d.offset} ({why})", d.offset, missing)
        d.next = (d.next + missing) % _MOD
        d.offset = first
        return [event, *self._drain(state, from_client, d)]

    def _retire(self, key: tuple[tuple[str, int], tuple[str, int]], seg: TcpSegment, name: str | None,
                message: str) -> list[Event]:
        """Forget a connection: its holes become gaps, its end is announced (``connection_end``, after the
        reason if any), and only its generation number is kept, to tell a reuse of the 4-tuple apart."""
        state = self.connections.pop(key, None)
        if state is None:
            return []
        out: list[Event] = []
        for from_client, d in state.directions.items():
            while d.pending:
                out += self._gap(state, from_client, d, seg)
        if name is not None:
            out.append(StreamEvent(state.conn, None, seg.ts, seg.frame, name, message))
        out.append(StreamEvent(state.conn, None, seg.ts, seg.frame, "connection_end", ""))
        generations = self.generations
        generations[key] = state.conn.generation
        if len(generations) > self.max_connections:
            generations.popitem(last=False)
        return out

    def flush(self) -> list[Event]:
        """End of the capture: holes that never filled become gaps."""
        out: list[Event] = []
        for state in self.connections.values():
            for from_client, d in state.directions.items():
                while d.pending:
                    out += self._gap(state, from_client, d, None)
        self.connections.clear()
        return out
