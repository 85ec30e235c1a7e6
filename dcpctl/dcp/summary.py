"""Per connection and vbucket counts for ``--summary`` (pure: records in, rows out)."""

from __future__ import annotations

from dataclasses import dataclass
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

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Summary:
    def __init__(self) -> None:
        self.rows: dict[tuple[str, int | None], Row] = {}

    def add(self, record: dict[str, Any], size: int) -> None:
        connection = str(record.get("connection", "-"))
        vbucket = record.get("stream_vbucket", record.get("vbucket"))
        key = (connection, vbucket if isinstance(vbucket, int) else None)
        row = self.rows.get(key)
        if row is None:
            row = self.rows[key] = Row(*key)
        row.messages += 1
        row.bytes += size
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
