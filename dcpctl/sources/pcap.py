"""Reading captures through pcapy-ng (libpcap): pcap and pcapng files (compressed too, through
``compressed``), standard input, live interfaces. A pcapng file whose interfaces have different link types,
which libpcap refuses, is read on by ``pcapng.PcapngReader`` from where libpcap stops.

Each frame is taken apart down to TCP: link layer (Ethernet with VLAN tags, Linux cooked SLL and SLL2, raw
IP, BSD null/loopback), IPv4 or IPv6 (extension headers skipped), TCP. Only segments to or from the
decoded ports come out, as :class:`TcpSegment`; what cannot be decoded comes out once, as a
:class:`CaptureNotice` (a TLS port per connection, an unknown link type, a capture file cut short), and
reading carries on wherever it can.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import os
import re
import select
import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

import pcapy

from dcpctl.errortext import os_reason
from dcpctl.protocol.constants import MAGIC_CLASS, RESPONSE_MAGICS, SERVER_MAGICS
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, HEADER_LENGTH, plausible_length
from dcpctl.protocol.registry import DCP, PUSHED_OPCODES
from dcpctl.sources.compressed import Decompressed, compression, opened, streamed
from dcpctl.sources.frametime import FrameTime
from dcpctl.sources.pcapng import PcapngReader

# Link-layer header types (https://www.tcpdump.org/linktypes.html and libpcap's DLT_ values).
DLT_NULL: Final = 0
DLT_EN10MB: Final = 1
DLT_RAW_12: Final = 12
DLT_RAW_14: Final = 14
DLT_LOOP: Final = 108
LINKTYPE_RAW: Final = 101
LINKTYPE_LINUX_SLL: Final = 113
LINKTYPE_LINUX_SLL2: Final = 276
VLAN_TYPES: Final = frozenset({0x8100, 0x88A8, 0x9100})
IPV6_EXTENSIONS: Final = frozenset({0, 43, 60})  # hop-by-hop, routing, destination options
IPV6_FRAGMENT: Final = 44
TCP: Final = 6
# Couchbase's TLS data port: a connection on it is told once and never framed
TLS_PORTS: Final = frozenset({11207})
# libpcap's refusal of a pcapng file whose interfaces have different link types, which PcapngReader reads
MIXED_LINKTYPES: Final = "different from the type of the first interface"
FROM_STDIN: Final = "such a pcapng file is read by name, not from standard input"
# Live capture: long enough for a whole segment; promiscuous off; 100 ms read timeout so Ctrl-C is seen.
LIVE_SNAPLEN: Final = 262144
LIVE_TIMEOUT_MS: Final = 100


# libpcap's pcapng reader, as pcapy-ng bundles it, ends one of its messages with a size format it did not
# expand ("a length of 137 that is not a multiple of 4zu"): shown without it
_UNEXPANDED_SIZE: Final = re.compile(r"(?<=\d)zu\b")


def libpcap_reason(exc: Exception) -> str:
    """libpcap's words for what it could not read, as a person should see them."""
    return _UNEXPANDED_SIZE.sub("", str(exc))


class CaptureError(ValueError):
    """The capture cannot be opened at all (not a capture file, no such interface, no privileges)."""


# A file of no bytes (a tcpdump that never wrote, a copy that failed): libpcap's words for it are a puzzle.
EMPTY_FILE: Final = "an empty file, not a capture"
# What a pipe of compressed data gets (its bytes cannot be looked at without taking them from libpcap).
STREAMED_COMPRESSED: Final = ("if it is compressed, a pipe is not decompressed: give the file's name, or "
                              "decompress it into the pipe (zcat, bzcat, xzcat, zstd -dc, lz4 -dc)")


# Not frozen: a frozen dataclass sets each field through object.__setattr__, and a segment cost 0.87 us to
# make instead of 0.17 (a gigabyte's capture holds some 750,000, made once by decode and twice by analyze).
# Nothing changes a segment once made.
@dataclass(slots=True)
class TcpSegment:
    ts: float
    frame: int  # 1-based frame number in the file
    src: tuple[str, int]
    dst: tuple[str, int]
    seq: int
    ack: int
    flags: int
    payload: bytes
    truncated: bool  # the snap length cut the payload
    wire_length: int  # payload length on the wire
    payload_at: int = 0  # where the payload starts in its frame (a chunked reader finds it in the file)


@dataclass(frozen=True, slots=True)
class CaptureNotice:
    frame: int
    ts: float
    name: str
    message: str


@dataclass(frozen=True, slots=True)
class FileStart:
    """Where one file of several begins, among their segments and notices. ``joined``: the file begins where
    the one before it ended (its first frame is no earlier than that one's last), so it continues that
    capture: a ring of files (tcpdump ``-C``/``-W``/``-G``, dumpcap's ring buffer) is read as one capture,
    its connections followed across files. A file that begins earlier is another capture of its own."""

    path: str
    joined: bool


