"""Per-connection DCP state across a capture or a live session (pure: messages in, annotations out).

Theory of operation. One :class:`ConnectionTracker` follows one TCP connection. Before each message is
decoded, :meth:`options` says how (collections negotiated or not, or unknown when the capture began after
the HELLO). After decoding, :meth:`observe` updates the negotiated state (HELLO, DCP_OPEN, DCP_CONTROL),
matches responses to requests by (direction, opaque, opcode) and measures the latency, ties
producer-pushed messages to the stream request that opened their stream, and checks what a consumer
developer needs checked: an item outside its snapshot marker's range or before any marker, seqnos going
backwards, a vbucket uuid change, stream ends and their reasons, unacknowledged bytes above the negotiated
flow-control buffer, and rollback negotiations (a Rollback answer and the retry that follows it).

Invariants: state only ever comes from messages seen on this connection; when something needed was not
seen (the capture began mid-connection), the tracker says "unknown" instead of guessing. Memory is
bounded by the number of open streams and outstanding requests, each capped by a named limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from dcpctl.dcp.rollback import (
    END_FOREVER,
    Decision,
    FailoverEntry,
    StreamRequest,
    VbucketState,
    compared_snapshot,
    failover_entries,
    high_seqno_shown,
    history_is_newest,
    needs_rollback,
    next_request,
)
from dcpctl.protocol.constants import (
    DCP_OPEN_FLAGS,
    HELLO_FEATURES,
    RESPONSE_MAGICS,
    STATUSES,
    STREAM_END_STATUSES,
    VBUCKET_STATES,
    HelloFeature,
    Opcode,
    OsoFlag,
    SnapshotMarkerFlag,
    Status,
    StreamEndStatus,
    StreamRequestFlag,
    flag_names,
)
from dcpctl.protocol.diagnostic import Diagnostic, diagnostic
from dcpctl.protocol.message import DecodeOptions, Message
from dcpctl.protocol.registry import ANSWERED_OPCODES, BY_SEQNO_OPCODES, ITEM_OPCODES, PUSHED_OPCODES, STREAM_OPCODES
from dcpctl.protocol.value import text_or_hex

# A consumer may pipeline a stream request for every vbucket (1024) plus controls; beyond this many
# unanswered requests the oldest are forgotten (their responses then show no latency).
MAX_PENDING_REQUESTS: Final = 4096
# Streams per connection: 1024 vbuckets times a few stream ids is the realistic maximum.
MAX_STREAMS: Final = 16384
# Rollback negotiations remembered per connection for ``rollback explain``: 1024 vbuckets, a few rounds.
MAX_STORIES: Final = 8192
# Plain ints, compared per message (an enum class's attribute is slow to look up). The opcode sets are the
# registry's: producer messages the consumer answers (ANSWERED_OPCODES) are the only pushes remembered to
# match a response; mutations and the like are never answered.
NOOP: Final = int(Opcode.DCP_NOOP)
BUFFER_ACK: Final = int(Opcode.DCP_BUFFER_ACKNOWLEDGEMENT)
MARKER: Final = int(Opcode.DCP_SNAPSHOT_MARKER)
SET_VBUCKET_STATE: Final = int(Opcode.DCP_SET_VBUCKET_STATE)
OSO_SNAPSHOT: Final = int(Opcode.DCP_OSO_SNAPSHOT)
# What each DCP_SET_VBUCKET_STATE of a takeover stream means (kv_engine's ActiveStream TakeoverSend/Wait)
TAKEOVER_STEPS: Final = {
    "pending": "everything is sent; once the consumer answers, the producer's copy turns dead and what came in "
               "meanwhile follows",
    "active": "the producer's copy is dead; the consumer's answer ends the stream and the handover",
}
TAKEOVER_DONE: Final = "takeover complete: the consumer's copy is active"
STREAM_END: Final = int(Opcode.DCP_STREAM_END)


@dataclass
class StreamState:
    vbucket: int
    stream_id: int | None
    opaque: int
    start_seqno: int
    end_seqno: int
    vbucket_uuid: int
    snapshot: tuple[int, int] | None = None
    last_seqno: int | None = None
    items: int = 0
    failover_log: list[FailoverEntry] = field(default_factory=list)
    open: bool = False
    takeover: bool = False  # requested with TakeOver: it ends by handing the vbucket over (reference 3.12)
    # Inside an OSO snapshot (reference 3.19): the highest seqno before it and in it so far. Its items come in
    # key order, need no marker, and only at its end is that seqno the stream's last (a resume point).
    oso: int | None = None
    in_oso: bool = False


@dataclass
class PendingRequest:
    opcode: int
    ts: float
    offset: int
    message: Message


@dataclass
class RollbackStory:
    """One rollback negotiation seen on a connection: what was asked, answered, retried, and why."""

    vbucket: int
    request: StreamRequest
    rollback_seqno: int | None
    request_offset: int = 0
    retry: StreamRequest | None = None
    retry_status: str | None = None  # "Success", "Rollback" or the status of a failed retry
    # why the Rollback answer's seqno could not be read (a value of another size than a seqno's), or None
    unreadable: str | None = None
    failover_log: list[FailoverEntry] | None = None  # the server's, from the answer that opened the stream
    decision: Decision | None = None  # the engine's verdict on the first request, given that log
    expected_retry: StreamRequest | None = None  # what a correct client sends (reference 9.4)
    client_log_known: bool = False  # whether the capture showed the client a failover log before
    source: str | None = None  # the capture file it was seen in, as its reader names it (``rollback explain``)
    high_seqno: int | None = None  # the server's, where the rollback seqno shows it (a capture never carries it)

    def settle(self, retry: StreamRequest, server_log: list[FailoverEntry],
               client_log: list[FailoverEntry] | None) -> None:
        self.retry, self.retry_status = retry, "Success"
        if server_log:
            self.failover_log = server_log
            self.high_seqno = high_seqno_shown(self.request, server_log, self.rollback_seqno or 0)
            # unless the answer shows it, the high seqno is taken to cover all the client asked for, so that the
            # log and the purge rule decide
            high = self.high_seqno if self.high_seqno is not None else max(
                self.request.start_seqno, self.request.snap_end, server_log[0].seqno)
            self.decision = needs_rollback(self.request, VbucketState(tuple(server_log), high))
        if self.rollback_seqno is not None:
            # the uuid a correct client sends comes from its own failover log; when the capture never showed it
            # one (it was saved from an earlier session), only the seqnos are judged
            self.expected_retry, _ = next_request(self.request, list(client_log or []), self.rollback_seqno)
            self.client_log_known = client_log is not None

    @property
    def engine_agrees(self) -> bool | None:
        if self.decision is None or self.unreadable is not None:
            return None
        return self.decision.rollback_seqno == self.rollback_seqno

    @property
    def retry_correct(self) -> bool | None:
        if self.retry is None or self.rollback_seqno is None:
            return None
        expected = self.rollback_seqno
        if (self.retry.start_seqno, self.retry.snap_start, self.retry.snap_end) != (expected, expected, expected) \
                and self.retry.start_seqno > expected:
            return False
        if not self.client_log_known or self.expected_retry is None or self.retry_status == "Success":
            return True  # another uuid the server still accepts is not a mistake
        return self.expected_retry.vbucket_uuid in (self.retry.vbucket_uuid, 0)

    def verdict(self) -> str:
        """The engine's reading in one or two sentences."""
        parts = []
        if self.unreadable is not None:
            parts.append(f"The Rollback answer's seqno cannot be read ({self.unreadable}): there is no seqno to "
                         "judge it or the retry by.")
            if self.decision is not None:
                seqno = self.decision.rollback_seqno
                parts.append(f"With the failover log the server sent, the engine "
                             f"{'sees no rollback' if seqno is None else f'would roll back to {seqno}'} "
                             f"[{self.decision.rule}]: {self.decision.reason}.")
        elif self.decision is not None:
            if self.engine_agrees:
                parts.append(f"The rollback engine agrees [{self.decision.rule}]: {self.decision.reason}.")
                if self.high_seqno is not None:
                    parts.append(f"The server's high seqno was {self.high_seqno}: the capture does not carry it, "
                                 "but a rollback below the snapshot start on the newest history is the high seqno.")
            elif self.decision.rollback_seqno is None:
                parts.append(f"With the failover log the server sent, the engine sees no rollback "
                             f"[{self.decision.rule}]: " + self._unseen_cause())
            else:
                parts.append(f"The engine would roll back to {self.decision.rollback_seqno} "
                             f"[{self.decision.rule}], not {self.rollback_seqno}: the server's purge seqno or "
                             "high seqno (not in the capture) decided.")
        if self.retry_correct is False:
            expected = self.expected_retry
            parts.append("The retry is not what a correct client sends" + (
                f" (start {expected.start_seqno}, snapshot {expected.snap_start}-{expected.snap_end}"
                + (f", uuid {expected.vbucket_uuid}" if self.client_log_known else "") + ")" if expected else "")
                + ".")
        elif self.retry_correct:
            parts.append("The client retried as a correct client does.")
        return " ".join(parts)

    def _unseen_cause(self) -> str:
        """What the capture does not show that made the server roll back where the engine sees no need."""
        if not self.rollback_seqno:
            return "the server's purge seqno (not in the capture) explains it."
        if self.failover_log and history_is_newest(self.request.vbucket_uuid, self.failover_log):
            # the purge rule rolls back to 0; above 0 on the newest history only the high seqno can have decided
            return (f"a rollback to {self.rollback_seqno} is not the purge seqno's (that goes to 0), so the "
                    "server's high seqno (not in the capture) was below the client's snapshot end "
                    f"{compared_snapshot(self.request)[1]}.")
        return "the server's failover log or high seqno when it answered (not in the capture) decided."

    def to_json(self) -> dict[str, Any]:
        return {"vbucket": self.vbucket, "request": self.request.to_json(), "request_offset": self.request_offset,
                "rollback_seqno": self.rollback_seqno, "rollback_unreadable": self.unreadable,
                "retry": self.retry.to_json() if self.retry else None, "retry_status": self.retry_status,
                "failover_log": [e.to_json() for e in self.failover_log] if self.failover_log is not None else None,
                "rule": self.decision.rule if self.decision else None,
                "reason": self.decision.reason if self.decision else None,
                "engine_agrees": self.engine_agrees, "retry_correct": self.retry_correct,
                "expected_retry": self._expected_retry_json(), "verdict": self.verdict()}

    def _expected_retry_json(self) -> dict[str, Any] | None:
        if self.expected_retry is None:
            return None
        expected = self.expected_retry.to_json()
        if not self.client_log_known:  # the uuid comes from the client's failover log, which the capture did not show
            expected["vbucket_uuid"] = None
        return expected


