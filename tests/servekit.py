"""Peers the tests start themselves: ``dcpctl serve`` and Debian's memcached, and a test certificate; and a live
command run in this process, its JSON lines read."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dcpctl.cli import main
from dcpctl.render.env import Environment


class Server:
    """``dcpctl serve`` in a subprocess; the ports are read from its first lines."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "dcpctl", "serve", "--port", "0", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.ports: list[int] = []
        self.tls_ports: list[int] = []
        self.banner = ""  # the line after the ports: the bucket, its vbuckets and items, the login
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"dcpctl serve exited: {self.process.stderr.read() if self.process.stderr else ''}")
            found = re.search(r"listening on [^ ]+:(\d+)(?: \(TLS on (\d+)\))?", line)
            if found:
                self.ports.append(int(found.group(1)))
                if found.group(2):
                    self.tls_ports.append(int(found.group(2)))
            elif "vbuckets" in line:
                self.banner = line
                return
        raise RuntimeError("dcpctl serve did not start")

    @property
    def port(self) -> int:
        return self.ports[0]

    def stop(self) -> str:
        self.process.terminate()
        _, err = self.process.communicate(timeout=10)
        return err


def run(*args: str) -> tuple[int, list[dict[str, Any]], str]:
    """A command run in this process, output piped: its exit code, its JSON records, its standard error."""
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=200)
    code = main(list(args), env)
    return code, [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")], err.getvalue()


@contextmanager
def serving(*args: str) -> Iterator[Server]:
    server = Server(*args)
    try:
        yield server
    finally:
        server.stop()


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A throwaway certificate for localhost (openssl is on every machine .ci/run prepares)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peer(name: str) -> str:
    """A Debian peer's path; missing is a failure in CI (.ci/run installs it) and a skip elsewhere."""
    path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: .ci/run installs it")
        pytest.skip(f"{name} not installed (.ci/run installs it)")
    return path


@contextmanager
def memcached(*, sasl: dict[str, str] | None = None, tls: tuple[Path, Path] | None = None) -> Iterator[int]:
    """Debian's memcached on a free port; ``sasl`` users go into a sasldb with Cyrus SASL's SCRAM and PLAIN."""
    binary = peer("memcached")
    with tempfile.TemporaryDirectory() as directory:
        env = dict(os.environ)
        args = [binary, "-p", str(port := free_port()), "-U", "0", "-l", "127.0.0.1"]
        if os.geteuid() == 0:
            args += ["-u", "root"]
        if sasl is not None:
            saslpasswd = peer("saslpasswd2")
            db = Path(directory) / "sasldb2"
            for user, password in sasl.items():
                subprocess.run([saslpasswd, "-p", "-a", "memcached", "-c", "-f", str(db), user],
                               input=password.encode(), check=True, timeout=30)
            (Path(directory) / "memcached.conf").write_text(
                f"mech_list: plain scram-sha-1 scram-sha-256 scram-sha-512\nsasldb_path: {db}\n")
            env["SASL_CONF_PATH"] = directory
            args.append("-S")
        if tls is not None:
            args += ["-Z", "-o", f"ssl_chain_cert={tls[0]},ssl_key={tls[1]}"]
        process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError as exc:
                    if process.poll() is not None:
                        why = process.stderr.read() if process.stderr else ""
                        raise RuntimeError(f"memcached exited: {why!r}") from exc
                    time.sleep(0.05)
            yield port
        finally:
            process.terminate()
            process.wait(10)
            if process.stderr is not None:
                process.stderr.close()