_ADDRESSES: dict[bytes, str] = {}  # a capture has few distinct addresses; formatting each costs a call
MAX_ADDRESSES: Final = 65536  # beyond this many distinct ones, they are formatted each time


def _address(raw: bytes) -> str:
    text = _ADDRESSES.get(raw)
    if text is None:
        text = socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)
        if len(_ADDRESSES) < MAX_ADDRESSES:
            _ADDRESSES[raw] = text
    return text


def network_layer(linktype: int, data: bytes | bytearray) -> tuple[int, int] | None:
    """(ethertype-like protocol, offset of the IP header) for a frame, or None when not IP."""
    if linktype == DLT_EN10MB:
        offset, ethertype = 14, struct.unpack_from("!H", data, 12)[0] if len(data) >= 14 else 0
        while ethertype in VLAN_TYPES and len(data) >= offset + 4:
            ethertype = struct.unpack_from("!H", data, offset + 2)[0]
            offset += 4
        return ethertype, offset
    if linktype == LINKTYPE_LINUX_SLL:
        return (struct.unpack_from("!H", data, 14)[0], 16) if len(data) >= 16 else None
    if linktype == LINKTYPE_LINUX_SLL2:
        return (struct.unpack_from("!H", data, 0)[0], 20) if len(data) >= 20 else None
    if linktype in (LINKTYPE_RAW, DLT_RAW_12, DLT_RAW_14):
        if not data:
            return None
        return (0x0800 if data[0] >> 4 == 4 else 0x86DD), 0
    if linktype in (DLT_NULL, DLT_LOOP):
        if len(data) < 4:
            return None
        family = struct.unpack_from("!I" if linktype == DLT_LOOP else "<I", data, 0)[0]
        if family > 0xFFFF:  # DLT_NULL is in the capturing host's byte order: this one was big-endian
            family = struct.unpack_from("!I", data, 0)[0]
        if family == 2:
            return 0x0800, 4
        if family in (10, 24, 28, 30):
            return 0x86DD, 4
        return None
    return None


SUPPORTED_LINKTYPES: Final = frozenset({DLT_EN10MB, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, LINKTYPE_RAW,
                                        DLT_RAW_12, DLT_RAW_14, DLT_NULL, DLT_LOOP})


# Ethernet II carrying IPv4 without options carrying TCP: nearly every frame of a capture taken on a data node.
# Their headers in one unpack: ethertype, version and header length, total length, flags and fragment
# offset, protocol, addresses, ports, seq, ack, data offset, TCP flags. Any other frame takes the general path.
_PLAIN_TCP: Final = struct.Struct("!12xHBxH2xHxB2x4s4sHHIIBB")
_PLAIN_TCP_LENGTH: Final = 54  # Ethernet 14 + IPv4 20 + TCP 20: what the general path needs of such a frame


def parse_frame(linktype: int, data: bytes, wire_length: int, frame: int, ts: float) -> TcpSegment | str | None:
    """A TCP segment, None when the frame is not TCP over IP, or a one-line reason it is malformed."""
    if linktype == DLT_EN10MB and len(data) >= _PLAIN_TCP_LENGTH:
        ethertype, version_ihl, total, fragment, protocol, src, dst, sport, dport, seq, ack, data_offset, flags = \
            _PLAIN_TCP.unpack_from(data)
        # IPv4 ethertype, version 4 with a 20-byte header, not a fragment: IP and Ethernet codes, not DCP ones
        if ethertype == 0x0800 and version_ihl == 0x45 and protocol == TCP and not fragment & 0x1FFF:
            ip_end = 14 + total
            start = min(34 + (data_offset >> 4) * 4, ip_end)  # a data offset past the datagram: no payload
            payload = data[start:ip_end]  # what the snap length left of it
            wire_payload = max(0, ip_end - start)
            return TcpSegment(ts, frame, (_address(src), sport), (_address(dst), dport), seq, ack, flags, payload,
                              len(payload) < wire_payload and wire_length > len(data), wire_payload, start)
    return parse_any_frame(linktype, data, wire_length, frame, ts)


