"""The pure core: one message in, bytes of the same length out, and the placeholders' properties."""

from __future__ import annotations

import json

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vectorfile import all_vectors

from dcpctl.protocol import build
from dcpctl.protocol.constants import DATATYPE_JSON, DATATYPE_SNAPPY, DATATYPE_XATTR, Opcode
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.protocol.registry import DIALECTS
from dcpctl.protocol.value import Xattr, build_xattrs, parse_xattrs, snappy_decompress
from dcpctl.redact.address import AddressMap
from dcpctl.redact.core import Policy, Redactor

ITEM = {"by_seqno": 5, "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0}


def _mutation(key: bytes, value: bytes, datatype: int = 0) -> bytes:
    return build.request(Opcode.DCP_MUTATION, vbucket=9, cas=77, key=key, value=value, datatype=datatype, **ITEM)


def test_header_and_extras_are_kept_and_the_key_replaced() -> None:
    raw = _mutation(b"\x08customer-key", b"plain value")
    out = Redactor(b"salt").message(decode(raw, 0, DecodeOptions(collections=True)))
    assert len(out) == len(raw)
    assert out[:24 + 31] == raw[:24 + 31]
    assert out[55:56] == b"\x08"  # the collection id prefix
    assert b"customer-key" not in out
    assert b"plain value" not in out


def test_the_same_key_gives_the_same_placeholder_and_another_salt_another() -> None:
    one = Redactor(b"salt").placeholder(b"key", b"airline_10")
    assert one == Redactor(b"salt").placeholder(b"key", b"airline_10")
    assert one != Redactor(b"pepper").placeholder(b"key", b"airline_10")
    assert len(one) == len(b"airline_10")
    assert one.isalnum()


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=12),
       st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " \t:\r\n")]), st.booleans())
def test_json_keeps_structure_names_and_length(document: object, separators: tuple[str, str], ascii_only: bool) -> None:
    # escapes (\" \\ \u00e9) and white space around colons: the string scanner's hard cases
    text = json.dumps(document, separators=separators, ensure_ascii=ascii_only).encode()
    out = Redactor(b"salt").json(text)
    assert out is not None
    assert len(out) == len(text)
    redone = json.loads(out)
    assert _shape(redone) == _shape(document)


def _shape(value: object) -> object:
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_shape(item) for item in value]
    return type(value).__name__ if not isinstance(value, bool | type(None)) else value


def test_xattr_names_kept_values_replaced_unless_kept() -> None:
    blob = build_xattrs([Xattr("_sync", '{"rev":"2-abc"}'), Xattr("meta", "secret meta")])
    raw = _mutation(b"k", blob + b'{"a":"body"}', DATATYPE_XATTR | DATATYPE_JSON)
    msg = decode(raw)
    out = Redactor(b"salt", Policy(frozenset({"meta"}))).message(msg)
    parsed = parse_xattrs(decode(out).value)
    assert not isinstance(parsed, str)
    pairs, _ = parsed
    assert [p.key for p in pairs] == ["_sync", "meta"]
    assert pairs[1].value == "secret meta"
    assert json.loads(pairs[0].value).keys() == {"rev"}
    assert "2-abc" not in pairs[0].value


@pytest.mark.parametrize("datatype", [0, DATATYPE_JSON, DATATYPE_XATTR | DATATYPE_JSON, DATATYPE_SNAPPY])
def test_drop_values_empties_a_document_and_makes_the_header_true(datatype: int) -> None:
    value = build_xattrs([Xattr("meta", "x")]) + b'{"a":1}' if datatype & DATATYPE_XATTR else b'{"a":1}'
    if datatype & DATATYPE_SNAPPY:
        value = bytes(cramjam.snappy.compress_raw(value))
    msg = decode(_mutation(b"k", value, datatype))
    out = decode(Redactor(b"salt", Policy(drop_values=True)).message(msg))
    assert out.value == b""
    assert out.total_body_length == msg.total_body_length - len(value)
    assert (out.extras, out.datatype, out.cas) == (msg.extras, msg.datatype, msg.cas)
    assert not out.diagnostics


