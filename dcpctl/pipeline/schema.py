"""The Parquet schema of ``analyze``: one row per message, columns typed from the field catalogue.

The columns are record fields an analysis needs, named and typed by the field catalogue
(``protocol/fields.py``; ``job.SPARK_TYPES`` maps its types: u8/u16 int, u32 bigint, u64 bigint holding the 64
bits as the JVM's DCP clients do), then the columns ``analyze`` derives while decoding (:data:`DERIVED_COLUMNS`,
declared here and nowhere else). ``--records`` adds ``record``, the whole JSON record as ``dcpctl decode
--format jsonl`` prints it (values included, so the dataset is then as sensitive as the capture).

:class:`Rows` makes each message the capture decoder gives (one read of its bytes, :func:`decode`'s) into a
row: a tuple in :data:`COLUMNS` order, which ``job`` turns into Arrow columns a batch at a time. A plain
stream item's record columns are read from the message itself, by a function made per message shape from
the column names (:func:`_item_row`: header fields by the header grammar's names, extras by the layout's,
the capture's context by its keys), so that millions of items never build their JSON record; any other
message's come from its record, by name. A test holds the two to the same row for every message of its
captures. Pure: messages in, tuples out; the Arrow and Spark types are made from :data:`COLUMNS` in ``job``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from dcpctl.dcp.observed import Observed
from dcpctl.protocol.constants import Opcode, OsoFlag
from dcpctl.protocol.diagnostic import Diagnostic
from dcpctl.protocol.fields import catalogue
from dcpctl.protocol.grammar import request_header
from dcpctl.protocol.message import Message, item_key
from dcpctl.protocol.registry import SEQNO_FIELDS
from dcpctl.render.record import record as record_of

# record fields kept as columns, in column order (named and typed by the catalogue)
RECORD_COLUMNS: Final = ("ts", "connection", "direction", "frames", "offset", "magic", "opcode", "vbucket",
                         "stream_id", "opaque", "status", "cas", "datatype", "collection_id", "key", "by_seqno",
                         "rev_seqno", "snap_start_seqno", "snap_end_seqno", "snapshot_flags", "start_seqno",
                         "end_seqno", "vbucket_uuid", "rollback_seqno", "bytes_to_ack", "stream_end_status",
                         "total_body_length", "stream_vbucket", "latency_ms", "request_offset")
# columns analyze derives while decoding, which no record has: (name, type, meaning), after the record's
DERIVED_COLUMNS: Final = (
    ("sequence", "int", "the message's position among its connection's messages, both directions, in capture "
                        "order (from 0): ORDER BY connection, sequence replays a connection"),
    ("value_length", "u32", "bytes of value on the wire"),
    ("snapshot_start_seqno", "u64", "messages with a stream_seqno: start of the snapshot marker before them in "
                                    "their stream"),
    ("snapshot_end_seqno", "u64", "messages with a stream_seqno: end of that snapshot"),
    ("unacked_bytes", "u32", "the connection's unacknowledged bytes after this message (flow control: "
                             "the producer's pushes counted, the consumer's buffer acks subtracted)"),
    ("buffer_size", "u32", "the connection_buffer_size negotiated so far on the connection, if any"),
    ("stream_seqno", "u64", "a pushed stream message that takes a seqno of its vbucket's history (an item, a "
                            "prepare, a commit, an abort, a system event, a seqno advance): that seqno"),
    ("previous_seqno", "u64", "messages with a stream_seqno: the stream_seqno before it on the same connection "
                              "and vbucket, in stream order (streams reopened included)"),
    ("blocked_ms", "float", "a pushed message sent after the producer's window was full: how long it was full "
                            "(the stall this message ends)"),
    ("capture_gap_before", "bool", "messages with a stream_seqno: whether the capture lost bytes of the "
                                   "connection (capture_gap) between previous_seqno's message and this one"),
    # the record's diagnostics keep their offsets and lengths too; a column of findings needs only these
    ("diagnostics", "list[diagnostic]", "the message's diagnostics: name, severity, message"),
)
RECORD_COLUMN: Final = ("record", "str", "with --records: the whole JSON record, as decode --format jsonl "
                                         "prints it")


def column_types(*, records: bool = False) -> list[tuple[str, str]]:
    """(name, type) of every column, in order: the record's typed by the catalogue, then the derived ones."""
    known = {f.name: f.type for f in catalogue()}
    out = [(name, known[name]) for name in RECORD_COLUMNS]
    out += [(name, kind) for name, kind, _ in DERIVED_COLUMNS]
    if records:
        out.append(RECORD_COLUMN[:2])
    return out


