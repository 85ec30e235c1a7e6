"""A capture whose server is not on a decoded port: decode says which port carries the protocol and
suggests --port, in both decode paths and both file readers (real runs of ``python -m dcpctl``)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation
from tests.capturekit import session_packets, write_capture

ROOT = Path(__file__).resolve().parents[2]
HINT = ("dcpctl: protocol_on_other_port: no traffic on port 11210; port {port} (22 packets) carries what looks "
        "like the memcached binary protocol: try --port {port}\n")


def decode(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dcpctl", "decode", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60, check=False)


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize(("server_port", "handshake", "snaplen"), [
    (12000, True, 262144),
    (60000, False, 262144),  # no SYN, and the server's port above the client's: told by the packets' roles
    (12000, False, 1500),  # a short snap length: read by pcapchunks, not libpcap
])
def test_the_port_that_carries_the_protocol_is_named(tmp_path: Path, jobs: str, server_port: int, handshake: bool,
                                                      snaplen: int) -> None:
    """It was silent empty output, exit 0."""
    capture = tmp_path / "other-port.pcap"
    capture.write_bytes(write_capture(session_packets(), server=("127.0.0.1", server_port), handshake=handshake,
                                      snaplen=snaplen))
    done = decode("-j", jobs, "-F", "jsonl", str(capture))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert done.stderr == HINT.format(port=server_port)
    suggested = decode("-j", jobs, "-F", "jsonl", "--port", str(server_port), str(capture))
    assert suggested.returncode == 0, suggested.stderr
    assert suggested.stderr == ""
    expected = decode("-F", "jsonl", str(ROOT / "samples" / "dcp-session.pcap")).stdout.splitlines()
    got = suggested.stdout.splitlines()
    assert len(got) == len(expected) == 22
    assert [json.loads(line)["opcode"] for line in got] == [json.loads(line)["opcode"] for line in expected]


def test_no_hint_when_the_decoded_port_has_traffic() -> None:
    done = decode("-F", "jsonl", str(ROOT / "samples" / "dcp-session.pcap"))
    assert done.returncode == 0
    assert done.stderr == ""


def test_other_traffic_is_not_taken_for_the_protocol(tmp_path: Path) -> None:
    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out), ("127.0.0.1", 50000), ("127.0.0.1", 8080))
    conversation.handshake()
    for _ in range(50):
        conversation.send(True, b"GET / HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n")
        conversation.send(False, bytes(range(256)) * 4)
    conversation.close()
    capture = tmp_path / "http.pcap"
    capture.write_bytes(out.getvalue())
    done = decode(str(capture))
    assert done.returncode == 0
    assert done.stdout == ""
    assert done.stderr == ""


def test_the_busiest_server_ports_are_named_first(tmp_path: Path) -> None:
    out = io.BytesIO()
    writer = PcapWriter(out)
    for client_port, server_port, times in ((50000, 12001, 1), (50001, 12000, 3), (50002, 12000, 3)):
        conversation = TcpConversation(writer, ("127.0.0.1", client_port), ("127.0.0.1", server_port))
        for _ in range(times):
            for from_client, data in session_packets():
                conversation.send(from_client, data)
        conversation.close()
    capture = tmp_path / "two-servers.pcap"
    capture.write_bytes(out.getvalue())
    done = decode(str(capture))
    assert done.stderr == ("dcpctl: protocol_on_other_port: no traffic on port 11210; ports 12000 (132 packets) "
                           "and 12001 (22 packets) carry what looks like the memcached binary protocol: try "
                           "--port 12000 --port 12001\n")