def parse_any_frame(linktype: int, data: bytes, wire_length: int, frame: int, ts: float
                    ) -> TcpSegment | str | None:
    """:func:`parse_frame` without its fast path for the common frame (the tests hold the two equal)."""
    network = network_layer(linktype, data)
    if network is None:
        return None
    ethertype, offset = network
    cut = wire_length - len(data)  # bytes the snap length removed from the frame's end
    if ethertype == 0x0800:
        if len(data) < offset + 20:
            return "IPv4 header cut short"
        version_ihl, total = data[offset], struct.unpack_from("!H", data, offset + 2)[0]
        ihl = (version_ihl & 0x0F) * 4
        fragment = struct.unpack_from("!H", data, offset + 6)[0]
        if data[offset + 9] != TCP:
            return None
        if fragment & 0x1FFF:
            return "IPv4 fragment (not reassembled)"
        src, dst = data[offset + 12:offset + 16], data[offset + 16:offset + 20]
        ip_end = offset + total
        offset += ihl
    elif ethertype == 0x86DD:
        if len(data) < offset + 40:
            return "IPv6 header cut short"
        payload_length = struct.unpack_from("!H", data, offset + 4)[0]
        next_header = data[offset + 6]
        src, dst = data[offset + 8:offset + 24], data[offset + 24:offset + 40]
        ip_end = offset + 40 + payload_length
        offset += 40
        while next_header in IPV6_EXTENSIONS and len(data) >= offset + 8:
            next_header, length = data[offset], (data[offset + 1] + 1) * 8
            offset += length
        if next_header == IPV6_FRAGMENT:
            return "IPv6 fragment (not reassembled)"
        if next_header != TCP:
            return None
    else:
        return None
    if len(data) < offset + 20:
        return "TCP header cut short"
    sport, dport, seq, ack, data_offset, flags = struct.unpack_from("!HHIIBB", data, offset)
    start = min(offset + (data_offset >> 4) * 4, ip_end)  # a data offset past the datagram: no payload there
    wire_payload = max(0, ip_end - start)
    payload = data[start:min(ip_end, len(data))]
    truncated = len(payload) < wire_payload and cut > 0
    return TcpSegment(ts, frame, (_address(src), sport), (_address(dst), dport), seq, ack, flags, payload,
                      truncated, wire_payload, start)


def tls_notice(frame: int, ts: float, connection: str, why: str) -> CaptureNotice:
    """The one notice for a TLS connection, whichever way it was known: its port (Couchbase's 11207, whose
    segments :class:`FrameFilter` drops unread) or, on any other port, its first bytes
    (``sources.tls``, which ``sources.capture`` reads at the start of each connection's stream)."""
    return CaptureNotice(frame, ts, "tls_port", f"{connection} is TLS ({why}) and cannot be decoded")


# Opcodes a segment on a port not decoded must start with to count as the protocol (either dialect's
# table: the UPR draft's overlay adds none): with the magic and lengths, random payloads rarely pass.
_KNOWN_OPCODES: Final = frozenset(opcode for _, opcode in DCP.table)
# Ports named in the hint: a capture of a whole cluster has a few services; beyond three, the first ones
# are the ones to try.
HINT_PORTS_NAMED: Final = 3


class FrameFilter:
    """What a reader keeps of each parsed frame: segments to or from the decoded ports; once per reader, a
    notice for each kind of malformed frame and for each connection on a TLS port.

    The rest is dropped, but looked at for :meth:`port_hint`: per server port, the segments whose payload
    starts as a packet of the protocol does. Memory is bounded by the number of ports (an integer each),
    whatever the capture's size."""

    def __init__(self, ports: frozenset[int], tls_ports: frozenset[int]) -> None:
        self.ports = ports
        self.tls_ports = tls_ports - ports
        self._tls_seen: set[tuple[tuple[str, int], tuple[str, int]]] = set()
        self._malformed_seen: set[str] = set()
        self.decoded = False  # a segment to or from a decoded port was kept
        self._protocol_packets: dict[int, int] = {}  # server port -> dropped segments that look like the protocol

    def __call__(self, parsed: TcpSegment | str | None, frame: int, ts: float) -> TcpSegment | CaptureNotice | None:
        if parsed is None:
            return None
        if isinstance(parsed, str):
            if parsed in self._malformed_seen:
                return None
            self._malformed_seen.add(parsed)
            return CaptureNotice(frame, ts, "malformed_frame", f"{parsed} (further ones not reported)")
        if parsed.src[1] in self.ports or parsed.dst[1] in self.ports:
            self.decoded = True
            return parsed
        if parsed.src[1] in self.tls_ports or parsed.dst[1] in self.tls_ports:
            key = (min(parsed.src, parsed.dst), max(parsed.src, parsed.dst))
            if key not in self._tls_seen:
                self._tls_seen.add(key)
                port = min(parsed.src[1], parsed.dst[1])
                return tls_notice(frame, ts, f"{parsed.src[0]}:{parsed.src[1]} > {parsed.dst[0]}:{parsed.dst[1]}",
                                  f"port {port}")
            return None
        if not self.decoded:
            self._look(parsed)
        return None

    def _look(self, segment: TcpSegment) -> None:
        """Count a dropped segment towards the port hint (only until the decoded ports show traffic), for
        the server's end of it: a request the producer pushes, or a response to the client's request, comes
        from the server; anything else goes to it."""
        payload = segment.payload
        if len(payload) >= HEADER_LENGTH and plausible_length(payload, 0, _KNOWN_OPCODES,
                                                              DEFAULT_MAX_BODY_LENGTH) is not None:
            pushed = payload[1] in PUSHED_OPCODES or MAGIC_CLASS[payload[0]] in SERVER_MAGICS
            port = segment.src[1] if pushed != (payload[0] in RESPONSE_MAGICS) else segment.dst[1]
            self._protocol_packets[port] = self._protocol_packets.get(port, 0) + 1

    def port_hint(self, frame: int, ts: float) -> CaptureNotice | None:
        """When nothing was decoded: the server ports that carry what looks like the protocol, busiest
        first, as a notice that suggests --port."""
        counts = self._protocol_packets
        if self.decoded or not counts:
            return None
        named = sorted(counts, key=lambda port: (-counts[port], port))[:HINT_PORTS_NAMED]
        decoded = ", ".join(map(str, sorted(self.ports)))
        carried = " and ".join(f"{port} ({counts[port]} packet{'s' * (counts[port] != 1)})" for port in named)
        return CaptureNotice(frame, ts, "protocol_on_other_port",
                             f"no traffic on port{'s' * (len(self.ports) != 1)} {decoded}; port"
                             f"{'s' * (len(named) != 1)} {carried} carr{'y' if len(named) != 1 else 'ies'} what "
                             f"looks like the memcached binary protocol: try "
                             f"{' '.join(f'--port {port}' for port in named)}")


