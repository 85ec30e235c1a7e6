"""A key's LEB128 collection id (reference: "Collections", the key prefix) reads back as it was written,
wherever it stands in a buffer, and only in its shortest form of at most 32 bits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dcpctl.protocol.value import leb128_decode, leb128_encode

U32 = st.integers(0, 0xFFFFFFFF)


@given(U32, st.binary(max_size=8), st.binary(max_size=8))
def test_an_id_reads_back_where_it_stands(value: int, before: bytes, after: bytes) -> None:
    encoded = leb128_encode(value)
    buf = before + encoded + after
    assert leb128_decode(encoded + after) == (value, len(encoded))
    assert leb128_decode(buf, len(before), len(buf)) == (value, len(encoded))


@given(st.binary(max_size=8), st.integers(0, 8), st.integers(0, 8))
def test_a_window_reads_as_its_slice(buf: bytes, start: int, length: int) -> None:
    end = min(start + length, len(buf))
    start = min(start, end)
    assert leb128_decode(buf, start, end) == leb128_decode(buf[start:end])


def test_the_shortest_form_only() -> None:
    assert leb128_decode(b"\x80\x00") is None  # 0 in two bytes: would not encode back the same
    assert leb128_decode(b"\x88\x00") is None
    assert leb128_decode(b"\x88\x01") == (136, 2)


def test_more_than_32_bits_or_no_last_byte_is_not_an_id() -> None:
    assert leb128_decode(leb128_encode(1 << 32)) is None
    assert leb128_decode(b"\xff\xff\xff\xff\x0f") == (0xFFFFFFFF, 5)
    assert leb128_decode(b"\x80\x80") is None  # runs out before its last byte
    assert leb128_decode(b"\x80", 0, 1) is None
    assert leb128_decode(b"\x05\x80", 1, 2) is None
    assert leb128_decode(b"") is None
    assert leb128_decode(b"\x05", 1, 1) is None  # an empty window
