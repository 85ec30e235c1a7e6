"""Writing captures: classic pcap files of TCP conversations, readable by Wireshark and dcpctl decode.

Used by the tests, the benchmarks, the samples and the live commands' capture files
(:mod:`dcpctl.sources.savefiles`). Frames are Ethernet (optionally VLAN-tagged), Linux cooked (SLL) or raw
IP carrying IPv4 or IPv6 and TCP with correct checksums and sequence numbers, so a capture written here
looks to any reader like one taken on a wire.
"""

from __future__ import annotations

import ipaddress
import math
import struct
from typing import BinaryIO, Final

from dcpctl.sources.frametime import NANOS, FrameTime
from dcpctl.sources.pcapng import BYTE_ORDER_MAGIC, ENHANCED_PACKET, IF_TSRESOL, INTERFACE_DESCRIPTION, SECTION_HEADER

LINKTYPE_NULL: Final = 0
LINKTYPE_ETHERNET: Final = 1
LINKTYPE_RAW: Final = 101
LINKTYPE_LINUX_SLL: Final = 113
# Large enough for any DCP packet plus headers (a 20 MiB item spans many segments anyway).
DEFAULT_SNAPLEN: Final = 262144
_SECONDS: Final = 1 << 32  # a record's seconds and lengths are 32-bit fields
_MICROS: Final = 1_000_000
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10  # TCP header flag bits (RFC 9293), not DCP codes
TCP_OPTION_NOP: Final = 1
TCP_OPTION_SACK: Final = 5  # the TCP option holding SACK blocks (RFC 2018)
MSS: Final = 1448


def ones_sum(data: bytes) -> int:
    """The ones' complement sum of ``data``'s 16-bit words modulo 0xFFFF: the data read as one big-endian
    integer modulo 0xFFFF (2**16 is 1 modulo 0xFFFF). An odd last byte is a word's high byte."""
    return int.from_bytes(data + b"\x00" if len(data) % 2 else data, "big") % 0xFFFF


