"""Manifests applied one after another while a vbucket grows (serve's scenario ``manifest``), against the rules a
data node's history keeps, for any sequence of changes: what was at a seqno stays there, a stream from zero
never sends what a dropped collection had, every collection's creation comes before its items, and a stream
filtered to a collection ends FilterEmpty exactly when that collection is dropped."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_serve_fidelity import cluster, drain, request, session

from dcpctl.producer.store import Bucket, Manifest

FIRST = Manifest(5, {0: (0, "_default"), 9: (8, "airline"), 10: (8, "hotel")}, {0: "_default", 8: "inventory"})
ITEM_OPCODES = frozenset({"DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION"})


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[Manifest, int]]:
    """Up to four manifests after FIRST, each with the items written after it: collections dropped (the
    default one too) and created in existing or new scopes, scopes dropped with their collections."""
    fresh = itertools.count(11)
    current, out = FIRST, []
    for uid in range(6, 6 + draw(st.integers(1, 4))):
        collections = {c: e for c, e in current.collections.items() if not draw(st.booleans())}
        scopes = dict(current.scopes)
        if draw(st.booleans()):
            scopes[next(fresh) + 100] = f"scope{uid}"
        for _ in range(draw(st.integers(0, 2))):
            collections[next(fresh)] = (draw(st.sampled_from(sorted(scopes))), f"c{uid}")
        if len(scopes) > 1 and draw(st.booleans()):
            gone = draw(st.sampled_from(sorted(s for s in scopes if s != 0)))
            del scopes[gone]
            collections = {c: e for c, e in collections.items() if e[0] != gone}
        if not collections:  # a manifest file has at least one (manifestfile.read refuses one without)
            collections[next(fresh)] = (0, f"c{uid}")
        current = Manifest(uid, collections, scopes)
        out.append((current, draw(st.integers(0, 40))))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_any_sequence_of_manifests_keeps_a_nodes_history(history: list[tuple[Manifest, int]]) -> None:
    on = cluster(Bucket("default", 1, 40, 20, 7, FIRST))
    bucket = on.bucket
    vb = bucket.vbuckets[0]
    airline = session("Collections", on=on, name="airline")
    assert request(airline, value='{"collections":["9"]}') == "Success"
    airline_seen = drain(airline)
    before = {seqno: bucket.item(vb, seqno) for seqno in range(1, vb.high_seqno + 1)}
    for manifest, writes in history:
        bucket.apply_manifest(manifest)
        bucket.mutate(vb, writes)
        airline_seen += drain(airline)
        before |= {seqno: bucket.item(vb, seqno) for seqno in range(1, vb.high_seqno + 1) if seqno not in before}
    assert all(bucket.item(vb, seqno) == item for seqno, item in before.items())  # nothing moved
    final = history[-1][0]
    _backfill_keeps_the_rules(on, final, "later")
    ended = [r for r in airline_seen if r["opcode"] == "DCP_STREAM_END"]
    dropped = 9 not in final.collections
    assert [r["stream_end_status"] for r in ended] == ([7] if dropped else [])
    assert {r["collection_id"] for r in airline_seen if r["opcode"] in ITEM_OPCODES} <= {9}


def _backfill_keeps_the_rules(on: Any, final: Manifest, name: str) -> list[dict[str, Any]]:
    conn = session("Collections", on=on, name=name)
    assert request(conn) == "Success"
    got = drain(conn)
    seqnos = [r["by_seqno"] for r in got if "by_seqno" in r]
    assert seqnos == sorted(set(seqnos))
    begun = {0} if 0 in final.collections else set()
    for r in got:
        if r["opcode"] == "DCP_SYSTEM_EVENT" and r["event_id"] == 0:
            begun.add(r["collection_id"])
        elif r["opcode"] in ITEM_OPCODES:
            assert r["collection_id"] in final.collections  # nothing a dropped collection had
            assert r["collection_id"] in begun  # its creation first
    assert begun == set(final.collections)  # every collection there is was begun, none that was dropped
    return got


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.lists(st.floats(0, 1), min_size=4, max_size=4))
def test_failovers_between_manifests_bring_the_new_active_up_to_the_bucket(
        history: list[tuple[Manifest, int]], where: list[float]) -> None:
    """A failover anywhere (inside a change's events it takes none of them) leaves the vbucket at the bucket's
    manifest once promoted, and its history, streamed from zero, keeps the rules."""
    on = cluster(Bucket("default", 1, 40, 20, 7, FIRST))
    bucket = on.bucket
    vb = bucket.vbuckets[0]
    for (manifest, writes), fraction in zip(history, where, strict=False):
        bucket.apply_manifest(manifest)
        bucket.mutate(vb, writes)
        bucket.failover(vb, int(vb.high_seqno * fraction))
        assert bucket.manifest_of(vb) == bucket.manifest
    _backfill_keeps_the_rules(on, history[-1][0], "later")
