"""The live commands against a hostile server (a socket server in the test), bad addresses and options: one
line, the documented exit code, bounded memory and time; IPv6 against ``dcpctl serve --host ::1``."""

from __future__ import annotations

import io
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostilekit import (
    Script,
    cluster_config,
    flood,
    hostile,
    noops_never_reading,
    response,
    rollback_then_flood,
    scram_challenge,
)
from peakkit import run_with_peak
from servekit import free_port, serving

from dcpctl.cli import main
from dcpctl.client.connection import BOOTSTRAP_QUEUE_LIMIT, queue_limit
from dcpctl.dcp.sasl import MAX_SCRAM_ITERATIONS
from dcpctl.exitcode import ExitCode
from dcpctl.protocol import build
from dcpctl.protocol.constants import Opcode, StreamEndStatus
from dcpctl.protocol.encode import encode
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH
from dcpctl.protocol.message import Message
from dcpctl.protocol.registry import HEADER_LAYOUT
from dcpctl.render.env import Environment


@pytest.fixture(autouse=True)
def _password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCPCTL_PASSWORD", "password")


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = Environment(stdout=out, stderr=err, stdin=io.BytesIO(), stdout_isatty=False, stderr_isatty=False,
                      color=False, width=200)
    return main(list(args), env), out.getvalue(), err.getvalue()


def one_line(err: str) -> None:
    assert err.count("\n") == 1, err
    assert err.startswith("dcpctl: error: "), err
    assert "Traceback" not in err


def test_a_flood_while_waiting_for_sasl_is_refused_in_bounded_memory() -> None:
    """The server floods noops instead of answering SASL_LIST_MECHS: the client holds at most its bootstrap
    queue, then gives up (exit 8) long before --timeout; its peak memory stays far from the flood's size."""
    with hostile(lambda request, sock: flood(request, sock) if request.opcode_name == "SASL_LIST_MECHS"
                 else None) as server:
        started = time.monotonic()
        code, stderr, peak_mb = run_with_peak([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}",
                                               "--timeout", "20"], env={**os.environ, "DCPCTL_PASSWORD": "x"},
                                              timeout=60)
        elapsed = time.monotonic() - started
    assert code == ExitCode.PROTOCOL, stderr
    one_line(stderr)
    assert "waited for the answer to SASL_LIST_MECHS" in stderr
    assert elapsed < 15  # refused, not timed out
    assert peak_mb < 200 + BOOTSTRAP_QUEUE_LIMIT / 2**20, peak_mb


def test_a_flood_while_a_stream_waits_for_an_answer_is_bounded_by_the_window() -> None:
    """After DCP_OPEN the bound is the flow-control window's: a flood while the client asks for the failover
    log (to explain a rollback) ends the stream (exit 8), and is not taken for a server without the log."""
    window = 100_000
    with hostile(rollback_then_flood) as server:
        done = subprocess.run([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}", "--timeout",
                               "20", "--buffer-size", str(window)], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "DCPCTL_PASSWORD": "x"}, check=False)
    assert done.returncode == ExitCode.PROTOCOL, done.stderr
    assert done.stderr.count("dcpctl: error: ") == 1
    assert "Traceback" not in done.stderr
    assert f"waited for the answer to GET_FAILOVER_LOG vbucket 0, more than flow control allows " \
        f"({queue_limit(window)})" in done.stderr


def oversized_item(request: Message, sock: socket.socket) -> bytes | None:
    """One vbucket, whose stream opens; then an item whose header announces a body past the client's limit,
    and a little of that body, and nothing more (the connection stays open)."""
    name = request.opcode_name
    if name == "GET_ALL_VB_SEQNOS":
        return response(request, vbucket_seqnos=[{"vbucket": 0, "seqno": 5}])
    if name == "DCP_STREAM_REQ":
        header = bytearray(build.request(Opcode.DCP_MUTATION, opaque=request.opaque, key=b"k", value=b"v",
                                         by_seqno=1, rev_seqno=1, flags=0, expiration=0, lock_time=0, nmeta=0,
                                         nru=0)[:HEADER_LAYOUT.size])
        at = HEADER_LAYOUT.offset("total_body_length")
        header[at:at + 4] = (DEFAULT_MAX_BODY_LENGTH + 1).to_bytes(4, "big")
        sock.sendall(response(request, failover_log=[{"vbucket_uuid": 1, "seqno": 0}]) + bytes(header) + b"x" * 999)
        return b""
    return None