COLUMNS: Final = column_types()
# Columns of unsigned 64-bit values, stored as signed 64-bit integers with the same bits (see job.SPARK_TYPES)
U64_COLUMNS: Final = frozenset(name for name, kind in COLUMNS if kind == "u64")
_HEADER_AT: Final = {sub.name: at for at, sub in enumerate(request_header.subcons)}  # Message.header's order
_CONTEXT_FIRST: Final = ("ts", "connection", "direction", "frames")  # the capture decoder's context
_DECLARED: Final = frozenset(f.name for f in catalogue() if f.messages)  # fields of some message's layout
_ABSENT_SNAPSHOT: Final = (None, None)

# A plain item's record columns: (message, its context's first and last keys, collection id, key) -> values
ItemRow = Callable[[Message, dict[str, Any], dict[str, Any], int | None, str | None], tuple[Any, ...]]
# (magic and opcode names, extras names) -> the row function: what it depends on, so a few entries in all
# (plans themselves may be made anew per message once decode's plan cache is full)
_ITEM_ROWS: dict[tuple[tuple[str, str], tuple[str, ...]], ItemRow] = {}


def _item_row(plan: Any) -> ItemRow:
    """The function that reads a plain item's record columns (:data:`RECORD_COLUMNS`) out of a message of
    ``plan``'s shape, what the record (``render.record``) would give for each: made once per shape from the names
    (the plan's magic and opcode names, the header grammar's fields, the layout's extras fields, the capture
    context's keys); a column none of these has is None."""
    shape = (plan.item_names, plan.names)
    found = _ITEM_ROWS.get(shape)
    if found is not None:
        return found
    magic, opcode = plan.item_names
    sources = []
    for name in RECORD_COLUMNS:
        if name in _CONTEXT_FIRST:
            sources.append(f"first[{name!r}]")
        elif name in ("magic", "opcode"):
            sources.append(repr(magic if name == "magic" else opcode))
        elif name == "offset":
            sources.append("msg.offset")
        elif name in ("collection_id", "key"):
            sources.append(name)
        elif name in plan.names:
            sources.append(f"values[{plan.names.index(name)}]")
        elif name in _HEADER_AT:
            sources.append(f"header[{_HEADER_AT[name]}]")
        elif name in _DECLARED:  # another message's field
            sources.append("None")
        else:  # what the tracker adds after the packet's fields, if anything
            sources.append(f"last.get({name!r})")
    code = (f"def row(msg, first, last, collection_id, key):\n"
            f"    header, values = msg.header, msg._extras_values\n"
            f"    return ({', '.join(sources)},)\n")
    namespace: dict[str, Any] = {}
    exec(compile(code, f"<analyze row {opcode}/{len(plan.names)}>", "exec"), namespace)  # noqa: S102 - our text
    made: ItemRow = namespace["row"]
    _ITEM_ROWS[shape] = made
    return made


