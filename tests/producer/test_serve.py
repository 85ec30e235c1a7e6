"""``dcpctl serve`` at the wire level: what a Couchbase data node answers, checked packet by packet."""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servekit import Server, self_signed, serving
from wire import Client

from dcpctl.dcp.rollback import FailoverEntry, StreamRequest, next_request
from dcpctl.dcp.session import ConnectionTracker
from dcpctl.protocol.message import DecodeOptions, decode

ITEMS_PER_VB = 50


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with serving("--vbuckets", "8", "--items", str(8 * ITEMS_PER_VB), "--seed", "7") as running:
        yield running


def connect(server: Server) -> Client:
    return Client(server.port)


# --- bootstrap --------------------------------------------------------------------------------------
def test_commands_before_authentication_are_refused(server: Server) -> None:
    client = connect(server)
    client.hello("Xerror")
    assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "Eaccess"
    assert client.call(opcode="DCP_OPEN", key="x", seqno=0, flags=1)["status"] == "Eaccess"
    # kv_engine lets HELLO, the SASL commands and GET_ERROR_MAP through (Cookie::validateClientRequest), no more
    assert client.call(opcode="NOOP")["status"] == "Eaccess"
    assert client.call(opcode="VERSION")["status"] == "Eaccess"
    assert client.call(opcode="GET_ERROR_MAP", value="0002", value_encoding="hex")["status"] == "Success"
    assert client.call(opcode="SASL_LIST_MECHS")["status"] == "Success"
    legacy = connect(server)  # without XERROR the server cannot say Eaccess: it disconnects
    legacy.send(opcode="SELECT_BUCKET", key="default")
    with pytest.raises(ConnectionError):
        legacy.read()


