"""Per connection and vbucket counts for ``--summary`` (pure: records in, rows out)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Final

from dcpctl.dcp.exchange import Exchanges
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
# range scan's progress, the rollback a stream request may get (counted as a rollback), and a subdocument
# success on a deleted document (kv_engine's error map: attrs success, item-deleted).
NOT_ERRORS: Final = frozenset(s.kv_name for s in (Status.SUCCESS, Status.AUTH_CONTINUE, Status.RANGE_SCAN_MORE,
                                                  Status.RANGE_SCAN_COMPLETE, Status.ROLLBACK,
                                                  Status.SUBDOC_SUCCESS_DELETED))
# What a document operation answers about its document (the SDKs' DocumentNotFound, DocumentExists or
# CasMismatch, DocumentLocked, NotStored), and a subdocument operation about its content (PathNotFound,
# PathExists, PathMismatch, a document not JSON or too deep for the path, a number out of range, some paths
# of a multi-path command failing so): the application's business, not an error of the connection. What says
# the request itself was wrong (a path that does not parse, an invalid combination, an unknown macro) is
# one. For anything else (KeyEexists to a stream request: the stream is already open) they are errors.
DOCUMENT_OUTCOMES: Final = frozenset(s.kv_name for s in (
    Status.KEY_ENOENT, Status.KEY_EEXISTS, Status.NOT_STORED, Status.LOCKED, Status.NOT_LOCKED,
    Status.SUBDOC_PATH_ENOENT, Status.SUBDOC_PATH_MISMATCH, Status.SUBDOC_PATH_EEXISTS, Status.SUBDOC_DOC_NOT_JSON,
    Status.SUBDOC_DOC_E2DEEP, Status.SUBDOC_NUM_ERANGE, Status.SUBDOC_VALUE_CANTINSERT,
    Status.SUBDOC_MULTI_PATH_FAILURE, Status.SUBDOC_MULTI_PATH_FAILURE_DELETED,
    Status.SUBDOC_CAN_ONLY_REVIVE_DELETED_DOCUMENTS))
# Diagnostics that are dcpctl's own doing, not a finding about the traffic: SASL bytes it hid
OWN_NOTES: Final = frozenset({"redacted"})
DOCUMENT_OPERATIONS: Final = names(request_opcodes(lambda spec: spec.document_key) - PUSHED_OPCODES)
# Requests counted in the row of the vbucket their header names: stream setup and document operations, and
# what a producer pushes on a stream (when the capture missed the stream request that says which stream).
VBUCKET_REQUESTS: Final = names(VBUCKET_OPCODES | STREAM_OPCODES)


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
        self.requests = Exchanges[int | None]()  # a request's row's vbucket, for its response's row

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
        row.diagnostics += sum(1 for found in record.get("diagnostics", ()) if found.get("name") not in OWN_NOTES)

    def _vbucket_of(self, connection: str, record: dict[str, Any]) -> int | None:
        """The vbucket row a message counts in: its stream's, for what belongs to a stream; a response's
        request's, so an exchange is never split; a request's vbucket when it is about one (stream setup, a
        document operation, a stream's item); else the connection's own row (HELLO, SASL, DCP_OPEN,
        controls, noops), whose requests say vbucket 0 and whose responses say none."""
        stream = record.get("stream_vbucket")
        answering, asked = self.requests.answered(record)
        if answering:
            return asked
        if isinstance(stream, int):
            return stream
        if "status" in record:
            return None
        vbucket = record.get("vbucket")
        found = vbucket if isinstance(vbucket, int) and record.get("opcode") in VBUCKET_REQUESTS else None
        self.requests.asked(record, found)
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
