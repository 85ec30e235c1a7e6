"""A command's own peak memory, for the tests that bound it.

Linux counts in a child's peak (ru_maxrss) the memory of the process it was forked from, so a child forked
from the test run, hundreds of MB by then, would be charged with them. The command is run from a small
launcher process instead, whose own few MB are all it inherits."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

_LAUNCHER = ("import resource, subprocess, sys\n"
             "done = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
             "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def run_with_peak(argv: list[str], env: Mapping[str, str] | None = None,
                  timeout: float = 120) -> tuple[int, str, float]:
    """Run ``argv`` (its standard output discarded): its exit code, its standard error and its peak RSS in MB."""
    done = subprocess.run([sys.executable, "-c", _LAUNCHER, *argv], capture_output=True, text=True, env=env,
                          timeout=timeout, check=True)
    code, peak_kb = done.stdout.split()
    return int(code), done.stderr, int(peak_kb) / 1024
