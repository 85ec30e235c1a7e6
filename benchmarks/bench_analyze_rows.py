"""analyze's decode task without Spark: a capture's messages to rows, Arrow batches, partials and Parquet.

    python benchmarks/bench_analyze_rows.py [CAPTURE] [--messages N] [--shape realistic|sessions|bare] [--runs R]

Without CAPTURE it writes one of N messages with make_capture.py (default 200,000, the realistic shape).
It times stage one (the capture cut into chunks and read into runs of segments) once, then stage two R times
in this process: every run in one partition through ``job._decode_partition``, the task Spark runs (the
capture decoder, the rows, the Arrow batches, the analyses' partials, the Parquet file), and prints each
run's wall and CPU time, the best and median in microseconds a message (CPU time is the steadier figure
on a shared machine), and this process's peak RSS. Spark's own
start and shuffle are not in it: ``bench_analyze.py`` times the whole command.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("capture", nargs="?")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--shape", choices=["realistic", "sessions", "bare"], default="realistic")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    from dcpctl.pipeline import job  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        capture = Path(args.capture) if args.capture else Path(tmp) / "m.pcap"
        if not args.capture:
            subprocess.run([sys.executable, str(Path(__file__).with_name("make_capture.py")), str(capture),
                            "--messages", str(args.messages), "--shape", args.shape], check=True)
        ports = frozenset({11210})
        start = time.perf_counter()
        planned = job.partitions_for([str(capture)], 64 << 20)
        runs = sorted((run for chunk in planned.chunks for run in job.chunk_runs(chunk, ports)),
                      key=lambda run: (run[0], run[1], run[2]))
        stage_one = time.perf_counter() - start
        print(f"capture: {capture.stat().st_size:,} bytes; stage one (chunks to runs): {stage_one:.2f} s")
        walls, cpus = [], []
        messages = 0
        for n in range(args.runs):
            out = Path(tmp) / f"out{n}"
            out.mkdir()
            start, cpu = time.perf_counter(), time.process_time()
            for _, written, _, _ in job._decode_partition(iter(runs), ("dcp", None, False), ports, records=False,
                                                          out=str(out), stall_ms=1000.0):
                messages = written
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
            print(f"run {n + 1}: stage two {walls[-1]:.2f} s wall, {cpus[-1]:.2f} s CPU, {messages:,} messages")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        for what, times in (("wall", walls), ("CPU", cpus)):
            best, median = min(times), statistics.median(times)
            print(f"stage two {what}: best {best:.2f} s ({best / messages * 1e6:.2f} us a message), median "
                  f"{median:.2f} s ({median / messages * 1e6:.2f} us a message)")
        print(f"peak RSS {peak:.0f} MB")


if __name__ == "__main__":
    main()
