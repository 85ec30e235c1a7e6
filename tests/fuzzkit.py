"""Mutated captures for the fuzz tests of the commands that read captures: the bundled session written in
segments of several sizes, then a few edits anywhere (bytes changed, cut, inserted, copied; the file cut)."""

from __future__ import annotations

import functools

from capturekit import session_packets, write_capture
from hypothesis import strategies as st

SEGMENT_SIZES = [1, 7, 100, 1448, 65535]

EDITS = st.lists(st.tuples(st.sampled_from(["set", "cut", "insert", "copy", "truncate"]), st.integers(0, 1 << 20),
                           st.integers(0, 1 << 20), st.binary(min_size=1, max_size=64)), min_size=1, max_size=8)


@functools.cache
def base(size: int) -> bytes:
    return write_capture(session_packets(), segment_size=size)


def mutate(size: int, edits: list[tuple[str, int, int, bytes]]) -> bytes:
    """A capture of the bundled session, then a few edits anywhere: bytes changed, cut, inserted, copied."""
    data = bytearray(base(size))
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
