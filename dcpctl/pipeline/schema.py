"""The Parquet schema of ``analyze``: one row per message, columns typed from the field catalogue.

The columns are the record fields an analysis needs, typed from the declarations through the field
catalogue (``job.SPARK_TYPES``: u8/u16 int, u32 bigint, u64 bigint holding the 64 bits as the JVM's DCP
clients do), what the capture and the connection tracker add, and a few columns derived while decoding.
``--records`` adds ``record``, the whole JSON record as ``dcpctl decode --format jsonl`` prints it (values
included, so the dataset is then as sensitive as the capture).

:class:`Rows` builds the rows. Most messages of a big capture are plain stream items; for those the
columns come straight from the header, the extras and :func:`item_key`, without building the JSON record
(the record would cost more than everything else together), and they are not even tuples: the row's numbers
are packed into one ``struct`` record (:data:`PLAIN_ROW`) and its key and frames kept in lists, which ``job``
turns into Arrow columns a whole batch at a time (a tuple per row and then a column per field cost about a
microsecond a row more). Anything else goes through the record, as a tuple. A test holds the two ways to
the same Arrow row for every message of the test captures. Pure: bytes, lists and tuples; the Arrow and
Spark types are made from :data:`COLUMNS` in ``job``.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from dcpctl.dcp.session import ConnectionTracker
from dcpctl.protocol.constants import Opcode
from dcpctl.protocol.diagnostic import Diagnostic
from dcpctl.protocol.fields import catalogue
from dcpctl.protocol.message import Message, PlainItem, item_key
from dcpctl.protocol.registry import DOCUMENT_ITEM_OPCODES

# record fields kept as columns, in column order (types from the catalogue)
RECORD_COLUMNS: Final = ("ts", "connection", "direction", "frames", "offset", "magic", "opcode", "vbucket",
                         "stream_id", "opaque", "status", "cas", "datatype", "collection_id", "key", "by_seqno",
                         "rev_seqno", "snap_start_seqno", "snap_end_seqno", "snapshot_flags", "start_seqno",
                         "end_seqno", "vbucket_uuid", "rollback_seqno", "bytes_to_ack", "stream_end_status",
                         "total_body_length", "stream_vbucket", "latency_ms", "request_offset")
# columns that are not declared fields: (name, type, meaning)
EXTRA_COLUMNS: Final = (
    ("frames", "list[int]", "the capture frames the message came from"),
    ("stream_vbucket", "u16", "the vbucket of the stream a pushed message belongs to (the tracker's)"),
    ("latency_ms", "float", "a response's time since its request (the tracker's)"),
    ("request_offset", "int", "a response: the offset of its request in the other direction (the tracker's)"),
    ("sequence", "int", "the message's position among its connection's messages, both directions, in capture "
                        "order (from 0): ORDER BY connection, sequence replays a connection"),
    ("value_length", "u32", "bytes of value on the wire"),
    ("snapshot_start_seqno", "u64", "items: start of the snapshot marker before them in their stream"),
    ("snapshot_end_seqno", "u64", "items: end of that snapshot"),
    ("unacked_bytes", "u32", "the connection's unacknowledged bytes after this message (flow control: "
                             "the producer's pushes counted, the consumer's buffer acks subtracted)"),
    ("buffer_size", "u32", "the connection_buffer_size negotiated so far on the connection, if any"),
    ("previous_seqno", "u64", "items: the seqno of the item before it on the same connection and vbucket, in "
                              "stream order (streams reopened included)"),
    ("blocked_ms", "float", "a pushed message sent after the producer's window was full: how long it was full "
                            "(the stall this message ends)"),
    ("diagnostics", "list[diagnostic]", "the message's diagnostics: name, severity, message"),
)
RECORD_COLUMN: Final = ("record", "str", "with --records: the whole JSON record, as decode --format jsonl "
                                         "prints it")


def column_types(*, records: bool = False) -> list[tuple[str, str]]:
    """(name, catalogue type) of every column, in order."""
    known = {f.name: f.type for f in catalogue()}
    extra = {name: kind for name, kind, _ in EXTRA_COLUMNS}
    out = [(name, known.get(name) or extra[name]) for name in RECORD_COLUMNS]
    out += [(name, kind) for name, kind, _ in EXTRA_COLUMNS if name not in RECORD_COLUMNS]
    if records:
        out.append(RECORD_COLUMN[:2])
    return out


COLUMNS: Final = column_types()
# Columns of unsigned 64-bit values, stored as signed 64-bit integers with the same bits (see job.SPARK_TYPES)
U64_COLUMNS: Final = frozenset(name for name, kind in COLUMNS if kind == "u64")
# A plain item's row as packed by the hot path: (column or what it is, struct code). Where a column can be
# absent: collection_id, buffer_size and stream_vbucket are -1, blocked_ms is NaN; the snapshot and previous
# seqno columns, which can hold any 64-bit value, are absent unless ``flags`` has HAS_SNAPSHOT or HAS_PREVIOUS.
# ``kind`` indexes :attr:`Gathered.kinds` (connection, magic, opcode).
PLAIN_FIELDS: Final = (("ts", "d"), ("offset", "q"), ("cas", "Q"), ("by_seqno", "Q"), ("rev_seqno", "Q"),
                       ("snapshot_start_seqno", "Q"), ("snapshot_end_seqno", "Q"), ("previous_seqno", "Q"),
                       ("sequence", "q"), ("unacked_bytes", "q"), ("buffer_size", "q"), ("collection_id", "q"),
                       ("blocked_ms", "d"), ("opaque", "I"), ("total_body_length", "I"), ("value_length", "I"),
                       ("kind", "I"), ("stream_vbucket", "i"), ("vbucket", "H"), ("datatype", "B"), ("flags", "B"))
PLAIN_ROW: Final = struct.Struct("<" + "".join(code for _, code in PLAIN_FIELDS))
HAS_SNAPSHOT: Final = 1
HAS_PREVIOUS: Final = 2
SNAPSHOT_MARKER: Final = int(Opcode.DCP_SNAPSHOT_MARKER)
_NO_SNAPSHOT: Final = (0, 0)  # packed, with HAS_SNAPSHOT unset
_ABSENT_SNAPSHOT: Final = (None, None)
_NAN: Final = math.nan
_PACK: Final = PLAIN_ROW.pack
SERVER_TO_CLIENT: Final = "server>client"


@dataclass
class Gathered:
    """Rows gathered since the last :meth:`Rows.take`, in two kinds. ``packed``: the plain items' rows
    (:data:`PLAIN_ROW` each) with their ``keys`` and ``frames``; ``rows``: every other message's row, a tuple
    in :func:`column_types` order, and ``before[i]`` the number of plain rows that came before ``rows[i]``
    (so the rows' order can be rebuilt). ``kinds``: (connection, magic, opcode) by plain rows' ``kind``."""

    packed: bytes = b""
    keys: list[str | None] = field(default_factory=list)
    frames: list[list[int]] = field(default_factory=list)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    before: list[int] = field(default_factory=list)
    kinds: list[tuple[str, str, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys) + len(self.rows)


class Rows:
    """Rows of one task's messages (see :class:`Gathered`); :meth:`take` hands over those gathered.

    What a row needs from earlier messages (its place in the connection, the snapshot of its stream, the item
    before it, the flow-control window) is kept per connection in a :class:`_Connection`."""

    def __init__(self, *, records: bool = False) -> None:
        self.records = records
        self.rows: list[tuple[Any, ...]] = []
        self.before: list[int] = []
        self.packed = bytearray()  # one object for the task: connections append to it, take() empties it
        self.keys: list[str | None] = []
        self.frames: list[list[int]] = []
        self.kinds: list[tuple[str, str, str]] = []
        self._kind_of: dict[tuple[str, str, str], int] = {}
        self._connections: dict[str, _Connection] = {}

    def __len__(self) -> int:
        return len(self.keys) + len(self.rows)

    def take(self) -> Gathered:
        gathered = Gathered(bytes(self.packed), self.keys, self.frames, self.rows, self.before, list(self.kinds))
        self.packed.clear()
        self.keys, self.frames, self.rows, self.before = [], [], [], []
        for connection in self._connections.values():
            connection.keys, connection.frames = self.keys, self.frames
        return gathered

    def kind(self, connection: str, magic: str, opcode: str) -> int:
        """The plain rows' ``kind`` of (connection, magic, opcode)."""
        key = (connection, magic, opcode)
        found = self._kind_of.get(key)
        if found is None:
            found = self._kind_of[key] = len(self.kinds)
            self.kinds.append(key)
        return found

    def general(self, row: tuple[Any, ...]) -> None:
        """A row that is not a plain item's."""
        self.before.append(len(self.keys))
        self.rows.append(row)

    def connection(self, label: str) -> _Connection:
        found = self._connections.get(label)
        if found is None:
            found = self._connections[label] = _Connection(self, label)
        return found

    def items_of(self, label: str) -> Any:
        """The capture decoder's item sink for a connection (see :meth:`_Connection.item`)."""
        if self.records:
            raise ValueError("rows with records need every message decoded and annotated")
        return self.connection(label).item

    def add(self, msg: Message, unacked: int, buffer_size: int | None) -> None:
        """A message that came out of the capture decoder (annotated)."""
        context = msg.context
        fast = None if self.records or context is None else item_key(msg)
        if fast is None:
            record = msg.record()
            row = self.connection(str(record.get("connection"))).from_record(msg, record, unacked, buffer_size)
            if self.records:
                row += (orjson.dumps(record).decode(),)
            self.general(row)
            return
        first, last = context  # type: ignore[misc]
        self.connection(first["connection"]).add_item(
            msg.header, msg.offset, fast, msg.body_end - msg.value_offset, msg.diagnostics, first["ts"],
            first["direction"], first["frames"], last.get("stream_vbucket"), last.get("latency_ms"), unacked,
            buffer_size)


class _Connection:
    """One connection's rows and what they need from its earlier messages."""

    __slots__ = ("frames", "full_since", "keys", "kinds", "label", "last_seqno", "out", "packed", "sequence",
                 "snapshots", "unacked")

    def __init__(self, out: Rows, label: str) -> None:
        self.out = out
        self.packed, self.keys, self.frames = out.packed, out.keys, out.frames
        self.kinds: dict[str, int] = {}  # opcode name -> the plain rows' kind
        self.label = label
        self.sequence = -1  # the last message's place in the connection
        self.snapshots: dict[int, tuple[int, int]] = {}  # opaque -> the stream's marker range
        self.last_seqno: dict[int, int] = {}  # vbucket -> the last item's seqno
        self.unacked = 0  # after the last message
        self.full_since: float | None = None  # when a push filled the flow-control window, if it is full

    def item(self, item: PlainItem, offset: int, ts: float, _connection: str, frames: list[int],
             stream_vbucket: int | None, tracker: ConnectionTracker, _buf: bytes) -> None:
        """A plain item the capture decoder read in place and handed over unannotated (its ``items`` sink),
        packed (:data:`PLAIN_ROW`): the row is the one :meth:`add_item` makes of the same message decoded and
        annotated (a test holds them equal). The hot path of a big capture: :meth:`add_item` and
        :meth:`blocked`, written out."""
        _, header, _, _, magic, opcode, collection_id, key, by_seqno, rev_seqno, value_offset = item
        _, _, _, _, datatype, vbucket, total, opaque, cas = header
        self.sequence = sequence = self.sequence + 1
        last_seqno = self.last_seqno
        where = vbucket if stream_vbucket is None else stream_vbucket
        previous = last_seqno.get(where)
        last_seqno[where] = by_seqno
        unacked, buffer_size = tracker.unacked, tracker.buffer_size
        blocked = _NAN
        full_since = self.full_since
        if unacked > self.unacked and full_since is not None:
            blocked = round((ts - full_since) * 1000, 3)
            full_since = None
        if buffer_size and unacked >= buffer_size and full_since is None:
            full_since = ts
        self.unacked, self.full_since = unacked, full_since
        kind = self.kinds.get(opcode)
        if kind is None:
            kind = self.kinds[opcode] = self.out.kind(self.label, magic, opcode)
        snapshot = self.snapshots.get(opaque)
        flags = 0 if previous is None else HAS_PREVIOUS
        if snapshot is None:
            snapshot = _NO_SNAPSHOT
        else:
            flags |= HAS_SNAPSHOT
        self.packed += _PACK(ts, offset, cas, by_seqno, rev_seqno, snapshot[0], snapshot[1], previous or 0, sequence,
                             unacked, -1 if buffer_size is None else buffer_size,
                             -1 if collection_id is None else collection_id, blocked, opaque, total,
                             item[0] - value_offset, kind, -1 if stream_vbucket is None else stream_vbucket, vbucket,
                             datatype, flags)
        self.keys.append(key)
        self.frames.append(frames)

    def add_item(self, header: tuple[int, ...], offset: int, fast: tuple[str, str, int | None, str | None, int, int],
                 value_length: int, diagnostics: list[Diagnostic] | tuple[()], ts: float, direction: str,
                 frames: list[int], stream_vbucket: int | None, latency_ms: float | None, unacked: int,
                 buffer_size: int | None) -> None:
        magic, opcode, collection_id, key, by_seqno, rev_seqno = fast
        _, _, _, _, datatype, vbucket, total, opaque, cas = header
        self.sequence += 1
        snapshot = self.snapshots.get(opaque) or _ABSENT_SNAPSHOT
        where = vbucket if stream_vbucket is None else stream_vbucket
        previous = self.last_seqno.get(where)
        self.last_seqno[where] = by_seqno
        self.out.general((
            ts, self.label, direction, frames, offset, magic, opcode, vbucket, None, opaque, None, cas, datatype,
            collection_id, key, by_seqno, rev_seqno, None, None, None, None, None, None, None, None, None, total,
            stream_vbucket, latency_ms, None, self.sequence, value_length, snapshot[0], snapshot[1],
            unacked, buffer_size, previous, self.blocked(ts, unacked, buffer_size),
            [(d.name, d.severity, d.message) for d in diagnostics] if diagnostics else []))

    def blocked(self, ts: float, unacked: int, buffer_size: int | None) -> float | None:
        """Flow-control bookkeeping: a message that raised the unacknowledged count was pushed; if the
        window was full before it, it ends a stall that lasted from the push that filled the window (reference
        8.1: the producer stops while its outstanding bytes are at least the window; an ack lets it go on,
        the push after it shows when it did)."""
        blocked = None
        full_since = self.full_since
        if unacked > self.unacked and full_since is not None:
            blocked = round((ts - full_since) * 1000, 3)
            full_since = None
        if buffer_size and unacked >= buffer_size and full_since is None:
            full_since = ts
        self.unacked, self.full_since = unacked, full_since
        return blocked

    def from_record(self, msg: Message, record: dict[str, Any], unacked: int, buffer_size: int | None
                    ) -> tuple[Any, ...]:
        get = record.get
        snapshot = previous = None
        if not msg.is_response:
            if msg.opcode == SNAPSHOT_MARKER:
                start, end = get("snap_start_seqno"), get("snap_end_seqno")
                if isinstance(start, int) and isinstance(end, int):
                    self.snapshots[msg.opaque] = (start, end)
            elif msg.opcode in DOCUMENT_ITEM_OPCODES and isinstance(get("by_seqno"), int):
                snapshot = self.snapshots.get(msg.opaque)
                vbucket = get("stream_vbucket")
                where = int(get("vbucket", 0) if vbucket is None else vbucket)
                previous = self.last_seqno.get(where)
                self.last_seqno[where] = int(get("by_seqno", 0))
        self.sequence += 1
        row = [get(name) for name in RECORD_COLUMNS]
        row += [self.sequence, msg.body_end - msg.value_offset, snapshot[0] if snapshot else None,
                snapshot[1] if snapshot else None, unacked, buffer_size, previous,
                self.blocked(float(get("ts") or 0.0), unacked, buffer_size),
                [(d["name"], d["severity"], d["message"]) for d in record["diagnostics"]]]
        return tuple(row)
