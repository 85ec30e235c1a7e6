"""The connector's generic paths against Debian's real memcached: refusals, silence, SASL, TLS.

memcached speaks the binary protocol and SASL (Cyrus, with its own SCRAM), but not DCP: it stays silent
on HELLO and the DCP opcodes. So a successful authentication shows up as the timeout on the HELLO that
follows it, and each failure as its own one-line error and exit code.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from servekit import free_port, memcached, self_signed

from dcpctl.cli import main
from dcpctl.exitcode import ExitCode
from dcpctl.render.env import Environment

USERS = {"tester": "s3cret-Pass"}
pytestmark = pytest.mark.peer


def run(*args: str, password: str | None = None, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, float]:
    if password is None:
        monkeypatch.delenv("DCPCTL_PASSWORD", raising=False)
    else:
        monkeypatch.setenv("DCPCTL_PASSWORD", password)
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False)
    started = time.monotonic()
    code = main(list(args), env)
    elapsed = time.monotonic() - started
    assert err.getvalue().count("\n") == 1, err.getvalue()  # one line, never a traceback
    if password:
        assert password not in err.getvalue() + out.getvalue()
    return code, err.getvalue(), elapsed


@pytest.fixture(scope="module")
def sasl_port() -> Iterator[int]:
    with memcached(sasl=USERS) as port:
        yield port


def test_connection_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    code, err, _ = run("stream", f"127.0.0.1:{free_port()}", "--user", "tester", password="x",
                       monkeypatch=monkeypatch)
    assert code == ExitCode.CONNECTION
    assert "connection refused" in err


def test_a_silent_server_hits_the_timeout(sasl_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    code, err, elapsed = run("stream", f"127.0.0.1:{sasl_port}", "--user", "tester", "--timeout", "1",
                             password=USERS["tester"], monkeypatch=monkeypatch)
    assert code == ExitCode.TIMEOUT
    assert "no answer to HELLO within 1 s" in err  # authenticated; then memcached ignores HELLO
    assert elapsed < 5


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA1", "SCRAM-SHA256", "SCRAM-SHA-512"])
def test_sasl_success_and_failure(sasl_port: int, monkeypatch: pytest.MonkeyPatch, mechanism: str) -> None:
    args = ("failover", f"127.0.0.1:{sasl_port}", "--user", "tester", "--sasl-mech", mechanism, "--timeout", "1")
    code, err, _ = run(*args, password=USERS["tester"], monkeypatch=monkeypatch)
    assert code == ExitCode.TIMEOUT, err  # past SASL (Cyrus verified our proof, we verified its signature)
    code, err, _ = run(*args, password="wrong-password", monkeypatch=monkeypatch)
    assert code == ExitCode.AUTH
    assert "authentication failed for user 'tester'" in err


def test_unknown_user_and_no_password(sasl_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    code, err, _ = run("stream", f"127.0.0.1:{sasl_port}", "--user", "nobody", password="x",
                       monkeypatch=monkeypatch)
    assert code == ExitCode.AUTH
    code, err, _ = run("stream", f"127.0.0.1:{sasl_port}", "--user", "tester", monkeypatch=monkeypatch)
    assert code == ExitCode.USAGE
    assert "DCPCTL_PASSWORD" in err


def test_a_server_without_sasl(monkeypatch: pytest.MonkeyPatch) -> None:
    with memcached() as port:
        code, err, _ = run("stream", f"127.0.0.1:{port}", "--user", "tester", "--timeout", "1",
                           password=USERS["tester"], monkeypatch=monkeypatch)
    assert code == ExitCode.AUTH
    assert f"127.0.0.1:{port}: the server does not do SASL authentication" in err


def test_ctrl_c_while_the_server_is_silent_stops_at_once(sasl_port: int) -> None:
    """stream's first Ctrl-C is a graceful stop, but before any stream is open there is nothing to close:
    it must not wait for the request's timeout (memcached, past SASL, never answers HELLO)."""
    proc = subprocess.Popen([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{sasl_port}", "--user", "tester",
                             "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "DCPCTL_PASSWORD": USERS["tester"]})
    time.sleep(2)  # connected, authenticated, waiting for the answer to HELLO
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 5
    assert proc.returncode == ExitCode.OK
    assert err.decode() == "dcpctl: interrupted while connecting\n"


def test_tls_with_and_without_a_trusted_ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = self_signed(tmp_path)
    with memcached(sasl=USERS, tls=(cert, key)) as port:
        address = f"localhost:{port}"
        code, err, _ = run("stream", address, "--tls", "--user", "tester", "--timeout", "1",
                           password=USERS["tester"], monkeypatch=monkeypatch)
        assert code == ExitCode.CONNECTION
        assert "certificate is not trusted" in err
        code, err, _ = run("stream", address, "--cacert", str(cert), "--user", "tester", "--timeout", "1",
                           password=USERS["tester"], monkeypatch=monkeypatch)
        assert code == ExitCode.TIMEOUT, err  # TLS and SASL through; then memcached's silence on HELLO
        code, err, _ = run("stream", address, "--tls", "--no-verify", "--user", "tester", "--timeout", "1",
                           password="wrong", monkeypatch=monkeypatch)
        assert code == ExitCode.AUTH