# Frames a file's port hint is looked for in when a reader that never gives one (analyze's chunked tasks)
# found nothing: enough for a capture of another port's traffic, bounded for a big capture of none.
HINT_FRAMES: Final = 200_000


def port_hint_of(path: str, ports: frozenset[int], tls_ports: frozenset[int] = TLS_PORTS,
                 max_frames: int = HINT_FRAMES) -> CaptureNotice | None:
    """decode's port hint for a file from its first ``max_frames`` frames (None: nothing else looks like
    the protocol, or the decoded ports carry traffic); a file that cannot be read gives none."""
    keep = FrameFilter(ports, tls_ports)
    frame, ts = 0, 0.0
    try:
        reader = open_offline(path)
        linktype = int(reader.datalink())
        while frame < max_frames:
            header, data = reader.next()
            if header is None:
                break
            frame += 1
            ts = frame_time(header)
            keep(parse_frame(linktype, data, header.getlen(), frame, ts), frame, ts)
    except (CaptureError, OSError, pcapy.PcapError):
        pass  # what was read still counts; the analysis itself said why the file is damaged
    return keep.port_hint(frame, ts)


def _segments(reader: Any, ports: frozenset[int], tls_ports: frozenset[int], live: bool = False,
              tap: Callable[[float, bytes, int], None] | None = None,
              stop: Callable[[], bool] | None = None,
              reopen: Callable[[int], PcapngReader] | None = None,
              unmixed: str = FROM_STDIN,
              typed_tap: Callable[[float, bytes, int, int], None] | None = None
              ) -> Iterator[TcpSegment | CaptureNotice]:
    """``reopen(n)``: the file read on by :class:`PcapngReader` from frame n + 1, where libpcap refuses an
    interface of another link type; without it, ``unmixed`` says why not in the notice that reading ends
    with there. ``typed_tap``: a tap that also takes each frame's link type. A :class:`PcapngReader` given
    (a file of exact times, :func:`read_segments`) is read as after ``reopen``; without ``reopen`` and
    ``typed_tap`` its caller takes the first link type only, and reading ends at another's frame as libpcap's
    does at its interface."""
    linktype = reader.datalink()
    mixed = isinstance(reader, PcapngReader)  # each frame has its interface's link type, and may an exact time
    single = linktype if mixed and reopen is None and typed_tap is None else None
    unknown: set[int] = set()
    if linktype not in SUPPORTED_LINKTYPES and not mixed:
        # a pcapng file's first interface only: others, of link types dcpctl reads, may follow
        several = _of_several(reopen) if reopen is not None else None
        if several is None:
            yield CaptureNotice(0, 0.0, "unknown_link_type", f"link type {linktype} is not supported")
            return
        reader, mixed = several, True
    frame, ts = 0, 0.0
    keep = FrameFilter(ports, tls_ports)
    if live:  # never blocked inside libpcap (which waits for traffic, whatever its timeout): Ctrl-C works
        reader.setnonblock(1)
        ready = reader.getfd()
    while stop is None or not stop():
        try:
            header, data = reader.next()
        except pcapy.PcapError as exc:
            if not mixed and MIXED_LINKTYPES in str(exc):
                if reopen is None:
                    exc = pcapy.PcapError(f"{exc} ({unmixed})")
                else:
                    try:
                        reader, mixed = reopen(frame), True
                        continue
                    except pcapy.PcapError as failed:  # the file gone since libpcap opened it
                        exc = failed
            yield CaptureNotice(frame + 1, 0.0, "truncated_file", f"the capture file is damaged after frame "
                                f"{frame}: {libpcap_reason(exc)}")
            break
        if header is None:
            if live:  # nothing to read: wait for the interface, at most LIVE_TIMEOUT_MS
                select.select([ready], [], [], LIVE_TIMEOUT_MS / 1000)
                continue
            break
        frame += 1
        ts = frame_time(header)
        if mixed:
            linktype = header.linktype
            if single is not None and linktype != single:
                yield CaptureNotice(frame, 0.0, "truncated_file", f"the capture file is damaged after frame "
                                    f"{frame - 1}: an interface of link type {linktype} is {MIXED_LINKTYPES} "
                                    f"({unmixed})")
                break
        if tap is not None or typed_tap is not None:
            # a copy (redact's) writes the exact time; the segment, for decoding, takes the float
            exact = FrameTime(header.nanos) if mixed and header.nanos is not None else ts
            if tap is not None:
                tap(exact, data, header.getlen())
            if typed_tap is not None:
                typed_tap(exact, data, header.getlen(), linktype)
        if mixed and linktype not in SUPPORTED_LINKTYPES:
            if linktype not in unknown:
                unknown.add(linktype)
                yield CaptureNotice(frame, ts, "unknown_link_type", f"link type {linktype} is not supported: "
                                    f"the frames of its interfaces are skipped")
            continue
        kept = keep(parse_frame(linktype, data, header.getlen(), frame, ts), frame, ts)
        if kept is not None:
            yield kept
    hint = keep.port_hint(frame, ts)
    if hint is not None:
        yield hint


