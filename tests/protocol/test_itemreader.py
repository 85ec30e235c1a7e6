"""A plain item's JSON line (``render.lines.ItemLines``, filled from the plain reader's message) is the
record's JSON for every item the plain reader reads, None exactly when the record shows the value as hex,
and the caller's accept is asked only once the value is known to be text (its no leaves the item to the
usual path); the plain reader is held to the interpreted decoder on the same packets
(``test_plain_item.agrees``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import variant_records
from test_plain_item import ITEM_VARIANTS, drawn_item, read_item, stream_options
from test_plain_item import agrees as reads_as_decode
from vectorfile import all_vectors

from dcpctl.dcp.observed import Observed
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, Message, interpret
from dcpctl.render.lines import ItemLines
from dcpctl.render.record import record as record_of

FIRST = {"ts": None, "connection": "127.0.0.1:5 > 127.0.0.1:11210", "direction": "server>client", "frames": None}
LEAD = (b"1795458637.25", b"[3,4]")
TEXT = st.text(st.characters(codec="utf-8"), max_size=8)  # printable or not, ASCII or not
JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=5).map(orjson.dumps)


class Accept:
    """A tracker's say, recorded: takes every item (with a stream vbucket or not) or none."""

    def __init__(self, *, take: bool, stream_vbucket: int | None) -> None:
        self.take, self.stream_vbucket = take, stream_vbucket
        self.asked: list[Message] = []

    def __call__(self, msg: Message) -> tuple[bool, int | None]:
        self.asked.append(msg)
        return (True, self.stream_vbucket) if self.take else (False, None)


def agrees(raw: bytes, pos: int, n: int, options: DecodeOptions, accept: Accept) -> bool:
    """The line of the item the reader reads at ``raw[pos:n]``, if any, against the interpreted decoder's
    record in the context the line says; the plain reader against the interpreted decoder."""
    assert reads_as_decode(raw, options, pos, n)
    found = read_item(raw, pos, n, options)
    if found is None:
        return True
    text = "value_encoding" not in record_of(interpret(found.raw, found.offset, options))  # the value as text
    message = interpret(found.raw, found.offset, options)
    got = ItemLines(FIRST, ("ts", "frames")).line(found, LEAD, None, accept)
    if not text:
        assert got is None, raw.hex()
        assert accept.asked == []
        return True
    assert accept.asked == [found]
    if not accept.take:
        assert got is None
        return True
    last = {} if accept.stream_vbucket is None else {"stream_vbucket": accept.stream_vbucket}
    observed = Observed(message, {**FIRST, "ts": orjson.loads(LEAD[0]), "frames": orjson.loads(LEAD[1])}, last)
    assert got == orjson.dumps(record_of(observed), option=orjson.OPT_APPEND_NEWLINE)
    return True


@pytest.mark.parametrize("vector", all_vectors(), ids=repr)
def test_on_every_golden_vector(vector: Any) -> None:
    for options in stream_options(vector):
        for accept in (Accept(take=True, stream_vbucket=7), Accept(take=True, stream_vbucket=None),
                       Accept(take=False, stream_vbucket=None)):
            assert agrees(vector.data, 0, len(vector.data), options, accept)


@pytest.mark.parametrize(("name", "spec", "variant"), ITEM_VARIANTS, ids=[v[0] for v in ITEM_VARIANTS])
@settings(max_examples=150, deadline=None)
@given(data=st.data(), collections=st.sampled_from([None, False, True]), stream=st.booleans(),
       key=st.one_of(st.none(), st.binary(max_size=8), TEXT.map(str.encode)),
       value=st.one_of(st.none(), st.binary(max_size=12), TEXT.map(str.encode), JSON),
       cut=st.integers(min_value=0, max_value=3), prefix=st.binary(max_size=3))
