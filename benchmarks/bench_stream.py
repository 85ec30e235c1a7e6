"""``dcpctl stream`` from ``dcpctl serve`` over loopback, next to a raw socket drain of the same stream.

    python benchmarks/bench_stream.py [--items 1000000] [--vbuckets 8] [--value-size 100]

The server encodes its items on the first stream of them (a warm-up for each stream shape), so every
measured run reads encoded items at the server's full speed. Three consumers of the whole bucket up to its high seqnos:
the raw drain of ``bench_serve.py`` (the ceiling: receives and counts only), ``dcpctl stream --until now
--summary`` (counts per vbucket, no per-message output), and ``dcpctl stream --until now --format jsonl
> /dev/null`` (every message decoded, checked and written as a JSON line).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_serve import drain, serve


def timed(args: list[str]) -> float:
    started = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        subprocess.run(args, stdout=sink, stderr=subprocess.DEVNULL, check=True,
                       env={**os.environ, "DCPCTL_PASSWORD": "password"})
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--vbuckets", type=int, default=8)
    parser.add_argument("--value-size", type=int, default=100)
    args = parser.parse_args()
    server, port = serve(args.items, args.vbuckets, args.value_size)
    try:
        target = f"127.0.0.1:{port}"
        # warm-up: the server encodes the items once per stream shape (the drain asks without collections,
        # dcpctl with them)
        drain(port, args.vbuckets)
        timed([sys.executable, "-m", "dcpctl", "stream", target, "--until", "now", "--summary"])
        _, elapsed = drain(port, args.vbuckets)
        print(f"raw socket drain: {elapsed:.2f} s, {args.items / elapsed:,.0f} mutations/s")
        for name, extra in (("dcpctl stream --until now --summary", ["--summary"]),
                            ("dcpctl stream --until now --format jsonl > /dev/null", ["--format", "jsonl"])):
            elapsed = timed([sys.executable, "-m", "dcpctl", "stream", target, "--until", "now", *extra])
            print(f"{name}: {elapsed:.2f} s (process start and bootstrap included), "
                  f"{args.items / elapsed:,.0f} mutations/s")
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