def _of_several(reopen: Callable[[int], PcapngReader]) -> PcapngReader | None:
    """The file read again by :class:`PcapngReader`, when it is a pcapng file whose interfaces (those described
    before its first frame) have several link types; None otherwise."""
    try:
        reader = reopen(0)
        types = reader.described()
    except pcapy.PcapError:
        return None
    return reader if len(set(types)) > 1 else None


def read_segments(path: str, ports: frozenset[int] = frozenset({11210}),
                  tls_ports: frozenset[int] = TLS_PORTS,
                  tap: Callable[[float, bytes, int], None] | None = None,
                  unmixed: str | None = None,
                  typed_tap: Callable[[float, bytes, int, int], None] | None = None, *, exact: bool = False
                  ) -> Iterator[TcpSegment | CaptureNotice]:
    """Segments of a capture file (``-`` for standard input); ``tap`` sees every frame (progress, copies).
    A pcapng file whose interfaces have different link types is read by :class:`PcapngReader` from where
    libpcap stops, unless ``unmixed`` says why its caller takes one link type only (then reading ends there,
    with a notice saying so).

    A classic pcap file whose header gives a snap length below :data:`FULL_SNAPLEN` is read by
    ``pcapchunks`` instead: libpcap cuts every frame to the header's snap length, even a record that holds
    more (a header below 14 bytes left nothing to decode, where tshark reads the whole records).

    ``exact``: the taps get a file's times to the nanosecond where it holds them so (:func:`nanosecond_times`),
    as :class:`~dcpctl.sources.frametime.FrameTime`: such a file is read by ``pcapchunks`` or
    :class:`PcapngReader`, as libpcap gives microseconds."""
    from dcpctl.sources import pcapchunks  # noqa: PLC0415 - it builds on this module

    if not streamed(path) and (pcapchunks.short_snaplen(path) or (exact and pcapchunks.nanosecond_pcap(path))):
        yield from pcapchunks.read_records(path, ports, tls_ports, tap)
        return
    if exact and _nanosecond_interfaces(path):
        yield from _segments(_described(path), ports, tls_ports, tap=tap,
                             reopen=None if unmixed is not None else functools.partial(reopened, path),
                             unmixed=unmixed or FROM_STDIN, typed_tap=typed_tap)
        return
    again = not streamed(path) and unmixed is None
    yield from _segments(open_offline(path), ports, tls_ports, tap=tap,
                         reopen=functools.partial(reopened, path) if again else None, unmixed=unmixed or FROM_STDIN,
                         typed_tap=typed_tap)


