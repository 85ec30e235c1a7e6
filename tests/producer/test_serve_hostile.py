"""``dcpctl serve`` against hostile and broken clients: bounded memory, answers instead of exceptions.

The sans-IO :class:`ProducerConnection` is driven directly (bytes in, bytes out); the denial-of-service
cases are also played against a real ``dcpctl serve`` over sockets, with its memory read from /proc.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servekit import serving
from wire import Client

from dcpctl.dcp.sasl import plain_message
from dcpctl.producer.connection import (
    MAX_SEND_QUEUE_SIZE,
    MAX_UNAUTHENTICATED_PACKET_SIZE,
    Cluster,
    Node,
    ProducerConnection,
)
from dcpctl.producer.store import Bucket, Manifest
from dcpctl.protocol.encode import encode
from dcpctl.protocol.framer import Frame, Framer
from dcpctl.protocol.message import decode
from dcpctl.render.record import record as record_of

END = (1 << 64) - 1
MANIFEST = Manifest(2, {0: (0, "_default"), 8: (0, "a")}, {0: "_default"})


def connection(**options: Any) -> ProducerConnection:
    bucket = Bucket("default", 4, 40, 20, 1, MANIFEST)
    cluster = Cluster(bucket, [("127.0.0.1", 11210)], [0] * 4, {"Administrator": "password"})
    return ProducerConnection(Node(0, cluster), **options)


def packet(**record: Any) -> bytes:
    record.setdefault("magic", "ClientRequest")
    record.setdefault("opaque", 1)
    return encode(record, fix_lengths=True)


def answers(conn: ProducerConnection) -> list[dict[str, Any]]:
    """Every answer the connection has, produce() called until it has nothing more (answers only)."""
    framer = Framer()
    while data := conn.produce(1 << 20, 0):
        framer.feed(data)
    out = []
    for event in framer.events():
        assert isinstance(event, Frame)
        out.append(record_of(decode(event.data, event.offset)))
    return out


BOOTSTRAP = [
    packet(opcode="HELLO", key="t", features=["Xerror", "Collections", "JSON"]),
    packet(opcode="SASL_AUTH", key="PLAIN", value=plain_message("Administrator", "password").hex(),
           value_encoding="hex"),
    packet(opcode="SELECT_BUCKET", key="default"),
    packet(opcode="DCP_OPEN", key="t", seqno=0, flags=1),
    packet(opcode="DCP_CONTROL", key="enable_noop", value="true"),
]


def bootstrapped() -> ProducerConnection:
    conn = connection()
    conn.receive(b"".join(BOOTSTRAP), 0)
    assert [a["status"] for a in answers(conn)] == ["Success"] * len(BOOTSTRAP)
    return conn


def stream_request(value: str, vbucket: int = 0) -> bytes:
    return packet(opcode="DCP_STREAM_REQ", vbucket=vbucket, flags=0, reserved=0, start_seqno=0, end_seqno=END,
                  vbucket_uuid=0, snap_start_seqno=0, snap_end_seqno=0, value=value)


# --- item 10: the send queue and the packet size before authentication --------------------------------
def test_a_client_that_pipelines_without_reading_holds_one_send_queue() -> None:
    conn = connection()
    requests = 5000
    conn.receive(packet(opcode="GET_ERROR_MAP", error_map_version=2) * requests, 0)
    one = len(connection_with_one_error_map().produce(1 << 20, 0))  # bytes of one answer
    assert conn.queued < MAX_SEND_QUEUE_SIZE + one  # not 5,000 answers: the rest wait in the framer
    assert conn.framer.pending > 0
    got = answers(conn)  # as the client reads, the waiting requests are executed, none lost
    assert len(got) == requests
    assert {a["status"] for a in got} == {"Success"}


def connection_with_one_error_map() -> ProducerConnection:
    conn = connection()
    conn.receive(packet(opcode="GET_ERROR_MAP", error_map_version=2), 0)
    return conn


def test_the_send_queue_limit_is_an_option_of_the_connection() -> None:
    conn = connection(max_send_queue_size=1)
    conn.receive(packet(opcode="HELLO", key="t") * 3, 0)
    assert len(conn.out) == 1  # one answer may overshoot the limit, as on the server; then requests wait
    assert len(answers(conn)) == 3


def test_a_long_packet_before_authentication_disconnects_without_being_buffered() -> None:
    conn = connection()
    header = packet(opcode="HELLO", key="x")[:24]
    conn.receive(header[:8] + (22 << 20).to_bytes(4, "big") + header[12:], 0)  # announces 22 MiB
    assert conn.closed is not None
    assert "before authentication" in conn.closed
    assert str(MAX_UNAUTHENTICATED_PACKET_SIZE) in conn.closed


def features(size: int) -> dict[str, Any]:
    """A HELLO of ``size`` bytes in all, its value feature 0 (unknown, ignored) again and again: a key is at
    most 250 bytes, so the value carries the length."""
    return {"opcode": "HELLO", "value": "00" * (size - 24), "value_encoding": "hex"}


def test_the_limit_before_authentication_is_kv_engines_and_is_lifted_by_sasl() -> None:
    at_limit = packet(**features(MAX_UNAUTHENTICATED_PACKET_SIZE))
    assert len(at_limit) == MAX_UNAUTHENTICATED_PACKET_SIZE
    conn = connection()
    conn.receive(at_limit, 0)
    assert conn.closed is None
    assert [a["status"] for a in answers(conn)] == ["Success"]
    conn.receive(packet(**features(MAX_UNAUTHENTICATED_PACKET_SIZE + 1)), 0)  # a byte over
    assert conn.closed is not None
    authenticated = bootstrapped()
    authenticated.receive(packet(opcode="DCP_CONTROL", key="k", value="x" * (1 << 20)), 0)
    assert authenticated.closed is None
    assert [a["status"] for a in answers(authenticated)] == ["Einval"]
    header = packet(opcode="DCP_CONTROL", key="k")[:24]
    authenticated.receive(header[:8] + (1 << 30).to_bytes(4, "big") + header[12:], 0)
    assert authenticated.closed is not None
    assert "max_packet_size" in authenticated.closed


def test_a_larger_limit_before_authentication_is_not_lowered_by_sasl() -> None:
    conn = connection(max_unauthenticated_packet_size=30 << 20)
    conn.receive(b"".join(BOOTSTRAP), 0)
    assert conn.framer.max_body_length == (30 << 20) - 24


def test_sasl_in_the_same_read_as_a_long_packet_lifts_the_limit_for_it() -> None:
    conn = connection()
    conn.receive(BOOTSTRAP[1] + packet(opcode="HELLO", key="x" * 200, features=["JSON"]) + packet(
        opcode="DCP_CONTROL", key="k", value="x" * (100 << 10)), 0)
    assert conn.closed is None
    assert [a["status"] for a in answers(conn)] == ["Success", "Success", "Einval"]


# --- items 16 and 19: answers, never exceptions -------------------------------------------------------
@pytest.mark.parametrize("value", ["[" * 5000 + "]" * 5000, '{"sid":' + "[" * 5000 + "]" * 5000 + "}",
                                   '{"purge_seqno":1e999}', '{"sid":1e999}', '{"uid":"0","x":"\\ud800"}',
                                   '{"purge_seqno":"' + "9" * 5000 + '"}'])
def test_a_hostile_stream_request_value_is_einval(value: str) -> None:
    conn = bootstrapped()
    conn.receive(stream_request(value), 0)
    assert conn.closed is None
    assert [a["status"] for a in answers(conn)] == ["Einval"]


@pytest.mark.parametrize(("key", "value"), [("connection_buffer_size", "\u00b2"),
                                            ("connection_buffer_size", "9" * 5000),
                                            ("connection_buffer_size", "\u0661\u0662"),
                                            ("connection_buffer_size", str(1 << 32)),
                                            ("set_noop_interval", "1e999"), ("set_noop_interval", "nan")])
def test_a_hostile_control_value_is_einval(key: str, value: str) -> None:
    conn = bootstrapped()
    conn.receive(packet(opcode="DCP_CONTROL", key=key, value=value), 0)
    assert conn.closed is None
    assert [a["status"] for a in answers(conn)] == ["Einval"]


@pytest.mark.parametrize("proof", ["a", "!!!!", "\u00e9t\u00e9", ""])
def test_a_scram_proof_that_is_not_base64_is_an_auth_error(proof: str) -> None:
    conn = connection()
    conn.receive(packet(opcode="SASL_AUTH", key="SCRAM-SHA512", value="n,,n=Administrator,r=abc"), 0)
    (challenge,) = answers(conn)
    nonce = challenge["value"].split(",")[0][2:]
    conn.receive(packet(opcode="SASL_STEP", key="SCRAM-SHA512", value=f"c=biws,r={nonce},p={proof}"), 0)
    assert conn.closed is None
    assert [a["status"] for a in answers(conn)] == ["AuthError"]
    assert conn.user is None


# --- fuzz: the connection never raises ----------------------------------------------------------------
def drive(conn: ProducerConnection, data: bytes, chunks: list[int]) -> None:
    """Feed ``data`` in the given chunk sizes with the clock moving; every output must be whole packets."""
    framer = Framer()
    at = 0
    for i, size in enumerate([*chunks, len(data)]):
        conn.receive(data[at:at + size], float(i))
        at += size
        conn.tick(float(i) + 0.5)
        framer.feed(conn.produce(1 << 16, 50))
        if conn.closed or at >= len(data):
            break
    for event in framer.events():
        assert isinstance(event, Frame)  # the server's own output always frames
    assert framer.pending == 0


def mutated(data: bytes, edits: list[tuple[int, int, int]]) -> bytes:
    buffer = bytearray(data)
    for kind, where, byte in edits:
        if not buffer:
            break
        at = where % len(buffer)
        if kind == 0:
            buffer[at] = byte
        elif kind == 1:
            del buffer[at]
        elif kind == 2:
            buffer.insert(at, byte)
        else:
            del buffer[at:]
    return bytes(buffer)


SESSION = b"".join([*BOOTSTRAP, packet(opcode="GET_CLUSTER_CONFIG"), packet(opcode="GET_ALL_VB_SEQNOS"),
                    packet(opcode="DCP_CONTROL", key="connection_buffer_size", value="4096"),
                    stream_request('{"collections":["8"]}', 1), stream_request("", 2),
                    packet(opcode="DCP_BUFFER_ACKNOWLEDGEMENT", bytes_to_ack=1000),
                    packet(opcode="STAT", key="dcp"), packet(opcode="DCP_CLOSE_STREAM", vbucket=2)])
EDITS = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1 << 16), st.integers(0, 255)), max_size=8)
CHUNKS = st.lists(st.integers(1, 4096), max_size=6)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(edits=EDITS, chunks=CHUNKS)
def test_fuzz_mutated_bootstraps_never_raise(edits: list[tuple[int, int, int]], chunks: list[int]) -> None:
    drive(connection(), mutated(SESSION, edits), chunks)


@st.composite
def packets(draw: st.DrawFn) -> bytes:
    """A header with a random opcode, magic and lengths that may or may not fit, and a random body."""
    magic = draw(st.sampled_from([0x80, 0x81, 0x08, 0x18, 0x82, draw(st.integers(0, 255))]))
    extras = draw(st.binary(max_size=56))
    key = draw(st.binary(max_size=40))
    value = draw(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                           st.sampled_from([b'{"sid":1}', b'{"collections":["0","8"]}', b'{"purge_seqno":"5"}',
                                            b'{"scope":"0"}', b"[" * 2000])))
    body = extras + key + value
    header = bytes([magic, draw(st.integers(0, 255))]) + len(key).to_bytes(2, "big")
    header += bytes([len(extras), draw(st.integers(0, 255))])
    header += draw(st.integers(0, 0xFFFF)).to_bytes(2, "big") + len(body).to_bytes(4, "big")
    header += draw(st.binary(min_size=12, max_size=12))
    return header + body


@FUZZ
@given(prefix=st.integers(0, len(BOOTSTRAP)), fuzzed=st.lists(packets(), min_size=1, max_size=6), chunks=CHUNKS)
def test_fuzz_random_packets_after_any_bootstrap_step_never_raise(prefix: int, fuzzed: list[bytes],
                                                                  chunks: list[int]) -> None:
    drive(connection(), b"".join(BOOTSTRAP[:prefix]) + b"".join(fuzzed), chunks)


@FUZZ
@given(data=st.binary(max_size=2048), chunks=CHUNKS)
def test_fuzz_random_bytes_never_raise(data: bytes, chunks: list[int]) -> None:
    drive(connection(), data, chunks)


# --- the denial-of-service cases against a real server -------------------------------------------------
def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_pipelining_client_that_never_reads_neither_grows_serve_nor_blocks_others() -> None:
    with serving("--vbuckets", "8") as server:
        before = rss(server.process.pid)
        batch = packet(opcode="GET_ERROR_MAP", error_map_version=2) * 4096
        stop = threading.Event()

        def attack() -> None:
            with socket.create_connection(("127.0.0.1", server.port)) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.settimeout(0.2)
                while not stop.is_set():
                    try:
                        sock.send(batch)
                    except TimeoutError:
                        continue
                    except OSError:
                        return

        thread = threading.Thread(target=attack, daemon=True)
        thread.start()
        try:
            time.sleep(4)  # unbounded, this grew serve by more than 50 MB (1.78 GB in 40 s)
            grown = rss(server.process.pid) - before
            started = time.monotonic()
            other = Client(server.port, timeout=5)
            other.hello("Xerror")
            assert other.plain()["status"] == "Success"
            assert other.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
            assert other.call(opcode="GET_CLUSTER_CONFIG")["status"] == "Success"
            assert time.monotonic() - started < 2
        finally:
            stop.set()
            thread.join(5)
        assert grown < 20 << 20, f"serve grew by {grown >> 20} MiB"


def test_a_huge_body_announced_before_sasl_is_disconnected_unbuffered() -> None:
    with serving("--vbuckets", "8") as server:
        before = rss(server.process.pid)
        header = packet(opcode="HELLO", key="x")[:24]
        cut = 0
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
                sock.sendall(header[:8] + (22 << 20).to_bytes(4, "big") + header[12:])
                try:
                    for _ in range(22):
                        sock.sendall(b"x" * (1 << 20))
                except OSError:  # reset: the server closed the connection after the header
                    cut += 1
                else:
                    assert sock.recv(1) == b""  # closed, with no answer
                    cut += 1
        assert cut == 5
        assert rss(server.process.pid) - before < 10 << 20  # 5 x 22 MiB would be 110 MB
        assert Client(server.port).hello("Xerror")["status"] == "Success"


def test_the_limits_are_options(tmp_path: Path) -> None:
    with serving("--vbuckets", "8", "--max-unauthenticated-packet-size", "100000") as server:
        client = Client(server.port)
        assert client.call(**features(50000))["status"] == "Success"
    result = subprocess.run([sys.executable, "-m", "dcpctl", "serve", "--port", "0", "--max-send-queue-size", "0"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


# --- item 25: a scenario naming what the cluster does not have ----------------------------------------
@pytest.mark.parametrize(("text", "message"), [
    ('[[event]]\naction = "failover"\nvbucket = 8\n', "vbucket 8 does not exist (the bucket has 8"),
    ('[[event]]\naction = "move"\nvbucket = 1\nnode = 2\n', "node 2 does not exist (the cluster has 1"),
    ('[[event]]\naction = "purge"\nvbucket = inf\nseqno = 1\n', "vbucket must be an integer >= 0"),
    ('[[event]]\naction = "purge"\nvbucket = 1.5\nseqno = 1\n', "vbucket must be an integer >= 0"),
    ('[[event]]\naction = "delay"\nseconds = nan\n', "seconds must be a number >= 0"),
    ("x = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("event = " + "{a=" * 3000 + "1" + "}" * 3000 + "\n", "nested too deeply"),
    ("event = 5\n", "event must be an array of tables"),
    ('event = {action="disconnect"}\n', "event must be an array of tables"),
])
def test_a_scenario_naming_a_missing_vbucket_or_node_is_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    result = subprocess.run([sys.executable, "-m", "dcpctl", "serve", "--port", "0", "--vbuckets", "8",
                             "--scenario", str(path)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1
    assert message in result.stderr


@pytest.mark.parametrize(("text", "message"), [
    ("[" * 5000 + "]" * 5000, "nested more than 1024 levels deep"),
    ('{"uid":"1","scopes":[{"uid":"0","name":"_default","collections":[{"uid":"' + "f" * 50 + '","name":"c"}]}]}',
     "is not a hex u32"),
    ('{"uid":"1","scopes":[{"uid":"0","name":"_default","collections":[{"uid":"-8","name":"c"}]}]}',
     "uid -8 is not a hex u32"),
    ('{"uid":"1","scopes":[{"uid":"0","name":"_default","collections":[{"uid":"\\u001b[2J","name":"c"}]}]}',
     "uid \\x1b[2J is not"),
    # ns_server's maxTTL is -1, 0 or seconds up to 2^31-1; kv_engine refuses a manifest without the default scope
    ('{"uid":"1","scopes":[{"uid":"0","name":"_default","collections":[{"uid":"8","name":"c","maxTTL":-5}]}]}',
     "maxTTL -5 is not -1, 0 or seconds up to 2147483647"),
    ('{"uid":"1","scopes":[{"uid":"8","name":"s","collections":[{"uid":"8","name":"c"}]}]}',
     "not a collections manifest (the default scope was not defined)"),
])
def test_a_hostile_collections_manifest_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "manifest.json"
    path.write_text(text)
    result = subprocess.run([sys.executable, "-m", "dcpctl", "serve", "--port", "0", "--collections", str(path)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1
    assert message in result.stderr
    assert "\x1b" not in result.stderr


def test_an_ipv6_node_is_bracketed_in_the_server_list() -> None:
    # issue 17, item 23: "::1:11210" cannot be split back into a host and a port
    cluster = Cluster(Bucket("default", 2, 0, 10, 1), [("::1", 11210), ("::", 11211)], [0, 1], {})
    config = cluster.config("fe80::2")
    assert config["vBucketServerMap"]["serverList"] == ["[::1]:11210", "[fe80::2]:11211"]
    assert [n["hostname"] for n in config["nodesExt"]] == ["::1", "fe80::2"]
