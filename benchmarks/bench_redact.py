"""dcpctl redact against dcpctl decode --format jsonl on the same realistic capture: wall time and peak RSS.

    python benchmarks/bench_redact.py [--messages N] [--keep DIR] [--rounds N] [--before TREE]

The capture is make_capture.py's realistic shape (a DCP session of several streams with JSON documents,
acknowledgements and noops; default 100,000 messages). Each command runs as a user runs it, from a fresh
process, its output to /dev/null (decode) or a file (redact); --jobs 1 and 2 for both (a TREE from before
redact had --jobs fails those two rows: exit 2). The dcpctl measured
is this checkout's. --before TREE (another source tree of dcpctl, e.g. ``git worktree add /tmp/before
COMMIT``) runs each command from it too, alternately with this one, so that both see the same machine load;
--rounds repeats the whole table.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_hostile_decode import measure_isolated

HERE = Path(__file__).resolve().parent
LIMIT = 600.0  # seconds a run may take before it is stopped (a million messages serially: minutes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="keep the capture and its redacted copy here")
    parser.add_argument("--rounds", type=int, default=1, help="runs of every command")
    parser.add_argument("--before", type=Path, help="another dcpctl source tree, run alternately with this one")
    args = parser.parse_args()
    directory = (args.keep or Path(tempfile.mkdtemp(prefix="bench_redact_"))).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    try:
        capture = directory / "realistic.pcap"
        subprocess.run([sys.executable, str(HERE / "make_capture.py"), str(capture), "--messages",
                        str(args.messages)], check=True)
        salt = directory / "salt"
        salt.write_text("benchmark salt")
        size = capture.stat().st_size / (1 << 20)
        print(f"capture: {args.messages} messages, {size:.1f} MiB")
        trees = {"": HERE.parent} if args.before is None else {"after ": HERE.parent, "before ": args.before}
        print(f"{'command':<43} {'wall s':>7} {'peak MB':>8} {'msg/s':>9} exit")
        dcpctl = [sys.executable, "-m", "dcpctl"]
        runs = {
            "decode --format jsonl --jobs 1": [*dcpctl, "decode", "-F", "jsonl", "--jobs", "1", str(capture)],
            "decode --format jsonl --jobs 2": [*dcpctl, "decode", "-F", "jsonl", "--jobs", "2", str(capture)],
            "redact --jobs 1": [*dcpctl, "redact", str(capture), "-o", str(directory / "redacted.pcap"),
                                "--salt-file", str(salt), "--jobs", "1"],
            "redact --jobs 2": [*dcpctl, "redact", str(capture), "-o", str(directory / "redacted.pcap"),
                                "--salt-file", str(salt), "--jobs", "2"],
            "redact --map-addresses --hash-names": [*dcpctl, "redact", str(capture), "-o",
                                                    str(directory / "redacted.pcap"), "--salt-file", str(salt),
                                                    "--map-addresses", "--hash-names"],
            "redact --values drop": [*dcpctl, "redact", str(capture), "-o", str(directory / "redacted.pcap"),
                                     "--salt-file", str(salt), "--values", "drop"],
        }
        for _ in range(args.rounds):
            for label, command in runs.items():
                for tree_label, tree in trees.items():
                    # from the tree's root: ``python -m`` puts the working directory first on sys.path
                    run = ["env", "-C", str(tree.resolve()), f"PYTHONPATH={tree.resolve()}", *command]
                    wall, peak, code = measure_isolated(run, LIMIT)
                    print(f"{tree_label + label:<43} {wall:>7.2f} {peak:>8.0f} {args.messages / wall:>9.0f} {code}",
                          flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(directory)


if __name__ == "__main__":
    main()
