"""Every declared variant round-trips; compiled grammars agree with interpreted ones."""

from __future__ import annotations

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
from dcpctl.render.jsonl import to_base64
from dcpctl.render.record import record as record_of

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
    assert message.variant is variant, (message.variant, record_of(message)["diagnostics"])
    again = record_of(message)
    assert encode(again, dialect) == wire
    assert encode(to_base64(again), dialect) == wire
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
