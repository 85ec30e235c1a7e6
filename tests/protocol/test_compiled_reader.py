"""The compiled reader (``protocol.reader``: a function per header shape, generated from the registry's plan)
gives the message the interpreted decoder (``interpret``) gives, and reads every packet that has nothing to
say in its header or extras: on every golden vector, and on generated packets of every variant of both
dialects (requests with stream ids, responses of several statuses), whole, with a byte changed, and cut.
decode(), which tries it first, gives interpret's message on all of them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from strategies import every_variant, variant_records
from test_plain_item import views
from vectorfile import all_vectors

from dcpctl.protocol import reader
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, Message, decode, interpret, shape_key
from dcpctl.protocol.registry import DIALECTS, UPR_DRAFT_ROWS
from dcpctl.render.record import record as record_of

VARIANTS = every_variant()
UPR_SPECS = {id(s) for s in UPR_DRAFT_ROWS}
BASE = 1000  # the packet's stream offset
COMPILED: dict[Any, Any] = {}  # this module's readers, by shape
# What the header, frame info and extras checks say: where the compiled reader hands the packet to interpret.
HEADER_AND_EXTRAS = frozenset({
    "truncated", "body_length_mismatch", "lengths_exceed_body", "unknown_magic", "unknown_opcode",
    "unknown_request_type", "illegal_extras_length", "extras_length_mismatch", "nmeta_not_zero",
    "by_seqno_zero", "unknown_flags", "must_have_key", "must_not_have_key", "must_have_value",
    "must_not_have_value", "invalid_datatype", "invalid_deletion_datatype",
    # the frame infos'
    "non_canonical_frame_info", "unknown_frame_info", "illegal_frame_info_length", "stream_id_zero",
    "bad_frame_info", "invalid_durability_level", "reserved_durability_timeout"})


def compiled(raw: bytes, options: DecodeOptions) -> Message | None:
    """The packet through the reader compiled for its shape (None: no reader, or it declined). Compiled here,
    not taken from the process's readers: after their limit, decode() interprets new shapes."""
    if len(raw) < 24:
        return None
    key = (shape_key(raw, options), bool(options.collections))
    read = COMPILED[key] if key in COMPILED else COMPILED.setdefault(key, reader.compile_reader(
        key[0], collections=key[1]))
    return read(raw, 0, len(raw), BASE, options) if read is not None else None


def seen(msg: Message) -> tuple[Any, ...]:
    """Everything a reader of any packet sees of it: the item views and the other values' readings."""
    return (*views(msg), msg.variant, msg.spec, msg.opcode_name, msg.status, msg.vbucket, msg.stream_id,
            msg.path_length, msg.grammar_reading, msg.value_fields, msg.stream_request_value, msg.partial_extras)


def agrees(raw: bytes, options: DecodeOptions) -> bool:
    """The compiled reader's message is interpret's; it reads every packet whose header and extras interpret
    finds nothing to say about (an errata row's note aside); decode() gives
    interpret's message."""
    message = interpret(raw, BASE, options)
    assert seen(decode(raw, BASE, options)) == seen(message)
    found = compiled(raw, options)
    if found is not None and found.body_end == len(raw):
        assert seen(found) == seen(message), raw.hex()
        assert record_of(found) == record_of(message)
        return True
    said = {d.name for d in message.diagnostics}
    errata = message.variant is None or message.variant.note is not None  # an errata row's note
    assert said & HEADER_AND_EXTRAS or errata, (raw.hex(), sorted(said))
    return True


def options_of(dialect: str) -> list[DecodeOptions]:
    """Collections unknown, on and off; secrets shown with one of them."""
    return [DecodeOptions(DIALECTS[dialect], None), DecodeOptions(DIALECTS[dialect], True),
            DecodeOptions(DIALECTS[dialect], False, show_secrets=True)]


def dialect_of(spec: Any) -> str:
    return "upr-draft" if id(spec) in UPR_SPECS else "dcp"