def read_files(paths: list[str], ports: frozenset[int] = frozenset({11210}),
               tap: Callable[[str], Callable[[float, bytes, int], None] | None] | None = None
               ) -> Iterator[TcpSegment | CaptureNotice | FileStart]:
    """The segments and notices of several capture files in turn, each file's preceded by its
    :class:`FileStart`. ``tap``: called as each file is opened, gives that file's frame tap (see
    :func:`read_segments`).

    Of two files or more, each notice names its file (and numbers frames in it, as the reader of the file
    alone does), and the segments of joined files are numbered through them, as in the capture they were
    cut from (or mergecap's concatenation of them). A file is joined to the one before when its first frame
    is no earlier than that one's last: decided when the file's first segment or notice comes out, by which
    time its first frame has been read."""
    if len(paths) == 1:  # chained, not yielded from: a generator's frame per segment costs
        return itertools.chain((FileStart(paths[0], joined=False),),
                               read_segments(paths[0], ports, tap=tap(paths[0]) if tap is not None else None))
    return _read_files(paths, ports, tap)


def continues(last: float | None, first: float | None) -> bool:
    """Whether a file whose first frame has time ``first`` continues the capture whose last frame had time
    ``last`` (None: no frame). A file without frames neither continues nor ends anything."""
    return last is not None and (first is None or first >= last)


@dataclass(slots=True)
class FileFrames:
    """A file's frames as far as joining files needs: how many, the first's and the last's times (None:
    none)."""

    count: int = 0
    first: float | None = None
    last: float | None = None


class Ring:
    """Files read one after another: whether each continues the capture before it (:func:`continues`), and
    how many frames of that capture come before it. decode, analyze's planner and redact keep it alike."""

    def __init__(self) -> None:
        self.last: float | None = None  # the last frame's time so far
        self.base = 0  # frames before the current file in its capture
        self._before = 0  # frames of the file before it

    def begins(self, frames: FileFrames) -> bool:
        """A file begins, its first frame's time known (``frames.first``, None for a file without frames):
        whether it continues the capture before it."""
        joined = continues(self.last, frames.first)
        self.base = self.base + self._before if joined else 0
        return joined

    def ends(self, frames: FileFrames) -> None:
        self._before = frames.count
        if frames.last is not None:
            self.last = frames.last


class _Frames(FileFrames):
    """A file's frame tap that keeps its :class:`FileFrames`, then calls the caller's own tap."""

    __slots__ = ("tap",)

    def __init__(self, tap: Callable[[float, bytes, int], None] | None) -> None:
        super().__init__()
        self.tap = tap

    def __call__(self, ts: float, data: bytes, wire: int) -> None:
        if self.first is None:
            self.first = ts
        self.last = ts
        self.count += 1
        if self.tap is not None:
            self.tap(ts, data, wire)


def _read_files(paths: list[str], ports: frozenset[int],
                tap: Callable[[str], Callable[[float, bytes, int], None] | None] | None
                ) -> Iterator[TcpSegment | CaptureNotice | FileStart]:
    ring = Ring()
    for path in paths:
        frames = _Frames(tap(path) if tap is not None else None)
        items = read_segments(path, ports, tap=frames)
        first = next(items, None)
        joined = ring.begins(frames)
        base = ring.base
        yield FileStart(path, joined)
        if first is not None:
            for item in itertools.chain((first,), items):
                if type(item) is TcpSegment:
                    item.frame += base  # numbered in the capture the file continues
                    yield item
                elif isinstance(item, CaptureNotice):
                    yield named(item, path)
        ring.ends(frames)


def named(notice: CaptureNotice, path: str) -> CaptureNotice:
    """A notice that names its file, one of several (its frame stays the file's own)."""
    return CaptureNotice(notice.frame, notice.ts, notice.name, f"{path}: {notice.message}")


def in_time_order(paths: list[str]) -> list[str]:
    """Several capture files in the order of their first frames' times, as mergecap merges them: so the
    files of a ring come in the order they were written, whatever their names say (a shell sorts tcpdump
    -C's cap10 before cap2, and a ring that wrapped, -W, starts with its newest file). Equal times keep the
    given order. A file whose first frame cannot be read (missing, not a capture, empty) comes last: what
    can be read is read, then its error, if any, is said. Standard input and pipes cannot be looked at
    twice (:func:`streamed`): given with one, the files keep the given order."""
    if len(paths) < 2 or any(map(streamed, paths)):
        return paths
    return sorted(paths, key=_first_time)


def frame_time(header: Any) -> float:
    """A frame's time from libpcap's header. A classic pcap file's seconds are an unsigned 32-bit field (as
    tshark and the chunked reader read it) that libpcap hands over signed: a time after 2038-01-19 came out
    negative, decades before 1970."""
    seconds, micros = header.getts()
    return float((seconds + (1 << 32) if seconds < 0 else seconds) + micros / 1_000_000)


