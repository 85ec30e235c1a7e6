"""dcpctl redact on the official Python SDK's traffic (a real client: SCRAM, its HELLO user agent, frame
infos, subdocument, durability), captured on loopback by dumpcap as pcapng while it works against
``dcpctl serve``: decode agrees field by field, no document string or key is left, tshark reads it as
cleanly as the input."""

from __future__ import annotations

import importlib.util
import json
import signal
import time
from datetime import timedelta
from pathlib import Path

import couchbase.subdocument as sd
import pytest
from couchbase.auth import PasswordAuthenticator
from couchbase.cluster import Cluster
from couchbase.options import ClusterOptions, ClusterTimeoutOptions
from servekit import Server, serving

from dcpctl.exitcode import ExitCode
from dcpctl.redact.address import AddressMap
from dcpctl.sources.pcap import TLS_PORTS

pytestmark = pytest.mark.peer

HERE = Path(__file__).resolve().parent


def _load(name: str, path: Path) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# the dumpcap helper of the SDK capture test, and this directory's comparisons
sdk: object = _load("sdk_capture_for_redact", HERE.parent / "sources" / "test_sdk_capture.py")
kit: object = _load("redact_capture_for_sdk", HERE / "test_redact_capture.py")
SECRET_KEY = "customer-document-0042"
SECRET_TEXT = "Jane Q. Customer, 12 Private Lane"


def _session(port: int) -> None:
    timeouts = ClusterTimeoutOptions(kv_timeout=timedelta(seconds=5), connect_timeout=timedelta(seconds=10))
    cluster = Cluster(f"couchbase://127.0.0.1:{port}",
                      ClusterOptions(PasswordAuthenticator("Administrator", "password"), timeout_options=timeouts))
    cluster.wait_until_ready(timedelta(seconds=10))
    collection = cluster.bucket("default").default_collection()
    collection.upsert(SECRET_KEY, {"owner": SECRET_TEXT, "balance": 123456.78, "tags": ["vip customer"]})
    collection.get(SECRET_KEY)
    collection.lookup_in(SECRET_KEY, [sd.get("owner")])
    collection.mutate_in(SECRET_KEY, [sd.upsert("note", "called about the Private Lane account")])
    collection.remove(SECRET_KEY)
    cluster.close()


@pytest.fixture
def server() -> object:
    with serving() as running:
        yield running


def test_the_sdks_capture_redacts(server: Server, tmp_path: Path) -> None:
    capture = tmp_path / "sdk.pcapng"
    dumpcap = sdk._capture_on_loopback(server.port, capture)  # type: ignore[attr-defined]
    try:
        _session(server.port)
        time.sleep(0.5)
    finally:
        dumpcap.send_signal(signal.SIGINT)
        dumpcap.communicate(timeout=30)
    target = tmp_path / "sdk.redacted.pcap"
    run = kit._redact(capture, target, "--port", str(server.port))  # type: ignore[attr-defined]
    assert run.code == ExitCode.OK, run.err.getvalue()
    assert "SASL values" in run.err.getvalue()
    data = target.read_bytes()
    for secret in (SECRET_KEY, SECRET_TEXT, "vip customer", "Private Lane", "123456"):
        assert secret.encode() not in data, secret
        assert not any(secret.encode() in stream for stream in kit._streams_on(target, server.port)), secret  # type: ignore[attr-defined]
    before = kit._decoded_on(capture, server.port)  # type: ignore[attr-defined]
    after = kit._decoded_on(target, server.port)  # type: ignore[attr-defined]
    assert len(before) == len(after)
    assert {r["opcode"] for r in before} >= {"HELLO", "SASL_AUTH", "SET", "GET", "SUBDOC_MULTI_LOOKUP", "DELETE"}
    for old, new in zip(before, after, strict=True):
        changed = [p for p in kit._differences(old, new, ()) if p != ("diagnostics", "message")]  # type: ignore[attr-defined]
        assert all(kit._redactable(p) for p in changed), (old["opcode"], changed)  # type: ignore[attr-defined]
    agents = [r["key"] for r in after if r["opcode"] == "HELLO" and r["magic"] == "ClientRequest"]
    assert agents
    assert all("couchbase" not in str(a) and "python" not in str(a).lower() for a in agents)
    (expert_in, malformed_in), (expert_out, malformed_out) = kit._expert(capture), kit._expert(target)  # type: ignore[attr-defined]
    assert malformed_out.count("\n") <= malformed_in.count("\n"), malformed_out
    assert kit._warnings(expert_out) <= kit._warnings(expert_in), (expert_in, expert_out)  # type: ignore[attr-defined]
    # --map-addresses: loopback leaves no trace, in the headers or in the map the SDK read; the SDK's ports are
    # mapped, serve's (given with --port) kept
    mapped = tmp_path / "sdk.mapped.pcap"
    run = kit._redact(capture, mapped, "--port", str(server.port), "--map-addresses")  # type: ignore[attr-defined]
    assert run.code == ExitCode.OK, run.err.getvalue()
    assert b"127.0.0.1" not in mapped.read_bytes()
    assert not any(b"127.0.0.1" in stream for stream in kit._streams_on(mapped, server.port))  # type: ignore[attr-defined]
    read_in, read_out = kit._addresses_read(capture), kit._addresses_read(mapped)  # type: ignore[attr-defined]
    assert read_in["ip.src"] == {"127.0.0.1"}
    assert "127.0.0.1" not in read_out["ip.src"] | read_out["ip.dst"]
    clients = {int(port) for port in read_in["tcp.srcport"]} - {server.port}
    assert clients
    assert all(port >= 32768 for port in clients)  # Linux's ephemeral ports
    # each as the salt's map has it (a port may by chance map to itself: a permutation has fixed points)
    ports = AddressMap(kit.SALT.encode(), frozenset({server.port}) | TLS_PORTS)  # type: ignore[attr-defined]
    assert {int(port) for port in read_out["tcp.srcport"]} == {ports.port(port) for port in clients} | {server.port}
    assert str(server.port) in read_out["tcp.dstport"]
    assert len(kit._decoded_on(mapped, server.port)) == len(before)  # type: ignore[attr-defined]


