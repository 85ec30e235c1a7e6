"""The rollback engine against the reference's vectors and the properties a negotiation must have."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcpctl.dcp.rollback import (
    IGNORE_PURGED_TOMBSTONES,
    STRICT_VB_UUID,
    FailoverEntry,
    StreamRequest,
    VbucketState,
    check_stream_request,
    high_seqno_shown,
    needs_rollback,
    negotiate,
    parse_failover_log,
)

HUMPTY = VbucketState((FailoverEntry(3333, 30), FailoverEntry(2222, 20), FailoverEntry(1111, 0)), high_seqno=100)
DISCUSSION = VbucketState((FailoverEntry(2222, 3), FailoverEntry(1111, 0)), high_seqno=10)


@pytest.mark.parametrize(("vb", "uuid", "snap", "start", "expected"), [
    # kv_engine humpty_dumpty sanity table (reference 9.1)
    (HUMPTY, 2222, (20, 30), 25, None),
    (HUMPTY, 2222, (45, 45), 45, 30),
    (HUMPTY, 5555, (10, 10), 10, 0),
    # docs/dcp/documentation/discussion.md (reference 9.1)
    (DISCUSSION, 1111, (1, 4), 3, 1),
    (DISCUSSION, 1111, (3, 3), 3, None),
], ids=["humpty_no_rollback", "humpty_upper_30", "humpty_uuid_not_found", "discussion_rollback_to_1",
        "discussion_wrong_snapshot"])
def test_reference_vectors(vb: VbucketState, uuid: int, snap: tuple[int, int], start: int,
                           expected: int | None) -> None:
    decision = needs_rollback(StreamRequest(start, uuid, *snap), vb)
    assert decision.rollback_seqno == expected
    assert decision.rollback is (expected is not None)


def test_start_zero_and_strict() -> None:
    assert not needs_rollback(StreamRequest(0, 9999), HUMPTY).rollback
    strict = needs_rollback(StreamRequest(0, 9999, flags=STRICT_VB_UUID), HUMPTY)
    assert (strict.rollback_seqno, strict.rule) == (0, "uuid_not_found")


def test_purge_rule() -> None:
    vb = VbucketState(HUMPTY.failover_log, high_seqno=100, purge_seqno=50)
    req = StreamRequest(40, 3333, 40, 40)
    assert needs_rollback(req, vb).rule == "purge_seqno"
    assert not needs_rollback(StreamRequest(40, 3333, 40, 40, purge_seqno=50), vb).rollback
    assert not needs_rollback(StreamRequest(40, 3333, 40, 40, flags=IGNORE_PURGED_TOMBSTONES), vb).rollback


def test_oldest_matching_uuid_wins() -> None:
    vb = VbucketState((FailoverEntry(7, 50), FailoverEntry(8, 20), FailoverEntry(7, 0)), high_seqno=80)
    decision = needs_rollback(StreamRequest(30, 7, 30, 30), vb)
    assert decision.rollback_seqno == 20  # the oldest 7's history ends where 8 begins


def test_erange_is_checked_before_rollback() -> None:
    answer = check_stream_request(StreamRequest(10, 5555, 20, 30), HUMPTY)
    assert (answer.status, answer.rule) == ("Erange", "snapshot_range")
    assert check_stream_request(StreamRequest(10, 5555, 10, 10), HUMPTY, stream_exists=True).status == "KeyEexists"
    ahead = check_stream_request(StreamRequest(200, 3333, 200, 200), HUMPTY)  # beyond the high seqno 100
    assert (ahead.status, ahead.rollback_seqno, ahead.rule) == ("Rollback", 100, "consumer_ahead")
    assert check_stream_request(StreamRequest(50, 3333, 50, 50, end_seqno=40), HUMPTY).status == "Erange"
    assert check_stream_request(StreamRequest(10, 3333), None).status == "NotMyVbucket"


def test_negotiation_converges_on_the_humpty_table() -> None:
    client = [FailoverEntry(4444, 40), *HUMPTY.failover_log]
    result = negotiate(StreamRequest(45, 4444, 45, 45), client, HUMPTY)
    statuses = [r.answer.status for r in result.rounds]
    assert statuses == ["Rollback", "Success"]
    assert result.rounds[0].answer.rollback_seqno == 0  # 4444 is unknown to the server
    assert result.result.request.start_seqno == 0


def test_parse_failover_log_forms() -> None:
    expected = [FailoverEntry(3, 30), FailoverEntry(1, 0)]
    assert parse_failover_log([{"vbucket_uuid": 3, "seqno": 30}, {"vbucket_uuid": 1, "seqno": 0}]) == expected
    assert parse_failover_log([[3, 30], ["0x1", "0"]]) == expected
    assert parse_failover_log({"failover_log": [[3, 30], [1, 0]]}) == expected
    assert parse_failover_log([{"vbucket": 5, "failover_log": [[3, 30], [1, 0]], "high_seqno": 31}]) == expected
    with pytest.raises(ValueError, match="entry 0"):
        parse_failover_log([{"uuid": 3}])


LOGS = st.lists(st.tuples(st.integers(1, 6), st.integers(0, 60)), min_size=1, max_size=5).map(
    lambda entries: tuple(FailoverEntry(u, s) for u, s in sorted(entries, key=lambda e: -e[1])))


@settings(max_examples=300, deadline=None)
@given(server_log=LOGS, client_log=LOGS, start=st.integers(0, 80), high=st.integers(60, 90))
def test_negotiation_properties(server_log: tuple[FailoverEntry, ...], client_log: tuple[FailoverEntry, ...],
                                start: int, high: int) -> None:
    vb = VbucketState(server_log, high_seqno=high)
    req = StreamRequest(start, client_log[0].vbucket_uuid, start, start)
    result = negotiate(req, list(client_log), vb)
    starts = [r.request.start_seqno for r in result.rounds]
    assert starts == sorted(starts, reverse=True), "rolling back never raises the start seqno"
    assert len(result.rounds) <= len(client_log) + 2, "converges within one round per failover entry"
    final = result.result
    assert final.answer.status in ("Success", "Erange")
    if final.answer.status == "Success":
        # the server accepted: the client's uuid is in the server's log and its history agrees up to start
        assert needs_rollback(final.request, vb).rollback is False


def test_a_rollback_storys_expected_uuid_is_known_only_from_the_clients_log() -> None:
    from dcpctl.dcp.session import RollbackStory  # noqa: PLC0415

    server_log = [FailoverEntry(3333, 30), FailoverEntry(2222, 20), FailoverEntry(1111, 0)]
    for client_log, uuid in (([FailoverEntry(2222, 20), FailoverEntry(1111, 0)], 2222), (None, None)):
        story = RollbackStory(12, StreamRequest(45, 2222), 30)
        story.settle(StreamRequest(30, 2222), server_log, client_log)
        assert story.to_json()["expected_retry"]["vbucket_uuid"] == uuid
        assert story.to_json()["expected_retry"]["start_seqno"] == 30


@pytest.mark.parametrize(("log", "asked", "rollback_seqno", "shown"), [
    ([FailoverEntry(7, 0)], (100, 100, 100), 10, 10),  # the newest history ends at the high seqno
    ([FailoverEntry(7, 0)], (95, 90, 100), 90, None),  # the snapshot start: the high seqno is anywhere up to 99
    ([FailoverEntry(7, 0)], (100, 100, 100), 0, None),  # 0: the purge rule's answer too
    ([FailoverEntry(8, 20), FailoverEntry(7, 0)], (100, 100, 100), 20, None),  # an older history ends at 20
    ([FailoverEntry(7, 20)], (100, 100, 100), 10, None),  # below its own entry: not the high seqno
])
def test_the_high_seqno_a_rollback_shows(log: list[FailoverEntry], asked: tuple[int, int, int],
                                          rollback_seqno: int, shown: int | None) -> None:
    start, snap_start, snap_end = asked
    assert high_seqno_shown(StreamRequest(start, 7, snap_start, snap_end), log, rollback_seqno) == shown


@given(high=st.integers(0, 50), start=st.integers(0, 60), below=st.integers(0, 10), above=st.integers(0, 10),
       entry=st.integers(0, 50))
def test_a_shown_high_seqno_is_the_servers(high: int, start: int, below: int, above: int, entry: int) -> None:
    """Whatever the server rolled back to, the high seqno read from it (when one is) is the one it had."""
    log = [FailoverEntry(7, min(entry, high))]
    req = StreamRequest(start, 7, max(0, start - below), start + above)
    decision = needs_rollback(req, VbucketState(tuple(log), high))
    if decision.rollback_seqno is not None:
        assert high_seqno_shown(req, log, decision.rollback_seqno) in (None, high)
