"""The sans-IO Consumer driven with bytes: against ``dcpctl serve``'s ProducerConnection in memory (no
sockets), and with packets from ``protocol.build``; the clock is the test's."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from dcpctl.client.connection import ClientError, StatusError
from dcpctl.client.consumer import (
    Consumer,
    Event,
    Notice,
    Progress,
    Reroute,
    RollbackAsked,
    RollbackRefusedError,
)
from dcpctl.client.state import State, VbucketPosition
from dcpctl.dcp.observed import Observed
from dcpctl.dcp.rollback import END_FOREVER, FailoverEntry
from dcpctl.dcp.sasl import plain_message
from dcpctl.exitcode import ExitCode
from dcpctl.producer.connection import Cluster, Node, ProducerConnection
from dcpctl.producer.store import Bucket
from dcpctl.protocol import build
from dcpctl.protocol.constants import DATATYPE_JSON, HELLO_FEATURES, DcpOpenFlag, Opcode, Status, StreamEndStatus
from dcpctl.protocol.framer import Frame, Framer
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.render.lines import ItemLines
from dcpctl.render.record import record as record_of

ITEMS = {"DCP_MUTATION", "DCP_DELETION", "DCP_EXPIRATION"}


def sent(data: bytes) -> list[Message]:
    """The packets a consumer queued for the server, decoded."""
    framer = Framer()
    framer.feed(data)
    out = []
    for event in framer.events():
        assert isinstance(event, Frame)
        out.append(decode(event.data, event.offset))
    return out


def bootstrapped(producer: ProducerConnection, window: int, controls: dict[str, str] | None = None) -> None:
    """What the streamer's Connection does before a Consumer takes over: HELLO, SASL, bucket, DCP_OPEN, controls."""
    requests = [
        build.request(Opcode.HELLO, opaque=1, key=b"t", features=[HELLO_FEATURES.code(f) for f in ("Xerror", "JSON")]),
        build.request(Opcode.SASL_AUTH, opaque=2, key=b"PLAIN", value=plain_message("Administrator", "password")),
        build.request(Opcode.SELECT_BUCKET, opaque=3, key=b"default"),
        build.request(Opcode.DCP_OPEN, opaque=4, key=b"t", seqno=0,
                      flags=DcpOpenFlag.PRODUCER | DcpOpenFlag.INCLUDE_DELETE_TIMES),
        *[build.request(Opcode.DCP_CONTROL, opaque=5 + i, key=k.encode(), value=v.encode()) for i, (k, v) in
          enumerate({"enable_noop": "true", "set_noop_interval": "1", "connection_buffer_size": str(window),
                     **(controls or {})}.items())],
    ]
    producer.receive(b"".join(requests), 0.0)
    replies = sent(producer.produce(1 << 20, 0))
    assert [r.status for r in replies] == [Status.SUCCESS] * len(requests)


@dataclass
class Pair:
    """A consumer and a producer connected in memory; ``pump`` moves the bytes both ways at the test's time."""

    producer: ProducerConnection
    consumer: Consumer
    now: float = 0.0
    to_server: list[bytes] = field(default_factory=list)  # every byte the consumer sent, in order
    events: list[Event] = field(default_factory=list)

    def pump(self, *, max_bytes: int = 1 << 20, max_items: int | None = None) -> list[Event]:
        self.now += 0.01
        self.producer.tick(self.now)
        self.consumer.feed(self.producer.produce(max_bytes, max_items), self.now)
        got = []
        for event in self.consumer.events():
            got.append(event)
            self.consumer.commit()  # written: its position counts
        self.flush()
        self.events += got
        return got

    def flush(self) -> None:
        data = self.consumer.data_to_send()
        self.to_server.append(data)
        self.producer.receive(data, self.now)

    def run(self, turns: int = 200, **limits: Any) -> None:
        for _ in range(turns):
            self.pump(**limits)
            if not self.consumer.active or self.consumer.progress.done:
                return

    def sent(self) -> list[Message]:
        return sent(b"".join(self.to_server))


