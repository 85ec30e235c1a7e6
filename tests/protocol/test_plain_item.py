"""The plain-plain reader (compiled per item shape from the registry's plan, ``protocol.reader``) gives
the message the interpreted decoder (``interpret``) gives, check pass and all, and only when that has
nothing to say about it; decode(), which tries the reader first, gives that message too: on every golden
vector and on generated items of every item layout, whole, cut short and with bytes after them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import every_variant, variant_records
from vectorfile import all_vectors

from dcpctl.dcp.observed import Observed
from dcpctl.protocol.encode import encode
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.message import DecodeOptions, Message, decode, interpret, item_key
from dcpctl.protocol.reader import ItemReaders
from dcpctl.protocol.registry import DIALECTS, HEADER_LAYOUT
from dcpctl.render.lines import ItemLines
from dcpctl.render.record import record as record_of

ITEM_VARIANTS = [v for v in every_variant() if v[1].name in ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")
                 and v[2].layout is not None and v[0].startswith("dcp:")]
BASE = 1000  # the stream offset of the buffer's first byte


def read_item(buf: bytes, pos: int, n: int, options: DecodeOptions) -> Message | None:
    """The plain item at ``buf[pos:n]`` as the capture decoder reads it: with the reader compiled for its
    shape (None: no reader for that shape, or not a plain item)."""
    return ItemReaders(DEFAULT_MAX_BODY_LENGTH).read(buf, pos, n, BASE, options)


def views(msg: Message) -> tuple[Any, ...]:
    """Everything a reader of a message sees of it (the check pass's views run first on decode's)."""
    return (list(msg.diagnostics), msg.raw, msg.offset, msg.options, msg.header, msg.key_length, msg.body_end,
            msg.plan, msg.extras_values, msg.extras, msg.by_seqno, msg.key_offset, msg.value_offset,
            msg.framing_extras_length, msg.frame_infos, msg.collection_id, msg.document_key, msg.value_reading,
            msg.document, msg.document_text, msg.inflated, msg.xattrs, msg.plain_document, msg.key, msg.value,
            item_key(msg))


def agrees(buf: bytes, options: DecodeOptions, pos: int = 0, n: int | None = None) -> bool:
    """The reader's message for ``buf[pos:n]`` is decode's, and it reads exactly the clean plain items."""
    n = len(buf) if n is None else n
    found = read_item(buf, pos, n, options)
    # the reader reads the packet framed at pos, as a capture's stream has it: bytes after it are the next
    # packet's, and a packet cut short by n is not read at all
    if n - pos < HEADER_LAYOUT.size:
        assert found is None
        return True
    at = pos + HEADER_LAYOUT.offset("total_body_length")
    n = min(n, pos + HEADER_LAYOUT.size + int.from_bytes(buf[at:at + 4], "big"))
    raw = buf[pos:n]
    message = interpret(raw, BASE + pos, options)
    for packet in (raw, buf[pos:]):  # decode() of the packet alone, and followed by what comes after it
        assert views(decode(packet, BASE + pos, options)) == views(interpret(packet, BASE + pos, options))
    fields = item_key(message) if message.magic == 0x80 else None
    # plain, as the reader's module says: a key with a one-byte collection id or none, raw or JSON datatype
    # and a JSON value that parses (one that does not has a bad_json diagnostic, text or not)
    one_byte_id = message.collection_id is None or (message.collection_id < 0x80 and len(message.key) > 1)
    clean = not message.diagnostics and fields is not None and message.opcode in (0x57, 0x58, 0x59) \
        and one_byte_id and message.datatype in (0, 1) and (message.datatype == 0 or parses(message.value))
    if found is None:
        assert not clean, (raw.hex(), record_of(message))
        return True
    assert clean, (raw.hex(), record_of(message))
    assert views(found) == views(message)
    assert record_of(found) == record_of(message)
    return True


def parses(value: bytes) -> bool:
    if not value:
        return True
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return True


def stream_options(vector: Any) -> list[DecodeOptions]:
    """The options a golden vector is read with as a stream item: its dialect, collections unknown, off and
    on; none for a standalone diagram with its own lengths (never a framed stream item)."""
    return [] if vector.lenient else [DecodeOptions(DIALECTS[vector.dialect], c) for c in (None, False, True)]


@pytest.mark.parametrize("vector", all_vectors(), ids=repr)
def test_on_every_golden_vector(vector: Any) -> None:
    for options in stream_options(vector):
        assert agrees(vector.data, options)


@pytest.mark.parametrize(("name", "spec", "variant"), ITEM_VARIANTS, ids=[v[0] for v in ITEM_VARIANTS])
@settings(max_examples=150, deadline=None)
@given(data=st.data(), collections=st.sampled_from([None, False, True]),
       key=st.one_of(st.none(), st.binary(max_size=8)), value=st.one_of(st.none(), st.binary(max_size=12)))
def test_on_generated_items(name: str, spec: Any, variant: Any, data: st.DataObject, collections: bool | None,
                            key: bytes | None, value: bytes | None) -> None:
    raw = drawn_item(data, spec, variant, key, value)
    assert agrees(raw, DecodeOptions(collections=collections))
    assert agrees(raw[:-1] if len(raw) > 24 else raw, DecodeOptions(collections=collections))  # cut short


def drawn_item(data: st.DataObject, spec: Any, variant: Any, key: bytes | None, value: bytes | None) -> bytes:
    """A generated item of the variant, with any ``key`` and ``value`` bytes when given (text or not, a
    collection prefix or not; the value raw, JSON or snappy by its datatype)."""
    record = data.draw(variant_records(spec, variant))
    if key is not None:
        record.update(key=key.hex(), key_encoding="hex")
    if value is not None:
        record.update(value=value.hex(), value_encoding="hex", datatype=data.draw(st.sampled_from([0, 1, 3])))
        record.pop("xattrs", None)
    return encode(record, fix_lengths=True)


def test_a_packet_not_whole_is_not_read() -> None:
    raw = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 1, "opaque": 2, "cas": 3,
                  "datatype": 0, "by_seqno": 4, "rev_seqno": 5, "flags": 0, "expiration": 0, "lock_time": 0,
                  "nmeta": 0, "nru": 0, "key": "k", "value": "v"}, fix_lengths=True)
    assert read_item(raw, 0, len(raw), DecodeOptions()) is not None
    assert read_item(raw + raw, len(raw), 2 * len(raw) - 1, DecodeOptions()) is None
    second = read_item(raw + raw, len(raw), 2 * len(raw), DecodeOptions())
    assert second is not None
    assert (second.raw, second.offset) == (raw, BASE + len(raw))


def test_readers_follow_the_shapes_and_leave_long_bodies_to_the_framer() -> None:
    """One connection's readers read a run of mixed shapes item by item; an item whose body is over the
    limit is not read (the framer says what is wrong with it)."""
    mutation = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 1, "opaque": 2, "cas": 3,
                       "datatype": 0, "by_seqno": 4, "rev_seqno": 5, "flags": 0, "expiration": 0, "lock_time": 0,
                       "nmeta": 0, "nru": 0, "key": "k", "value": "v"}, fix_lengths=True)
    deletion = encode({"magic": "ClientRequest", "opcode": "DCP_DELETION", "vbucket": 1, "opaque": 2, "cas": 3,
                       "datatype": 0, "by_seqno": 6, "rev_seqno": 5, "nmeta": 0, "key": "k"}, fix_lengths=True)
    marker = encode({"magic": "ClientRequest", "opcode": "DCP_SNAPSHOT_MARKER", "vbucket": 1, "opaque": 2,
                     "snap_start_seqno": 1, "snap_end_seqno": 9, "snapshot_flags": 1}, fix_lengths=True)
    buf = mutation + deletion + mutation + marker
    readers, pos, read = ItemReaders(DEFAULT_MAX_BODY_LENGTH), 0, []
    while (msg := readers.read(buf, pos, len(buf), 0, DecodeOptions())) is not None:
        read.append((msg.opcode_name, msg.offset))
        pos += len(msg.raw)
    assert read == [("DCP_MUTATION", 0), ("DCP_DELETION", len(mutation)),
                    ("DCP_MUTATION", len(mutation) + len(deletion))]
    assert pos == len(buf) - len(marker)  # a marker is not a plain item
    body = len(mutation) - 24
    assert ItemReaders(body).read(mutation, 0, len(mutation), 0, DecodeOptions()) is not None
    assert ItemReaders(body - 1).read(mutation, 0, len(mutation), 0, DecodeOptions()) is None


def test_readers_read_with_the_options_of_the_moment() -> None:
    """Collections negotiated between two items: the second is read with its collection id split off, never
    by the reader the first was read with."""
    raw = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 1, "opaque": 2, "cas": 3,
                  "datatype": 0, "by_seqno": 4, "rev_seqno": 5, "flags": 0, "expiration": 0, "lock_time": 0,
                  "nmeta": 0, "nru": 0, "key": "Auser", "value": "v"}, fix_lengths=True)
    readers = ItemReaders(DEFAULT_MAX_BODY_LENGTH)
    found = [readers.read(raw, 0, len(raw), 0, DecodeOptions(collections=collections))
             for collections in (False, True)]
    assert [(m.collection_id, m.document_key) for m in found if m is not None] == [(None, b"Auser"), (0x41, b"user")]


@pytest.mark.parametrize(("name", "spec", "variant"), ITEM_VARIANTS, ids=[v[0] for v in ITEM_VARIANTS])
@settings(max_examples=150, deadline=None)
@given(data=st.data(), collections=st.sampled_from([None, False, True]), stream=st.booleans(),
       key=st.one_of(st.none(), st.binary(max_size=8)), value=st.one_of(st.none(), st.binary(max_size=12)),
       ts=st.floats(min_value=0, max_value=4e9))
def test_a_plain_items_line_is_its_records_json(name: str, spec: Any, variant: Any, data: st.DataObject,
                                                collections: bool | None, stream: bool, key: bytes | None,
                                                value: bytes | None, ts: float) -> None:
    record = data.draw(variant_records(spec, variant))
    if key is not None:
        record.update(key=key.hex(), key_encoding="hex")
    if value is not None:
        record.update(value=value.hex(), value_encoding="hex", datatype=data.draw(st.sampled_from([0, 1])))
        record.pop("xattrs", None)
    raw = encode(record, fix_lengths=True)
    options = DecodeOptions(collections=collections)
    found = read_item(raw, 0, len(raw), options)
    if found is None:
        return  # the usual path's: not what the template is for
    first = {"ts": ts, "connection": "127.0.0.1:5 > 127.0.0.1:11210", "direction": "server>client"}
    last = {"stream_vbucket": 7} if stream else {}
    line = ItemLines(first).line(found, (orjson.dumps(ts),), last.get("stream_vbucket"))
    message = Observed(interpret(raw, BASE, options), first, last)
    if line is None:  # the record shows the value as hex: the usual path's
        assert "value_encoding" in record_of(message)
        return
    assert line == orjson.dumps(record_of(message), option=orjson.OPT_APPEND_NEWLINE)