def test_drop_values_leaves_the_least_value_a_message_must_have() -> None:
    msg = decode(build.request(Opcode.APPEND, key=b"k", value=b"secret tail"))
    out = decode(Redactor(b"salt", Policy(drop_values=True)).message(msg))
    assert out.value == b"0"
    assert not out.diagnostics


def test_a_snappy_document_is_redacted_inside() -> None:
    document = json.dumps({"name": "Very Secret Name", "n": 12345}).encode()
    raw = _mutation(b"k", bytes(cramjam.snappy.compress_raw(document)), DATATYPE_JSON | DATATYPE_SNAPPY)
    out = decode(Redactor(b"salt").message(decode(raw)))
    inflated = snappy_decompress(out.value)
    assert isinstance(inflated, bytes)
    assert b"Very Secret Name" not in inflated
    assert b"12345" not in inflated
    json.loads(inflated)


def test_sasl_values_and_the_user_agent_are_overwritten() -> None:
    auth = build.request(Opcode.SASL_AUTH, key=b"PLAIN", value=b"\x00user\x00password")
    out = Redactor(b"salt").message(decode(auth))
    assert out.endswith(b"*" * len(b"\x00user\x00password"))
    assert b"PLAIN" in out
    hello = build.request(Opcode.HELLO, key=b'{"a":"my-app/1.0 (host-42)","i":"abc/def"}', features=[])
    out = Redactor(b"salt").message(decode(hello))
    assert b'"a":' in out
    assert b"my-app" not in out
    assert b"host-42" not in out


def test_a_message_cut_short_keeps_its_header_only() -> None:
    raw = _mutation(b"customer-key", b"value")[:40]
    out = Redactor(b"salt").message(decode(raw))
    assert out[:24] == raw[:24]
    assert out[24:] == bytes(16)


def test_address_mapping_preserves_prefixes() -> None:
    mapping = AddressMap(b"salt")
    a, b = mapping(bytes([10, 1, 2, 3])), mapping(bytes([10, 1, 2, 77]))
    assert a[:3] == b[:3]
    assert a != bytes([10, 1, 2, 3])
    assert mapping(bytes([10, 1, 2, 3])) == AddressMap(b"salt")(bytes([10, 1, 2, 3]))
    c, d = mapping(bytes(16)), mapping(bytes(15) + b"\x01")
    assert c[:15] == d[:15]
    assert c != d


def _vector(name: str) -> tuple[bytes, DecodeOptions]:
    found = next(v for v in all_vectors() if v.name == name)
    return found.data, DecodeOptions(DIALECTS[found.dialect], found.collections, lenient=found.lenient)


def test_what_a_row_declares_decides_its_redaction() -> None:
    """Facts of the registry rows, not lists in redact/: a system event's key is a collection's name (hashed
    with --hash-names), the UPR draft's stream messages carry documents' keys in a text key."""
    raw, options = _vector("real_system_event_begin_collection")
    assert Redactor(b"salt").message(decode(raw, 0, options)) == raw
    hashed = Redactor(b"salt", Policy(hash_names=True))
    out = hashed.message(decode(raw, 0, options))
    assert b"col1" not in out
    assert len(out) == len(raw)
    assert hashed.counts["names"] == 1
    for name in ("001_11_upr_stream_message_response", "001_12_upr_stream_message_response"):
        raw, options = _vector(name)
        out = Redactor(b"salt").message(decode(raw, 0, options))
        assert b"mykey" in raw
        assert b"mykey" not in out
        assert out[:24] == raw[:24]


def test_a_range_scans_key_range_is_customer_data() -> None:
    # the create's JSON names the keys the scan starts and ends at (base64 of document keys)
    start, end = "YWlybGluZV8x", "YWlybGluZV85"  # airline_1, airline_9
    body = json.dumps({"collection": "8", "range": {"start": start, "end": end}}).encode()
    raw = build.request(Opcode.RANGE_SCAN_CREATE, vbucket=3, value=body, datatype=DATATYPE_JSON)
    out = Redactor(b"salt").message(decode(raw, 0, DecodeOptions()))
    assert len(out) == len(raw)
    assert start.encode() not in out
    assert end.encode() not in out
    assert _shape(json.loads(out[24:])) == _shape(json.loads(body))