def pair(*, items: int = 100, vbuckets: int = 2, window: int = 1 << 20, count: int | None = None,
         until: int | None = None, on_rollback: str = "follow", state: State | None = None,
         controls: dict[str, str] | None = None, **consumer: Any) -> Pair:
    bucket = Bucket("default", vbuckets, items, 20, 7)
    cluster = Cluster(bucket, [("127.0.0.1", 11210)], [0] * vbuckets, {"Administrator": "password"})
    producer = ProducerConnection(Node(0, cluster))
    bootstrapped(producer, window, controls)
    progress = Progress(state or State("default"), count)
    for vb in range(vbuckets):
        progress.state.vbuckets.setdefault(vb, VbucketPosition())
        if until is not None:
            progress.ends[vb] = until
    made = Consumer(progress, options=DecodeOptions(), label="memory", connection="a > b", buffer_size=window,
                    on_rollback=on_rollback, **consumer)
    for vb in range(vbuckets):
        made.request(vb, 0.0)
    link = Pair(producer, made)
    link.flush()
    return link


def packets(events: Iterable[Event]) -> Iterator[Message]:
    """The stream data's packets among the events, in order (lazily: events may be a generator)."""
    return (e.packet for e in events if isinstance(e, Observed))


def items_of(events: list[Event]) -> list[tuple[int, int]]:
    return [(m.vbucket, m.by_seqno or 0) for m in packets(events) if m.opcode_name in ITEMS]


# --- the stream --------------------------------------------------------------------------------------------
def test_a_stream_to_its_end_moves_every_position_and_counts_every_item() -> None:
    link = pair(items=100, vbuckets=2, until=50)
    link.run()
    assert not link.consumer.active
    assert sorted(items_of(link.events)) == [(vb, s) for vb in range(2) for s in range(1, 51)]
    assert link.consumer.progress.items == 100
    positions = link.consumer.progress.state.vbuckets
    assert {vb: p.seqno for vb, p in positions.items()} == {0: 50, 1: 50}
    # the stream request's answer brought the failover log, which the state keeps for a resume
    assert all(p.failover_log and p.vbucket_uuid == p.failover_log[0].vbucket_uuid for p in positions.values())
    ends = [m for m in packets(link.events) if m.opcode_name == "DCP_STREAM_END"]
    assert len(ends) == 2
    record = record_of(next(e for e in link.events
                            if isinstance(e, Observed) and e.packet.opcode_name == "DCP_MUTATION"))
    assert (record["ts"], record["connection"], record["direction"]) == (0.01, "a > b", "server>client")


def test_v2_0_markers_of_a_sync_replication_stream_move_positions_as_v1_ones_do() -> None:
    link = pair(items=10, vbuckets=1, until=14, controls={"enable_sync_writes": "true", "consumer_name": "c"})
    bucket = link.producer.node.cluster.bucket
    vb = bucket.vbuckets[0]
    for n in (1, 2):  # each a prepare then its commit: seqnos 11 to 14
        bucket.write(vb, 0, b"durable", b'{"n":%d}' % n, DATATYPE_JSON, 0, 0, bucket.document(vb, 0, b"durable"),
                     durability_level=1)
    link.run()
    assert not link.consumer.active
    markers = [m for m in packets(link.events) if m.opcode == Opcode.DCP_SNAPSHOT_MARKER]
    assert [(m.field("marker_version"), m.field("max_visible_seqno"), m.field("high_completed_seqno"))
            for m in markers] == [(0, 14, 13)]
    position = link.consumer.progress.state.vbuckets[0]
    assert (position.seqno, position.snap_start_seqno, position.snap_end_seqno) == (14, 0, 14)


