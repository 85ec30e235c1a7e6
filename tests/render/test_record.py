"""The record is built in render/ from what the message's check pass read: the fast path for stream items
gives the same record as the general one, the check pass builds no record, and nothing is read twice."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from protocol.strategies import every_variant, variant_records

from dcpctl.protocol import message as message_module
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, ValueReading, decode
from dcpctl.protocol.registry import DIALECTS, UPR_DRAFT_ROWS
from dcpctl.protocol.value import Xattr, build_xattrs, snappy_compress
from dcpctl.render.record import record as record_of

VARIANTS = every_variant()
UPR_SPECS = {id(s) for s in UPR_DRAFT_ROWS}

# The fast path is for items with a declared extras layout (a stream's) and nothing to note; APPEND/PREPEND
# carry a document value without extras, the 18-byte expiration a legacy-layout note: the general path.
FAST = [v for v in VARIANTS if v[2].value.value == "document" and v[2].layout is not None and v[2].note is None
        and id(v[1]) not in UPR_SPECS]


@pytest.mark.parametrize(("name", "spec", "variant"), FAST, ids=[v[0] for v in FAST])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), collections=st.sampled_from([None, False, True]),
       value=st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=20).map(str.encode),
                       st.sampled_from([b'{"a":1}', b"NaN", b"[1,", b"", b"x\ty\n", b"\x00\x01"])),
       datatype=st.sampled_from([None, 0, 1]))
def test_fast_record_path_equals_the_general_one(name: str, spec: Any, variant: Any, data: st.DataObject,
                                                 collections: bool | None, value: bytes | None,
                                                 datatype: int | None) -> None:
    """The stream items' fast path (``_Plan.fast``: the check pass's and the record's) builds the same record,
    key order and diagnostics included."""
    record = data.draw(variant_records(spec, variant))
    if value is not None:
        record["value"] = value.hex()
        record["value_encoding"] = "hex"
        record.pop("xattrs", None)
    if datatype is not None:
        record["datatype"] = datatype
    wire = encode(record, DIALECTS["dcp"], fix_lengths=True)
    options = DecodeOptions(collections=collections)
    fast = decode(wire, 0, options)
    general = decode(wire, 0, options)
    assert general.plan is not None
    general.plan = dataclasses.replace(general.plan, fast=None)
    assert list(record_of(fast).items()) == list(record_of(general).items())
    if record["magic"] == "ClientRequest":
        assert fast.plan is not None
        assert fast.plan.fast is not None  # the fast path was the one compared


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
    assert msg.rendered is None  # the diagnostics came from the check pass alone
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
    assert record_of(msg) is record is msg.rendered


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
