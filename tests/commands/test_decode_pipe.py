"""``dcpctl decode ... | head -n 1``: the reader going away ends decode quietly, exit 0, in every format and
with either number of processes (pretty and hexdump exited 1 silently: rich's answer to a closed pipe)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from capturekit import session_packets, write_capture


@pytest.mark.parametrize("fmt", ["pretty", "hexdump", "jsonl", "json"])
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_head_closing_the_pipe_is_exit_0(tmp_path: Path, fmt: str, jobs: str) -> None:
    capture = tmp_path / "big.pcap"
    capture.write_bytes(write_capture(session_packets() * 200))
    decode = subprocess.Popen([sys.executable, "-m", "dcpctl", "decode", "-F", fmt, "-j", jobs, str(capture)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert decode.stdout is not None
    head = subprocess.run(["head", "-n", "1"], stdin=decode.stdout, capture_output=True, check=True, timeout=60)
    decode.stdout.close()
    _, stderr = decode.communicate(timeout=60)
    assert head.stdout
    assert (decode.returncode, stderr) == (0, b"")
