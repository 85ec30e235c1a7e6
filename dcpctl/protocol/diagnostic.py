"""Named diagnostics: what a framed message does that its specification does not allow.

A diagnostic never stops decoding (house rule 4). Every name used anywhere is declared in ``CATALOGUE`` with
its severity and meaning, so ``dcpctl fields --diagnostics`` and the man page can list them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ERROR: Final = "error"
WARNING: Final = "warning"
NOTE: Final = "note"

CATALOGUE: Final[dict[str, tuple[str, str]]] = {
    # framing and header
    "unknown_magic": (ERROR, "first byte is not a known magic"),
    "unknown_request_type": (WARNING, "UPR draft: the request/message type byte is not defined for the opcode"),
    "unknown_opcode": (NOTE, "opcode unknown to this dialect; body kept raw"),
    "body_length_mismatch": (ERROR, "total body length disagrees with the bytes present"),
    "truncated": (ERROR, "the packet ends before its declared length"),
    "lengths_exceed_body": (ERROR, "framing extras + extras + key lengths exceed the total body length"),
    "skipped_bytes": (ERROR, "bytes that do not start a plausible header were skipped"),
    "body_too_long": (ERROR, "total body length above the configured maximum"),
    # frame infos
    "bad_frame_info": (ERROR, "frame info runs past the framing extras"),
    "unknown_frame_info": (WARNING, "frame info id unknown"),
    "illegal_frame_info_length": (ERROR, "frame info has the wrong length for its id"),
    "non_canonical_frame_info": (NOTE, "frame info uses a longer encoding than needed"),
    "stream_id_zero": (ERROR, "DCP stream id 0 is invalid"),
    "invalid_durability_level": (ERROR, "durability requirement frame info with a level other than 1, 2 or 3"),
    "reserved_durability_timeout": (ERROR, "durability timeout 0 or 65535 ms: reserved, the server answers Einval"),
    # layout
    "illegal_extras_length": (ERROR, "extras length not allowed for this message"),
    "extras_length_mismatch": (ERROR, "header extras length differs from the documented layout"),
    "must_not_have_key": (ERROR, "message must not have a key"),
    "must_have_key": (ERROR, "message must have a key"),
    "must_not_have_value": (ERROR, "message must not have a value"),
    "must_have_value": (ERROR, "message must have a value"),
    "illegal_value_length": (ERROR, "value length does not fit the value layout"),
    "nmeta_not_zero": (ERROR, "extended meta length must be 0"),
    "by_seqno_zero": (ERROR, "by_seqno 0 is invalid"),
    "unknown_flags": (ERROR, "flag bits the specification does not define"),
    "invalid_datatype": (ERROR, "datatype bits above 0x07"),
    "invalid_deletion_datatype": (ERROR, "datatype not allowed for a deletion"),
    "unknown_marker_version": (ERROR, "snapshot marker version byte unknown"),
    "unknown_system_event": (WARNING, "system event id or version unknown; value kept raw"),
    "flatbuffers_table_invalid": (ERROR, "a version-2 system event's value is not a FlatBuffers table as kv_engine "
                                  "writes it (an offset outside it, or laid out otherwise); value kept raw"),
    "odd_feature_list": (ERROR, "HELLO value has an odd length"),
    "redacted": (NOTE, "secret bytes hidden; --show-secrets reveals them"),
    # values
    "bad_snappy": (ERROR, "value marked SNAPPY does not decompress"),
    "bad_xattr": (ERROR, "value marked XATTR has a malformed xattr blob"),
    "bad_json": (WARNING, "value marked JSON is not valid JSON"),
    "bad_leb128": (ERROR, "an LEB128 number (a key's collection-id prefix, a range scan length) is not a "
                   "32-bit number in its shortest form"),
    "collections_unknown": (NOTE, "collections state unknown: key prefix not split"),
    # stream-request JSON value (reference 3.4.4, seed 004)
    "stream_request_json_invalid": (ERROR, "stream-request value is not a JSON object"),
    "stream_request_json_no_known_key": (ERROR, "stream-request value has none of the known keys"),
    "stream_request_json_unknown_key": (NOTE, "stream-request value has a key the server ignores"),
    "stream_request_sid_invalid": (ERROR, "sid must be an integer from 1 to 65535"),
    "stream_request_collections_and_scope": (ERROR, "collections together with scope is invalid"),
    "stream_request_bad_collection_id": (ERROR, "collection ids must be hex strings"),
    "stream_request_bad_scope_id": (ERROR, "scope id must be a hex string"),
    "stream_request_bad_uid": (WARNING, "uid should be a hex string"),
    "stream_request_bad_purge_seqno": (ERROR, "purge_seqno must be a string of decimal digits"),
    "stream_request_value_without_collections": (WARNING, "a value is only allowed with HELLO Collections"),
    "stream_request_seqno_range": (WARNING, "snap_start <= start <= snap_end or start <= end violated"),
    # documents and dialects (errata)
    "legacy_stream_request_layout": (NOTE, "40-byte stream request (2013-2014 layout ending in high seqno)"),
    "legacy_expiration_layout": (NOTE, "18-byte expiration extras (the deletion v1 layout, no expiry time)"),
    "rollback_seqno_in_extras": (WARNING, "rollback seqno sent as extras; servers send it as the value"),
    "marker_v2_1_retired": (NOTE, "snapshot marker v2.1 (timestamp) was removed from servers in 2024"),
    "obsolete_opcode": (WARNING, "opcode is obsolete and unsupported by current servers"),
    "response_type_conflict": (WARNING, "the draft's response-type table gives this type another meaning"),
    "document_errata": (NOTE, "the source document's annotation disagrees with its bytes"),
    # state across a connection (captures and live sessions)
    "seqno_outside_snapshot": (ERROR, "an item's seqno is outside its snapshot marker's range"),
    "seqno_backwards": (ERROR, "seqnos went backwards within a stream"),
    "item_before_marker": (ERROR, "an item arrived before any snapshot marker of its stream"),
    "vbucket_uuid_changed": (WARNING, "the server's newest vbucket uuid differs from the one requested"),
    "stream_end": (NOTE, "a stream ended, with the reason"),
    "takeover": (NOTE, "a takeover stream's DCP_SET_VBUCKET_STATE: a step of handing the vbucket to the consumer"),
    "set_vbucket_state_without_takeover": (WARNING, "DCP_SET_VBUCKET_STATE on a stream not requested with TakeOver"),
    "takeover_unanswered": (WARNING, "a takeover step (a vbucket state, a marker flagged Acknowledge) the consumer "
                            "never answered: the takeover cannot finish"),
    "flow_control_exceeded": (WARNING, "unacknowledged bytes above the negotiated connection buffer size"),
    "rollback": (WARNING, "a rollback negotiation: the server's answer or the retry that followed"),
    "capture_gap": (ERROR, "bytes missing from the capture before this message; decoding resynchronised"),
    "tls_port": (NOTE, "a TLS connection (port 11207, or a stream opening with a TLS hello) cannot be decoded"),
    "protocol_on_other_port": (WARNING, "nothing on the decoded ports, but another port carries what looks like "
                               "the protocol: decode it with --port"),
    "overlap_conflict": (WARNING, "a retransmitted TCP segment differs from the bytes delivered; the first was kept"),
    "no_stream": (WARNING, "a stream message on an opaque no stream request of the connection opened"),
    "capture_dropped": (ERROR, "libpcap says the kernel or the interface dropped packets during a live capture"),
    "connection_limit": (WARNING, "more connections open at once than --max-connections; the oldest not followed"),
}


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A named finding about one message; ``offset``/``length`` point at the bytes concerned."""

    name: str
    message: str
    offset: int | None = None
    length: int = 0

    @property
    def severity(self) -> str:
        return CATALOGUE[self.name][0]

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "severity": self.severity, "message": self.message}
        if self.offset is not None:
            out["offset"] = self.offset
            out["length"] = self.length
        return out


def diagnostic(name: str, message: str, offset: int | None = None, length: int = 0) -> Diagnostic:
    """Create a diagnostic; the name must be declared in ``CATALOGUE``."""
    if name not in CATALOGUE:
        raise KeyError(f"undeclared diagnostic {name!r}")
    return Diagnostic(name, message, offset, length)
