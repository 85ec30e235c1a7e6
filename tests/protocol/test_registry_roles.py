"""Opcode sets and the header codec come from their declarations: the registry rows and the header grammar.

The sets are checked against the reference's own words (section 3: what a producer pushes, on which stream,
which messages are items), written here by name, so a row declared wrong fails; the header codec and every
offset read from it are checked against a walk of the header grammar.
"""

from __future__ import annotations

import struct

import pytest

from dcpctl.dcp.session import ConnectionTracker
from dcpctl.protocol import grammar, walk
from dcpctl.protocol import registry as r
from dcpctl.protocol.constants import Opcode
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, decode


def _codes(*names: str) -> frozenset[int]:
    return frozenset(int(Opcode[name]) for name in names)


CHANGES = ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")
ITEMS = (*CHANGES, "DCP_PREPARE", "DCP_SYSTEM_EVENT")
ON_STREAM = (*ITEMS, "DCP_STREAM_END", "DCP_SNAPSHOT_MARKER", "DCP_FLUSH", "DCP_SET_VBUCKET_STATE", "DCP_COMMIT",
             "DCP_ABORT", "DCP_SEQNO_ADVANCED", "DCP_OSO_SNAPSHOT", "DCP_CACHE_TRANSFER", "DCP_CACHE_TRANSFER_END")


@pytest.mark.parametrize(("derived", "expected"), [
    (r.CHANGE_OPCODES, _codes(*CHANGES)),
    (r.DOCUMENT_ITEM_OPCODES, _codes(*CHANGES, "DCP_PREPARE")),
    (r.ITEM_OPCODES, _codes(*ITEMS)),
    (r.BY_SEQNO_OPCODES, _codes(*ITEMS, "DCP_SEQNO_ADVANCED")),
    (r.STREAM_OPCODES, _codes(*ON_STREAM)),
    (r.PUSHED_OPCODES, _codes(*ON_STREAM, "DCP_NOOP")),
    (r.ANSWERED_OPCODES, _codes("DCP_NOOP", "DCP_SNAPSHOT_MARKER", "DCP_SET_VBUCKET_STATE", "DCP_CACHE_TRANSFER")),
    (r.BEFORE_AUTH_OPCODES, _codes("HELLO", "SASL_LIST_MECHS", "SASL_AUTH", "SASL_STEP", "GET_ERROR_MAP")),
], ids=["changes", "document items", "items", "by_seqno", "on stream", "pushed", "answered", "before auth"])
def test_opcode_sets_are_the_rows(derived: frozenset[int], expected: frozenset[int]) -> None:
    assert derived == expected
    assert all(type(code) is int for code in derived)  # plain ints: the per-message path hashes them


def test_every_item_row_declares_a_by_seqno_and_a_stream() -> None:
    for spec in r.DCP.table.values():
        if spec.item is not r.Item.NONE:
            assert spec.by_seqno, spec.name
            assert spec.on_stream, spec.name


def test_row_properties_come_from_the_variants() -> None:
    mutation = r.DCP.table[r.REQ, Opcode.DCP_MUTATION]
    assert [mutation.by_seqno, mutation.document_key, mutation.needs_key, mutation.document_item] == [True] * 4
    noop = r.DCP.table[r.REQ, Opcode.DCP_NOOP]
    assert [noop.by_seqno, noop.document_key, noop.needs_key, noop.on_stream] == [False] * 4
    assert noop.pushed is r.Pushed.CONNECTION
    assert r.names(r.CHANGE_OPCODES) == set(CHANGES)


HEADERS = [grammar.request_header, grammar.response_header, grammar.alt_request_header,
           grammar.alt_response_header, grammar.upr_draft_header]


@pytest.mark.parametrize("header", HEADERS, ids=["request", "response", "alt request", "alt response", "upr"])
def test_one_header_codec_reads_every_header_grammar(header: object) -> None:
    raw = bytes(range(1, 25))
    values = r.HEADER_LAYOUT.codec.unpack(raw)
    spans = list(walk.spans(header, raw))
    assert sum(span.length for span in spans) == r.HEADER_LAYOUT.size == grammar.HEADER_LENGTH == 24
    by_offset = {span.offset: span for span in spans}
    for name, value in zip(r.HEADER_LAYOUT.names, values, strict=True):
        at = r.HEADER_LAYOUT.offset(name)
        if at in by_offset and by_offset[at].length == r.HEADER_LAYOUT.field(name).size:
            assert by_offset[at].value == value, name


@pytest.mark.parametrize("name", ["magic", "opcode", "key_length", "extras_length", "datatype", "vbucket",
                                  "total_body_length", "opaque", "cas"])
def test_header_offsets_prefixes_and_fields_agree_with_the_grammar(name: str) -> None:
    raw = bytes(range(100, 124))
    span = next(s for s in walk.spans(grammar.request_header, raw) if s.path == name)
    layout = r.HEADER_LAYOUT
    assert layout.offset(name) == span.offset
    assert layout.field(name).unpack_from(raw, layout.offset(name))[0] == span.value
    prefix = layout.prefix(name).unpack_from(raw)
    assert prefix == layout.codec.unpack(raw)[:len(prefix)]
    assert prefix[-1] == span.value


def test_the_opcode_limit_is_the_header_field() -> None:
    assert r.OPCODE_MAX == 255
    assert r.HEADER_LAYOUT.field("opcode").size == struct.calcsize(">B")


def _pushed(opcode: str, opaque: int, **fields: object) -> bytes:
    return encode({"magic": "ClientRequest", "opcode": opcode, "vbucket": 3, "opaque": opaque, **fields},
                  fix_lengths=True)


@pytest.mark.parametrize(("opcode", "fields"), [
    ("DCP_OSO_SNAPSHOT", {"oso_flags": 1}),
    ("DCP_COMMIT", {"prepared_seqno": 4, "commit_seqno": 5, "key": "k"}),
    ("DCP_ABORT", {"prepared_seqno": 4, "abort_seqno": 5, "key": "k"}),
    ("DCP_SET_VBUCKET_STATE", {"vbucket_state": 1}),
])
def test_stream_messages_on_an_unknown_opaque_are_reported(opcode: str, fields: dict[str, object]) -> None:
    """Every message the reference sends on a stream is tied to one, not only items, markers and ends."""
    tracker = ConnectionTracker(DecodeOptions(collections=False), known_from_start=True)
    msg = decode(_pushed(opcode, 77, **fields), 0, tracker.options())
    note = tracker.observe(msg, from_client=False, ts=1.0)
    assert [d.name for d in note.diagnostics] == ["no_stream"]


def test_a_noop_is_not_tied_to_a_stream() -> None:
    tracker = ConnectionTracker(DecodeOptions(collections=False), known_from_start=True)
    msg = decode(_pushed("DCP_NOOP", 10_000_001), 0, tracker.options())
    assert tracker.observe(msg, from_client=False, ts=1.0).diagnostics == []