def test_on_generated_items(name: str, spec: Any, variant: Any, data: st.DataObject, collections: bool | None,
                            stream: bool, key: bytes | None, value: bytes | None, cut: int, prefix: bytes) -> None:
    """Any item of the shape, most of them not plain (frame infos, xattrs, nmeta, cut short...)."""
    raw = prefix + drawn_item(data, spec, variant, key, value)
    accept = Accept(take=data.draw(st.booleans()), stream_vbucket=7 if stream else None)
    assert agrees(raw, len(prefix), len(raw) - cut, DecodeOptions(collections=collections), accept)


@pytest.mark.parametrize(("name", "spec", "variant"), ITEM_VARIANTS, ids=[v[0] for v in ITEM_VARIANTS])
@settings(max_examples=150, deadline=None)
@given(data=st.data(), collections=st.sampled_from([None, False, True]), stream=st.booleans(),
       key=st.one_of(TEXT, st.text(min_size=1, max_size=8).filter(str.isprintable)), json=st.booleans(),
       prefix=st.binary(max_size=3))
def test_on_generated_plain_items(name: str, spec: Any, variant: Any, data: st.DataObject, collections: bool | None,
                                  stream: bool, key: str, json: bool, prefix: bytes) -> None:
    """Items made to keep every rule (no frame infos or xattrs, nmeta 0, a seqno), keys and values text or
    not, JSON or not: most of them plain."""
    record = data.draw(variant_records(spec, variant))
    record.update({name: 0 for name in ("nmeta", "nru", "unused") if name in record}, magic="ClientRequest",
                  by_seqno=max(1, int(record.get("by_seqno", 1))), key=key, value=data.draw(JSON if json else TEXT),
                  datatype=int(json))
    for field in ("stream_id", "frame_infos", "xattrs"):
        record.pop(field, None)
    if isinstance(record["value"], bytes):
        record["value"] = record["value"].decode()
    raw = prefix + encode(record, fix_lengths=True)
    accept = Accept(take=data.draw(st.booleans()), stream_vbucket=7 if stream else None)
    assert agrees(raw, len(prefix), len(raw), DecodeOptions(collections=collections), accept)


def test_a_line_is_the_records_json() -> None:
    """The line a reader writes is what the usual path prints: the record's JSON, key order included."""
    raw = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 3, "opaque": 9, "cas": 5,
                  "datatype": 1, "by_seqno": 11, "rev_seqno": 2, "flags": 0, "expiration": 0, "lock_time": 0,
                  "nmeta": 0, "nru": 0, "key": "\x08user::1", "value": '{"a": [1, "é"]}'}, fix_lengths=True)
    options = DecodeOptions(collections=True)
    first = {"ts": None, "connection": "c", "direction": "server>client"}
    found = read_item(raw, 0, len(raw), options)
    assert found is not None
    got = ItemLines(first).line(found, (orjson.dumps(2.5),), 3)
    assert got is not None
    message = interpret(raw, 1000, options)
    observed = Observed(message, {"ts": 2.5, "connection": "c", "direction": "server>client"},
                        {"stream_vbucket": 3})
    assert got == orjson.dumps(record_of(observed), option=orjson.OPT_APPEND_NEWLINE)
    assert orjson.loads(got)["collection_id"] == 8


def test_connections_share_a_plans_filler_code_and_keep_their_own_labels() -> None:
    """A capture of thousands of short connections compiles a plan's filler once: each connection binds
    its own templates (its label is in them) to the same code."""
    raw = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 3, "opaque": 9, "cas": 5,
                  "datatype": 0, "by_seqno": 11, "rev_seqno": 2, "flags": 0, "expiration": 0, "lock_time": 0,
                  "nmeta": 0, "nru": 0, "key": "k", "value": "v"}, fix_lengths=True)
    found = read_item(raw, 0, len(raw), DecodeOptions())
    assert found is not None
    written, code = [], []
    for label in ("a > b", "c > d"):
        lines = ItemLines({**FIRST, "connection": label}, ("ts", "frames"))
        line = lines.line(found, LEAD, None)
        assert line is not None
        assert lines.filler is not None
        written.append(orjson.loads(line)["connection"])
        code.append(lines.filler.__code__)
    assert written == ["a > b", "c > d"]
    assert code[0] is code[1]
