"""How fast ``dcpctl serve`` pushes mutations over loopback to a raw socket drain.

    python benchmarks/bench_serve.py [--items 2000000] [--vbuckets 8] [--value-size 100] [--runs 3]

The drain negotiates like a DCP client (HELLO, PLAIN, SELECT_BUCKET, DCP_OPEN, enable_noop), asks every
vbucket from 0 to its high seqno, then only receives into a preallocated buffer and counts STREAM_END
headers (C-speed ``bytes.count``; generated values are ASCII, so the pattern cannot appear inside them).
The first run encodes the items (the store's images are built lazily); later runs stream the encoded
images, which is what a long-running server does for every consumer after the first.
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import sys
import time

from dcpctl.dcp.sasl import plain_message
from dcpctl.protocol.encode import encode
from dcpctl.protocol.framer import Frame, Framer
from dcpctl.protocol.message import decode
from dcpctl.render.record import record as record_of

STREAM_END = bytes([0x80, 0x55, 0x00, 0x00, 0x04])


def request(sock: socket.socket, framer: Framer, **record: object) -> dict[str, object]:
    record.setdefault("magic", "ClientRequest")
    record.setdefault("opaque", 1)
    sock.sendall(encode(record, fix_lengths=True))
    while True:
        for event in framer.events():
            assert isinstance(event, Frame)
            return record_of(decode(event.data))
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        framer.feed(data)


def drain(port: int, vbuckets: int) -> tuple[int, float]:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    framer = Framer()
    request(sock, framer, opcode="HELLO", key="bench", features=["Xerror", "JSON"])
    request(sock, framer, opcode="SASL_AUTH", key="PLAIN", value=plain_message("Administrator", "password").hex(),
            value_encoding="hex")
    request(sock, framer, opcode="SELECT_BUCKET", key="default")
    request(sock, framer, opcode="DCP_OPEN", key="bench", seqno=0, flags=1)
    request(sock, framer, opcode="DCP_CONTROL", key="enable_noop", value="true")
    seqnos = request(sock, framer, opcode="GET_ALL_VB_SEQNOS")["vbucket_seqnos"]
    assert isinstance(seqnos, list)
    started = time.perf_counter()
    for entry in seqnos:
        sock.sendall(encode({"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": entry["vbucket"],
                             "opaque": 1000 + entry["vbucket"], "flags": 0, "reserved": 0, "start_seqno": 0,
                             "end_seqno": entry["seqno"], "vbucket_uuid": 0, "snap_start_seqno": 0,
                             "snap_end_seqno": 0}, fix_lengths=True))
    buffer = bytearray(8 << 20)
    view = memoryview(buffer)
    total = ends = 0
    tail = b""
    while ends < vbuckets:
        n = sock.recv_into(view)
        if not n:
            break
        total += n
        chunk = tail + bytes(view[:n])
        ends += chunk.count(STREAM_END)
        tail = chunk[-4:]
    elapsed = time.perf_counter() - started
    sock.close()
    return total, elapsed


def serve(items: int, vbuckets: int, value_size: int) -> tuple[subprocess.Popen[str], int]:
    """``dcpctl serve`` on a free port with these items, once it listens: the process and its port."""
    server = subprocess.Popen([sys.executable, "-m", "dcpctl", "serve", "--port", "0", "--items", str(items),
                               "--vbuckets", str(vbuckets), "--value-size", str(value_size)],
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    port = int(re.search(r":(\d+)", server.stdout.readline()).group(1))  # type: ignore[union-attr]
    server.stdout.readline()
    return server, port


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=2_000_000)
    parser.add_argument("--vbuckets", type=int, default=8)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server, port = serve(args.items, args.vbuckets, args.value_size)
    try:
        for run in range(1, args.runs + 1):
            total, elapsed = drain(port, args.vbuckets)
            print(f"run {run}{' (encodes the items)' if run == 1 else ''}: {args.items:,} items, {total:,} bytes "
                  f"in {elapsed:.2f} s: {args.items / elapsed:,.0f} mutations/s, {total / elapsed / 1e6:,.0f} MB/s")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
