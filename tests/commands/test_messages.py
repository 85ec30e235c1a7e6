"""Messages as a user reads them: whole sentences, the option and the file named, no parser jargon, no advice
that does not apply (real runs of ``python -m dcpctl``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dcpctl.protocol.encode import encode
from tests.capturekit import from_client, session_records, write_capture
from tests.servekit import serving

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, stdin: str = "", password: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DCPCTL_PASSWORD", None)
    if password:
        env["DCPCTL_PASSWORD"] = "password"
    return subprocess.run([sys.executable, "-m", "dcpctl", *args], capture_output=True, text=True, env=env,
                          input=stdin, timeout=60, check=False)


def error_line(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("dcpctl: error: "), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0].removeprefix("dcpctl: error: ")


def test_a_rollback_notice_is_whole_sentences(tmp_path: Path) -> None:
    """It read "... roll back to 60 Retrying from 60 ...": the rule's reason ran into the next sentence."""
    state = tmp_path / "state.json"
    plan = tmp_path / "failover.toml"
    plan.write_text('[[event]]\naction = "failover"\nvbucket = 0\nseqno = 60\nafter_items = 80\n'
                    '[[event]]\naction = "mutate"\nvbucket = 0\ncount = 20\nafter_items = 80\n')
    with serving("--vbuckets", "1", "--items", "100", "--scenario", str(plan)) as server:
        address = f"127.0.0.1:{server.port}"
        first = run("stream", address, "-F", "jsonl", "--until", "80", "--state", str(state), password=True)
        assert first.returncode == 0, first.stderr
        second = run("stream", address, "-F", "jsonl", "--from", "resume", "--state", str(state), "--until", "now",
                     password=True)
    assert second.returncode == 0, second.stderr
    notice = next(line for line in second.stderr.splitlines() if "roll back from 80" in line)
    assert "roll back to 60. Retrying from 60" in notice, notice


def test_a_stream_that_ends_before_any_item_says_no_items(tmp_path: Path) -> None:
    """It said "after 0 items, last seqno None"."""
    records = session_records()
    opened = next(i for i, r in enumerate(records) if r["opcode"] == "DCP_STREAM_REQ" and r.get("status") == "Success")
    end = next(r for r in records if r["opcode"] == "DCP_STREAM_END")
    capture = tmp_path / "empty-stream.pcap"
    capture.write_bytes(write_capture([(from_client(r), encode(r)) for r in [*records[:opened + 1], end]]))
    done = run("decode", "-F", "jsonl", str(capture))
    assert done.returncode == 0, done.stderr
    assert "stream ended" in done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "after no items" in said, said
    assert "None" not in said


@pytest.mark.parametrize(("args", "says"), [
    (["decode", "--vbucket", "5-a", "x.pcap"], "--vbucket: not a number or range: '5-a'"),
    (["failover", "localhost:1", "--vbuckets", "5-a"], "--vbuckets: not a number or range: '5-a'"),
    (["decode", "--port", "70000", "x.pcap"], "--port: "),  # was accepted and decoded nothing
    (["rollback", "explain", "--port", "0", "x.pcap"], "--port: "),
])
def test_every_value_error_names_its_option(args: list[str], says: str) -> None:
    assert says in error_line(run(*args), 2)


def test_a_missing_tls_file_is_named() -> None:
    """It said "--tls-cert/--tls-key: [Errno 2] No such file or directory"."""
    line = error_line(run("serve", "--port", "0", "--tls-cert", "nosuch.pem", "--tls-key", "nosuch-key.pem"), 3)
    assert line == "--tls-cert: nosuch.pem: no such file"


def test_a_tls_file_that_is_not_pem_is_named(tmp_path: Path) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_text("not a certificate\n")
    line = error_line(run("serve", "--port", "0", "--tls-cert", str(cert), "--tls-key", str(cert)), 3)
    assert line.startswith(f"--tls-cert {cert}, --tls-key {cert}: not a PEM certificate and its key"), line
    assert "[" not in line
    assert "ssl.c" not in line