@pytest.mark.parametrize("vector", all_vectors(), ids=repr)
def test_on_every_golden_vector(vector: Any) -> None:
    for options in options_of(vector.dialect):
        assert agrees(vector.data, dataclasses.replace(options, lenient=vector.lenient))


@pytest.mark.parametrize(("name", "spec", "variant"), VARIANTS, ids=[v[0] for v in VARIANTS])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_on_generated_packets_of_every_variant(name: str, spec: Any, variant: Any, data: st.DataObject) -> None:
    dialect = dialect_of(spec)
    raw = encode(data.draw(variant_records(spec, variant)), DIALECTS[dialect], fix_lengths=True)
    at = data.draw(st.integers(0, len(raw) - 1))
    changed = raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1:]
    for options in options_of(dialect):
        for packet in (raw, changed, raw[:-1], raw + b"\x00"):
            assert agrees(packet, options)


NOTED = [v for v in VARIANTS if v[2].note is None]  # errata rows always carry their note


@pytest.mark.parametrize(("name", "spec", "variant"), NOTED, ids=[v[0] for v in NOTED])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_variant_is_read_by_a_compiled_reader(name: str, spec: Any, variant: Any, data: st.DataObject) -> None:
    """Packets of every variant but the errata rows are read by the reader compiled for their shape (a
    variant of which no packet without a diagnostic can be generated fails as unsatisfiable)."""
    dialect = DIALECTS[dialect_of(spec)]
    options = DecodeOptions(dialect, show_secrets=True)  # a secret shown: no note of its hiding
    raw = encode(data.draw(variant_records(spec, variant)), dialect, fix_lengths=True)
    message = interpret(raw, BASE, options)
    assume(message.variant is variant and not message.diagnostics)
    found = compiled(raw, options)
    assert found is not None
    assert seen(found) == seen(message)


def test_a_shape_is_compiled_at_its_second_sight_and_only_up_to_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A capture of endless odd shapes compiles nothing for a shape seen once, and no more than the limit;
    what it holds is still decoded."""
    monkeypatch.setattr(reader, "_READERS", ({}, {}))
    monkeypatch.setattr(reader, "_SEEN_ONCE", set())
    monkeypatch.setattr(reader, "SHAPES_COMPILED", 2)
    packets = [encode({"magic": "ClientResponse", "opcode": "GET", "status": status, "opaque": 1, "cas": 0},
                      fix_lengths=True) for status in (0x01, 0x02, 0x04, 0x05)]
    for raw in packets:
        assert seen(decode(raw, BASE)) == seen(interpret(raw, BASE))
    assert reader._READERS[0] == {}
    for raw in packets:
        assert seen(decode(raw, BASE)) == seen(interpret(raw, BASE))
    assert len(reader._READERS[0]) == 2
    assert all(read is not None for read in reader._READERS[0].values())


# DCP_MUTATION, datatype JSON, key "k1" (or collection 8 and "k1"), value 80 81: not UTF-8, so not JSON text
_MUTATION = "805700{keylen:02x}1f010000{bodylen:08x}00000000" "0000000000000000" \
    "0000000000000001" "0000000000000001" "00000000" "00000000" "00000000" "0000" "00" "{key}" "{value}"


@pytest.mark.parametrize("collections", [None, True])
@pytest.mark.parametrize("value", ["8081", "7b2261223a"])  # not UTF-8; UTF-8 but not JSON ('{"a":')
def test_a_json_value_that_is_not_text_is_bad_json_on_every_path(value: str, collections: bool | None) -> None:
    key = "086b31" if collections else "6b31"
    raw = bytes.fromhex(_MUTATION.format(keylen=len(key) // 2, bodylen=31 + (len(key) + len(value)) // 2,
                                         key=key, value=value))
    options = DecodeOptions(DIALECTS["dcp"], collections)
    assert agrees(raw, options)
    for msg in (interpret(raw, BASE, options), decode(raw, BASE, options)):
        assert [d.name for d in msg.diagnostics] == ["bad_json"]
        assert record_of(msg)["diagnostics"][0]["offset"] == 24 + 31 + len(key) // 2  # the value
