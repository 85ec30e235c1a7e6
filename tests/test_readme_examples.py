"""Every shell example in README.md and in the man pages' EXAMPLES sections runs as written, so an example
that breaks fails CI.

README.md: each ``sh`` block of the tour runs under ``bash -euo pipefail`` in a fresh directory holding a
copy of ``samples/``; the live block starts its own ``dcpctl serve`` on 127.0.0.1:11210 as the README does.
The quick start's blocks are left out: they install dcpctl and run this suite.

Man pages: each command of an EXAMPLES section (its ``.EX`` blocks; after ``$ `` where the page shows a
prompt, and then the lines shown after it must be in its output) runs the same way, in one directory per
page, in order (a later example may read what an earlier one wrote). Pages that talk to a node get a
``dcpctl serve`` started here on a free loopback port: ``localhost`` (and ``localhost:11210``) in their
examples becomes ``localhost:PORT``. An example of ``dcpctl serve`` itself runs on free ports and passes
when its node listens. Two roff comments steer it, each before a command or an ``.EX`` block:
``.\\" example: not run (WHY)`` skips it, said in the test's output, never silently; ``.\\" example: file
NAME`` writes the block to NAME instead of running it, before the page's commands run (a scenario an
example reads).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.servekit import Server, self_signed

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAN = ROOT / "man"
_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)
_NOT_RUN = re.compile(r'^\.\\" example: not run \((.+)\)$')
_FILE = re.compile(r'^\.\\" example: file (\S+)$')
# an example's own time: analyze starts Spark, the slowest
EXAMPLE_TIMEOUT = 180
# how long a serve example has to print its listening line
SERVE_START_TIMEOUT = 30


def _environment() -> dict[str, str]:
    env = {**os.environ, "DCPCTL_JVM_CACHE": "off", "COLUMNS": "120", "PYTHONPATH": str(ROOT)}
    env.pop("DCPCTL_PASSWORD", None)
    return env


def run_script(script: str, cwd: Path, env: dict[str, str], timeout: float = EXAMPLE_TIMEOUT) -> tuple[int, str, str]:
    """``script`` under ``bash -euo pipefail`` in ``cwd``: exit status, standard output and error. Whatever it
    started and left running is killed with it."""
    out_path, err_path = cwd / ".example-out", cwd / ".example-err"
    # Files, not pipes: a serve the block leaves in the background would hold a pipe open
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                                stdout=out_file, stderr=err_file, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):  # whatever the block started and did not stop
                os.killpg(proc.pid, signal.SIGKILL)
    out, err = out_path.read_text(), err_path.read_text()
    out_path.unlink()
    err_path.unlink()
    return proc.returncode, out, err


def _with_samples(directory: Path) -> Path:
    shutil.copytree(ROOT / "samples", directory / "samples")
    return directory


# --- README.md ------------------------------------------------------------------------------------------

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
    code, out, err = run_script(block, _with_samples(tmp_path), _environment())
    assert code == 0, f"exit {code}\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    assert out.strip(), "the example printed nothing"


# --- man pages ------------------------------------------------------------------------------------------

@dataclass
class Example:
    command: str  # shell text, roff escapes undone, continuation lines joined
    shown: list[str] = field(default_factory=list)  # output lines the page shows after a "$ " command
    not_run: str | None = None  # why, from the page's marker
    file: str | None = None  # write the command text to this file instead of running it


def _unroff(line: str) -> str:
    return line.replace("\\-", "-").replace("\\e", "\\")


def man_examples(page: Path) -> list[Example]:
    """The examples of a man page's EXAMPLES section, in order (see the module docstring)."""
    lines = page.read_text().splitlines()
    if ".SH EXAMPLES" not in lines:
        return []
    section = lines[lines.index(".SH EXAMPLES") + 1:]
    section = section[:next((i for i, line in enumerate(section) if line.startswith(".SH ")), len(section))]
    out: list[Example] = []
    marker: tuple[str, str] | None = None  # ("not run", why) or ("file", name), for what comes next
    block_marker: tuple[str, str] | None = None
    block: list[str] | None = None
    for line in section:
        skip, file = _NOT_RUN.match(line), _FILE.match(line)
        if skip or file:
            marker = ("not run", skip.group(1)) if skip else ("file", file.group(1))  # type: ignore[union-attr]
            continue
        if line == ".EX":
            block, block_marker, marker = [], marker, None
            continue
        if line == ".EE":
            assert block is not None
            if block_marker is not None and block_marker[0] == "file":
                out.append(Example("\n".join(block) + "\n", file=block_marker[1]))
            block = None
            continue
        if block is None:
            continue
        text = _unroff(line)
        if block_marker is not None and block_marker[0] == "file":
            block.append(text)
            continue
        prompted = any(_unroff(other).startswith("$ ") for other in section if other and not other.startswith("."))
        if prompted and not text.startswith("$ "):
            if out and text.strip():  # output the page shows for the command before
                out[-1].shown.append(text.strip())
            continue
        text = text.removeprefix("$ ")
        if not text.strip():
            continue
        if out and out[-1].command.endswith("\\") and out[-1].file is None:  # a continued command
            out[-1].command = out[-1].command[:-1] + text
            continue
        why = marker or block_marker
        out.append(Example(text, not_run=why[1] if why is not None and why[0] == "not run" else None))
        marker = None
    return out


