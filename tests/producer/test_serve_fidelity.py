"""``dcpctl serve`` where a data node's behaviour is easy to get wrong: what kv_engine sends, not what is convenient.

The sans-IO :class:`ProducerConnection` is driven directly (bytes in, bytes out); expectations are computed
from the bucket's own items, so they hold for any seed.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from servekit import peer

from dcpctl.dcp.sasl import plain_message
from dcpctl.producer.connection import Cluster, Node, ProducerConnection
from dcpctl.producer.store import Bucket, Manifest
from dcpctl.protocol.constants import Opcode
from dcpctl.protocol.encode import encode
from dcpctl.protocol.framer import Frame, Framer
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.protocol.value import Xattr, build_xattrs, snappy_decompress
from dcpctl.render.record import record as record_of

SCHEMA = Path(__file__).parents[1] / "vectors" / "reference" / "system_events.fbs"  # flatc's, from the reference

END = (1 << 64) - 1
AIRLINE, HOTEL = 9, 10
MANIFEST = Manifest(5, {0: (0, "_default"), AIRLINE: (8, "airline"), HOTEL: (8, "hotel")},
                    {0: "_default", 8: "inventory"})
ITEMS = 60  # one vbucket
# The manifest's system events open every vbucket's history (CreateScope inventory, BeginCollection airline and
# hotel at seqnos 1..3), so a MANIFEST bucket's items are at 4..HIGH
EVENTS = 3
HIGH = EVENTS + ITEMS
ITEM_OPCODES = frozenset({"DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION", "DCP_PREPARE", "DCP_COMMIT",
                          "DCP_ABORT"})
TO_LATEST = 0x04
PRODUCER, INCLUDE_XATTRS, NO_VALUE = 0x01, 0x04, 0x08  # DCP_OPEN flags (reference 7.1)
NO_VALUE_WITH_UNDERLYING_DATATYPE, SKIP_DELETES_IN_INITIAL_BACKFILL = 0x40, 0x200
JSON, SNAPPY, XATTR = 0x01, 0x02, 0x04  # datatype bits (reference 6.1)


def cluster(bucket: Bucket | None = None) -> Cluster:
    bucket = bucket or Bucket("default", 1, ITEMS, 20, 7, MANIFEST)
    return Cluster(bucket, [("127.0.0.1", 11210)], [0] * len(bucket.vbuckets), {"Administrator": "password"})


def packet(**record: Any) -> bytes:
    record.setdefault("magic", "ClientRequest")
    record.setdefault("opaque", 1)
    return encode(record, fix_lengths=True)


def messages(conn: ProducerConnection, data: bytes) -> list[Message]:
    framer = Framer()
    framer.feed(data)
    out = []
    for event in framer.events():
        assert isinstance(event, Frame)
        out.append(decode(event.data, event.offset, DecodeOptions(collections=conn.collections)))
    return out


def records(conn: ProducerConnection, data: bytes) -> list[dict[str, Any]]:
    return [record_of(message) for message in messages(conn, data)]


def call(conn: ProducerConnection, **record: Any) -> list[dict[str, Any]]:
    """The answers to one request (stream data left for :func:`drain`)."""
    conn.receive(packet(**record), 0)
    return records(conn, conn.produce(1 << 20, 0))


def drain(conn: ProducerConnection) -> list[dict[str, Any]]:
    """Every stream message until the connection has nothing more to send."""
    out: list[dict[str, Any]] = []
    while data := conn.produce(1 << 20):
        out += records(conn, data)
    return out


def session(*features: str, flags: int = 1, controls: dict[str, str] | None = None,
            on: Cluster | None = None, name: str = "t", xerror: bool = True) -> ProducerConnection:
    conn = ProducerConnection(Node(0, on or cluster()))
    steps = [{"opcode": "HELLO", "key": "t", "features": [*(["Xerror"] if xerror else []), "JSON", *features]},
             {"opcode": "SASL_AUTH", "key": "PLAIN", "value": plain_message("Administrator", "password").hex(),
                  "value_encoding": "hex"},
             {"opcode": "SELECT_BUCKET", "key": "default"},
             {"opcode": "DCP_OPEN", "key": name, "seqno": 0, "flags": flags}]
    steps += [{"opcode": "DCP_CONTROL", "key": k, "value": v}
              for k, v in (controls if controls is not None else {"enable_noop": "true"}).items()]
    for step in steps:
        assert [a["status"] for a in call(conn, **step)] == ["Success"], step
    return conn


def request(conn: ProducerConnection, *, start: int = 0, end: int = END, uuid: int = 0, flags: int = 0,
            value: str | None = None, vbucket: int = 0) -> str:
    """A stream request's status (the stream's messages left to produce)."""
    record: dict[str, Any] = {"opcode": "DCP_STREAM_REQ", "vbucket": vbucket, "flags": flags, "reserved": 0,
                              "start_seqno": start, "end_seqno": end, "vbucket_uuid": uuid,
                              "snap_start_seqno": start, "snap_end_seqno": start}
    if value is not None:
        record["value"] = value
    return str(call(conn, **record)[0]["status"])


def stream(conn: ProducerConnection, *, start: int = 0, end: int = END, uuid: int = 0, flags: int = 0,
           value: str | None = None, vbucket: int = 0) -> tuple[str, list[dict[str, Any]]]:
    """A stream request's status and the stream's messages."""
    status = request(conn, start=start, end=end, uuid=uuid, flags=flags, value=value, vbucket=vbucket)
    return status, drain(conn)


FLATBUFFERS = {"enable_noop": "true", "flatbuffers_system_events": "true"}  # controls: version-2 system events


def collection_seqnos(bucket: Bucket, collection: int) -> list[int]:
    """The seqnos of the collection's items (its system event is not one)."""
    vb = bucket.vbuckets[0]
    return [s for s in range(1, vb.high_seqno + 1) if bucket.item(vb, s).collection_id == collection]


def hidden_end(bucket: Bucket) -> int:
    """A collection of MANIFEST whose items do not reach the vbucket's high seqno (the seed decides which)."""
    return next(c for c in (AIRLINE, HOTEL) if collection_seqnos(bucket, c)[-1] < bucket.vbuckets[0].high_seqno)


# --- 1. DCP_SEQNO_ADVANCED at the end of a snapshot the filter hides the end of ------------------------
def test_a_filtered_snapshot_ending_on_a_hidden_seqno_is_completed_by_seqno_advanced() -> None:
    conn = session("Collections")
    bucket = conn.node.cluster.bucket
    collection = hidden_end(bucket)
    status, got = stream(conn, value=f'{{"collections":["{collection:x}"]}}')
    assert status == "Success"
    assert next(r["opcode"] for r in got) == "DCP_SNAPSHOT_MARKER"
    assert got[0]["snap_end_seqno"] == HIGH
    assert [r["by_seqno"] for r in got if r["opcode"] in ITEM_OPCODES] == collection_seqnos(bucket, collection)
    # reference 3.8: the snapshot is consistent once a SeqnoAdvanced to its end is processed (3.18)
    assert (got[-1]["opcode"], got[-1]["by_seqno"]) == ("DCP_SEQNO_ADVANCED", HIGH)
    assert all(r["diagnostics"] == [] for r in got)


def test_seqno_advanced_only_where_the_snapshot_end_is_hidden_and_only_with_collections() -> None:
    conn = session("Collections")
    bucket = conn.node.cluster.bucket
    last = bucket.item(bucket.vbuckets[0], HIGH).collection_id
    _, seen = stream(conn, value=f'{{"collections":["{last:x}"]}}')
    assert "DCP_SEQNO_ADVANCED" not in [r["opcode"] for r in seen]  # its last item is the snapshot's end
    legacy = session()
    _, default = stream(legacy)  # the default collection only, but a legacy client is never sent one (3.18)
    assert "DCP_SEQNO_ADVANCED" not in [r["opcode"] for r in default]


# --- a memory snapshot is what the stream is sent of what the checkpoints hold (processItemsInner) ----------
def write(bucket: Bucket, collection: int, key: bytes, *, durable: bool = False) -> None:
    bucket.write(bucket.vbuckets[0], collection, key, b"{}", JSON, 0, 0, None, durability_level=int(durable))


def test_a_filtered_memory_snapshot_runs_from_its_first_item_to_its_last() -> None:
    """kv_engine's memory marker starts at the first item the stream is sent and ends at its last
    (ActiveStream::snapshot), and what holds nothing for the stream sends nothing: serve's ran from the
    stream's next seqno to the high seqno, with a DCP_SEQNO_ADVANCED over the other collection's writes."""
    on = cluster()
    filtered = session("Collections", on=on)
    assert stream(filtered, value='{"collections":["9"]}')[0] == "Success"  # its backfill, drained
    write(on.bucket, HOTEL, b"h1")  # HIGH + 1
    write(on.bucket, AIRLINE, b"a1")
    write(on.bucket, HOTEL, b"h2")
    got = drain(filtered)
    assert flags_of(got) == [(HIGH + 2, HIGH + 2, MEMORY | CHECKPOINT_FLAG)]
    assert [(r["opcode"], r.get("by_seqno")) for r in got[1:]] == [("DCP_MUTATION", HIGH + 2)]
    write(on.bucket, HOTEL, b"h3")
    assert drain(filtered) == []  # nothing of its collection: no snapshot
    write(on.bucket, AIRLINE, b"a2")  # HIGH + 5
    assert flags_of(drain(filtered)) == [(HIGH + 5, HIGH + 5, MEMORY)]


def test_a_prepare_a_stream_is_not_sent_ends_its_memory_snapshot_and_is_advanced_over() -> None:
    """highNonVisibleSeqno: a collection stream without sync writes is not sent a prepare of its collection,
    but its snapshot ends there and a DCP_SEQNO_ADVANCED says so; a prepare alone is a snapshot of its own
    (MB-48368)."""
    bucket = Bucket("default", 1, ITEMS, 20, 7, MANIFEST, silent_replicas=1)  # durable writes stay pending
    conn = session("Collections", on=cluster(bucket))
    assert stream(conn)[0] == "Success"
    write(bucket, AIRLINE, b"m")  # HIGH + 1
    write(bucket, AIRLINE, b"p", durable=True)
    got = drain(conn)
    assert flags_of(got) == [(HIGH + 1, HIGH + 2, MEMORY | CHECKPOINT_FLAG)]
    assert [(r["opcode"], r["by_seqno"]) for r in got[1:]] == [("DCP_MUTATION", HIGH + 1),
                                                              ("DCP_SEQNO_ADVANCED", HIGH + 2)]
    write(bucket, HOTEL, b"q", durable=True)  # HIGH + 3
    got = drain(conn)
    assert flags_of(got) == [(HIGH + 3, HIGH + 3, MEMORY)]
    assert [(r["opcode"], r["by_seqno"]) for r in got[1:]] == [("DCP_SEQNO_ADVANCED", HIGH + 3)]
    hotel = session("Collections", on=cluster(bucket), name="hotel")
    assert stream(hotel, start=HIGH + 3, uuid=bucket.vbuckets[0].failover_log[0].vbucket_uuid,
                  value='{"collections":["a"]}')[0] == "Success"
    write(bucket, AIRLINE, b"p2", durable=True)  # another collection's: nothing to advance over
    assert drain(hotel) == []


def test_a_scope_filter_widened_inside_a_memory_snapshot_ends_it_on_the_new_collections_item() -> None:
    """The collection a later manifest adds to its scope is the stream's from its creation on, inside the
    snapshot too (kv_engine's filter follows the events as it reads): the snapshot ends on its item, not on
    the default collection's write after it."""
    on = cluster()
    scoped = session("Collections", on=on)
    assert stream(scoped, value='{"scope":"8"}')[0] == "Success"
    on.bucket.apply_manifest(WITH_CAR)
    write(on.bucket, CAR, b"car")  # HIGH + 2, after its creation at HIGH + 1
    write(on.bucket, 0, b"other")
    got = drain(scoped)
    assert flags_of(got) == [(HIGH + 1, HIGH + 2, MEMORY | CHECKPOINT_FLAG)]
    assert [(r["opcode"], r["by_seqno"]) for r in got[1:]] == [("DCP_SYSTEM_EVENT", HIGH + 1),
                                                              ("DCP_MUTATION", HIGH + 2)]


def test_a_snapshot_only_to_be_advanced_over_has_a_v1_marker() -> None:
    """sendSnapshotAndSeqnoAdvanced sends its marker without the max visible and high completed seqnos, so
    a sync-replication consumer, whose markers are v2.0, gets a v1 one there: here for a ModifyCollection,
    which it is not sent without FlatBuffers."""
    on = cluster()
    replica = session("Collections", on=on, controls={"enable_noop": "true", "enable_sync_writes": "true",
                                                      "consumer_name": "replica"})
    assert stream(replica)[0] == "Success"
    on.bucket.apply_manifest(Manifest(6, dict(MANIFEST.collections), dict(MANIFEST.scopes), {HOTEL: 60}))
    got = drain(replica)
    assert [r["opcode"] for r in got] == ["DCP_SNAPSHOT_MARKER", "DCP_SEQNO_ADVANCED"]
    assert flags_of(got) == [(HIGH + 1, HIGH + 1, MEMORY | CHECKPOINT_FLAG)]
    assert "max_visible_seqno" not in got[0]
    write(on.bucket, AIRLINE, b"after")
    assert "max_visible_seqno" in drain(replica)[0]  # a snapshot of an item it is sent: v2.0 again


