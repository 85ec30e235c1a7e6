"""``dcpctl serve`` as a small data node: bootstrap as a current server, document commands with kv_engine's
semantics, and each write on the open DCP streams of its vbucket at once (issue 16)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servekit import Server, serving
from wire import Client

from dcpctl.producer.data import vbucket_of
from dcpctl.protocol.constants import DcpOpenFlag, SnapshotMarkerFlag
from dcpctl.protocol.value import snappy_compress

MANIFEST = {"uid": "2", "scopes": [
    {"name": "_default", "uid": "0", "collections": [{"name": "_default", "uid": "0"}]},
    {"name": "app", "uid": "8", "collections": [{"name": "orders", "uid": "9"}]}]}
VB = 3
LOCKED_CAS = 0xFFFF_FFFF_FFFF_FFFF


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    manifest = tmp_path_factory.mktemp("kv") / "manifest.json"
    manifest.write_text(json.dumps(MANIFEST))
    with serving("--vbuckets", "8", "--items", "40", "--collections", str(manifest)) as running:
        yield running


def kv_client(server: Server, *features: str) -> Client:
    client = Client(server.port, timeout=5)
    assert client.hello("Xerror", "MutationSeqno", "JSON", "Xattr", "Snappy", *features)["status"] == "Success"
    assert client.plain()["status"] == "Success"
    assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
    return client


def kv(client: Client, opcode: str, key: str, **fields: Any) -> dict[str, Any]:
    return client.call(opcode=opcode, vbucket=VB, key=key, **fields)


def test_gcccp_error_map_and_collections_bootstrap(server: Server) -> None:
    client = Client(server.port, timeout=5)
    assert client.hello("Xerror", "Collections")["status"] == "Success"
    assert client.plain()["status"] == "Success"
    config = client.call(opcode="GET_CLUSTER_CONFIG")  # before SELECT_BUCKET: the cluster's config
    assert config["status"] == "Success"
    body = json.loads(config["value"])
    assert "vBucketServerMap" not in body
    assert body["nodesExt"][0]["services"]["kv"] == server.port
    errors = json.loads(client.call(opcode="GET_ERROR_MAP", error_map_version=2)["value"])["errors"]
    assert errors["9"]["attrs"] == ["item-locked", "item-only", "retry-now"]
    assert errors["86"]["attrs"] == ["temp", "retry-now"]
    assert errors["7"]["attrs"] == ["fetch-config", "invalid-input"]
    assert client.call(opcode="NOOP")["status"] == "Success"
    assert client.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
    got = client.call(opcode="COLLECTIONS_GET_ID", value="app.orders")
    assert (got["status"], got["manifest_uid"], got["collection_id"]) == ("Success", 2, 9)
    got = client.call(opcode="COLLECTIONS_GET_SCOPE_ID", value="app")
    assert (got["status"], got["scope_id"]) == ("Success", 8)
    assert client.call(opcode="COLLECTIONS_GET_ID", value="app.nope")["status"] == "UnknownCollection"
    assert client.call(opcode="COLLECTIONS_GET_SCOPE_ID", value="nope")["status"] == "UnknownScope"
    manifest = json.loads(client.call(opcode="COLLECTIONS_GET_MANIFEST")["value"])
    assert manifest["scopes"][1] == {"name": "app", "uid": "8", "collections": [{"name": "orders", "uid": "9"}]}


def test_store_get_delete_with_cas_checks(server: Server) -> None:
    client = kv_client(server)
    stored = kv(client, "SET", "cas-doc", value='{"n":1}', flags=7, expiration=0)
    assert stored["status"] == "Success"
    assert stored["mutation_seqno"] > 0
    cas = stored["cas"]
    got = kv(client, "GET", "cas-doc")
    assert (got["status"], got["cas"], got["flags"], got["value"], got["datatype"]) == (
        "Success", cas, 7, '{"n":1}', 1)
    assert kv(client, "ADD", "cas-doc", value="x", flags=0, expiration=0)["status"] == "KeyEexists"
    assert kv(client, "REPLACE", "nobody", value="x", flags=0, expiration=0)["status"] == "KeyEnoent"
    assert kv(client, "SET", "cas-doc", value="x", flags=0, expiration=0, cas=cas + 1)["status"] == "KeyEexists"
    assert kv(client, "SET", "nobody", value="x", flags=0, expiration=0, cas=5)["status"] == "KeyEnoent"
    replaced = kv(client, "REPLACE", "cas-doc", value='{"n":2}', flags=0, expiration=0, cas=cas)
    assert replaced["status"] == "Success"
    assert replaced["cas"] > cas
    assert kv(client, "DELETE", "cas-doc", cas=cas)["status"] == "KeyEexists"
    assert kv(client, "DELETE", "cas-doc")["status"] == "Success"
    assert kv(client, "GET", "cas-doc")["status"] == "KeyEnoent"
    assert kv(client, "DELETE", "cas-doc")["status"] == "KeyEnoent"
    meta = kv(client, "GET_META", "cas-doc")
    assert (meta["status"], meta["deleted"], meta["seqno"]) == ("Success", 1, 3)  # the rev seqno
    assert kv(client, "ADD", "cas-doc", value="again", flags=0, expiration=0)["status"] == "Success"
    assert kv(client, "GET_REPLICA", "cas-doc")["status"] == "NotMyVbucket"


def test_locking(server: Server) -> None:
    client = kv_client(server)
    assert kv(client, "SET", "lock-doc", value="1", flags=0, expiration=0)["status"] == "Success"
    locked = kv(client, "GET_LOCKED", "lock-doc", expiration=10)
    assert locked["status"] == "Success"
    assert kv(client, "GET", "lock-doc")["cas"] == LOCKED_CAS
    assert kv(client, "GET_LOCKED", "lock-doc")["status"] == "Locked"
    assert kv(client, "SET", "lock-doc", value="2", flags=0, expiration=0)["status"] == "Locked"
    assert kv(client, "UNLOCK_KEY", "lock-doc", cas=locked["cas"] + 1)["status"] == "Locked"
    assert kv(client, "UNLOCK_KEY", "lock-doc", cas=locked["cas"])["status"] == "Success"
    assert kv(client, "UNLOCK_KEY", "lock-doc", cas=locked["cas"])["status"] == "NotLocked"
    again = kv(client, "GET_LOCKED", "lock-doc")
    assert kv(client, "SET", "lock-doc", value="3", flags=0, expiration=0, cas=again["cas"])["status"] == "Success"
    assert kv(client, "GET", "lock-doc")["value"] == "3"


def test_counters_concat_touch_and_quiet(server: Server) -> None:
    client = kv_client(server)
    counter = {"delta": 3, "initial": 5, "expiration": 0}
    assert kv(client, "INCREMENT", "ctr", **counter)["counter"] == 5
    assert kv(client, "INCREMENT", "ctr", **counter)["counter"] == 8
    assert kv(client, "DECREMENT", "ctr", **{**counter, "delta": 100})["counter"] == 0
    assert kv(client, "INCREMENT", "none", **{**counter, "expiration": 0xFFFFFFFF})["status"] == "KeyEnoent"
    assert kv(client, "SET", "text", value="abc", flags=0, expiration=0)["status"] == "Success"
    assert kv(client, "INCREMENT", "text", **counter)["status"] == "DeltaBadval"
    assert kv(client, "APPEND", "none", value="x")["status"] == "NotStored"
    assert kv(client, "APPEND", "text", value="def")["status"] == "Success"
    assert kv(client, "PREPEND", "text", value="<")["status"] == "Success"
    assert kv(client, "GET", "text")["value"] == "<abcdef"
    touched = kv(client, "GAT", "text", expiration=100)
    assert (touched["status"], touched["value"]) == ("Success", "<abcdef")
    assert kv(client, "GET_META", "text")["expiration"] >= int(time.time()) + 99
    assert kv(client, "TOUCH", "none", expiration=1)["status"] == "KeyEnoent"
    # the record's value is the inflated one: the encoder compresses it for the SNAPPY datatype
    packed = kv(client, "SET", "packed", value='{"packed":true}', datatype=2, flags=0, expiration=0)
    assert packed["status"] == "Success"
    assert any(snappy_compress(b'{"packed":true}') in data for sent, data in client.transcript if sent)
    assert kv(client, "GET", "packed")["value"] == '{"packed":true}'
    # quiet: no answer on success (SETQ) nor on a miss (GETQ); the NOOP's answer comes first
    client.send(opcode="SETQ", vbucket=VB, key="quiet", value="q", flags=0, expiration=0)
    client.send(opcode="GETQ", vbucket=VB, key="missing")
    assert client.call(opcode="NOOP")["status"] == "Success"
    assert client.backlog == []
    assert kv(client, "GETK", "quiet")["key"] == "quiet"


def test_writes_reach_open_streams_at_once(server: Server) -> None:
    stream = Client(server.port, timeout=5)
    stream.dcp("Collections")
    stream.collections = True
    assert stream.stream_request(VB)["status"] == "Success"
    writer = kv_client(server, "Collections")
    writer.collections = True
    records: list[dict[str, Any]] = []
    stored = writer.call(opcode="SET", vbucket=VB, collection_id=9, key="live", value='{"v":1}', flags=4,
                         expiration=0)
    assert stored["status"] == "Success"
    deleted = writer.call(opcode="DELETE", vbucket=VB, collection_id=9, key="live")
    assert deleted["status"] == "Success"
    started = time.monotonic()
    while not any(r["opcode"] == "DCP_DELETION" and r.get("key") == "live" for r in records):
        records.append(stream.read())
    assert time.monotonic() - started < 2
    items = [r for r in records if r["opcode"] in ("DCP_MUTATION", "DCP_DELETION") and r.get("key") == "live"]
    assert [(r["opcode"], r["by_seqno"], r["cas"], r["collection_id"]) for r in items] == [
        ("DCP_MUTATION", stored["mutation_seqno"], stored["cas"], 9),
        ("DCP_DELETION", deleted["mutation_seqno"], deleted["cas"], 9)]
    assert (items[0]["value"], items[0]["flags"], items[0]["rev_seqno"]) == ('{"v":1}', 4, 1)
    assert items[1]["rev_seqno"] == 2


def test_unknown_collection_and_vbucket(server: Server) -> None:
    writer = kv_client(server, "Collections")
    writer.collections = True
    got = writer.call(opcode="GET", vbucket=VB, collection_id=77, key="x")
    assert got["status"] == "UnknownCollection"
    assert json.loads(got["value"]) == {"manifest_uid": "2"}
    assert writer.call(opcode="GET", vbucket=999, collection_id=0, key="x")["status"] == "NotMyVbucket"


def test_data_file_loads_documents(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(MANIFEST))
    data = tmp_path / "docs.jsonl"
    data.write_text('{"key": "a", "value": {"x": 1}}\n\n'
                    '{"key": "b", "value": "text", "collection": "app.orders", "flags": 3, "expiry": 0}\n'
                    '{"key": "c", "value": 5, "collection": 9}\n')
    with serving("--vbuckets", "4", "--collections", str(manifest), "--data", str(data)) as running:
        client = kv_client(running, "Collections")
        client.collections = True
        for collection, key, value, flags in ((0, "a", '{"x":1}', 0), (9, "b", '"text"', 3), (9, "c", "5", 0)):
            vbucket = vbucket_of(key.encode(), 4)
            got = client.call(opcode="GET", vbucket=vbucket, collection_id=collection, key=key)
            assert (got["status"], got["value"], got["flags"]) == ("Success", value, flags)
            meta = client.call(opcode="GET_META", vbucket=vbucket, collection_id=collection, key=key)
            assert meta["seqno"] == 1  # the rev seqno of a first write


@pytest.mark.parametrize(("lines", "message"), [
    ('{"key": "a", "value": 1}\n{"key": "b"}\n', 'line 2: "value" is missing'),
    ('{"key": "a", "value": 1}\n[1]\n', "line 2: not a JSON object"),
    ('{"key": "a", "value": 1}\nnot json\n', "line 2: not JSON"),
    ('{"key": "a", "value": 1, "flags": -1}\n', 'line 1: "flags" must be an integer'),
    ('{"key": "a", "value": 1, "collection": "app.none"}\n', 'line 1: "collection" app.none is not'),
    ('{"key": "a", "value": 1, "colour": 1}\n', "line 1: unknown field colour"),
    ('{"key": "a", "value": "' + "x" * 200 + '"}\n', 'line 1: "value" is above --max-item-size (10 bytes)'),
    ('{"key": "a", "value": 1}\n{"key": "' + "x" * 70_000 + '"}\n', "line 2: longer than 65546 bytes"),
    ('{"key": "a", "value": 1}\n' * 2, "line 2: the documents are above --memory-quota (602 of 1000 bytes used)"),
])
def test_data_file_bad_line_is_one_error_line(tmp_path: Path, lines: str, message: str) -> None:
    data = tmp_path / "docs.jsonl"
    data.write_text(lines)
    done = subprocess.run([sys.executable, "-m", "dcpctl", "serve", "--port", "0", "--max-item-size", "10",
                           "--memory-quota", "1000", "--data", str(data)], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 3
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"dcpctl: error: --data: {data}: {message}")


def test_a_ttl_passing_is_an_expiration_on_the_stream(server: Server) -> None:
    stream = Client(server.port, timeout=5)
    stream.dcp(flags=DcpOpenFlag.PRODUCER | DcpOpenFlag.INCLUDE_DELETE_TIMES,
               controls={"enable_noop": "true", "enable_expiry_opcode": "true"})
    assert stream.stream_request(VB + 1)["status"] == "Success"
    writer = kv_client(server)
    stored = writer.call(opcode="SET", vbucket=VB + 1, key="brief", value="v", flags=0, expiration=1)
    assert stored["status"] == "Success"
    started = time.monotonic()
    records: list[dict[str, Any]] = []
    while not any(r["opcode"] == "DCP_EXPIRATION" for r in records):
        records.append(stream.read())
    assert time.monotonic() - started < 3
    expired = next(r for r in records if r["opcode"] == "DCP_EXPIRATION")
    assert (expired["key"], expired["by_seqno"], expired["rev_seqno"]) == ("brief", stored["mutation_seqno"] + 1, 2)


def subdoc(client: Client, opcode: str, key: str, path: str, value: str = "", flags: int = 0,
           **extras: Any) -> dict[str, Any]:
    """A single-path subdocument command: the extras' path length, the body the path then the value."""
    return kv(client, opcode, key, path_length=len(path.encode()), subdoc_flags=flags, value=path + value,
              **extras)


