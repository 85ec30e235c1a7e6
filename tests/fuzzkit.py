"""Mutated captures for the fuzz tests of the commands that read captures: the bundled session written in
segments of several sizes, then a few edits anywhere (bytes changed, cut, inserted, copied; the file cut)."""

from __future__ import annotations

import functools
import struct

from capturekit import session_packets, write_capture
from hypothesis import strategies as st

SEGMENT_SIZES = [1, 7, 100, 1448, 65535]

EDITS = st.lists(st.tuples(st.sampled_from(["set", "cut", "insert", "copy", "truncate"]), st.integers(0, 1 << 20),
                           st.integers(0, 1 << 20), st.binary(min_size=1, max_size=64)), min_size=1, max_size=8)


# The files a capture may come as: dcpctl reads nanosecond ones itself where it must keep their times (redact)
FORMS = ["pcap", "nanosecond pcap", "nanosecond pcapng"]


@functools.cache
def base(size: int, form: str = "pcap") -> bytes:
    data = write_capture(session_packets(), segment_size=size)
    if form == "pcap":
        return data
    if form == "nanosecond pcap":
        return b"\x4d\x3c\xb2\xa1" + data[4:]
    # pcapng: a section, an Ethernet interface of nanosecond times (if_tsresol 9), a block a frame
    blocks = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)),
              _block(1, struct.pack("<HHIHHB3xHH", 1, 0, 0, 9, 1, 9, 0, 0))]
    at = 24
    while at < len(data):
        seconds, micros, captured, wire = struct.unpack_from("<IIII", data, at)
        units = (seconds * 1_000_000 + micros) * 1000 + 7
        blocks.append(_block(6, struct.pack("<IIIII", 0, units >> 32, units & 0xFFFFFFFF, captured, wire)
                             + data[at + 16:at + 16 + captured]))
        at += 16 + captured
    return b"".join(blocks)


def _block(kind: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack("<II", kind, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))


def mutate(size: int, edits: list[tuple[str, int, int, bytes]], form: str = "pcap") -> bytes:
    """A capture of the bundled session (in one of the FORMS), then a few edits anywhere: bytes changed, cut,
    inserted, copied."""
    data = bytearray(base(size, form))
    for kind, where, other, new in edits:
        at = where % (len(data) + 1)
        if kind == "set" and at < len(data):
            data[at] = new[0]
        elif kind == "cut":
            del data[at:at + len(new)]
        elif kind == "insert":
            data[at:at] = new
        elif kind == "copy":
            start = other % (len(data) + 1)
            data[at:at] = data[start:start + 4 * len(new)]
        elif kind == "truncate":
            del data[at:]
    return bytes(data)