def _pages() -> list[Path]:
    return sorted(page for page in MAN.glob("*.1") if man_examples(page))


def _on_node(command: str, port: int) -> str:
    return re.sub(r"\blocalhost(:11210)?\b", f"localhost:{port}", command)


def _serve_example(command: str, cwd: Path, env: dict[str, str]) -> None:
    """A ``dcpctl serve`` example: on free ports, it passes when its node listens; then it is stopped."""
    command = re.sub(r"--port \d+", "--port 0", command) if "--port" in command else command + " --port 0"
    command += " --tls-port 0"
    err_path = cwd / ".serve-err"
    with err_path.open("w") as err_file:
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", f"exec {command}"], cwd=cwd, env=env,
                                stdout=subprocess.PIPE, stderr=err_file, text=True, start_new_session=True)
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + SERVE_START_TIMEOUT
            line = ""
            while "listening on" not in line and time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
            assert "listening on" in line, f"{command}: did not listen\n{err_path.read_text()[-3000:]}"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
    assert "Traceback" not in err_path.read_text()


def test_every_page_with_examples_is_found() -> None:
    assert len(_pages()) >= 10
    skipped = [e for page in _pages() for e in man_examples(page) if e.not_run is not None]
    assert all(e.not_run for e in skipped)  # each says why


@pytest.mark.peer
@pytest.mark.parametrize("page", _pages(), ids=lambda page: page.stem)
def test_man_page_examples_run(page: Path, tmp_path: Path) -> None:
    examples = man_examples(page)
    if all(e.not_run is not None for e in examples if e.file is None):
        pytest.skip("every example is marked not run: " + "; ".join(f"{e.command} ({e.not_run})" for e in examples))
    cwd = _with_samples(tmp_path)
    env = _environment()
    ran, not_run = 0, []
    needs_node = any("localhost" in e.command for e in examples if e.not_run is None)
    server = Server("--items", "2000", "--vbuckets", "16") if needs_node else None
    try:
        if any("--tls-cert" in e.command for e in examples):
            self_signed(cwd)  # cert.pem and key.pem, as the examples name them
        for example in examples:  # the files first: the page shows them after the command that reads them
            if example.file is not None:
                (cwd / example.file).write_text(example.command)
        for example in examples:
            if example.not_run is not None:
                not_run.append(f"{example.command} ({example.not_run})")
                continue
            if example.file is not None:
                continue
            command = _on_node(example.command, server.port) if server is not None else example.command
            if command.startswith("export "):  # the page's setting, for the examples after it
                name, _, value = command.removeprefix("export ").partition("=")
                env[name] = value
                continue
            if command.startswith("dcpctl serve"):
                _serve_example(command, cwd, env)
                ran += 1
                continue
            code, out, err = run_script(command, cwd, env)
            assert code == 0, f"{command}: exit {code}\n{err[-3000:]}"
            assert "Traceback" not in err, f"{command}\n{err[-3000:]}"
            for shown in example.shown:
                assert shown in out, f"{command}: the page shows {shown!r}, the command printed:\n{out}"
            ran += 1
    finally:
        if server is not None:
            server.stop()
    assert ran, "no example of the page ran"
    if not_run:
        print(f"{page.name}: not run: " + "; ".join(not_run))
