"""Reading a pcapng file whose interfaces have different link types, which libpcap refuses.

Wireshark on two interfaces (a Mac's lo0, BSD loopback, with en0, Ethernet; Linux's ``any`` with eth0) and
mergecap of captures taken on different hosts write such files, and tshark reads them. libpcap gives a file
one link type and stops at the first interface of another, so dcpctl reads such a file itself, with this
reader, from the frame where libpcap stopped (see ``pcap.read_segments``). Every other capture is read by
libpcap. The reader has libpcap's interface (``next()`` gives a header and the frame's bytes), and each
header also carries its interface's link type.

The format is the IETF draft's (draft-ietf-opsawg-pcapng): sections, each a Section Header Block and the
blocks after it; interfaces described by Interface Description Blocks (link type, snap length, timestamp
resolution and offset); frames in Enhanced, Simple and (obsolete) Packet Blocks. Other blocks are skipped.
A block that breaks the format ends reading as a damaged capture file does in libpcap (``pcapy.PcapError``
with the reason); a block longer than :data:`MAX_BLOCK_BYTES` is never read into memory.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Final

import pcapy

from dcpctl.sources.compressed import DamagedDataError
from dcpctl.sources.frametime import NANOS

SECTION_HEADER: Final = 0x0A0D0D0A
SECTION_HEADER_BYTES: Final = SECTION_HEADER.to_bytes(4, "big")
BYTE_ORDER_MAGIC: Final = 0x1A2B3C4D
INTERFACE_DESCRIPTION, PACKET, SIMPLE_PACKET, ENHANCED_PACKET = 1, 2, 3, 6  # block types
IF_TSRESOL, IF_TSOFFSET = 9, 14  # interface options: timestamp resolution, offset in seconds
# libpcap's bound on a block: larger than any frame a capture holds (a snap length of 256 KiB, or D-Bus's
# 128 MiB, which no DCP capture has), small enough that a hostile length costs nothing
MAX_BLOCK_BYTES: Final = 16 * 1024 * 1024
_MICROS: Final = 1_000_000
_CHUNK: Final = 1 << 20  # bytes read at a time


class Record:
    """A frame's header, as libpcap's (``getts()``: seconds and microseconds; ``getlen()``: its length on
    the wire), with its interface's link type, and ``nanos``, its exact time in nanoseconds, when its
    interface's resolution is not the microsecond (None when it is)."""

    __slots__ = ("length", "linktype", "micros", "nanos", "seconds")

    def __init__(self, seconds: int, micros: int, length: int, linktype: int, nanos: int | None = None) -> None:
        self.seconds, self.micros, self.length, self.linktype, self.nanos = seconds, micros, length, linktype, nanos

    def getts(self) -> tuple[int, int]:
        return self.seconds, self.micros

    def getlen(self) -> int:
        return self.length


class _Interface:
    __slots__ = ("divisor", "linktype", "offset", "snaplen")

    def __init__(self, linktype: int, snaplen: int, divisor: int, offset: int) -> None:
        self.linktype, self.snaplen, self.divisor, self.offset = linktype, snaplen, divisor, offset