@pytest.mark.parametrize("mode", [["--summary"], ["-F", "jsonl"], ["-F", "json"]])
def test_an_item_longer_than_the_limit_ends_every_path_at_once(mode: list[str]) -> None:
    """The quiet path (--summary) used to wait for the rest of such a body (until the noop deadline, holding
    whatever came): every path now says at once that the server sent something that is not a packet."""
    with hostile(oversized_item) as server:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}", "--timeout",
                               "5", *mode], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "DCPCTL_PASSWORD": "x"}, check=False)
    assert done.returncode == ExitCode.PROTOCOL, done.stderr
    assert "the server sent bytes that are not a packet" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - started < 30


def test_a_server_that_stops_reading_gets_the_timeout_not_a_broken_connection() -> None:
    """The client answers every noop; a server that no longer reads fills the client's send buffer. The
    socket was left non-blocking by the last read: the answer failed at once with EAGAIN (exit 5)."""
    with hostile(noops_never_reading) as server:
        code, _, err = run("stream", f"127.0.0.1:{server.port}", "-F", "jsonl", "--timeout", "1")
    assert code == ExitCode.TIMEOUT, err
    assert "the server stopped reading for 1 s" in err


@pytest.mark.parametrize(("iterations", "salt", "expect"), [
    ("2000000000", "c2FsdA==", f"more than {MAX_SCRAM_ITERATIONS}"),
    (str(2**64), "c2FsdA==", f"more than {MAX_SCRAM_ITERATIONS}"),
    ("0", "c2FsdA==", "iteration count 0"),
    ("4096", "not*base64", "not base64"),
])
def test_a_scram_challenge_no_client_should_run_is_an_auth_error(iterations: str, salt: str, expect: str) -> None:
    with hostile(scram_challenge(iterations, salt)) as server:
        started = time.monotonic()
        code, _, err = run("stream", f"127.0.0.1:{server.port}", "--timeout", "5")
    assert code == ExitCode.AUTH, err
    one_line(err)
    assert expect in err
    assert time.monotonic() - started < 5


def test_max_scram_iterations_can_be_lowered() -> None:
    with hostile(scram_challenge("4096")) as server:
        code, _, err = run("failover", f"127.0.0.1:{server.port}", "--timeout", "5", "--max-scram-iterations",
                           "1000")
    assert code == ExitCode.AUTH, err
    assert "4096 SCRAM iterations, more than 1000" in err


DEEP = b"[" * 5000 + b"]" * 5000


@pytest.mark.parametrize(("config", "expect"), [
    (b"{not json", "is not valid JSON"),
    (b"[1, 2]", "is not a JSON object"),
    (DEEP, "is not valid JSON"),
    (b'{"vBucketServerMap": [1]}', "vBucketServerMap that is not an object"),
    (b'{"vBucketServerMap": {"serverList": [1], "vBucketMap": [[0]]}}', "serverList"),
    (b'{"vBucketServerMap": {"serverList": ["h:1"], "vBucketMap": {"0": 0}}}', "vBucketMap"),
    (b'{"vBucketServerMap": {"serverList": ["h:1"], "vBucketMap": [["0"]]}}', "vBucketMap"),
    (b'{"vBucketServerMap": {"serverList": ["h:1"], "vBucketMap": [[1e999]]}}', "is not valid JSON"),
    (b'{"vBucketServerMap": {"serverList": ["h:99999"], "vBucketMap": [[0]]}}', "lists a server"),
    (b'{"vBucketServerMap": {"serverList": ["h"], "vBucketMap": [[0]]}}', "lists a server"),
    (b'{"nodesExt": {}, "vBucketServerMap": {"serverList": ["h:1"], "vBucketMap": [[0]]}}', "nodesExt"),
    (b'{"vBucketServerMap": {"serverList": ["h:1"], "vBucketMap": [' + b",".join([b"[0]"] * 1025) + b"]}}",
     "maps 1025 vbuckets"),
], ids=lambda value: value[:24] if isinstance(value, bytes) else value)
@pytest.mark.parametrize("command", ["stream", "failover"])
def test_a_cluster_config_that_is_not_one_blames_the_server(command: str, config: bytes, expect: str) -> None:
    with hostile(cluster_config(config)) as server:
        code, _, err = run(command, f"127.0.0.1:{server.port}", "--timeout", "5")
    assert code == ExitCode.PROTOCOL, err
    one_line(err)
    assert "the server's cluster config" in err
    assert expect in err


