"""Framer: bytes in any chunking -> whole packets with their stream offsets (sans-IO).

Theory of operation. ``feed`` appends to one buffer; ``events`` yields a :class:`Frame` for every complete
packet and a :class:`Skipped` for bytes that cannot start one. A position starts a packet when its 24 bytes
form a *plausible header*: a known magic, and lengths that fit inside the total body, which itself is at
most ``max_body_length``. When the bytes at the current position are not plausible the framer skips ahead to
the next position that is (one ``Skipped`` per run of garbage, with its size), so a capture that starts
mid-stream or a corrupt segment costs only the damaged bytes. A header whose only fault is a body above the
maximum is reported as ``body_too_long`` and skipped the same way: the framer never waits for, or buffers,
more than one legitimate packet. Invariant: every byte fed is accounted for exactly once, in a Frame, a
Skipped, or the ``pending`` count still buffered.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Final, TypeVar

from dcpctl.protocol.constants import ALT_MAGICS, MAGIC_CLASS
from dcpctl.protocol.registry import HEADER_LAYOUT

HEADER_LENGTH: Final = HEADER_LAYOUT.size

# The largest body a server produces: 20 MiB documents plus 1 MiB of system xattrs, key, extras and frame
# infos, rounded up. Anything above it is a corrupt or hostile length, not a packet.
DEFAULT_MAX_BODY_LENGTH: Final = 22 * 1024 * 1024
# The header up to its total body length: all a framing decision reads.
_PREFIX: Final = HEADER_LAYOUT.prefix("total_body_length")
# Opcodes and magics that start a plausible header when resynchronising; while in sync any opcode frames.
_RESYNC_MAGICS: Final = frozenset(MAGIC_CLASS)


@dataclass(frozen=True, slots=True)
class Frame:
    data: bytes
    offset: int  # of the first byte in the stream


@dataclass(frozen=True, slots=True)
class Skipped:
    offset: int
    length: int
    reason: str  # "garbage" or "body_too_long"


Event = Frame | Skipped
T = TypeVar("T")


class Framer:
    """Incremental framer; see the module docstring for the contract."""

    def __init__(self, max_body_length: int = DEFAULT_MAX_BODY_LENGTH, known_opcodes: frozenset[int]
                 | None = None, synced: bool = True, offset: int = 0) -> None:
        """``synced=False`` starts in resynchronising mode (a capture that begins mid-stream, or after a
        gap): then only ``known_opcodes`` start a header until the first packet frames. ``offset`` is the
        stream offset of the first byte fed (after a gap, where the stream resumes)."""
        self.max_body_length = max_body_length
        self.known_opcodes = known_opcodes
        self._buf = b""  # bytes, not bytearray: slicing a frame out of bytes copies once
        self._parts: list[bytes] = []  # fed but not yet joined into _buf
        self._parts_length = 0
        self._need = HEADER_LENGTH  # bytes from _pos the next decision needs
        self._pos = 0  # index of the next unconsumed byte in _buf
        self._base = offset  # stream offset of _buf[0]
        self._synced = synced

    @property
    def pending(self) -> int:
        """Bytes buffered that are not yet part of an event."""
        return len(self._buf) - self._pos + self._parts_length

    @property
    def synced(self) -> bool:
        """Whether the last bytes framed were a packet (not garbage being skipped)."""
        return self._synced

    @property
    def offset(self) -> int:
        """Stream offset of the next unconsumed byte."""
        return self._base + self._pos

    def feed(self, data: bytes) -> None:
        # Chunks are only collected here; _join copies them into _buf once enough bytes are there for the
        # next header or body. So a 20 MiB packet arriving in 1,500-byte segments is copied twice, not
        # once per segment.
        if data:
            self._parts.append(bytes(data))
            self._parts_length += len(data)

    def _join(self) -> None:
        if self._parts and len(self._buf) - self._pos + self._parts_length >= self._need:
            self._base += self._pos
            self._buf = b"".join([self._buf[self._pos:], *self._parts])
            self._pos = 0
            self._parts.clear()
            self._parts_length = 0

    def _plausible(self, pos: int) -> int | None:
        """Total packet length if a plausible header starts at ``pos``, else None (needs 24 bytes)."""
        return plausible_length(self._buf, pos, None if self._synced else self.known_opcodes)

    def events(self) -> Iterator[Event]:
        """Drain every event the buffered bytes allow; call after each feed."""
        return self.decoded(Frame)

    def decoded(self, decoder: Callable[[bytes, int], T]) -> Iterator[T | Skipped]:
        """As :meth:`events`, with each frame handed straight to ``decoder(data, offset)``.

        One loop serves both, so decoding a stream costs no intermediate Frame per packet.
        """
        self._join()
        buf = self._buf
        unpack = _PREFIX.unpack_from
        limit = self.max_body_length
        while True:
            pos = self._pos
            available = len(buf) - pos
            if available < HEADER_LENGTH:
                self._need = HEADER_LENGTH
                self._join()
                if self._buf is buf:
                    return
                buf = self._buf
                continue
            # the common case inline: a known magic whose lengths fit and whose body is not too long
            magic, opcode, keylen, extlen, _dt, _vb, body = unpack(buf, pos)
            framing = 0
            if magic in ALT_MAGICS:
                framing, keylen = keylen >> 8, keylen & 0xFF
            if (magic in _RESYNC_MAGICS and framing + extlen + keylen <= body <= limit
                    and (self._synced or self.known_opcodes is None or opcode in self.known_opcodes)):
                total = HEADER_LENGTH + body
                if available < total:
                    self._need = total
                    self._join()
                    if self._buf is buf:
                        return
                    buf = self._buf
                    continue
                self._synced = True
                self._pos = pos + total
                yield decoder(buf[pos:pos + total], self._base + pos)
                continue
            self._synced = False
            if self._plausible(pos) is not None:  # plausible, but the body is above the maximum
                self._pos = pos + 1  # before the yield: a caller may take one event and drop the generator
                yield Skipped(self._base + pos, 1, "body_too_long")
            yield from self._resync()
            buf = self._buf

    def _resync(self) -> Iterator[Skipped]:
        """Skip to the next plausible header (or keep the last 23 bytes, which may start one).

        Candidates are found by a regular expression (magic, opcode, the body length's top byte), so a
        run of garbage is scanned in C; only the candidates are checked in full."""
        buf = self._buf
        start = self._pos
        end = len(buf) - HEADER_LENGTH
        search = _candidates(self.max_body_length, self.known_opcodes).search
        pos = start
        while pos <= end:
            found = search(buf, pos, end + HEADER_LENGTH)
            if found is None or found.start() > end:  # none, or too near the end to judge yet
                pos = end + 1
                break
            pos = found.start()
            total = self._plausible(pos)
            if total is not None and total - HEADER_LENGTH <= self.max_body_length:
                break
            pos += 1
        if pos > start:
            self._pos = pos
            yield Skipped(self._base + start, pos - start, "garbage")

    def window(self) -> tuple[bytes, int]:
        """The buffered bytes and the index of the first unconsumed one, for a caller that walks the
        headers itself (a counting fast path); it then says how far it got with :meth:`consume`. Chunks
        fed since are joined only once the next decision has the bytes it needs (as :meth:`events`
        joins), so a big packet arriving in small segments is not copied once per segment: until it is
        whole, the window may not hold every byte fed."""
        self._join()
        return self._buf, self._pos

    def consume(self, pos: int) -> None:
        """Mark the bytes of :meth:`window`'s buffer before ``pos`` as handled (whole packets only)."""
        if pos != self._pos:
            self._pos = pos
            self._need = HEADER_LENGTH

    def remainder(self) -> tuple[int, bytes]:
        """End of input: stream offset and bytes of what is left (a truncated packet or garbage)."""
        self._need = 0
        self._join()
        start = self.offset
        data = self._buf[self._pos:]
        self._pos = len(self._buf)
        return start, data


def plausible_length(buf: bytes, pos: int, known_opcodes: frozenset[int] | None = None,
                     max_body_length: int | None = None) -> int | None:
    """Total packet length if the 24 bytes at ``buf[pos:]`` form a plausible header, else None: a known
    magic, lengths that fit inside the body and, when given, a known opcode and a body of at most
    ``max_body_length``. The framer's test, also used to spot the protocol on ports not decoded."""
    magic, opcode, keylen, extlen, _dt, _vb, body = _PREFIX.unpack_from(buf, pos)
    if magic not in _RESYNC_MAGICS:
        return None
    framing = 0
    if magic in ALT_MAGICS:
        framing, keylen = keylen >> 8, keylen & 0xFF
    if framing + extlen + keylen > body:
        return None
    if known_opcodes is not None and opcode not in known_opcodes:
        return None
    if max_body_length is not None and body > max_body_length:
        return None
    return HEADER_LENGTH + int(body)


@lru_cache(maxsize=16)
def _candidates(max_body_length: int, known_opcodes: frozenset[int] | None) -> re.Pattern[bytes]:
    """Where a plausible header may start while resynchronising: a known magic, a known opcode, and a body
    length whose most significant byte allows a body of at most ``max_body_length``."""
    def one_of(values: frozenset[int] | range) -> bytes:
        return b"[" + b"".join(re.escape(bytes([v])) for v in sorted(values)) + b"]"

    opcodes = one_of(known_opcodes) if known_opcodes is not None else b"."
    top = one_of(range(min(255, max_body_length >> 24) + 1))
    return re.compile(one_of(_RESYNC_MAGICS) + opcodes + b".{6}" + top, re.DOTALL)