def test_a_takeover_waits_no_answer_for_a_marker_only_to_be_advanced_over() -> None:
    """sendSnapshotAndSeqnoAdvanced's marker is not flagged Acknowledge, and waitForSnapshot does not count it:
    the vbucket state goes out once the stream is caught up, with no marker answered."""
    bucket = Bucket("default", 1, ITEMS, 20, 7, MANIFEST, silent_replicas=1)  # durable writes stay pending
    conn = session("Collections", on=cluster(bucket))
    uuid = bucket.vbuckets[0].failover_log[0].vbucket_uuid
    assert request(conn, start=HIGH, uuid=uuid, flags=TAKE_OVER) == "Success"  # from the high seqno: no backfill
    write(bucket, AIRLINE, b"p", durable=True)  # a prepare, which this stream is not sent
    got = drain(conn)
    assert [r["opcode"] for r in got] == ["DCP_SNAPSHOT_MARKER", "DCP_SEQNO_ADVANCED", "DCP_SET_VBUCKET_STATE"]
    assert flags_of(got) == [(HIGH, HIGH + 1, MEMORY | CHECKPOINT_FLAG)]


def test_a_legacy_memory_snapshot_starts_at_its_first_default_collection_item() -> None:
    on = cluster()
    legacy = session(on=on)
    assert stream(legacy)[0] == "Success"
    write(on.bucket, HOTEL, b"h")  # HIGH + 1: not the default collection's
    write(on.bucket, 0, b"d")
    got = drain(legacy)
    assert flags_of(got) == [(HIGH + 2, HIGH + 2, MEMORY | CHECKPOINT_FLAG)]
    assert sent_seqnos(got) == [HIGH + 2]


# --- 2. a filtered stream's collection high seqno: ToLatest and the purge rule ------------------------
def test_to_latest_ends_a_filtered_stream_at_its_collections_high_seqno() -> None:
    conn = session("Collections")
    airline = collection_seqnos(conn.node.cluster.bucket, AIRLINE)
    status, got = stream(conn, flags=TO_LATEST, value='{"collections":["9"]}')
    assert status == "Success"
    assert got[0]["snap_end_seqno"] == airline[-1]  # reference 3.4.2: not the vbucket's high seqno
    assert [r["by_seqno"] for r in got if r["opcode"] in ITEM_OPCODES] == airline
    assert [r["opcode"] for r in got][-1] == "DCP_STREAM_END"


def test_the_purge_rule_exempts_a_filtered_stream_at_its_collections_high_seqno() -> None:
    on = cluster()
    bucket = on.bucket
    vb = bucket.vbuckets[0]
    bucket.purge(vb, vb.high_seqno)  # the whole history purged
    collection = hidden_end(bucket)  # its high seqno is below the purge seqno
    high = collection_seqnos(bucket, collection)[-1]
    only = f'{{"collections":["{collection:x}"]}}'
    uuid = vb.failover_log[0].vbucket_uuid
    conn = session("Collections", on=on)
    # reference 9.1 step 2: start >= max_coll_high and max_coll_high <= purge: nothing of it was purged
    status, _ = stream(conn, start=high, uuid=uuid, value=only)
    assert status == "Success"
    status, _ = stream(session("Collections", on=on), start=high - 1, uuid=uuid, value=only)
    assert status == "Rollback"  # below its collection's high seqno: purged items it has not seen
    status, _ = stream(session("Collections", on=on), start=high, uuid=uuid)
    assert status == "Rollback"  # a pass-through stream is never exempt


def test_a_prepare_hidden_from_a_client_without_sync_writes_is_advanced_over() -> None:
    bucket = Bucket("default", 1, ITEMS, 20, 7, MANIFEST, silent_replicas=1)
    bucket.write(bucket.vbuckets[0], 0, b"pending", b"{}", 1, 0, 0, None, durability_level=1)  # never commits
    conn = session("Collections", on=cluster(bucket))
    _, got = stream(conn)
    assert got[0]["snap_end_seqno"] == HIGH + 1
    assert "DCP_PREPARE" not in [r["opcode"] for r in got]
    assert (got[-1]["opcode"], got[-1]["by_seqno"]) == ("DCP_SEQNO_ADVANCED", HIGH + 1)  # reference 3.18


# --- 3. DCP_OPEN flags that shape the items ----------------------------------------------------------
XATTRS = build_xattrs([Xattr("_sys", '{"x":1}')])
BODY = b'{"body":true}'


def xattr_cluster() -> Cluster:
    """A bucket with one document with xattrs, at seqno 1 of vbucket 0."""
    bucket = Bucket("default", 1, 0, 20, 7)
    bucket.write(bucket.vbuckets[0], 0, b"xk", XATTRS + BODY, JSON | XATTR, 0, 0, None)
    return cluster(bucket)


def first_mutation(flags: int, on: Cluster) -> Message:
    """The first DCP_MUTATION of a stream from 0 on a connection opened with ``flags``."""
    conn = session("Xattr", flags=flags, on=on)
    assert call(conn, opcode="DCP_STREAM_REQ", vbucket=0, flags=0, reserved=0, start_seqno=0, end_seqno=END,
                vbucket_uuid=0, snap_start_seqno=0, snap_end_seqno=0)[0]["status"] == "Success"
    return next(m for m in messages(conn, conn.produce(1 << 20)) if m.opcode == Opcode.DCP_MUTATION)


def test_no_value_with_underlying_datatype_keeps_the_documents_datatype() -> None:
    on = xattr_cluster()
    stripped = first_mutation(PRODUCER | NO_VALUE_WITH_UNDERLYING_DATATYPE, on)
    assert (stripped.value, stripped.datatype) == (b"", JSON | XATTR)  # reference 6.1, 7.1
    plain = first_mutation(PRODUCER | NO_VALUE, on)
    assert (plain.value, plain.datatype) == (b"", 0)


def test_no_value_with_include_xattrs_sends_the_xattr_section() -> None:
    on = xattr_cluster()
    got = first_mutation(PRODUCER | INCLUDE_XATTRS | NO_VALUE, on)
    assert (got.value, got.datatype) == (XATTRS, XATTR)  # reference 7.1: values stripped, xattrs still sent
    whole = first_mutation(PRODUCER | INCLUDE_XATTRS, on)
    assert (whole.value, whole.datatype) == (XATTRS + BODY, JSON | XATTR)
    body = first_mutation(PRODUCER, on)
    assert (body.value, body.datatype) == (BODY, JSON)


def test_skip_deletes_in_initial_backfill_leaves_tombstones_out_of_a_stream_from_zero() -> None:
    bucket = Bucket("default", 1, ITEMS, 20, 7)
    vb = bucket.vbuckets[0]
    tombstones = [s for s in range(1, ITEMS + 1) if bucket.item(vb, s).opcode != 0x57]
    assert tombstones  # the seed has deletions among its items
    on = cluster(bucket)
    # kv_engine skips them on collection-enabled streams only (isSkipDeletesInInitialBackfillEnabled): a legacy
    # stream's snapshot could not end on a tombstone it is not sent
    _, legacy = stream(session(flags=PRODUCER | SKIP_DELETES_IN_INITIAL_BACKFILL, on=on, name="legacy"))
    assert [r["by_seqno"] for r in legacy if r["opcode"] in ITEM_OPCODES] == list(range(1, ITEMS + 1))
    _, got = stream(session("Collections", flags=PRODUCER | SKIP_DELETES_IN_INITIAL_BACKFILL, on=on))
    sent = [r["by_seqno"] for r in got if r["opcode"] in ITEM_OPCODES]
    assert sent == [s for s in range(1, ITEMS + 1) if s not in tombstones]
    # a stream from any other seqno is not an initial backfill: its tombstones are sent (kv_engine's MB-26074)
    uuid = vb.failover_log[0].vbucket_uuid
    _, later = stream(session("Collections", flags=PRODUCER | SKIP_DELETES_IN_INITIAL_BACKFILL, on=on),
                      start=1, uuid=uuid)
    assert [r["by_seqno"] for r in later if r["opcode"] in ITEM_OPCODES] == list(range(2, ITEMS + 1))
    # and only the disk snapshot: a deletion after it, in a memory snapshot, goes out
    conn = session("Collections", flags=PRODUCER | SKIP_DELETES_IN_INITIAL_BACKFILL, on=on)
    stream(conn)
    doc = bucket.document(vb, 0, b"doc-x") or bucket.write(vb, 0, b"doc-x", b"{}", JSON, 0, 0, None)
    bucket.write(vb, 0, b"doc-x", b"", 0, 0, 0, doc, opcode=0x58)
    assert [r["opcode"] for r in drain(conn) if r["opcode"] in ITEM_OPCODES][-1] == "DCP_DELETION"


def test_a_skipped_tombstone_at_the_snapshot_end_is_advanced_over() -> None:
    bucket = Bucket("default", 1, ITEMS, 20, 7, MANIFEST)
    vb = bucket.vbuckets[0]
    doc = bucket.write(vb, 0, b"gone", b"{}", JSON, 0, 0, None)
    bucket.write(vb, 0, b"gone", b"", 0, 0, 0, doc, opcode=0x58)  # the snapshot ends on a tombstone
    _, got = stream(session("Collections", flags=PRODUCER | SKIP_DELETES_IN_INITIAL_BACKFILL, on=cluster(bucket)))
    assert "DCP_DELETION" not in [r["opcode"] for r in got]
    assert (got[-1]["opcode"], got[-1]["by_seqno"]) == ("DCP_SEQNO_ADVANCED", vb.high_seqno)  # reference 7.1


# --- 4. GET_ALL_VB_SEQNOS -----------------------------------------------------------------------------
def kv_session(*features: str, on: Cluster) -> ProducerConnection:
    """A connection that authenticated and selected the bucket (no DCP_OPEN)."""
    conn = ProducerConnection(Node(0, on))
    for step in ({"opcode": "HELLO", "key": "t", "features": ["Xerror", *features]},
                 {"opcode": "SASL_AUTH", "key": "PLAIN", "value": plain_message("Administrator", "password").hex(),
                      "value_encoding": "hex"},
                 {"opcode": "SELECT_BUCKET", "key": "default"}):
        assert [a["status"] for a in call(conn, **step)] == ["Success"], step
    return conn


def all_vb_seqnos(conn: ProducerConnection, **fields: Any) -> list[tuple[int, int]]:
    answer = call(conn, opcode="GET_ALL_VB_SEQNOS", **fields)[0]
    assert answer["status"] == "Success", answer
    return [(entry["vbucket"], entry["seqno"]) for entry in answer["vbucket_seqnos"]]


def test_get_all_vb_seqnos_gives_a_legacy_client_the_default_collections_seqno() -> None:
    on = cluster()
    default = collection_seqnos(on.bucket, 0)[-1]
    assert default < HIGH
    assert all_vb_seqnos(kv_session(on=on)) == [(0, default)]  # reference 4.6: implicitly the default collection
    collections = kv_session("Collections", on=on)
    assert all_vb_seqnos(collections) == [(0, HIGH)]
    assert all_vb_seqnos(collections, vbucket_state_filter=0, collection_id=AIRLINE) == [
        (0, collection_seqnos(on.bucket, AIRLINE)[-1])]


def test_get_all_vb_seqnos_hides_a_pending_prepare_from_a_client_without_sync_writes() -> None:
    bucket = Bucket("default", 1, ITEMS, 20, 7, silent_replicas=1)
    bucket.write(bucket.vbuckets[0], 0, b"pending", b"{}", JSON, 0, 0, None, durability_level=1)
    on = cluster(bucket)
    assert all_vb_seqnos(kv_session(on=on)) == [(0, ITEMS)]  # the max visible seqno (reference 4.6)
    assert all_vb_seqnos(kv_session("SyncReplication", on=on)) == [(0, ITEMS + 1)]
    assert all_vb_seqnos(kv_session("Collections", on=on)) == [(0, ITEMS + 1)]
    # STAT vbucket-seqno says both: the high seqno is the prepare's, the max visible seqno the item before it
    stats = {r["key"]: r["value"] for r in call(kv_session(on=on), opcode="STAT", key="vbucket-seqno")
             if r.get("key")}
    assert (stats["vb_0:high_seqno"], stats["vb_0:max_visible_seqno"]) == (str(ITEMS + 1), str(ITEMS))