def test_hello_enables_the_supported_subset_in_request_order(server: Server) -> None:
    reply = connect(server).hello("Collections", "UnorderedExecution", "Xerror", "Duplex", "Tracing", "JSON", "Xattr",
                                  "GetClusterConfigWithKnownVersion")
    assert reply["features"] == ["Collections", "UnorderedExecution", "Xerror", "Duplex", "Tracing", "JSON", "Xattr"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA512", "SCRAM-SHA256", "SCRAM-SHA1", "SCRAM-SHA-512"])
def test_scram_succeeds_with_the_password_and_fails_without(server: Server, mechanism: str) -> None:
    assert connect(server).scram(mechanism)["status"] == "Success"  # the client verified the server's signature
    assert connect(server).scram(mechanism, password="wrong")["status"] == "AuthError"
    assert connect(server).scram(mechanism, user="nobody")["status"] == "AuthError"


def test_plain_and_the_mechanism_list(server: Server) -> None:
    client = connect(server)
    assert client.call(opcode="SASL_LIST_MECHS")["value"].split() == ["SCRAM-SHA512", "SCRAM-SHA256", "SCRAM-SHA1",
                                                                      "PLAIN"]
    assert client.plain(password="nope")["status"] == "AuthError"
    assert client.plain()["status"] == "Success"


def test_bucket_selection_and_the_order_it_imposes(server: Server) -> None:
    client = connect(server)
    client.hello("Xerror")
    client.plain()
    assert client.call(opcode="DCP_OPEN", key="x", seqno=0, flags=1)["status"] == "NoBucket"
    assert client.call(opcode="SELECT_BUCKET", key="nope")["status"] == "KeyEnoent"
    assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
    assert client.call(opcode="DCP_OPEN", key="x", seqno=0, flags=1)["status"] == "Success"
    assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "NotSupported"  # a DCP connection
    assert client.plain()["status"] == "NotSupported"  # SASL is off after DCP_OPEN


@pytest.mark.parametrize(("flags", "status"), [(0x01, "Success"), (0x00, "NotSupported"), (0x02, "Einval"),
                                               (0x01 | 0x08 | 0x40, "Einval"), (0x01 | 0x100, "Einval"),
                                               (0x01 | 0x04 | 0x100, "Success"), (0x10 | 0x01, "Einval"),
                                               (0x01 | 0x400, "Einval"), (0x01 | 0x8000_0000, "Einval")])
def test_dcp_open_flags(server: Server, flags: int, status: str) -> None:
    client = connect(server)
    client.hello("Xerror")
    client.plain()
    client.call(opcode="SELECT_BUCKET", key="default")
    assert client.call(opcode="DCP_OPEN", key="x", seqno=0, flags=flags)["status"] == status


@pytest.mark.parametrize(("key", "value", "status"), [
    ("connection_buffer_size", "1048576", "Success"), ("connection_buffer_size", "lots", "Einval"),
    ("stream_buffer_size", "1024", "NotSupported"), ("enable_noop", "true", "Success"),
    ("set_noop_interval", "0.05", "Einval"), ("set_noop_interval", "120", "Success"),
    ("set_priority", "urgent", "Einval"), ("force_value_compression", "true", "Einval"),  # no HELLO Snappy
    ("enable_expiry_opcode", "true", "Success"), ("enable_stream_id", "true", "Success"),
    ("flatbuffers_system_events", "false", "Einval"), ("change_streams", "true", "NotSupported"),
    ("max_marker_version", "2.2", "NotSupported"),  # no HELLO Collections on this connection
    ("include_deleted_user_xattrs", "true", "Einval"), ("no_such_key", "true", "Einval"),
])
def test_dcp_control_keys_are_checked_as_the_server_checks_them(server: Server, key: str, value: str,
                                                                status: str) -> None:
    client = connect(server)
    client.dcp(controls={})
    assert client.call(opcode="DCP_CONTROL", key=key, value=value)["status"] == status


# --- bucket information -------------------------------------------------------------------------------
def test_failover_log_seqnos_observe_and_stats(server: Server) -> None:
    client = connect(server)
    client.hello("Xerror")
    client.plain()
    client.call(opcode="SELECT_BUCKET", key="default")
    log = client.call(opcode="GET_FAILOVER_LOG", vbucket=3)["failover_log"]
    assert [entry["seqno"] for entry in log] == [0]
    seqnos = client.call(opcode="GET_ALL_VB_SEQNOS")["vbucket_seqnos"]
    assert seqnos == [{"vbucket": vb, "seqno": ITEMS_PER_VB} for vb in range(8)]
    observed = client.call(opcode="OBSERVE_SEQNO", vbucket=3, vbucket_uuid=log[0]["vbucket_uuid"])
    assert (observed["format_type"], observed["current_seqno"]) == (0, ITEMS_PER_VB)
    assert client.call(opcode="OBSERVE_SEQNO", vbucket=3, vbucket_uuid=12345)["status"] == "KeyEnoent"
    assert client.call(opcode="GET_FAILOVER_LOG", vbucket=99)["status"] == "NotMyVbucket"
    assert client.call(opcode="OBSERVE_SEQNO", vbucket=99, vbucket_uuid=12345)["status"] == "NotMyVbucket"
    opaque = client.send(opcode="STAT", key="vbucket-seqno 3")
    stats = {}
    while (reply := client.read())["opaque"] == opaque and reply.get("key"):
        stats[reply["key"]] = reply["value"]
    assert stats["vb_3:high_seqno"] == str(ITEMS_PER_VB)
    assert stats["vb_3:uuid"] == str(log[0]["vbucket_uuid"])
    opaque = client.send(opcode="STAT", key="dcp-vbtakeover 3 replication:a->b")  # as cbstats asks
    stats = {}
    while (reply := client.read())["opaque"] == opaque and reply.get("key"):
        stats[reply["key"]] = reply["value"]
    assert stats["status"] == "connection_does_not_exist"
    assert int(stats["vb_items"]) + int(stats["on_disk_deletes"]) == int(stats["estimate"]) > 0
    errors = json.loads(client.call(opcode="GET_ERROR_MAP", error_map_version=2)["value"])
    assert errors["errors"]["23"]["name"] == "Rollback"


def test_cluster_config_maps_vbuckets_to_nodes() -> None:
    with serving("--nodes", "3", "--vbuckets", "6") as cluster:
        client = Client(cluster.ports[1])
        client.hello("Xerror")
        client.plain()
        client.call(opcode="SELECT_BUCKET", key="default")
        config = json.loads(client.call(opcode="GET_CLUSTER_CONFIG")["value"])
        servers = config["vBucketServerMap"]["serverList"]
        assert servers == [f"127.0.0.1:{p}" for p in cluster.ports]
        assert [row[0] for row in config["vBucketServerMap"]["vBucketMap"]] == [0, 1, 2, 0, 1, 2]
        assert config["nodesExt"][1]["thisNode"] is True
        client.call(opcode="DCP_OPEN", key="x", seqno=0, flags=1)
        client.call(opcode="DCP_CONTROL", key="enable_noop", value="true")
        assert client.stream_request(0)["status"] == "NotMyVbucket"  # vbucket 0 is on node 0
        assert client.stream_request(1)["status"] == "Success"


# --- stream requests ------------------------------------------------------------------------------------
def read_until_silent(client: Client, quiet: float = 0.5) -> list[dict[str, Any]]:
    """Every record until the server sends nothing for ``quiet`` seconds."""
    out = []
    client.sock.settimeout(quiet)
    try:
        while True:
            out.append(client.read())
    except TimeoutError:
        pass
    client.sock.settimeout(10)
    return out


def read_for(client: Client, seconds: float) -> list[dict[str, Any]]:
    """Every record that arrives within ``seconds``."""
    out = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        client.sock.settimeout(left)
        try:
            out.append(client.read())
        except TimeoutError:
            break
    client.sock.settimeout(10)
    return out


def read_until_closed(client: Client) -> list[dict[str, Any]]:
    out = []
    try:
        while True:
            out.append(client.read())
    except ConnectionError:
        return out


def streaming_client(server: Server, *features: str, **controls: str) -> Client:
    client = connect(server)
    client.dcp(*features, controls={"enable_noop": "true", **controls})
    return client


@pytest.mark.parametrize("flags", [0x200, 0x8000_0000, 0x04 | 0x400])
def test_stream_request_with_an_undeclared_flag_bit_is_einval(server: Server, flags: int) -> None:
    client = streaming_client(server)
    assert client.stream_request(3, flags=flags)["status"] == "Einval"  # reference 3.4.2: any unknown bit
    assert client.stream_request(3)["status"] == "Success"  # the refused request opened no stream


def test_stream_request_checks_in_the_servers_order(server: Server) -> None:
    client = streaming_client(server)
    uuid = client.call(opcode="GET_FAILOVER_LOG", vbucket=2)["failover_log"][0]["vbucket_uuid"]
    assert client.stream_request(99)["status"] == "NotMyVbucket"
    assert client.stream_request(2, start=10, end=5)["status"] == "Erange"
    assert client.stream_request(2, start=10, snap=(11, 20))["status"] == "Erange"
    assert client.stream_request(2, start=10, uuid=uuid + 1)["status"] == "Rollback"
    ahead = client.stream_request(2, start=ITEMS_PER_VB + 5, uuid=uuid)  # the client is ahead of the server
    assert (ahead["status"], ahead["rollback_seqno"]) == ("Rollback", ITEMS_PER_VB)
    assert client.stream_request(2, flags=0x08)["status"] == "Einval"  # the obsolete per-stream NoValue
    assert client.stream_request(2, start=10, uuid=uuid)["status"] == "Success"
    assert client.stream_request(2, start=10, uuid=uuid)["status"] == "KeyEexists"
    quiet = connect(server)
    quiet.dcp("Collections", controls={})  # collections without enable_noop
    assert quiet.stream_request(2)["status"] == "NotSupported"


def test_rollback_answer_follows_the_engine_and_the_retry_opens(server: Server) -> None:
    client = streaming_client(server)
    real = client.call(opcode="GET_FAILOVER_LOG", vbucket=4)["failover_log"][0]["vbucket_uuid"]
    request = StreamRequest(start_seqno=30, vbucket_uuid=999, snap_start_seqno=30, snap_end_seqno=30)
    answer = client.stream_request(4, start=30, uuid=999)
    assert (answer["status"], answer["rollback_seqno"]) == ("Rollback", 0)  # an unknown uuid: back to 0
    retry, _ = next_request(request, [FailoverEntry(999, 0)], answer["rollback_seqno"])
    assert client.stream_request(4, start=retry.start_seqno, uuid=retry.vbucket_uuid or real)["status"] == "Success"


def test_a_whole_stream_is_consistent_for_dcpctls_own_checks(server: Server) -> None:
    client = streaming_client(server)
    uuid = client.call(opcode="GET_FAILOVER_LOG", vbucket=5)["failover_log"][0]["vbucket_uuid"]
    assert client.stream_request(5, start=10, end=40, uuid=uuid, snap=(10, 10))["status"] == "Success"
    records = client.until("DCP_STREAM_END")
    items = [r for r in records if r["opcode"] in ("DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION")]
    assert [r["by_seqno"] for r in items] == list(range(11, 41))  # no collections: everything is default
    assert records[0]["opcode"] == "DCP_SNAPSHOT_MARKER"
    assert (records[0]["snap_start_seqno"], records[0]["snap_end_seqno"]) == (10, 40)  # the requested start (3.8)
    assert records[-1]["stream_end_status"] == 0
    assert {r["opcode"] for r in items} >= {"DCP_MUTATION", "DCP_DELETION"}  # expirations as deletions
    assert all(r["diagnostics"] == [] for r in records)
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    tracker.streams_by_opaque[records[0]["opaque"]] = _stream_state(5, records[0]["opaque"])
    for raw in client.raw[-len(records):]:
        assert tracker.observe(decode(raw), False, 0.0).diagnostics == [] or raw[1] == 0x55


def _stream_state(vbucket: int, opaque: int) -> Any:
    from dcpctl.dcp.session import StreamState  # noqa: PLC0415

    return StreamState(vbucket, None, opaque, 10, 40, 0, open=True)


def test_collections_filters_and_stream_ids(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"uid": "3", "scopes": [
        {"name": "_default", "uid": "0", "collections": [{"name": "_default", "uid": "0"}]},
        {"name": "inventory", "uid": "8", "collections": [{"name": "airline", "uid": "9"},
                                                          {"name": "hotel", "uid": "a"}]}]}))
    with serving("--vbuckets", "2", "--items", "200", "--collections", str(manifest)) as running:
        client = streaming_client(running, "Collections", enable_stream_id="true")
        assert client.stream_request(0, end=100)["status"] == "DcpStreamIdInvalid"  # a sid is required
        assert client.stream_request(0, end=100, value='{"sid":0}')["status"] == "DcpStreamIdInvalid"
        unknown = client.stream_request(0, end=100, value='{"sid":1,"collections":["77"]}')
        assert unknown["status"] == "UnknownCollection"
        assert json.loads(unknown["value"]) == {"manifest_uid": "3", "error": {"context": "collection 77"}}
        assert client.stream_request(0, end=100, value='{"sid":1,"collections":["9"]}')["status"] == "Success"
        assert client.stream_request(0, end=100, value='{"sid":2,"scope":"8"}')["status"] == "Success"
        records = client.until("DCP_STREAM_END") + client.until("DCP_STREAM_END")
        by_sid: dict[int, set[int]] = {}
        for record in records:
            if "collection_id" in record:
                by_sid.setdefault(record["stream_id"], set()).add(record["collection_id"])
        assert by_sid == {1: {9}, 2: {9, 10}}


