"""A capture named by the path of a pipe (``dcpctl decode <(ssh node cat cap.pcap)``, a FIFO tcpdump writes
to) is read once, front to back, as standard input is: nothing looks at its first bytes before the reader."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from capturekit import ROOT

from dcpctl.exitcode import ExitCode

SAMPLE = ROOT / "samples" / "dcp-session.pcap"
TIMEOUT = 60  # seconds a command may take on the sample
# A feeder: the file's bytes into the pipe (its open waits for the reader)
FEED = "import shutil, sys; shutil.copyfileobj(open(sys.argv[1], 'rb'), open(sys.argv[2], 'wb'))"


def run(*args: str) -> tuple[int, str, str]:
    """The command in a process of its own, as a shell runs it: a regression that waits on a pipe forever
    fails here after TIMEOUT seconds, not by hanging the suite."""
    done = subprocess.run([sys.executable, "-m", "dcpctl", *args], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=ROOT, check=False)
    return done.returncode, done.stdout, done.stderr


@contextmanager
def fifos(directory: Path, count: int = 1) -> Iterator[list[str]]:
    """Named pipes in a new ``directory``, each fed the sample capture once by another process, as a shell's
    ``<(cat sample)`` is (not a thread: libpcap holds the interpreter's lock while it waits on the pipe)."""
    directory.mkdir()
    paths = [directory / f"pipe{n}" for n in range(count)]
    feeders = []
    for path in paths:
        os.mkfifo(path)
        feeders.append(subprocess.Popen([sys.executable, "-c", FEED, str(SAMPLE), str(path)]))
    try:
        yield [str(path) for path in paths]
    finally:
        for path, feeder in zip(paths, feeders, strict=True):
            if feeder.poll() is None:  # never opened by the command: a reader lets its feeder end
                reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                feeder.wait(timeout=10)
                os.close(reader)
            assert feeder.wait(timeout=10) == 0


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_pipe_decodes_as_the_file_does(tmp_path: Path, jobs: str) -> None:
    expected = run("decode", "-F", "jsonl", "-j", jobs, str(SAMPLE))
    with fifos(tmp_path / "pipes") as (pipe,):
        code, out, err = run("decode", "-F", "jsonl", "-j", jobs, pipe)
    assert (code, err) == (ExitCode.OK, "")
    assert out == expected[1]


def test_two_pipes_are_read_in_the_order_given(tmp_path: Path) -> None:
    _, once, _ = run("decode", "-F", "jsonl", str(SAMPLE))
    with fifos(tmp_path / "pipes", 2) as pipes:
        code, out, err = run("decode", "-F", "jsonl", *pipes)
    assert (code, err) == (ExitCode.OK, "")
    assert out == once * 2


def test_a_pipe_is_redacted_and_explained_as_the_file_is(tmp_path: Path) -> None:
    salt = tmp_path / "salt"
    salt.write_text("a salt")
    assert run("redact", str(SAMPLE), "-o", str(tmp_path / "file.pcap"), "--salt-file", str(salt))[0] == ExitCode.OK
    with fifos(tmp_path / "redact") as (pipe,):
        code, _, err = run("redact", pipe, "-o", str(tmp_path / "pipe.pcap"), "--salt-file", str(salt))
    assert code == ExitCode.OK, err
    assert (tmp_path / "pipe.pcap").read_bytes() == (tmp_path / "file.pcap").read_bytes()
    _, explained, _ = run("rollback", "explain", "-F", "json", str(SAMPLE))
    with fifos(tmp_path / "explain") as (pipe,):
        code, out, err = run("rollback", "explain", "-F", "json", pipe)
    assert (code, err) == (ExitCode.OK, "")
    assert out.replace(pipe, str(SAMPLE)) == explained


def test_analyze_refuses_a_pipe_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    code, _, err = run("analyze", str(tmp_path / "pipe"), "--out", str(tmp_path / "out"))
    assert code == ExitCode.USAGE
    assert "a pipe" in err
    assert err.count("\n") == 1


def test_compressed_data_on_standard_input_gets_what_works() -> None:
    """A pipe is never looked at before libpcap, so its compression cannot be named; the one line says what
    to do instead of a bare 'unknown file format'."""
    done = subprocess.run([sys.executable, "-m", "dcpctl", "decode", "-"], input=gzip.compress(SAMPLE.read_bytes()),
                          capture_output=True, timeout=TIMEOUT, cwd=ROOT, check=False)
    assert done.returncode == ExitCode.INPUT
    err = done.stderr.decode()
    assert err.count("\n") == 1
    assert "unknown file format" in err
    assert "decompress it into the pipe (zcat" in err
