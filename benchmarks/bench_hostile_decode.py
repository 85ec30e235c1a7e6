"""dcpctl decode on hostile captures (issue 17, items 11 and 12): wall time and peak RSS, tshark side by side.

    python benchmarks/bench_hostile_decode.py [--scale S] [--only NAME,...] [--no-tshark] [--redact] [--keep DIR]
                                              [--limit SECONDS]

Each capture is written by dcpctl's own pcap writer, at two sizes (S and 2*S times the base size), so that
linear time and bounded memory show as a doubling of time and a flat RSS:
  syn_flood     SYNs from distinct clients, never closed (base 200,000 connections)
  closed        connections opened, one NOOP each way, closed (base 25,000)
  out_of_order  one connection, 100-byte segments sent last first (base 20,000 segments)
  document_1448 one legal 20 MiB DCP_MUTATION in 1448-byte segments (base: 1 document)
  document_536  the same in 536-byte segments
  garbage       bytes that never frame, from the server (base 50 MiB): random and 0x80 runs, by turns
  json_names    mutations whose JSON documents hold 1,000 names never seen before each (base 2,000 documents)
  shapes        responses of header shapes never seen before each (opcode and status; base 20,000 packets):
                readers are compiled for the first 1,024 shapes, the rest are interpreted
dcpctl runs as a user runs it: ``dcpctl decode -F jsonl FILE > /dev/null`` (--jobs 1, then --jobs 2);
tshark as its users run it: ``tshark -r FILE -T fields -e couchbase.opcode > /dev/null``. With --redact,
``dcpctl redact FILE -o OUT`` too, and with ``--no-keep-json-names`` (the salt from the environment).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from dcpctl.protocol.encode import encode
from dcpctl.sources.pcapwriter import SYN, PcapWriter, TcpConversation

MIB = 1 << 20


def _noop(opaque: int, response: bool = False) -> bytes:
    record = {"magic": "ClientResponse" if response else "ClientRequest", "opcode": "DCP_NOOP", "opaque": opaque}
    if response:
        record["status"] = "Success"
    return encode(record)


def syn_flood(path: Path, n: int) -> None:
    """``n`` SYNs, each from its own client address and port, none ever answered."""
    with path.open("wb") as out:
        writer = PcapWriter(out)
        conversation = TcpConversation(writer, ("10.0.0.1", 40000))
        template = conversation._frame(from_client=True, seq=1, ack=0, flags=SYN, payload=b"")
        head, tail = template[:26], template[38:]  # Ethernet + IPv4 up to the addresses; TCP after the ports
        for index in range(n):
            client = struct.pack("!BBBB", 10, (index >> 16) & 0xFF, (index >> 8) & 0xFF, 1) + bytes([127, 0, 0, 1])
            ports = struct.pack("!HH", 1024 + index % 60000, 11210)
            writer.write(1_700_000_000 + index * 1e-5, head + client + ports + tail)


def closed(path: Path, n: int) -> None:
    """``n`` short connections, one after the other: handshake, a NOOP each way, FIN both ways."""
    with path.open("wb") as out:
        writer = PcapWriter(out)
        for index in range(n):
            conversation = TcpConversation(writer, (f"10.{(index >> 16) & 0xFF}.{(index >> 8) & 0xFF}.2",
                                                    1024 + index % 60000), ts=1_700_000_000 + index * 1e-3)
            conversation.handshake()
            conversation.send(from_client=False, payload=_noop(index))
            conversation.send(from_client=True, payload=_noop(index, response=True))
            conversation.close()


def out_of_order(path: Path, n: int) -> None:
    """One connection whose server sends ``n`` 100-byte segments of NOOPs, the last first."""
    data = b"".join(_noop(i) for i in range(n * 100 // 24 + 1))[:n * 100]
    with path.open("wb") as out:
        conversation = TcpConversation(PcapWriter(out))
        conversation.handshake()
        for index in reversed(range(n)):
            conversation.segment(from_client=False, payload=data[index * 100:(index + 1) * 100], offset=index * 100)
        conversation.close()


def document(path: Path, count: int, segment_size: int) -> None:
    """``count`` legal 20 MiB DCP_MUTATIONs from the server, in ``segment_size``-byte segments."""
    mutation = encode({"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 0, "opaque": 1, "by_seqno": 1,
                       "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0,
                       "datatype": 0, "key": "big", "value": "x" * (20 * MIB)})
    with path.open("wb") as out:
        conversation = TcpConversation(PcapWriter(out))
        conversation.handshake()
        for _ in range(count):
            conversation.send(from_client=False, payload=mutation, segment_size=segment_size)
        conversation.close()


def garbage(path: Path, size: int) -> None:
    """``size`` bytes that never frame, from the server: half random, half 0x80 (a magic at every byte)."""
    rng = random.Random(17)
    with path.open("wb") as out:
        conversation = TcpConversation(PcapWriter(out))
        conversation.handshake()
        block = bytes(rng.getrandbits(8) for _ in range(MIB))
        for index in range(size // MIB):
            conversation.send(from_client=False, payload=block if index % 2 == 0 else b"\x80" * MIB)
        conversation.close()


def json_names(path: Path, n: int) -> None:
    """``n`` mutations, each a JSON document of 1,000 names that no other document has."""
    with path.open("wb") as out:
        conversation = TcpConversation(PcapWriter(out))
        conversation.handshake()
        for index in range(n):
            document = "{" + ",".join(f'"n{index}_{name}":{name}' for name in range(1000)) + "}"
            conversation.send(from_client=False, payload=encode({
                "magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 0, "opaque": 1, "by_seqno": index + 1,
                "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0, "datatype": 1,
                "key": f"doc{index}", "value": document}))
        conversation.close()


def shapes(path: Path, n: int) -> None:
    """``n`` header-only responses from the server, each with an opcode and status no other one has."""
    with path.open("wb") as out:
        conversation = TcpConversation(PcapWriter(out))
        conversation.handshake()
        packets = b"".join(struct.pack(">BBHBBHIIQ", 0x81, index >> 16, 0, 0, 0, index & 0xFFFF, 0, index, 0)
                           for index in range(n))
        conversation.send(from_client=False, payload=packets)
        conversation.close()


CASES: dict[str, tuple[Callable[[Path, int], None], int]] = {
    "syn_flood": (syn_flood, 200_000),
    "closed": (closed, 25_000),
    "out_of_order": (out_of_order, 20_000),
    "document_1448": (lambda p, n: document(p, n, 1448), 1),
    "document_536": (lambda p, n: document(p, n, 536), 1),
    "garbage": (garbage, 50 * MIB),
    "json_names": (json_names, 2_000),
    "shapes": (shapes, 20_000),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--no-tshark", action="store_true")
    parser.add_argument("--redact", action="store_true", help="dcpctl redact too, with names kept and hashed")
    parser.add_argument("--limit", type=float, default=120.0, help="seconds after which a command is stopped")
    parser.add_argument("--keep", type=Path, default=None, help="write the captures here and keep them")
    args = parser.parse_args()
    os.environ.setdefault("DCPCTL_REDACT_SALT", "a benchmark's salt")  # no random salt line per run
    tshark = None if args.no_tshark else shutil.which("tshark")
    directory = args.keep or Path(tempfile.mkdtemp(prefix="hostile-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"{'case':<14} {'size':>9} {'MB':>7} {'command':<16} {'wall s':>7} {'peak MB':>8} exit")
    try:
        for name in args.only.split(","):
            make, base = CASES[name]
            for factor in (1, 2):
                size = max(1, round(base * args.scale * factor))
                path = directory / f"{name}-{size}.pcap"
                if not path.exists():
                    make(path, size)
                megabytes = path.stat().st_size / MIB
                commands = {f"dcpctl -j{jobs}": [sys.executable, "-m", "dcpctl", "decode", "-F", "jsonl", "-j",
                                                 str(jobs), str(path)] for jobs in (1, 2)}
                if args.redact:
                    redacted = str(directory / "redacted.pcap")
                    commands["redact"] = [sys.executable, "-m", "dcpctl", "redact", str(path), "-o", redacted]
                    commands["redact names"] = [*commands["redact"], "--no-keep-json-names"]
                if tshark is not None:
                    commands["tshark"] = [tshark, "-r", str(path), "-T", "fields", "-e", "couchbase.opcode"]
                for label, command in commands.items():
                    wall, peak, code = measure_isolated(command, args.limit)
                    print(f"{name:<14} {size:>9} {megabytes:>7.1f} {label:<16} {wall:>7.2f} {peak:>8.0f} {code}",
                          flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(directory)


def measure_isolated(command: list[str], limit: float) -> tuple[float, float, str]:
    """Wall time, peak RSS (MB) and exit code of ``command`` run from a fresh child Python, so that the
    peak is its own; a command still running after ``limit`` seconds is stopped ("stopped")."""
    script = ("import resource,subprocess,sys,time;s=time.perf_counter()\n"
              "try: c=subprocess.run(sys.argv[2:],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL,"
              "timeout=float(sys.argv[1])).returncode\n"
              "except subprocess.TimeoutExpired: c='stopped'\n"
              "print(time.perf_counter()-s,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024,c)")
    out = subprocess.run([sys.executable, "-c", script, str(limit), *command], capture_output=True, text=True,
                         check=True)
    wall, peak, code = out.stdout.split()
    return float(wall), float(peak), code


if __name__ == "__main__":
    main()