class Rows:
    """Rows of one task's messages, in the order they came; :meth:`take` hands over those gathered.

    What a row needs from earlier messages (its place in the connection, the snapshot of its stream, the item
    before it, the flow-control window) is kept per connection in a :class:`_Connection`."""

    def __init__(self, *, records: bool = False) -> None:
        self.records = records
        self.rows: list[tuple[Any, ...]] = []
        self._connections: dict[str, _Connection] = {}
        self._last: _Connection | None = None  # the last plain item's connection (a task's are decoded in turn)
        self._plan: Any = None  # the last plain item's shape, and its row function (items come in long runs)
        self._row: ItemRow | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def take(self) -> list[tuple[Any, ...]]:
        rows, self.rows = self.rows, []
        return rows

    def connection(self, label: str) -> _Connection:
        found = self._connections.get(label)
        if found is None:
            found = self._connections[label] = _Connection(label)
        return found

    def add(self, observed: Observed, unacked: int, buffer_size: int | None) -> None:
        """A message that came out of the capture decoder, with the connection's flow-control state after
        it."""
        msg = observed.packet
        fast = None if self.records or observed.rendered is not None else item_key(msg)
        if fast is None:
            self._general(observed, unacked, buffer_size)
            return
        first, last = observed.first, observed.last
        connection = self._last
        if connection is None or connection.label != first["connection"]:
            connection = self._last = self.connection(first["connection"])
        plan = msg.plan
        row = self._row
        if plan is not self._plan or row is None:
            row = self._row = _item_row(plan)
            self._plan = plan
        # the derived columns, as _Connection.derived and blocked make them, written out for the hot path
        header = msg.header
        connection.sequence = sequence = connection.sequence + 1
        snapshot = connection.snapshots.get(header[7]) or _ABSENT_SNAPSHOT
        stream_vbucket = last.get("stream_vbucket")
        where = header[5] if stream_vbucket is None else stream_vbucket
        diagnostics = observed.diagnostics
        previous, hole = connection.item(where, fast[4], diagnostics)
        blocked = connection.blocked(first["ts"], unacked, buffer_size)
        self.rows.append((*row(msg, first, last, fast[2], fast[3]), sequence, msg.body_end - msg.value_offset,
                          snapshot[0], snapshot[1], unacked, buffer_size, fast[4], previous, blocked, hole,
                          [(d.name, d.severity, d.message) for d in diagnostics] if diagnostics else []))

    def _general(self, observed: Observed, unacked: int, buffer_size: int | None) -> None:
        """Any message but a plain item: its record columns from its record, by name."""
        record = record_of(observed)
        msg = observed.packet
        connection = self.connection(str(record.get("connection")))
        get = record.get
        field = None if msg.is_response else SEQNO_FIELDS.get(msg.opcode)
        seqno = get(field) if field is not None else None
        if not msg.is_response and msg.opcode == Opcode.DCP_SNAPSHOT_MARKER:
            connection.marker(msg.opaque, get("snap_start_seqno"), get("snap_end_seqno"))
        if not msg.is_response and msg.opcode == Opcode.DCP_OSO_SNAPSHOT:
            connection.oso_bracket(msg.opaque, get("stream_vbucket"), get("vbucket"), get("oso_flags"))
        elif not msg.is_response and msg.opcode == Opcode.DCP_STREAM_END:  # a stream that ended inside one
            connection.oso_bracket(msg.opaque, get("stream_vbucket"), get("vbucket"), OsoFlag.END)
        row = tuple(get(name) for name in RECORD_COLUMNS) + connection.derived(
            observed, seqno if isinstance(seqno, int) else None, get("vbucket"), get("stream_vbucket"),
            float(get("ts") or 0.0), unacked, buffer_size)
        if self.records:
            row += (orjson.dumps(record).decode(),)
        self.rows.append(row)


def _holes(diagnostics: list[Diagnostic] | tuple[()]) -> int:
    """1 when a message comes after bytes the capture lost (its capture_gap), else 0."""
    return 1 if diagnostics and any(d.name == "capture_gap" for d in diagnostics) else 0


