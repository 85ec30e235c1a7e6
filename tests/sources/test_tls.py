"""TLS recognised on any port by its record layer: a real handshake with openssl s_server, and look-alikes."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from capturekit import session_packets, session_records, write_capture
from servekit import free_port, self_signed

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment
from dcpctl.sources.tls import TLS_PROBE_LENGTH, tls_hello

HTTP_GET = b"GET / HTTP/1.0\r\n\r\n"


def decode(path: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False)
    code = main(["decode", str(path), "-F", "jsonl", *args], env)
    return code, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


def _pump(sock: socket.socket, tls: ssl.SSLObject, outgoing: ssl.MemoryBIO, incoming: ssl.MemoryBIO,
          packets: list[tuple[bool, bytes]]) -> None:
    """Send what the TLS client wrote and read one reply, each recorded as the capture will carry it."""
    sent = outgoing.read()
    if sent:
        packets.append((True, sent))
        sock.sendall(sent)
    received = sock.recv(65536)
    if not received:
        raise ConnectionError("openssl s_server closed the connection")
    packets.append((False, received))
    incoming.write(received)


def tls_conversation(tmp_path: Path, port: int) -> list[tuple[bool, bytes]]:
    """The bytes of a real TLS session with ``openssl s_server -www`` on ``port``, each direction in order:
    a handshake, an HTTP GET and the server's status page (the client side is Python's ssl over memory
    buffers, so every byte on the socket is known)."""
    cert, key = self_signed(tmp_path)
    server = subprocess.Popen([shutil.which("openssl") or "openssl", "s_server", "-accept", str(port), "-cert",
                               str(cert), "-key", str(key), "-www", "-naccept", "1", "-quiet"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        packets: list[tuple[bool, bytes]] = []
        with sock:
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            context = ssl.create_default_context(cafile=str(cert))
            tls = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
            while True:
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    _pump(sock, tls, outgoing, incoming, packets)
            tls.write(HTTP_GET)
            reply = b""
            while b"</HTML>" not in reply.upper():
                try:
                    reply += tls.read(65536)
                except ssl.SSLWantReadError:
                    _pump(sock, tls, outgoing, incoming, packets)
        assert reply.startswith(b"HTTP/1.0 200")
        return packets
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="module")
def conversation(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, list[tuple[bool, bytes]]]:
    port = free_port()
    return port, tls_conversation(tmp_path_factory.mktemp("tls"), port)


@pytest.mark.parametrize("segment_size", [1, 5, 1448])
def test_tls_on_a_decoded_port_is_reported_once_not_skipped(
        tmp_path: Path, conversation: tuple[int, list[tuple[bool, bytes]]], segment_size: int) -> None:
    port, packets = conversation
    assert port != 11207
    path = tmp_path / "tls.pcap"
    path.write_bytes(write_capture(packets, segment_size=segment_size, server=("127.0.0.1", port)))
    code, records, err = decode(path, "--port", str(port))
    assert records == []
    assert "skipped_bytes" not in err
    assert err.count("tls_port") == 1, err
    assert f"127.0.0.1:{port}" in err
    assert "ClientHello" in err
    assert code == ExitCode.OK


def test_tls_is_recognised_by_the_second_core_too(tmp_path: Path,
                                                  conversation: tuple[int, list[tuple[bool, bytes]]]) -> None:
    port, packets = conversation
    path = tmp_path / "tls.pcap"
    path.write_bytes(write_capture(packets, server=("127.0.0.1", port)))
    assert decode(path, "--port", str(port), "--jobs", "2") == decode(path, "--port", str(port))


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_live_capture_of_tls_says_tls(tmp_path: Path) -> None:
    """dcpctl capture on the loopback while openssl s_server and a Python ssl client talk: one tls_port
    notice, live and when the saved frames are decoded."""
    port, saved = free_port(), tmp_path / "live.pcap"
    proc = subprocess.Popen([sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p", str(port), "-F", "jsonl",
                             "-w", str(saved)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    try:
        assert proc.stderr.readline().startswith(b"dcpctl: capturing on lo")  # libpcap has started
        tls_conversation(tmp_path, port)
        time.sleep(1)
    finally:
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.OK, stderr
    assert stdout == b""
    assert stderr.count(b"tls_port") == 1
    assert b"skipped_bytes" not in stderr
    code, records, err = decode(saved, "--port", str(port))
    assert (code, records, err.count("tls_port"), "skipped_bytes" in err) == (ExitCode.OK, [], 1, False)


def test_tls_connection_among_plain_ones(tmp_path: Path, conversation: tuple[int, list[tuple[bool, bytes]]]) -> None:
    """Two connections to the same port, one TLS and one the DCP session: only the TLS one is set aside."""
    port, packets = conversation
    tls = write_capture(packets, server=("127.0.0.1", port), client=("127.0.0.1", 50000))
    plain = write_capture(session_packets(), server=("127.0.0.1", port), client=("127.0.0.1", 50001))
    path = tmp_path / "both.pcap"
    path.write_bytes(tls + plain[24:])  # one file header: the second capture's records follow the first's
    code, records, err = decode(path, "--port", str(port))
    assert len(records) == len(session_records())
    assert "skipped_bytes" not in err
    assert err.count("tls_port") == 1
    assert "127.0.0.1:50000" in err
    assert code == ExitCode.OK


def test_server_hello_alone_is_recognised(tmp_path: Path, conversation: tuple[int, list[tuple[bool, bytes]]]) -> None:
    """A capture that holds only the server's direction still says TLS (ServerHello)."""
    port, packets = conversation
    path = tmp_path / "server.pcap"
    path.write_bytes(write_capture([p for p in packets if not p[0]], server=("127.0.0.1", port)))
    _code, records, err = decode(path, "--port", str(port))
    assert records == []
    assert "skipped_bytes" not in err
    assert err.count("tls_port") == 1
    assert "ServerHello" in err