def test_single_path_subdocument_commands(server: Server) -> None:
    client = kv_client(server)
    assert kv(client, "SET", "single", value='{"name":"a","tags":["x"],"n":1}', flags=0,
              expiration=0)["status"] == "Success"
    got = subdoc(client, "SUBDOC_GET", "single", "tags")
    assert (got["status"], got["value"]) == ("Success", '["x"]')
    assert subdoc(client, "SUBDOC_EXISTS", "single", "name")["status"] == "Success"
    assert subdoc(client, "SUBDOC_EXISTS", "single", "nope")["status"] == "SubdocPathEnoent"
    assert subdoc(client, "SUBDOC_GET_COUNT", "single", "tags")["value"] == "1"
    assert subdoc(client, "SUBDOC_GET", "missing", "a")["status"] == "KeyEnoent"
    assert subdoc(client, "SUBDOC_DICT_ADD", "single", "name", '"b"')["status"] == "SubdocPathEexists"
    upserted = subdoc(client, "SUBDOC_DICT_UPSERT", "single", "a.b", '"deep"', flags=1)  # MkdirP
    assert upserted["status"] == "Success"
    assert upserted["mutation_seqno"] > 0
    assert subdoc(client, "SUBDOC_REPLACE", "single", "name", '"b"')["status"] == "Success"
    assert subdoc(client, "SUBDOC_ARRAY_PUSH_LAST", "single", "tags", '"y"')["status"] == "Success"
    assert subdoc(client, "SUBDOC_ARRAY_PUSH_FIRST", "single", "tags", '"w"')["status"] == "Success"
    assert subdoc(client, "SUBDOC_ARRAY_INSERT", "single", "tags[1]", '"v"')["status"] == "Success"
    assert subdoc(client, "SUBDOC_ARRAY_ADD_UNIQUE", "single", "tags", '"y"')["status"] == "SubdocPathEexists"
    counted = subdoc(client, "SUBDOC_COUNTER", "single", "n", "41")
    assert (counted["status"], counted["value"]) == ("Success", "42")
    assert subdoc(client, "SUBDOC_DELETE", "single", "nope")["status"] == "SubdocPathEnoent"
    deleted = subdoc(client, "SUBDOC_DELETE", "single", "a")
    assert deleted["status"] == "Success"
    stale = subdoc(client, "SUBDOC_REPLACE", "single", "name", '"c"', cas=deleted["cas"] + 1)
    assert stale["status"] == "KeyEexists"
    body = json.loads(kv(client, "GET", "single")["value"])
    assert body == {"name": "b", "tags": ["w", "v", "x", "y"], "n": 42}
    assert kv(client, "GET", "single")["cas"] == deleted["cas"]  # a failed path wrote nothing
    created = subdoc(client, "SUBDOC_DICT_UPSERT", "made", "k", "1", expiration=0, doc_flags=1)  # Mkdoc
    assert created["status"] == "Success"
    assert json.loads(kv(client, "GET", "made")["value"]) == {"k": 1}
    assert subdoc(client, "SUBDOC_GET", "single", "name", '"v"')["status"] == "Einval"  # a lookup has no value
    assert subdoc(client, "SUBDOC_DICT_UPSERT", "single", "name")["status"] == "Einval"  # a mutation needs one
    assert kv(client, "SUBDOC_GET", "single", path_length=99, subdoc_flags=0, value="name")["status"] == "Einval"


