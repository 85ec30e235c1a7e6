"""A short command's start: dcpctl run on the bundled sample, as a shell loop or a script runs it.

    python benchmarks/bench_start.py [--runs 10] [--before TREE]

Each command runs ``--runs`` times in a fresh interpreter (``python -m dcpctl``, from the tree's root, as
``python -m`` puts the working directory first on sys.path); it prints the median and the lowest CPU time
(user plus system, the steadier figure on a shared machine) and the median wall time. With ``--before TREE``
(another dcpctl source tree, e.g. ``git worktree add /tmp/before HEAD~3``) the two trees run alternately.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent / "samples"
COMMANDS = {
    "decode sample.pcap -F jsonl": ["decode", str(SAMPLES / "dcp-session.pcap"), "-F", "jsonl"],
    "hexdump sample.bin": ["hexdump", str(SAMPLES / "dcp-session.bin")],
    "encode sample.jsonl": ["encode", str(SAMPLES / "dcp-session.jsonl")],
    "--help": ["--help"],
}


def once(tree: Path, args: list[str]) -> tuple[float, float]:
    """(wall, user + system CPU) of one run in a fresh interpreter."""
    before = os.times()
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dcpctl", *args], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = os.times()
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--before", type=Path, help="another dcpctl source tree, run alternately with this one")
    args = parser.parse_args()
    trees = {"": HERE.parent} if args.before is None else {"after ": HERE.parent, "before ": args.before.resolve()}
    print(f"{'command':<36} {'CPU median':>10} {'CPU min':>8} {'wall median':>11}")
    for label, command in COMMANDS.items():
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name, tree in trees.items():
                runs[name].append(once(tree, command))
        for name, found in runs.items():
            cpu = [c for _, c in found]
            print(f"{name + label:<36} {statistics.median(cpu):>9.2f}s {min(cpu):>7.2f}s "
                  f"{statistics.median(w for w, _ in found):>10.2f}s")


if __name__ == "__main__":
    main()