def test_a_tls_cluster_config_of_wrong_types_inside_nodes_ext_is_passed_over() -> None:
    from dcpctl.client.streamer import kv_servers  # noqa: PLC0415 - the one function this test is about

    config = {"vBucketServerMap": {"serverList": ["a:1", "[::1]:2"]},
              "nodesExt": [{"services": []}, {"hostname": 5, "services": {"kv": "2", "kvSSL": 2**70}}, 3]}
    assert kv_servers(config, "seed", 1, tls=True) == [("a", 1), ("::1", 2)]


@pytest.mark.parametrize(("args", "code", "expect"), [
    (["stream", "127.0.0.1:abc"], ExitCode.USAGE, "port must be a number"),
    (["stream", "127.0.0.1:99999"], ExitCode.USAGE, "port must be a number"),
    (["stream", ":11210"], ExitCode.USAGE, "no host name"),
    (["stream", "[::1"], ExitCode.USAGE, "[ADDRESS]:PORT"),
    (["failover", "127.0.0.1:0"], ExitCode.USAGE, "port must be a number"),
    (["rollback", "negotiate", "127.0.0.1:99999", "--vbucket", "0"], ExitCode.USAGE, "port must be a number"),
    (["rollback", "negotiate", "127.0.0.1", "--vbucket", "0", "--uuid", "1", "--seqno", str(2**64)], ExitCode.USAGE,
     "--seqno: at most"),
    (["rollback", "negotiate", "127.0.0.1", "--vbucket", "0", "--uuid", str(2**70), "--seqno", "1"], ExitCode.USAGE,
     "--uuid: at most"),
    (["stream", "127.0.0.1", "--sasl-mech", "FOO"], ExitCode.USAGE, "dcpctl authenticates with"),
    (["failover", "127.0.0.1", "--sasl-mech", "FOO"], ExitCode.USAGE, "dcpctl authenticates with"),
    (["stream", "127.0.0.1", "--from", str(2**70)], ExitCode.USAGE, "--from"),
    (["stream", "127.0.0.1", "--until", str(2**64)], ExitCode.USAGE, "--until"),
    (["stream", "127.0.0.1", "--from", "\N{SUPERSCRIPT TWO}"], ExitCode.USAGE, "--from"),
    (["stream", "127.0.0.1", "--control", "connection_buffer_size=abc"], ExitCode.USAGE, "connection_buffer_size"),
    (["stream", "127.0.0.1", "--control", f"connection_buffer_size={2**32}"], ExitCode.USAGE, "0 to 4294967295"),
    (["stream", "127.0.0.1", "--buffer-size", str(2**32)], ExitCode.USAGE, "--buffer-size"),
    (["stream", "127.0.0.1", "--vbuckets", "0-999999999"], ExitCode.USAGE, "vbuckets are 0 to 1023"),
    (["stream", "127.0.0.1", "--vbuckets", "5-3"], ExitCode.USAGE, "vbuckets are 0 to 1023"),
    (["stream", "127.0.0.1", "--vbuckets", "\N{SUPERSCRIPT TWO}"], ExitCode.USAGE, "not a number"),
    (["failover", "127.0.0.1", "--vbuckets", "1024"], ExitCode.USAGE, "vbuckets are 0 to 1023"),
    (["decode", "-", "--vbucket", "0-4294967295"], ExitCode.USAGE, "vbuckets are 0 to 1023"),
])
def test_bad_addresses_and_options_are_usage_errors_before_connecting(args: list[str], code: ExitCode,
                                                                       expect: str) -> None:
    started = time.monotonic()
    got, _, err = run(*args, "--timeout", "5") if args[0] != "decode" else run(*args)
    assert got == code, err
    assert "Traceback" not in err, err
    assert expect in err, err
    assert time.monotonic() - started < 2  # nothing was waited for