def internet_checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071): the complement of :func:`ones_sum`, whose non-zero sums are never 0."""
    total = ones_sum(data) or (0xFFFF if any(data) else 0)
    return ~total & 0xFFFF


class PcapWriter:
    """A pcap file: global header at creation, one record per frame."""

    def __init__(self, stream: BinaryIO, linktype: int = LINKTYPE_ETHERNET,
                 snaplen: int = DEFAULT_SNAPLEN, *, nanos: bool = False) -> None:
        """``nanos``: times written to the nanosecond (a :class:`FrameTime`'s exact one), else the microsecond."""
        self.stream = stream
        self.linktype = linktype
        self.snaplen = snaplen
        self.units = NANOS if nanos else _MICROS  # per second
        stream.write(self._file_header())

    def _file_header(self) -> bytes:
        """The global header: pcap 2.4, micro- or nanoseconds, this writer's snap length and link type."""
        magic = 0xA1B23C4D if self.units == NANOS else 0xA1B2C3D4
        return struct.pack("<IHHiIII", magic, 2, 4, 0, 0, self.snaplen, self.linktype)

    def write(self, ts: float, frame: bytes, wire_length: int | None = None, linktype: int | None = None) -> None:
        """One record; ``wire_length`` is the frame's length on the wire when ``frame`` is already cut.
        ``linktype``: the frame's, which is the file's here (see :class:`PcapngWriter` for several)."""
        seconds, fraction, kept, original = self._parts(ts, frame, wire_length)
        # the seconds field is 32 bits, which libpcap reads as signed: a time it read from a damaged record
        # (before 1970) is written back as the same bits
        self.stream.write(struct.pack("<IIII", seconds % _SECONDS, fraction, len(kept), original) + kept)

    def _parts(self, ts: float, frame: bytes, wire_length: int | None) -> tuple[int, int, bytes, int]:
        """A frame's time in seconds and the writer's units, the bytes kept of it, and its length on the wire."""
        if isinstance(ts, FrameTime) and self.units == NANOS:
            seconds, fraction = divmod(ts.nanos, NANOS)
        else:  # a float is a time to the microsecond (all a float of today's times holds)
            seconds = math.floor(ts)
            micros = round((ts - seconds) * _MICROS)
            if micros >= _MICROS:
                seconds, micros = seconds + 1, micros - _MICROS
            fraction = micros * (self.units // _MICROS)
        kept = frame[:self.snaplen]
        original = len(frame) if wire_length is None else wire_length
        # a wire length below the bytes kept (a damaged record's, less what a redaction removed) is made true
        return seconds, fraction, kept, min(max(original, len(kept)), _SECONDS - 1)


class PcapngWriter(PcapWriter):
    """A pcapng file for frames of several link types, which a classic pcap file cannot hold: a section
    header, an interface a link type (times in microseconds, the default, or nanoseconds), an enhanced packet
    block a frame."""

    def __init__(self, stream: BinaryIO, linktypes: list[int], snaplen: int = DEFAULT_SNAPLEN, *,
                 nanos: bool = False) -> None:
        self.interfaces = {linktype: number for number, linktype in enumerate(dict.fromkeys(linktypes))}
        super().__init__(stream, linktypes[0], snaplen, nanos=nanos)

    def _file_header(self) -> bytes:
        # version 1.0, the section's length unknown
        section = _block(SECTION_HEADER, struct.pack("<IHHq", BYTE_ORDER_MAGIC, 1, 0, -1))
        return section + b"".join(self._interface(linktype) for linktype in self.interfaces)

    def _interface(self, linktype: int) -> bytes:
        # nanoseconds: if_tsresol 9 (10**-9 s), then the end of the options
        options = struct.pack("<HHBxxxHH", IF_TSRESOL, 1, 9, 0, 0) if self.units == NANOS else b""
        return _block(INTERFACE_DESCRIPTION, struct.pack("<HHI", linktype, 0, self.snaplen) + options)

    def write(self, ts: float, frame: bytes, wire_length: int | None = None, linktype: int | None = None) -> None:
        linktype = self.linktype if linktype is None else linktype
        number = self.interfaces.get(linktype)
        if number is None:  # an interface may be described anywhere before its first frame
            number = self.interfaces[linktype] = len(self.interfaces)
            self.stream.write(self._interface(linktype))
        seconds, fraction, kept, original = self._parts(ts, frame, wire_length)
        units = (seconds * self.units + fraction) % (1 << 64)
        fields = struct.pack("<IIIII", number, units >> 32, units & 0xFFFFFFFF, len(kept), original)
        self.stream.write(_block(ENHANCED_PACKET, fields + kept))


def _block(kind: int, body: bytes) -> bytes:
    """A pcapng block: its type and length, the body padded to 32 bits, the length again."""
    body += bytes(-len(body) % 4)
    return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


class TcpConversation:
    """One TCP connection written segment by segment with consistent sequence and ack numbers."""

    def __init__(self, writer: PcapWriter, client: tuple[str, int] = ("127.0.0.1", 50123),
                 server: tuple[str, int] = ("127.0.0.1", 11210), ts: float = 1_700_000_000.0,
                 vlan: int | None = None, step: float = 0.000_01) -> None:
        self.writer = writer
        self.client = client
        self.server = server
        self.ts = ts
        self.step = step
        self.vlan = vlan
        self.ipv6 = ipaddress.ip_address(client[0]).version == 6
        # the server's initial sequence number sits just below 2^32, so its stream wraps early on purpose
        self.isn = {True: 1_000_000, False: 0xFFFFFF00}
        self.next = {True: self.isn[True] + 1, False: self.isn[False] + 1}

    def _tick(self, ts: float | None) -> float:
        if ts is not None:
            self.ts = ts
        else:
            self.ts += self.step
        return self.ts

    def _frame(self, from_client: bool, seq: int, ack: int, flags: int, payload: bytes, options: bytes = b"") -> bytes:
        src, dst = (self.client, self.server) if from_client else (self.server, self.client)
        options += bytes(-len(options) % 4)  # TCP options end on a 32-bit word (RFC 9293), padded with EOL
        tcp = struct.pack("!HHIIBBHHH", src[1], dst[1], seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                          (5 + len(options) // 4) << 4, flags, 65535, 0, 0) + options
        src_ip, dst_ip = ipaddress.ip_address(src[0]).packed, ipaddress.ip_address(dst[0]).packed
        length = len(tcp) + len(payload)
        if self.ipv6:
            pseudo = src_ip + dst_ip + struct.pack("!IxxxB", length, 6)
        else:
            pseudo = src_ip + dst_ip + struct.pack("!xBH", 6, length)
        check = internet_checksum(pseudo + tcp + payload)
        tcp = tcp[:16] + struct.pack("!H", check) + tcp[18:]
        if self.ipv6:
            ip = struct.pack("!IHBB", 6 << 28, length, 6, 64) + src_ip + dst_ip
            ethertype = 0x86DD
        else:
            # an IPv4 header (RFC 791): version 4 with 20 bytes, don't fragment, TTL 64, TCP
            header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + length, 0, 0x4000, 64, 6, 0, src_ip, dst_ip)
            ip = header[:10] + struct.pack("!H", internet_checksum(header)) + header[12:]
            ethertype = 0x0800
        packet = ip + tcp + payload
        linktype = self.writer.linktype
        if linktype == LINKTYPE_RAW:
            return packet
        if linktype == LINKTYPE_LINUX_SLL:
            return struct.pack("!HHH8sH", 0 if not from_client else 4, 1, 6, bytes(8), ethertype) + packet
        if linktype == LINKTYPE_NULL:
            return struct.pack("<I", 30 if self.ipv6 else 2) + packet
        macs = bytes.fromhex("020000000002020000000001") if from_client else bytes.fromhex("020000000001020000000002")
        if self.vlan is not None:
            return macs + struct.pack("!HHH", 0x8100, self.vlan, ethertype) + packet
        return macs + struct.pack("!H", ethertype) + packet

    def segment(self, from_client: bool, payload: bytes, offset: int | None = None, flags: int = PSH | ACK,
                ts: float | None = None, ack: int | None = None, options: bytes = b"") -> None:
        """One segment; ``offset`` (bytes after the SYN) places it anywhere, without moving the sender on;
        ``ack`` (bytes of the other direction after its SYN) acknowledges less than all it sent so far;
        ``options`` are TCP options (a SACK block: :func:`sack_option`)."""
        base = self.isn[from_client] + 1
        seq = self.next[from_client] if offset is None else base + offset
        number = self.next[not from_client] if ack is None else self.isn[not from_client] + 1 + ack
        self.writer.write(self._tick(ts), self._frame(from_client, seq, number, flags, payload, options))
        if offset is None:
            self.next[from_client] += len(payload) + (1 if flags & (SYN | FIN) else 0)

    def handshake(self) -> None:
        client_isn, server_isn = self.isn[True], self.isn[False]
        steps = [(True, client_isn, 0, SYN), (False, server_isn, client_isn + 1, SYN | ACK),
                 (True, client_isn + 1, server_isn + 1, ACK)]
        for from_client, seq, ack, flags in steps:
            self.writer.write(self._tick(None), self._frame(from_client, seq, ack, flags, b""))

    def send(self, from_client: bool, payload: bytes, segment_size: int = MSS, ts: float | None = None) -> None:
        for start in range(0, len(payload), segment_size):
            self.segment(from_client, payload[start:start + segment_size], ts=ts if start == 0 else None)

    def skip(self, from_client: bool, length: int) -> None:
        """Bytes the sender sent that the capture missed."""
        self.next[from_client] += length

    def position(self, from_client: bool) -> int:
        """Bytes sent so far in one direction (the next segment's offset)."""
        return self.next[from_client] - self.isn[from_client] - 1

    def sack_option(self, from_client: bool, blocks: list[tuple[int, int]]) -> bytes:
        """A SACK option (RFC 2018) for a segment from one side, acknowledging ``blocks`` of the other side's
        bytes (offsets after its SYN, end exclusive), preceded by two NOPs as Linux aligns it."""
        base = self.isn[not from_client] + 1
        edges = b"".join(struct.pack("!II", (base + left) & 0xFFFFFFFF, (base + right) & 0xFFFFFFFF)
                         for left, right in blocks)
        return bytes([TCP_OPTION_NOP, TCP_OPTION_NOP, TCP_OPTION_SACK, 2 + len(edges)]) + edges

    def close(self) -> None:
        self.segment(from_client=True, payload=b"", flags=FIN | ACK)
        self.segment(from_client=False, payload=b"", flags=FIN | ACK)
        self.segment(from_client=True, payload=b"", flags=ACK)