def _items_text(items: int, last_seqno: int | None) -> str:
    """"3 items, last seqno 12", or "no items" for a stream that ended before any (it has no last seqno)."""
    if items == 0 or last_seqno is None:
        return "no items" if items == 0 else f"{items} item{'s' * (items != 1)}"
    return f"{items} item{'s' * (items != 1)}, last seqno {last_seqno}"


def stream_request_of(request: Message) -> StreamRequest:
    """A DCP_STREAM_REQ as the rollback engine's request (purge_seqno from its JSON value)."""
    start = request.field("start_seqno") or 0
    snap_start, snap_end = request.field("snap_start_seqno"), request.field("snap_end_seqno")
    end, flags = request.field("end_seqno"), request.field("flags")
    value = request.stream_request_value
    return StreamRequest(start, request.field("vbucket_uuid") or 0, start if snap_start is None else snap_start,
                         start if snap_end is None else snap_end, END_FOREVER if end is None else end, flags or 0,
                         value.purge_seqno if value is not None else None)


class Annotation:
    """What the tracker adds to one message's record (made once per message: kept cheap)."""

    __slots__ = ("diagnostics", "fields")

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.diagnostics: list[Diagnostic] = []

    def add(self, name: str, message: str) -> None:
        self.diagnostics.append(diagnostic(name, message))


