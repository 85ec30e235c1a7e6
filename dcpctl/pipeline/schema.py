"""The Parquet schema of ``analyze``: one row per message, columns typed from the field catalogue.

The columns are the record's fields an analysis needs, typed from the declarations through the field
catalogue (u8/u16 integers, u32 longs, u64 decimal(20,0) because Spark's long is signed, strings), plus
what the capture adds and two derived columns; ``record`` keeps the whole JSON record, so nothing the
decoder said is lost. Pure: builds plain tuples; the Spark types are made from it in ``job``.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Final

import orjson

from dcpctl.protocol.fields import catalogue
from dcpctl.protocol.message import Message

# (column, catalogue type) for the record fields kept as columns, in column order
RECORD_COLUMNS: Final = ("ts", "connection", "direction", "offset", "magic", "opcode", "vbucket", "stream_id",
                         "opaque", "status", "cas", "datatype", "key", "collection_id", "by_seqno", "rev_seqno",
                         "snap_start_seqno", "snap_end_seqno", "snapshot_flags", "start_seqno", "end_seqno",
                         "vbucket_uuid", "rollback_seqno", "bytes_to_ack", "stream_end_status",
                         "total_body_length", "stream_vbucket", "latency_ms")
# columns the tracker or this pipeline adds: (name, type, meaning)
EXTRA_COLUMNS: Final = (
    ("stream_vbucket", "u16", "the vbucket of the stream a pushed message belongs to"),
    ("latency_ms", "float", "a response's time since its request"),
    ("frames", "list[int]", "the capture frames the message came from"),
    ("value_length", "u32", "bytes of value on the wire"),
    ("snapshot", "list[u64]", "items: the range of the snapshot marker before them in their stream"),
    ("diagnostics", "list[str]", "names of the message's diagnostics"),
    ("record", "str", "the whole JSON record, as dcpctl decode --format jsonl prints it"),
)


def column_types() -> list[tuple[str, str]]:
    """(name, catalogue type) of every column, in order."""
    known = {f.name: f.type for f in catalogue()}
    extra = {name: kind for name, kind, _ in EXTRA_COLUMNS}
    out = [(name, known.get(name) or extra[name]) for name in RECORD_COLUMNS]
    out += [(name, kind) for name, kind, _ in EXTRA_COLUMNS if name not in RECORD_COLUMNS]
    return out


COLUMNS: Final = column_types()
_U64: Final = frozenset(name for name, kind in COLUMNS if kind == "u64")


def row(msg: Message, snapshot: tuple[int, int] | None) -> tuple[Any, ...]:
    """One message as a row tuple in :data:`COLUMNS` order."""
    record = msg.record()
    values: list[Any] = []
    for name in RECORD_COLUMNS:
        value = record.get(name)
        if name in _U64 and value is not None:
            value = Decimal(value)
        values.append(value)
    value_length = msg.body_end - msg.value_offset
    values.append(list(record.get("frames", [])))
    values.append(value_length)
    values.append([Decimal(snapshot[0]), Decimal(snapshot[1])] if snapshot is not None else None)
    values.append([d["name"] for d in record.get("diagnostics", [])])
    values.append(orjson.dumps(record).decode())
    return tuple(values)