def open_error(path: str) -> str | None:
    """Why the file at ``path`` does not open as a capture (its file header read; a compressed file's from
    its decompressor, which is then stopped: garbage that gzip takes is no capture either), or None: it
    opens, or it is standard input or a pipe, which a look would take the first bytes of."""
    if streamed(path):
        return None
    try:
        reader = open_offline(path)
        if isinstance(reader, _DecompressedReader):
            reader.close()
    except (CaptureError, FileNotFoundError) as exc:
        return str(exc)
    except ValueError as exc:  # compressed by a program that is not installed (compression())
        return str(exc)
    except OSError as exc:
        return os_reason(exc)
    return None


def _first_time(path: str) -> float:
    try:
        try:
            header, _ = open_offline(path).next()
        except pcapy.PcapError as exc:
            if MIXED_LINKTYPES not in str(exc):
                raise
            header, _ = reopened(path, 0).next()
    except (CaptureError, OSError, pcapy.PcapError):
        return math.inf
    if header is None:
        return math.inf
    return frame_time(header)


def frame_times(path: str) -> FileFrames:
    """A capture file's frames, read through libpcap as :func:`read_segments` reads them (up to any damage,
    which that reader reports)."""
    frames = _Frames(None)
    reader = open_offline(path)
    while True:
        try:
            header, data = reader.next()
        except pcapy.PcapError as exc:
            if MIXED_LINKTYPES in str(exc) and not isinstance(reader, PcapngReader):
                with contextlib.suppress(pcapy.PcapError):  # read again, or up to here as from a damage
                    reader = reopened(path, frames.count)
                    continue
            break
        if header is None:
            break
        frames(frame_time(header), data, 0)
    return frames


def reopened(path: str, frames: int) -> PcapngReader:
    """A pcapng file libpcap refused for its interfaces' link types, read on by :class:`PcapngReader` after
    the ``frames`` frames libpcap gave (decompressed here, in this process, when it is compressed)."""
    try:
        name = compression(path)
        # closed by the reader, at its end or when it is given up half way (--count)
        stream: BinaryIO = Path(path).open("rb") if name is None else opened(path, name)  # noqa: SIM115
    except (OSError, ValueError) as exc:  # the file gone since libpcap opened it
        raise pcapy.PcapError(f"cannot read it again: {exc}") from None
    return PcapngReader(stream, skip=frames, compressed=name)


def nanosecond_times(path: str) -> bool:
    """Whether ``read_segments(path, exact=True)`` gives times finer than the microsecond: those of a classic
    pcap file of nanosecond times, or of a pcapng file one of whose interfaces described before its first
    frame (of a link type dcpctl reads) has a finer resolution, compressed or not (dumpcap writes nanoseconds).
    Standard input and a compressed classic pcap file are read by libpcap, to the microsecond."""
    from dcpctl.sources import pcapchunks  # noqa: PLC0415 - it builds on this module

    return not streamed(path) and (pcapchunks.nanosecond_pcap(path) or _nanosecond_interfaces(path))


def _nanosecond_interfaces(path: str) -> bool:
    try:
        if streamed(path):
            return False
        with contextlib.closing(_described(path)) as reader:  # a compressed file's start decompressed
            return reader.datalink() in SUPPORTED_LINKTYPES and any(
                interface.divisor > 1_000_000 for interface in reader.interfaces)
    except (pcapy.PcapError, ValueError):
        return False


def _described(path: str) -> PcapngReader:
    """A pcapng file's reader, at its first frame, its interfaces described before it read."""
    reader = reopened(path, 0)
    reader.described()
    return reader


def interface_types(path: str) -> list[int]:
    """The link types of a pcapng file's interfaces described before its first frame (all of them, in a
    capture on several interfaces or mergecap's merge); [] for standard input, a classic pcap file, or one
    that cannot be read (its reader says why)."""
    if streamed(path):
        return []
    try:
        with contextlib.closing(reopened(path, 0)) as reader:
            return reader.described()
    except pcapy.PcapError:
        return []