# names a customer's cluster gives away: its bucket, scope and collection (each long enough not to occur by
# chance in a capture's bytes)
BUCKET, SCOPE, COLLECTION = "acme-customer-orders", "acme_europe", "invoices_2026"


def test_hash_names_leaves_no_bucket_scope_or_collection_name_in_the_sdks_capture(tmp_path: Path) -> None:
    # the SDK reads the map (the bucket's name and URIs), asks GET_COLLECTION_ID for scope.collection (in the
    # value, as clients since MB-42701 do) and sends keys with the collection's id: nothing of it in clear
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"uid": "2", "scopes": [
        {"name": "_default", "uid": "0", "collections": [{"name": "_default", "uid": "0"}]},
        {"name": SCOPE, "uid": "8", "collections": [{"name": COLLECTION, "uid": "9"}]}]}))
    capture, target = tmp_path / "sdk.pcapng", tmp_path / "sdk.hashed.pcap"
    with serving("--bucket", BUCKET, "--collections", str(manifest)) as server:
        dumpcap = sdk._capture_on_loopback(server.port, capture)  # type: ignore[attr-defined]
        try:
            timeouts = ClusterTimeoutOptions(kv_timeout=timedelta(seconds=5), connect_timeout=timedelta(seconds=10))
            cluster = Cluster(f"couchbase://127.0.0.1:{server.port}", ClusterOptions(
                PasswordAuthenticator("Administrator", "password"), timeout_options=timeouts))
            cluster.wait_until_ready(timedelta(seconds=10))
            collection = cluster.bucket(BUCKET).scope(SCOPE).collection(COLLECTION)
            collection.upsert(SECRET_KEY, {"owner": SECRET_TEXT})
            collection.get(SECRET_KEY)
            cluster.close()
            time.sleep(0.5)
        finally:
            dumpcap.send_signal(signal.SIGINT)
            dumpcap.communicate(timeout=30)
        port = str(server.port)
    data = capture.read_bytes()
    assert all(name.encode() in data for name in (BUCKET, SCOPE, COLLECTION))
    run = kit._redact(capture, target, "--port", port, "--hash-names")  # type: ignore[attr-defined]
    assert run.code == ExitCode.OK, run.err.getvalue()
    streams = kit._streams_on(target, server.port)  # type: ignore[attr-defined]
    for name in (BUCKET, SCOPE, COLLECTION, SECRET_KEY):
        assert name.encode() not in target.read_bytes(), name
        assert not any(name.encode() in stream for stream in streams), name
    after = kit._decoded_on(target, server.port)  # type: ignore[attr-defined]
    paths = [r["value"] for r in after if r["opcode"] == "COLLECTIONS_GET_ID" and r["magic"] == "ClientRequest"]
    assert paths
    assert all(len(p) == len(f"{SCOPE}.{COLLECTION}") and p.count(".") == 1 for p in paths)
