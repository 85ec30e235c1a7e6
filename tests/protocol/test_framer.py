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


class ByteByByte(Framer):
    """The framer with its resynchronisation done one position at a time: what the regular expression
    that finds candidates must agree with."""

    def _resync(self):  # type: ignore[no-untyped-def]
        buf, start = self._buf, self._pos
        pos, end = start, len(buf) - 24
        while pos <= end:
            total = self._plausible(pos)
            if total is not None and total - 24 <= self.max_body_length:
                break
            pos += 1
        if pos > start:
            self._pos = pos
            yield Skipped(self._base + start, pos - start, "garbage")


NOISE = st.lists(st.one_of(st.binary(max_size=30), st.sampled_from([NOOP, mutation(5), bytes([0x80, 0x57]) + bytes(6)
                                                                     + b"\x01\xff\xff\xff", b"\x80" * 40])),
                 max_size=30).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(data=NOISE, cuts=st.lists(st.integers(0, 2000), max_size=10), limit=st.sampled_from([1 << 10, 1 << 20, 1 << 25,
                                                                                          1 << 31]),
       known=st.sampled_from([None, frozenset({0x5C, 0x57})]))
def test_resynchronising_finds_what_a_byte_by_byte_scan_finds(data: bytes, cuts: list[int], limit: int,
                                                               known: frozenset[int] | None) -> None:
    def events(framer: Framer) -> list[object]:
        out: list[object] = []
        for chunk in split(data, cuts):
            framer.feed(chunk)
            out += framer.events()
        return [*out, framer.remainder()]

    assert events(Framer(limit, known, synced=False)) == events(ByteByByte(limit, known, synced=False))


def test_window_does_not_copy_a_big_packet_once_per_segment() -> None:
    packet = mutation(1, value=b"v" * (1 << 20))
    framer = Framer()
    joined = 0
    for start in range(0, len(packet), 536):
        framer.feed(packet[start:start + 536])
        buf, _pos = framer.window()
        joined += len(buf)
        assert list(framer.events()) == ([] if start + 536 < len(packet) else [Frame(packet, 0)])
    assert joined < 4 * len(packet)