def open_offline(path: str) -> Any:
    """libpcap's reader of a capture file (``-``: standard input, which can be opened once); a file compressed
    with gzip, bzip2 or xz is read decompressed."""
    try:
        name = compression(path) if path != "-" else None
    except ValueError as exc:
        raise CaptureError(str(exc)) from None
    if name is not None:
        try:
            data = Decompressed(path, name)
        except OSError as exc:  # no process could be started (a limit reached), the file gone meanwhile
            raise CaptureError(f"cannot decompress it: {exc.strerror or exc}") from None
        return _DecompressedReader(data)
    try:
        with _libpcap_name(path) as name:
            return pcapy.open_offline(name)
    except pcapy.PcapError as exc:
        message = libpcap_reason(exc)
        if "No such file" in message:
            raise FileNotFoundError("no such file") from None
        if not streamed(path) and os.path.getsize(path) == 0:
            raise CaptureError(EMPTY_FILE) from None
        if streamed(path) and "unknown file format" in message:  # a pipe is not looked at before libpcap reads it
            raise CaptureError(f"not a pcap or pcapng capture ({message}): {STREAMED_COMPRESSED}") from None
        raise CaptureError(f"not a pcap or pcapng capture ({message})") from None


@contextlib.contextmanager
def _libpcap_name(path: str) -> Iterator[str]:
    """A name libpcap can open for ``path``: pcapy takes text it encodes as UTF-8, so a file name that is not
    UTF-8 (its bytes kept by Python as surrogates) is opened here and named by its descriptor, which libpcap
    opens again; ours is closed once it has."""
    try:
        path.encode()
    except UnicodeEncodeError:
        pass
    else:
        yield path
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise FileNotFoundError("no such file") from None
    try:
        yield f"/dev/fd/{fd}"
    finally:
        os.close(fd)


class _DecompressedReader:
    """libpcap's reader over a compressed file's decompressed bytes. Where they stop short, reading ends
    as at a damaged capture file's end (pcap's error), saying why the data does not decompress."""

    def __init__(self, data: Decompressed) -> None:
        self._data = data
        try:
            self._reader = pcapy.open_offline(data.path)
        except pcapy.PcapError as exc:
            why = data.failure(early=True)
            data.close()
            raise CaptureError(why or f"not a pcap or pcapng capture inside the {data.name} data ({exc})") from None

    def datalink(self) -> int:
        return int(self._reader.datalink())

    def close(self) -> None:
        """Stop the decompressor before the end (a look at the header only)."""
        del self._reader
        self._data.close()

    def next(self) -> tuple[Any, bytes]:
        try:
            header, data = self._reader.next()
        except pcapy.PcapError as exc:
            if MIXED_LINKTYPES in str(exc):  # not a damage: the file is read again, by PcapngReader
                raise
            raise pcapy.PcapError(self._data.failure(early=True) or str(exc)) from None
        if header is None:
            why = self._data.failure()
            if why is not None:
                raise pcapy.PcapError(why)
        return header, data


def reader_segments(reader: Any, ports: frozenset[int] = frozenset({11210}),
                    tls_ports: frozenset[int] = TLS_PORTS,
                    tap: Callable[[float, bytes, int], None] | None = None,
                    unmixed: str = FROM_STDIN) -> Iterator[TcpSegment | CaptureNotice]:
    """:func:`read_segments` of a reader :func:`open_offline` opened (a pcapng file of several link types is
    read up to its first interface of another: ``unmixed`` says why in the notice)."""
    return _segments(reader, ports, tls_ports, tap=tap, unmixed=unmixed)


def bpf_error(bpf: str) -> str | None:
    """Why a capture filter does not compile (libpcap's words), or None: a mistake of the command line,
    found before an interface is opened (a filter naming a field the interface lacks is found there)."""
    try:
        pcapy.compile(DLT_EN10MB, LIVE_SNAPLEN, bpf, 1, 0)
    except (pcapy.PcapError, pcapy.BPFError) as exc:
        return str(exc)
    return None


def open_live(interface: str, bpf: str | None, ports: frozenset[int] = frozenset({11210}),
              tls_ports: frozenset[int] = TLS_PORTS) -> tuple[int, Any]:
    """Open an interface for capture: (link type, reader). Raises CaptureError with pcap's reason."""
    try:
        reader = pcapy.open_live(interface, LIVE_SNAPLEN, 0, LIVE_TIMEOUT_MS)
        reader.setfilter(bpf or " or ".join(f"tcp port {p}" for p in sorted(ports | tls_ports)))
    except (pcapy.PcapError, pcapy.BPFError) as exc:
        raise CaptureError(f"cannot capture on {interface}: {exc}") from None
    return reader.datalink(), reader


def live_segments(reader: Any, ports: frozenset[int], tls_ports: frozenset[int],
                  tap: Callable[[float, bytes, int], None] | None = None,
                  stop: Callable[[], bool] | None = None) -> Iterator[TcpSegment | CaptureNotice]:
    """Segments as the interface sees them; ends when ``stop()`` says so (checked after every packet and
    every read timeout, at most LIVE_TIMEOUT_MS apart)."""
    yield from _segments(reader, ports, tls_ports, live=True, tap=tap, stop=stop)