def test_a_position_moves_only_once_the_caller_says_the_item_is_written() -> None:
    link = pair(items=10, vbuckets=1, until=10)
    link.consumer.feed(link.producer.produce(1 << 20), 1.0)
    events = link.consumer.events()
    first = next(m for m in packets(events) if m.opcode_name in ITEMS)
    position = link.consumer.progress.state.vbuckets[0]
    assert first.by_seqno == 1
    assert position.seqno == 0  # handed out, not yet written: a stop now resumes from before it
    link.consumer.commit()
    assert position.seqno == 1


def test_buffer_acks_are_sent_each_time_half_the_window_is_used() -> None:
    window = 4000
    link = pair(items=400, vbuckets=2, window=window, until=200)
    link.run(turns=2000)
    assert not link.consumer.active
    acks = [m for m in link.sent() if m.opcode == Opcode.DCP_BUFFER_ACKNOWLEDGEMENT]
    received = sum(len(m.raw) for m in packets(link.events) if m.opcode_name not in ("DCP_NOOP",) and not m.is_response)
    acked = [int(m.field("bytes_to_ack")) for m in acks]
    assert acks, "a stream of several windows needs acks"
    assert all(window // 2 <= n < window // 2 + 200 for n in acked)  # at half, overshot by one message at most
    assert sum(acked) <= received < sum(acked) + window // 2
    assert len(items_of(link.events)) == 400  # the window never closed for good


def test_noops_are_answered_with_their_opaque() -> None:
    link = pair(items=0, vbuckets=1)  # nothing to stream: an open stream that only hears noops
    link.pump()
    link.now += 2.0  # past set_noop_interval 1
    link.pump(max_items=0)
    noops = [m for m in packets(link.events) if m.opcode_name == "DCP_NOOP"]
    assert not noops  # noops are the connection's business, never handed out
    answers = [m for m in link.sent() if m.opcode == Opcode.DCP_NOOP]
    assert len(answers) == 1
    assert answers[0].is_response
    assert answers[0].opaque == link.producer.noop_opaque
    assert not link.producer.noop_outstanding  # the server took the answer


@pytest.mark.parametrize("path", ["usual", "quiet", "lines"])
def test_count_stops_exactly_on_every_path(path: str) -> None:
    lines = _Lines() if path == "lines" else None
    link = pair(items=1000, vbuckets=4, count=137, quiet=path == "quiet", lines=lines)
    link.run()
    progress = link.consumer.progress
    assert progress.done
    assert progress.items == 137
    assert sum(p.seqno for p in progress.state.vbuckets.values()) == 137  # positions: exactly what was counted
    assert sum(s["items"] for s in progress.stats.values()) == 137
    if path == "usual":
        assert len(items_of(link.events)) == 137
    if path == "lines":
        written = b"".join(e for e in link.events if isinstance(e, bytes))
        assert written.count(b"\n") + len(items_of(link.events)) == 137


def test_the_three_paths_agree_on_positions_acks_and_counts() -> None:
    finals = []
    for quiet, lines in ((False, None), (True, None), (False, _Lines())):
        link = pair(items=600, vbuckets=3, window=3000, until=200, quiet=quiet, lines=lines)
        link.run(turns=5000)
        assert not link.consumer.active
        progress = link.consumer.progress
        acked = sum(int(m.field("bytes_to_ack")) for m in link.sent() if m.opcode == Opcode.DCP_BUFFER_ACKNOWLEDGEMENT)
        finals.append(({vb: p.seqno for vb, p in progress.state.vbuckets.items()}, progress.items,
                       {vb: (s["items"], s["first_seqno"], s["last_seqno"]) for vb, s in progress.stats.items()},
                       acked > 0))
    assert finals[0] == finals[1] == finals[2]
    assert finals[0][1] == 600


def test_an_item_the_lines_path_declines_goes_the_usual_way_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Binary documents (their record shows the value as hex) on the lines path: each goes the usual way
    as the message the plain reader read, never decoded again, and the output is the usual path's."""
    import dcpctl.client.consumer as consumer_module  # noqa: PLC0415

    def streamed(lines: _Lines | None) -> tuple[list[dict[str, Any]], list[bytes]]:
        link = pair(items=0, vbuckets=1, until=30, lines=lines)
        bucket = link.producer.node.cluster.bucket
        vb = bucket.vbuckets[0]
        for i in range(30):  # binary and text values, in runs
            value = bytes([0, 0xFF, i]) if i % 10 < 6 else b"text %d" % i
            bucket.write(vb, 0, b"doc-%d" % i, value, 0, 0, 0, None)
        link.run()
        records = []
        for m in link.events:
            if isinstance(m, Observed) and m.packet.opcode_name in ITEMS:
                record = record_of(m)
                records.append({k: v for k, v in record.items() if k not in ("ts", "offset", "cas")})  # the clock's
        return records, [e for e in link.events if isinstance(e, bytes)]

    usual, _ = streamed(None)
    decoded: list[int] = []
    real = consumer_module.decode
    monkeypatch.setattr(consumer_module, "decode", lambda raw, *a, **k: decoded.append(raw[1]) or real(raw, *a, **k))
    fast, lines = streamed(_Lines())
    assert len(usual) == 30
    binary = [r for r in usual if r.get("value_encoding") == "hex"]
    assert len(binary) == 18
    assert [r for r in fast if r.get("value_encoding") == "hex"] == binary  # the usual way's, record for record
    assert b"".join(lines).count(b"\n") + len(fast) == 30  # the text ones written as lines
    assert Opcode.DCP_MUTATION not in decoded  # every item read once, by the plain reader


class _Lines:
    """A LineMaker as commands/stream.py's: the record's templates filled from the plain reader's messages."""

    def lines(self, connection: str) -> ItemLines:
        return ItemLines({"ts": None, "connection": connection, "direction": "server>client"}, ("ts",))

    def lead(self, ts: float) -> tuple[bytes, ...]:
        return (repr(ts).encode(),)


# --- rollbacks -------------------------------------------------------------------------------------------
def rolled(on_rollback: str) -> tuple[Pair, FailoverEntry, list[Event]]:
    """A vbucket read to 80, failed over at 60 with 20 new items: asked again from 80, the server says roll
    back to 60."""
    link = pair(items=100, vbuckets=1, until=80, on_rollback=on_rollback)
    link.run()
    assert link.consumer.progress.state.vbuckets[0].seqno == 80
    bucket = link.producer.node.cluster.bucket
    vb = bucket.vbuckets[0]
    entry = bucket.failover(vb, 60)
    bucket.mutate(vb, 20)
    link.consumer.progress.ends[0] = END_FOREVER
    link.consumer.request(0, link.now)
    link.flush()
    return link, entry, link.pump(max_items=0)


def test_a_rollback_asks_for_its_explanation_then_follows_from_the_failover_log() -> None:
    link, entry, events = rolled("follow")
    assert RollbackAsked(0, 60) in events
    vb = link.producer.node.cluster.bucket.vbuckets[0]
    told = link.consumer.rollback(0, 60, list(vb.failover_log), vb.high_seqno, link.now)
    assert "roll back from 80" in told.text
    assert "to 60" in told.text
    assert "[consumer_ahead]" in told.text
    retry = sent(link.consumer.data_to_send())
    assert [m.opcode for m in retry] == [Opcode.DCP_STREAM_REQ]
    # from the rollback seqno, with the uuid of the history the consumer and the server share
    old_uuid = next(e.vbucket_uuid for e in link.consumer.progress.state.vbuckets[0].failover_log)
    assert retry[0].field("start_seqno") == 60
    assert retry[0].field("vbucket_uuid") == old_uuid != entry.vbucket_uuid
    assert (retry[0].field("snap_start_seqno"), retry[0].field("snap_end_seqno")) == (60, 60)
    link.producer.receive(b"".join(m.raw for m in retry), link.now)
    link.consumer.progress.ends[0] = 80
    link.run()
    assert items_of(link.events)[-20:] == [(0, s) for s in range(61, 81)]


def test_a_rollback_with_fail_is_an_error_that_leaves_the_position() -> None:
    link, _, events = rolled("fail")
    assert RollbackAsked(0, 60) in events
    with pytest.raises(RollbackRefusedError) as raised:
        link.consumer.rollback(0, 60, [], None, link.now)
    assert raised.value.code == ExitCode.ROLLBACK
    assert "to 60" in raised.value.story
    assert link.consumer.progress.state.vbuckets[0].seqno == 80
    assert not link.consumer.data_to_send()


def test_a_rollback_with_report_tells_and_leaves_the_vbucket_out() -> None:
    link, _, _ = rolled("report")
    told = link.consumer.rollback(0, 60, [], None, link.now)
    assert isinstance(told, Notice)
    assert "Not following it (--on-rollback report)" in told.text
    assert "failover log alone" not in told.text  # nothing to explain it with: no made-up reason
    assert not link.consumer.data_to_send()
    assert not link.consumer.active
    assert link.consumer.progress.state.vbuckets[0].seqno == 80


# --- stream ends and other answers, from packets built by hand ----------------------------------------------
def one_stream(vbucket: int = 3) -> tuple[Consumer, int]:
    progress = Progress(State("default"))
    progress.state.vbuckets[vbucket] = VbucketPosition(seqno=5)
    consumer = Consumer(progress, options=DecodeOptions(), buffer_size=1 << 20)
    stream = consumer.request(vbucket, 0.0)
    [asked] = sent(consumer.data_to_send())
    assert (asked.opcode, asked.vbucket, asked.field("start_seqno")) == (Opcode.DCP_STREAM_REQ, vbucket, 5)
    return consumer, stream.opaque


def opened_stream(vbucket: int = 3) -> tuple[Consumer, int]:
    """:func:`one_stream`, its request answered Success: a server answers before it sends the stream's messages."""
    consumer, opaque = one_stream(vbucket)
    drained(consumer, build.response(Opcode.DCP_STREAM_REQ, opaque=opaque, value=b""))
    return consumer, opaque


def drained(consumer: Consumer, data: bytes, now: float = 1.0) -> list[Event]:
    consumer.feed(data, now)
    out = []
    for event in consumer.events():
        out.append(event)
        consumer.commit()
    return out


@pytest.mark.parametrize(("status", "asked_again"), [
    (StreamEndStatus.OK, False), (StreamEndStatus.STATE_CHANGED, True), (StreamEndStatus.SLOW, True),
    (StreamEndStatus.FILTER_EMPTY, False)])
def test_a_stream_end_ends_or_reroutes_by_its_status(status: int, asked_again: bool) -> None:
    consumer, opaque = one_stream()
    events = drained(consumer, build.response(Opcode.DCP_STREAM_REQ, opaque=opaque, value=b"")
                     + build.request(Opcode.DCP_STREAM_END, opaque=opaque, vbucket=3, stream_end_status=status))
    assert not consumer.active
    assert (Reroute(3) in events) is asked_again
    assert any(m.opcode_name == "DCP_STREAM_END" for m in packets(events))


def test_a_stream_end_for_lost_privileges_stops_with_exit_7() -> None:
    consumer, opaque = opened_stream()
    with pytest.raises(ClientError) as raised:
        drained(consumer, build.request(Opcode.DCP_STREAM_END, opaque=opaque, vbucket=3,
                                        stream_end_status=StreamEndStatus.LOST_PRIVILEGES))
    assert raised.value.code == ExitCode.AUTH


def test_not_my_vbucket_asks_the_topology_and_other_refusals_are_errors() -> None:
    consumer, opaque = one_stream()
    events = drained(consumer, build.response(Opcode.DCP_STREAM_REQ, status=Status.NOT_MY_VBUCKET, opaque=opaque))
    assert events[-1] == Reroute(3)
    assert "NotMyVbucket" in next(e.text for e in events if isinstance(e, Notice))
    consumer, opaque = one_stream()
    with pytest.raises(StatusError):
        drained(consumer, build.response(Opcode.DCP_STREAM_REQ, status=Status.EACCESS, opaque=opaque))


def test_a_marker_sets_the_snapshot_a_resume_asks_with() -> None:
    consumer, opaque = opened_stream()
    drained(consumer, build.request(Opcode.DCP_SNAPSHOT_MARKER, opaque=opaque, vbucket=3, snap_start_seqno=6,
                                    snap_end_seqno=9, snapshot_flags=1))
    position = consumer.progress.state.vbuckets[3]
    assert (position.snap_start_seqno, position.snap_end_seqno) == (6, 9)
    assert position.resume_snapshot() == (5, 5)  # 5 is below the snapshot: a resume asks from (5, 5)


def test_an_unanswered_request_is_overdue_by_the_callers_clock() -> None:
    consumer, _ = one_stream()
    assert consumer.overdue(5.0, 10.0) is None
    late = consumer.overdue(10.5, 10.0)
    assert late is not None
    assert late.vbucket == 3


def test_close_asks_to_close_the_open_streams_only() -> None:
    consumer, opaque = one_stream()
    drained(consumer, build.response(Opcode.DCP_STREAM_REQ, opaque=opaque, value=b""))
    consumer.close_streams()
    [closing] = sent(consumer.data_to_send())
    assert (closing.opcode, closing.vbucket) == (Opcode.DCP_CLOSE_STREAM, 3)


def test_a_whole_item_longer_than_the_limit_is_a_protocol_error_on_the_lines_path() -> None:
    """The lines path leaves an item over the body limit to the usual path, which says what is wrong."""
    progress = Progress(State("default"))
    progress.state.vbuckets[3] = VbucketPosition(seqno=5)
    consumer = Consumer(progress, options=DecodeOptions(), buffer_size=1 << 20, framer=Framer(max_body_length=64),
                        lines=_Lines())
    stream = consumer.request(3, 0.0)
    sent(consumer.data_to_send())
    drained(consumer, build.response(Opcode.DCP_STREAM_REQ, opaque=stream.opaque, value=b""))
    items = [build.request(Opcode.DCP_MUTATION, opaque=stream.opaque, vbucket=3, key=b"k", value=b"v" * length,
                           by_seqno=seqno, rev_seqno=1, flags=0, expiration=0, lock_time=0, nmeta=0, nru=0)
             for seqno, length in ((6, 32), (7, 32), (8, 33))]
    assert [len(item) - 24 for item in items] == [64, 64, 65]  # the limit is on the body
    marker = build.request(Opcode.DCP_SNAPSHOT_MARKER, opaque=stream.opaque, vbucket=3, snap_start_seqno=6,
                           snap_end_seqno=8, snapshot_flags=1)
    events = drained(consumer, marker + items[0] + items[1])
    assert [type(e) for e in events] == [Observed, bytes]  # the marker, then the items' lines
    assert events[1].count(b"\n") == 2
    longer = items[2]
    with pytest.raises(ClientError) as raised:
        drained(consumer, longer)
    assert raised.value.code == ExitCode.PROTOCOL


@pytest.mark.parametrize("quiet", [False, True])
def test_a_body_longer_than_the_limit_is_a_protocol_error_not_a_wait(quiet: bool) -> None:
    consumer, opaque = one_stream()
    consumer.quiet = quiet
    header = bytearray(build.request(Opcode.DCP_MUTATION, opaque=opaque, vbucket=3, key=b"k", value=b"v",
                                     by_seqno=6, rev_seqno=1, flags=0, expiration=0, lock_time=0, nmeta=0,
                                     nru=0)[:24])
    header[8:12] = (consumer.framer.max_body_length + 1).to_bytes(4, "big")  # total_body_length
    with pytest.raises(ClientError) as raised:
        drained(consumer, bytes(header) + b"x" * 100)
    assert raised.value.code == ExitCode.PROTOCOL
