"""Standard output that cannot be written: one line, exit 3, whatever the command (a real process, since the
failure is the descriptor's); a reader that goes away (| head) stays quiet, exit 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from servekit import serving

from dcpctl.exitcode import ExitCode

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "dcp-session.bin"
PCAP = ROOT / "samples" / "dcp-session.pcap"
JSONL = ROOT / "samples" / "dcp-session.jsonl"

COMMANDS = [
    ["decode", "-F", "jsonl", str(PCAP)],
    ["decode", "-F", "pretty", str(PCAP)],
    ["decode", "-F", "json", str(PCAP)],
    ["hexdump", str(SAMPLE)],
    ["hexdump", "-F", "jsonl", str(SAMPLE)],
    ["encode", "--binary", str(JSONL)],
    ["encode", str(JSONL)],
    ["fields"],
]


def _dcpctl(args: list[str], redirect: str) -> subprocess.CompletedProcess[str]:
    command = " ".join([sys.executable, "-m", "dcpctl", *args])
    return subprocess.run(["bash", "-c", f"{command} {redirect}"], capture_output=True, text=True, timeout=120,
                          check=False, cwd=ROOT, env={**os.environ, "DCPCTL_PASSWORD": "password"})


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_a_full_disk_is_one_line_and_exit_3(args: list[str]) -> None:
    done = _dcpctl(args, ">/dev/full")
    assert done.stderr == "dcpctl: error: cannot write standard output: No space left on device\n"
    assert done.returncode == ExitCode.INPUT


@pytest.mark.parametrize("redirect", [">&-", "1</dev/null"], ids=["closed", "read-only"])
def test_a_closed_or_unwritable_stdout_is_one_line_and_exit_3(redirect: str) -> None:
    done = _dcpctl(["hexdump", str(SAMPLE)], redirect)
    assert done.stderr == "dcpctl: error: cannot write standard output: Bad file descriptor\n"
    assert done.returncode == ExitCode.INPUT


@pytest.mark.parametrize("fmt", ["pretty", "hexdump", "jsonl"])
def test_a_reader_going_away_is_quiet_and_exit_0(fmt: str, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(SAMPLE.read_bytes() * 200)
    done = _dcpctl(["hexdump", "-F", fmt, str(big)], "| head -n 1 >/dev/null; exit ${PIPESTATUS[0]}")
    assert (done.returncode, done.stderr) == (0, "")


def test_stream_to_a_full_disk_is_one_line_and_exit_3() -> None:
    """Not a connection error (exit 5): the stream's own OSError handling leaves standard output's alone."""
    with serving("--vbuckets", "2", "--items", "50") as server:
        done = _dcpctl(["stream", f"127.0.0.1:{server.port}", "-F", "jsonl", "--until", "now", "--timeout", "5"],
                       ">/dev/full")
    assert done.stderr.splitlines()[-1] == "dcpctl: error: cannot write standard output: No space left on device"
    assert done.returncode == ExitCode.INPUT
