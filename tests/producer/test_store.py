"""The emulated bucket: deterministic items, their built bytes held to the protocol's encoder, failover rules."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpctl.producer.store import (
    ABORT,
    COMMIT,
    DELETION,
    EXPIRATION,
    MUTATION,
    PREPARE,
    SYSTEM_EVENT,
    SYSTEM_EVENT_COLLECTION,
    Bucket,
    Encoding,
    Manifest,
    SystemEvent,
    VBucket,
    manifest_events,
    memcached_max_ttl,
)
from dcpctl.protocol.constants import SystemEventId
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, decode
from dcpctl.protocol.value import Xattr, build_xattrs
from dcpctl.render.record import record as record_of

MANIFEST = Manifest(2, {0: (0, "_default"), 8: (0, "a"), 300: (9, "b")}, {0: "_default", 9: "s"})


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), vbucket=st.integers(0, 7), seqno=st.integers(1, 10**9),
       value_size=st.integers(0, 300), collections=st.booleans(), delete_times=st.booleans(),
       expiry_opcode=st.booleans(), no_value=st.booleans(), opaque=st.integers(0, 2**32 - 1),
       stream_id=st.sampled_from([None, 1, 0xFFFF]))
def test_built_items_are_what_the_encoder_makes_of_their_records(
        seed: int, vbucket: int, seqno: int, value_size: int, collections: bool, delete_times: bool,
        expiry_opcode: bool, no_value: bool, opaque: int, stream_id: int | None) -> None:
    """Every item shape the store builds decodes cleanly and is what ``encode`` gives for its record (seqnos
    1..3 are the manifest's system events)."""
    bucket = Bucket("b", 8, 0, value_size, seed, MANIFEST)
    item = bucket.item(bucket.vbuckets[vbucket], seqno)
    encoding = Encoding(collections, delete_times, expiry_opcode, no_value)
    built = bucket.encode_item(item, encoding, opaque, stream_id)
    message = decode(built, 0, DecodeOptions(collections=collections))
    assert message.diagnostics == ()
    assert encode(record_of(message), fix_lengths=True) == built
    assert (message.opaque, message.stream_id, message.by_seqno) == (opaque, stream_id, seqno)
    if item.opcode == SYSTEM_EVENT:
        assert (message.opcode, message.key, message.datatype, message.cas) == (SYSTEM_EVENT, item.key, 0, 0)
        return
    expired = item.opcode == EXPIRATION and expiry_opcode and delete_times
    assert message.opcode == (item.opcode if item.opcode == MUTATION or expired else DELETION)
    assert message.value == (item.value if item.opcode == MUTATION and not no_value else b"")


def test_items_are_a_function_of_seed_and_history() -> None:
    one, two = Bucket("b", 4, 400, 50, 9), Bucket("b", 4, 400, 50, 9)
    first, second = one.vbuckets[1], two.vbuckets[1]
    assert [one.item(first, s) for s in range(1, 101)] == [two.item(second, s) for s in range(1, 101)]
    before = one.item(one.vbuckets[1], 90)
    entry = one.failover(one.vbuckets[1], 80)
    assert one.vbuckets[1].high_seqno == 80
    assert [e.seqno for e in one.vbuckets[1].failover_log] == [80, 0]
    one.mutate(one.vbuckets[1], 20)
    assert one.item(one.vbuckets[1], 50) == two.item(two.vbuckets[1], 50)  # shared history is unchanged
    assert one.item(one.vbuckets[1], 90) != before  # the new branch has other items
    assert one.vbuckets[1].branch_uuid(81) == entry.vbucket_uuid


def test_the_image_is_cut_back_by_a_failover() -> None:
    bucket = Bucket("b", 1, 100, 40, 3)
    vb = bucket.vbuckets[0]
    image = bucket.image(vb, Encoding(), 100)
    assert len(image.offsets) == 100
    bucket.failover(vb, 30)
    assert len(image.offsets) == 30
    bucket.mutate(vb, 10)
    rebuilt = bucket.image(vb, Encoding(), 40)
    fresh = b"".join(bucket.encode_item(bucket.item(vb, s), Encoding(), 0) for s in range(1, 41)
                     if bucket.item(vb, s).collection_id == 0)
    assert bytes(rebuilt.data) == fresh


# --- documents (issue 16) --------------------------------------------------------------------------------
def test_generated_items_are_the_documents_initial_content() -> None:
    bucket = Bucket("b", 2, 300, 60, 5)
    vb = bucket.vbuckets[1]
    newest = {}
    for seqno in range(1, vb.high_seqno + 1):
        item = bucket.item(vb, seqno)
        newest[(item.collection_id, item.key)] = item
    for (collection, key), item in newest.items():
        doc = bucket.document(vb, collection, key)
        assert doc is not None
        assert (doc.seqno, doc.cas, doc.rev_seqno, doc.deleted) == (item.seqno, item.cas, item.rev_seqno,
                                                                    item.opcode != MUTATION)
        assert doc.value == item.value


def test_a_write_is_the_next_item_with_a_hybrid_logical_clock_cas() -> None:
    now = [1_800_000_000_123_456_789]
    bucket = Bucket("b", 2, 10, 60, 5, clock=lambda: now[0])
    vb = bucket.vbuckets[0]
    high = vb.high_seqno
    first = bucket.write(vb, 0, b"k", b'{"a":1}', 1, 7, 0, None)
    assert first.seqno == high + 1
    assert first.rev_seqno == 1
    assert first.cas == now[0] & ~0xFFFF  # the physical part, logical bits clear
    second = bucket.write(vb, 0, b"k", b'{"a":2}', 1, 8, 1_900_000_000, first)  # the clock did not move
    assert (second.seqno, second.rev_seqno, second.cas) == (high + 2, 2, first.cas + 1)
    item = bucket.item(vb, high + 2)
    assert (item.opcode, item.key, item.value, item.flags, item.expiry) == (MUTATION, b"k", b'{"a":2}', 8,
                                                                            1_900_000_000)
    message = decode(bucket.encode_item(item, Encoding(), 5), 0, DecodeOptions())
    assert (message.field("flags"), message.field("expiration"), message.cas) == (8, 1_900_000_000, second.cas)
    gone = bucket.write(vb, 0, b"k", b"", 0, 0, 0, second, opcode=DELETION)
    assert bucket.item(vb, high + 3).opcode == DELETION
    assert gone.deleted
    assert bucket.live(vb, 0, b"k") is None


def test_an_expired_document_reads_as_missing_and_expires_on_dcp() -> None:
    now = [1_800_000_000 * 10**9]
    bucket = Bucket("b", 1, 0, 60, 5, clock=lambda: now[0])
    vb = bucket.vbuckets[0]
    bucket.write(vb, 0, b"k", b"v", 0, 0, bucket.expiry_of(10), None)
    assert bucket.live(vb, 0, b"k") is not None
    now[0] += 11 * 10**9
    assert bucket.live(vb, 0, b"k") is None
    assert bucket.item(vb, 2).opcode == EXPIRATION


def test_a_failover_forgets_writes_above_the_branch_point() -> None:
    bucket = Bucket("b", 1, 5, 60, 5)
    vb = bucket.vbuckets[0]
    bucket.write(vb, 0, b"kept", b"1", 0, 0, 0, None)
    bucket.write(vb, 0, b"lost", b"2", 0, 0, 0, None)
    bucket.failover(vb, 6)
    assert bucket.document(vb, 0, b"kept") is not None
    assert bucket.document(vb, 0, b"lost") is None
    assert bucket.item(vb, 7).key != b"lost"


def test_xattrs_go_to_streams_that_asked_for_them() -> None:
    bucket = Bucket("b", 1, 0, 60, 5)
    vb = bucket.vbuckets[0]
    blob = build_xattrs([Xattr("_sync", '{"rev":1}')])
    bucket.write(vb, 0, b"k", blob + b'{"a":1}', 0x05, 0, 0, None)
    plain = decode(bucket.encode_item(bucket.item(vb, 1), Encoding(), 0), 0, DecodeOptions())
    assert (plain.datatype, plain.value) == (0x01, b'{"a":1}')
    full = decode(bucket.encode_item(bucket.item(vb, 1), Encoding(xattrs=True), 0), 0, DecodeOptions())
    assert (full.datatype, full.value) == (0x05, blob + b'{"a":1}')


def test_the_expiry_pager_expires_documents_nobody_reads() -> None:
    now = [1_800_000_000 * 10**9]
    bucket = Bucket("b", 2, 0, 60, 5, clock=lambda: now[0])
    short, rewritten = bucket.vbuckets
    bucket.write(short, 0, b"short", b"v", 0, 0, bucket.expiry_of(5), None)
    first = bucket.write(rewritten, 0, b"again", b"v", 0, 0, bucket.expiry_of(5), None)
    bucket.write(rewritten, 0, b"again", b"w", 0, 0, 0, first)  # written since without an expiry: it stays
    assert bucket.expire_due() == 0
    now[0] += 6 * 10**9
    assert bucket.expire_due() == 1
    assert bucket.item(short, 2).opcode == EXPIRATION
    assert bucket.document(short, 0, b"short").deleted  # type: ignore[union-attr]
    assert bucket.live(rewritten, 0, b"again") is not None
    assert bucket.expire_due() == 0


def newest_by_scan(bucket: Bucket, vb: VBucket) -> dict[tuple[int, bytes], tuple[int, bool]]:
    """The documents as a scan of every item gives them: (collection, key) -> (seqno, deleted)."""
    newest = {}
    for seqno in range(1, vb.high_seqno + 1):
        item = bucket.item(vb, seqno)
        if item.opcode not in (PREPARE, ABORT, SYSTEM_EVENT):  # a system event is no document
            deleted = item.deleted if item.opcode == COMMIT else item.opcode != MUTATION
            newest[(item.collection_id, item.key)] = (seqno, deleted)
    return newest


@pytest.mark.parametrize(("items", "manifest", "dense"), [(3000, MANIFEST, False), (200_000, None, True)])
def test_the_key_index_finds_what_a_scan_of_every_item_finds(items: int, manifest: Manifest | None,
                                                              dense: bool) -> None:
    bucket = Bucket("b", 1, items, 20, 5, manifest)
    vb = bucket.vbuckets[0]
    bucket.failover(vb, items // 2)  # two branches, then generated items of the new one
    bucket.mutate(vb, items // 4)
    first = len(bucket.events) + 1  # the generated items follow the manifest's system events
    for n in range(40):  # written keys among the generated ones: written, then generated again (mutate)
        key = bucket.item(vb, first + n * 7).key
        bucket.write(vb, bucket.item(vb, first + n * 7).collection_id, key, b"{}", 1, 0, 0,
                     bucket.document(vb, bucket.item(vb, first + n * 7).collection_id, key), durability_level=n % 2)
    bucket.mutate(vb, 500)
    assert isinstance(vb.generated, array) == dense
    expected = newest_by_scan(bucket, vb)
    assert len(expected) > 1000
    for (collection, key), (seqno, deleted) in expected.items():
        doc = bucket.document(vb, collection, key)
        assert doc is not None
        assert (doc.seqno, doc.deleted) == (seqno, deleted)
    assert bucket.document(vb, 0, b"doc-9999999") is None  # a key number no item has
    assert bucket.document(vb, 0, b"other") is None
    for event in bucket.events:  # the key index skips the system events: no read finds one
        assert bucket.document(vb, SYSTEM_EVENT_COLLECTION, event.name) is None
        assert bucket.document(vb, event.collection_id or 0, event.name) is None


def test_a_read_makes_only_the_document_it_reads() -> None:
    bucket = Bucket("b", 1, 200_000, 20, 5)
    vb = bucket.vbuckets[0]
    doc = bucket.document(vb, 0, bucket.item(vb, 7).key)
    assert doc is not None
    assert len(vb.docs) == 1  # the generated items are indexed by key number, not made into documents


# --- the manifest's system events (reference 3.16) -------------------------------------------------------
def test_a_manifests_events_are_in_kv_engines_order_and_only_the_last_has_its_uid() -> None:
    """Manifest::completeUpdate: collections dropped, scopes created, collections created, scopes dropped;
    every event but the last carries the uid before the update (the epoch's 0)."""
    manifest = Manifest(0x1F, {9: (8, "b"), 8: (0, "a"), 12: (10, "c")}, {10: "t", 0: "_default", 8: "s"},
                        {12: 60})
    begin, create = SystemEventId.BEGIN_COLLECTION, SystemEventId.CREATE_SCOPE
    assert manifest_events(manifest) == (
        SystemEvent(SystemEventId.END_COLLECTION, 0, 0, b"", 0),
        SystemEvent(create, 10, None, b"t", 0), SystemEvent(create, 8, None, b"s", 0),
        SystemEvent(begin, 10, 12, b"c", 0, 60), SystemEvent(begin, 0, 8, b"a", 0),
        SystemEvent(begin, 8, 9, b"b", 0x1F))
    assert manifest_events(Manifest()) == ()  # the epoch manifest: nothing to change
    no_scope = manifest_events(Manifest(3, {}, {}))
    assert [(e.event_id, e.manifest_uid) for e in no_scope] == [(SystemEventId.END_COLLECTION, 0),
                                                                 (SystemEventId.DROP_SCOPE, 3)]
    assert Manifest(3, {}, {}).refusal() == "the default scope was not defined"  # as kv_engine refuses it
    assert Manifest(3, {0: (8, "_default")}, {0: "_default", 8: "s"}).refusal() is not None
    assert MANIFEST.refusal() is None


def test_the_events_open_every_vbuckets_history() -> None:
    bucket = Bucket("b", 4, 40, 20, 3, MANIFEST)
    assert [vb.high_seqno for vb in bucket.vbuckets] == [3 + 10] * 4
    for vb in bucket.vbuckets:
        items = [bucket.item(vb, s) for s in range(1, 4)]
        assert [(i.opcode, i.seqno, i.key, i.collection_id, i.event) for i in items] == [
            (SYSTEM_EVENT, s, e.name, SYSTEM_EVENT_COLLECTION, e) for s, e in enumerate(bucket.events, 1)]
        assert bucket.item(vb, 4).opcode != SYSTEM_EVENT
    assert Bucket("b", 4, 40, 20, 3).vbuckets[0].high_seqno == 10  # no manifest, no event: nothing moves


@pytest.mark.parametrize(("given", "kept"), [(0, None), (-1, 0), (1, 1), (2**31 - 1, 2**31 - 1)])
def test_a_max_ttl_is_read_as_ns_server_maps_it_for_memcached(given: int, kept: int | None) -> None:
    assert memcached_max_ttl(given) == kept  # 0: the bucket's applies; -1: never expires (memcached's 0)


@pytest.mark.parametrize("given", [-2, 2**31, True, "60", 1.5, None])
def test_a_max_ttl_outside_ns_servers_range_is_refused(given: object) -> None:
    with pytest.raises(ValueError, match="maxTTL"):
        memcached_max_ttl(given)
