"""TCP reassembly: any arrival order, duplication and overlap gives the original bytes; losses are gaps."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from dcpctl.sources.pcap import TcpSegment
from dcpctl.sources.tcp import Reassembler, StreamData, StreamEvent

CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", 11210)
ISN = 0xFFFFF000  # wraps inside the stream


def seg(seq: int, payload: bytes, flags: int = 0x18, frame: int = 1, from_client: bool = False,
        wire: int | None = None) -> TcpSegment:
    src, dst = (CLIENT, SERVER) if from_client else (SERVER, CLIENT)
    return TcpSegment(1.0, frame, src, dst, seq % (1 << 32), 0, flags, payload,
                      wire is not None and wire > len(payload), len(payload) if wire is None else wire)


def run(segments: list[TcpSegment], cap: int = 1 << 20) -> tuple[bytes, list[StreamEvent]]:
    reassembler = Reassembler(max_buffered_bytes=cap)
    events = [e for s in segments for e in reassembler.push(s)] + reassembler.flush()
    data = b"".join(e.data for e in events if isinstance(e, StreamData) and not e.from_client)
    offsets = [e.offset for e in events if isinstance(e, StreamData) and not e.from_client]
    assert offsets == sorted(offsets)
    return data, [e for e in events if isinstance(e, StreamEvent)]


PIECES = st.binary(min_size=1, max_size=400).flatmap(
    lambda data: st.tuples(st.just(data), st.lists(st.integers(0, len(data)), max_size=12)))


@settings(max_examples=150, deadline=None)
@given(piece=PIECES, order=st.randoms(use_true_random=False), extra=st.lists(st.tuples(st.integers(0, 399),
                                                                                      st.integers(1, 50))))
def test_any_order_duplication_and_overlap(piece: tuple[bytes, list[int]], order: random.Random,
                                            extra: list[tuple[int, int]]) -> None:
    data, cuts = piece
    points = sorted({0, len(data), *cuts})
    segments = [seg(ISN + 1 + a, data[a:b], frame=i) for i, (a, b) in enumerate(itertools.pairwise(points), 2)]
    segments += [seg(ISN + 1 + a, data[a:a + n]) for a, n in extra if a < len(data)]  # overlapping copies
    order.shuffle(segments)
    got, events = run([seg(ISN, b"", flags=0x12), *segments])
    assert got == data
    assert not [e for e in events if e.name in ("gap", "overlap_conflict", "reassembly_overflow")]


def test_a_hole_is_a_gap_of_exactly_its_size() -> None:
    data = bytes(range(200))
    got, events = run([seg(ISN, b"", flags=0x12), seg(ISN + 1, data[:50]), seg(ISN + 1 + 80, data[80:])])
    assert got == data[:50] + data[80:]
    gaps = [e for e in events if e.name == "gap"]
    assert [(g.offset, g.length) for g in gaps] == [(50, 30)]


def test_midstream_start_and_reuse() -> None:
    reassembler = Reassembler()
    first = reassembler.push(seg(5000, b"abc"))
    assert [e.name for e in first if isinstance(e, StreamEvent)] == ["midstream"]
    reassembler.push(seg(100, b"", flags=0x12))
    reused = reassembler.push(seg(900, b"", flags=0x12))
    assert "connection_reused" in [e.name for e in reused if isinstance(e, StreamEvent)]
    data = [e for e in reassembler.push(seg(901, b"xy")) if isinstance(e, StreamData)]
    assert data[0].conn.generation == 1
    assert data[0].conn.label().endswith("#1")


def test_out_of_order_flood_is_bounded() -> None:
    reassembler = Reassembler(max_buffered_bytes=10_000)
    reassembler.push(seg(ISN, b"", flags=0x12))
    events = []
    for i in range(200):  # never fills the first hole
        events += reassembler.push(seg(ISN + 1 + 1000 + i * 1000, bytes(1000)))
        state = next(iter(reassembler.connections.values())).directions[False]
        assert state.pending_bytes <= 10_000
    assert any(isinstance(e, StreamEvent) and e.name == "reassembly_overflow" for e in events)


def test_conflicting_retransmission_keeps_the_first_copy() -> None:
    got, events = run([seg(ISN, b"", flags=0x12), seg(ISN + 1, b"hello"), seg(ISN + 1, b"jello")])
    assert got == b"hello"
    assert [e.name for e in events].count("overlap_conflict") == 1


def test_snaplen_cut_payload_is_a_gap() -> None:
    got, events = run([seg(ISN, b"", flags=0x12), seg(ISN + 1, b"abcd", wire=10), seg(ISN + 11, b"z")])
    assert got == b"abcdz"
    assert [(e.name, e.length) for e in events if e.name == "snaplen_truncated"] == [("snaplen_truncated", 6)]


def test_data_on_a_syn_follows_the_sequence_number_the_syn_takes() -> None:
    """TCP Fast Open: a SYN's payload starts at its sequence number plus one, and nothing is lost or moved."""
    data, events = run([seg(ISN, b"hello", flags=0x12), seg(ISN + 1 + 5, b"world")])
    assert data == b"helloworld"
    assert not [event for event in events if event.name in ("gap", "overlap_conflict")]
