"""Building test captures with dcpctl's own encoder and pcap writer."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from dcpctl.protocol.encode import encode
from dcpctl.sources.pcap import open_offline
from dcpctl.sources.pcapwriter import LINKTYPE_ETHERNET, PcapWriter, TcpConversation

ROOT = Path(__file__).resolve().parents[1]
SESSION_JSONL = ROOT / "samples" / "dcp-session.jsonl"
SERVER_PUSHED = {"DCP_SNAPSHOT_MARKER", "DCP_MUTATION", "DCP_DELETION", "DCP_STREAM_END", "DCP_SYSTEM_EVENT",
                 "DCP_SEQNO_ADVANCED", "DCP_EXPIRATION"}


def from_client(record: dict[str, Any]) -> bool:
    response = record["magic"] in ("ClientResponse", "AltClientResponse")
    pushed = record["opcode"] in SERVER_PUSHED or (record["opcode"] == "DCP_NOOP" and not response)
    return (not response and not pushed) or (response and record["opcode"] == "DCP_NOOP")


def session_records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SESSION_JSONL.read_text().splitlines() if line.strip()]


def session_packets() -> list[tuple[bool, bytes]]:
    return [(from_client(r), encode(r)) for r in session_records()]


def write_capture(packets: list[tuple[bool, bytes]], segment_size: int = 1448, linktype: int = LINKTYPE_ETHERNET,
                  client: tuple[str, int] = ("127.0.0.1", 50123), server: tuple[str, int] = ("127.0.0.1", 11210),
                  handshake: bool = True, vlan: int | None = None, snaplen: int = 262144) -> bytes:
    out = io.BytesIO()
    writer = PcapWriter(out, linktype, snaplen)
    conversation = TcpConversation(writer, client, server, vlan=vlan)
    if handshake:
        conversation.handshake()
    for client_side, data in packets:
        conversation.send(client_side, data, segment_size)
    conversation.close()
    return out.getvalue()


def within_size(path: Path, size: int) -> bool:
    """Whether a pcap file -C wrote keeps to its size: it does, or holds one record that alone exceeds it
    (loopback segments reach 64 KiB), as tcpdump -C writes; and it ends on a whole record."""
    data = path.read_bytes()
    at, records = 24, 0
    while at + 16 <= len(data):
        at += 16 + int.from_bytes(data[at + 8:at + 12], "little")
        records += 1
    return at == len(data) and (len(data) <= size or records == 1)


def frames_in(path: Path) -> list[tuple[float, bytes]]:
    """A capture file's frames as libpcap reads them: (time, bytes)."""
    reader, read = open_offline(str(path)), []
    while True:
        header, data = reader.next()
        if header is None:
            return read
        seconds, micros = header.getts()
        read.append((seconds + micros / 1_000_000, data))
