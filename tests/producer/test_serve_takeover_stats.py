"""STAT dcp-vbtakeover (reference 4.8; kv_engine's doDcpVbTakeoverStats and ActiveStream::addTakeoverStats): what
ns_server polls to see how far a vbucket's move has come. The counts are checked against a count made here from
every item of the vbucket, so they hold for any seed."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from test_serve_fidelity import (
    HIGH,
    ITEMS,
    MANIFEST,
    WITHOUT_AIRLINE,
    cluster,
    drain,
    kv_call,
    kv_session,
    packet,
    records,
    request,
    session,
    upsert,
)

from dcpctl.producer.connection import Cluster, ProducerConnection
from dcpctl.producer.store import Bucket
from dcpctl.protocol.constants import Opcode

TAKE_OVER = 0x01


def takeover_stats(conn: ProducerConnection, key: str) -> dict[str, str] | str:
    """The stats of one STAT request, in order; or its status when it fails."""
    conn.receive(packet(opcode="STAT", key=key), 0)
    answers = records(conn, conn.produce(1 << 20, 0))
    if answers[-1]["status"] != "Success":
        return str(answers[-1]["status"])
    assert answers[-1].get("key") is None  # the empty terminator
    return {r["key"]: r["value"] for r in answers[:-1]}


def asks(record: dict[str, Any]) -> bool:
    """Whether a takeover's message waits for the consumer's answer: a marker flagged Acknowledge, a vbucket state."""
    return record["opcode"] == "DCP_SET_VBUCKET_STATE" or (
        record["opcode"] == "DCP_SNAPSHOT_MARKER" and bool(record["snapshot_flags"] & 0x08))


def counted(bucket: Bucket) -> tuple[int, int]:
    """Vbucket 0's alive documents and tombstones on disk, from its items one by one: each key's newest version (a
    prepare or abort is no document); a drop of a collection or scope is a tombstone; the purge takes tombstones
    at or below its seqno, but never the default collection's drop."""
    vb = bucket.vbuckets[0]
    newest: dict[tuple[int, bytes], Any] = {}
    drops = 0
    for seqno in range(1, vb.high_seqno + 1):
        item = bucket.item(vb, seqno)
        if item.opcode == Opcode.DCP_SYSTEM_EVENT:
            assert item.event is not None
            drops += item.event.dropped and (seqno > vb.purge_seqno or item.event.collection_id == 0)
        elif item.opcode not in (Opcode.DCP_PREPARE, Opcode.DCP_ABORT):
            newest[(item.collection_id, item.key)] = item
    tombstones = [item for item in newest.values() if item.opcode != Opcode.DCP_MUTATION or item.deleted]
    alive = len(newest) - len(tombstones)
    gone = sum(1 for item in tombstones if item.seqno > vb.purge_seqno)
    return alive, gone + drops


def test_without_a_connection_the_vbucket_is_counted_whole() -> None:
    on = cluster()
    bucket = on.bucket
    kv = kv_session(on=on)
    alive, deleted = counted(bucket)
    assert 0 < deleted < alive < ITEMS  # the seed's generated deletions and expirations, and keys written twice
    base = {"status": "connection_does_not_exist", "on_disk_deletes": str(deleted), "vb_items": str(alive),
            "chk_items": "0", "estimate": str(alive + deleted)}
    got = takeover_stats(kv, "dcp-vbtakeover 0")
    assert got == base
    assert list(got) == list(base)  # kv_engine's order
    assert takeover_stats(kv, "dcp-vbtakeover 0 nobody") == base
    assert upsert(on, "new")["status"] == "Success"
    assert kv_call(on, opcode="DELETE", vbucket=0, key="new")["status"] == "Success"
    generated = next(item for item in map(functools.partial(bucket.item, bucket.vbuckets[0]), range(HIGH, 0, -1))
                     if item.opcode == Opcode.DCP_MUTATION and item.collection_id == 0)  # a legacy client's
    assert kv_call(on, opcode="DELETE", vbucket=0, key=generated.key.decode())["status"] == "Success"
    assert counted(bucket) == (alive - 1, deleted + 2)
    got = takeover_stats(kv, "dcp-vbtakeover 0")
    assert isinstance(got, dict)
    assert (got["vb_items"], got["on_disk_deletes"], got["chk_items"]) == (str(alive - 1), str(deleted + 2), "3")
    bucket.purge(bucket.vbuckets[0], HIGH + 2)  # the first delete's tombstone is off disk, not the second's
    assert counted(bucket) == (alive - 1, 1)
    got = takeover_stats(kv, "dcp-vbtakeover 0")
    assert isinstance(got, dict)
    assert (got["on_disk_deletes"], got["estimate"]) == ("1", str(alive))


def test_a_dropped_collection_is_a_tombstone() -> None:
    on = cluster(Bucket("default", 1, ITEMS, 20, 7, MANIFEST))
    kv = kv_session(on=on)
    before = takeover_stats(kv, "dcp-vbtakeover 0")
    on.bucket.apply_manifest(WITHOUT_AIRLINE)
    after = takeover_stats(kv, "dcp-vbtakeover 0")
    assert isinstance(before, dict)
    assert isinstance(after, dict)
    assert int(after["on_disk_deletes"]) == int(before["on_disk_deletes"]) + 1 == counted(on.bucket)[1]
    assert after["vb_items"] == before["vb_items"]  # the drop's documents are the drop's to purge


