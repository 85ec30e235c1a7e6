"""The emulated bucket: deterministic items, their built bytes held to the protocol's encoder, failover rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dcpctl.producer.store import DELETION, EXPIRATION, MUTATION, Bucket, Encoding, Manifest
from dcpctl.protocol.encode import encode
from dcpctl.protocol.message import DecodeOptions, decode

MANIFEST = Manifest(2, {0: (0, "_default"), 8: (0, "a"), 300: (9, "b")}, {0: "_default", 9: "s"})


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32), vbucket=st.integers(0, 7), seqno=st.integers(1, 10**9),
       value_size=st.integers(0, 300), collections=st.booleans(), delete_times=st.booleans(),
       expiry_opcode=st.booleans(), no_value=st.booleans(), opaque=st.integers(0, 2**32 - 1),
       stream_id=st.sampled_from([None, 1, 0xFFFF]))
def test_built_items_are_what_the_encoder_makes_of_their_records(
        seed: int, vbucket: int, seqno: int, value_size: int, collections: bool, delete_times: bool,
        expiry_opcode: bool, no_value: bool, opaque: int, stream_id: int | None) -> None:
    """Every item shape the store builds decodes cleanly and is what ``encode`` gives for its record."""
    bucket = Bucket("b", 8, 0, value_size, seed, MANIFEST)
    item = bucket.item(bucket.vbuckets[vbucket], seqno)
    encoding = Encoding(collections, delete_times, expiry_opcode, no_value)
    built = bucket.encode_item(item, encoding, opaque, stream_id)
    message = decode(built, 0, DecodeOptions(collections=collections))
    assert message.diagnostics == ()
    assert encode(message.record(), fix_lengths=True) == built
    assert (message.opaque, message.stream_id, message.by_seqno) == (opaque, stream_id, seqno)
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