def test_a_password_file_that_is_not_utf8_is_an_input_error(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"\xff\xfe\n")
    for command in (["stream"], ["failover"], ["rollback", "negotiate"]):
        extra = ["--vbucket", "0", "--uuid", "1", "--seqno", "0"] if command[0] == "rollback" else []
        code, _, err = run(*command, f"127.0.0.1:{free_port()}", "--password-file", str(secret), *extra)
        assert code == ExitCode.INPUT, err
        one_line(err)
        assert "not UTF-8" in err


def test_compare_with_deep_or_wrong_json_is_one_line(tmp_path: Path) -> None:
    for body in (DEEP, b'{"vbucket": 1}', b"[1e999]", b'[{"vbucket": [1]}]', b"\xff"):
        earlier = tmp_path / "earlier.json"
        earlier.write_bytes(body)
        code, _, err = run("failover", f"127.0.0.1:{free_port()}", "--compare", str(earlier))
        assert code == ExitCode.INPUT, (body[:20], err)
        one_line(err)
        assert "--compare" in err


def test_write_with_a_host_name_records_addresses(tmp_path: Path) -> None:
    """The README's ``stream localhost --write more.pcap``: the capture names the address connected to."""
    capture = tmp_path / "more.pcap"
    with serving("--vbuckets", "2", "--items", "10") as server:
        code, out, err = run("stream", f"localhost:{server.port}", "--until", "now", "-F", "jsonl", "--write",
                             str(capture), "--timeout", "5")
    assert code == ExitCode.OK, err
    live = [json.loads(line) for line in out.splitlines()]
    code, out, err = run("decode", str(capture), "-F", "jsonl", "--port", str(server.port))
    assert code == ExitCode.OK, err
    captured = [json.loads(line) for line in out.splitlines() if '"server>client"' in line]
    assert [r["by_seqno"] for r in live if "by_seqno" in r] == \
        [r["by_seqno"] for r in captured if "by_seqno" in r and r["opcode"].startswith("DCP_")]
    assert {r["connection"] for r in live} <= {r["connection"] for r in captured}


def test_write_leaves_no_empty_capture_when_nothing_was_reached(tmp_path: Path) -> None:
    capture = tmp_path / "more.pcap"
    code, _, err = run("stream", f"127.0.0.1:{free_port()}", "--write", str(capture), "--timeout", "5")
    assert code == ExitCode.CONNECTION, err
    one_line(err)
    assert not capture.exists()


def _ipv6() -> bool:
    try:
        import socket  # noqa: PLC0415 - only to ask whether this machine has ::1

        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6(), reason="no IPv6 loopback on this machine")