def test_couchbase_tls_port_is_as_before(tmp_path: Path, conversation: tuple[int, list[tuple[bool, bytes]]]) -> None:
    _port, packets = conversation
    path = tmp_path / "11207.pcap"
    path.write_bytes(write_capture(packets, server=("127.0.0.1", 11207)))
    _code, records, err = decode(path)
    assert records == []
    assert err.count("tls_port") == 1
    assert "(port 11207)" in err


@pytest.mark.parametrize(("start", "tls"), [
    (b"\x16\x03\x01\x00\x30\x01", True),  # a ClientHello's record header, whatever follows
    (b"\x16\x03\x03\x01\x00\x02", True),  # a ServerHello's
    (b"\x16\x03\x01\x40\x01\x01", False),  # a record longer than TLS allows (2^14)
    (b"\x16\x03\x05\x00\x30\x01", False),  # no such TLS version
    (b"\x16\x03\x01\x00\x30\x0b", False),  # a handshake, but not a hello (Certificate)
    (b"\x17\x03\x03\x00\x30\x01", False),  # application data: not the start of a TLS connection
    (b"\x16\x03\x01\x00\x03\x01", False),  # shorter than a handshake header
    (b"\x16\x03", None),  # not enough bytes to say
])
def test_record_header_recognition(start: bytes, tls: bool | None) -> None:
    found = tls_hello(start)
    assert (None if found is None else bool(found)) is tls
    assert len(start) == TLS_PROBE_LENGTH or found is None


@pytest.mark.parametrize("stream", [
    b"\x16\x03",  # the start of a record header, then the connection ends
    b"\x16\x03\x01\x00",
    b"\x16\x03\x01\x40\x01\x01" + bytes(64),  # too long for TLS: garbage, as any other
    b"\x16\x03\x04\x00\x30\x0b" + bytes(64),  # not a hello
])
def test_look_alikes_are_not_tls(tmp_path: Path, stream: bytes) -> None:
    """A stream that starts like TLS but is not: no crash, no TLS notice, its bytes skipped as garbage."""
    path = tmp_path / "fake.pcap"
    path.write_bytes(write_capture([(True, stream), *session_packets()], segment_size=3,
                                   server=("127.0.0.1", 18091)))
    code, records, err = decode(path, "--port", "18091")
    assert "tls_port" not in err
    assert "Traceback" not in err
    assert "skipped_bytes" in err
    assert code != ExitCode.OK or records


def test_hello_header_then_memcached_is_called_tls(tmp_path: Path) -> None:
    """A stream whose first six bytes are a ClientHello record header is taken as TLS, even if memcached packets
    follow: one notice, nothing decoded, no traceback."""
    path = tmp_path / "hostile.pcap"
    packets = [(True, b"\x16\x03\x01\x00\x30\x01"), *session_packets()]
    path.write_bytes(write_capture(packets, segment_size=7, server=("127.0.0.1", 443)))
    code, records, err = decode(path, "--port", "443")
    assert records == []
    assert err.count("tls_port") == 1
    assert code == ExitCode.OK
