"""Hostile captures (issue 17, items 11 and 12): time linear in the input, memory bounded whatever it holds.

Time is checked by scaling: the same hostile shape at n and 4n, CPU time of the decoding alone (best of
three). Linear work gives a ratio near 4, the quadratic work these tests were written against gave 16.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from capturekit import session_packets, write_capture

from dcpctl.dcp.observed import Observed
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions
from dcpctl.render.lines import PlainLines
from dcpctl.render.record import record as record_of
from dcpctl.sources.capture import CaptureDecoder, decode_segments
from dcpctl.sources.pcap import TcpSegment, read_segments
from dcpctl.sources.tcp import Reassembler

CLIENT, SERVER = ("10.0.0.1", 40000), ("10.0.0.2", 11210)
PORTS = frozenset({11210})
LINEAR = 8.0  # the largest ratio accepted for 4x the input: linear is 4, quadratic 16


def segment(payload: bytes, seq: int, frame: int, flags: int = 0x18, src: tuple[str, int] = SERVER,
            dst: tuple[str, int] = CLIENT) -> TcpSegment:
    return TcpSegment(1.0 + frame * 1e-6, frame, src, dst, seq % (1 << 32), 0, flags, payload, False, len(payload))


def server_stream(data: bytes, size: int, order: Callable[[list[int]], Iterable[int]] = lambda x: x
                  ) -> list[TcpSegment]:
    """A handshake, then ``data`` from the server in ``size``-byte segments, in ``order``."""
    out = [segment(b"", 99, 1, 0x02, CLIENT, SERVER), segment(b"", 999, 2, 0x12)]
    starts = list(range(0, len(data), size))
    out += [segment(data[s:s + size], 1000 + s, 3 + i) for i, s in enumerate(order(starts))]
    return out


def cpu(run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return max(best, 1e-3)


def assert_linear(make: Callable[[int], Callable[[], object]], n: int) -> None:
    small, large = make(n), make(4 * n)
    ratio = cpu(large) / cpu(small)
    assert ratio < LINEAR, f"4x the input took {ratio:.1f}x the time"


def decode_all(segments: list[TcpSegment], lines: bool = True) -> list[object]:
    return list(decode_segments(segments, DecodeOptions(), PORTS, plain=PlainLines() if lines else None))


def noops(count: int) -> bytes:
    return b"".join(encode({"magic": "ClientRequest", "opcode": "DCP_NOOP", "opaque": i}) for i in range(count))


def test_segments_arriving_last_first_reassemble_in_linear_time() -> None:
    def make(n: int) -> Callable[[], object]:
        segments = server_stream(noops(n * 100 // 24 + 1)[:n * 100], 100, reversed)

        def run() -> object:
            reassembler = Reassembler()
            return [reassembler.push(s) for s in segments], reassembler.flush()

        return run

    assert_linear(make, 3000)


def test_a_big_document_in_small_segments_frames_in_linear_time() -> None:
    def make(megabytes: int) -> Callable[[], object]:
        mutation = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 0, "opaque": 1,
                           "by_seqno": 1, "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0,
                           "nru": 0, "datatype": 0, "key": "big", "value": "x" * (megabytes << 20)})
        segments = server_stream(mutation, 536)
        return lambda: decode_all(segments)

    assert_linear(make, 1)


def test_a_message_spanning_many_segments_names_each_frame_once() -> None:
    mutation = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 0, "opaque": 1,
                       "by_seqno": 1, "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0,
                       "nru": 0, "datatype": 0, "key": "big", "value": "x" * 100_000})
    segments = server_stream(mutation, 536)
    (message,) = [m for m in decode_all(segments, lines=False) if isinstance(m, Observed)]
    assert record_of(message)["frames"] == [s.frame for s in segments[2:]]


def test_garbage_is_skipped_in_linear_time() -> None:
    rng = random.Random(12)

    def make(megabytes: int) -> Callable[[], object]:
        block = rng.randbytes(1 << 19) + b"\x80" * (1 << 19)
        segments = server_stream(block * megabytes, 1448)
        return lambda: decode_all(segments)

    assert_linear(make, 1)
def test_closed_connections_are_forgotten() -> None:
    """Connections closed both ways leave nothing behind in the reassembler or the decoder."""
    decoder = CaptureDecoder(DecodeOptions(), PORTS, max_connections=100)
    for index in range(2000):
        client = ("10.1.0.1", 1024 + index)
        noop = noops(1)
        for item in [segment(b"", 99, 1, 0x02, client, SERVER), segment(b"", 999, 2, 0x12, SERVER, client),
                     segment(noop, 1000, 3, 0x18, SERVER, client), segment(b"", 1000 + len(noop), 4, 0x11, SERVER,
                                                                          client),
                     segment(b"", 100, 5, 0x11, client, SERVER), segment(b"", 101, 6, 0x10, client, SERVER)]:
            list(decoder.feed(item))
    assert len(decoder.connections) == 0
    assert len(decoder.reassembler.connections) == 0
    assert len(decoder.reassembler.generations) == 100  # a reuse of the latest 4-tuples is still told apart


def test_a_syn_flood_is_followed_up_to_the_limit_and_said_once() -> None:
    decoder = CaptureDecoder(DecodeOptions(), PORTS, max_connections=100)
    out = []
    for index in range(5000):
        out += decoder.feed(segment(b"", 99, index + 1, 0x02, ("10.2.0.1", 1024 + index), SERVER))
        assert len(decoder.reassembler.connections) <= 100
        assert len(decoder.opened) <= 100
        assert len(decoder.connections) == 0
    out += decoder.finish()
    assert [d.name for d in out] == ["connection_limit", "connection_limit"]  # type: ignore[attr-defined]
    assert "4900 connections in all" in out[-1].message  # type: ignore[attr-defined]


def test_a_resent_segment_that_differs_is_reported() -> None:
    noop = noops(2)
    changed = noop[:30] + b"\xff" + noop[31:]
    segments = [*server_stream(noop, 48), segment(changed, 1000, 9)]
    notices = [d for d in decode_all(segments, lines=False) if getattr(d, "name", None) == "overlap_conflict"]
    assert len(notices) == 1
    assert "frame 9" in notices[0].message  # type: ignore[attr-defined]


@pytest.mark.parametrize("snaplen", [1, 13, 64, 1500])
def test_a_file_header_snaplen_below_its_records_does_not_cut_them(tmp_path: Path, snaplen: int) -> None:
    """libpcap cuts every frame to the file header's snap length: below 14 nothing decoded, exit 0 (tshark
    reads the whole records, and so does decode now)."""
    data = write_capture(session_packets())
    whole, short = tmp_path / "whole.pcap", tmp_path / "short.pcap"
    whole.write_bytes(data)
    short.write_bytes(data[:16] + struct.pack("<I", snaplen) + data[20:])
    progress: list[int] = []
    items = list(decode_segments(read_segments(str(short), PORTS, tap=lambda _t, d, _w: progress.append(len(d))),
                                 DecodeOptions(), PORTS))
    def raw(items: Iterable[object]) -> list[object]:
        return [i.packet.raw if isinstance(i, Observed) else i for i in items]

    assert raw(items) == raw(decode_segments(read_segments(str(whole), PORTS), DecodeOptions(), PORTS))
    assert len(items) == len(session_packets())
    assert sum(progress) == len(data) - 24 - 16 * len(progress)