class _Connection:
    """One connection's derived columns and what they need from its earlier messages."""

    __slots__ = ("full_since", "holes", "label", "last_seqno", "oso", "sequence", "snapshots", "unacked")

    def __init__(self, label: str) -> None:
        self.label = label
        self.sequence = -1  # the last message's place in the connection
        self.snapshots: dict[int, tuple[int, int]] = {}  # opaque -> the stream's marker range
        self.last_seqno: dict[int, tuple[int, int]] = {}  # vbucket -> the last stream_seqno, and holes before it
        # capture_gap diagnostics so far: the one after a hole is on the next message, often another vbucket's
        # or a marker, so a seqno gap is told from a hole by the count changing since the vbucket's last item
        self.holes = 0
        # vbucket -> inside an OSO snapshot (reference 3.19), the highest seqno before and in it so far, and the
        # holes before its first item: its items come in key order, so they have no previous_seqno, and its end
        # (or its stream's) continues from that seqno, a hole inside it still before the next message
        self.oso: dict[int, tuple[int | None, int]] = {}
        self.unacked = 0  # after the last message
        self.full_since: float | None = None  # when a push filled the flow-control window, if it is full

    def marker(self, opaque: int, start: Any, end: Any) -> None:
        """A snapshot marker the producer sent: the range of the items after it on its stream."""
        if isinstance(start, int) and isinstance(end, int):
            self.snapshots[opaque] = (start, end)

    def oso_bracket(self, opaque: int, stream_vbucket: Any, vbucket: Any, flags: Any) -> None:
        """A DCP_OSO_SNAPSHOT the producer sent: its start or its end."""
        where = stream_vbucket if isinstance(stream_vbucket, int) else vbucket if isinstance(vbucket, int) else 0
        flags = flags if isinstance(flags, int) else 0
        if flags & OsoFlag.START and where not in self.oso:  # (a second start: still the same bracket)
            last = self.last_seqno.get(where)
            self.oso[where] = (None, self.holes) if last is None else last
            self.snapshots.pop(opaque, None)  # the marker before bounds none of its items
        elif flags & OsoFlag.END and where in self.oso:
            highest, holes = self.oso.pop(where)
            if highest is not None:
                self.last_seqno[where] = (highest, holes)

    def derived(self, observed: Observed, seqno: int | None, vbucket: int | None, stream_vbucket: int | None,
                ts: float, unacked: int, buffer_size: int | None) -> tuple[Any, ...]:
        """The :data:`DERIVED_COLUMNS` of the connection's next message; ``seqno``: its stream_seqno, if it
        takes one."""
        self.sequence += 1
        snapshot: tuple[int, int] | tuple[None, None] = _ABSENT_SNAPSHOT
        previous = hole = None
        msg = observed.packet
        diagnostics = observed.diagnostics  # the packet's and its context's
        if seqno is not None:
            snapshot = self.snapshots.get(msg.header[7]) or _ABSENT_SNAPSHOT
            where = (vbucket or 0) if stream_vbucket is None else stream_vbucket
            previous, hole = self.item(where, seqno, diagnostics)
        else:
            self.holes += _holes(diagnostics)
        return (self.sequence, msg.body_end - msg.value_offset, snapshot[0], snapshot[1], unacked, buffer_size,
                seqno, previous, self.blocked(ts, unacked, buffer_size), hole,
                [(d.name, d.severity, d.message) for d in diagnostics] if diagnostics else [])

    def item(self, where: int, by_seqno: int,
             diagnostics: list[Diagnostic] | tuple[()]) -> tuple[int | None, bool | None]:
        """A message of vbucket ``where`` that takes seqno ``by_seqno``: the vbucket's stream_seqno before it,
        and whether the capture lost bytes of the connection since that one (None, None for its first)."""
        if diagnostics:  # (most items have none: no call on the hot path)
            self.holes += _holes(diagnostics)
        if self.oso and where in self.oso:
            highest, holes = self.oso[where]
            self.oso[where] = (by_seqno if highest is None else max(highest, by_seqno), holes)
            return None, None
        last = self.last_seqno.get(where)
        self.last_seqno[where] = (by_seqno, self.holes)
        return (None, None) if last is None else (last[0], last[1] != self.holes)

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
