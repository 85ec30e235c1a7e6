"""dcpctl capture on the loopback interface: live traffic decoded as it arrives and saved with -w."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from capturekit import session_packets

from dcpctl.exitcode import ExitCode


def _serve_once(listener: socket.socket, reply: bytes) -> None:
    conn, _ = listener.accept()
    with conn:
        conn.recv(65536)
        conn.sendall(reply)
        time.sleep(0.2)


@pytest.mark.skipif(os.geteuid() != 0, reason="live capture needs root (CI runs as root)")
def test_live_capture_decodes_and_writes(tmp_path: Path) -> None:
    out = tmp_path / "live.pcap"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    packets = session_packets()
    client_bytes = b"".join(d for c, d in packets[:4] if c)
    server_bytes = b"".join(d for c, d in packets[:4] if not c)
    proc = subprocess.Popen(
        [sys.executable, "-m", "dcpctl", "capture", "-i", "lo", "-p", str(port), "-c", "4", "-F", "jsonl",
         "-w", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.5)  # let libpcap start
    server = threading.Thread(target=_serve_once, args=(listener, server_bytes))
    server.start()
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.sendall(client_bytes)
        client.recv(65536)
    server.join()
    stdout, stderr = proc.communicate(timeout=60)
    listener.close()
    assert proc.returncode == ExitCode.OK, stderr
    opcodes = [line.split('"opcode":"')[1].split('"')[0] for line in stdout.decode().splitlines()]
    assert opcodes == ["HELLO", "SELECT_BUCKET", "HELLO", "SELECT_BUCKET"]
    assert out.stat().st_size > 24


def test_missing_interface_is_one_line_exit_3() -> None:
    proc = subprocess.run([sys.executable, "-m", "dcpctl", "capture", "-i", "nosuchif0"],
                          capture_output=True, timeout=60, check=False)
    assert proc.returncode == ExitCode.INPUT
    assert proc.stderr.decode().count("\n") == 1