class PcapngReader:
    """The frames of a pcapng stream, each with its interface's link type; ``skip``: frames not given (those
    libpcap gave before it stopped); ``compressed``: the format the stream is decompressed from, to say so
    of a read that fails (as libpcap's reader of a compressed file does)."""

    def __init__(self, stream: BinaryIO, skip: int = 0, compressed: str | None = None) -> None:
        self.stream = stream
        self.compressed = compressed
        self.buf, self.pos = b"", 0
        # what decompressed before a damage comes out first (a compressed file's read1)
        self.read = getattr(stream, "read1", stream.read)
        self.failure: str | None = None
        self._order("<")
        self.interfaces: list[_Interface] = []
        self.frames = 0  # frame blocks read, the skipped ones included
        self.skip = skip
        self.ended = False

    def close(self) -> None:
        self.ended = True
        self.stream.close()

    def __del__(self) -> None:
        self.stream.close()

    def described(self) -> list[int]:
        """At the start of a stream: the link types of the interfaces described before the first frame, in
        their order (a capture on several interfaces, and mergecap's merge, describe them all there); [] when
        it is not a pcapng stream. The frames are then read as before."""
        if self._fill(4)[0][:4] != SECTION_HEADER_BYTES:
            return []
        while not self.ended:
            buf, pos = self.buf, self.pos
            if len(buf) - pos < 8:
                buf, pos = self._fill(8)
                if len(buf) < 8:
                    break
            if self._two.unpack_from(buf, pos)[0] in (ENHANCED_PACKET, SIMPLE_PACKET, PACKET):
                break
            self._block()  # a block of no frame
        return [interface.linktype for interface in self.interfaces]

    def datalink(self) -> int:
        """The first interface's link type (the file's, for a reader that has one)."""
        return self.interfaces[0].linktype if self.interfaces else 0

    def next(self) -> tuple[Record | None, bytes]:
        """The next frame: (its header, its bytes); (None, b"") at the end. A damaged block raises
        ``pcapy.PcapError`` saying what is wrong, once; reading then ends."""
        while not self.ended:
            buf, pos = self.buf, self.pos
            if len(buf) - pos >= 32:  # an enhanced packet block, whole in the buffer: nearly every block
                kind, length = self._two.unpack_from(buf, pos)
                end = pos + length
                if kind == ENHANCED_PACKET and length >= 32 and end <= len(buf) and not length % 4:
                    interface, high, low, captured, wire = self._enhanced.unpack_from(buf, pos + 8)
                    if self._one.unpack_from(buf, end - 4)[0] == length and pos + 28 + captured <= end - 4 \
                            and interface < len(self.interfaces):
                        self.pos = end
                        self.frames += 1
                        if self.frames <= self.skip:
                            continue
                        described = self.interfaces[interface]
                        return _header(described, high << 32 | low, wire), buf[pos + 28:pos + 28 + captured]
            try:  # any other block, one not yet whole in the buffer, or a damaged one
                frame = self._block()
            except pcapy.PcapError:
                self.close()
                raise
            if frame is None:
                continue
            self.frames += 1
            if self.frames > self.skip:
                return frame
        self.close()
        return None, b""

    def _fill(self, wanted: int) -> tuple[bytes, int]:
        """At least ``wanted`` bytes from the read position on, unless the file ends first, or its data stops
        reading (what came before is given first: ``failure`` then says why there is no more)."""
        pieces = [self.buf[self.pos:]]
        have = len(pieces[0])
        while have < wanted and self.failure is None:
            try:
                chunk = self.read(_CHUNK)
            except Exception as exc:  # noqa: BLE001 - a read error, or compressed data that does not
                # decompress: gzip, bz2 and lzma each raise errors of their own
                self.failure = (str(exc) if isinstance(exc, DamagedDataError)
                                else f"the {self.compressed} data is damaged ({exc})" if self.compressed
                                else f"the file cannot be read on ({exc})")
                break
            if not chunk:
                break
            pieces.append(chunk)
            have += len(chunk)
        self.buf, self.pos = b"".join(pieces), 0
        return self.buf, 0

    def _short(self, what: str) -> pcapy.PcapError:
        return pcapy.PcapError(self.failure or f"truncated pcapng file: {what} cut short")

    def _block(self) -> tuple[Record, bytes] | None:
        buf, pos = self.buf, self.pos
        if len(buf) - pos < 12:
            buf, pos = self._fill(12)
            if len(buf) < 8:
                if buf or self.failure:
                    raise self._short("a block header")
                self.ended = True
                return None
        if buf[pos:pos + 4] == SECTION_HEADER_BYTES:  # the same in either byte order; the magic says which
            magic = buf[pos + 8:pos + 12]
            if int.from_bytes(magic, "little") == BYTE_ORDER_MAGIC:
                self._order("<")
            elif int.from_bytes(magic, "big") == BYTE_ORDER_MAGIC:
                self._order(">")
            else:
                raise pcapy.PcapError("a section header with no byte-order magic: not a pcapng file from there")
            self.interfaces = []  # a section describes its own interfaces
        kind, length = self._two.unpack_from(buf, pos)
        if length < 12 or length % 4:
            raise pcapy.PcapError(f"a pcapng block of {length} bytes, not a whole number of 32-bit words of "
                                  f"at least 12")
        if length > MAX_BLOCK_BYTES:
            raise pcapy.PcapError(f"a pcapng block of {length} bytes, more than any capture's "
                                  f"({MAX_BLOCK_BYTES} bytes)")
        if len(buf) - pos < length:
            buf, pos = self._fill(length)
            if len(buf) < length:
                raise self._short("a block")
        end = pos + length
        if self._one.unpack_from(buf, end - 4)[0] != length:
            raise pcapy.PcapError(f"a pcapng block of {length} bytes whose trailing length differs")
        self.pos = end
        if kind == ENHANCED_PACKET:  # whole and well-formed, next() reads it; else, say what is wrong
            if length < 32:
                raise pcapy.PcapError(f"an enhanced packet block of {length} bytes, too short for its fields")
            interface, _high, _low, captured, _wire = self._enhanced.unpack_from(buf, pos + 8)
            self._check(interface, pos + 28 + captured, end - 4, captured)
            self.pos = pos  # read again by next(), now that it is whole
            return None
        if kind == SIMPLE_PACKET:
            if length < 16 or not self.interfaces:
                raise pcapy.PcapError("a simple packet block before any interface, or too short for its length")
            wire = self._one.unpack_from(buf, pos + 8)[0]
            captured = min(wire, self.interfaces[0].snaplen or wire, end - 4 - (pos + 12))
            return self._frame(0, None, buf, pos + 12, captured, wire, end - 4)
        if kind == PACKET:
            if length < 32:
                raise pcapy.PcapError(f"a packet block of {length} bytes, too short for its fields")
            interface, _drops, high, low, captured, wire = self._obsolete.unpack_from(buf, pos + 8)
            return self._frame(interface, high << 32 | low, buf, pos + 28, captured, wire, end - 4)
        if kind == SECTION_HEADER:
            major = self._half.unpack_from(buf, pos + 12)[0] if length >= 28 else None
            if major != 1:
                raise pcapy.PcapError(f"a section of pcapng version {major}, which no reader knows")
        elif kind == INTERFACE_DESCRIPTION:
            self._interface(buf[pos + 8:end - 4], length)
        return None  # a block of no frame: name resolution, statistics, decryption secrets, custom

    def _order(self, endian: str) -> None:
        self.endian = endian
        self._one, self._half, self._two = (struct.Struct(endian + f) for f in ("I", "H", "II"))
        self._enhanced, self._obsolete = struct.Struct(endian + "IIIII"), struct.Struct(endian + "HHIIII")

    def _interface(self, body: bytes, length: int) -> None:
        if len(body) < 8:
            raise pcapy.PcapError(f"an interface description block of {length} bytes, too short for its fields")
        linktype, snaplen = struct.unpack_from(self.endian + "HxxI", body)
        divisor, offset, at = _MICROS, 0, 8
        while at + 4 <= len(body):
            code, size = struct.unpack_from(self.endian + "HH", body, at)
            value = body[at + 4:at + 4 + size]
            if code == 0 or len(value) < size:
                break
            if code == IF_TSRESOL and size == 1:
                divisor = 2 ** (value[0] & 0x7F) if value[0] & 0x80 else 10 ** value[0]
            elif code == IF_TSOFFSET and size == 8:
                offset = struct.unpack(self.endian + "q", value)[0]
            at += 4 + size + -size % 4
        self.interfaces.append(_Interface(linktype, snaplen, divisor, offset))

    def _check(self, interface: int, last: int, end: int, captured: int) -> None:
        if interface >= len(self.interfaces):
            raise pcapy.PcapError(f"a packet of interface {interface}, which no block of its section describes")
        if last > end:
            raise pcapy.PcapError(f"a packet block whose {captured} captured bytes overrun the block")

    def _frame(self, interface: int, units: int | None, buf: bytes, start: int, captured: int, wire: int,
               end: int) -> tuple[Record, bytes]:
        """A simple or (obsolete) packet block's frame."""
        self._check(interface, start + captured, end, captured)
        described = self.interfaces[interface]
        if units is None:  # a simple packet block has no time
            return Record(0, 0, wire, described.linktype), buf[start:start + captured]
        return _header(described, units, wire), buf[start:start + captured]


def _header(described: _Interface, units: int, wire: int) -> Record:
    """The header of a frame of interface ``described`` at ``units`` of its resolution."""
    divisor = described.divisor
    seconds, fraction = divmod(units, divisor)
    seconds += described.offset
    nanos = None if divisor == _MICROS else seconds * NANOS + fraction * NANOS // divisor
    return Record(seconds, fraction * _MICROS // divisor, wire, described.linktype, nanos)
