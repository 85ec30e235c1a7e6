"""dcpctl stream against a hostile data node: memory under a flood, time under a huge SCRAM iteration count.

    python benchmarks/bench_hostile_client.py [--runs R]

The hostile node is tests/hostilekit.py's socket server on 127.0.0.1. Cases:
- flood: instead of answering SASL_LIST_MECHS, the node sends DCP_NOOPs as fast as the client reads them
  (issue 17: 4 GB in 11 s before the queue was capped); the client must give up (exit 8) in bounded memory;
- scram-N: the node offers SCRAM-SHA512 and asks for N PBKDF2 iterations: 15000 (Couchbase's default),
  the bound (MAX_SCRAM_ITERATIONS, run in full: the most time a server can make the client spend) and
  2000000000 (issue 17: ran past --timeout; now refused before PBKDF2 starts). Each ends in exit 7 (the
  node cannot prove it knows the password).
Each case runs ``python -m dcpctl stream`` R times in a subprocess; prints the median wall time, the peak
RSS (from wait4) and the exit code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hostilekit import Script, flood, hostile, scram_challenge

from dcpctl.dcp.sasl import MAX_SCRAM_ITERATIONS


def flooding(request: object, sock: object) -> bytes | None:
    if getattr(request, "opcode_name", "") == "SASL_LIST_MECHS":
        flood(request, sock)  # type: ignore[arg-type]
        return b""
    return None


def measure(script: Script, runs: int) -> tuple[float, float, int]:
    """(median wall seconds, largest peak RSS in MB, exit code) over ``runs`` runs."""
    walls, peaks, code = [], [], 0
    for _ in range(runs):
        with hostile(script) as server:
            start = time.monotonic()
            process = subprocess.Popen([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}",
                                        "--timeout", "30"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                       env={**os.environ, "DCPCTL_PASSWORD": "password"})
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
            walls.append(time.monotonic() - start)
            peaks.append(usage.ru_maxrss / 1024)
            code = process.returncode
    return statistics.median(walls), max(peaks), code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cases: list[tuple[str, Script]] = [
        ("flood before SASL_LIST_MECHS", flooding),
        ("scram i=15000", scram_challenge("15000")),
        (f"scram i={MAX_SCRAM_ITERATIONS} (the bound)", scram_challenge(str(MAX_SCRAM_ITERATIONS))),
        ("scram i=2000000000", scram_challenge("2000000000")),
    ]
    print(f"{'case':<34} {'wall s':>8} {'peak RSS MB':>12} {'exit':>5}")
    for name, script in cases:
        wall, peak, code = measure(script, args.runs)
        print(f"{name:<34} {wall:8.2f} {peak:12.1f} {code:5d}", flush=True)


if __name__ == "__main__":
    main()
