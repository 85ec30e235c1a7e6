"""The JSON field catalogue (``dcpctl fields``), derived from the registry's declarations.

Layouts come from the grammars; only the one-line meanings live here, in a glossary keyed by field name (a
name means the same thing wherever it appears). A test checks the glossary covers every declared field.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Final

from dcpctl.protocol import frameinfo, walk
from dcpctl.protocol.diagnostic import CATALOGUE, diagnostic
from dcpctl.protocol.registry import all_variants
from dcpctl.protocol.value import Xattr

# Fields every record has, or that come from the header, frame infos, key and value handling.
COMMON_FIELDS: Final[list[tuple[str, str, str]]] = [
    ("ts", "float", "capture or receive time, seconds since the epoch (captures and live streams)"),
    ("connection", "str", "client:port > server:port (captures and live streams)"),
    ("direction", "str", "client>server or server>client (captures and live streams)"),
    ("frames", "list[int]", "the capture frames the message came from (captures)"),
    ("offset", "int", "byte offset of the packet in its input or connection direction"),
    ("magic", "str", "magic byte as the kv_engine name (ClientRequest, AltClientRequest...)"),
    ("opcode", "str", "kv_engine command name (DCP_MUTATION, HELLO...) or 0x.. when unknown"),
    ("request_type", "u8", "UPR draft: header byte 5, the request/response/message type"),
    ("request_type_name", "str", "UPR draft: the type's name"),
    ("vbucket", "u16", "vbucket id (requests)"),
    ("status", "str", "response status as the kv_engine name (Success, Rollback, NotMyVbucket...)"),
    ("opaque", "u32", "request id echoed in the response; a stream's messages carry its request's"),
    ("cas", "u64", "compare-and-swap value of the document"),
    ("datatype", "u8", "datatype bits: 0x01 JSON, 0x02 SNAPPY, 0x04 XATTR"),
    ("key_length", "u16", "header key length (with any collection prefix)"),
    ("extras_length", "u8", "header extras length"),
    ("framing_extras_length", "u8", "header framing extras length (magics 0x08/0x18)"),
    ("total_body_length", "u32", "header total body length (framing extras + extras + key + value)"),
    ("header_length", "int", "bytes of a packet cut short inside its 24-byte header (the fields past them absent)"),
    ("header_trailing", "hex", "the bytes of the header field such a packet ends inside"),
    ("frame_infos", "list[object]", "flexible framing extras: id, name, decoded fields, data (hex)"),
    ("framing_extras", "hex", "framing extras bytes when they are not in canonical form"),
    ("stream_id", "u16", "DCP stream id (frame info 2)"),
    ("extras", "hex", "extras kept raw when no declared layout fits"),
    ("collection_id", "u32", "collection id from the key's LEB128 prefix (with collections)"),
    ("key", "str", "key: document key, connection name, control key, mechanism or bucket"),
    ("key_encoding", "str", "'hex' when the key is not UTF-8 text (or holds control characters)"),
    ("value", "str", "value as text (documents: the body after xattrs, decompressed); null when hidden (SASL)"),
    ("value_encoding", "str", "'hex' when the value is not UTF-8 text (or holds control characters)"),
    ("value_compressed", "hex", "the value as sent, when SNAPPY"),
    ("value_redacted", "int", "length of a hidden SASL value"),
    ("value_trailing", "hex", "value bytes after the declared value layout"),
    ("xattrs", "list[object]", "extended attributes: key and value (JSON text)"),
    ("diagnostics", "list[object]", "named findings: name, severity, message, offset, length"),
    # added by the session tracker from what it saw earlier on the connection (captures and live streams)
    ("stream_vbucket", "u16", "the vbucket of the stream a pushed message belongs to (the tracker's)"),
    ("latency_ms", "float", "a response's time since its request (the tracker's)"),
    ("request_offset", "int", "a response: the offset of its request in the other direction (the tracker's)"),
    ("dcp_open_flags", "list[str]", "a DCP_OPEN response: the flags its request asked for, by name"),
]

GLOSSARY: Final[dict[str, str]] = {
    "meta_cas": "*_WITH_META: the document's CAS on the source cluster",
    "options": "*_WITH_META options: 0x02 ForceAcceptWithMetaOps, 0x04 RegenerateCas, 0x08 SkipConflictResolution...",
    "observe_keys": "OBSERVE: the keys asked about",
    "observe_keys[].vbucket": "the key's vbucket",
    "observe_keys[].key_length": "key length",
    "observe_keys[].key": "the key (hex)",
    "observe_states": "OBSERVE response: each key's state",
    "observe_states[].vbucket": "the key's vbucket",
    "observe_states[].key_length": "key length",
    "observe_states[].key": "the key (hex)",
    "observe_states[].key_state": "0x00 found, not persisted; 0x01 persisted; 0x80 not found; 0x81 logically deleted",
    "observe_states[].cas": "the key's CAS",
    "path": "single-path subdoc: the path (a JSON path or an xattr key); value is the operation's value",
    "path_encoding": "'hex' when the path is not UTF-8 text",
    "stat_end": "STAT: true on the empty success response that ends the group (each stat before it: key its "
                "name, value its text)",
    "scan_uuid": "RANGE_SCAN_CREATE response: the 16-byte scan uuid CONTINUE and CANCEL name",
    "scan_uuid_hi": "RANGE_SCAN_CONTINUE/CANCEL: the scan uuid's first 8 bytes, as an integer",
    "scan_uuid_lo": "RANGE_SCAN_CONTINUE/CANCEL: the scan uuid's last 8 bytes, as an integer",
    "item_limit": "RANGE_SCAN_CONTINUE: most keys or documents to return (0: no limit)",
    "time_limit": "RANGE_SCAN_CONTINUE: most milliseconds to run for (0: no limit)",
    "byte_limit": "RANGE_SCAN_CONTINUE: most bytes to return (0: no limit; whole items always)",
    "scan_flags": "RANGE_SCAN_CONTINUE response: what the value holds, 0 keys (key_only) or 1 documents",
    "scan_keys": "RANGE_SCAN_CONTINUE response of a key_only scan: the keys",
    "scan_keys[].key_length": "key length (LEB128 on the wire)",
    "scan_keys[].key": "the key (hex)",
    "scan_documents": "RANGE_SCAN_CONTINUE response: the documents, each metadata, key and value",
    "scan_documents[].flags": "the document's flags",
    "scan_documents[].expiration": "the document's expiry",
    "scan_documents[].seqno": "the document's seqno",
    "scan_documents[].cas": "the document's CAS",
    "scan_documents[].datatype": "the document's datatype (SNAPPY: its value is compressed)",
    "scan_documents[].key_length": "key length (LEB128 on the wire)",
    "scan_documents[].key": "the key (hex)",
    "scan_documents[].value_length": "value length (LEB128 on the wire)",
    "scan_documents[].value": "the value as sent (hex)",
    "doc_flags": "subdoc document flags: 0x01 Mkdoc, 0x02 Add, 0x04 AccessDeleted, 0x08 CreateAsDeleted, 0x10 Revive",
    "failed_index": "subdoc multi-mutation failure: the index of the first spec that failed",
    "failed_status": "subdoc multi-mutation failure: that spec's status",
    "lookup_results": "subdoc multi-lookup: one result per spec, in request order",
    "lookup_results[].status": "the spec's status (Success, SubdocPathEnoent...)",
    "lookup_results[].value": "the spec's result (a JSON fragment, or a count)",
    "lookup_results[].value_length": "length of the result",
    "lookup_specs": "subdoc multi-lookup: the path specs",
    "lookup_specs[].flags": "path flags: 0x04 XattrPath, 0x08 binary value...",
    "lookup_specs[].opcode": "the spec's subdoc opcode (0xc5 SUBDOC_GET, 0xc6 SUBDOC_EXISTS, 0x00 the whole body)",
    "lookup_specs[].path": "the path (a JSON path or an xattr key)",
    "lookup_specs[].path_length": "length of the path",
    "mutation_results": "subdoc multi-mutation: the results of the specs that return a value (counters)",
    "mutation_results[].index": "index of the spec",
    "mutation_results[].status": "the spec's status",
    "mutation_results[].value": "the spec's result",
    "mutation_results[].value_length": "length of the result",
    "mutation_specs": "subdoc multi-mutation: the path specs",
    "mutation_specs[].flags": "path flags: 0x01 MkdirP, 0x04 XattrPath, 0x10 ExpandMacros...",
    "mutation_specs[].opcode": "the spec's subdoc opcode (0xc8 SUBDOC_DICT_UPSERT, 0x01 SET the whole body...)",
    "mutation_specs[].path": "the path (a JSON path or an xattr key)",
    "mutation_specs[].path_length": "length of the path",
    "mutation_specs[].value": "the spec's value",
    "mutation_specs[].value_length": "length of the value",
    "path_length": "subdoc: length of the path that starts the value",
    "subdoc_flags": "subdoc path flags: 0x01 MkdirP, 0x04 XattrPath, 0x10 ExpandMacros",
    "abort_seqno": "seqno of the abort",
    "by_seqno": "sequence number of this item in its vbucket",
    "bytes_to_ack": "bytes the consumer has processed (flow control)",
    "collection_id": "collection id",
    "commit_seqno": "seqno of the commit",
    "current_seqno": "current high seqno",
    "delete_time": "deletion time, epoch seconds (expirations: the item's expiry time)",
    "counter": "INCREMENT/DECREMENT response: the counter's new value",
    "deleted": "non-zero when the document is deleted (a prepare of a delete, GET_META of a tombstone)",
    "delta": "INCREMENT/DECREMENT: the amount to add or subtract",
    "durability_level": "1 Majority, 2 MajorityAndPersistOnMaster, 3 PersistToMajority",
    "end_seqno": "stream ends after this seqno (0xffffffffffffffff: never)",
    "epoch": "cluster map epoch",
    "error_map_version": "highest error map version the client understands",
    "event_id": "system event: 0 BeginCollection, 1 EndCollection, 3 CreateScope, 4 DropScope, 5 Modify",
    "event_version": "system event layout version (2: FlatBuffers)",
    "expiration": "expiry, epoch seconds (0: none; in a request below 30 days: seconds from now; "
                  "GET_LOCKED: the lock timeout)",
    "failover_log": "failover log, newest entry first",
    "failover_log[].high_seqno": "UPR draft: high seqno when the uuid was generated",
    "failover_log[].seqno": "seqno at which this uuid's history began",
    "failover_log[].vbucket_uuid": "vbucket uuid of the entry",
    "features": "HELLO feature names",
    "flags": "flags of the message (open, stream request) or the document's user flags",
    "format_type": "observe-seqno response format: 0 current uuid, 1 hard failover",
    "high_completed_seqno": "high completed seqno (disk snapshots)",
    "high_prepared_seqno": "high prepared seqno (disk snapshots, sync replication)",
    "high_seqno": "high seqno when the vbucket uuid was generated (early layouts)",
    "include_xattrs": "GET_RANDOM_KEY: non-zero to return the document's xattrs too",
    "initial": "INCREMENT/DECREMENT: the counter's value if it does not exist",
    "last_persisted_seqno": "last persisted seqno",
    "last_received_seqno": "last seqno of the old uuid's branch",
    "lock_time": "lock time (servers send 0)",
    "manifest_uid": "collections manifest uid",
    "marker_version": "snapshot marker version: 0 v2.0, 1 v2.1, 2 v2.2",
    "max_ttl": "collection maximum TTL, seconds",
    # a version-2 (FlatBuffers) system event's own fields (its others are version 0's)
    "default_collection_mvs": "system event v2: the default collection's max visible seqno (kv_engine's own)",
    "flush_uid": "system event v2 (8.0): the manifest uid of the collection's last flush, 0 never flushed",
    "history": "system event v2 (7.2): the collection retains its change history",
    "metered": "system event v2 (7.6): the collection's operations are metered",
    "name": "system event v2: the collection's or scope's name (the key says it too)",
    "system_collection": "system event v2 (7.6): a dropped collection was a system collection",
    "system_scope": "system event v2 (7.6): a dropped scope was a system scope",
    "ttl_valid": "system event v2: max_ttl is set",
    "max_visible_seqno": "max visible seqno (prepares and aborts hidden)",
    "meta_datatype": "GET_META version 2 response: the stored document's datatype bits",
    "meta_version": "GET_META request: 1 the 20-byte response, 2 with the document's datatype",
    "mutation_seqno": "a mutation response's seqno (HELLO MutationSeqno): the mutation token with vbucket_uuid",
    "nmeta": "extended meta length (must be 0)",
    "nru": "NRU / MFU hotness (ignore)",
    "observed_vbucket": "vbucket the observe-seqno response describes",
    "old_vbucket_uuid": "the uuid asked about, from an older branch",
    "oso_flags": "OSO snapshot: 0x01 start, 0x02 end",
    "prepared_seqno": "seqno of the prepare",
    "purge_seqno": "server's purge seqno for the snapshot",
    "records": "cache transfer records",
    "records[].by_seqno": "seqno of the cached item",
    "records[].cache_hint": "MFU/NRU hint",
    "records[].cas": "CAS of the cached item",
    "records[].datatype": "datatype of the record's value",
    "records[].expiration": "expiry of the cached item",
    "records[].flags": "user flags of the cached item",
    "records[].key": "key with collection prefix (hex)",
    "records[].key_length": "record key length",
    "records[].rev_seqno": "revision of the cached item",
    "records[].value": "record value (hex)",
    "records[].value_length": "record value length",
    "reserved": "reserved (0)",
    "rev_seqno": "revision number of the document",
    "revision": "cluster map revision",
    "rollback_seqno": "seqno the client must roll back to",
    "scope_id": "scope id",
    "seqno": "DCP_OPEN: reserved sequence number (0); GET_META and *_WITH_META: the document's revision seqno",
    "snap_end_seqno": "snapshot end seqno",
    "snap_start_seqno": "snapshot start seqno",
    "snapshot_flags": "0x01 Memory, 0x02 Disk, 0x04 Checkpoint, 0x08 Acknowledge, 0x10 History, 0x20 Dups",
    "start_seqno": "last seqno the client has",
    "stream_end_status": "why the stream ended: 0 Ok, 1 Closed, 2 StateChanged, 3 Disconnected, 4 Slow...",
    "stream_opaque": "opaque the consumer will use for the added stream",
    "timestamp": "snapshot marker v2.1 timestamp (retired)",
    "unused": "unused (0)",
    "vbucket_seqnos": "high seqno per vbucket",
    "vbucket_seqnos[].seqno": "high seqno",
    "vbucket_seqnos[].vbucket": "vbucket id",
    "vbucket_state": "1 active, 2 replica, 3 pending, 4 dead",
    "vbucket_state_filter": "vbucket state asked for (0 all alive)",
    "vbucket_uuid": "vbucket uuid (client's latest failover entry, the entry's, or a mutation token's)",
}


# What each frame info object holds: its id, name and data, and its grammar's fields (all derived below).
FRAME_GLOSSARY: Final[dict[str, str]] = {
    "id": "frame info id (an escaped id above 14 included)",
    "name": "the id's kv_engine name (DurabilityRequirement, DcpStreamId, ServerRecvSendDuration...)",
    "data": "the element's data as sent (hex)",
    "durability_level": "durability requirement: 1 Majority, 2 MajorityAndPersistOnMaster, 3 PersistToMajority",
    "durability_level_name": "the durability level's name",
    "durability_timeout": "durability requirement timeout, ms (absent: the server's default)",
    "stream_id": "DCP stream id",
    "token_id": "impersonate with token auth id: the token id",
    "text": "text of an impersonated user, an extra privilege or the retired tracing context",
    "server_duration_encoded": "server recv->send duration as sent (variable precision)",
    "server_duration_us": "server recv->send duration, microseconds (kv_engine's decodeMicros)",
    "read_units": "read units the command used",
    "write_units": "write units the command used",
    "throttle_duration_encoded": "time the command was throttled, as sent (variable precision)",
    "throttle_duration_us": "time the command was throttled, microseconds (kv_engine's decodeMicros)",
}
# The objects of a record's lists that no grammar declares, by path: names and types come from the values
# they are made of (an Xattr, a Diagnostic's JSON), only the meanings from here.
OBJECT_GLOSSARY: Final[dict[str, str]] = {
    "xattrs[].key": "the xattr's key (_sync, $document...)",
    "xattrs[].value": "the xattr's value (JSON text)",
    "diagnostics[].name": "the diagnostic's name (dcpctl fields --diagnostics lists them)",
    "diagnostics[].severity": "error, warning or note",
    "diagnostics[].message": "what was found, in a sentence",
    "diagnostics[].offset": "byte offset in the packet of the bytes concerned (absent: no particular bytes)",
    "diagnostics[].length": "length of the bytes concerned (with offset)",
}
# The record builder writes a frame info as its id, the id's name, the grammar's fields, then its data.
FRAME_INFO_ENVELOPE: Final = ("id", "name", "data")
# JSON type of a Python value or annotation on those objects: bytes are written as hex.
_PYTHON_TYPES: Final[dict[type, str]] = {int: "int", str: "str", bytes: "hex", float: "float", bool: "bool"}


@dataclass(frozen=True, slots=True)
class FieldInfo:
    name: str
    type: str
    meaning: str
    messages: tuple[str, ...]


class _Uses:
    """Each field name's types with the messages using each, in first-seen order: a field declared with
    several widths (GET_META's u32 ``deleted``, DCP_PREPARE's u8) is listed with all of them."""

    def __init__(self) -> None:
        self.kinds: dict[str, dict[str, list[str]]] = {}

    def add(self, name: str, kind: str, where: str) -> None:
        users = self.kinds.setdefault(name, {}).setdefault(kind, [])
        if where not in users:
            users.append(where)

    def info(self, name: str, label: str, meaning: str) -> FieldInfo:
        """``name``'s row: its types narrowest first (``u32|u64``), the narrower ones' messages named after the
        meaning, as a reader of one message needs to know which width it has."""
        by_kind = self.kinds[name]
        kinds = sorted(by_kind, key=_width)
        messages = tuple(dict.fromkeys(where for kind in by_kind for where in by_kind[kind]))
        if len(kinds) > 1:
            widths = "; ".join(f"{kind} in {', '.join(by_kind[kind])}" for kind in kinds[:-1])
            widths += f"; {kinds[-1]} in the others"
            meaning = f"{meaning} ({widths})" if meaning else widths
        return FieldInfo(label, "|".join(kinds), meaning, messages)


def _width(kind: str) -> int:
    """Sort key of a type: unsigned integers by width, any other type after them."""
    return int(kind[1:]) if kind[:1] == "u" and kind[1:].isdigit() else 1 << 16


def _typed(pairs: Iterable[tuple[str, object]]) -> list[tuple[str, str]]:
    return [(name, _PYTHON_TYPES[hint if isinstance(hint, type) else type(hint)]) for name, hint in pairs]


def object_fields() -> list[tuple[str, str]]:
    """``(path, type)`` of the objects in ``xattrs`` and ``diagnostics``, from what they are made of."""
    hints = typing.get_type_hints(Xattr)
    sample = diagnostic(next(iter(CATALOGUE)), "", 0).to_json()  # with an offset: every key it can have
    return ([(f"xattrs[].{name}", kind) for name, kind in _typed((f.name, hints[f.name]) for f in fields(Xattr))]
            + [(f"diagnostics[].{name}", kind) for name, kind in _typed(sample.items())])


def frame_info_fields() -> list[FieldInfo]:
    """``frame_infos[].*``: each frame info's fields, with the frame infos (by kv_engine name) that carry them
    (none for the id, name and data every frame info has)."""
    uses = _Uses()
    hints = typing.get_type_hints(frameinfo.FrameInfo)
    envelope = {name: _PYTHON_TYPES.get(hints.get(name, str), "str") for name in FRAME_INFO_ENVELOPE}
    for response, table in ((False, frameinfo.REQUEST_FRAME_GRAMMARS), (True, frameinfo.RESPONSE_FRAME_GRAMMARS)):
        vocab = frameinfo.vocabulary(response)
        for frame_id, by_length in table.items():
            for grammar in by_length.values():
                for name, kind in walk.field_names(grammar):
                    uses.add(name, kind, vocab.name(frame_id))
                    if name in frameinfo.ENCODED_DURATIONS:
                        uses.add(name.replace("_encoded", "_us"), "int", vocab.name(frame_id))
                    if name == "durability_level":
                        uses.add("durability_level_name", "str", vocab.name(frame_id))
    for frame_id in sorted(frameinfo.TEXT_FRAMES):
        uses.add("text", "str", frameinfo.vocabulary(response=False).name(frame_id))
    first, last = FRAME_INFO_ENVELOPE[:-1], FRAME_INFO_ENVELOPE[-1:]
    return ([FieldInfo(f"frame_infos[].{name}", envelope[name], FRAME_GLOSSARY.get(name, ""), ()) for name in first]
            + [uses.info(name, f"frame_infos[].{name}", FRAME_GLOSSARY.get(name, "")) for name in uses.kinds]
            + [FieldInfo(f"frame_infos[].{name}", envelope[name], FRAME_GLOSSARY.get(name, ""), ()) for name in last])


def catalogue() -> list[FieldInfo]:
    """Every JSON field: the common ones and their objects' fields, then each declared extras/value field with
    its messages."""
    uses = _Uses()
    for dialect, spec, variant in all_variants():
        where = f"{spec.name}/{variant.name}" if dialect.name == "dcp" else f"{dialect.name}:{variant.name}"
        declared: list[tuple[str, str]] = []
        if variant.layout is not None:
            declared += walk.field_names(variant.layout.grammar)
        for g in variant.grammars:
            declared += walk.field_names(g)
        if variant.value_path is not None:
            declared += [("path", "str"), ("path_encoding", "str")]
        if variant.terminator is not None:
            declared.append((variant.terminator, "bool"))
        for name, kind in declared:
            uses.add(name, kind, where)
    common = {name for name, _, _ in COMMON_FIELDS}
    out = [FieldInfo(name, kind, meaning, ()) for name, kind, meaning in COMMON_FIELDS]
    out += [FieldInfo(name, kind, OBJECT_GLOSSARY.get(name, ""), ()) for name, kind in object_fields()]
    out += frame_info_fields()
    out += [uses.info(name, name, GLOSSARY.get(name, "")) for name in sorted(uses.kinds) if name not in common]
    return out


def field_roots() -> frozenset[str]:
    """The names a record can have at its top level (``failover_log`` for ``failover_log[].seqno``): what a
    filter or template may name."""
    return frozenset(f.name.partition("[")[0].partition(".")[0] for f in catalogue())
