"""Where redact's CPU goes, beside dcpctl decode --format jsonl's, on one realistic capture, in one process.

    python benchmarks/bench_redact_parts.py [CAPTURE] [--messages N] [--runs N]

Each stage is the one before it and more, CPU seconds (``time.process_time``) in this process:
- read: the file's TCP segments (libpcap and the frame parser);
- decode path: and TCP reassembly, framing and decoding, each plain item through its compiled reader (what
  decode does before it renders a line);
- frame work: the whole redaction engine with the core replaced by one that zeroes each item's key and value
  (same lengths, so every frame changes and has its checksums recomputed): redaction less its core;
- redact: the whole engine and core, with the core's calls timed where they run.
The peer is ``dcpctl decode -F jsonl --jobs 1`` on the same file, run as a user runs it (a fresh process,
its output to /dev/null), its CPU time from the child's rusage. The capture is make_capture.py's realistic
shape (default 100,000 messages) unless one is given.
"""

from __future__ import annotations

import argparse
import functools
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from dcpctl.protocol.message import DecodeOptions, Message  # noqa: E402 - the checkout's dcpctl
from dcpctl.redact.core import Redactor  # noqa: E402
from dcpctl.sources import redaction  # noqa: E402
from dcpctl.sources.capture import CaptureDecoder  # noqa: E402
from dcpctl.sources.pcap import TcpSegment, read_segments  # noqa: E402
from dcpctl.sources.tcp import Reassembler  # noqa: E402

PORTS = frozenset({11210})
SALT = b"a salt for the benchmark"


def read(path: str) -> None:
    for _ in read_segments(path, PORTS):
        pass


def decode_path(path: str) -> None:
    decoder = CaptureDecoder(DecodeOptions(), PORTS, items=lambda _label: lambda *_args: None)
    reassembler = Reassembler(PORTS)
    for item in read_segments(path, PORTS):
        if isinstance(item, TcpSegment):
            for event in reassembler.push(item):
                for _ in decoder.feed(event):
                    pass


def frame_work(path: str) -> None:
    core = Redactor(SALT)
    core.plain_item = lambda msg: msg.raw[:msg.key_offset] + bytes(len(msg.raw) - msg.key_offset)  # type: ignore[method-assign]
    with open("/dev/null", "wb") as out:
        redaction.redact_capture(path, out, core, DecodeOptions(), PORTS)


def redact(path: str, timed: list[float]) -> None:
    core = Redactor(SALT)
    for name in ("plain_item", "message"):
        real: Callable[[Message], bytes] = getattr(core, name)

        def clocked(msg: Message, real: Callable[[Message], bytes] = real) -> bytes:
            start = time.perf_counter()
            try:
                return real(msg)
            finally:
                timed[0] += time.perf_counter() - start
        setattr(core, name, clocked)
    with open("/dev/null", "wb") as out:
        redaction.redact_capture(path, out, core, DecodeOptions(), PORTS)


def cpu(run: Callable[[], object]) -> float:
    start = time.process_time()
    run()
    return time.process_time() - start


def peer(path: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-m", "dcpctl", "decode", path, "-F", "jsonl", "--jobs", "1"], check=True,
                   stdout=subprocess.DEVNULL, cwd=HERE.parent)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("capture", nargs="?", type=Path)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    path = args.capture
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="bench_redact_parts_")) / "realistic.pcap"
        subprocess.run([sys.executable, str(HERE / "make_capture.py"), str(path), "--messages", str(args.messages)],
                       check=True)
    name = str(path)
    print(f"{'stage':<48}" + "".join(f"{'run ' + str(n + 1):>10}" for n in range(args.runs)))
    rows: dict[str, list[float]] = {}
    for _ in range(args.runs):
        timed = [0.0]
        rows.setdefault("decode -F jsonl --jobs 1 (peer, its process)", []).append(peer(name))
        stages: list[tuple[str, Callable[[], object]]] = [
            ("read", functools.partial(read, name)),
            ("+ reassembly, framing, decoding", functools.partial(decode_path, name)),
            ("+ frame work (redaction, the core zeroing)", functools.partial(frame_work, name)),
            ("+ the core: redact, in this process", functools.partial(redact, name, timed))]
        for stage, run in stages:
            rows.setdefault(stage, []).append(cpu(run))
        rows.setdefault("  of which the core's calls (wall)", []).append(timed[0])
    for stage, figures in rows.items():
        print(f"{stage:<48}" + "".join(f"{figure:>9.2f}s" for figure in figures))


if __name__ == "__main__":
    main()