def test_get_all_vb_seqnos_is_validated_as_kv_engine_validates_it() -> None:
    conn = kv_session("Collections", on=cluster())
    for record in ({"extras": "0000"}, {"extras": "000000000000"}, {"extras": "00" * 12},
                   {"vbucket_state_filter": 1, "key": "k"}, {"vbucket_state_filter": 1, "cas": 5},
                   {"vbucket_state_filter": 5}, {"vbucket_state_filter": 0xFFFF_FFFF}):  # a BE i32: -1
        assert call(conn, opcode="GET_ALL_VB_SEQNOS", **record)[0]["status"] == "Einval", record
    for state in range(5):  # Alive, Active, Replica, Pending, Dead: only the first two list this node's copies
        assert len(all_vb_seqnos(conn, vbucket_state_filter=state)) == (1 if state <= 1 else 0)


# --- 5. force_value_compression -----------------------------------------------------------------------
def test_force_value_compression_sends_snappy_values() -> None:
    on = xattr_cluster()
    conn = session("Snappy", "Xattr", flags=PRODUCER | INCLUDE_XATTRS,
                   controls={"enable_noop": "true", "force_value_compression": "true"}, on=on)
    assert call(conn, opcode="DCP_STREAM_REQ", vbucket=0, flags=0, reserved=0, start_seqno=0, end_seqno=END,
                vbucket_uuid=0, snap_start_seqno=0, snap_end_seqno=0)[0]["status"] == "Success"
    mutation = next(m for m in messages(conn, conn.produce(1 << 20)) if m.opcode == Opcode.DCP_MUTATION)
    assert mutation.datatype == SNAPPY | JSON | XATTR  # reference 6.1: the whole value, xattrs included
    assert snappy_decompress(mutation.value) == XATTRS + BODY
    plain = session("Snappy", "Xattr", flags=PRODUCER | INCLUDE_XATTRS, on=on)
    assert first_mutation(PRODUCER | INCLUDE_XATTRS, on).datatype == JSON | XATTR  # not without the control
    assert plain.encoding().compressed is False


# --- 6. flow control counts a prepare as the server does ----------------------------------------------
def test_a_prepare_counts_two_bytes_more_against_the_window() -> None:
    bucket = Bucket("default", 1, 0, 20, 7)
    bucket.write(bucket.vbuckets[0], 0, b"durable", b"{}", JSON, 0, 0, None, durability_level=1)
    conn = session(controls={"enable_noop": "true", "connection_buffer_size": "100000",
                             "enable_sync_writes": "true"}, on=cluster(bucket))
    call(conn, opcode="DCP_STREAM_REQ", vbucket=0, flags=0, reserved=0, start_seqno=0, end_seqno=END,
         vbucket_uuid=0, snap_start_seqno=0, snap_end_seqno=0)
    data = conn.produce(1 << 20)
    sent = messages(conn, data)
    assert [m.opcode for m in sent] == [Opcode.DCP_SNAPSHOT_MARKER, Opcode.DCP_PREPARE, Opcode.DCP_COMMIT]
    assert conn.outstanding == len(data) + 2  # reference 3.17: prepareBaseMsgBytes, MB-46634


# --- 7. a legacy stream once the default collection is dropped ----------------------------------------
def test_a_legacy_stream_request_without_a_default_collection_is_unknown_collection() -> None:
    dropped = Manifest(6, {AIRLINE: (8, "airline")}, {0: "_default", 8: "inventory"})
    on = cluster(Bucket("default", 1, ITEMS, 20, 7, dropped))
    status, got = stream(session(on=on))
    assert (status, got) == ("UnknownCollection", [])  # reference 3.4.4: no stream opens
    assert stream(session(on=on, xerror=False))[0] == "Einval"  # reference 5: as a legacy client is told it
    assert stream(session("Collections", on=on))[0] == "Success"  # a pass-through stream of what there is


# --- 8. a DCP_OPEN name in use ------------------------------------------------------------------------
def test_reusing_a_dcp_open_name_disconnects_the_older_connection() -> None:
    on = cluster()
    first = session(on=on, name="same")
    other = session(on=on, name="other")
    second = session(on=on, name="same")
    assert first.closed is not None  # reference 3.2: re-using a name kills the older connection
    assert (other.closed, second.closed) == (None, None)
    assert stream(second)[0] == "Success"
    elsewhere = ProducerConnection(Node(1, on))  # names are per node, as kv_engine's DcpConnMap is
    for step in ({"opcode": "HELLO", "key": "t", "features": ["Xerror"]},
                 {"opcode": "SASL_AUTH", "key": "PLAIN", "value": plain_message("Administrator", "password").hex(),
                  "value_encoding": "hex"},
                 {"opcode": "SELECT_BUCKET", "key": "default"},
                 {"opcode": "DCP_OPEN", "key": "same", "seqno": 0, "flags": PRODUCER}):
        call(elsewhere, **step)
    assert second.closed is None
    second.release()  # gone: the name is free, and a new open of it closes nothing
    third = session(on=on, name="same")
    assert (other.closed, third.closed) == (None, None)


# --- HELLO Tracing: the server's receive-to-send duration on every response (reference 1.4, 2.3) ------------
def test_a_tracing_client_gets_each_responses_server_duration() -> None:
    """The SDKs ask HELLO Tracing and a data node grants it: every response then comes as AltClientResponse
    with frame id 0, the time from the request's receipt to its answer. serve dropped the feature, so its SDK
    traffic never had one. The bucket's clock here moves 1,509 µs a reading: encoded 100 (reference 2.3)."""
    readings = iter(range(0, 10**12, 1_509_000))
    bucket = Bucket("default", 1, ITEMS, 20, 7, MANIFEST, clock=lambda: next(readings))
    conn = ProducerConnection(Node(0, cluster(bucket)))
    hello = call(conn, opcode="HELLO", key="sdk", features=["Xerror", "JSON", "Tracing"])
    assert hello[0]["magic"] == "AltClientResponse"
    assert "Tracing" in hello[0]["features"]
    assert [(f["name"], f["server_duration_encoded"], f["server_duration_us"]) for f in hello[0]["frame_infos"]] == \
        [("ServerRecvSendDuration", 100, 1509)]
    refused = call(conn, opcode="GET", key="doc", vbucket=0)  # not authenticated: answered all the same
    assert refused[0]["status"] == "Eaccess"
    assert refused[0]["frame_infos"][0]["server_duration_us"] == 1509


def test_without_tracing_responses_have_no_frame_infos() -> None:
    conn = ProducerConnection(Node(0, cluster()))
    hello = call(conn, opcode="HELLO", key="sdk", features=["Xerror", "JSON"])
    assert hello[0]["magic"] == "ClientResponse"
    assert "frame_infos" not in hello[0]


# --- v2.2 snapshot markers: a disk snapshot's purge seqno, for the client's next request (reference 3.8) ------
def test_a_disk_snapshot_says_its_purge_seqno_to_a_client_that_allows_v2_2_markers() -> None:
    """max_marker_version=2.2 was accepted, but every marker stayed v1: a client could never learn the purge
    seqno that the 8.0 stream request's purge_seqno gives back (9.1). The disk snapshot's marker is now v2.2
    when there is a purge seqno to say; the memory snapshots after it, and any without the control, v1."""
    controls = {"enable_noop": "true", "max_marker_version": "2.2"}
    conn = session("Collections", controls=controls)
    bucket = conn.node.cluster.bucket
    bucket.purge(bucket.vbuckets[0], 10)
    status, got = stream(conn)
    assert status == "Success"
    marker = got[0]
    assert (marker["opcode"], marker["extras_length"], marker["purge_seqno"]) == ("DCP_SNAPSHOT_MARKER", 1, 10)
    assert (marker["snap_start_seqno"], marker["snap_end_seqno"], marker["max_visible_seqno"]) == (0, HIGH, HIGH)
    assert marker["high_prepared_seqno"] == 0  # not a sync-replication consumer
    assert marker["diagnostics"] == []
    plain = session("Collections")
    plain.node.cluster.bucket.purge(plain.node.cluster.bucket.vbuckets[0], 10)
    assert stream(plain)[1][0]["extras_length"] == 20  # v1 without the control
    unpurged = session("Collections", controls=controls)
    assert stream(unpurged)[1][0]["extras_length"] == 20  # nothing to say: v1


