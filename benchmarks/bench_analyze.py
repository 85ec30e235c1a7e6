"""dcpctl analyze on Spark (local[1], local[2]) against single-process decode and tshark, on one capture.

    python benchmarks/bench_analyze.py [--messages N] [--shape realistic|sessions] [--runs R] [--commands ...]

Writes a capture of N messages shaped like one taken on a data node (make_capture.py's realistic shape:
several DCP connections and an SDK connection, the receiver's ACKs, mixed messages; 1,500,000 is about
1 GB), or, labelled as such, N mutations in whole DCP sessions over K connections (``--shape sessions``,
the shape of earlier figures), then runs each command R times, interleaved so that the machine's drift
hits every command alike, and prints the median and range of the wall times. Analyze runs with a cache
directory of its own: a first run, timed on its own, saves the JVM's class-data archive the others start
from (local2-nocache runs without it, as DCPCTL_JVM_CACHE=off). For analyze it also polls
/proc every 0.2 s for the peak resident memory of Spark's JVM and of each Python task worker (a worker
runs one task at a time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def peak_memory(process: subprocess.Popen[bytes]) -> tuple[float, dict[str, int]]:
    """Wait for ``process``; (wall seconds, peak RSS in KB of its JVM and of its largest Python worker)."""
    start = time.monotonic()
    peaks = {"jvm": 0, "worker": 0}
    while process.poll() is None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            kind = "jvm" if b"java" in command and b"pyspark" in command else \
                "worker" if b"pyspark.daemon" in command or b"pyspark/daemon" in command else None
            if kind is None:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    peaks[kind] = max(peaks[kind], int(line.split()[1]))
        time.sleep(0.2)
    return time.monotonic() - start, peaks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_500_000)
    parser.add_argument("--shape", choices=["realistic", "sessions"], default="realistic")
    parser.add_argument("--connections", type=int, default=6, help="connections of the sessions shape")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--commands", default="decode,local1,local2,local2-nocache,tshark",
                        help="which of decode, local1, local2, local2-nocache, tshark to run (decode is the "
                             "baseline: always run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        capture = Path(tmp) / "m.pcap"
        subprocess.run([sys.executable, str(Path(__file__).with_name("make_capture.py")), str(capture),
                        "--messages", str(args.messages), "--connections", str(args.connections), "--shape",
                        args.shape], check=True)
        print(f"capture: {args.messages:,} messages, {args.shape} shape, {capture.stat().st_size:,} bytes")
        analyze = ["dcpctl", "analyze", str(capture), "-F", "json", "--out"]
        # key: (what the line says, argv, environment); the JVM's class-data archive goes to a cache of this
        # run's own, made by a first run outside the timed ones (timed and reported on its own)
        catalogue = {
            "decode": ("dcpctl decode --format jsonl --jobs 1 > /dev/null",
                       ["dcpctl", "decode", "--format", "jsonl", "--jobs", "1", str(capture)], {}),
            "local1": ("dcpctl analyze --master local[1] -F json", [*analyze, f"{tmp}/out1", "--master", "local[1]"],
                       {}),
            "local2": ("dcpctl analyze --master local[2] -F json", [*analyze, f"{tmp}/out2", "--master", "local[2]"],
                       {}),
            "local2-nocache": ("DCPCTL_JVM_CACHE=off dcpctl analyze --master local[2] -F json",
                               [*analyze, f"{tmp}/out3", "--master", "local[2]"], {"DCPCTL_JVM_CACHE": "off"}),
            "tshark": ("tshark -T fields -e couchbase.opcode -e couchbase.extras.by_seqno",
                       ["tshark", "-r", str(capture), "-T", "fields", "-e", "couchbase.opcode", "-e",
                        "couchbase.extras.by_seqno"], {}),
        }
        base_env = {k: v for k, v in os.environ.items() if k != "DCPCTL_JVM_CACHE"}
        base_env["XDG_CACHE_HOME"] = f"{tmp}/cache"
        wanted = {"decode", *args.commands.split(",")}
        commands = {name: (command, {**base_env, **env}) for key, (name, command, env) in catalogue.items()
                    if key in wanted}
        if wanted & {"local1", "local2"}:
            with open(os.devnull, "wb") as sink:
                process = subprocess.Popen([*analyze, f"{tmp}/out0", "--master", "local[2]"], stdout=sink,
                                           stderr=subprocess.DEVNULL, env=base_env)
                first, _ = peak_memory(process)
            print(f"first dcpctl analyze --master local[2] (saves the JVM's class-data archive): {first:.1f} s")
        times: dict[str, list[float]] = {name: [] for name in commands}
        memory: dict[str, dict[str, int]] = {}
        for _ in range(args.runs):
            for name, (command, env) in commands.items():
                with open(os.devnull, "wb") as sink:
                    process = subprocess.Popen(command, stdout=sink, stderr=subprocess.DEVNULL, env=env)
                    wall, peaks = peak_memory(process)
                if process.returncode != 0:
                    raise SystemExit(f"{name}: exit {process.returncode}")
                times[name].append(wall)
                if "analyze" in name:
                    memory[name] = {k: max(v, memory.get(name, {}).get(k, 0)) for k, v in peaks.items()}
        baseline = statistics.median(times["dcpctl decode --format jsonl --jobs 1 > /dev/null"])
        for name, walls in times.items():
            median = statistics.median(walls)
            line = (f"{name}: median {median:.1f} s ({min(walls):.1f}-{max(walls):.1f}), "
                    f"{args.messages / median:,.0f} messages/s, {baseline / median:.2f}x decode --jobs 1")
            if name in memory:
                line += f"; peak RSS: JVM {memory[name]['jvm'] / 1024:.0f} MB, " \
                        f"largest task worker {memory[name]['worker'] / 1024:.0f} MB"
            print(line)


if __name__ == "__main__":
    main()
