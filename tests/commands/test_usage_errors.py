"""Usage errors as a user sees them: one line on standard error, exit 2, naming the option and the closest
names where there are some (real runs of ``python -m dcpctl``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PCAP = str(ROOT / "samples" / "dcp-session.pcap")


def usage_error(*args: str) -> str:
    """Runs dcpctl; asserts exit 2, nothing on stdout and one ``dcpctl: error:`` line; returns that line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "dcpctl", *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("dcpctl: error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "says"), [
    (["decode", "--job", "2", PCAP], "no such option: --job (did you mean --jobs?)"),
    (["decode"], "missing argument"),
    (["decode", "-F", "bogus", PCAP], "--format: 'bogus' is not one of 'pretty'"),
    (["decode", "--jobs", "0", PCAP], "--jobs: "),
    (["decode", "--jobs", "many", PCAP], "--jobs: "),
    (["decode", "--format"], "'--format' requires an argument"),
    (["decod"], "no such command 'decod'. Did you mean 'decode'"),
    (["rollback", "bogus"], "no such command 'bogus'"),
])
def test_usage_error_is_one_line(args: list[str], says: str) -> None:
    assert says in usage_error(*args)