def test_a_collections_stream_from_zero_gets_the_manifests_system_events_on_the_wire(tmp_path: Path) -> None:
    """The manifest as the REST API gives it (ns_server's maxTTL: 0 the bucket's, -1 never, else seconds) opens
    every vbucket's history with its system events (reference 3.16), decoded here from the wire."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"uid": "3", "scopes": [
        {"name": "_default", "uid": "0", "collections": [{"name": "_default", "uid": "0", "maxTTL": 0}]},
        {"name": "inventory", "uid": "8", "collections": [{"name": "airline", "uid": "9", "maxTTL": 0},
                                                          {"name": "hotel", "uid": "a", "maxTTL": 600},
                                                          {"name": "route", "uid": "b", "maxTTL": -1}]}]}))
    with serving("--vbuckets", "2", "--items", "40", "--collections", str(manifest)) as running:
        assert " 2 vbuckets, 40 items;" in running.banner  # the items, not the events' seqnos
        client = streaming_client(running, "Collections")
        assert client.stream_request(1)["status"] == "Success"
        got = client.until("DCP_MUTATION")
        events = [(r["by_seqno"], r["event_id"], r["event_version"], r.get("key"), r["manifest_uid"], r["scope_id"],
                   r.get("collection_id"), r.get("max_ttl")) for r in got if r["opcode"] == "DCP_SYSTEM_EVENT"]
        assert events == [(1, 3, 0, "inventory", 0, 8, None, None), (2, 0, 0, "airline", 0, 8, 9, None),
                          (3, 0, 1, "hotel", 0, 8, 10, 600), (4, 0, 1, "route", 3, 8, 11, 0)]
        assert got[-1]["by_seqno"] == 5  # the first item follows the events
        assert all(r["diagnostics"] == [] for r in got)
        legacy = streaming_client(running)
        assert legacy.stream_request(1, end=24)["status"] == "Success"
        assert "DCP_SYSTEM_EVENT" not in [r["opcode"] for r in legacy.until("DCP_STREAM_END")]
        seqnos = streaming_client(running, "Collections").call(opcode="GET_ALL_VB_SEQNOS", collection_id=11,
                                                               vbucket_state_filter=1)
        assert [e["seqno"] >= 4 for e in seqnos["vbucket_seqnos"]] == [True, True]  # route's event counts
        kv = connect(running)
        kv.hello("Xerror", "JSON")
        kv.plain()
        kv.call(opcode="SELECT_BUCKET", key="default")
        served = json.loads(kv.call(opcode="COLLECTIONS_GET_MANIFEST")["value"])
        assert served["scopes"][1]["collections"] == [  # kv_engine's toJson: memcached's maxTTL, where one is set
            {"name": "airline", "uid": "9"}, {"name": "hotel", "uid": "a", "maxTTL": 600},
            {"name": "route", "uid": "b", "maxTTL": 0}]


def _manifest_json(uid: str, *collections: tuple[str, str]) -> str:
    return json.dumps({"uid": uid, "scopes": [
        {"name": "_default", "uid": "0", "collections": [{"name": "_default", "uid": "0"}]},
        {"name": "inventory", "uid": "8", "collections": [{"name": n, "uid": u} for n, u in collections]}]})


def test_a_scenarios_manifest_drops_a_collection_under_its_streams(tmp_path: Path) -> None:
    """ns_server pushes a manifest without airline: the stream filtered on it gets the drop and ends
    FilterEmpty, a write to it UnknownCollection with the new uid, and COLLECTIONS_GET_MANIFEST the new
    manifest."""
    (tmp_path / "first.json").write_text(_manifest_json("3", ("airline", "9"), ("hotel", "a")))
    (tmp_path / "second.json").write_text(_manifest_json("4", ("hotel", "a")))
    plan = scenario(tmp_path, '[[event]]\naction = "manifest"\nfile = "second.json"\nafter_seconds = 1\n')
    with serving("--vbuckets", "1", "--items", "40", "--collections", str(tmp_path / "first.json"),
                 "--scenario", plan) as running:
        client = streaming_client(running, "Collections")
        assert client.stream_request(0, value='{"collections":["9"]}')["status"] == "Success"
        got = client.until("DCP_STREAM_END")
        drop = [r for r in got if r["opcode"] == "DCP_SYSTEM_EVENT"][-1]
        assert (drop["event_id"], drop["collection_id"], drop["manifest_uid"]) == (1, 9, 4)
        assert got[-1]["stream_end_status"] == 7  # FilterEmpty
        kv = connect(running)
        kv.hello("Xerror", "JSON", "Collections")
        kv.plain()
        kv.call(opcode="SELECT_BUCKET", key="default")
        refused = kv.call(opcode="SET", vbucket=0, collection_id=9, key="k", value="{}", flags=0, expiration=0)
        assert refused["status"] == "UnknownCollection"
        assert json.loads(refused["value"])["manifest_uid"] == "4"
        served = json.loads(kv.call(opcode="COLLECTIONS_GET_MANIFEST")["value"])
        assert (served["uid"], [c["name"] for c in served["scopes"][1]["collections"]]) == ("4", ["hotel"])


def test_a_manifests_events_count_as_items_sent(tmp_path: Path) -> None:
    """after_items counts every message of a seqno a stream is sent, system events too (the manifest's history
    and a change's events), as items_sent does: the disconnect comes after the 8th, the change's event."""
    (tmp_path / "first.json").write_text(_manifest_json("3", ("airline", "9")))
    (tmp_path / "second.json").write_text(_manifest_json("4", ("airline", "9"), ("hotel", "a")))
    plan = scenario(tmp_path, '[[event]]\naction = "manifest"\nfile = "second.json"\nafter_items = 5\n'
                              '[[event]]\naction = "disconnect"\nafter_items = 8\n')
    with serving("--vbuckets", "1", "--items", "5", "--collections", str(tmp_path / "first.json"),
                 "--scenario", plan) as running:
        client = streaming_client(running, "Collections")
        assert client.stream_request(0)["status"] == "Success"
        seqnos = [(r["opcode"], r["by_seqno"]) for r in read_until_closed(client) if "by_seqno" in r]
    assert [seqno for _, seqno in seqnos] == list(range(1, 9))
    events = [seqno for opcode, seqno in seqnos if opcode == "DCP_SYSTEM_EVENT"]
    assert events == [1, 2, 8]  # inventory's and airline's creation; hotel's, after the 5 items, at the change


@pytest.mark.parametrize(("second", "message"), [
    (_manifest_json("3", ("airline", "9")), "uid 3 does not go up from 3"),
    (_manifest_json("4", ("airways", "9")), "collection 9 renamed or moved"),
    ("{", "second.json is not valid JSON"),
    # 5,000 new collections in 1,024 vbuckets: over 3 GB of events, above the default --memory-quota
    (json.dumps({"uid": "4", "scopes": [{"name": "_default", "uid": "0", "collections": [
        {"name": f"c{n}", "uid": f"{n + 16:x}"} for n in range(5000)]}]}), "above --memory-quota 268435456"),
], ids=["uid", "rename", "json", "quota"])  # (an id holding the manifest would not fit the environment)
def test_a_scenarios_manifest_that_cannot_follow_is_refused(tmp_path: Path, second: str, message: str) -> None:
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    (tmp_path / "first.json").write_text(_manifest_json("3", ("airline", "9")))
    (tmp_path / "second.json").write_text(second)
    plan = scenario(tmp_path, '[[event]]\naction = "manifest"\nfile = "second.json"\n')
    result = subprocess.run([sys.executable, "-m", "dcpctl", "serve", "--port", "0", "--vbuckets", "1024",
                             "--collections", str(tmp_path / "first.json"), "--scenario", plan],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1
    assert message in result.stderr


# --- flow control and noops ---------------------------------------------------------------------------------
def test_flow_control_stops_at_the_window_and_resumes_on_ack(server: Server) -> None:
    window = 2000
    client = streaming_client(server, connection_buffer_size=str(window))
    assert client.stream_request(6)["status"] == "Success"
    received = sum(r["total_body_length"] + 24 for r in read_until_silent(client))
    assert window <= received < window + 300  # the server stops once the window is full: one may overshoot
    client.sock.settimeout(10)
    client.send(opcode="DCP_BUFFER_ACKNOWLEDGEMENT", vbucket=6, bytes_to_ack=received)
    assert client.read()["opcode"] in ("DCP_MUTATION", "DCP_DELETION", "DCP_SNAPSHOT_MARKER")


def test_noops_come_on_the_interval(server: Server) -> None:
    client = streaming_client(server, set_noop_interval="0.2")
    started = time.monotonic()
    record = client.read()
    assert record["opcode"] == "DCP_NOOP"
    assert record["magic"] == "ClientRequest"
    assert 0.1 < time.monotonic() - started < 2


def test_a_noop_request_from_a_dcp_client_disconnects_it(server: Server) -> None:
    """Reference 3.13: only the server sends noops on a DCP connection; a client's own request ends it."""
    client = streaming_client(server)
    client.send(opcode="DCP_NOOP")
    assert read_until_closed(client) == []


def test_close_stream_with_stream_end(server: Server) -> None:
    client = streaming_client(server, send_stream_end_on_client_close_stream="true",
                              connection_buffer_size="500")
    assert client.stream_request(7)["status"] == "Success"
    assert client.call(opcode="DCP_CLOSE_STREAM", vbucket=7)["status"] == "Success"
    assert client.call(opcode="DCP_CLOSE_STREAM", vbucket=3)["status"] == "KeyEnoent"
    client.send(opcode="DCP_BUFFER_ACKNOWLEDGEMENT", vbucket=7, bytes_to_ack=10_000)
    end = client.until("DCP_STREAM_END")[-1]
    assert end["stream_end_status"] == 1  # Closed


# --- scenarios and determinism -------------------------------------------------------------------------------
def scenario(tmp_path: Path, text: str) -> str:
    path = tmp_path / "scenario.toml"
    path.write_text(text)
    return str(path)


def test_failover_ends_the_stream_and_the_retry_rolls_back(tmp_path: Path) -> None:
    plan = scenario(tmp_path, '[[event]]\naction = "failover"\nvbucket = 0\nseqno = 60\nafter_items = 80\n')
    with serving("--vbuckets", "1", "--items", "100", "--scenario", plan) as running:
        client = streaming_client(running)
        old = client.call(opcode="GET_FAILOVER_LOG", vbucket=0)["failover_log"]
        assert client.stream_request(0, uuid=old[0]["vbucket_uuid"])["status"] == "Success"
        records = client.until("DCP_STREAM_END")
        items = [r for r in records if "by_seqno" in r]
        assert items[-1]["by_seqno"] == 80  # exactly after_items items, then the failover
        assert records[-1]["stream_end_status"] == 2  # StateChanged
        again = streaming_client(running)
        log = again.call(opcode="GET_FAILOVER_LOG", vbucket=0)["failover_log"]
        assert [e["seqno"] for e in log] == [60, 0]
        assert log[1] == old[0]
        answer = again.stream_request(0, start=80, uuid=old[0]["vbucket_uuid"], snap=(80, 80))
        assert (answer["status"], answer["rollback_seqno"]) == ("Rollback", 60)
        assert again.stream_request(0, start=60, uuid=old[0]["vbucket_uuid"])["status"] == "Success"


def test_disconnect_after_items_and_history_loss(tmp_path: Path) -> None:
    plan = scenario(tmp_path, '[[event]]\naction = "disconnect"\nafter_items = 25\n'
                              '[[event]]\naction = "history_loss"\nvbucket = 0\n')
    with serving("--vbuckets", "1", "--items", "100", "--scenario", plan) as running:
        client = streaming_client(running)
        assert client.stream_request(0)["status"] == "Success"
        seen = [r["by_seqno"] for r in read_until_closed(client) if "by_seqno" in r]
        assert seen == list(range(1, 26))
        again = streaming_client(running)
        uuid = again.call(opcode="GET_FAILOVER_LOG", vbucket=0)["failover_log"][0]["vbucket_uuid"]
        answer = again.stream_request(0, start=25, uuid=uuid)
        assert (answer["status"], answer["rollback_seqno"]) == ("Rollback", 0)  # below the purge seqno


def test_move_makes_the_old_node_answer_not_my_vbucket(tmp_path: Path) -> None:
    plan = scenario(tmp_path, '[[event]]\naction = "move"\nvbucket = 0\nnode = 1\nafter_seconds = 0.3\n')
    with serving("--nodes", "2", "--vbuckets", "2", "--items", "10", "--scenario", plan) as running:
        client = Client(running.ports[0])
        client.dcp()
        uuid = client.call(opcode="GET_FAILOVER_LOG", vbucket=0)["failover_log"][0]["vbucket_uuid"]
        assert client.stream_request(0, end=5)["status"] == "Success"
        assert client.until("DCP_STREAM_END")[-1]["stream_end_status"] == 0  # the whole backfill, then Ok
        assert client.stream_request(0, start=5, uuid=uuid)["status"] == "Success"  # then follow it, forever
        end = client.until("DCP_STREAM_END")[-1]
        assert end["stream_end_status"] == 2  # StateChanged: the vbucket moved away
        assert client.stream_request(0)["status"] == "NotMyVbucket"
        other = Client(running.ports[1])
        other.dcp()
        assert other.stream_request(0)["status"] == "Success"


def test_purge_delay_mutate_and_the_mutation_rate(tmp_path: Path) -> None:
    plan = scenario(tmp_path, '[[event]]\naction = "purge"\nvbucket = 0\nseqno = 20\n'
                              '[[event]]\naction = "delay"\nseconds = 0.6\nafter_items = 10\n'
                              # after 30 items sent: the purged tombstones leave fewer than the 40 seqnos
                              '[[event]]\naction = "mutate"\ncount = 5\nvbucket = 0\nafter_items = 30\n')
    with serving("--vbuckets", "1", "--items", "40", "--scenario", plan) as running:
        client = streaming_client(running)
        uuid = client.call(opcode="GET_FAILOVER_LOG", vbucket=0)["failover_log"][0]["vbucket_uuid"]
        below = client.stream_request(0, start=10, uuid=uuid)
        assert (below["status"], below["rollback_seqno"]) == ("Rollback", 0)  # below the purge seqno
        started = time.monotonic()
        assert client.stream_request(0)["status"] == "Success"
        records = client.until("DCP_MUTATION")
        while not any(r.get("by_seqno") == 45 for r in records):  # the last of the mutate event's items
            records.append(client.read())
        assert time.monotonic() - started >= 0.5  # the delay held the stream after 10 items
        seqnos = [r["by_seqno"] for r in records if "by_seqno" in r]
        # every seqno but the tombstones the purge took off disk, which the backfill no longer has
        assert seqnos == sorted(seqnos)
        assert set(range(21, 46)) <= set(seqnos)
        assert not [r for r in records if r["opcode"] in ("DCP_DELETION", "DCP_EXPIRATION") and r["by_seqno"] <= 20]
        assert len(seqnos) > 40  # the purge took a few tombstones, not the documents
        markers = [(r["snap_start_seqno"], r["snap_end_seqno"], r["snapshot_flags"]) for r in records
                   if r["opcode"] == "DCP_SNAPSHOT_MARKER"]
        # the backfill from disk (from the requested start, 3.8), then a memory snapshot from its first item,
        # which begins a checkpoint
        assert markers == [(0, 40, 6), (41, 45, 5)]
    with serving("--vbuckets", "2", "--mutation-rate", "200") as running:
        client = streaming_client(running)
        assert client.stream_request(1)["status"] == "Success"
        items = [r for r in read_for(client, 1.0) if "by_seqno" in r]
        assert 20 < len(items) < 200  # about 100 a second on this vbucket
        assert [r["by_seqno"] for r in items] == list(range(1, len(items) + 1))


def test_the_same_seed_sends_the_same_bytes() -> None:
    def capture() -> bytes:
        with serving("--vbuckets", "2", "--items", "60", "--seed", "42") as running:
            client = streaming_client(running)
            client.stream_request(1, end=30)
            client.until("DCP_STREAM_END")
            return b"".join(client.raw[-32:])

    assert capture() == capture()


def test_bad_scenarios_and_options_are_one_line_errors(tmp_path: Path) -> None:
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    bad = scenario(tmp_path, '[[event]]\naction = "explode"\n')
    result = subprocess.run([sys.executable, "-m", "dcpctl", "serve", "--port", "0", "--scenario", bad],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 3
    assert result.stderr.count("\n") == 1
    assert "action must be one of" in result.stderr
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    result = subprocess.run([sys.executable, "-m", "dcpctl", "serve", "--port", str(busy.getsockname()[1])],
                            capture_output=True, text=True, timeout=60, check=False)
    busy.close()
    assert result.returncode == 5
    assert "cannot listen" in result.stderr
    assert result.stderr.count("\n") == 1


def test_tls_listener(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    with serving("--tls-cert", str(cert), "--tls-key", str(key), "--tls-port", "0", "--items", "64") as running:
        trusted = ssl.create_default_context(cafile=str(cert))
        client = Client(running.tls_ports[0], tls=trusted)
        assert client.scram()["status"] == "Success"
        with pytest.raises(ssl.SSLCertVerificationError):
            Client(running.tls_ports[0], tls=ssl.create_default_context())


def test_rollback_explain_reads_the_negotiation_from_a_capture(tmp_path: Path) -> None:
    """A conversation with serve, saved as a capture, explained: a wrong retry, then a right one."""
    import io  # noqa: PLC0415

    from dcpctl.cli import main  # noqa: PLC0415
    from dcpctl.render.env import Environment  # noqa: PLC0415

    plan = scenario(tmp_path, '[[event]]\naction = "failover"\nvbucket = 0\nseqno = 60\n')
    with serving("--vbuckets", "1", "--items", "100", "--scenario", plan) as running:
        client = streaming_client(running)
        old_uuid = client.call(opcode="GET_FAILOVER_LOG", vbucket=0)["failover_log"][1]["vbucket_uuid"]
        assert client.stream_request(0, start=80, uuid=old_uuid, snap=(80, 80))["rollback_seqno"] == 60
        assert client.stream_request(0, start=70, uuid=old_uuid, snap=(70, 70))["rollback_seqno"] == 60  # wrong
        assert client.stream_request(0, start=60, uuid=old_uuid, snap=(60, 60))["status"] == "Success"
    path = tmp_path / "negotiation.pcap"
    _as_pcap(client, path)
    stdout = io.StringIO()
    env = Environment(stdout=stdout, stderr=io.StringIO(), stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False)
    assert main(["rollback", "explain", str(path), "-F", "json"], env) == 0
    stories = json.loads(stdout.getvalue())
    assert [(s["request"]["start_seqno"], s["rollback_seqno"], s["retry"]["start_seqno"], s["retry_status"])
            for s in stories] == [(80, 60, 70, "Rollback"), (70, 60, 60, "Success")]
    assert [s["retry_correct"] for s in stories] == [False, True]
    assert stories[1]["engine_agrees"] is True
    assert stories[1]["rule"] == "consumer_ahead"


def test_open_flags_shape_the_items(server: Server) -> None:
    """NoValue strips values; IncludeDeleteTimes gives v2 deletions; expirations need both controls."""
    plain = streaming_client(server)
    plain.stream_request(1, end=ITEMS_PER_VB)
    shapes = {(r["opcode"], r["extras_length"]) for r in plain.until("DCP_STREAM_END") if "by_seqno" in r}
    assert ("DCP_DELETION", 18) in shapes
    assert "DCP_EXPIRATION" not in {opcode for opcode, _ in shapes}
    client = connect(server)
    client.dcp(flags=0x01 | 0x08 | 0x20, controls={"enable_noop": "true", "enable_expiry_opcode": "true"})
    client.stream_request(1, end=ITEMS_PER_VB)
    items = [r for r in client.until("DCP_STREAM_END") if "by_seqno" in r]
    assert all(r["value"] == "" for r in items)
    assert {r["opcode"] for r in items} <= {"DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION"}
    assert {r["extras_length"] for r in items if r["opcode"] == "DCP_DELETION"} == {21}
    assert [r["by_seqno"] for r in items] == list(range(1, ITEMS_PER_VB + 1))


def test_a_takeover_over_the_wire_reads_as_a_handover_in_decode_and_in_tshark(tmp_path: Path) -> None:
    """A consumer that asks TakeOver and answers what the producer asks it to (each vbucket state, markers
    flagged Acknowledge) is handed the vbucket; a write while the pending state waits comes in such a marker.
    decode's tracker names each step and says the handover ended; tshark reads the same flags."""
    with serving("--vbuckets", "1", "--items", "30", "--mutation-rate", "0") as running:
        client = streaming_client(running)
        assert client.stream_request(0, flags=0x01, end=10)["status"] == "Success"
        writer = connect(running)
        writer.hello("Xerror")
        writer.plain()
        writer.call(opcode="SELECT_BUCKET", key="default")
        asked = []
        while (record := client.read())["opcode"] != "DCP_STREAM_END":
            if record["opcode"] == "DCP_SET_VBUCKET_STATE" and record["vbucket_state"] == 3:
                assert writer.call(opcode="SET", vbucket=0, key="meanwhile", value="{}", flags=0,
                                   expiration=0)["status"] == "Success"  # the copy here is still active
            if record["opcode"] == "DCP_SET_VBUCKET_STATE" or (
                    record["opcode"] == "DCP_SNAPSHOT_MARKER" and record["snapshot_flags"] & 0x08):
                asked.append((record["opcode"], record.get("vbucket_state", record.get("snapshot_flags"))))
                client.send(magic="ClientResponse", opcode=record["opcode"], status="Success",
                            opaque=record["opaque"])
        assert asked == [("DCP_SET_VBUCKET_STATE", 3), ("DCP_SNAPSHOT_MARKER", 0x0D), ("DCP_SET_VBUCKET_STATE", 1)]
        assert record["stream_end_status"] == 0
        assert client.stream_request(0)["status"] == "NotMyVbucket"  # the copy here is dead
        assert writer.call(opcode="GET", vbucket=0, key="meanwhile")["status"] == "NotMyVbucket"
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    found = []
    for from_client, raw in client.transcript:
        msg = decode(raw, 0, tracker.options())
        found += [(msg.opcode_name, d.name, d.message) for d in tracker.observe(msg, from_client, 0.0).diagnostics
                  if d.name != "redacted"]
    assert [(opcode, name) for opcode, name, _ in found] == [
        ("DCP_SET_VBUCKET_STATE", "takeover"), ("DCP_SET_VBUCKET_STATE", "takeover"), ("DCP_STREAM_END", "stream_end")]
    assert [text.split(":")[1].split()[-1] for _, _, text in found[:2]] == ["pending", "active"]
    assert "takeover complete" in found[2][2]
    _flags_agree_with_tshark(client, tmp_path / "takeover.pcap")
    assert "takeover_unanswered" not in _decode_notices(tmp_path / "takeover.pcap")


def _as_pcap(client: Client, path: Path) -> None:
    """The client's conversation as a capture: one connection, one message per segment."""
    import io  # noqa: PLC0415

    from dcpctl.sources.pcapwriter import PcapWriter, TcpConversation  # noqa: PLC0415

    out = io.BytesIO()
    conversation = TcpConversation(PcapWriter(out))
    conversation.handshake()
    for from_client, packet in client.transcript:
        conversation.send(from_client, packet)
    conversation.close()
    path.write_bytes(out.getvalue())


def _decode_notices(path: Path) -> str:
    import io  # noqa: PLC0415

    from dcpctl.cli import main  # noqa: PLC0415
    from dcpctl.render.env import Environment  # noqa: PLC0415

    err = io.StringIO()
    env = Environment(stdout=io.StringIO(), stderr=err, stdin=io.BytesIO(), stdout_isatty=False,
                      stderr_isatty=False, color=False)
    assert main(["decode", str(path), "-F", "jsonl"], env) == 0
    return err.getvalue()


def test_a_takeover_the_consumer_stops_answering_is_named_at_its_end(tmp_path: Path) -> None:
    """The producer waits for the answer to its DCP_SET_VBUCKET_STATE: a capture where none comes (the connection
    closes, or the capture ends, first) says so once, for that vbucket; an answered one says nothing."""
    with serving("--vbuckets", "1", "--items", "20", "--mutation-rate", "0") as running:
        client = streaming_client(running)
        assert client.stream_request(0, flags=0x01)["status"] == "Success"
        client.until("DCP_SET_VBUCKET_STATE")
    _as_pcap(client, tmp_path / "stuck.pcap")
    said = _decode_notices(tmp_path / "stuck.pcap")
    assert said.count("takeover_unanswered") == 1
    assert "vbucket 0: the producer's DCP_SET_VBUCKET_STATE pending" in said


def _flags_agree_with_tshark(client: Client, path: Path) -> None:
    """decode's stream-request and marker flags and vbucket states of the client's conversation, frame by frame
    (one message each), against tshark's: it gives the flags whole and the marker's Acknowledge bit, and
    reads no field in DCP_SET_VBUCKET_STATE's extras (its byte is "unknown")."""
    import subprocess  # noqa: PLC0415

    from servekit import peer  # noqa: PLC0415

    _as_pcap(client, path)
    fields = ["couchbase.opcode", "couchbase.magic", "couchbase.extras.flags",
              "couchbase.extras.flags.dcp_snapshot_marker_ack", "couchbase.extras.unknown"]
    result = subprocess.run([peer("tshark"), "-r", str(path), "-Y", "couchbase.opcode == 0x53 || couchbase.opcode == "
                             "0x56 || couchbase.opcode == 0x5b", "-T", "fields", "-E", "separator=\t",
                             *[x for f in fields for x in ("-e", f)]],
                            capture_output=True, text=True, check=True, timeout=120)
    theirs = [tuple(line.split("\t")) for line in result.stdout.splitlines()]
    ours = []
    for _, packet in client.transcript:
        msg = decode(packet)
        if msg.opcode_name not in ("DCP_STREAM_REQ", "DCP_SNAPSHOT_MARKER", "DCP_SET_VBUCKET_STATE"):
            continue
        flags = msg.field("flags" if msg.opcode_name == "DCP_STREAM_REQ" else "snapshot_flags")
        state = msg.field("vbucket_state")
        ours.append((f"0x{msg.opcode:02x}", f"0x{msg.header[0]:02x}", "" if flags is None else f"0x{flags:08x}",
                     str(flags >> 3 & 1) if msg.opcode_name == "DCP_SNAPSHOT_MARKER" and flags is not None else "",
                     "" if state is None else f"{state:02x}"))
    assert sum(row[0] == "0x5b" for row in ours) == 4  # two states, two answers
    assert theirs == ours