def test_a_takeover_streams_phases_and_what_it_has_left_to_send() -> None:
    on = cluster()
    kv = kv_session(on=on)
    alive, deleted = counted(on.bucket)
    tail = {"vb_items": str(alive), "on_disk_deletes": str(deleted)}
    conn = session(on=on, name="replication:a->b")
    assert takeover_stats(kv, "dcp-vbtakeover 0 replication:a->b") == {
        "status": "stream_does_not_exist", "estimate": "0", "backfillRemaining": "0"}
    assert request(conn, flags=TAKE_OVER) == "Success"
    assert takeover_stats(kv, "dcp-vbtakeover 0 replication:a->b") == {
        "name": "eq_dcpq:replication:a->b", "status": "calculating-item-count", "estimate": "0", "chk_items": "0",
        **tail}
    left = []
    sent: list[dict[str, Any]] = []
    while True:
        got = takeover_stats(kv, "dcp-vbtakeover 0 replication:a->b")
        assert isinstance(got, dict)
        if got["status"] != "backfilling" and sent:
            break
        sent += records(conn, conn.produce(1 << 20, 3))
        if got["status"] == "backfilling":
            assert got["estimate"] == got["backfillRemaining"]
            left.append(int(got["estimate"]))
    # the disk snapshot's seqnos not yet read, counting down
    assert left == sorted(left, reverse=True)
    assert left[0] <= HIGH
    assert len(left) > 2
    assert got == {"name": "eq_dcpq:replication:a->b", "status": "in-memory", "estimate": "0", "chk_items": "0",
                   **tail}
    assert upsert(on, "during")["status"] == "Success"
    got = takeover_stats(kv, "dcp-vbtakeover 0 replication:a->b")
    assert isinstance(got, dict)
    assert (got["status"], got["estimate"], got["chk_items"]) == ("in-memory", "1", "1")
    asked = [r for r in sent + drain(conn) if asks(r)]
    while (question := asked.pop(0)).get("vbucket_state") != 1:  # a consumer answering all, up to the active state
        conn.receive(packet(magic="ClientResponse", opcode=question["opcode"], opaque=question["opaque"]), 0)
        asked += [r for r in drain(conn) if asks(r)]
    conn.receive(packet(magic="ClientResponse", opcode=question["opcode"], opaque=question["opaque"]), 0)
    # the stream end is due, not yet sent: the stream is dead
    assert takeover_stats(kv, "dcp-vbtakeover 0 replication:a->b") == {
        "name": "eq_dcpq:replication:a->b", "status": "stream_is_dead", "estimate": "0", "backfillRemaining": "0"}
    assert drain(conn)[-1]["opcode"] == "DCP_STREAM_END"
    assert on.bucket.vbuckets[0].state == "dead"  # the copy here still answers
    assert takeover_stats(kv, "dcp-vbtakeover 0 replication:a->b") == {
        "status": "stream_does_not_exist", "estimate": "0", "backfillRemaining": "0"}


def test_a_stream_ends_where_its_checkpoint_is_counted() -> None:
    on = cluster()
    kv = kv_session(on=on)
    conn = session(on=on)
    assert request(conn, end=HIGH + 2) == "Success"
    drain(conn)
    for n in range(4):
        assert upsert(on, f"k{n}")["status"] == "Success"
    got = takeover_stats(kv, "dcp-vbtakeover 0 t")
    assert isinstance(got, dict)
    assert (got["status"], got["chk_items"], got["estimate"]) == ("in-memory", "2", "2")  # of the 4, 2 to its end


def test_a_connection_with_stream_ids_reports_nothing() -> None:
    on = cluster()
    conn = session("Collections", on=on, controls={"enable_noop": "true", "enable_stream_id": "true"})
    assert takeover_stats(kv_session(on=on), "dcp-vbtakeover 0 t") == {}
    assert conn.stream_ids


@pytest.mark.parametrize(("words", "answer"), [
    ("0", "0"), ("+0", "0"), ("000", "0"), ("abc", "0"), ("65536", "0"), ("-1", "0"), (" 0  t  extra", "0"),
    ("1", "NotMyVbucket"), ("65535", "NotMyVbucket"), ("+1", "NotMyVbucket"),
])
def test_the_vbucket_is_read_as_the_server_reads_it(words: str, answer: str) -> None:
    """kv_engine's safe_strtous: what is not a u16 reads as vbucket 0."""
    got = takeover_stats(kv_session(on=cluster()), f"dcp-vbtakeover {words}")
    assert (got if isinstance(got, str) else "0") == answer


@pytest.mark.parametrize("key", ["dcp-vbtakeover", "dcp-vbtakeover "])
def test_a_takeover_stat_without_its_vbucket_is_unknown(key: str) -> None:
    assert takeover_stats(kv_session(on=cluster()), key) == "KeyEnoent"


def test_a_vbucket_on_another_node_is_not_mine() -> None:
    bucket = Bucket("default", 2, ITEMS, 20, 7)
    on = Cluster(bucket, [("127.0.0.1", 11210), ("127.0.0.1", 11211)], [0, 1], {"Administrator": "password"})
    kv = kv_session(on=on)
    assert takeover_stats(kv, "dcp-vbtakeover 1") == "NotMyVbucket"
    assert isinstance(takeover_stats(kv, "dcp-vbtakeover 0"), dict)
