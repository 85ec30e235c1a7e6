"""A line reader (``render.lines``) says what the item reader, plain_value() and the item's template say
together: the same line for the same item, None for the same items, and the caller's accept asked only when
the stateless checks have passed; the item reader is held to the interpreted decode() on the same packets
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

from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.render.lines import ItemLines, LineReaders, compile_reader, plain_value
from dcpctl.render.record import record as record_of

FIRST = {"ts": None, "connection": "127.0.0.1:5 > 127.0.0.1:11210", "direction": "server>client", "frames": None}
LEAD = (b"1795458637.25", b"[3,4]")
MAX_BODY = 20 * 1024 * 1024
TEXT = st.text(st.characters(codec="utf-8"), max_size=8)  # printable or not, ASCII or not
JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | TEXT,
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                    max_leaves=5).map(orjson.dumps)


class Accept:
    """A tracker's say, recorded: takes every item (with a stream vbucket or not) or none."""

    def __init__(self, *, take: bool, stream_vbucket: int | None) -> None:
        self.take, self.stream_vbucket = take, stream_vbucket
        self.asked: list[tuple[int, int, int]] = []

    def __call__(self, opaque: int, seqno: int, length: int) -> tuple[bool, int | None]:
        self.asked.append((opaque, seqno, length))
        return (True, self.stream_vbucket) if self.take else (False, None)


def agrees(raw: bytes, pos: int, n: int, options: DecodeOptions, accept: Accept, *, max_body: int = MAX_BODY) -> bool:
    """The line reader of the packet's shape, if any, against the item reader and the template, the item
    reader against decode()."""
    assert reads_as_decode(raw, options, pos, n)
    readers = LineReaders(FIRST, ("ts", "frames"), max_body)
    reader = readers.at(raw, pos, n, options)
    found = read_item(raw, pos, n, options)
    value = plain_value(raw, found[10], found[0]) if found is not None else None
    plain = found is not None and value is not None and found[0] - pos - 24 <= max_body
    if reader is None:
        assert found is None, raw.hex()
        return True
    got = reader(raw, pos, n, LEAD, 1000, accept)
    if not plain:
        assert got is None, raw.hex()
        assert accept.asked == []
        return True
    assert found is not None
    assert value is not None
    header = found[1]
    assert accept.asked == [(header[7], found[8], found[0] - pos)]
    if not accept.take:
        assert got is None
        return True
    lines = ItemLines(FIRST, ("ts", "frames"))
    assert got == (found[0], header[7], found[8], lines.line(found, LEAD, 1000 + pos, value, accept.stream_vbucket))
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
    reader = LineReaders(first, ("ts",), MAX_BODY).at(raw, 0, len(raw), options)
    assert reader is not None
    got = reader(raw, 0, len(raw), (orjson.dumps(2.5),), 40, Accept(take=True, stream_vbucket=3))
    assert got is not None
    message = decode(raw, 40, options)
    message.annotate({"ts": 2.5, "connection": "c", "direction": "server>client"}, {"stream_vbucket": 3}, [])
    assert got[3] == orjson.dumps(record_of(message), option=orjson.OPT_APPEND_NEWLINE)
    assert orjson.loads(got[3])["collection_id"] == 8


def test_an_item_over_the_body_limit_goes_the_usual_way() -> None:
    raw = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 1, "opaque": 2, "cas": 3,
                  "datatype": 0, "by_seqno": 4, "rev_seqno": 5, "flags": 0, "expiration": 0, "lock_time": 0,
                  "nmeta": 0, "nru": 0, "key": "k", "value": "v" * 100}, fix_lengths=True)
    accept = Accept(take=True, stream_vbucket=None)
    assert agrees(raw, 0, len(raw), DecodeOptions(), accept, max_body=len(raw) - 24)
    assert accept.asked
    accept = Accept(take=True, stream_vbucket=None)
    assert agrees(raw, 0, len(raw), DecodeOptions(), accept, max_body=len(raw) - 25)
    assert not accept.asked


def test_a_reader_reads_only_its_own_shape() -> None:
    mutation = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 1, "opaque": 2, "cas": 3,
                       "datatype": 0, "by_seqno": 4, "rev_seqno": 5, "flags": 0, "expiration": 0, "lock_time": 0,
                       "nmeta": 0, "nru": 0, "key": "k", "value": "v"}, fix_lengths=True)
    deletion = encode({"magic": "ClientRequest", "opcode": "DCP_DELETION", "vbucket": 1, "opaque": 2, "cas": 3,
                       "datatype": 0, "by_seqno": 6, "rev_seqno": 5, "nmeta": 0, "key": "k"},
                      fix_lengths=True)
    options = DecodeOptions()
    reader = compile_reader(options, mutation[1], mutation[4], FIRST, ("ts", "frames"), MAX_BODY)
    assert reader is not None
    accept = Accept(take=True, stream_vbucket=None)
    assert reader(deletion, 0, len(deletion), LEAD, 0, accept) is None
    assert reader(mutation, 0, len(mutation), LEAD, 0, accept) is not None
    assert compile_reader(options, 0x56, 20, FIRST, ("ts",), MAX_BODY) is None  # a snapshot marker: not an item
