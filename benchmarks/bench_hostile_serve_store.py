"""What a client's documents cost ``dcpctl serve``'s store (issue 16, item 6).

    python benchmarks/bench_hostile_serve_store.py [--items 1000000] [--seconds 10] [--tree DIR]

Two cases, each against a fresh ``dcpctl serve --port 0 --vbuckets 1``:

- *first read*: ``--items`` generated items in one vbucket; a client bootstraps and GETs one key. Printed:
  the GET's wall time (the vbucket's first document operation indexes its generated items) and the
  server's peak RSS.
- *write loop*: a client SETs 1 KiB values under new keys for up to ``--seconds``, with ``--memory-quota``
  64 MiB (none with ``--tree``: older code has no such option). Printed: writes accepted before the first
  Enomem, the time that took, and the peak RSS.

``--tree`` runs the same cases with another checkout's code (its root on PYTHONPATH), to compare. Peak RSS is
the server's VmHWM (read from /proc), so Linux only; each case is bounded by its own deadline.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

from bench_hostile_serve import memory, start
from bench_serve import request

from dcpctl.dcp.sasl import plain_message
from dcpctl.protocol.framer import Framer

QUOTA = 64 * 1024 * 1024
VALUE = "x" * 1024


def client(port: int) -> tuple[socket.socket, Framer]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    framer = Framer()
    request(sock, framer, opcode="HELLO", key="bench", features=["Xerror", "JSON"])
    request(sock, framer, opcode="SASL_AUTH", key="PLAIN", value=plain_message("Administrator", "password").hex(),
            value_encoding="hex")
    request(sock, framer, opcode="SELECT_BUCKET", key="default")
    return sock, framer


def first_read(items: int) -> None:
    process, port = start("--vbuckets", "1", "--items", str(items))
    try:
        sock, framer = client(port)
        started = time.perf_counter()
        reply = request(sock, framer, opcode="GET", vbucket=0, key="doc-0000001")
        took = time.perf_counter() - started
        _, peak = memory(process.pid)
        print(f"first read, {items:,} items in one vbucket: {reply['status']} in {took:.2f} s, "
              f"peak RSS {peak / 1e6:.0f} MB")
    finally:
        process.terminate()
        process.wait(10)


def write_loop(seconds: float, quota: bool) -> None:
    process, port = start("--vbuckets", "1", "--items", "0", *(("--memory-quota", str(QUOTA)) if quota else ()))
    try:
        sock, framer = client(port)
        started = time.perf_counter()
        accepted = 0
        status = "Success"
        while status == "Success" and time.perf_counter() - started < seconds:
            status = str(request(sock, framer, opcode="SET", vbucket=0, key=f"w-{accepted}", value=VALUE, flags=0,
                                 expiration=0)["status"])
            accepted += status == "Success"
        took = time.perf_counter() - started
        _, peak = memory(process.pid)
        print(f"write loop, 1 KiB values, {f'quota {QUOTA >> 20} MiB' if quota else 'no quota'}: {accepted:,} "
              f"accepted in {took:.1f} s, then {status}; peak RSS {peak / 1e6:.0f} MB")
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tree", type=Path, help="another checkout whose code to run the server with")
    args = parser.parse_args()
    if args.tree is not None:
        os.environ["PYTHONPATH"] = str(args.tree.resolve())
    print(f"server code: {os.environ.get('PYTHONPATH') or 'installed'}", file=sys.stderr)
    first_read(args.items)
    write_loop(args.seconds, quota=args.tree is None)  # an older tree has no --memory-quota


if __name__ == "__main__":
    main()
