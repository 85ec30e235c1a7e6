"""The record is built in render/ from what the message's check pass read: one builder per message shape,
generated from the names, gives the record in its documented order; the check pass builds no record, and
nothing is read twice."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol.strategies import every_variant, variant_records

from dcpctl.dcp.observed import Observed
from dcpctl.protocol import message as message_module
from dcpctl.protocol.constants import ALT_MAGICS, MAGICS
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, Message, ValueReading, decode
from dcpctl.protocol.registry import DIALECTS, UPR_DRAFT_ROWS, Presence, ValueKind
from dcpctl.protocol.value import Xattr, build_xattrs, snappy_compress
from dcpctl.render import record as record_module
from dcpctl.render.record import builder_of
from dcpctl.render.record import record as record_of

VARIANTS = every_variant()
UPR_SPECS = {id(s) for s in UPR_DRAFT_ROWS}
# Where each header field ends, as the protocol documents draw the header (the alternative encoding splits
# the key length's word into framing extras length and key length); the type field is byte 5
HEADER_ENDS = {"magic": 1, "opcode": 2, "key_length": 4, "extras_length": 5, "datatype": 6, "request_type": 6,
               "request_type_name": 6, "vbucket": 8, "status": 8, "total_body_length": 12, "opaque": 16, "cas": 24}
ALT_HEADER_ENDS = {**HEADER_ENDS, "framing_extras_length": 3, "key_length": 4}
HEADER_STARTS = {"key_length": 2, "framing_extras_length": 2, "total_body_length": 8, "opaque": 12, "cas": 16,
                 "vbucket": 6, "status": 6}


def documented(msg: Message, first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
    """The record in the order dcpctl(1) documents, every key decided for this message alone from its views
    (the oracle the generated builders are held to; the key and value go through the record's one path)."""
    rec = {**first, "offset": msg.offset, "magic": MAGICS.name_of.get(msg.magic) or MAGICS.name(msg.magic),
           "opcode": msg.opcode_name}
    spec, variant = msg.spec, msg.variant
    type_field = spec.type_field if spec is not None else "datatype"
    if type_field != "datatype":
        rec[type_field] = msg.datatype
        if variant is not None and variant.label:
            rec[f"{type_field}_name"] = variant.label
    if msg.has_status:
        rec["status"] = msg.status_name
    else:
        rec["vbucket"] = msg.vbucket_or_status
    rec.update(opaque=msg.opaque, cas=msg.cas)
    if type_field == "datatype":
        rec["datatype"] = msg.datatype
    rec.update(key_length=msg.key_length, extras_length=msg.extras_length)
    if msg.magic in ALT_MAGICS:
        rec["framing_extras_length"] = msg.framing_extras_length
    rec["total_body_length"] = msg.total_body_length
    if msg.framing_extras_length:
        record_module._framing(msg, rec)
    if msg.extras_values is not None:
        rec.update(zip(msg.plan.names, msg.extras_values, strict=True))  # type: ignore[union-attr]
    else:
        record_module._raw_extras(msg, rec)
    record_module._key_value(msg, rec)
    if variant is not None and variant.terminator and msg.key_length == 0 and not msg.value and msg.status == 0:
        rec[variant.terminator] = True
    if len(msg.raw) < 24:  # cut short inside the header: only the fields it has, and where it stops
        ends = ALT_HEADER_ENDS if msg.magic in ALT_MAGICS else HEADER_ENDS
        starts = {**HEADER_STARTS, "key_length": 3} if msg.magic in ALT_MAGICS else HEADER_STARTS
        rec = {k: v for k, v in rec.items() if ends.get(k, 0) <= len(msg.raw)}
        rec["header_length"] = len(msg.raw)
        cut = [starts[k] for k, end in ends.items() if k in starts and starts[k] < len(msg.raw) < end]
        if cut:
            rec["header_trailing"] = msg.raw[cut[0]:].hex()
    rec.update(last)
    rec["diagnostics"] = [d.to_json() for d in msg.diagnostics]
    return rec


@pytest.mark.parametrize(("name", "spec", "variant"), VARIANTS, ids=[v[0] for v in VARIANTS])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), collections=st.sampled_from([None, False, True]),
       value=st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=20).map(str.encode),
                       st.sampled_from([b'{"a":1}', b"NaN", b"[1,", b"", b"x\ty\n", b"\x00\x01"])),
       datatype=st.sampled_from([None, 0, 1]), cut=st.one_of(st.none(), st.integers(0, 60)),
       context=st.booleans(), success=st.booleans(), bare=st.booleans())
