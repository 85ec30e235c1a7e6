"""The password prompt on a terminal (a pty this test opens): Enter gives the password, Ctrl-D gives none (a
usage error, exit 2), Ctrl-C interrupts; nothing typed is echoed."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def at_prompt(args: list[str], keys: bytes) -> tuple[int, str]:
    """Runs dcpctl on a new terminal without a password in its environment, types ``keys`` at the prompt;
    returns its exit code and everything the terminal showed."""
    env = {name: value for name, value in os.environ.items() if name != "DCPCTL_PASSWORD"}
    env["PYTHONPATH"] = str(ROOT)
    pid, fd = pty.fork()
    if pid == 0:  # the child: the terminal is its controlling one, as a user's shell gives it
        os.execve(sys.executable, [sys.executable, "-m", "dcpctl", *args], env)
    seen = b""
    deadline = time.monotonic() + 30
    while b"password for" not in seen and time.monotonic() < deadline:
        if select.select([fd], [], [], 1)[0]:
            seen += os.read(fd, 1024)
    os.write(fd, keys)
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], 1)[0]:
            continue
        try:
            chunk = os.read(fd, 1024)
        except OSError:  # the child gone: its terminal closed
            break
        if not chunk:
            break
        seen += chunk
    done, status = os.waitpid(pid, os.WNOHANG)
    while not done and time.monotonic() < deadline:
        time.sleep(0.1)
        done, status = os.waitpid(pid, os.WNOHANG)
    os.close(fd)
    if not done:  # still at its prompt, or stuck: a failure, never a hang of the suite
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"dcpctl {' '.join(args)} did not exit; its terminal showed {seen!r}")
    return os.waitstatus_to_exitcode(status), seen.decode(errors="replace").replace("\r\n", "\n")


@pytest.mark.parametrize("command", ["failover", "stream"])
def test_ctrl_d_at_the_prompt_is_no_password_not_an_interrupt(command: str) -> None:
    """Was 'dcpctl: interrupted', exit 130 (stream: exit 0), though nothing was interrupted."""
    code, shown = at_prompt([command, "127.0.0.1:1"], b"\x04")
    assert (code, shown) == (2, "password for Administrator: \ndcpctl: error: no password: the prompt was given "
                                "the end of input (Ctrl-D)\n")


def test_ctrl_c_at_the_prompt_interrupts() -> None:
    assert at_prompt(["failover", "127.0.0.1:1"], b"\x03") == (130, "password for Administrator: dcpctl: "
                                                                    "interrupted\n")


def test_a_password_typed_is_used_and_never_shown() -> None:
    code, shown = at_prompt(["failover", "127.0.0.1:1"], b"s3cret-typed\n")
    assert code == 5  # nothing listens on port 1: past the prompt, the connection is refused
    assert "s3cret-typed" not in shown
