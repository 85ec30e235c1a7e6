"""parse_frame's fast path for the common frame (Ethernet II, IPv4 without options, TCP) gives exactly what the
general parser gives, on every frame: generated ones near that shape and every frame of the captures here."""

from __future__ import annotations

import struct

from capturekit import ROOT, session_packets, write_capture
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dcpctl.sources.pcap import DLT_EN10MB, LINKTYPE_RAW, TcpSegment, parse_any_frame, parse_frame
from dcpctl.sources.pcapwriter import LINKTYPE_LINUX_SLL, LINKTYPE_NULL

SAMPLE = ROOT / "samples" / "dcp-session.pcap"

PLAIN = bytes(12) + struct.pack("!HBBHHHBBH4s4sHHIIBBHHH", 0x0800, 0x45, 0, 40 + 5, 1, 0x4000, 64, 6, 0,
                                b"\x0a\x00\x00\x01", b"\x0a\x00\x00\x02", 11210, 40000, 7, 9, 0x50, 0x18, 100, 0,
                                0) + b"hello"


@st.composite
def frames(draw: st.DrawFn) -> tuple[bytes, int]:
    """An Ethernet frame of the common shape with at most one header field changed (to a value that matters or
    to anything), or with every field drawn; cut by a snap length or not; and its length on the wire."""
    fields = {"ethertype": 0x0800, "version_ihl": 0x45, "protocol": 6, "fragment": draw(st.sampled_from([0, 0x4000])),
              "data_offset": 0x50}
    odd = {"ethertype": [0x86DD, 0x8100, 0x0806], "version_ihl": [0x46, 0x4F, 0x44, 0x65, 0x55],
           "protocol": [17, 1], "fragment": [0x2000, 0x0001, 0x1FFF, 0x6000], "data_offset": [0x80, 0x40, 0xF0, 0x00]}
    changed = draw(st.sampled_from(["none", "none", "all", *odd]))
    for name, values in odd.items():
        if changed in (name, "all"):
            fields[name] = draw(st.sampled_from(values) | st.integers(0, 0xFFFF if name in ("ethertype", "fragment")
                                                                      else 0xFF))
    body = draw(st.binary(max_size=80))
    options = bytes(4 * max(0, (fields["version_ihl"] & 0x0F) - 5)) if draw(st.booleans()) else b""
    natural = 20 + len(options) + 20 + len(body)
    total = draw(st.just(natural) | st.integers(0, 0xFFFF))
    ip = struct.pack("!BBHHHBBH4s4s", fields["version_ihl"], 0, total, 1, fields["fragment"], 64, fields["protocol"], 0,
                     draw(st.binary(min_size=4, max_size=4)), draw(st.binary(min_size=4, max_size=4)))
    tcp = struct.pack("!HHIIBBHHH", draw(st.sampled_from([11210, 40000]) | st.integers(0, 0xFFFF)),
                      draw(st.integers(0, 0xFFFF)), draw(st.integers(0, 2**32 - 1)), draw(st.integers(0, 2**32 - 1)),
                      fields["data_offset"], draw(st.integers(0, 0xFF)), 0, 0, 0)
    whole = bytes(12) + struct.pack("!H", fields["ethertype"]) + ip + options + tcp + body
    captured = draw(st.just(len(whole)) | st.integers(0, len(whole)) | st.integers(min(54, len(whole)), len(whole)))
    return whole[:captured], len(whole) + draw(st.sampled_from([0, 0, 4]))


@settings(max_examples=2000)
@given(frames())
@example((PLAIN, len(PLAIN)))
@example((PLAIN[:60], len(PLAIN)))
def test_the_fast_path_is_the_general_parser(frame: tuple[bytes, int]) -> None:
    data, wire_length = frame
    assert parse_frame(DLT_EN10MB, data, wire_length, 3, 1.5) == parse_any_frame(DLT_EN10MB, data, wire_length, 3,
                                                                                   1.5)


def test_the_common_frame_parses() -> None:
    """What the fast path gives for the common frame, field by field (so that the two cannot agree on nonsense),
    and the same bytes as raw IP, which the general parser reads."""
    segment = parse_frame(DLT_EN10MB, PLAIN, len(PLAIN), 3, 1.5)
    assert segment == TcpSegment(1.5, 3, ("10.0.0.1", 11210), ("10.0.0.2", 40000), 7, 9, 0x18, b"hello", False, 5, 54)
    raw = parse_frame(LINKTYPE_RAW, PLAIN[14:], len(PLAIN) - 14, 3, 1.5)
    assert isinstance(raw, TcpSegment)
    assert (raw.src, raw.dst, raw.payload, raw.payload_at) == (segment.src, segment.dst, b"hello", 40)
    cut = parse_frame(DLT_EN10MB, PLAIN[:57], len(PLAIN), 3, 1.5)
    assert isinstance(cut, TcpSegment)
    assert (cut.payload, cut.truncated, cut.wire_length) == (b"hel", True, 5)


def pcap_frames(data: bytes) -> list[tuple[int, bytes, int]]:
    """(link type, frame, length on the wire) of every record of a classic pcap file."""
    endian = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack_from(endian + "I", data, 20)[0] & 0x0FFFFFFF
    out, pos = [], 24
    while pos + 16 <= len(data):
        _, _, captured, wire = struct.unpack_from(endian + "IIII", data, pos)
        out.append((linktype, data[pos + 16:pos + 16 + captured], wire))
        pos += 16 + captured
    return out


def test_every_frame_of_captures_of_every_link_type() -> None:
    """The sample, and a session written on every link type, over IPv6, in a VLAN, cut by a snap length."""
    session = session_packets() * 3
    captures = [SAMPLE.read_bytes(), write_capture(session, segment_size=90),
                write_capture(session, segment_size=90, snaplen=70), write_capture(session, vlan=42),
                write_capture(session, client=("fd00::1", 40000), server=("fd00::2", 11210)),
                *(write_capture(session, linktype=linktype) for linktype in (LINKTYPE_RAW, LINKTYPE_LINUX_SLL,
                                                                              LINKTYPE_NULL))]
    fast = 0
    for capture in captures:
        for linktype, data, wire in pcap_frames(capture):
            assert parse_frame(linktype, data, wire, 1, 0.0) == parse_any_frame(linktype, data, wire, 1, 0.0)
            fast += linktype == DLT_EN10MB and data[12:15] == b"\x08\x00\x45"
    assert fast > 100


def test_a_null_link_header_in_either_byte_order() -> None:
    """DLT_NULL's address family is in the capturing host's byte order (a big-endian BSD or macOS host writes
    2 as 00 00 00 02): both orders give the same segments, and IPv6's families (24, 28, 30 by system) too."""
    for client, server in ((("127.0.0.1", 40000), ("127.0.0.1", 11210)), (("::1", 40000), ("::1", 11210))):
        frames = pcap_frames(write_capture(session_packets(), segment_size=90, linktype=LINKTYPE_NULL,
                                           client=client, server=server))
        for _, data, wire in frames:
            family = struct.unpack_from("<I", data)[0]
            for written in {family, 24, 28, 30} if family != 2 else {2}:
                for order in "<>":
                    other = struct.pack(order + "I", written) + data[4:]
                    segment = parse_any_frame(LINKTYPE_NULL, other, wire, 1, 0.0)
                    assert isinstance(segment, TcpSegment)
                    assert segment == parse_any_frame(LINKTYPE_NULL, data, wire, 1, 0.0)