def test_ipv6_stream_and_failover_follow_the_cluster_map() -> None:
    with serving("--host", "::1", "--vbuckets", "4", "--items", "20", "--nodes", "2") as server:
        code, out, err = run("stream", f"[::1]:{server.port}", "--until", "now", "-F", "jsonl", "--timeout", "5")
        assert code == ExitCode.OK, err
        records = [json.loads(line) for line in out.splitlines()]
        assert sum(1 for r in records if r["opcode"] in ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")) == 20
        assert all(r["connection"].endswith(tuple(f"> [::1]:{p}" for p in server.ports)) for r in records)
        code, out, err = run("failover", f"[::1]:{server.port}", "-F", "json", "--timeout", "5")
        assert code == ExitCode.OK, err
        rows = json.loads(out)
        assert len(rows) == 4
        assert {r["node"] for r in rows} == {f"[::1]:{p}" for p in server.ports}


def ends_every_stream(requests: list[float]) -> Script:
    """One vbucket with items to come; its stream opens and at once ends (StateChanged), every time, with
    nothing delivered: a faulty server. ``requests`` gets the time of each stream request."""

    def script(request: Message, sock: socket.socket) -> bytes | None:
        name = request.opcode_name
        if name == "GET_ALL_VB_SEQNOS":
            return response(request, vbucket_seqnos=[{"vbucket": 0, "seqno": 5}])
        if name == "DCP_STREAM_REQ":
            requests.append(time.monotonic())
            return response(request, failover_log=[{"vbucket_uuid": 1, "seqno": 0}]) + encode(
                {"magic": "ClientRequest", "opcode": "DCP_STREAM_END", "opaque": request.opaque, "vbucket": 0,
                 "stream_end_status": int(StreamEndStatus.STATE_CHANGED)}, fix_lengths=True)
        return None

    return script


def test_a_stream_that_ends_again_and_again_is_asked_again_later_each_time() -> None:
    """A stream that opens starts the count of tries again (a vbucket that moves often is followed), so one
    that opened and ended at once was asked again at once, for ever: stream spun, a seed connection and a
    stream request each round, thousands a second. With nothing delivered between two ends the wait doubles
    (REROUTE_WAIT, at most MAX_REROUTE_WAIT): a handful of requests in four seconds, never given up on, and
    a stop still exits 0."""
    requests: list[float] = []
    with hostile(ends_every_stream(requests)) as server:
        process = subprocess.Popen([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{server.port}",
                                    "--timeout", "5", "-F", "jsonl"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, env={**os.environ, "DCPCTL_PASSWORD": "x"})
        time.sleep(4)
        process.terminate()
        err = process.communicate(timeout=30)[1]
    assert process.returncode == ExitCode.OK, err
    assert "Traceback" not in err
    assert 4 <= len(requests) <= 8, err  # at once, then after 0.1, 0.2, 0.4, 0.8, 1.6 s
    gaps = [later - earlier for earlier, later in itertools.pairwise(requests)]
    assert all(later > earlier for earlier, later in itertools.pairwise(gaps)), gaps
    assert err.count("vbucket 0: stream ended (StateChanged)") == len(requests), err


@pytest.mark.parametrize("command", [["stream", "--until", "now"], ["failover"]])
def test_a_server_silent_in_the_tls_handshake_is_a_timeout(command: list[str]) -> None:
    """It accepts and says nothing: exit 6, as the same server without --tls gets (was 5, 'TLS handshake
    failed', a connection error)."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        started = time.monotonic()
        code, out, err = run(command[0], f"127.0.0.1:{port}", *command[1:], "--tls", "--no-verify",
                             "--timeout", "1")
    assert (code, out) == (ExitCode.TIMEOUT, ""), err
    one_line(err)
    assert err == f"dcpctl: error: 127.0.0.1:{port}: no answer to the TLS handshake within 1 s\n"
    assert time.monotonic() - started < 20


def malformed_answers(opcode: str) -> Script:
    """One vbucket of seqno 5, whose stream opens, except that ``opcode``'s answer is cut to a value its layout
    cannot hold: a failover log of 2 bytes (not 16-byte entries), a Rollback of none (not its 8-byte seqno)."""

    def script(request: Message, sock: socket.socket) -> bytes | None:
        name = request.opcode_name
        if name == opcode == "GET_FAILOVER_LOG":
            return response(request, value="0011", value_encoding="hex")
        if name == opcode == "DCP_STREAM_REQ":
            return response(request, "Rollback", value="", value_encoding="hex")
        if name == "GET_ALL_VB_SEQNOS":
            return response(request, vbucket_seqnos=[{"vbucket": 0, "seqno": 5}])
        if name == "GET_FAILOVER_LOG":
            return response(request, failover_log=[{"vbucket_uuid": 1, "seqno": 0}])
        if name == "DCP_STREAM_REQ":
            return response(request, failover_log=[{"vbucket_uuid": 1, "seqno": 0}])
        return None

    return script


@pytest.mark.parametrize(("opcode", "command", "says"), [
    # was an empty failover log, exit 0
    ("GET_FAILOVER_LOG", ["failover"], "a malformed answer to GET_FAILOVER_LOG vbucket 0 (failover_log value "
     "has 2 bytes, expected a multiple of 16 bytes)"),
    # was 'the server asks to roll back ... to 0', then the items again from 0, or 30 rounds and exit 9
    ("DCP_STREAM_REQ", ["stream", "--from", "3", "--until", "now"], "a malformed answer to the stream request "
     "for vbucket 0 (DCP_STREAM_REQ must have a value)"),
    ("DCP_STREAM_REQ", ["rollback", "negotiate", "--vbucket", "0", "--uuid", "1", "--seqno", "3"],
     "a malformed answer to DCP_STREAM_REQ vbucket 0 (DCP_STREAM_REQ must have a value)"),
])
def test_an_answer_its_layout_cannot_hold_is_a_protocol_fault(opcode: str, command: list[str], says: str) -> None:
    """Its fields would be read as what the server never said: exit 8, one line naming the server."""
    with hostile(malformed_answers(opcode)) as server:
        words = command[:2] if command[0] == "rollback" else command[:1]
        code, _, err = run(*words, f"127.0.0.1:{server.port}", *command[len(words):], "--timeout", "5")
    assert code == ExitCode.PROTOCOL, err
    one_line(err)
    assert err == f"dcpctl: error: 127.0.0.1:{server.port}: {says}\n"


def one_vbucket_unserved(request: Message, sock: socket.socket) -> bytes | None:
    """Three vbuckets on this server, the map giving vbucket 1 no active node (-1: what a failover with no
    replica to promote leaves); each served one has a log and high seqno 0."""
    name = request.opcode_name
    if name == "GET_CLUSTER_CONFIG":
        config = {"vBucketServerMap": {"serverList": [f"127.0.0.1:{sock.getsockname()[1]}"],
                                       "vBucketMap": [[0], [-1], [0]]}}
        return response(request, value=json.dumps(config).encode().hex(), value_encoding="hex")
    if name == "GET_ALL_VB_SEQNOS":
        return response(request, vbucket_seqnos=[{"vbucket": 0, "seqno": 0}, {"vbucket": 2, "seqno": 0}])
    if name == "GET_FAILOVER_LOG":
        return response(request, failover_log=[{"vbucket_uuid": 7, "seqno": 0}])
    if name == "DCP_STREAM_REQ":  # opened, then ended at once: it is at its end
        return response(request, failover_log=[{"vbucket_uuid": 7, "seqno": 0}]) + encode(
            {"magic": "ClientRequest", "opcode": "DCP_STREAM_END", "opaque": request.opaque,
             "vbucket": request.vbucket, "stream_end_status": 0}, fix_lengths=True)
    return None


def test_a_vbucket_without_an_active_node_is_left_out_of_a_failover_dump() -> None:
    """It is in the map (was 'not in the cluster map', exit 2, and no dump of the others)."""
    with hostile(one_vbucket_unserved) as server:
        code, out, err = run("failover", f"127.0.0.1:{server.port}", "-F", "json", "--timeout", "5")
    assert code == ExitCode.OK, err
    assert [row["vbucket"] for row in json.loads(out)] == [0, 2]
    assert err == "dcpctl: warning: vbucket 1 has no active node in the cluster map (a failover with no replica " \
                  "to promote, until its node is back): not in this dump\n"


@pytest.mark.parametrize("command", [["failover", "--vbuckets", "1"], ["stream", "--vbuckets", "1"],
                                     ["rollback", "negotiate", "--vbucket", "1", "--uuid", "7", "--seqno", "0"]])
def test_only_vbuckets_without_an_active_node_is_a_connection_failure(command: list[str]) -> None:
    with hostile(one_vbucket_unserved) as server:
        words = command[:2] if command[0] == "rollback" else command[:1]
        code, out, err = run(*words, f"127.0.0.1:{server.port}", *command[len(words):], "--timeout", "5")
    assert (code, out) == (ExitCode.CONNECTION, ""), err
    assert err == "dcpctl: error: vbucket 1 has no active node in the cluster map (a failover with no replica to " \
                  "promote, until its node is back)\n"


def test_a_stream_leaves_out_a_vbucket_without_an_active_node() -> None:
    with hostile(one_vbucket_unserved) as server:
        code, _, err = run("stream", f"127.0.0.1:{server.port}", "--until", "now", "--timeout", "5")
    assert code == ExitCode.OK, err
    assert err.startswith("dcpctl: vbucket 1 has no active node in the cluster map (a failover with no replica to "
                          "promote, until its node is back): left out\n"), err


def test_a_vbucket_past_the_map_is_still_the_command_line_s_mistake() -> None:
    with hostile(one_vbucket_unserved) as server:
        code, _, err = run("failover", f"127.0.0.1:{server.port}", "--vbuckets", "3", "--timeout", "5")
    assert code == ExitCode.USAGE
    assert err == "dcpctl: error: vbucket 3 is not in the cluster map (3 vbuckets)\n"


def test_a_vbucket_its_node_does_not_list_has_no_high_seqno_and_a_warning() -> None:
    """The table printed Python's None, JSON a silent null."""
    def script(request: Message, sock: socket.socket) -> bytes | None:
        if request.opcode_name == "GET_ALL_VB_SEQNOS":
            return response(request, vbucket_seqnos=[{"vbucket": 0, "seqno": 0}])
        return one_vbucket_unserved(request, sock)

    with hostile(script) as server:
        code, out, err = run("failover", f"127.0.0.1:{server.port}", "--vbuckets", "0,2", "-F", "json",
                             "--timeout", "5")
        assert code == ExitCode.OK, err
        assert [(row["vbucket"], row["high_seqno"]) for row in json.loads(out)] == [(0, 0), (2, None)]
        assert err == f"dcpctl: warning: 127.0.0.1:{server.port} does not list vbucket 2 as active there " \
                      "(GET_ALL_VB_SEQNOS): the cluster map may be stale; high_seqno null\n"
        code, out, err = run("failover", f"127.0.0.1:{server.port}", "--vbuckets", "2", "-F", "table",
                             "--timeout", "5")
    assert code == ExitCode.OK, err
    assert "None" not in out
    assert "│ 2       │ ?" in out


def items_before_the_answer(request: Message, sock: socket.socket) -> bytes | None:
    """One vbucket of seqno 5, whose stream request is never answered, though its items come."""
    name = request.opcode_name
    if name == "GET_ALL_VB_SEQNOS":
        return response(request, vbucket_seqnos=[{"vbucket": 0, "seqno": 5}])
    if name == "DCP_STREAM_REQ":
        return b"".join(build.request(Opcode.DCP_MUTATION, opaque=request.opaque, key=b"k%d" % seqno, value=b"v",
                                      by_seqno=seqno, rev_seqno=1, flags=0, expiration=0, lock_time=0, nmeta=0,
                                      nru=0) for seqno in range(1, 6))
    return None


@pytest.mark.parametrize("mode", [["-F", "jsonl"], ["--summary"], ["-f", "{by_seqno}"]])
def test_items_before_the_answer_to_their_stream_request_are_a_protocol_fault(mode: list[str],
                                                                             tmp_path: Path) -> None:
    """They were streamed and counted, and the state saved seqno 5 with uuid 0, which a resume could only
    roll back from; every output path now refuses them (exit 8) and saves nothing of them."""
    state = tmp_path / "state.json"
    with hostile(items_before_the_answer) as server:
        code, out, err = run("stream", f"127.0.0.1:{server.port}", "--until", "now", "--timeout", "5",
                             "--state", str(state), *mode)
    assert code == ExitCode.PROTOCOL, err
    assert err.endswith(f"dcpctl: error: 127.0.0.1:{server.port}: sent DCP_MUTATION for vbucket 0 before answering "
                        "its stream request\n"), err
    assert "k1" not in out
    assert "\n1\n" not in f"\n{out}"
    saved = json.loads(state.read_text())["vbuckets"] if state.exists() else {}
    assert saved.get("0", {}).get("seqno", 0) == 0
