"""Every declared variant round-trips; compiled grammars agree with interpreted ones."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from construct import Construct, Struct
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import every_variant, variant_records

from dcpctl.protocol import grammar
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.protocol.registry import DIALECTS, UPR_DRAFT_ROWS

VARIANTS = every_variant()
UPR_SPECS = {id(s) for s in UPR_DRAFT_ROWS}


@pytest.mark.parametrize(("name", "spec", "variant"), VARIANTS, ids=[v[0] for v in VARIANTS])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_variant_round_trips(name: str, spec: Any, variant: Any, data: st.DataObject) -> None:
    dialect = DIALECTS["upr-draft" if id(spec) in UPR_SPECS else "dcp"]
    record = data.draw(variant_records(spec, variant))
    wire = encode(record, dialect, fix_lengths=True)
    message = decode(wire, 0, DecodeOptions(dialect=dialect, show_secrets=True))
    assert message.variant is variant, (message.variant, message.record()["diagnostics"])
    again = message.record()
    assert encode(again, dialect) == wire
    for field in ("key", "by_seqno", "failover_log", "xattrs"):
        if field in record:
            missing = "" if field == "key" else None
            assert again.get(field, missing) == record[field], field
    assert not [d for d in again["diagnostics"] if d["name"] in (
        "illegal_extras_length", "extras_length_mismatch", "truncated", "bad_xattr", "bad_snappy")]


# construct's compiled Bytes(this.x) reads short without raising (the interpreted form raises StreamError),
# so declarations with a length taken from another field are compared on complete input only; dcpctl
# parses those with the interpreted form (see test_compiled_bytes_does_not_check_length). A fixed Bytes(16)
# reads short compiled as well.
LENGTH_PREFIXED = {"cache_transfer_record", "cache_transfer_value", "observe_key", "observe_request_value",
                   "observe_key_state", "observe_response_value", "range_scan_create_response_value",
                   "range_scan_key", "range_scan_keys_value", "range_scan_document", "range_scan_documents_value"}


def _grammars() -> list[tuple[str, Construct]]:
    return [(name, value) for name, value in vars(grammar).items()
            if isinstance(value, Struct) and not name.startswith("_") and name not in LENGTH_PREFIXED]


def test_compiled_bytes_does_not_check_length() -> None:
    short = bytes(36) + b"\x00\x01" + bytes(2)  # key_length 1, no key byte
    with pytest.raises(Exception):  # noqa: B017 - construct.StreamError
        grammar.cache_transfer_record.parse(short)
    grammar.cache_transfer_record.compile().parse(short)  # the compiled form accepts it


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_fixed_layout_codec_agrees_with_the_declaration(data: st.DataObject) -> None:
    """The struct fast path is derived from each declaration; check it decodes exactly as construct does."""
    _, _, variant = data.draw(st.sampled_from([v for v in VARIANTS if v[2].layout is not None]))
    layout = variant.layout
    raw = data.draw(st.binary(min_size=layout.size, max_size=layout.size))
    parsed = layout.grammar.parse(raw)
    assert layout.unpack(raw) == {name: parsed[name] for name in layout.names}
    assert layout.pack(layout.unpack(raw)) == bytes(layout.grammar.build(parsed)) == raw


@pytest.mark.parametrize(("name", "declaration"), _grammars(), ids=[n for n, _ in _grammars()])
@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=128))
def test_compiled_grammar_agrees_with_interpreted(name: str, declaration: Construct,
                                                  data: bytes) -> None:
    compiled = _compiled(name, declaration)
    try:
        expected: Any = declaration.parse(data)
    except Exception:  # noqa: BLE001 - both forms must refuse the same inputs
        with pytest.raises(Exception):  # noqa: B017 - compiled code raises struct.error instead
            compiled.parse(data)
        return
    assert compiled.parse(data) == expected


_COMPILED: dict[str, Construct] = {}


def _compiled(name: str, declaration: Construct) -> Construct:
    if name not in _COMPILED:
        _COMPILED[name] = declaration.compile()
    return _COMPILED[name]


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
    """The stream items' fast path (``_Plan.fast``) builds the same record, key order included."""
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
    assert list(fast.record().items()) == list(general.record().items())
    if record["magic"] == "ClientRequest":
        assert fast.plan is not None
        assert fast.plan.fast is not None  # the fast path was the one compared