# --- a purge removes tombstones from disk: a backfill does not have them (reference 9.1) --------------------
def test_a_backfill_has_no_tombstone_at_or_below_the_purge_seqno() -> None:
    """Purging moved only the purge seqno: a stream from 0 still got the tombstones the purge removed, which
    is what makes a client that resumes below the purge seqno roll back to 0 on a real node."""
    items = 400
    conn = session(on=cluster(Bucket("default", 1, items, 20, 7)))  # the default collection alone
    bucket = conn.node.cluster.bucket
    vb = bucket.vbuckets[0]
    tombstones = [s for s in range(1, items + 1) if bucket.tombstone(bucket.item(vb, s))]
    assert len(tombstones) >= 4
    cut = tombstones[len(tombstones) // 2]  # some tombstones below it, some above
    bucket.purge(vb, cut)
    status, got = stream(conn)
    assert status == "Success"
    sent = [r["by_seqno"] for r in got if r["opcode"] in ("DCP_DELETION", "DCP_EXPIRATION")]
    assert sent == [s for s in tombstones if s > cut]
    assert [r["by_seqno"] for r in got if r["opcode"] == "DCP_MUTATION"] == [
        s for s in range(1, items + 1) if s not in tombstones]


# --- system events: the manifest's history, before the first item (reference 3.16) ---------------------------
def events_of(got: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Each DCP_SYSTEM_EVENT as (by_seqno, event_id, event_version, key, manifest_uid, scope_id, collection_id)."""
    return [(r["by_seqno"], r["event_id"], r["event_version"], r.get("key", ""), r["manifest_uid"], r["scope_id"],
             r.get("collection_id")) for r in got if r["opcode"] == "DCP_SYSTEM_EVENT"]


def test_a_collections_stream_from_zero_opens_with_the_manifests_system_events() -> None:
    """serve sent items of collections the stream never saw created. A node's vbucket history has the events of
    the manifest's update before them (kv_engine's Manifest::completeUpdate: scopes created, then collections),
    only the last carrying the new manifest uid; the items follow at EVENTS + 1 on."""
    conn = session("Collections")
    assert call(conn, opcode="DCP_STREAM_REQ", vbucket=0, flags=0, reserved=0, start_seqno=0, end_seqno=END,
                vbucket_uuid=0, snap_start_seqno=0, snap_end_seqno=0)[0]["status"] == "Success"
    sent = messages(conn, conn.produce(1 << 20))
    got = [record_of(m) for m in sent]
    assert (got[0]["opcode"], got[0]["snap_start_seqno"], got[0]["snap_end_seqno"]) == ("DCP_SNAPSHOT_MARKER", 0, HIGH)
    assert events_of(got) == [(1, 3, 0, "inventory", 0, 8, None), (2, 0, 0, "airline", 0, 8, AIRLINE),
                              (3, 0, 0, "hotel", 5, 8, HOTEL)]
    assert [r["opcode"] for r in got[1:4]] == ["DCP_SYSTEM_EVENT"] * 3  # in seqno order, before any item
    # the values' wire layout (big endian): manifest uid u64, scope id u32, then a collection id u32
    assert [m.value.hex() for m in sent[1:4]] == ["0000000000000000" "00000008",
                                                  "0000000000000000" "00000008" "00000009",
                                                  "0000000000000005" "00000008" "0000000a"]
    assert [(m.key, m.datatype, m.cas, m.extras_length) for m in sent[1:4]] == [
        (b"inventory", 0, 0, 13), (b"airline", 0, 0, 13), (b"hotel", 0, 0, 13)]  # a plain key: no LEB128 prefix
    assert all(r["diagnostics"] == [] for r in got)
    items = [r["by_seqno"] for r in got if r["opcode"] in ITEM_OPCODES]
    assert items == list(range(EVENTS + 1, HIGH + 1))
    # the item at a seqno is what it was: the same as a bucket without the manifest has there
    bucket, plain = conn.node.cluster.bucket, Bucket("default", 1, ITEMS, 20, 7)
    shared = [s for s in items if s <= ITEMS]
    assert [(i.key, i.opcode, i.cas, i.rev_seqno) for i in (bucket.item(bucket.vbuckets[0], s) for s in shared)] \
        == [(i.key, i.opcode, i.cas, i.rev_seqno) for i in (plain.item(plain.vbuckets[0], s) for s in shared)]


def test_a_filtered_stream_gets_only_the_system_events_of_its_filter() -> None:
    """kv_engine's Filter: a collection filter sees its collections' events and no scope's; a scope filter its
    scope's event and its collections'; the default collection was never created by an event."""
    for value, expected in (('{"collections":["a"]}', [(3, HOTEL)]), ('{"collections":["9"]}', [(2, AIRLINE)]),
                            ('{"collections":["9","a"]}', [(2, AIRLINE), (3, HOTEL)]),
                            ('{"collections":["0"]}', []), ('{"scope":"8"}', [(1, None), (2, AIRLINE), (3, HOTEL)]),
                            ('{"scope":"0"}', [])):
        status, got = stream(session("Collections"), value=value)
        assert status == "Success"
        assert [(e[0], e[6]) for e in events_of(got)] == expected, value


def test_a_legacy_stream_gets_no_system_event_and_its_seqnos_still_hold() -> None:
    conn = session()  # no HELLO Collections: the default collection only, and no event (reference 3.16)
    status, got = stream(conn)
    assert status == "Success"
    assert "DCP_SYSTEM_EVENT" not in [r["opcode"] for r in got]
    marker = got[0]
    sent = [r["by_seqno"] for r in got if r["opcode"] in ITEM_OPCODES]
    assert sent == collection_seqnos(conn.node.cluster.bucket, 0)  # ascending, inside the marker, above the events
    # it cannot be sent a DCP_SEQNO_ADVANCED: its snapshot ends on its last item (markLegacyDiskSnapshot)
    assert sent[-1] < HIGH
    assert (marker["opcode"], marker["snap_start_seqno"], marker["snap_end_seqno"]) == ("DCP_SNAPSHOT_MARKER", 0,
                                                                                       sent[-1])
    assert sent[0] > EVENTS
    assert all("collection_id" not in r and r["diagnostics"] == [] for r in got)


def test_a_collections_high_seqno_counts_its_begin_collection() -> None:
    """kv_engine sets a collection's high seqno at its BeginCollection (EPVBucket::addSystemEventItem): a
    collection without items has the event's seqno, ToLatest ends there, and GET_ALL_VB_SEQNOS says it."""
    on = cluster(Bucket("default", 1, 0, 20, 7, MANIFEST))  # no items: the events alone
    kv = kv_session("Collections", on=on)
    assert all_vb_seqnos(kv) == [(0, EVENTS)]
    assert all_vb_seqnos(kv, vbucket_state_filter=0, collection_id=AIRLINE) == [(0, 2)]
    assert all_vb_seqnos(kv, vbucket_state_filter=0, collection_id=HOTEL) == [(0, 3)]
    assert all_vb_seqnos(kv, vbucket_state_filter=0, collection_id=0) == [(0, 0)]
    assert all_vb_seqnos(kv_session(on=on)) == [(0, 0)]  # a legacy client: the default collection has nothing
    status, got = stream(session("Collections", on=on), flags=TO_LATEST, value='{"collections":["9"]}')
    assert status == "Success"
    assert [(r["opcode"], r.get("by_seqno")) for r in got] == [
        ("DCP_SNAPSHOT_MARKER", None), ("DCP_SYSTEM_EVENT", 2), ("DCP_STREAM_END", None)]
    assert got[0]["snap_end_seqno"] == 2
    stats = {r["key"]: r["value"] for r in call(kv, opcode="STAT", key="vbucket-seqno") if r.get("key")}
    assert stats["vb_0:high_seqno"] == str(EVENTS)


def test_a_collection_with_a_max_ttl_is_begun_by_a_version_1_event() -> None:
    manifest = Manifest(5, dict(MANIFEST.collections), dict(MANIFEST.scopes), {HOTEL: 3600, AIRLINE: 0})
    conn = session("Collections", on=cluster(Bucket("default", 1, 0, 20, 7, manifest)))
    assert call(conn, opcode="DCP_STREAM_REQ", vbucket=0, flags=0, reserved=0, start_seqno=0, end_seqno=END,
                vbucket_uuid=0, snap_start_seqno=0, snap_end_seqno=0)[0]["status"] == "Success"
    sent = [m for m in messages(conn, conn.produce(1 << 20)) if m.opcode == Opcode.DCP_SYSTEM_EVENT]
    # reference 3.16: version 1 adds max_ttl u32 (0: its documents never expire, ns_server's maxTTL -1)
    assert [(m.field("event_version"), m.value.hex()) for m in sent[1:]] == [
        (1, "0000000000000000" "00000008" "00000009" "00000000"),
        (1, "0000000000000005" "00000008" "0000000a" "00000e10")]
    assert [record_of(m)["max_ttl"] for m in sent[1:]] == [0, 3600]
    assert all(m.diagnostics == () for m in sent)


def test_a_collections_max_ttl_limits_every_write_to_it_as_kv_engine_does() -> None:
    """processExpiryTime, then mc_time_limit_expiry_time: no expiry, or one past now + maxTTL, becomes now +
    maxTTL; a nearer one stays; a maxTTL of 0 limits nothing; and the stream sends the limited expiry."""
    now = 1_800_000_000
    manifest = Manifest(5, dict(MANIFEST.collections), dict(MANIFEST.scopes), {HOTEL: 3600, AIRLINE: 0})
    on = cluster(Bucket("default", 1, 0, 20, 7, manifest, clock=lambda: now * 10**9))
    writes = [(HOTEL, "forever", 0), (HOTEL, "far", 7200), (HOTEL, "near", 60), (HOTEL, "absolute", now + 9999),
              (AIRLINE, "unlimited", 0), (0, "default", 7200)]
    for collection, key, expiration in writes:
        assert kv_call(on, "Collections", opcode="SET", vbucket=0, collection_id=collection, key=key, value="{}",
                       flags=0, expiration=expiration)["status"] == "Success"
    touched = kv_call(on, "Collections", opcode="TOUCH", vbucket=0, collection_id=HOTEL, key="near",
                      expiration=0)
    assert touched["status"] == "Success"
    expected = {"forever": now + 3600, "far": now + 3600, "near": now + 3600, "absolute": now + 3600,
                "unlimited": 0, "default": now + 7200}
    vb = on.bucket.vbuckets[0]
    assert {key: on.bucket.document(vb, collection, key.encode()).expiry  # type: ignore[union-attr]
            for collection, key, _ in writes} == expected
    _, sent = stream(session("Collections", on=on))
    mutations = {r["key"]: r["expiration"] for r in sent if r["opcode"] == "DCP_MUTATION"}
    assert mutations == expected


def test_a_flatbuffers_connection_is_sent_version_2_tables(tmp_path: Path) -> None:
    """DCP_CONTROL flatbuffers_system_events: every event's value is a table of events.fbs (version 2), with the
    same ids, uids and names; flatc, given the schema written from the reference, reads each as serve meant."""
    manifest = Manifest(6, {AIRLINE: (8, "airline"), HOTEL: (8, "hotel")}, {0: "_default", 8: "inventory"},
                        {HOTEL: 3600})
    on = cluster(Bucket("default", 1, 0, 20, 7, manifest))
    conn = session("Collections", controls=FLATBUFFERS, on=on)
    status, got = stream(conn)
    assert status == "Success"
    legacy = stream(session("Collections", on=on))[1]
    assert [e[:2] + e[3:] for e in events_of(got)] == [e[:2] + e[3:] for e in events_of(legacy)]
    assert {e[2] for e in events_of(got)} == {2}
    assert all(r["diagnostics"] == [] for r in got)
    tables = [(r["event_id"], {k: r[k] for k in ("name", "ttl_valid", "max_ttl", "system_collection")
                               if k in r}) for r in got if r["opcode"] == "DCP_SYSTEM_EVENT"]
    assert tables == [(1, {"system_collection": False}), (3, {"name": "inventory"}),
                      (0, {"name": "airline", "ttl_valid": False, "max_ttl": 0}),
                      (0, {"name": "hotel", "ttl_valid": True, "max_ttl": 3600})]
    table = {1: "DroppedCollection", 3: "Scope", 0: "Collection"}
    for number, msg in enumerate(_sent_events(on)):
        (tmp_path / f"{number}.bin").write_bytes(msg.value)
        subprocess.run([peer("flatc"), "--json", "--strict-json", "--defaults-json", "--raw-binary", "--root-type",
                        f"SystemEvents.{table[msg.field('event_id')]}", "-o", str(tmp_path), str(SCHEMA), "--",
                        str(tmp_path / f"{number}.bin")], check=True, capture_output=True, timeout=60)
        read = json.loads((tmp_path / f"{number}.json").read_text())
        fields = msg.value_fields
        assert (read["uid"], read["scopeId"], read.get("collectionId"), read.get("name"), read.get("maxTtl")) == (
            fields["manifest_uid"], fields["scope_id"], fields.get("collection_id"), fields.get("name"),
            fields.get("max_ttl"))


def _sent_events(on: Cluster) -> list[Message]:
    """The system events a new flatbuffers connection's stream from 0 is sent."""
    conn = session("Collections", controls=FLATBUFFERS,
                   on=on, name="again")
    call(conn, opcode="DCP_STREAM_REQ", vbucket=0, flags=0, reserved=0, start_seqno=0, end_seqno=END,
         vbucket_uuid=0, snap_start_seqno=0, snap_end_seqno=0)
    return [m for m in messages(conn, conn.produce(1 << 20)) if m.opcode == Opcode.DCP_SYSTEM_EVENT]


def test_system_events_count_against_the_window_and_carry_the_stream_id() -> None:
    on = cluster(Bucket("default", 1, 0, 20, 7, MANIFEST))
    conn = session("Collections", controls={"enable_noop": "true", "connection_buffer_size": "100000",
                                            "enable_stream_id": "true"}, on=on)
    call(conn, opcode="DCP_STREAM_REQ", vbucket=0, flags=0, reserved=0, start_seqno=0, end_seqno=END,
         vbucket_uuid=0, snap_start_seqno=0, snap_end_seqno=0, value='{"sid":4}')
    data = conn.produce(1 << 20)
    sent = messages(conn, data)
    assert [m.opcode for m in sent] == [Opcode.DCP_SNAPSHOT_MARKER] + [Opcode.DCP_SYSTEM_EVENT] * 3
    assert {m.stream_id for m in sent} == {4}
    assert conn.outstanding == len(data)  # an event counts its bytes (SystemEventProducerMessage::getMessageSize)
    # the encoded image (a plain stream) and an item-by-item stream send the same events
    fast = session("Collections", on=on, name="fast")
    slow = session("Collections", flags=PRODUCER | NO_VALUE, on=on, name="slow")
    for each in (fast, slow):
        call(each, opcode="DCP_STREAM_REQ", vbucket=0, flags=0, reserved=0, start_seqno=0, end_seqno=END,
             vbucket_uuid=0, snap_start_seqno=0, snap_end_seqno=0)
    assert [m.raw for m in messages(fast, fast.produce(1 << 20))][1:] == [
        m.raw for m in messages(slow, slow.produce(1 << 20))][1:]


def test_a_dropped_default_collection_is_ended_first_and_its_drop_is_never_purged() -> None:
    """A manifest without the default collection drops it: EndCollection (no key) before the creations. The drop
    is a tombstone, so SkipDeletesInInitialBackfill leaves it out, but kv_engine never purges it (its creation is
    implied, so without the drop a client would think it exists)."""
    dropped = Manifest(6, {AIRLINE: (8, "airline")}, {0: "_default", 8: "inventory"})
    bucket = Bucket("default", 1, ITEMS, 20, 7, dropped)
    on = cluster(bucket)
    expected = [(1, 1, 0, "", 0, 0, 0), (2, 3, 0, "inventory", 0, 8, None), (3, 0, 0, "airline", 6, 8, AIRLINE)]
    assert events_of(stream(session("Collections", on=on))[1]) == expected
    bucket.purge(bucket.vbuckets[0], bucket.vbuckets[0].high_seqno)
    assert events_of(stream(session("Collections", on=on))[1]) == expected
    skipping = session("Collections", flags=PRODUCER | SKIP_DELETES_IN_INITIAL_BACKFILL, on=on)
    assert events_of(stream(skipping)[1]) == expected[1:]


def test_a_replica_promoted_before_the_manifests_last_event_is_brought_up_to_it() -> None:
    """kv_engine updates a vbucket's manifest as it becomes active (Collections::Manager::maybeUpdate): a
    failover at seqno 1 queues the events the new active lacked, the same events at the same seqnos."""
    on = cluster()
    bucket = on.bucket
    vb = bucket.vbuckets[0]
    before = events_of(stream(session("Collections", on=on, name="before"))[1])
    entry = bucket.failover(vb, 1)
    assert (vb.high_seqno, vb.failover_log[0].seqno, entry.seqno) == (EVENTS, 1, 1)
    _, got = stream(session("Collections", on=on, name="after"))
    assert [r["opcode"] for r in got] == ["DCP_SNAPSHOT_MARKER"] + ["DCP_SYSTEM_EVENT"] * EVENTS
    assert events_of(got) == before


# --- TakeOver streams: the vbucket handed over (reference 3.4.2, 3.12; kv_engine's ActiveStream) ----------
TAKE_OVER = 0x01
ACKNOWLEDGE, CHECKPOINT_FLAG = 0x08, 0x04


def answer(conn: ProducerConnection, request: dict[str, Any], status: str = "Success") -> list[dict[str, Any]]:
    """The consumer's answer to a takeover's marker or vbucket state, and what the stream sends next."""
    conn.receive(packet(magic="ClientResponse", opcode=request["opcode"], opaque=request["opaque"],
                        status=status), 0)
    return drain(conn)


def kv_call(on: Cluster, *features: str, **record: Any) -> dict[str, Any]:
    conn = ProducerConnection(Node(0, on))
    for step in ({"opcode": "HELLO", "key": "t", "features": ["Xerror", "JSON", *features]},
                 {"opcode": "SASL_AUTH", "key": "PLAIN", "value": plain_message("Administrator", "password").hex(),
                  "value_encoding": "hex"},
                 {"opcode": "SELECT_BUCKET", "key": "default"}):
        call(conn, **step)
    return call(conn, **record)[0]


def upsert(on: Cluster, key: str) -> dict[str, Any]:
    return kv_call(on, opcode="SET", vbucket=0, key=key, value="{}", flags=0, expiration=0)


def test_a_takeover_stream_sends_everything_then_hands_the_vbucket_over() -> None:
    on = cluster()
    conn = session(on=on)
    status, out = stream(conn, flags=TAKE_OVER, end=5)  # a takeover streams to the end whatever it asks
    assert status == "Success"
    assert out[0]["snapshot_flags"] & (ACKNOWLEDGE | 0x02) == 0x02  # the backfill's marker is not answered
    assert out[0]["snap_end_seqno"] == collection_seqnos(on.bucket, 0)[-1]  # a legacy stream's: its last item
    assert [r["by_seqno"] for r in out if r["opcode"] in ITEM_OPCODES] == collection_seqnos(on.bucket, 0)
    pending = out[-1]
    assert (pending["opcode"], pending["vbucket_state"], pending["vbucket"]) == ("DCP_SET_VBUCKET_STATE", 3, 0)
    assert on.bucket.vbuckets[0].state == "active"  # until the consumer answers
    assert drain(conn) == []  # the stream waits for that answer
    active = answer(conn, pending)
    assert [(r["opcode"], r.get("vbucket_state")) for r in active] == [("DCP_SET_VBUCKET_STATE", 1)]
    assert on.bucket.vbuckets[0].state == "dead"
    assert upsert(on, "late")["status"] == "NotMyVbucket"
    assert stream(session(on=on, name="late"))[0] == "NotMyVbucket"
    seqnos = {state: kv_call(on, opcode="GET_ALL_VB_SEQNOS", vbucket_state_filter=state)["vbucket_seqnos"]
              for state in (1, 4)}
    # a legacy client is given the default collection's seqno
    assert seqnos == {1: [], 4: [{"vbucket": 0, "seqno": collection_seqnos(on.bucket, 0)[-1]}]}
    # the dead copy still has its failover log (kv_engine's getFailoverLog asks only that the vbucket exists)
    assert kv_call(on, opcode="GET_FAILOVER_LOG", vbucket=0)["failover_log"] == [
        {"vbucket_uuid": e.vbucket_uuid, "seqno": e.seqno} for e in on.bucket.vbuckets[0].failover_log]
    ended = answer(conn, active[0])
    assert [(r["opcode"], r["stream_end_status"]) for r in ended] == [("DCP_STREAM_END", 0)]  # Ok


def test_takeover_markers_after_the_backfill_are_answered_before_the_vbucket_state() -> None:
    """Writes during the takeover come in markers flagged Acknowledge (the first of each phase a checkpoint);
    the vbucket state waits for their answers, and writes while the pending state is unanswered go out after
    it, before the active state."""
    on = cluster()
    conn = session(on=on)
    assert request(conn, flags=TAKE_OVER) == "Success"
    first = records(conn, conn.produce(1 << 20, 5))  # part of the backfill
    assert upsert(on, "during")["status"] == "Success"
    rest = drain(conn)
    markers = [r for r in first + rest if r["opcode"] == "DCP_SNAPSHOT_MARKER"]
    assert [m["snapshot_flags"] for m in markers] == [0x06, 0x01 | ACKNOWLEDGE | CHECKPOINT_FLAG]
    assert (rest[-1]["by_seqno"], rest[-1]["key"]) == (HIGH + 1, "during")
    [pending] = answer(conn, markers[1], status="Einval")  # any status is an answer
    assert pending["vbucket_state"] == 3
    assert upsert(on, "meanwhile")["status"] == "Success"  # still active until the pending state is answered
    after = answer(conn, pending)
    assert [(r["opcode"], r.get("key")) for r in after] == [("DCP_SNAPSHOT_MARKER", None),
                                                            ("DCP_MUTATION", "meanwhile")]
    assert after[0]["snapshot_flags"] == 0x01 | ACKNOWLEDGE | CHECKPOINT_FLAG
    [active] = answer(conn, after[0])
    assert active["vbucket_state"] == 1
    assert answer(conn, active)[0]["opcode"] == "DCP_STREAM_END"


def test_marker_answers_are_counted_as_the_server_counts_them() -> None:
    """kv_engine counts marker answers without checking that the marker asked for one (waitForSnapshot, a
    signed counter): an answer to the backfill's marker leaves the takeover one answer ahead."""
    conn = session()
    assert request(conn, flags=TAKE_OVER) == "Success"
    marker = records(conn, conn.produce(1 << 20, 1))[0]
    rest = answer(conn, marker)
    assert rest[-1]["opcode"] in ITEM_OPCODES
    assert "DCP_SET_VBUCKET_STATE" not in {r["opcode"] for r in rest}
    # a write's takeover marker brings the count back to zero: the state goes out before that marker's answer
    assert upsert(conn.node.cluster, "w")["status"] == "Success"
    assert [r["opcode"] for r in drain(conn)] == ["DCP_SNAPSHOT_MARKER", "DCP_MUTATION", "DCP_SET_VBUCKET_STATE"]


# --- a later manifest (ns_server's push; serve's scenario "manifest"), as kv_engine's vbuckets take it -------
CAR = 11
WITH_CAR = Manifest(6, {**MANIFEST.collections, CAR: (8, "car")}, dict(MANIFEST.scopes))
WITHOUT_AIRLINE = Manifest(6, {0: (0, "_default"), HOTEL: (8, "hotel")}, dict(MANIFEST.scopes))


def items_of(got: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(r["by_seqno"], r["collection_id"]) for r in got if r["opcode"] in ITEM_OPCODES]


def test_a_created_collection_is_begun_in_every_vbucket_and_then_written_to() -> None:
    on = cluster(Bucket("default", 2, 2 * ITEMS, 20, 7, MANIFEST))
    bucket = on.bucket
    conn = session("Collections", on=on)
    assert stream(conn)[0] == "Success"  # caught up: the stream stays open
    bucket.apply_manifest(WITH_CAR)
    for vb in bucket.vbuckets:  # the change's one event at each vbucket's next seqno, with the new uid
        assert events_of(records(conn, bucket.encode_item(bucket.item(vb, HIGH + 1), conn.encoding(), 0))) == [
            (HIGH + 1, 0, 0, "car", 6, 8, CAR)]
    bucket.mutate(bucket.vbuckets[0], 200)
    got = drain(conn)
    assert got[0]["opcode"] == "DCP_SNAPSHOT_MARKER"
    assert events_of(got) == [(HIGH + 1, 0, 0, "car", 6, 8, CAR)]
    new = items_of(got)
    assert len(new) == 200
    assert {c for _, c in new} == {0, AIRLINE, HOTEL, CAR}  # the hash spreads them over the new manifest
    assert kv_call(on, "Collections", opcode="SET", vbucket=0, collection_id=CAR, key="k", value="{}", flags=0,
                   expiration=0)["status"] == "Success"
    _, only = stream(session("Collections", on=on, name="cars"), value='{"collections":["b"]}')
    assert {r["opcode"] for r in only} >= {"DCP_SYSTEM_EVENT", "DCP_MUTATION"}
    assert {c for _, c in items_of(only)} == {CAR}


def test_a_dropped_collection_ends_its_filtered_stream_and_leaves_every_backfill() -> None:
    on = cluster()
    bucket = on.bucket
    filtered = session("Collections", on=on, name="airline")
    everything = session("Collections", on=on, name="all")
    legacy = session(on=on, name="legacy")
    assert stream(filtered, value='{"collections":["9"]}')[0] == "Success"
    assert stream(everything)[0] == "Success"
    assert stream(legacy)[0] == "Success"
    bucket.apply_manifest(WITHOUT_AIRLINE)
    bucket.mutate(bucket.vbuckets[0], 100)
    ended = drain(filtered)
    # the drop is all its memory snapshot holds (the 100 are not its collection's): then its filter is empty
    assert [r["opcode"] for r in ended] == ["DCP_SNAPSHOT_MARKER", "DCP_SYSTEM_EVENT", "DCP_STREAM_END"]
    assert flags_of(ended) == [(HIGH + 1, HIGH + 1, MEMORY | CHECKPOINT_FLAG)]
    assert events_of(ended) == [(HIGH + 1, 1, 0, "", 6, 8, AIRLINE)]  # EndCollection
    assert ended[-1]["stream_end_status"] == 7  # FilterEmpty
    seen = drain(everything)
    assert events_of(seen) == [(HIGH + 1, 1, 0, "", 6, 8, AIRLINE)]
    assert len(items_of(seen)) == 100
    assert AIRLINE not in {c for _, c in items_of(seen)}
    assert "DCP_STREAM_END" not in {r["opcode"] for r in drain(legacy)}  # its default collection is still there
    assert kv_call(on, "Collections", opcode="SET", vbucket=0, collection_id=AIRLINE, key="k", value="{}", flags=0,
                   expiration=0)["status"] == "UnknownCollection"
    # a backfill after the drop: none of its items, and the drop in place of its creation
    _, backfill = stream(session("Collections", on=on, name="later"))
    assert AIRLINE not in {c for _, c in items_of(backfill)}
    assert events_of(backfill) == [(1, 3, 0, "inventory", 0, 8, None), (3, 0, 0, "hotel", 5, 8, HOTEL),
                                   (HIGH + 1, 1, 0, "", 6, 8, AIRLINE)]  # no BeginCollection airline at 2
    skipping = session("Collections", flags=PRODUCER | SKIP_DELETES_IN_INITIAL_BACKFILL, on=on, name="skip")
    assert AIRLINE not in {e[6] for e in events_of(stream(skipping)[1])}  # the drop is a tombstone


def test_a_legacy_stream_ends_when_the_default_collection_is_dropped() -> None:
    """kv_engine's legacy filter is the default collection: its drop (an event a legacy client is not sent)
    empties it, and the end is told as Ok to a client without collections."""
    on = cluster()
    legacy = session(on=on)
    assert stream(legacy)[0] == "Success"
    on.bucket.apply_manifest(Manifest(6, {AIRLINE: (8, "airline"), HOTEL: (8, "hotel")}, dict(MANIFEST.scopes)))
    on.bucket.mutate(on.bucket.vbuckets[0], 50)
    got = drain(legacy)
    assert [r["opcode"] for r in got] == ["DCP_STREAM_END"]  # no marker: nothing in memory was for it
    assert got[-1]["stream_end_status"] == 0
    assert stream(session(on=on, name="again"))[0] == "UnknownCollection"


def test_a_scope_filter_gains_the_scopes_new_collections_and_ends_with_its_scope() -> None:
    on = cluster()
    bucket = on.bucket
    scoped = session("Collections", on=on)
    assert stream(scoped, value='{"scope":"8"}')[0] == "Success"
    bucket.apply_manifest(WITH_CAR)
    bucket.mutate(bucket.vbuckets[0], 100)
    got = drain(scoped)
    assert events_of(got) == [(HIGH + 1, 0, 0, "car", 6, 8, CAR)]
    assert {c for _, c in items_of(got)} == {AIRLINE, HOTEL, CAR}
    gone = Manifest(7, {0: (0, "_default")}, {0: "_default"})
    bucket.apply_manifest(gone)  # each of the scope's collections ends, then the scope
    ended = drain(scoped)
    high = HIGH + 101
    assert events_of(ended) == [(high + 1, 1, 0, "", 6, 8, AIRLINE), (high + 2, 1, 0, "", 6, 8, HOTEL),
                                (high + 3, 1, 0, "", 6, 8, CAR), (high + 4, 4, 0, "", 7, 8, None)]
    assert (ended[-1]["opcode"], ended[-1]["stream_end_status"]) == ("DCP_STREAM_END", 7)


def test_a_failover_below_a_manifest_change_queues_it_again_on_the_new_branch() -> None:
    """The new active lacks the change's events (they were above the branch point): it queues what it lacks of
    the bucket's manifest as it becomes active, once, at its next seqnos; a failover inside them takes none."""
    on = cluster()
    bucket = on.bucket
    vb = bucket.vbuckets[0]
    bucket.apply_manifest(WITH_CAR)
    bucket.apply_manifest(Manifest(7, dict(WITH_CAR.collections), {**WITH_CAR.scopes, 12: "extra"}))
    assert vb.high_seqno == HIGH + 2
    used = bucket.memory_used  # the events are kept as writes are: what a failover takes away it gives back
    entry = bucket.failover(vb, HIGH + 1)  # inside neither: the first change stays, the second is queued again
    assert (entry.seqno, vb.high_seqno, bucket.memory_used) == (HIGH + 1, HIGH + 2, used)
    _, got = stream(session("Collections", on=on))
    assert events_of(got)[-2:] == [(HIGH + 1, 0, 0, "car", 6, 8, CAR), (HIGH + 2, 3, 0, "extra", 7, 12, None)]
    bucket.failover(vb, HIGH - 10)
    assert vb.high_seqno == HIGH - 10 + 2  # both changes again, as one update from the manifest it had
    _, again = stream(session("Collections", on=on, name="again"))
    assert events_of(again)[-2:] == [(HIGH - 9, 3, 0, "extra", 5, 12, None), (HIGH - 8, 0, 0, "car", 7, 8, CAR)]


def test_a_changed_max_ttl_is_a_modify_collection_for_flatbuffers_streams_only(tmp_path: Path) -> None:
    """kv_engine queues a ModifyCollection (event 5, a Collection table) and sends it only to streams that
    enabled flatbuffers_system_events; another stream whose snapshot ends on it is advanced over it. flatc
    reads the table as serve meant it, and writes after it are limited by the new maxTTL."""
    now = 1_800_000_000
    on = cluster(Bucket("default", 1, ITEMS, 20, 7, MANIFEST, clock=lambda: now * 10**9))
    flat = session("Collections", controls=FLATBUFFERS, on=on)
    plain = session("Collections", on=on, name="plain")
    assert stream(flat)[0] == stream(plain)[0] == "Success"
    on.bucket.apply_manifest(Manifest(6, dict(MANIFEST.collections), dict(MANIFEST.scopes), {HOTEL: 60}))
    sent = messages(flat, flat.produce(1 << 20))
    got = [record_of(m) for m in sent]
    assert [(r["opcode"], r.get("event_id"), r.get("event_version")) for r in got] == [
        ("DCP_SNAPSHOT_MARKER", None, None), ("DCP_SYSTEM_EVENT", 5, 2)]
    modify = got[1]
    assert (modify["key"], modify["collection_id"], modify["scope_id"], modify["manifest_uid"], modify["ttl_valid"],
            modify["max_ttl"]) == ("hotel", HOTEL, 8, 6, True, 60)
    assert modify["diagnostics"] == []
    assert [r["opcode"] for r in drain(plain)] == ["DCP_SNAPSHOT_MARKER", "DCP_SEQNO_ADVANCED"]
    (tmp_path / "modify.bin").write_bytes(sent[1].value)
    subprocess.run([peer("flatc"), "--json", "--strict-json", "--defaults-json", "--raw-binary", "--root-type",
                    "SystemEvents.Collection", "-o", str(tmp_path), str(SCHEMA), "--", str(tmp_path / "modify.bin")],
                   check=True, capture_output=True, timeout=60)
    read = json.loads((tmp_path / "modify.json").read_text())
    assert (read["uid"], read["scopeId"], read["collectionId"], read["ttlValid"], read["maxTtl"], read["name"]) == (
        6, 8, HOTEL, True, 60, "hotel")
    assert kv_call(on, "Collections", opcode="SET", vbucket=0, collection_id=HOTEL, key="k", value="{}", flags=0,
                   expiration=0)["status"] == "Success"
    assert on.bucket.document(on.bucket.vbuckets[0], HOTEL, b"k").expiry == now + 60  # type: ignore[union-attr]
    # dropped, the collection takes its creation and its modification out of a later backfill
    on.bucket.apply_manifest(Manifest(7, {0: (0, "_default"), AIRLINE: (8, "airline")}, dict(MANIFEST.scopes)))
    later = session("Collections", controls=FLATBUFFERS, on=on,
                    name="later")
    assert [(e[1], e[6]) for e in events_of(stream(later)[1])] == [(3, None), (0, AIRLINE), (1, HOTEL)]


def test_a_default_collection_with_a_max_ttl_is_modified_as_the_manifest_is_applied() -> None:
    """A vbucket begins with the epoch manifest, whose default collection has no maxTTL: applying one that gives
    it one queues a ModifyCollection after the creations (kv_engine's completeUpdate), which only FlatBuffers
    streams are sent."""
    manifest = Manifest(5, dict(MANIFEST.collections), dict(MANIFEST.scopes), {0: 30})
    on = cluster(Bucket("default", 1, ITEMS, 20, 7, manifest))
    flat = session("Collections", controls=FLATBUFFERS, on=on)
    assert [(e[1], e[6], e[4]) for e in events_of(stream(flat)[1])] == [
        (3, None, 0), (0, AIRLINE, 0), (0, HOTEL, 0), (5, 0, 5)]  # the last of the update carries its uid
    plain = stream(session("Collections", on=on, name="plain"))[1]
    assert [e[1] for e in events_of(plain)] == [3, 0, 0]
    assert next(r["by_seqno"] for r in plain if r["opcode"] in ITEM_OPCODES) == 5  # items after the four events


def test_a_takeover_sending_past_its_time_limit_makes_its_vbucket_refuse_writes() -> None:
    """kv_engine's takeoverSendPhase: sending longer than dcp_takeover_max_time (--takeover-max-time) backs the
    vbucket up, and front-end writes are Etmpfail (reads go on) until the takeover moves to its next phase."""
    on = cluster()
    on.takeover_max_time = 5.0
    conn = session(on=on)
    assert request(conn, flags=TAKE_OVER) == "Success"
    records(conn, conn.produce(1 << 20, 5))  # the backfill begins
    assert upsert(on, "during")["status"] == "Success"
    marker = next(r for r in drain(conn) if r["opcode"] == "DCP_SNAPSHOT_MARKER" and r["snapshot_flags"] & 0x08)
    conn.now = 4.0  # its answer not in yet, within the limit
    assert drain(conn) == []
    assert upsert(on, "still")["status"] == "Success"
    conn.now = 6.0
    [later, _] = drain(conn)  # the stream, still sending (that write's marker), is past the limit
    assert upsert(on, "refused")["status"] == "Etmpfail"
    assert kv_call(on, opcode="GET", vbucket=0, key="during")["status"] == "Success"
    assert answer(conn, marker) == []
    pending = answer(conn, later)
    assert [r["vbucket_state"] for r in pending] == [3]
    answer(conn, pending[0])  # the vbucket is dead now: NotMyVbucket, no longer backed up
    assert upsert(on, "late")["status"] == "NotMyVbucket"
    assert not on.bucket.vbuckets[0].takeover_backed_up


def test_a_takeover_waiting_for_its_pending_states_answer_is_not_backed_up() -> None:
    """TakeoverWait is not sending: however long the consumer takes to answer the pending state, writes go on
    (they come after it, before the active state)."""
    on = cluster()
    on.takeover_max_time = 5.0
    conn = session(on=on)
    _, out = stream(conn, flags=TAKE_OVER)
    assert out[-1]["vbucket_state"] == 3
    conn.now = 100.0
    assert drain(conn) == []
    assert upsert(on, "waiting")["status"] == "Success"
    assert not on.bucket.vbuckets[0].takeover_backed_up


# --- where a stream's snapshots come from: disk, then memory (kv_engine's scheduleBackfill) ------------------
DISK, MEMORY = 0x02, 0x01


def flags_of(got: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    return [(r["snap_start_seqno"], r["snap_end_seqno"], r["snapshot_flags"]) for r in got
            if r["opcode"] == "DCP_SNAPSHOT_MARKER"]


def test_a_backfill_is_followed_by_a_memory_snapshot_that_begins_a_checkpoint() -> None:
    """The move from backfilling to memory begins a checkpoint (transitionState InMemory sets
    nextSnapshotIsCheckpoint): serve flagged that snapshot Memory alone, as it does the ones after it."""
    on = cluster()
    conn = session(on=on)
    status, got = stream(conn)
    last = collection_seqnos(on.bucket, 0)[-1]  # a legacy stream's backfill ends on its last item
    assert (status, flags_of(got)) == ("Success", [(0, last, DISK | CHECKPOINT_FLAG)])
    for key in ("one", "two"):
        assert upsert(on, key)["status"] == "Success"
        got += drain(conn)
    assert flags_of(got)[1:] == [(HIGH + 1, HIGH + 1, MEMORY | CHECKPOINT_FLAG), (HIGH + 2, HIGH + 2, MEMORY)]


@pytest.mark.parametrize("takeover", [False, True])
def test_a_stream_from_the_high_seqno_has_no_backfill(takeover: bool) -> None:
    """Its cursor is registered at the end of the checkpoints, so nothing is read from disk: the writes that
    follow come in memory snapshots, from the requested start (reference 3.8). serve sent the first of them
    flagged Disk, and a sync-replication consumer had a disk marker's high completed seqno in it; a takeover
    stream's first marker was a backfill's, not to be answered; and dcp-vbtakeover said a backfill
    was about to begin."""
    on = cluster()
    vb = on.bucket.vbuckets[0]
    on.bucket.write(vb, 0, b"durable", b"{}", JSON, 0, 0, None, durability_level=1)  # prepare and commit
    high = vb.high_seqno
    assert on.bucket.marker_seqnos(vb, high) == (high, HIGH + 1)  # a disk marker would say the prepare completed
    conn = session(on=on, controls={"enable_noop": "true", "enable_sync_writes": "true", "consumer_name": "b"},
                   name="replication:a->b")
    uuid = vb.failover_log[0].vbucket_uuid
    assert request(conn, start=high, uuid=uuid, flags=TAKE_OVER if takeover else 0) == "Success"
    assert upsert(on, "one")["status"] == "Success"
    answers = call(kv_session(on=on), opcode="STAT", key="dcp-vbtakeover 0 replication:a->b")
    assert {r["key"]: r["value"] for r in answers if r.get("key")}["status"] == "in-memory"  # the write to send
    got = drain(conn)
    [marker] = [r for r in got if r["opcode"] == "DCP_SNAPSHOT_MARKER"]
    assert (marker["snap_start_seqno"], marker["snap_end_seqno"]) == (high, high + 1)
    assert marker["snapshot_flags"] == (MEMORY | ACKNOWLEDGE | CHECKPOINT_FLAG if takeover
                                        else MEMORY | CHECKPOINT_FLAG)
    assert (marker["max_visible_seqno"], marker["high_completed_seqno"]) == (high + 1, 0)  # v2.0: disk only
    assert [r["by_seqno"] for r in got if r["opcode"] == "DCP_MUTATION"] == [high + 1]


# --- HELLO UnorderedExecution: granted, and then no DCP (reference 3.1; verify_common_dcp_restrictions) ----
def hello(conn: ProducerConnection, *features: str) -> list[str]:
    return list(call(conn, opcode="HELLO", key="t", features=["Xerror", "JSON", *features])[0]["features"])


def log_in(conn: ProducerConnection, bucket: str | None = "default") -> None:
    """SASL PLAIN as the development user, then SELECT_BUCKET unless ``bucket`` is None."""
    assert call(conn, opcode="SASL_AUTH", key="PLAIN", value_encoding="hex",
                value=plain_message("Administrator", "password").hex())[0]["status"] == "Success"
    if bucket is not None:
        assert call(conn, opcode="SELECT_BUCKET", key=bucket)[0]["status"] == "Success"


def test_unordered_execution_is_granted_and_then_dcp_is_not_supported() -> None:
    """kv_engine grants UnorderedExecution to a connection that is not DCP, and DcpSkipDeletesInInitialBackfill
    to any (it says DCP_OPEN takes that flag); serve left both out. A connection with UnorderedExecution gets
    NotSupported for every DCP command and GET_FAILOVER_LOG, after their header checks; a HELLO without it
    lifts that, and a DCP connection asking for it again is not granted it."""
    conn = ProducerConnection(Node(0, cluster()))
    assert hello(conn, "UnorderedExecution", "DcpSkipDeletesInInitialBackfill") == [
        "Xerror", "JSON", "UnorderedExecution", "DcpSkipDeletesInInitialBackfill"]
    log_in(conn)
    assert call(conn, opcode="SET", vbucket=0, key="any", value="{}", flags=0, expiration=0)[0][
        "status"] == "Success"  # other commands run as before
    refused = call(conn, opcode="DCP_OPEN", key="n", seqno=0, flags=PRODUCER)[0]
    assert (refused["status"], json.loads(refused["value"])) == (
        "NotSupported", {"error": {"context": "DCP on connections with unordered execution is not supported"}})
    assert call(conn, opcode="GET_FAILOVER_LOG", vbucket=0)[0]["status"] == "NotSupported"
    assert call(conn, opcode="DCP_CONTROL", key="enable_noop", value="true")[0]["status"] == "NotSupported"
    # the header is checked first: DCP_OPEN without its extras is Einval
    assert call(conn, opcode="DCP_OPEN", key="n", extras_length=0, extras="")[0]["status"] == "Einval"
    assert hello(conn) == ["Xerror", "JSON"]
    assert call(conn, opcode="DCP_OPEN", key="n", seqno=0, flags=PRODUCER)[0]["status"] == "Success"
    assert hello(conn, "UnorderedExecution") == ["Xerror", "JSON"]
    assert call(conn, opcode="DCP_CONTROL", key="enable_noop", value="true")[0]["status"] == "Success"



def context_of(answer: dict[str, Any]) -> tuple[str, str]:
    return answer["status"], json.loads(answer["value"])["error"]["context"] if answer.get("value") else ""


def test_a_commands_own_field_checks_come_before_unordered_executions_refusal() -> None:
    """kv_engine's DCP_OPEN and stream request validators check the flags and the value (DCP_OPEN) and the
    extras, key and flags (a stream request) before verify_common_dcp_restrictions: a bad one is Einval, with
    the validator's context, even where UnorderedExecution would make the command NotSupported."""
    conn = ProducerConnection(Node(0, cluster()))
    hello(conn, "UnorderedExecution")
    log_in(conn)
    open_: dict[str, Any] = {"opcode": "DCP_OPEN", "key": "n", "seqno": 0}
    assert context_of(call(conn, **open_, flags=PRODUCER | 0x8000_0000)[0]) == (
        "Einval", 'Request contains invalid flags: "unknown:0x80000000"')
    assert context_of(call(conn, **open_, flags=NO_VALUE | NO_VALUE_WITH_UNDERLYING_DATATYPE | PRODUCER)[0]) == (
        "Einval", "Request contains invalid flags combination (NO_VALUE && NO_VALUE_WITH_UNDERLYING_DATATYPE)")
    assert context_of(call(conn, **open_, flags=PRODUCER, value='{"consumer_name":"c"}', datatype=JSON)[0]) == (
        "Einval", "consumer_name only valid for Consumer connections")
    assert context_of(call(conn, **open_, flags=PRODUCER, value='{"other":1}', datatype=JSON)[0]) == (
        "Einval", "Unsupported JSON property other")
    # the server's JSON objects are sorted maps: consumer_name is read before a property that comes first
    assert context_of(call(conn, **open_, flags=0, value='{"z":1,"consumer_name":5}', datatype=JSON)[0]) == (
        "Einval", "consumer_name must be a string")
    assert context_of(call(conn, **open_, flags=0, value='{"consumer_name":"c","a":1}', datatype=JSON)[0]) == (
        "Einval", "Unsupported JSON property a")
    assert context_of(call(conn, **open_, flags=PRODUCER, value="[]", datatype=JSON)[0]) == (
        "Einval", "value must be JSON of type object")
    assert context_of(call(conn, **open_, flags=PRODUCER, value="[" * 100_000, datatype=JSON)[0]) == (
        "Einval", "value is not valid JSON")  # a hostile depth
    assert context_of(call(conn, **open_, flags=PRODUCER)[0])[0] == "NotSupported"  # valid: then unordered
    stream_req: dict[str, Any] = {"opcode": "DCP_STREAM_REQ", "vbucket": 0, "reserved": 0, "start_seqno": 0,
                                  "end_seqno": END, "vbucket_uuid": 0, "snap_start_seqno": 0, "snap_end_seqno": 0}
    assert context_of(call(conn, **stream_req, flags=NO_VALUE)[0]) == (
        "Einval", "DCP_ADD_STREAM_FLAG_NO_VALUE{8} flag is no longer used")
    assert context_of(call(conn, **stream_req, flags=0x200)[0]) == (
        "Einval", 'Request contains invalid flags: "unknown:0x200"')
    assert context_of(call(conn, **stream_req, flags=0x100 | TO_LATEST)[0]) == (
        "Einval", 'CacheTransfer flag can only be combined with TakeOver or ActiveVbOnly flags. Invalid combination: '
        '"ToLatest"')
    assert context_of(call(conn, **stream_req, flags=0)[0])[0] == "NotSupported"
    hello(conn)  # ordered again: then the last of the common restrictions, a DCP connection
    assert context_of(call(conn, **stream_req, flags=0)[0]) == (
        "Einval", "The command can only be sent on a DCP connection")
    assert call(conn, **open_, flags=PRODUCER)[0]["status"] == "Success"
    assert context_of(call(conn, **open_, flags=PRODUCER)[0]) == (
        "Einval", "The connection is already opened as a DCP connection")


# --- error contexts name flags as kv_engine's to_json does (protocol/mcbp/json_utilities.cc, formatters.cc) -----
@pytest.mark.parametrize(("flags", "context"), [
    (PRODUCER | 0x8000_0000, 'Request contains invalid flags: "unknown:0x80000000"'),
    # Invalid (was Notifier) and Unused have no name in the server's table; PiTR has one, and is refused too
    (PRODUCER | 0x02 | 0x10 | 0x80, 'Request contains invalid flags: ["unknown:0x2","unknown:0x10","PiTR"]'),
    (PRODUCER | 0x100, "Request contains invalid flags combination - IncludeDeletedUserXattrs but not "
                       'IncludeXattrs: ["Producer","IncludeDeletedUserXattrs"]'),
])
def test_a_dcp_open_context_names_its_flags_as_the_server_does(flags: int, context: str) -> None:
    conn = ProducerConnection(Node(0, cluster()))
    hello(conn)
    log_in(conn)
    assert context_of(call(conn, opcode="DCP_OPEN", key="n", seqno=0, flags=flags)[0]) == ("Einval", context)


@pytest.mark.parametrize(("flags", "context"), [
    (0x201, 'Request contains invalid flags: ["Takeover","unknown:0x200"]'),  # all of them, "Takeover" so spelt
    (0x8000_0000, 'Request contains invalid flags: "unknown:0x80000000"'),
    (0x100 | 0x02 | 0x40 | 0x10, "CacheTransfer flag can only be combined with TakeOver or ActiveVbOnly flags. "
                                 'Invalid combination: ["DiskOnly","FromLatest"]'),
])
def test_a_stream_request_context_names_its_flags_as_the_server_does(flags: int, context: str) -> None:
    assert context_of(call(session(), **STREAM_REQ, flags=flags)[0]) == ("Einval", context)


# --- a request's header is checked in verify_header's order and words (daemon/mcbp_validators.cc) ------------
STREAM_REQ: dict[str, Any] = {"opcode": "DCP_STREAM_REQ", "vbucket": 0, "reserved": 0, "start_seqno": 0,
                              "end_seqno": END, "vbucket_uuid": 0, "snap_start_seqno": 0, "snap_end_seqno": 0}
LEGACY_EXTRAS = "00" * 40  # a stream request's retired layout: decoded, but the server takes 48 bytes only


def test_a_stream_requests_shape_comes_before_its_datatype_and_frame_infos() -> None:
    """The extras, key and value come before the datatype and the frame infos: serve checked them after,
    and answered a bad request's unknown frame info UnknownFrameInfo where the server says Einval."""
    conn = session()
    assert context_of(call(conn, opcode="DCP_STREAM_REQ", vbucket=0, extras=LEGACY_EXTRAS, magic="AltClientRequest",
                           framing_extras="30")[0]) == ("Einval", "Request must include extras of length 48")
    assert context_of(call(conn, **STREAM_REQ, flags=0, key="k", datatype=SNAPPY)[0]) == (
        "Einval", "Request must not include key")
    assert context_of(call(conn, **STREAM_REQ, flags=0, value="{}", magic="AltClientRequest",
                           framing_extras="30")[0]) == ("Einval", "Request must not include value")
    assert context_of(call(conn, **STREAM_REQ, flags=0, magic="AltClientRequest", framing_extras="30")[0]) == (
        "UnknownFrameInfo", "frame info id 3 is unknown")
    assert context_of(call(conn, **STREAM_REQ, flags=0x200, magic="AltClientRequest", framing_extras="30")[0])[0] \
        == "UnknownFrameInfo"  # the header before the flags


@pytest.mark.parametrize("opcode", ["DCP_STREAM_REQ", "DCP_CLOSE_STREAM", "DCP_GET_FAILOVER_LOG", "GET_FAILOVER_LOG",
                                    "DCP_CONTROL"])
def test_dcp_commands_take_raw_bytes_only_even_a_datatype_hello_enabled(opcode: str) -> None:
    """kv_engine's validators pass these PROTOCOL_BINARY_RAW_BYTES: JSON, which HELLO and DCP_OPEN enable, is
    still Einval on them. serve let any enabled bit through."""
    conn = session()
    record: dict[str, Any] = {**STREAM_REQ, "flags": 0} if opcode == "DCP_STREAM_REQ" else \
        {"opcode": opcode, "key": "enable_noop", "value": "true"} if opcode == "DCP_CONTROL" else \
        {"opcode": opcode, "vbucket": 0}
    assert context_of(call(conn, **record, datatype=JSON)[0]) == ("Einval", "Request datatype invalid")
    assert call(conn, **record)[0]["status"] in ("Success", "KeyEnoent")  # KeyEnoent: no stream to close


def test_the_datatype_byte_is_checked_first_and_a_bit_not_enabled_is_named() -> None:
    conn = ProducerConnection(Node(0, cluster()))
    assert call(conn, opcode="HELLO", key="t", features=["Xerror"])[0]["features"] == ["Xerror"]  # no JSON
    # above the three bits: before the extras (here the wrong ones) are looked at
    assert context_of(call(conn, opcode="HELLO", key="t", extras="00", datatype=0x08)[0]) == (
        "Einval", "Request datatype invalid")
    assert context_of(call(conn, opcode="HELLO", key="t", extras="00")[0]) == (
        "Einval", "Request must not include extras")
    log_in(conn)
    # DCP_OPEN takes JSON (its consumer_name), but this connection's HELLO did not enable it
    assert context_of(call(conn, opcode="DCP_OPEN", key="n", seqno=0, flags=0, value='{"consumer_name":"c"}',
                           datatype=JSON)[0]) == ("Einval", "Datatype (json) not enabled for the connection")
    assert context_of(call(conn, opcode="DCP_OPEN", key="n", seqno=0, flags=PRODUCER, value="x",
                           datatype=SNAPPY | XATTR)[0]) == ("Einval", "Request datatype invalid")
    assert call(conn, opcode="DCP_OPEN", key="n", seqno=0, flags=PRODUCER)[0]["status"] == "Success"
    # a command that takes every datatype: only the bits the connection enabled (DCP_OPEN added JSON)
    mutation = {"opcode": "DCP_MUTATION", "vbucket": 0, "key": "k", "value": "{}", "cas": 1, "by_seqno": 1,
                "rev_seqno": 1, "flags": 0, "expiration": 0, "lock_time": 0, "nmeta": 0, "nru": 0}
    assert context_of(call(conn, **mutation, datatype=SNAPPY | JSON | XATTR)[0]) == (
        "Einval", "Datatype (snappy,xattr) not enabled for the connection")


def test_a_producers_own_messages_without_a_validator_are_unknown_commands() -> None:
    """McbpValidator has no validator for DCP_SEQNO_ADVANCED and DCP_OSO_SNAPSHOT: UnknownCommand before any
    other check, the header's and the DCP connection's too; DCP_FLUSH's validator refuses it (NotSupported).
    serve checked their datatype and answered NotSupported."""
    conn = ProducerConnection(Node(0, cluster()))
    assert hello(conn) == ["Xerror", "JSON"]
    log_in(conn, bucket=None)
    for _ in ("not DCP", "DCP"):
        assert [call(conn, opcode=opcode, vbucket=0, **fields)[0]["status"] for opcode, fields in (
            ("DCP_SEQNO_ADVANCED", {"by_seqno": 1, "datatype": SNAPPY}), ("DCP_OSO_SNAPSHOT", {"oso_flags": 1}),
            ("DCP_FLUSH", {}))] == ["UnknownCommand", "UnknownCommand", "NotSupported"]
        call(conn, opcode="SELECT_BUCKET", key="default")
        call(conn, opcode="DCP_OPEN", key="n", seqno=0, flags=PRODUCER)


def test_the_sasl_commands_noop_and_version_are_checked_as_the_server_checks_them() -> None:
    """sasl_list_mech_validator, sasl_auth_validator (SASL_STEP's too), noop_validator, version_validator."""
    conn = ProducerConnection(Node(0, cluster()))
    assert hello(conn) == ["Xerror", "JSON"]
    refused = [context_of(call(conn, **record)[0]) for record in (
        {"opcode": "SASL_AUTH", "key": "", "value": "x"},
        {"opcode": "SASL_STEP", "key": "PLAIN", "value": "x", "cas": 1},
        {"opcode": "SASL_AUTH", "key": "PLAIN", "value": "{}", "datatype": JSON},
        {"opcode": "SASL_LIST_MECHS", "value": "x"})]
    assert refused == [("Einval", "Request must include key"), ("Einval", "Request CAS must not be set"),
                       ("Einval", "Request datatype invalid"), ("Einval", "Request must not include value")]
    assert call(conn, opcode="SASL_LIST_MECHS")[0]["status"] == "Success"
    log_in(conn, bucket=None)
    assert context_of(call(conn, opcode="NOOP", key="k")[0]) == ("Einval", "Request must not include key")
    assert context_of(call(conn, opcode="VERSION", extras="00")[0]) == ("Einval", "Request must not include extras")
    assert [call(conn, opcode=opcode)[0]["status"] for opcode in ("NOOP", "VERSION")] == ["Success", "Success"]


def known_version(epoch: int, revision: int) -> str:
    """GET_CLUSTER_CONFIG's extras: the epoch and revision the client has, signed 64-bit."""
    return (epoch % (1 << 64)).to_bytes(8, "big").hex() + (revision % (1 << 64)).to_bytes(8, "big").hex()


def test_error_map_bucket_selection_and_cluster_config_are_checked_as_the_server_checks_them() -> None:
    """get_errmap_validator: no key, any value and no CAS, then vbucket 0 and a 2-byte value;
    select_bucket_validator: any key, no value, any CAS; get_cluster_config_validator: no extras or 16
    bytes of them, no CAS, then a revision of 1 or more and an epoch of 1 or more, or -1."""
    conn = ProducerConnection(Node(0, cluster()))
    assert hello(conn) == ["Xerror", "JSON"]
    version = {"value": "0002", "value_encoding": "hex"}
    checks: list[tuple[dict[str, Any], str]] = [  # GET_ERROR_MAP is allowed before authentication
        ({"opcode": "GET_ERROR_MAP", **version, "cas": 1}, "Request CAS must not be set"),
        ({"opcode": "GET_ERROR_MAP", **version, "key": "k"}, "Request must not include key"),
        ({"opcode": "GET_ERROR_MAP", **version, "vbucket": 1}, "Request vbucket id must be 0"),
        ({"opcode": "GET_ERROR_MAP"}, "Request value must be of length 2"),
        ({"opcode": "GET_ERROR_MAP", "value": "000200", "value_encoding": "hex"}, "Request value must be of length 2")]
    assert [context_of(call(conn, **record)[0]) for record, _ in checks] == [("Einval", text) for _, text in checks]
    assert call(conn, opcode="GET_ERROR_MAP", **version)[0]["status"] == "Success"
    log_in(conn, bucket=None)
    assert context_of(call(conn, opcode="SELECT_BUCKET", key="default", value="v")[0]) == (
        "Einval", "Request must not include value")
    assert call(conn, opcode="SELECT_BUCKET", key="")[0]["status"] == "KeyEnoent"  # no such bucket, not malformed
    assert call(conn, opcode="SELECT_BUCKET", key="default", cas=7)[0]["status"] == "Success"
    checks = [
        ({"opcode": "GET_CLUSTER_CONFIG", "extras": "00" * 8}, "Request must include extras of length 16"),
        ({"opcode": "GET_CLUSTER_CONFIG", "cas": 1}, "Request CAS must not be set"),
        ({"opcode": "GET_CLUSTER_CONFIG", "extras": known_version(1, 0)}, "Revision number must not be less than 1"),
        ({"opcode": "GET_CLUSTER_CONFIG", "extras": known_version(0, 5)}, "Revision number must not be less than 1"),
        ({"opcode": "GET_CLUSTER_CONFIG", "extras": known_version(-2, 5)}, "Revision number must not be less than 1")]
    assert [context_of(call(conn, **record)[0]) for record, _ in checks] == [("Einval", text) for _, text in checks]
    assert [call(conn, opcode="GET_CLUSTER_CONFIG", **extras)[0]["status"] for extras in (
        {}, {"extras": known_version(-1, 1)}, {"extras": known_version(1, 1)})] == ["Success"] * 3


@pytest.mark.parametrize("collections", [False, True])
def test_a_dcp_name_is_a_key_of_up_to_the_servers_key_length(collections: bool) -> None:
    """The server's only limit on a connection name is verify_header's on every key: 250 bytes, 251 with
    Collections. serve refused names over the 200 bytes the documents advise, with no context."""
    longest = 251 if collections else 250
    conn = ProducerConnection(Node(0, cluster()))
    hello(conn, *(["Collections"] if collections else []))
    log_in(conn)
    assert context_of(call(conn, opcode="DCP_OPEN", key="n" * (longest + 1), seqno=0, flags=PRODUCER)[0]) == (
        "Einval", f"Key length exceeds {longest}")
    assert context_of(call(conn, opcode="DCP_OPEN", key="", seqno=0, flags=PRODUCER)[0]) == (
        "Einval", "Request must include key")
    assert call(conn, opcode="DCP_OPEN", key="n" * longest, seqno=0, flags=PRODUCER)[0]["status"] == "Success"


def test_the_cas_hello_and_get_all_vb_seqnos_must_not_have_and_their_own_checks_after() -> None:
    conn = ProducerConnection(Node(0, cluster()))
    assert hello(conn) == ["Xerror", "JSON"]
    assert context_of(call(conn, opcode="HELLO", key="t", cas=5)[0]) == ("Einval", "Request CAS must not be set")
    assert context_of(call(conn, opcode="HELLO", key="t", value="000700", value_encoding="hex")[0]) == (
        "Einval", "Request value must be of even length")
    log_in(conn)
    # its extras are checked after the rest of the header: the CAS, then the extras' length
    assert context_of(call(conn, opcode="GET_ALL_VB_SEQNOS", extras="0001", cas=5)[0]) == (
        "Einval", "Request CAS must not be set")
    assert context_of(call(conn, opcode="GET_ALL_VB_SEQNOS", extras="0001")[0]) == (
        "Einval", "Request extras must be of length 0 or 4 or 8")
    assert call(conn, opcode="GET_ALL_VB_SEQNOS")[0]["status"] == "Success"


# --- a stream's first marker starts at the requested snapshot's start (ActiveStream's snap_start_seqno_) -----
FROM_LATEST = 0x40


def test_a_resumed_snapshots_first_marker_starts_where_the_clients_snapshot_did() -> None:
    """kv_engine's first marker takes the lower of the requested snapshot start and its own ('the first
    snapshot could be resumption of a previous snapshot', ActiveStream::snapshot, markDiskSnapshot): serve
    sent the requested start seqno, so a client resuming inside snapshot 3-8 was told a snapshot began at 5."""
    on = cluster(Bucket("default", 1, ITEMS, 20, 7))  # the default collection alone: legacy streams see it all
    vb = on.bucket.vbuckets[0]
    uuid = vb.failover_log[0].vbucket_uuid
    for start, snap_end in ((5, 8), (8, 8)):  # inside the snapshot, and at its end
        conn = session(on=on, name=f"resume-{start}")
        assert call(conn, **STREAM_REQ | {"flags": 0, "start_seqno": start, "vbucket_uuid": uuid,
                                          "snap_start_seqno": 3, "snap_end_seqno": snap_end})[0]["status"] == "Success"
        got = drain(conn)
        assert flags_of(got)[0][:2] == (3, ITEMS)
        assert sent_seqnos(got)[:1] == [start + 1]
    latest = session(on=on, name="latest")  # FromLatest: the snapshot is the high seqno's, whatever was asked
    assert call(latest, **STREAM_REQ | {"flags": FROM_LATEST, "snap_start_seqno": 0, "snap_end_seqno": 0})[0][
        "status"] == "Success"
    on.bucket.write(vb, 0, b"later", b"{}", JSON, 0, 0, None)
    got = drain(latest)
    assert flags_of(got)[0][:2] == (ITEMS, ITEMS + 1)
    assert sent_seqnos(got) == [ITEMS + 1]


# --- a legacy stream's snapshots end on an item it is sent (markLegacyDiskSnapshot, ActiveStream::snapshot) ----
def sent_seqnos(got: list[dict[str, Any]]) -> list[int]:
    return [r["by_seqno"] for r in got if r["opcode"] in ITEM_OPCODES]


def test_a_legacy_backfill_ends_on_its_last_item_not_on_a_hidden_prepare() -> None:
    """A client without Collections can be sent no DCP_SEQNO_ADVANCED, so kv_engine ends its disk snapshot at
    the default collection's max visible seqno: serve ended it at the vbucket's high seqno, a seqno the client
    never gets, and the snapshot could never be seen complete."""
    bucket = Bucket("default", 1, ITEMS, 20, 7, silent_replicas=1)  # the default collection alone
    vb = bucket.vbuckets[0]
    bucket.write(vb, 0, b"pending", b"{}", JSON, 0, 0, None, durability_level=1)  # never commits
    _, got = stream(session(on=cluster(bucket)))
    assert flags_of(got) == [(0, ITEMS, DISK | CHECKPOINT_FLAG)]
    assert vb.high_seqno == ITEMS + 1
    assert sent_seqnos(got) == list(range(1, ITEMS + 1))


def test_a_legacy_stream_gets_no_snapshot_of_what_it_is_not_sent() -> None:
    """In memory, kv_engine's snapshot ends at the last item it sends the stream; with nothing for it (another
    collection's write, a prepare) there is no marker at all. serve sent a marker with no item after it."""
    on = cluster(Bucket("default", 1, ITEMS, 20, 7, MANIFEST, silent_replicas=1))
    conn = session(on=on)
    _, backfill = stream(conn)
    vb = on.bucket.vbuckets[0]
    assert flags_of(backfill)[0][1] == sent_seqnos(backfill)[-1] == collection_seqnos(on.bucket, 0)[-1]
    assert kv_call(on, "Collections", opcode="SET", vbucket=0, key="\x09other", value="{}", flags=0,
                   expiration=0)["status"] == "Success"  # the airline collection's (a leb128 prefix)
    on.bucket.write(vb, 0, b"pending", b"{}", JSON, 0, 0, None, durability_level=1)
    assert drain(conn) == []
    assert upsert(on, "mine")["status"] == "Success"
    got = drain(conn)
    assert flags_of(got) == [(vb.high_seqno, vb.high_seqno, MEMORY | CHECKPOINT_FLAG)]  # from its first item
    assert sent_seqnos(got) == [vb.high_seqno]


def test_a_legacy_backfill_with_nothing_for_the_stream_is_cancelled() -> None:
    """Nothing of the default collection between the start and the high seqno: kv_engine sends no disk
    snapshot and the stream goes on in memory, its first marker from the requested start and beginning a
    checkpoint."""
    on = cluster()
    start = collection_seqnos(on.bucket, 0)[-1]
    assert start < HIGH
    conn = session(on=on)
    uuid = on.bucket.vbuckets[0].failover_log[0].vbucket_uuid
    status, got = stream(conn, start=start, uuid=uuid)
    assert (status, got) == ("Success", [])
    assert upsert(on, "mine")["status"] == "Success"
    got = drain(conn)
    assert flags_of(got) == [(start, HIGH + 1, MEMORY | CHECKPOINT_FLAG)]
    assert sent_seqnos(got) == [HIGH + 1]


def test_a_legacy_sync_writes_backfill_of_a_bucket_with_collections_fails() -> None:
    """kv_engine's markLegacyDiskSnapshot cannot find a legacy stream's prepares among other collections:
    with enable_sync_writes and a manifest uid other than 0 it ends the stream BackfillFail. A stream from the
    high seqno has no backfill, and a bucket with the default collection alone backfills."""
    controls = {"enable_noop": "true", "enable_sync_writes": "true"}
    on = cluster()
    _, got = stream(session(controls=controls, on=on))
    assert [(r["opcode"], r.get("stream_end_status")) for r in got] == [("DCP_STREAM_END", 5)]
    uuid = on.bucket.vbuckets[0].failover_log[0].vbucket_uuid
    conn = session(controls=controls, on=on, name="high")
    assert stream(conn, start=HIGH, uuid=uuid) == ("Success", [])
    assert upsert(on, "mine")["status"] == "Success"
    assert sent_seqnos(drain(conn)) == [HIGH + 1]
    plain = cluster(Bucket("default", 1, ITEMS, 20, 7))
    _, got = stream(session(controls=controls, on=plain))
    assert flags_of(got) == [(0, ITEMS, DISK | CHECKPOINT_FLAG)]


def test_a_legacy_backfill_of_a_dropped_default_collection_sends_nothing() -> None:
    """The default collection dropped between the request and the backfill: kv_engine's backfill finds no
    default collection on disk and is cancelled, and the stream ends. serve's snapshot, cut at the default
    collection's last item, no longer reached the drop and sent the dropped items."""
    on = cluster()
    legacy = session(on=on)
    assert request(legacy) == "Success"
    on.bucket.apply_manifest(Manifest(6, {AIRLINE: (8, "airline"), HOTEL: (8, "hotel")}, dict(MANIFEST.scopes)))
    got = drain(legacy)
    assert [(r["opcode"], r.get("stream_end_status")) for r in got] == [("DCP_STREAM_END", 0)]