@pytest.mark.parametrize(("opcode", "flags"), [("SUBDOC_GET", 0x01), ("SUBDOC_GET", 0x80),
                                               ("SUBDOC_DICT_UPSERT", 0x20)])
def test_undeclared_subdocument_path_flags_are_einval(server: Server, opcode: str, flags: int) -> None:
    client = kv_client(server)
    assert kv(client, "SET", "flagged", value='{"a":1}', flags=0, expiration=0)["status"] == "Success"
    assert subdoc(client, opcode, "flagged", "a", "" if opcode == "SUBDOC_GET" else "2",
                  flags=flags)["status"] == "Einval"


def durable_set(client: Client, key: str, value: str, **info: int) -> dict[str, Any]:
    """A SET with a durability requirement (level 1, Majority, unless told), on the alternative encoding."""
    return kv(client, "SET", key, magic="AltClientRequest", value=value, flags=0, expiration=0,
              frame_infos=[{"id": 1, "durability_level": 1, **info}])


def test_sync_replication_streams_get_v2_0_markers(server: Server) -> None:
    client = kv_client(server)
    assert durable_set(client, "marker-doc", '{"m":1}')["status"] == "Success"
    replication = Client(server.port, timeout=5)
    # collection-aware, as replication is: a legacy sync-writes backfill of a bucket with collections fails
    replication.dcp("Collections", controls={"enable_noop": "true", "enable_sync_writes": "true",
                                             "consumer_name": "replica"})
    writes_only = Client(server.port, timeout=5)
    writes_only.dcp("Collections", controls={"enable_noop": "true", "enable_sync_writes": "true"})
    for stream in (replication, writes_only):
        assert stream.stream_request(VB)["status"] == "Success"
    records = replication.until("DCP_COMMIT")
    commit = records[-1]
    marker = next(r for r in records if r["opcode"] == "DCP_SNAPSHOT_MARKER")
    assert (marker["marker_version"], marker["snap_end_seqno"]) == (0, commit["commit_seqno"])
    assert (marker["max_visible_seqno"], marker["high_completed_seqno"]) == (commit["commit_seqno"],
                                                                             commit["prepared_seqno"])
    assert marker["snapshot_flags"] & SnapshotMarkerFlag.DISK
    assert durable_set(client, "marker-doc", '{"m":2}')["status"] == "Success"  # a memory snapshot: no HCS
    later = [r for r in replication.until("DCP_COMMIT") if r["opcode"] == "DCP_SNAPSHOT_MARKER"][-1]
    assert (later["marker_version"], later["high_completed_seqno"]) == (0, 0)
    assert later["max_visible_seqno"] == later["snap_end_seqno"]
    plain = next(r for r in writes_only.until("DCP_COMMIT") if r["opcode"] == "DCP_SNAPSHOT_MARKER")
    assert "marker_version" not in plain  # enable_sync_writes alone is v1 (kv_engine's SyncWrites mode)


