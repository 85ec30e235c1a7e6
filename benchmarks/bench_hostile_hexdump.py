"""Time and peak memory of the annotated hexdump (and pretty) on issue 17's hostile packets (item 14).

    python benchmarks/bench_hostile_hexdump.py [--sizes 1,20] [--keys 2200000] [--no-tshark]

Inputs, built with dcpctl's own encoder in a temporary directory:
  mutation N MiB   one DCP_MUTATION whose value is N MiB (the annotated dump cost about 1.35 KB per byte)
  stream-req keys  one DCP_STREAM_REQ whose JSON value has K unknown keys (2.2M keys: a 22 MiB value)
  hello features   one HELLO with a 4 MiB feature list (2M entries of a declared value grammar)
Each runs as `dcpctl hexdump [-F pretty] --max-body-length 64MiB FILE > /dev/null` in a process of its
own; reported: wall time and the child's peak RSS. With tshark installed, the same packet in a one-packet
capture is dissected by `tshark -r CAP -V -x` (its details and hex dump) side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dcpctl.protocol.encode import encode
from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation

MUTATION = {"magic": "ClientRequest", "opcode": "DCP_MUTATION", "vbucket": 7, "opaque": 1, "by_seqno": 1,
            "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0, "key": "big"}
STREAM_REQ = {"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": 0, "opaque": 1, "flags": 0,
              "reserved": 0, "start_seqno": 0, "end_seqno": 2**64 - 1, "vbucket_uuid": 0, "snap_start_seqno": 0,
              "snap_end_seqno": 0}
# the stream request's value is a little over the default body limit: raised, so it is decoded, not skipped
BODY_LIMIT = ("--max-body-length", str(64 << 20))


def inputs(sizes: list[int], keys: int) -> dict[str, bytes]:
    out = {f"mutation {size} MiB": encode({**MUTATION, "value": "x" * (size << 20)}, fix_lengths=True)
           for size in sizes}
    value = json.dumps({f"{i:x}": 1 for i in range(keys)}, separators=(",", ":"))
    out[f"stream-req {keys} keys ({len(value) >> 20} MiB)"] = encode({**STREAM_REQ, "value": value}, fix_lengths=True)
    out["hello 2M features (4 MiB)"] = encode({"magic": "ClientRequest", "opcode": "HELLO", "key": "x",
                                               "features": [7] * (2 << 20)}, fix_lengths=True)
    return out


def make(directory: Path, sizes: list[int], keys: int, tshark: bool) -> list[str]:
    """Writes each input as NAME.bin (and NAME.pcap for tshark); returns the names, in order."""
    names = []
    for index, (name, packet) in enumerate(inputs(sizes, keys).items()):
        names.append(name)
        (directory / f"{index}.bin").write_bytes(packet)
        if tshark:
            with (directory / f"{index}.pcap").open("wb") as stream:
                conversation = TcpConversation(PcapWriter(stream))
                conversation.handshake()
                conversation.send(from_client=True, payload=packet)
                conversation.close()
    (directory / "names.json").write_text(json.dumps(names))
    return names


def measure(command: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MB, exit code) of one child, its output thrown away."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss / 1024, child.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,20", help="mutation value sizes in MiB")
    parser.add_argument("--keys", type=int, default=2_200_000)
    parser.add_argument("--no-tshark", action="store_true")
    parser.add_argument("--make", metavar="DIR", help=argparse.SUPPRESS)  # the inputs' own process
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    tshark = None if args.no_tshark else shutil.which("tshark")
    if args.make:
        make(Path(args.make), sizes, args.keys, tshark is not None)
        return
    with tempfile.TemporaryDirectory() as tmp:
        # made in a process of its own: a child's peak RSS counts the memory it was forked with
        subprocess.run([sys.executable, __file__, "--make", tmp, "--sizes", args.sizes, "--keys", str(args.keys),
                        *(["--no-tshark"] if tshark is None else [])], check=True)
        names = json.loads((Path(tmp) / "names.json").read_text())
        print(f"{'input':<36} {'command':<26} {'wall s':>8} {'peak MB':>8} {'exit':>5}")
        for index, name in enumerate(names):
            path = Path(tmp) / f"{index}.bin"
            for label, extra in (("hexdump", []), ("hexdump -F pretty", ["-F", "pretty"])):
                wall, peak, code = measure([sys.executable, "-m", "dcpctl", "hexdump", *extra, *BODY_LIMIT,
                                            str(path)])
                print(f"{name:<36} {label:<26} {wall:>8.2f} {peak:>8.0f} {code:>5}")
            if tshark:
                wall, peak, code = measure([tshark, "-r", str(Path(tmp) / f"{index}.pcap"), "-V", "-x"])
                print(f"{name:<36} {'tshark -V -x':<26} {wall:>8.2f} {peak:>8.0f} {code:>5}")


if __name__ == "__main__":
    main()
