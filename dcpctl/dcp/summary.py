"""Per connection and vbucket counts for ``--summary`` (pure: records in, rows out)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final

from dcpctl.protocol.registry import DOCUMENT_ITEM_OPCODES, names

ITEM_OPCODES: Final = names(DOCUMENT_ITEM_OPCODES)


@dataclass
class Row:
    connection: str
    vbucket: int | None
    messages: int = 0
    bytes: int = 0
    items: int = 0
    first_seqno: int | None = None
    last_seqno: int | None = None
    snapshots: int = 0
    rollbacks: int = 0
    errors: int = 0
    diagnostics: int = 0
    first_ts: float | None = None  # its first and last messages' ts (captures and live streams)
    last_ts: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The counts (the keys the JSON summary always had; the times are the table's)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _TABLE_ONLY}


_TABLE_ONLY = frozenset({"first_ts", "last_ts"})


class Summary:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, int | None], Row] = {}
        self.first_ts: float | None = None  # the first message's: the table's times count from it

    def add(self, record: dict[str, Any], size: int) -> None:
        connection = str(record.get("connection", "-"))
        vbucket = record.get("stream_vbucket", record.get("vbucket"))
        key = (connection, vbucket if isinstance(vbucket, int) else None)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = Row(*key)
        row.messages += 1
        row.bytes += size
        ts = record.get("ts")
        if isinstance(ts, float | int) and not isinstance(ts, bool):
            if self.first_ts is None:
                self.first_ts = ts
            if row.first_ts is None:
                row.first_ts = ts
            row.last_ts = ts
        opcode = record.get("opcode")
        seqno = record.get("by_seqno")
        if opcode in ITEM_OPCODES and isinstance(seqno, int):
            row.items += 1
            row.first_seqno = seqno if row.first_seqno is None else min(row.first_seqno, seqno)
            row.last_seqno = seqno if row.last_seqno is None else max(row.last_seqno, seqno)
        if opcode == "DCP_SNAPSHOT_MARKER":
            row.snapshots += 1
        status = record.get("status")
        if status == "Rollback":
            row.rollbacks += 1
        elif status not in (None, "Success"):
            row.errors += 1
        row.diagnostics += len(record.get("diagnostics", ()))

    def sorted_rows(self) -> list[Row]:
        return sorted(self.rows.values(), key=lambda r: (r.connection, -1 if r.vbucket is None else r.vbucket))

    def since_first(self, ts: float | None) -> float | None:
        """``ts`` in seconds since the first message (None when there is no time)."""
        return None if ts is None or self.first_ts is None else ts - self.first_ts

    def total(self) -> Row:
        """Every row's counts added up, seqno range left out (ranges of different vbuckets do not add); its
        times are the earliest first and the latest last message."""
        rows = list(self.rows.values())
        total = Row("total", None)
        for name in ("messages", "bytes", "items", "snapshots", "rollbacks", "errors", "diagnostics"):
            setattr(total, name, sum(getattr(r, name) for r in rows))
        total.first_ts = min((r.first_ts for r in rows if r.first_ts is not None), default=None)
        total.last_ts = max((r.last_ts for r in rows if r.last_ts is not None), default=None)
        return total