def test_a_durable_write_no_majority_acknowledges_aborts_at_its_timeout() -> None:
    with serving("--vbuckets", "8", "--items", "40", "--silent-replicas", "1") as server:
        writer, other = kv_client(server), kv_client(server)
        assert kv(writer, "SET", "sync", value='{"v":0}', flags=0, expiration=0)["status"] == "Success"
        sync = Client(server.port, timeout=5)
        sync.dcp(controls={"enable_noop": "true", "enable_sync_writes": "true"})
        plain = Client(server.port, timeout=5)
        plain.dcp()
        for stream in (sync, plain):
            assert stream.stream_request(VB)["status"] == "Success"
        started = time.monotonic()
        opaque = writer.send(opcode="SET", magic="AltClientRequest", vbucket=VB, key="sync", value='{"v":1}',
                             flags=0, expiration=0,
                             frame_infos=[{"id": 1, "durability_level": 1, "durability_timeout": 500}])
        noop = writer.send(opcode="NOOP")  # pipelined: answered only once the write is
        prepare = sync.until("DCP_PREPARE")[-1]
        assert json.loads(kv(other, "GET", "sync")["value"]) == {"v": 0}  # the prepare is not the document
        busy = kv(other, "SET", "sync", value='{"v":2}', flags=0, expiration=0)
        assert busy["status"] == "SyncWriteInProgress"
        answer = writer.read()
        assert (answer["opaque"], answer["status"]) == (opaque, "SyncWriteAmbiguous")
        assert 0.5 <= time.monotonic() - started < 3
        assert (writer.read()["opaque"], writer.backlog) == (noop, [])
        abort = sync.until("DCP_ABORT")[-1]
        assert (abort["key"], abort["prepared_seqno"], abort["abort_seqno"]) == (
            "sync", prepare["by_seqno"], prepare["by_seqno"] + 1)
        assert json.loads(kv(other, "GET", "sync")["value"]) == {"v": 0}
        assert kv(other, "SET", "sync", value='{"v":3}', flags=0, expiration=0)["status"] == "Success"
        after = [r for r in plain.until("DCP_MUTATION") if r["opcode"] == "DCP_MUTATION"]
        while json.loads(after[-1]["value"]) != {"v": 3}:
            after += [r for r in plain.until("DCP_MUTATION") if r["opcode"] == "DCP_MUTATION"]
        assert [json.loads(r["value"]) for r in after if r["key"] == "sync"] == [{"v": 0}, {"v": 3}]
        assert after[-1]["by_seqno"] == abort["abort_seqno"] + 1  # neither prepare nor abort on a plain stream


