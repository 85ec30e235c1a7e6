"""Per connection and vbucket counts for ``--summary`` (pure: records in, rows out)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final

from dcpctl.protocol.constants import Opcode, Status
from dcpctl.protocol.registry import (
    DOCUMENT_ITEM_OPCODES,
    PUSHED_OPCODES,
    STREAM_OPCODES,
    VBUCKET_OPCODES,
    names,
    request_opcodes,
)

ITEM_OPCODES: Final = names(DOCUMENT_ITEM_OPCODES)
MARKER: Final = Opcode.DCP_SNAPSHOT_MARKER.name
# Statuses that are a step or a result, never a failure of the connection: a SASL exchange that goes on, a
# range scan's progress, and the rollback a stream request may get (counted as a rollback).
NOT_ERRORS: Final = frozenset(s.kv_name for s in (Status.SUCCESS, Status.AUTH_CONTINUE, Status.RANGE_SCAN_MORE,
                                                  Status.RANGE_SCAN_COMPLETE, Status.ROLLBACK))
# What a document operation answers about its document (the SDKs' DocumentNotFound, DocumentExists or
# CasMismatch, DocumentLocked, NotStored): the application's business, not an error of the connection. For
# anything else (KeyEexists to a stream request: the stream is already open) they are errors.
DOCUMENT_OUTCOMES: Final = frozenset(s.kv_name for s in (Status.KEY_ENOENT, Status.KEY_EEXISTS, Status.NOT_STORED,
                                                         Status.LOCKED, Status.NOT_LOCKED))
DOCUMENT_OPERATIONS: Final = names(request_opcodes(lambda spec: spec.document_key) - PUSHED_OPCODES)
# Requests remembered until their response, per summary, so that a response counts where its request did;
# beyond this many unanswered ones the oldest are forgotten (the session tracker's own bound is similar).
MAX_PENDING: Final = 4096
# Requests counted in the row of the vbucket their header names: stream setup and document operations, and
# what a producer pushes on a stream (when the capture missed the stream request that says which stream).
VBUCKET_REQUESTS: Final = names(VBUCKET_OPCODES | STREAM_OPCODES)
_OTHER: Final = {"client>server": "server>client", "server>client": "client>server"}


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
        # (connection, direction, offset) of a request -> the vbucket of the row it counted in
        self.requests: dict[tuple[str, str, int], int | None] = {}

    def add(self, record: dict[str, Any], size: int) -> None:
        connection = str(record.get("connection", "-"))
        key = (connection, self._vbucket_of(connection, record))
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
        if opcode == MARKER:
            row.snapshots += 1
        status = record.get("status")
        if status == Status.ROLLBACK.kv_name:
            row.rollbacks += 1
        elif status is not None and status not in NOT_ERRORS and not (
                status in DOCUMENT_OUTCOMES and opcode in DOCUMENT_OPERATIONS):
            row.errors += 1
        row.diagnostics += len(record.get("diagnostics", ()))

    def _vbucket_of(self, connection: str, record: dict[str, Any]) -> int | None:
        """The vbucket row a message counts in: its stream's, for what belongs to a stream; a response's
        request's, so an exchange is never split; a request's vbucket when it is about one (stream setup, a
        document operation, a stream's item); else the connection's own row (HELLO, SASL, DCP_OPEN,
        controls, noops), whose requests say vbucket 0 and whose responses say none."""
        stream = record.get("stream_vbucket")
        asked = record.get("request_offset")  # in the other direction: offsets count per direction
        direction = str(record.get("direction", ""))
        if isinstance(asked, int) and (connection, _OTHER.get(direction, ""), asked) in self.requests:
            return self.requests.pop((connection, _OTHER.get(direction, ""), asked))
        if isinstance(stream, int):
            return stream
        if "status" in record:
            return None
        vbucket = record.get("vbucket")
        found = vbucket if isinstance(vbucket, int) and record.get("opcode") in VBUCKET_REQUESTS else None
        offset = record.get("offset")
        if isinstance(offset, int):
            if len(self.requests) >= MAX_PENDING:
                self.requests.pop(next(iter(self.requests)))
            self.requests[connection, direction, offset] = found
        return found

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
