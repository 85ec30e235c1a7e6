"""The framer gives the same frames whatever the chunking, resynchronises, and bounds what it buffers."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from dcpctl.protocol.framer import Frame, Framer, Skipped

MAGICS = b"\x80\x81\x08\x18\x82\x83"
NOOP = bytes.fromhex("805c0000 00000000 00000000 00000001 0000000000000000".replace(" ", ""))


def mutation(seqno: int, key: bytes = b"k", value: bytes = b"v" * 10) -> bytes:
    extras = struct.pack(">QQIIIHB", seqno, 1, 0, 0, 0, 0, 0)
    body = extras + key + value
    return struct.pack(">BBHBBHIIQ", 0x80, 0x57, len(key), 31, 0, 3, len(body), 7, 0) + body


def run(chunks: list[bytes], max_body_length: int = 1 << 20) -> tuple[list[Frame], int, bytes]:
    framer = Framer(max_body_length)
    frames: list[Frame] = []
    skipped = 0
    for chunk in chunks:
        framer.feed(chunk)
        for event in framer.events():
            if isinstance(event, Frame):
                frames.append(event)
            else:
                skipped += event.length
    _, rest = framer.remainder()
    return frames, skipped, rest


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


STREAM = st.lists(st.integers(1, 10_000), min_size=1, max_size=20).map(
    lambda seqnos: b"".join(mutation(s, b"key%d" % s) if s % 3 else NOOP for s in seqnos))


@settings(max_examples=200, deadline=None)
@given(data=STREAM, cuts=st.lists(st.integers(0, 10_000), max_size=30))
def test_any_chunking_gives_the_same_frames(data: bytes, cuts: list[int]) -> None:
    whole, _, _ = run([data])
    chunked, skipped, rest = run(split(data, cuts))
    one_byte, _, _ = run([data[i:i + 1] for i in range(len(data))])
    assert chunked == whole == one_byte
    assert b"".join(f.data for f in whole) == data
    assert skipped == 0
    assert rest == b""


@settings(max_examples=100, deadline=None)
@given(data=STREAM, garbage=st.binary(min_size=1, max_size=40).filter(lambda g: not set(g) & set(MAGICS)))
def test_garbage_is_skipped_and_counted(data: bytes, garbage: bytes) -> None:
    # garbage without a magic byte cannot start a header: exactly the garbage is skipped
    frames, skipped, rest = run([garbage + data])
    assert b"".join(f.data for f in frames) == data
    assert skipped == len(garbage)
    assert rest == b""


@settings(max_examples=100, deadline=None)
@given(data=STREAM, garbage=st.binary(min_size=1, max_size=60), cuts=st.lists(st.integers(0, 10_000)))
def test_every_byte_is_accounted_for(data: bytes, garbage: bytes, cuts: list[int]) -> None:
    stream = garbage + data + garbage
    frames, skipped, rest = run(split(stream, cuts))
    assert skipped + sum(len(f.data) for f in frames) + len(rest) == len(stream)


def test_offsets_are_stream_offsets() -> None:
    frames, skipped, _ = run([b"xyz" + NOOP + NOOP])
    assert skipped == 3
    assert [f.offset for f in frames] == [3, 3 + len(NOOP)]


def test_hostile_length_does_not_buffer() -> None:
    # a plausible header claiming a 4 GiB body, then a real packet
    hostile = struct.pack(">BBHBBHIIQ", 0x80, 0x57, 0, 0, 0, 0, 0xFFFFFFF0, 0, 0)
    framer = Framer(max_body_length=1024)
    framer.feed(hostile + NOOP)
    events = list(framer.events())
    assert next(e.reason for e in events if isinstance(e, Skipped)) == "body_too_long"
    assert [e for e in events if isinstance(e, Frame)] == [Frame(NOOP, len(hostile))]
    assert framer.pending == 0


def test_a_large_packet_in_small_segments_frames_once() -> None:
    big = mutation(1, b"k", b"x" * 200_000)
    framer = Framer()
    frames = []
    for i in range(0, len(big), 1500):
        framer.feed(big[i:i + 1500])
        frames += list(framer.events())
    assert frames == [Frame(big, 0)]


def test_truncated_tail_is_left_for_the_caller() -> None:
    frames, skipped, rest = run([NOOP + mutation(5)[:30]])
    assert len(frames) == 1
    assert skipped == 0
    assert rest == mutation(5)[:30]