# Attributes of kv_engine's etc/couchbase/kv/error_maps/error_map_v2.json (commit fd1b998b6ce0, revision 9)
# where serve's map differed from it, and the version 1 map kv_engine derives (error_map_manager.cc v2to1).
KV_ENGINE_ATTRS = {"4": ["internal", "invalid-input"], "20": ["conn-state-invalidated", "auth"],
                   "23": ["dcp", "special-handling"], "88": ["invalid-input"], "a2": ["item-only", "retry-later"],
                   "a3": ["item-only"], "c0": ["subdoc", "item-only"], "cc": ["subdoc", "special-handling"],
                   "cd": ["item-deleted", "success", "subdoc"],
                   "30": ["temp", "retry-later", "rate-limit"], "28": ["item-only", "system-constraint", "no-retry"]}


def test_the_error_map_is_kv_engines(server: Server) -> None:
    client = kv_client(server)
    v2 = json.loads(client.call(opcode="GET_ERROR_MAP", error_map_version=2)["value"])
    assert (v2["version"], v2["revision"]) == (2, 9)
    assert {code: v2["errors"][code]["attrs"] for code in KV_ENGINE_ATTRS} == KV_ENGINE_ATTRS
    v1 = json.loads(client.call(opcode="GET_ERROR_MAP", error_map_version=1)["value"])
    assert (v1["version"], v1["revision"]) == (1, 13)
    assert v1["errors"]["30"]["attrs"] == ["temp", "retry-later"]  # "rate-limit" is not a version 1 attribute
    assert v1["errors"]["28"]["attrs"] == ["item-only"]
    assert json.loads(client.call(opcode="GET_ERROR_MAP", error_map_version=9)["value"])["version"] == 2
    assert client.call(opcode="GET_ERROR_MAP", error_map_version=0)["status"] == "KeyEnoent"
    assert client.call(opcode="GET_ERROR_MAP", value="\u0001")["status"] == "Einval"  # not the 2-byte version


