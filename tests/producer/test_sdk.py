"""The official Couchbase Python SDK against ``dcpctl serve``, and ``dcpctl stream`` on the same node (issue 16).

The SDK bootstraps, pings, writes and reads; a ``dcpctl stream`` subprocess started before the writes must
receive exactly what the SDK wrote, each once, with its values and CAS. The SDK is a required peer (.ci/run
installs it): without it these tests fail rather than skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import couchbase.subdocument as sd
import pytest
from couchbase.auth import PasswordAuthenticator
from couchbase.cluster import Cluster
from couchbase.diagnostics import PingState
from couchbase.durability import DurabilityLevel, ServerDurability
from couchbase.exceptions import (
    CasMismatchException,
    CollectionNotFoundException,
    DocumentNotFoundException,
    DurabilitySyncWriteAmbiguousException,
    PathExistsException,
    PathNotFoundException,
)
from couchbase.options import ClusterOptions, ClusterTimeoutOptions, ReplaceOptions, UpsertOptions
from servekit import Server, self_signed, serving
from wire import Client

from dcpctl.producer.data import vbucket_of

MANIFEST = {"uid": "2", "scopes": [
    {"name": "_default", "uid": "0", "collections": [{"name": "_default", "uid": "0"}]},
    {"name": "app", "uid": "8", "collections": [{"name": "orders", "uid": "9"}]}]}
DOCS = 1000  # per collection, as issue 16 asks: every vbucket gets some, in a few seconds
DELETED = 10


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(MANIFEST))
    with serving("--collections", str(manifest)) as running:
        yield running


def connect(port: int) -> Cluster:
    timeouts = ClusterTimeoutOptions(kv_timeout=timedelta(seconds=5), connect_timeout=timedelta(seconds=10))
    return Cluster(f"couchbase://127.0.0.1:{port}",
                   ClusterOptions(PasswordAuthenticator("Administrator", "password"), timeout_options=timeouts))


def stream(port: int, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dcpctl", "stream", f"127.0.0.1:{port}", "--count", str(count),
                             "-F", "jsonl", "--timeout", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "DCPCTL_PASSWORD": "password"})


def items(output: str) -> list[dict[str, Any]]:
    return [r for r in map(json.loads, output.splitlines()) if r["opcode"] in ("DCP_MUTATION", "DCP_DELETION")]


def test_bootstrap_and_ping(server: Server) -> None:
    cluster = connect(server.port)
    try:
        cluster.bucket("default")
        report = cluster.ping()
        endpoints = [e for kind in report.endpoints.values() for e in kind]
        assert endpoints
        assert all(e.state == PingState.OK for e in endpoints), report.as_json()
    finally:
        cluster.close()


def test_sdk_writes_are_what_a_stream_receives(server: Server) -> None:
    watcher = stream(server.port, 2 * DOCS + 1 + DELETED)
    cluster = connect(server.port)
    try:
        bucket = cluster.bucket("default")
        default = bucket.default_collection()
        orders = bucket.scope("app").collection("orders")
        expected: Counter[tuple[int, str, str, str]] = Counter()
        cas: dict[tuple[int, str], int] = {}
        for collection_id, collection in ((0, default), (9, orders)):
            for n in range(DOCS):
                key, value = f"doc-{n}", {"n": n, "in": collection_id}
                cas[(collection_id, key)] = collection.upsert(key, value).cas
                expected[(collection_id, key, "DCP_MUTATION", json.dumps(value))] += 1
            for n in range(0, DOCS, 97):
                assert collection.get(f"doc-{n}").content_as[dict] == {"n": n, "in": collection_id}
        current = default.get("doc-1")
        replaced = default.replace("doc-1", {"n": "new"}, ReplaceOptions(cas=current.cas))
        cas[(0, "doc-1")] = replaced.cas
        expected[(0, "doc-1", "DCP_MUTATION", json.dumps({"n": "new"}))] += 1
        with pytest.raises(CasMismatchException):
            default.replace("doc-1", {"n": "stale"}, ReplaceOptions(cas=current.cas))
        for n in range(DELETED):
            cas[(9, f"doc-{n}")] = orders.remove(f"doc-{n}").cas
            expected[(9, f"doc-{n}", "DCP_DELETION", "")] += 1
        with pytest.raises(DocumentNotFoundException):
            orders.get("doc-0")
        assert default.get("doc-1").content_as[dict] == {"n": "new"}
    finally:
        cluster.close()
    out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    received = items(out)
    assert Counter((r["collection_id"], r["key"], r["opcode"], r["value"]) for r in received) == expected
    newest = {(r["collection_id"], r["key"]): r["cas"] for r in received}  # in seqno order per vbucket
    assert newest == cas


def test_tls_bootstrap_ping_and_write(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    with serving("--tls-cert", str(cert), "--tls-key", str(key), "--tls-port", "0") as running:
        timeouts = ClusterTimeoutOptions(kv_timeout=timedelta(seconds=5), connect_timeout=timedelta(seconds=10))
        cluster = Cluster(f"couchbases://127.0.0.1:{running.tls_ports[0]}",
                          ClusterOptions(PasswordAuthenticator("Administrator", "password", cert_path=str(cert)),
                                         timeout_options=timeouts))
        try:
            collection = cluster.bucket("default").default_collection()
            report = cluster.ping()
            assert all(e.state == PingState.OK for kind in report.endpoints.values() for e in kind)
            written = collection.upsert("over-tls", {"tls": True})
            got = collection.get("over-tls")
            assert (got.content_as[dict], got.cas) == ({"tls": True}, written.cas)
        finally:
            cluster.close()


def test_a_durable_upsert_is_prepare_then_commit_on_a_sync_writes_stream(server: Server) -> None:
    sync = Client(server.port, timeout=5)
    sync.dcp("Collections", controls={"enable_noop": "true", "enable_sync_writes": "true"})  # (see test_serve_kv)
    plain = Client(server.port, timeout=5)
    plain.dcp()
    cluster = connect(server.port)
    try:
        collection = cluster.bucket("default").default_collection()
        written = collection.upsert("durable", {"d": 1}, UpsertOptions(durability=ServerDurability(
            DurabilityLevel.MAJORITY)))
        assert collection.get("durable").content_as[dict] == {"d": 1}
    finally:
        cluster.close()
    vbucket = vbucket_of(b"durable", 64)
    assert sync.stream_request(vbucket)["status"] == "Success"
    assert plain.stream_request(vbucket)["status"] == "Success"
    prepare = next(r for r in sync.until("DCP_PREPARE") if r["opcode"] == "DCP_PREPARE")
    commit = next(r for r in sync.until("DCP_COMMIT") if r["opcode"] == "DCP_COMMIT")
    assert (prepare["key"], prepare["value"], prepare["durability_level"], prepare["cas"]) == (
        "durable", '{"d": 1}', DurabilityLevel.MAJORITY.value, written.cas)
    assert (commit["key"], commit["prepared_seqno"], commit["commit_seqno"]) == (
        "durable", prepare["by_seqno"], prepare["by_seqno"] + 1)
    mutation = next(r for r in plain.until("DCP_MUTATION") if r["opcode"] == "DCP_MUTATION")
    assert (mutation["key"], mutation["value"], mutation["by_seqno"], mutation["cas"]) == (
        "durable", '{"d": 1}', commit["commit_seqno"], written.cas)


def test_a_durable_upsert_no_replica_acknowledges_is_ambiguous_and_aborted() -> None:
    with serving("--silent-replicas", "1") as server:
        sync = Client(server.port, timeout=5)
        sync.dcp(controls={"enable_noop": "true", "enable_sync_writes": "true"})
        vbucket = vbucket_of(b"unsure", 64)
        assert sync.stream_request(vbucket)["status"] == "Success"
        cluster = connect(server.port)
        try:
            collection = cluster.bucket("default").default_collection()
            with pytest.raises(DurabilitySyncWriteAmbiguousException):
                collection.upsert("unsure", {"d": 1}, UpsertOptions(
                    durability=ServerDurability(DurabilityLevel.MAJORITY), timeout=timedelta(seconds=2)))
            with pytest.raises(DocumentNotFoundException):
                collection.get("unsure")  # aborted: never written
        finally:
            cluster.close()
        prepare = sync.until("DCP_PREPARE")[-1]
        abort = sync.until("DCP_ABORT")[-1]
        assert (abort["key"], abort["prepared_seqno"]) == ("unsure", prepare["by_seqno"])


def test_the_sdk_follows_a_pushed_map_to_a_moved_vbucket(tmp_path: Path) -> None:
    # the SDK asks for Duplex and ClustermapChangeNotification in its HELLO; with its config polling slowed
    # to a minute, only the pushed map can tell it that the vbucket moved to the other node
    vbucket = vbucket_of(b"moving", 64)
    scenario = tmp_path / "move.toml"
    scenario.write_text(f'[[event]]\naction = "move"\nvbucket = {vbucket}\nnode = 1\nafter_seconds = 3\n')
    with serving("--nodes", "2", "--scenario", str(scenario)) as server:
        timeouts = ClusterTimeoutOptions(kv_timeout=timedelta(seconds=2), connect_timeout=timedelta(seconds=10))
        cluster = Cluster(f"couchbase://127.0.0.1:{server.port}", ClusterOptions(
            PasswordAuthenticator("Administrator", "password"), timeout_options=timeouts,
            config_poll_interval=timedelta(seconds=60), config_poll_floor=timedelta(seconds=60)))
        try:
            collection = cluster.bucket("default").default_collection()
            collection.upsert("moving", {"n": 0})
            stream = Client(server.ports[1], timeout=5)
            stream.dcp()
            time.sleep(3.5)  # the move, then its push
            assert stream.stream_request(vbucket)["status"] == "Success"  # the vbucket is on node 1 now
            collection.upsert("moving", {"n": 1})
            assert collection.get("moving").content_as[dict] == {"n": 1}
        finally:
            cluster.close()
        values = [json.loads(stream.until("DCP_MUTATION")[-1]["value"]) for _ in range(2)]
        assert values == [{"n": 0}, {"n": 1}]  # the write reached node 1, where the vbucket is now


def test_the_sdk_follows_a_manifest_that_drops_one_collection_and_creates_another(tmp_path: Path) -> None:
    """ns_server's push (serve's scenario manifest, three seconds in) replaces app.orders with app.trips: the SDK's
    upsert to trips, refused UnknownCollection until then, retries and lands once trips exists; one to the
    dropped orders is CollectionNotFound."""
    first = tmp_path / "first.json"
    first.write_text(json.dumps(MANIFEST))
    (tmp_path / "second.json").write_text(json.dumps(dict(MANIFEST, uid="3", scopes=[
        MANIFEST["scopes"][0], {"name": "app", "uid": "8", "collections": [{"name": "trips", "uid": "a"}]}])))
    plan = tmp_path / "plan.toml"
    plan.write_text('[[event]]\naction = "manifest"\nfile = "second.json"\nafter_seconds = 3\n')
    with serving("--collections", str(first), "--scenario", str(plan)) as running:
        cluster = connect(running.port)
        try:
            app = cluster.bucket("default").scope("app")
            app.collection("orders").upsert("before", {"n": 0})
            trips = app.collection("trips")
            trips.upsert("first-trip", {"n": 1})  # kv_timeout 5 s: it waits for the push
            assert trips.get("first-trip").content_as[dict] == {"n": 1}
            with pytest.raises(CollectionNotFoundException):
                app.collection("orders").upsert("after", {"n": 2})
        finally:
            cluster.close()


def test_subdocument_lookup_and_mutate_with_xattrs(server: Server) -> None:
    cluster = connect(server.port)
    try:
        collection = cluster.bucket("default").default_collection()
        collection.upsert("sub", {"name": "a", "tags": ["x"], "n": 1})
        written = collection.mutate_in("sub", [
            sd.upsert("address.city", "Paris", create_parents=True), sd.replace("name", "b"),
            sd.array_append("tags", "y"), sd.increment("n", 4), sd.insert("new", 1),
            sd.upsert("meta.by", "test", xattr=True, create_parents=True)])
        assert written.content_as[int](3) == 5
        assert collection.get("sub").content_as[dict] == {"name": "b", "tags": ["x", "y"], "n": 5, "new": 1,
                                                          "address": {"city": "Paris"}}
        looked = collection.lookup_in("sub", [sd.get("address.city"), sd.exists("nope"), sd.count("tags"),
                                              sd.get("meta.by", xattr=True)])
        assert looked.content_as[str](0) == "Paris"
        assert looked.exists(1) is False
        assert looked.content_as[int](2) == 2
        assert looked.content_as[str](3) == "test"
        assert looked.cas == written.cas
        with pytest.raises(PathNotFoundException):
            collection.mutate_in("sub", [sd.remove("nope")])
        with pytest.raises(PathExistsException):
            collection.mutate_in("sub", [sd.insert("name", "c")])
        assert collection.get("sub").cas == written.cas  # a failed path writes nothing
    finally:
        cluster.close()
