"""What hostile, unauthenticated clients cost ``dcpctl serve`` (issue 17, item 10).

    python benchmarks/bench_hostile_serve.py [--seconds 10] [--connections 20]

Two attacks, each against a fresh ``dcpctl serve --port 0``:

- *pipeline*: one client sends GET_ERROR_MAP requests as fast as it can for ``--seconds`` and never reads a
  reply. Every second the server's RSS is sampled; at the end a second client bootstraps (HELLO, PLAIN,
  SELECT_BUCKET, GET_CLUSTER_CONFIG) and its time is printed.
- *big bodies*: ``--connections`` clients each announce a 22 MiB body before SASL and send up to 22 MiB of
  it. Printed: the server's RSS after them, and how many were disconnected before their body was sent.

Peak RSS is the server's VmHWM (read from /proc), so Linux only. Each attack is bounded by its own
deadline; the whole run takes well under a minute with the defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench_serve import request

from dcpctl.dcp.sasl import plain_message
from dcpctl.protocol.encode import encode
from dcpctl.protocol.framer import Framer

BIG_BODY = 22 * 1024 * 1024
BOOTSTRAP_DEADLINE = 10.0


def start(*args: str) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen([sys.executable, "-m", "dcpctl", "serve", "--port", "0", "--vbuckets", "64", *args],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    port = 0
    for line in process.stdout:
        found = re.search(r"listening on [^ ]+:(\d+)", line)
        if found:
            port = int(found.group(1))
        if "vbuckets" in line:
            return process, port
    raise RuntimeError("dcpctl serve did not start")


def memory(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) in bytes."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def bootstrap(port: int) -> float:
    """Seconds a well-behaved client takes from connect to the cluster map (inf: it did not get there)."""
    started = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=BOOTSTRAP_DEADLINE) as sock:
            framer = Framer()
            request(sock, framer, opcode="HELLO", key="bench", features=["Xerror", "JSON"])
            request(sock, framer, opcode="SASL_AUTH", key="PLAIN",
                    value=plain_message("Administrator", "password").hex(), value_encoding="hex")
            request(sock, framer, opcode="SELECT_BUCKET", key="default")
            reply = request(sock, framer, opcode="GET_CLUSTER_CONFIG")
            assert reply["status"] == "Success"
    except (OSError, ConnectionError):
        return float("inf")
    return time.perf_counter() - started


def pipeline(seconds: float) -> None:
    process, port = start()
    try:
        rss0, _ = memory(process.pid)
        batch = encode({"magic": "ClientRequest", "opcode": "GET_ERROR_MAP", "opaque": 1, "error_map_version": 2},
                       fix_lengths=True) * 2048
        stop = threading.Event()
        sent = [0]

        def attack() -> None:
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.settimeout(0.5)
                while not stop.is_set():
                    try:
                        sent[0] += sock.send(batch)
                    except TimeoutError:
                        continue  # the server stopped reading: the attack's send blocks
                    except OSError:
                        return

        thread = threading.Thread(target=attack, daemon=True)
        thread.start()
        samples = []
        for _ in range(int(seconds)):
            time.sleep(1)
            samples.append(memory(process.pid)[0])
        took = bootstrap(port)
        stop.set()
        thread.join(2)
        _, peak = memory(process.pid)
        print(f"pipeline: {seconds:.0f} s of GET_ERROR_MAP never read, {sent[0] / 1e6:.1f} MB of requests accepted "
              f"by the kernel; RSS {rss0 / 1e6:.0f} MB at start, per second "
              f"{' '.join(f'{s / 1e6:.0f}' for s in samples)} MB, peak {peak / 1e6:.0f} MB; "
              f"another client's bootstrap {took:.3f} s")
    finally:
        process.terminate()
        process.wait(10)


def big_bodies(connections: int) -> None:
    process, port = start()
    try:
        rss0, _ = memory(process.pid)
        header = encode({"magic": "ClientRequest", "opcode": "HELLO", "opaque": 1, "key": "x"}, fix_lengths=True)[:24]
        header = header[:8] + BIG_BODY.to_bytes(4, "big") + header[12:]
        chunk = b"x" * (1 << 20)
        socks = []
        cut = 0
        started = time.perf_counter()
        for _ in range(connections):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.settimeout(2)
            socks.append(sock)
            try:
                sock.sendall(header)
                for _ in range(BIG_BODY // len(chunk)):
                    sock.sendall(chunk)
            except OSError:
                cut += 1
        elapsed = time.perf_counter() - started
        time.sleep(0.5)
        rss, peak = memory(process.pid)
        took = bootstrap(port)
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()
        print(f"big bodies: {connections} connections announcing {BIG_BODY >> 20} MiB before SASL, {elapsed:.1f} s; "
              f"{cut} cut off before their body was sent; RSS {rss0 / 1e6:.0f} MB at start, {rss / 1e6:.0f} MB "
              f"after, peak {peak / 1e6:.0f} MB; another client's bootstrap {took:.3f} s")
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=20)
    args = parser.parse_args()
    pipeline(args.seconds)
    big_bodies(args.connections)


if __name__ == "__main__":
    main()
