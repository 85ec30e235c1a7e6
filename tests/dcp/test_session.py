"""The connection tracker on the bundled session: negotiation, latency, streams, rollback, checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dcpctl.dcp.session import ConnectionTracker
from dcpctl.protocol.encode import encode
from dcpctl.protocol.framer import Frame, Framer
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.render.record import record as record_of

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "dcp-session.bin"
SERVER_PUSHED = {"DCP_SNAPSHOT_MARKER", "DCP_MUTATION", "DCP_DELETION", "DCP_STREAM_END"}


def replay(data: bytes, tracker: ConnectionTracker) -> list[tuple[Message, Any]]:
    framer = Framer()
    framer.feed(data)
    out = []
    ts = 100.0
    for frame in framer.events():
        assert isinstance(frame, Frame)
        msg = decode(frame.data, frame.offset, tracker.options())
        response = msg.is_response
        pushed = msg.opcode_name in SERVER_PUSHED or (msg.opcode_name == "DCP_NOOP" and not response)
        from_client = (not response and not pushed) or (response and msg.opcode_name == "DCP_NOOP")
        ts += 0.001
        out.append((msg, tracker.observe(msg, from_client, ts)))
    return out


def names(note: Any) -> list[str]:
    return [d.name for d in note.diagnostics]


def test_negotiation_turns_on_collections_for_later_messages() -> None:
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    results = replay(SAMPLE.read_bytes(), tracker)
    assert tracker.collections is True
    assert tracker.buffer_size == 1048576
    mutation = next(m for m, _ in results if m.opcode_name == "DCP_MUTATION")
    assert record_of(mutation)["collection_id"] == 8
    assert record_of(mutation)["key"] == "airline_10"


def test_responses_carry_latency_and_the_rollback_story() -> None:
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    results = replay(SAMPLE.read_bytes(), tracker)
    hello_response = results[1][1]
    assert hello_response.fields["latency_ms"] == 1.0
    rollback = [note for msg, note in results if "rollback" in names(note)]
    assert len(rollback) == 2  # the Rollback answer, then the successful retry
    assert "roll back to 200" in rollback[0].diagnostics[0].message
    assert "after rolling back to 200" in rollback[1].diagnostics[0].message
    end = next(note for msg, note in results if msg.opcode_name == "DCP_STREAM_END")
    assert "Ok" in end.diagnostics[0].message
    assert "3 items" in end.diagnostics[0].message


def test_clean_stream_has_no_seqno_findings() -> None:
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    for _, note in replay(SAMPLE.read_bytes(), tracker):
        assert not {"seqno_outside_snapshot", "seqno_backwards", "item_before_marker"} & set(names(note))


def test_capture_started_midstream_says_collections_are_unknown() -> None:
    data = SAMPLE.read_bytes()
    start = data.index(bytes.fromhex("8057"))  # first mutation: HELLO and the stream request were missed
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=False)
    results = replay(data[start:], tracker)
    assert tracker.collections is None
    assert "collections_unknown" in names(results[0][1])
    assert "collection_id" not in record_of(results[0][0])


def test_seqno_checks_fire() -> None:
    data = bytearray(SAMPLE.read_bytes())
    # make the second mutation's by_seqno 150: outside the snapshot 200-203 and backwards
    second = data.index(bytes.fromhex("8057"), data.index(bytes.fromhex("8057")) + 1)
    data[second + 24:second + 32] = (150).to_bytes(8, "big")
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    found = [n for _, note in replay(bytes(data), tracker) for n in names(note)]
    assert "seqno_outside_snapshot" in found
    assert "seqno_backwards" in found


def test_flow_control_overrun_is_reported() -> None:
    data = SAMPLE.read_bytes().replace(b"1048576", b"0000100")
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    found = [n for _, note in replay(data, tracker) for n in names(note)]
    assert tracker.buffer_size == 100
    assert "flow_control_exceeded" in found


def test_an_item_for_a_vbucket_never_requested_is_reported_once() -> None:
    """Seen from its start, a connection whose producer pushes on an opaque no stream request opened: said
    once per opaque (it was silent); a capture that began later cannot know, and says nothing."""
    data = bytearray(SAMPLE.read_bytes())
    first = data.index(bytes.fromhex("8057"))
    for start in (first, data.index(bytes.fromhex("8057"), first + 1)):
        data[start + 12:start + 16] = (0xBEEF).to_bytes(4, "big")  # the mutations' opaque: no stream's
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    found = [(m.opcode_name, n) for m, note in replay(bytes(data), tracker) for n in names(note)]
    assert found.count(("DCP_MUTATION", "no_stream")) == 1
    item = decode(bytes(data[first:first + 24 + int.from_bytes(data[first + 8:first + 12], "big")]), first,
                  DecodeOptions())
    assert tracker.plain_item(item) == (True, None)  # said once: the fast path takes the rest
    assert ConnectionTracker(DecodeOptions(), known_from_start=True).plain_item(item) == (False, None)
    late = ConnectionTracker(DecodeOptions(), known_from_start=False)
    assert "no_stream" not in [n for _, note in replay(bytes(data[first:]), late) for n in names(note)]


def test_the_tracker_reads_the_replies_typed() -> None:
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    results = replay(SAMPLE.read_bytes(), tracker)
    assert tracker.features
    assert tracker.failover_logs
    assert tracker.stories
    assert results


def _stream_opened(value: str, opaque: int) -> Any:
    tracker = ConnectionTracker(DecodeOptions(collections=True), known_from_start=True)
    request = encode({"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": 3, "opaque": opaque,
                      "flags": 0, "reserved": 0, "start_seqno": 0, "end_seqno": 9, "vbucket_uuid": 0,
                      "snap_start_seqno": 0, "snap_end_seqno": 0, "value": value}, fix_lengths=True)
    reply = encode({"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Success", "opaque": opaque,
                    "failover_log": [{"vbucket_uuid": 1, "seqno": 0}]}, fix_lengths=True)
    tracker.observe(decode(request, 0, tracker.options()), True, 1.0)
    tracker.observe(decode(reply, len(request), tracker.options()), False, 1.5)
    return tracker.streams_by_opaque[opaque]


def test_stream_id_is_the_stream_request_value_as_the_server_reads_it() -> None:
    assert _stream_opened('{"sid":4}', 1).stream_id == 4
    # not a byte search for "sid": a string, a number above u16, or "sid" inside another key's text is no id
    assert _stream_opened('{"sid":"5"}', 2).stream_id is None
    assert _stream_opened('{"sid":70000}', 3).stream_id is None
    assert _stream_opened('{"collections":["8"],"note":"\\"sid\\":6"}', 4).stream_id is None
    assert _stream_opened('{"sid":4}', 5).failover_log[0].vbucket_uuid == 1


def _vbucket_state_on(flags: int) -> list[tuple[str, str]]:
    """What the tracker says of a DCP_SET_VBUCKET_STATE pending, then a STREAM_END Ok, on a stream opened with
    these stream-request flags."""
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    packets = [({"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": 3, "opaque": 7, "flags": flags,
                 "reserved": 0, "start_seqno": 0, "end_seqno": 9, "vbucket_uuid": 0, "snap_start_seqno": 0,
                 "snap_end_seqno": 0}, True),
               ({"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Success", "opaque": 7,
                 "failover_log": [{"vbucket_uuid": 1, "seqno": 0}]}, False),
               ({"magic": "ClientRequest", "opcode": "DCP_SET_VBUCKET_STATE", "vbucket": 3, "opaque": 7,
                 "vbucket_state": 3}, False),
               ({"magic": "ClientRequest", "opcode": "DCP_STREAM_END", "vbucket": 3, "opaque": 7,
                 "stream_end_status": 0}, False)]
    said = []
    for record, from_client in packets:
        note = tracker.observe(decode(encode(record, fix_lengths=True), 0, tracker.options()), from_client, 1.0)
        said += [(d.name, d.message) for d in note.diagnostics]
    return said


def test_a_vbucket_state_is_a_takeover_step_only_on_a_takeover_stream() -> None:
    takeover = _vbucket_state_on(0x01)
    assert [name for name, _ in takeover] == ["takeover", "stream_end"]
    assert "become pending" in takeover[0][1]
    assert "takeover complete" in takeover[1][1]
    plain = _vbucket_state_on(0)
    assert [name for name, _ in plain] == ["set_vbucket_state_without_takeover", "stream_end"]
    assert "reached the end seqno" in plain[1][1]


def test_takeover_steps_left_unanswered_are_listed_until_answered() -> None:
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
    packets = [({"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": 3, "opaque": 7, "flags": 1,
                 "reserved": 0, "start_seqno": 0, "end_seqno": 9, "vbucket_uuid": 0, "snap_start_seqno": 0,
                 "snap_end_seqno": 0}, True),
               ({"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Success", "opaque": 7,
                 "failover_log": [{"vbucket_uuid": 1, "seqno": 0}]}, False),
               ({"magic": "ClientRequest", "opcode": "DCP_SNAPSHOT_MARKER", "vbucket": 3, "opaque": 7,
                 "snap_start_seqno": 1, "snap_end_seqno": 2, "snapshot_flags": 0x0D}, False)]
    for record, from_client in packets:
        tracker.observe(decode(encode(record, fix_lengths=True), 0, tracker.options()), from_client, 1.0)
    assert [(vb, what) for vb, what, _ in tracker.unanswered_takeover_steps()] == [
        (3, "snapshot marker flagged Acknowledge")]
    answer = {"magic": "ClientResponse", "opcode": "DCP_SNAPSHOT_MARKER", "status": "Success", "opaque": 7}
    tracker.observe(decode(encode(answer, fix_lengths=True), 0, tracker.options()), True, 1.5)
    assert tracker.unanswered_takeover_steps() == []


def _oso_stream(seqnos_inside: list[int | None], *, end: bool, after: tuple[int, ...] = (10, 11)) -> list[
        tuple[str, list[str], str]]:
    """A stream whose backfill is an OSO snapshot (reference 3.19: its items in key order, no marker; None
    among them: its start marker again), then, when ``end``, its end marker, an in-memory snapshot 5-11 with
    the items ``after``, and a stream end: (opcode, diagnostics, text) of each message."""
    tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)

    def pushed(record: dict[str, Any]) -> dict[str, Any]:
        return {"magic": "ClientRequest", "vbucket": 3, "opaque": 7, **record}

    def item(seqno: int) -> dict[str, Any]:
        return pushed({"opcode": "DCP_MUTATION", "by_seqno": seqno, "rev_seqno": 1, "flags": 0, "expiration": 0,
                       "lock_time": 0, "nmeta": 0, "nru": 0, "key": f"k{seqno}", "value": "v", "cas": 1})

    packets = [({"magic": "ClientRequest", "opcode": "DCP_STREAM_REQ", "vbucket": 3, "opaque": 7, "flags": 0,
                 "reserved": 0, "start_seqno": 0, "end_seqno": 2**64 - 1, "vbucket_uuid": 0, "snap_start_seqno": 0,
                 "snap_end_seqno": 0}, True),
               ({"magic": "ClientResponse", "opcode": "DCP_STREAM_REQ", "status": "Success", "opaque": 7,
                 "failover_log": [{"vbucket_uuid": 1, "seqno": 0}]}, False),
               (pushed({"opcode": "DCP_OSO_SNAPSHOT", "oso_flags": 1}), False),
               *[(item(seqno) if seqno is not None else pushed({"opcode": "DCP_OSO_SNAPSHOT", "oso_flags": 1}),
                  False) for seqno in seqnos_inside]]
    if end:
        packets += [(pushed({"opcode": "DCP_OSO_SNAPSHOT", "oso_flags": 2}), False),
                    (pushed({"opcode": "DCP_SNAPSHOT_MARKER", "snap_start_seqno": 5, "snap_end_seqno": 11,
                             "snapshot_flags": 1}), False),
                    *[(item(seqno), False) for seqno in after]]
    packets.append((pushed({"opcode": "DCP_STREAM_END", "stream_end_status": 0}), False))
    said = []
    for record, from_client in packets:
        msg = decode(encode(record, fix_lengths=True), 0, tracker.options())
        note = tracker.observe(msg, from_client, 1.0)
        said.append((msg.opcode_name, names(note), " ".join(d.message for d in note.diagnostics)))
    return said


def test_the_items_of_an_oso_snapshot_come_in_key_order_without_a_marker() -> None:
    """They were each item_before_marker and, going down, seqno_backwards: errors of a correct backfill."""
    said = _oso_stream([7, 2, 9, 4], end=True)
    assert [names for opcode, names, _ in said if opcode == "DCP_MUTATION"] == [[]] * 6
    assert said[-1][2].endswith("after 6 items, last seqno 11")


def test_after_an_oso_snapshot_its_highest_seqno_is_the_last_and_order_is_checked_again() -> None:
    said = _oso_stream([7, 2, 9, 4], end=True, after=(8,))  # 8 is inside its marker, but below the OSO's 9
    assert said[-2][:2] == ("DCP_MUTATION", ["seqno_backwards"])
    assert "seqno 8 after 9" in said[-2][2]
    cut = _oso_stream([7, 2, 9, 4], end=False)  # ended inside: no last seqno (the resume point is before it)
    assert cut[-1][2].endswith("after 4 items")


def test_a_second_oso_start_is_the_same_bracket() -> None:
    """It reset the highest seqno to the one before the bracket: 6 after 7 read as in order."""
    said = _oso_stream([7, None, 2], end=True, after=(6,))
    assert said[-2][:2] == ("DCP_MUTATION", ["seqno_backwards"])
    assert "seqno 6 after 7" in said[-2][2]
