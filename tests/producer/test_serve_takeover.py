"""A takeover stream (reference 3.12) against a consumer that answers when it likes, with writes coming in at any
moment: whatever the order, the vbucket state waits for every marker answer, every item goes out once and in
seqno order inside its marker, the vbucket turns dead only on the pending state's answer, and the stream ends Ok
only on the active state's."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_serve_fidelity import ITEM_OPCODES, cluster, packet, records, request, session, upsert

STEPS = st.lists(st.sampled_from(["produce", "write", "answer"]), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
def test_any_interleaving_of_writes_and_answers_hands_the_vbucket_over_once(steps: list[str]) -> None:
    on = cluster()
    vb = on.bucket.vbuckets[0]
    conn = session(on=on)
    assert request(conn, flags=0x01) == "Success"  # TakeOver
    asked: list[dict[str, Any]] = []  # what the producer waits on, oldest first
    sent: list[dict[str, Any]] = []
    written = markers = answered = 0
    tail = ["answer", "produce"] * 100  # then a consumer that answers everything, until the stream ends
    for step in [*steps, "produce", *tail]:
        if sent and sent[-1]["opcode"] == "DCP_STREAM_END":
            break
        if step == "produce":
            for record in records(conn, conn.produce(1 << 20, 7)):
                sent.append(record)
                if record["opcode"] == "DCP_SNAPSHOT_MARKER" and record["snapshot_flags"] & 0x08:
                    markers += 1
                    asked.append(record)
                elif record["opcode"] == "DCP_SET_VBUCKET_STATE":
                    assert answered == markers  # it waited for every marker's answer
                    asked.append(record)
        elif step == "write" and vb.state == "active":
            assert upsert(on, f"k{written}")["status"] == "Success"
            written += 1
        elif step == "answer" and asked:
            record = asked.pop(0)
            answered += record["opcode"] == "DCP_SNAPSHOT_MARKER"
            conn.receive(packet(magic="ClientResponse", opcode=record["opcode"], opaque=record["opaque"],
                                status="Success"), 0)
    snapshot = (0, -1)
    seqnos = []
    states = []
    for record in sent:
        opcode = record["opcode"]
        if opcode == "DCP_SNAPSHOT_MARKER":
            snapshot = (record["snap_start_seqno"], record["snap_end_seqno"])
        elif opcode in ITEM_OPCODES:
            assert snapshot[0] <= record["by_seqno"] <= snapshot[1]
            seqnos.append(record["by_seqno"])
        elif opcode == "DCP_SET_VBUCKET_STATE":
            states.append(record["vbucket_state"])
    assert seqnos == sorted(set(seqnos))  # once each, in order
    assert states == [3, 1]  # pending, then active: each once
    assert sent[-1]["opcode"] == "DCP_STREAM_END"
    assert sent[-1]["stream_end_status"] == 0
    assert vb.state == "dead"
    assert written == 0 or f"k{written - 1}" in {r.get("key") for r in sent}  # the last write reached it