def test_the_generated_builder_gives_the_documented_record(
        name: str, spec: Any, variant: Any, data: st.DataObject, collections: bool | None, value: bytes | None,
        datatype: int | None, cut: int | None, context: bool, success: bool, bare: bool) -> None:
    """On packets of every variant (responses of any status, alt magics with frame infos, values of any
    bytes, cut short anywhere, with and without a capture's context), the shape's builder (generated once,
    maybe from another message of the shape) gives the documented keys, in order, with the message's values."""
    dialect = DIALECTS["upr-draft" if id(spec) in UPR_SPECS else "dcp"]
    record = data.draw(variant_records(spec, variant))
    if value is not None and variant.value is ValueKind.DOCUMENT:
        record["value"] = value.hex()
        record["value_encoding"] = "hex"
        record.pop("xattrs", None)
        if datatype is not None and spec.type_field == "datatype":
            record["datatype"] = datatype
    if success and "status" in record and "status" not in dict(variant.when):
        record["status"] = "Success"  # (the strategy draws other statuses where the row names none)
    if bare:  # no key and no value where they may be absent (a terminator's shape)
        for part, presence in (("key", variant.key_presence), ("value", variant.value_presence)):
            if presence is Presence.OPTIONAL and isinstance(record.get(part), str):
                record.pop(part)
                record.pop(f"{part}_encoding", None)
    wire = encode(record, dialect, fix_lengths=True)
    if cut is not None:
        wire = wire[:cut]
    options = DecodeOptions(dialect=dialect, collections=collections)
    first = {"ts": 1.5, "connection": "a:1>b:2", "direction": "server>client"} if context else {}
    last = {"stream_vbucket": 3} if context else {}
    msg, oracle = decode(wire, 0, options), decode(wire, 0, options)
    expected = documented(oracle, first, last)
    shown = Observed(msg, dict(first), dict(last)) if context else msg
    assert list(record_of(shown).items()) == list(expected.items())


def test_one_builder_per_shape_and_the_bound_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages of one shape share a builder; past the bound builders are generated again, still right."""
    def mutation(seqno: int, vbucket: int) -> Message:
        return decode(encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": vbucket,
                              "opaque": 1, "cas": 2, "datatype": 0, "by_seqno": seqno, "rev_seqno": 1, "flags": 0,
                              "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0, "key": "k", "value": "v"},
                             fix_lengths=True))

    assert builder_of(mutation(1, 1)) is builder_of(mutation(2, 9))
    monkeypatch.setattr(record_module, "_BY_PLAN", {})
    monkeypatch.setattr(record_module, "_BY_SHAPE", {})
    monkeypatch.setattr(record_module, "BUILDER_LIMIT", 0)
    one, other = mutation(5, 1), mutation(6, 2)
    assert builder_of(one) is not builder_of(other)
    assert not record_module._BY_PLAN
    assert not record_module._BY_SHAPE
    assert (record_of(one)["by_seqno"], record_of(other)["vbucket"]) == (5, 2)


def _mutation(datatype: int, compressed: bytes) -> bytes:
    """A mutation whose value is ``compressed``, exactly (snappy, with the xattrs inside)."""
    return encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 3, "opaque": 9, "cas": 1,
                   "datatype": datatype, "by_seqno": 5, "rev_seqno": 1, "flags": 0, "expiration": 0,
                   "lock_time": 0, "nmeta": 0, "nru": 0, "key": b"\x08doc".hex(), "key_encoding": "hex",
                   "value": "", "value_compressed": compressed.hex()}, fix_lengths=True)


BODY = b'{"name":"x"}'
XATTRS = build_xattrs([Xattr("_sync", '{"rev":"1-a"}')])


def test_the_check_pass_builds_no_record_and_keeps_what_it_read() -> None:
    msg = decode(_mutation(7, snappy_compress(XATTRS + BODY)), 0, DecodeOptions(collections=True))
    assert not msg.diagnostics
    assert msg.collection_id == 8
    assert msg.document_key == b"doc"
    assert msg.value_reading is ValueReading.DOCUMENT
    assert msg.inflated
    assert msg.xattrs == [Xattr("_sync", '{"rev":"1-a"}')]
    assert msg.document == BODY
    assert msg.document_text == BODY.decode()
    record = record_of(msg)
    assert (record["collection_id"], record["key"], record["value"]) == (8, "doc", BODY.decode())
    assert record["xattrs"] == [{"key": "_sync", "value": '{"rev":"1-a"}'}]
    assert record_of(msg) == record


@pytest.mark.parametrize("first", ["diagnostics", "record"])
def test_a_value_is_inflated_and_its_xattrs_read_once(first: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    inflate, xattrs = message_module.snappy_decompress, message_module.parse_xattrs

    def counted_inflate(data: bytes) -> bytes | str:
        calls.append("snappy")
        return inflate(data)

    def counted_xattrs(data: bytes) -> tuple[list[Xattr], int] | str:
        calls.append("xattrs")
        return xattrs(data)

    monkeypatch.setattr(message_module, "snappy_decompress", counted_inflate)
    monkeypatch.setattr(message_module, "parse_xattrs", counted_xattrs)
    msg = decode(_mutation(7, snappy_compress(XATTRS + b"{bad")), 0, DecodeOptions(collections=True))
    if first == "diagnostics":
        assert [d.name for d in msg.diagnostics] == ["bad_json"]
    record = record_of(msg)
    assert [d["name"] for d in record["diagnostics"]] == ["bad_json"]
    assert [d.name for d in msg.diagnostics] == ["bad_json"]
    assert calls == ["snappy", "xattrs"]


def test_a_grammar_value_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    parse = message_module._parse_grammar_value

    def counted(msg: Any, variant: Any) -> Any:
        calls.append(variant.name)
        return parse(msg, variant)

    monkeypatch.setattr(message_module, "_parse_grammar_value", counted)
    raw = encode({"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Success", "opaque": 1,
                  "failover_log": [{"vbucket_uuid": 7, "seqno": 30}]}, fix_lengths=True)
    msg = decode(raw)
    assert not msg.diagnostics
    assert msg.value_reading is ValueReading.FIELDS
    record = record_of(msg)
    assert record["failover_log"] == [{"vbucket_uuid": 7, "seqno": 30}]
    assert msg.field("failover_log")[0].seqno == 30
    assert len(calls) == 1