@pytest.mark.parametrize(("given", "says"), [
    (["--cacert", "{key}"], "--cacert {key}: not a PEM CA certificate (no certificate or crl found)"),
    (["--cert", "{cert}"], "--cert {cert} (without --key, the key must be in it): not a PEM certificate and its key"),
    (["--cert", "{cert}", "--key", "{cert}"], "--cert {cert}, --key {cert}: not a PEM certificate and its key"),
])
def test_a_client_tls_file_that_does_not_load_is_named(tmp_path: Path, given: list[str], says: str) -> None:
    """These were "TLS handshake failed ([SSL] PEM lib (_ssl.c:3926))", exit 5, a server's fault; the files
    are read before any connection (port 1: nothing is reached)."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost"], capture_output=True, check=True, timeout=60)
    names = {"key": key, "cert": cert}
    for command in (["stream", "127.0.0.1:1", "--until", "now"], ["failover", "127.0.0.1:1"]):
        done = run(*command, *[arg.format(**names) for arg in given], password=True)
        assert error_line(done, 3) == says.format(**names)


def test_a_missing_scenario_names_the_option() -> None:
    assert error_line(run("serve", "--port", "0", "--scenario", "nosuch.toml"), 3) == \
        "--scenario: nosuch.toml: no such file"


@pytest.mark.parametrize(("args", "stdin", "says"), [
    (["rollback", "explain", "--failover-log", "-", "--uuid", "1", "--start", "4"], "{x",
     "--failover-log: standard input is not valid JSON: unexpected character at line 1, column 2"),
    (["rollback", "explain", "--failover-log", "-", "--uuid", "1", "--start", "4"], "",
     "--failover-log: standard input is empty, not JSON"),
    (["encode"], "[1,", "the input is not valid JSON: it ends early at line 1, column 4"),
    (["encode"], '{"magic": "ClientRequest", "opcode": "DCP_NOOP"}\nx\n',
     "record 2 is not valid JSON: unexpected character at line 2, column 1"),
    # orjson says 'unexpected character' of an end after white space: it was worded so
    (["encode"], '{"magic": "ClientRequest", "opcode": "DCP_NOOP"\n',
     "record 1 is not valid JSON: it ends early at line 2, column 1"),
])
def test_bad_json_is_said_with_what_and_where(args: list[str], stdin: str, says: str) -> None:
    """Parser messages ("unexpected character, expected a string key: line 1 column 2 (char 1)") named
    neither the input nor, in plain words, what was wrong."""
    assert error_line(run(*args, stdin=stdin), 3) == says


def test_a_bad_json_file_names_option_and_file(tmp_path: Path) -> None:
    earlier = tmp_path / "before.json"
    earlier.write_text('{"a":\n')
    line = error_line(run("failover", "localhost:1", "--compare", str(earlier), password=True), 3)
    assert line == f"--compare: {earlier} is not valid JSON: it ends early at line 2, column 1"


@pytest.mark.parametrize(("args", "says"), [
    (["rollback", "explain", "--failover-log", "{}", "--uuid", "1", "--start", "4"],
     "--failover-log: {} is not valid JSON: it is not UTF-8 text"),
    (["failover", "localhost:1", "--compare", "{}"], "--compare: {} is not valid JSON: it is not UTF-8 text"),
    (["encode", "{}"], "the input is not UTF-8 text: byte 0xff at offset 52 (line 2)"),
])
def test_a_file_that_is_not_utf8_is_said_so(tmp_path: Path, args: list[str], says: str) -> None:
    """Such a file was said to be empty, and encode replaced the byte and wrote the packet."""
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"magic":"ClientRequest","opcode":"DCP_NOOP"}\n{"k":"\xff"}\n')
    done = run(*[arg.format(bad) for arg in args], password=True)
    assert (error_line(done, 3), done.stdout) == (says.format(bad), "")


def test_a_bad_state_file_is_said_as_json(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text("{nope")
    with serving("--vbuckets", "1", "--items", "10") as server:
        done = run("stream", f"127.0.0.1:{server.port}", "--from", "resume", "--state", str(state), "--until", "now",
                   password=True)
    line = error_line(done, 3)
    assert f"{state} (a dcpctl state file) is not valid JSON: unexpected character at line 1, column 2" in line


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_capture_gives_no_root_advice_to_root() -> None:
    """Root was told that capturing needs root; for a missing interface no privilege is the matter."""
    line = error_line(run("capture", "-i", "nosuch0"), 3)
    assert line.startswith("cannot capture on nosuch0")
    assert "root" not in line


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_capture_says_what_root_lacks() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["setpriv", "--bounding-set=-net_raw,-net_admin", "--inh-caps=-all", sys.executable, "-m",
                           "dcpctl", "capture", "-i", "lo", "-c", "1"], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    line = error_line(done, 3)
    assert "running as root, but without CAP_NET_RAW and CAP_NET_ADMIN" in line, line
    assert "needs root" not in line