class ConnectionTracker:
    """State of one connection; see the module docstring."""

    def __init__(self, base: DecodeOptions, known_from_start: bool) -> None:
        self.base = base
        # None: collections unknown (capture began after HELLO); False until HELLO says otherwise
        self.collections: bool | None = False if known_from_start else None
        self.features: list[str] = []
        self.dcp_open_flags: int | None = None
        self.controls: dict[str, str] = {}
        self.buffer_size: int | None = None
        self.unacked = 0
        self.pending: dict[tuple[bool, int, int], PendingRequest] = {}
        self.streams_by_opaque: dict[int, StreamState] = {}
        self.rollbacks: dict[int, RollbackStory] = {}  # vbucket -> a Rollback answer awaiting its retry
        self.stories: list[RollbackStory] = []  # negotiations seen through to the stream opening, or not
        self.failover_logs: dict[int, list[FailoverEntry]] = {}  # vbucket -> the last log the server sent
        self._hello_seen = False  # a HELLO's answer said whether collections are on: it wins over --collections
        self._options = self._make_options()
        self._warned_unknown = False
        self.from_start = known_from_start  # every stream request of this connection was seen
        self.strays: set[int] = set()  # opaques an item came on without a stream (reported once each)

    def _make_options(self) -> DecodeOptions:
        """--collections (the base's) stands for a negotiation the capture does not show; one it shows wins (a
        key's first bytes taken for a collection id that is not there would be shown, and kept by redact)."""
        chosen = self.base.collections is None or self._hello_seen
        return DecodeOptions(self.base.dialect, self.collections if chosen else self.base.collections,
                             self.base.show_secrets, self.base.lenient)

    def negotiated(self, *, collections: bool) -> None:
        """What a HELLO the tracker did not see negotiated (a live connection's own bootstrap)."""
        self.collections = collections
        self._hello_seen = True
        self._options = self._make_options()

    def options(self) -> DecodeOptions:
        return self._options

    # --- observation -----------------------------------------------------------------------------
    def observe(self, msg: Message, from_client: bool, ts: float) -> Annotation:
        note = Annotation()
        header = msg.header
        opcode = header[1]
        if header[0] in RESPONSE_MAGICS:
            self._response(msg, from_client, ts, note)
        else:
            if from_client or opcode in ANSWERED_OPCODES:
                self._request(msg, from_client, ts)
            if not from_client:
                if opcode in PUSHED_OPCODES:
                    self._pushed(msg, opcode, note)
            elif opcode == BUFFER_ACK and msg.extras:
                self.unacked = max(0, self.unacked - msg.extras["bytes_to_ack"])
        if self.collections is None and not self._warned_unknown and msg.variant is not None \
                and msg.variant.key.value == "document":
            self._warned_unknown = True
            note.add("collections_unknown", "the capture starts after this connection's HELLO: whether "
                     "collections were negotiated is unknown, so keys are shown with any collection prefix")
        return note

    def plain_item(self, msg: Message) -> tuple[bool, int | None]:
        """:meth:`observe` for an item the producer pushed that decoding found clean (a plain reader's
        message), when the tracker has nothing to say about it either: then (True, its stream's vbucket or
        None), with the state updated exactly as :meth:`observe` would update it. (False, None), with the
        state untouched, whenever :meth:`observe` would add a diagnostic or learn something (the caller then
        observes the message). For consumers of millions of items: it builds no annotation."""
        seqno = msg.by_seqno
        if (self.collections is None and not self._warned_unknown) or seqno is None:
            return False, None
        opaque = msg.header[7]
        unacked = self.unacked + msg.body_end
        if self.buffer_size is not None and unacked > self.buffer_size:
            return False, None
        stream = self.streams_by_opaque.get(opaque)
        if stream is None:
            if self.from_start and opaque not in self.strays:
                return False, None  # no_stream, said once per opaque
            self.unacked = unacked
            return True, None
        snapshot, last = stream.snapshot, stream.last_seqno
        if snapshot is None or not snapshot[0] <= seqno <= snapshot[1] or (last is not None and seqno <= last):
            return False, None
        self.unacked = unacked
        stream.items += 1
        stream.last_seqno = seqno
        return True, stream.vbucket

    def _request(self, msg: Message, from_client: bool, ts: float) -> None:
        if len(self.pending) >= MAX_PENDING_REQUESTS:
            self.pending.pop(next(iter(self.pending)))
        self.pending[(from_client, msg.opaque, msg.opcode)] = PendingRequest(msg.opcode, ts, msg.offset, msg)

    def _response(self, msg: Message, from_client: bool, ts: float, note: Annotation) -> None:
        request = self.pending.pop((not from_client, msg.opaque, msg.opcode), None)
        if request is None:
            return
        note.fields["latency_ms"] = round((ts - request.ts) * 1000, 3)
        note.fields["request_offset"] = request.offset
        status = msg.status
        asked = request.message
        if msg.opcode == Opcode.HELLO and status == Status.SUCCESS:
            codes = msg.hello_features
            self.features = [HELLO_FEATURES.name(code, 4) for code in codes]
            self.collections = HelloFeature.COLLECTIONS in codes
            self._hello_seen = True
            self._options = self._make_options()
        elif msg.opcode == Opcode.DCP_OPEN and status == Status.SUCCESS:
            self.dcp_open_flags = int(asked.field("flags") or 0)
            note.fields["dcp_open_flags"] = flag_names(DCP_OPEN_FLAGS, self.dcp_open_flags)
        elif msg.opcode == Opcode.DCP_CONTROL and status == Status.SUCCESS:
            key, value = text_or_hex(asked.key)[0], text_or_hex(asked.value)[0]  # as the record shows them
            self.controls[key] = value
            if key == "connection_buffer_size" and value.isdigit():
                self.buffer_size = int(value) or None
        elif msg.opcode == Opcode.DCP_STREAM_REQ:
            self._stream_response(asked, msg, status, note)
        elif msg.opcode in (Opcode.DCP_GET_FAILOVER_LOG, Opcode.GET_FAILOVER_LOG) and status == Status.SUCCESS:
            self.failover_logs[asked.vbucket or 0] = failover_entries(msg)

    def _stream_response(self, request: Message, response: Message, status: int | None, note: Annotation) -> None:
        vbucket = request.vbucket or 0
        note.fields["stream_vbucket"] = vbucket
        asked = stream_request_of(request)
        if status == Status.ROLLBACK:
            seqno = response.field("rollback_seqno")
            unreadable = None if seqno is not None else \
                f"its value has {len(response.value)} byte{'' if len(response.value) == 1 else 's'}, not a seqno's 8"
            story = RollbackStory(vbucket, asked, seqno, request_offset=request.offset, unreadable=unreadable)
            previous = self.rollbacks.pop(vbucket, None)
            if previous is not None:  # a retry answered with another rollback: one more round
                previous.retry, previous.retry_status = asked, "Rollback"
                self._keep(previous)
            self.rollbacks[vbucket] = story
            note.add("rollback", f"vbucket {vbucket}: the server asks to roll back to "
                     f"{seqno if unreadable is None else f'a seqno it does not give ({unreadable})'} "
                     f"(requested start {asked.start_seqno}, uuid {asked.vbucket_uuid}, "
                     f"snapshot {asked.snap_start}-{asked.snap_end})")
            return
        previous = self.rollbacks.pop(vbucket, None)
        if status != 0:
            if previous is not None:
                previous.retry, previous.retry_status = asked, STATUSES.name(status or 0)
                self._keep(previous)
            return
        value = request.stream_request_value
        if len(self.streams_by_opaque) >= MAX_STREAMS:
            self.streams_by_opaque.pop(next(iter(self.streams_by_opaque)))
        stream = StreamState(vbucket, value.sid if value is not None else None, request.opaque, asked.start_seqno,
                             asked.end_seqno, asked.vbucket_uuid, open=True, failover_log=failover_entries(response),
                             takeover=bool(asked.flags & StreamRequestFlag.TAKE_OVER))
        self.streams_by_opaque[stream.opaque] = stream
        server_log = stream.failover_log
        if previous is not None:
            client_log = self.failover_logs.get(vbucket)
            previous.settle(asked, server_log, client_log)
            self._keep(previous)
            note.add("rollback", f"vbucket {vbucket}: stream opened after rolling back to "
                     f"{previous.rollback_seqno} (first asked from {previous.request.start_seqno}, now from "
                     f"{asked.start_seqno} with uuid {asked.vbucket_uuid}). {previous.verdict()}")
        if server_log:
            self.failover_logs[vbucket] = server_log
        log = stream.failover_log
        if log and stream.vbucket_uuid and log[0].vbucket_uuid != stream.vbucket_uuid:
            note.add("vbucket_uuid_changed", f"vbucket {vbucket}: the server's newest uuid "
                     f"{log[0].vbucket_uuid} differs from the requested {stream.vbucket_uuid}")

    @staticmethod
    def _vbucket_state(stream: StreamState, state: int | None, note: Annotation) -> None:
        """A takeover's step, said as what it does; on a stream that did not ask for a takeover, a warning."""
        name = VBUCKET_STATES.name(state) if state is not None else "?"
        if not stream.takeover:
            note.add("set_vbucket_state_without_takeover", f"vbucket {stream.vbucket}: the producer sets the "
                     f"consumer's copy {name} on a stream that was not requested with TakeOver")
            return
        step = TAKEOVER_STEPS.get(name, "a state the server's takeover never sends")
        note.add("takeover", f"vbucket {stream.vbucket}: takeover, the consumer's copy to become {name}: {step}")

    def unanswered_takeover_steps(self) -> list[tuple[int, str, int]]:
        """``(vbucket, what, offset)`` of each takeover step the consumer has not answered (yet: at a capture's
        end, never): a DCP_SET_VBUCKET_STATE, or a snapshot marker flagged Acknowledge. The producer waits
        for each (reference 3.12): one left unanswered is a takeover, so a rebalance, that cannot finish."""
        out = []
        for (from_client, _, opcode), pending in self.pending.items():
            msg = pending.message
            if from_client:
                continue
            if opcode == SET_VBUCKET_STATE:
                state = (msg.extras or {}).get("vbucket_state")
                what = f"DCP_SET_VBUCKET_STATE {VBUCKET_STATES.name(state) if state is not None else '?'}"
            elif opcode == MARKER and (msg.field("snapshot_flags") or 0) & SnapshotMarkerFlag.ACKNOWLEDGE:
                what = "snapshot marker flagged Acknowledge"
            else:
                continue
            out.append((msg.vbucket or 0, what, pending.offset))
        return out

    def _keep(self, story: RollbackStory) -> None:
        if len(self.stories) >= MAX_STORIES:
            self.stories.pop(0)
        self.stories.append(story)

    def pending_stories(self) -> list[RollbackStory]:
        """Every negotiation, including rollbacks the capture never saw a retry for."""
        return [*self.stories, *self.rollbacks.values()]

    def _pushed(self, msg: Message, opcode: int, note: Annotation) -> None:
        if opcode != NOOP:
            self.unacked += len(msg.raw)
            if self.buffer_size is not None and self.unacked > self.buffer_size:
                note.add("flow_control_exceeded", f"{self.unacked} bytes unacknowledged, above the "
                         f"negotiated connection_buffer_size {self.buffer_size}")
        stream = self.streams_by_opaque.get(msg.header[7])
        if stream is None:
            if self.from_start and opcode in STREAM_OPCODES and msg.header[7] not in self.strays \
                    and len(self.strays) < MAX_STREAMS:
                self.strays.add(msg.header[7])
                note.add("no_stream", f"vbucket {msg.header[5]}: {msg.opcode_name} on opaque {msg.header[7]}, "
                         "for which no stream is open on this connection (never requested, refused or ended; "
                         "further ones on this opaque are not reported)")
            return
        note.fields["stream_vbucket"] = stream.vbucket
        if opcode in BY_SEQNO_OPCODES:
            seqno = msg.by_seqno
            if seqno is None:
                return
            if stream.in_oso:  # key order: no marker, no order to check; the highest is kept for its end
                if opcode in ITEM_OPCODES:
                    stream.items += 1
                stream.oso = seqno if stream.oso is None else max(stream.oso, seqno)
                return
            if opcode in ITEM_OPCODES:
                stream.items += 1
                snapshot = stream.snapshot
                if snapshot is None:
                    note.add("item_before_marker", f"vbucket {stream.vbucket}: seqno {seqno} arrived "
                             "before any snapshot marker")
                elif not snapshot[0] <= seqno <= snapshot[1]:
                    note.add("seqno_outside_snapshot", f"vbucket {stream.vbucket}: seqno {seqno} outside "
                             f"the snapshot {snapshot[0]}-{snapshot[1]}")
            if stream.last_seqno is not None and seqno <= stream.last_seqno:
                note.add("seqno_backwards", f"vbucket {stream.vbucket}: seqno {seqno} after "
                         f"{stream.last_seqno}")
            stream.last_seqno = seqno
            return
        extras = msg.extras or {}
        if opcode == MARKER:  # v2.x carries the range in the value
            start, end = msg.field("snap_start_seqno"), msg.field("snap_end_seqno")
            if isinstance(start, int) and isinstance(end, int):
                stream.snapshot = (start, end)
        elif opcode == SET_VBUCKET_STATE:
            self._vbucket_state(stream, extras.get("vbucket_state"), note)
        elif opcode == OSO_SNAPSHOT:
            flags = extras.get("oso_flags", 0)
            if flags & OsoFlag.START and not stream.in_oso:  # (a second start: still the same bracket)
                # the marker before no longer bounds the items (and the per-item fast path, needing one, stops)
                stream.in_oso, stream.oso, stream.snapshot = True, stream.last_seqno, None
            elif flags & OsoFlag.END and stream.in_oso:
                stream.in_oso, stream.last_seqno = False, stream.oso
        elif opcode == STREAM_END:
            status = extras.get("stream_end_status", 0)
            stream.open = False
            meaning = TAKEOVER_DONE if stream.takeover and status == StreamEndStatus.OK else \
                STREAM_END_STATUSES.meaning_of.get(status, "?")
            note.add("stream_end", f"vbucket {stream.vbucket} stream ended: {STREAM_END_STATUSES.name(status)} "
                     f"({meaning}) after {_items_text(stream.items, stream.last_seqno)}")
            self.streams_by_opaque.pop(msg.opaque, None)
