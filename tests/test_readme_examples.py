"""Every shell example in README.md runs as written, so an example that breaks fails CI.

Each ``sh`` block of the tour runs under ``bash -euo pipefail`` in a fresh directory holding a copy of
``samples/``; the live block starts its own ``dcpctl serve`` on 127.0.0.1:11210 as the README does. The
quick start's blocks are left out: they install dcpctl and run this suite.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _tour_blocks() -> list[str]:
    text = README.read_text()
    start = text.index("## A tour")
    end = text.index("\n## ", start + 1)
    return _BLOCK.findall(text[start:end])


def test_the_tour_has_examples() -> None:
    assert len(_tour_blocks()) >= 3


@pytest.mark.peer
@pytest.mark.parametrize("block", _tour_blocks(), ids=lambda b: b.splitlines()[0][:40])
def test_readme_example_runs(block: str, tmp_path: Path) -> None:
    shutil.copytree(ROOT / "samples", tmp_path / "samples")
    env = {**os.environ, "DCPCTL_JVM_CACHE": "off", "COLUMNS": "120"}
    env.pop("DCPCTL_PASSWORD", None)
    out_path, err_path = tmp_path / "out", tmp_path / "err"
    # Files, not pipes: a serve the block leaves in the background would hold a pipe open
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
                                stdout=out_file, stderr=err_file, start_new_session=True)
        try:
            proc.wait(timeout=180)
        finally:
            with contextlib.suppress(ProcessLookupError):  # whatever the block started and did not stop
                os.killpg(proc.pid, signal.SIGKILL)
    out, err = out_path.read_text(), err_path.read_text()
    assert proc.returncode == 0, f"exit {proc.returncode}\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    assert out.strip(), "the example printed nothing"
