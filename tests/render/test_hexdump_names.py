"""The hexdump names what decode names: every value the JSON record shows by name (a HELLO feature, a status,
a magic, a frame info) is named on its field's annotation line, and flags are named as pretty names them."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from capturekit import SESSION_JSONL
from vectorfile import Vector, all_vectors

from dcpctl.protocol.encode import encode
from dcpctl.protocol.layout import FieldSpan, spans
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.protocol.registry import DIALECTS
from dcpctl.render import hexdump, pretty
from dcpctl.render.output import MAX_FIELD_BYTES
from dcpctl.render.record import record as record_of

_INDEX = re.compile(r"\.(\d+)(?=\.|$)")


def _vector_message(vector: Vector) -> Message:
    return decode(vector.data, 0, DecodeOptions(dialect=DIALECTS[vector.dialect], collections=vector.collections,
                                                show_secrets=True, lenient=vector.lenient))


def _session_messages() -> list[Message]:
    """The sample session's packets (its HELLOs carry features: no golden vector has them yet)."""
    records = [json.loads(line) for line in SESSION_JSONL.read_text().splitlines()]
    return [decode(encode(r), 0, DecodeOptions(collections=True, show_secrets=True)) for r in records]


MESSAGES = [pytest.param(_vector_message(v), id=repr(v)) for v in all_vectors()] + \
    [pytest.param(m, id=f"session-{i}-{m.opcode_name}") for i, m in enumerate(_session_messages())]


def _in_record(record: dict[str, Any], path: str) -> Any:
    """The record's value at a span's path (``features.2`` -> ``record["features"][2]``), or None."""
    here: Any = record
    for part in _INDEX.sub(r"[\1]", path).replace("[", ".[").split("."):
        if part.startswith("["):
            index = int(part[1:-1])
            if not isinstance(here, list) or index >= len(here):
                return None
            here = here[index]
        elif isinstance(here, dict) and part in here:
            here = here[part]
        else:
            return None
    return here


def _annotation(text: str, span: FieldSpan) -> str:
    lines = [line for line in text.splitlines() if line.strip().startswith(span.label)
             and f"({span.offset}" in line]
    assert lines, f"no annotation line for {span.label} in\n{text}"
    return lines[0]


@pytest.mark.parametrize("msg", MESSAGES)
def test_every_name_the_record_shows_is_in_the_hexdump(msg: Message) -> None:
    record = record_of(msg)
    text = hexdump.render(msg, MAX_FIELD_BYTES).plain
    checked = 0
    for span in spans(msg, walk_limit=MAX_FIELD_BYTES):
        shown = _in_record(record, span.name)
        if isinstance(span.value, int) and isinstance(shown, str):  # a number on the wire, a name in JSON
            assert shown in _annotation(text, span), (span.name, shown)
            checked += 1
    for info in record.get("frame_infos", []):
        assert f"Frame info {info['name']}" in text
    assert record["magic"] in text
    assert record["opcode"] in text
    assert checked >= 2  # magic and opcode at least


def test_hello_features_are_named() -> None:
    hello = next(m for m in _session_messages() if m.opcode_name == "HELLO")
    text = hexdump.render(hello, MAX_FIELD_BYTES).plain
    for name in record_of(hello)["features"]:
        assert re.search(rf"features\.\d+ +\(\d+-\d+\) +: 0x[0-9a-f]{{4}} \(\d+ {name}\)", text), (name, text)


def _pretty_names(msg: Message) -> dict[str, list[str]]:
    """The extras fields pretty output names, with the names it gives (``flags=5 (Producer|IncludeXattrs)``)."""
    record = record_of(msg)
    shown = " ".join(line.text.plain for line in pretty.render(msg, record, MAX_FIELD_BYTES).renderables)
    out = {}
    for span in spans(msg, walk_limit=MAX_FIELD_BYTES):
        if span.section != "extras" or not isinstance(span.value, int) or span.name not in record \
                or pretty.named(record["opcode"], span.name, span.value) is not None:  # "0 (never)": no code's name
            continue
        found = re.search(rf"(?<![\w.]){re.escape(span.name)}=[^ ]+ \(([^)]*)\)", shown)
        if found is not None and not found.group(1).startswith(("20", "in ")):  # not a time: a code's name
            out[span.name] = found.group(1).split("|")
    return out


@pytest.mark.parametrize("msg", MESSAGES)
def test_flags_and_codes_are_named_as_pretty_names_them(msg: Message) -> None:
    """Where pretty names an extras field (flags, stream end status, vbucket state...), the hexdump gives the
    same names."""
    text = hexdump.render(msg, MAX_FIELD_BYTES).plain
    for span in spans(msg, walk_limit=MAX_FIELD_BYTES):
        names = _pretty_names(msg).get(span.name)
        if names is not None and span.section == "extras":
            annotation = _annotation(text, span)
            assert all(name in annotation for name in names), (span.name, names, annotation)


def test_the_comparison_sees_flags_and_stream_end_statuses() -> None:
    named = {name for msg in _session_messages() for name in _pretty_names(msg)}
    assert {"flags", "snapshot_flags", "stream_end_status"} <= named


def test_a_flatbuffers_table_is_annotated_byte_for_byte_in_the_order_of_its_bytes() -> None:
    """A version-2 system event: every byte of its table is on one annotation line (fields and structure, none
    called trailing), in offset order, and a little-endian slot shows its bytes without the 0x of a number."""
    vector = next(v for v in all_vectors() if v.name == "begin_collection_v2")
    msg = _vector_message(vector)
    value = [s for s in spans(msg, walk_limit=MAX_FIELD_BYTES) if s.section == "value"]
    assert [s.offset for s in value] == sorted(s.offset for s in value)
    assert sum(s.length for s in value) == len(msg.value)
    assert value[0].offset == msg.value_offset
    assert {"_root_offset", "_vtable", "_vtable_offset", "_name_offset", "_name_length", "name",
            "collection_id"} <= {s.name for s in value}
    assert "value_trailing" not in {s.name for s in value}
    text = hexdump.render(msg, MAX_FIELD_BYTES).plain
    scope = next(s for s in value if s.name == "scope_id")
    assert re.search(r"scope_id +\(\d+-\d+\) +: 08000000 \(8\)", _annotation(text, scope))
    assert re.search(r"by_seqno +\(24-31\) +: 0x0000000000000005 \(5\)", text)