def test_a_map_change_is_pushed_to_connections_that_asked(tmp_path: Path) -> None:
    scenario = tmp_path / "moves.toml"
    scenario.write_text('[[event]]\naction = "move"\nvbucket = 3\nnode = 1\nafter_seconds = 1.0\n\n'
                        '[[event]]\naction = "failover"\nvbucket = 2\nafter_seconds = 1.5\n')
    with serving("--nodes", "2", "--vbuckets", "8", "--items", "16", "--scenario", str(scenario)) as server:
        def client(*features: str) -> Client:
            made = Client(server.port, timeout=5)
            assert made.hello("Xerror", "JSON", *features)["status"] == "Success"
            assert made.plain()["status"] == "Success"
            assert made.call(opcode="SELECT_BUCKET", key="default")["status"] == "Success"
            return made

        full = client("Duplex", "ClustermapChangeNotification")
        brief = client("Duplex", "ClustermapChangeNotification", "ClustermapChangeNotificationBrief")
        silent = client("Duplex")
        lone = Client(server.port, timeout=5)
        assert lone.hello("Xerror", "ClustermapChangeNotification")["status"] == "Einval"  # needs Duplex
        pushed = full.read()
        assert (pushed["magic"], pushed["opcode"], pushed["key"]) == ("ServerRequest", "ClustermapChangeNotification",
                                                                      "default")
        assert (pushed["epoch"], pushed["revision"], pushed["datatype"]) == (1, 2, 1)  # JSON
        config = json.loads(pushed["value"])
        assert (config["rev"], config["vBucketServerMap"]["vBucketMap"][3]) == (2, [1])
        assert [n["thisNode"] for n in config["nodesExt"]] == [True, False]
        short = brief.read()
        assert (short["opcode"], short["revision"], short.get("value", "")) == ("ClustermapChangeNotification", 2, "")
        assert (full.read()["revision"], brief.read()["revision"]) == (3, 3)  # the failover: a new map
        assert silent.call(opcode="NOOP")["status"] == "Success"
        assert silent.backlog == []  # not asked for: nothing pushed


def test_writes_above_the_memory_quota_are_enomem() -> None:
    with serving("--vbuckets", "4", "--items", "40", "--memory-quota", "6000") as server:
        client = kv_client(server)
        statuses = [kv(client, "SET", f"big-{n}", value="x" * 1000, flags=0, expiration=0)["status"]
                    for n in range(6)]
        assert statuses == ["Success"] * 3 + ["Enomem"] * 3  # 1,605 bytes each, with the item's own
        refused = kv(client, "SET", "big-9", value="x" * 1000, flags=0, expiration=0)
        assert "--memory-quota" in json.loads(refused["value"])["error"]["context"]
        assert kv(client, "GET", "big-0")["status"] == "Success"
        assert kv(client, "DELETE", "big-0")["status"] == "Success"  # a deletion is kept: it frees memory
        assert kv(client, "SET", "small", value="1", flags=0, expiration=0)["status"] == "Enomem"
