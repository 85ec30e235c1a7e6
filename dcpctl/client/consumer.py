"""One node's DCP streams, consumed sans-IO: bytes in, events and bytes out, the clock passed in.

Theory of operation. The streamer (``client/streamer.py``) owns the sockets and the topology; for each
node's connection it makes a :class:`Consumer` once DCP_OPEN and the controls are done, asks it for
streams (:meth:`Consumer.request`), feeds it every byte the socket gives (:meth:`Consumer.feed`, with the
time they were read) and sends what :meth:`Consumer.data_to_send` returns. :meth:`Consumer.events` acts on
what was fed, as ``ProducerConnection`` does on the server side:

- noops are answered at once; every other stream message counts towards the flow-control window and is
  acknowledged when half of it is used (what dcpdrain and gocbcore do);
- markers, items and stream ends move the vbucket's position (``client/state.py``); items count towards
  ``--count`` (shared by every node's consumer through one :class:`Progress`) and the per-vbucket summary;
- stream messages are given back with their context exactly as a captured message is (an ``Observed``:
  ``ts``, ``connection``, ``direction`` and the tracker's fields); with a :class:`LineMaker`, runs of plain
  items (the compiled plain readers' messages) are given back as the command's own rendering of them
  (bytes);
- a Rollback answer gives :class:`RollbackAsked`: the streamer reads the failover log and the high seqno
  (I/O), and :meth:`Consumer.rollback` applies ``--on-rollback``: follow (a new stream request from where
  the failover log says the histories agree), fail (an error, exit 9) or report (the vbucket is left out);
- NotMyVbucket, and a stream that ended early (StateChanged, Slow...), give :class:`Reroute`: where the
  vbucket is asked again is the topology's business.

Invariants: a position moves only when the caller says the message handed out is written
(:meth:`Consumer.commit`), so a stop between receiving an item and writing it resumes from before it and
every item is delivered exactly once; the bytes of the connection are handled in order, every one of them
once (read ahead by a call of the streamer's, they come back through :meth:`Consumer.read_ahead`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from dcpctl.client.connection import ClientError, StatusError, first_error
from dcpctl.client.state import State, VbucketPosition
from dcpctl.dcp.observed import Observed
from dcpctl.dcp.rollback import (
    END_FOREVER,
    FailoverEntry,
    StreamRequest,
    VbucketState,
    failover_entries,
    needs_rollback,
)
from dcpctl.dcp.session import ConnectionTracker
from dcpctl.exitcode import ExitCode
from dcpctl.protocol import build, grammar, stream_request_value
from dcpctl.protocol.constants import STREAM_END_STATUSES, Magic, Opcode, Status, StreamEndStatus
from dcpctl.protocol.framer import HEADER_LENGTH, Frame, Framer
from dcpctl.protocol.message import DecodeOptions, Message, decode, item_plan
from dcpctl.protocol.reader import ItemReaders
from dcpctl.protocol.registry import CHANGE_OPCODES, HEADER_LAYOUT, STREAM_OPCODES, Dialect, layout

# Plain ints, compared per message (an enum class's attribute is slow to look up).
REQUEST: Final = int(Magic.CLIENT_REQUEST)
NOOP: Final = int(Opcode.DCP_NOOP)
MARKER: Final = int(Opcode.DCP_SNAPSHOT_MARKER)
# A synchronous write's completion has no by_seqno: its seqno is this extras field.
_COMPLETION_SEQNO: Final = {int(Opcode.DCP_COMMIT): "commit_seqno", int(Opcode.DCP_ABORT): "abort_seqno"}
STREAM_END: Final = int(Opcode.DCP_STREAM_END)
STREAM_REQ: Final = int(Opcode.DCP_STREAM_REQ)
MAX_ROLLBACKS: Final = 30  # per vbucket: a correct negotiation converges in fewer (one per failover entry)
# Stream ends (reference 3.7) after which the vbucket is asked again from where it got to; FilterEmpty (7)
# ends it for good (its collections are gone), LostPrivileges (8) stops dcpctl (exit 7)
REOPEN_STATUSES: Final = frozenset({StreamEndStatus.STATE_CHANGED, StreamEndStatus.DISCONNECTED,
                                    StreamEndStatus.SLOW, StreamEndStatus.BACKFILL_FAIL})
FIRST_OPAQUE: Final = 0x1000  # stream requests' opaques start above the bootstrap's requests', easy to tell apart
_SCAN: Final = HEADER_LAYOUT.prefix("opaque")  # the header up to the opaque: what the quiet path reads
# by_seqno, read at the start of the extras: the quiet path takes only item shapes whose by_seqno is there
_SEQNO: Final = layout(grammar.mutation_extras).field("by_seqno")
_BODY: Final = HEADER_LAYOUT.field("total_body_length")
_BODY_AT: Final = HEADER_LAYOUT.offset("total_body_length")
_DIRECTION: Final = "server>client"


# --- events ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Notice:
    """Something a person should know (a rollback explained, a stream asked again): one sentence or two."""

    text: str


@dataclass(frozen=True, slots=True)
class RollbackAsked:
    """The server refused a stream request with Rollback to ``seqno``: read the failover log and the high
    seqno to explain it, then call :meth:`Consumer.rollback`."""

    vbucket: int
    seqno: int


@dataclass(frozen=True, slots=True)
class Reroute:
    """Ask this vbucket again, from the node the cluster map now says owns it."""

    vbucket: int


# Stream data (a message with its context), a run of plain items as the LineMaker rendered them (bytes), or a
# note
Event = Observed | bytes | Notice | RollbackAsked | Reroute


# The tracker's say on a plain item (ConnectionTracker.plain_item): taken or not, and its stream's vbucket.
Accept = Callable[[Message], tuple[bool, int | None]]


class ItemRenderer(Protocol):
    def line(self, msg: Message, lead: tuple[bytes, ...], stream_vbucket: int | None,
             accept: Accept | None = None) -> bytes | None:
        """A plain item's rendering (a plain reader's message), or None when it should go the usual way;
        ``accept`` is asked last, once nothing else stands in the way (see ``render.lines.ItemLines``)."""


class LineMaker(Protocol):
    """How the command turns plain items into output straight from the plain readers' messages (its
    renderer's choice): a connection's renderer, and the values of its lead slots for bytes read at ``ts``."""

    def lines(self, connection: str) -> ItemRenderer: ...

    def lead(self, ts: float) -> tuple[bytes, ...]: ...


# --- shared state ---------------------------------------------------------------------------------------
@dataclass
class Progress:
    """What every node's consumer shares: the positions (``--state``), the end seqnos (``--until``), the
    items delivered (``--count``, ``--save-items``), the summary's counts and the stream opaques."""

    state: State
    count: int | None = None
    save_items: int = 100_000
    ends: dict[int, int] = field(default_factory=dict)
    items: int = 0
    save_at: int = 0  # the item count at which the state is next saved (the streamer moves it on)
    done: bool = False  # --count reached, or a stop asked for
    stats: dict[int, dict[str, Any]] = field(default_factory=dict)
    first_ts: float | None = None  # when the first stream message was read (--summary's time 0)
    # vbucket -> times asked again since its stream last opened: only failures to open in a row count towards
    # giving up, so a vbucket that moves again and again (rebalances) is followed however often it moves
    reroutes: dict[int, int] = field(default_factory=dict)
    # vbucket -> its position when it was last asked again, and how many times in a row it was asked again at
    # that position: a stream that opens and ends again delivering nothing is asked again later each time
    stalls: dict[int, tuple[int, int]] = field(default_factory=dict)
    opaque: int = FIRST_OPAQUE
    past_until: set[int] = field(default_factory=set)  # vbuckets whose start was past --until: said once

    def __post_init__(self) -> None:
        self.save_at = self.save_items

    def end_at_most(self, vbucket: int, high: int) -> int | None:
        """--until now: the vbucket's high seqno on the node that serves it now (after a failover, a rollback, a
        move) bounds its end too. A failover that cut its history below the high seqno read at start took that
        end away for good: the stream would wait for it for ever. Returns the end it had if this lowered it."""
        end = self.ends.get(vbucket)
        if end is None or high >= end:
            return None
        self.ends[vbucket] = high
        return end

    def counted(self, written: dict[int, list[int]], ts: float) -> None:
        """Items taken in place (written, or counted by the quiet path), per vbucket [items, first seqno, last
        seqno], read at ``ts``: their vbuckets' positions and counts move on, and ``written`` is emptied."""
        positions, stats_of = self.state.vbuckets, self.stats
        for vbucket, (count, first, last) in written.items():
            positions[vbucket].seqno = last
            stats = stats_of.get(vbucket)
            if stats is None:
                stats = stats_of[vbucket] = new_stats(first, ts)
            elif stats["first_seqno"] is None:
                stats["first_seqno"] = first
            stats["items"] += count
            stats["last_seqno"] = last
            stats["last_ts"] = ts
        written.clear()


def new_stats(first_seqno: int | None, ts: float) -> dict[str, Any]:
    """A vbucket's --summary counts, from its first item (read at ``ts``)."""
    return {"items": 0, "first_seqno": first_seqno, "last_seqno": None, "first_ts": ts, "last_ts": ts}


@dataclass
class Stream:
    vbucket: int
    opaque: int
    request: StreamRequest
    sent: float  # when the request was sent: unanswered past --timeout is an error
    open: bool = False
    ended: bool = False
    rollbacks: int = 0


class _SeqnoShapes(dict[int, bool]):
    """``opcode << 8 | extras length`` -> whether decoding reads that item shape's by_seqno from the first 8
    bytes of its extras (a declared item layout, from the decoder's plan); filled as shapes are seen."""

    def __init__(self, dialect: Dialect) -> None:
        super().__init__()
        self.dialect = dialect

    def __missing__(self, shape: int) -> bool:
        plan = item_plan(self.dialect, shape >> 8, shape & 0xFF)
        found = self[shape] = plan is not None and plan.seqno_at == 0
        return found


class Consumer:
    """See the module docstring. ``framer`` may already hold bytes read after the bootstrap; ``value`` is
    the stream requests' JSON value (collections, stream id), to which ``purge_seqnos`` adds a vbucket's
    purge seqno when its position has one; ``quiet``: nobody reads the messages (--summary
    alone), items are counted from their headers; ``lines``: plain items are given back as that maker renders
    them."""

    def __init__(self, progress: Progress, *, options: DecodeOptions, label: str = "server",
                 connection: str = "", framer: Framer | None = None, buffer_size: int = 0,
                 on_rollback: str = "follow", value: bytes = b"", purge_seqnos: bool = False, quiet: bool = False,
                 lines: LineMaker | None = None, tracker: ConnectionTracker | None = None) -> None:
        self.progress = progress
        self.options = options
        self.label, self.connection = label, connection
        self.framer = framer if framer is not None else Framer()
        self.half = buffer_size // 2  # acknowledged when this much of the window is used
        self.on_rollback = on_rollback
        self.value = value
        self.purge_seqnos = purge_seqnos  # the server takes purge_seqno in the value (max_marker_version 2.2)
        self.quiet = quiet
        if tracker is None:
            tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
            tracker.negotiated(collections=bool(options.collections))  # HELLO came before tracking
        self.tracker = tracker
        self.streams: dict[int, Stream] = {}  # opaque -> stream, once its request is answered Success
        # opaque -> stream asked for, not answered yet: its messages before the answer are no stream's data
        self._asked: dict[int, Stream] = {}
        self.unacked = 0
        self.ts = 0.0  # when the bytes being handled were read: their messages' ts, as a capture's
        self._lines = lines.lines(connection) if lines is not None else None
        self._readers = ItemReaders(self.framer.max_body_length)  # the lines path's, compiled per item shape
        self._lead = lines.lead if lines is not None else None
        self._shapes: _SeqnoShapes | None = None
        self._pending: deque[Message] = deque()  # decoded already (read ahead by a call): handled first
        self._out: list[bytes] = []
        self._events: deque[Event] = deque()  # notes made while handling, given back before more data
        self._refused: dict[int, Stream] = {}  # vbucket -> the stream request a rollback answered
        self._uncommitted: tuple[VbucketPosition, int] | None = None  # the item handed out, not yet written
        self._written: dict[int, list[int]] = {}  # plain items handed out as lines, not yet written

    # --- bytes in and out ------------------------------------------------------------------------------
    def feed(self, data: bytes, now: float) -> None:
        """Bytes the connection gave at ``now`` (wall clock seconds: the ts of the messages they hold)."""
        self.framer.feed(data)
        self.ts = now

    def read_ahead(self, messages: deque[Message], now: float) -> None:
        """Messages a call of the streamer's read while it waited for its answer (they came before the
        framer's bytes): handled next. ``messages`` is emptied."""
        self._pending.extend(messages)
        messages.clear()
        self.ts = now

    def buffered(self) -> bool:
        """Whether a whole message waits to be handled without more bytes."""
        if self._pending:
            return True
        buf, pos = self.framer.window()
        if len(buf) - pos < HEADER_LENGTH:
            return False
        body: int = _BODY.unpack_from(buf, pos + _BODY_AT)[0]
        # one too long for the framer is "there" too: handling it says what is wrong with it
        return body > self.framer.max_body_length or len(buf) - pos >= HEADER_LENGTH + body

    def data_to_send(self) -> bytes:
        """Everything queued for the server since the last call (acks, noop answers, stream requests)."""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def _send(self, data: bytes) -> None:
        # the tracker sees both directions, as it would in a capture of this connection
        self.tracker.observe(decode(data, 0, self.tracker.options()), from_client=True, ts=self.ts)
        self._out.append(data)

    def _ack(self) -> None:
        self._send(build.request(Opcode.DCP_BUFFER_ACKNOWLEDGEMENT, bytes_to_ack=self.unacked))
        self.unacked = 0

    # --- streams -----------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return bool(self._asked) or any(not s.ended for s in self.streams.values())

    def request(self, vbucket: int, now: float) -> Stream:
        """Ask for a vbucket's stream from its position: queues a DCP_STREAM_REQ."""
        progress = self.progress
        position = progress.state.vbuckets[vbucket]
        # Asked even when already at the end: only the server can say whether that history is still its own
        # (a rollback); an end below the start would be Erange, so it is raised to the start.
        end = max(progress.ends.get(vbucket, END_FOREVER), position.seqno)
        snap_start, snap_end = position.resume_snapshot()
        request = StreamRequest(position.seqno, position.vbucket_uuid, snap_start, snap_end, end)
        progress.opaque += 1
        opaque = progress.opaque
        value = self.value
        if self.purge_seqnos and position.purge_seqno is not None:
            value = stream_request_value.with_purge_seqno(value, position.purge_seqno)
        data = build.request(Opcode.DCP_STREAM_REQ, opaque=opaque, vbucket=vbucket, value=value, flags=0,
                             reserved=0, start_seqno=request.start_seqno, end_seqno=end,
                             vbucket_uuid=request.vbucket_uuid, snap_start_seqno=snap_start,
                             snap_end_seqno=snap_end)
        self._send(data)
        stream = self._asked[opaque] = Stream(vbucket, opaque, request, now)
        return stream

    def overdue(self, now: float, timeout: float) -> Stream | None:
        """A stream request unanswered for more than ``timeout`` seconds (the server's noops keep the
        connection alive, so only the request's own deadline catches it)."""
        return next((s for s in self._asked.values() if now - s.sent > timeout), None)

    def close_streams(self) -> None:
        """Queue DCP_CLOSE_STREAM for every stream still open (the end of a run)."""
        for stream in self.streams.values():
            if stream.open and not stream.ended:
                self._send(build.request(Opcode.DCP_CLOSE_STREAM, opaque=stream.opaque, vbucket=stream.vbucket))

    # --- events ------------------------------------------------------------------------------------
    def events(self) -> Iterator[Event]:
        """Act on every whole message fed so far; the caller writes each stream message (or run of lines)
        it is given, then calls :meth:`commit` before asking for the next. Stops early once
        ``progress.done``."""
        yield from self._noted()
        if self.quiet:
            self._scan()
            yield from self._noted()
        elif self._lines is not None:
            yield from self._line_runs()
        else:
            while not self.progress.done:
                msg = self._next()
                if msg is None:
                    break
                out = self._handle(msg)
                yield from self._noted()
                if out is not None:
                    yield out

    def _noted(self) -> Iterator[Event]:
        events = self._events
        while events:
            yield events.popleft()

    def commit(self) -> None:
        """The caller wrote what it was last given: an item's seqno (or a run's last) is now where its vbucket
        got to, which --state saves. Committed only now, a stop between receiving an item and writing it
        resumes from before it, so it is written exactly once."""
        pending = self._uncommitted
        if pending is not None:
            self._uncommitted = None
            position, seqno = pending
            position.seqno = seqno
        if self._written:
            self.progress.counted(self._written, self.ts)

    def _next(self) -> Message | None:
        """The next whole message: read ahead first, then the framer's (None when there is none)."""
        if self._pending:
            return self._pending.popleft()
        framer = self.framer
        buf, pos = framer.window()
        if len(buf) - pos < HEADER_LENGTH:
            return None
        total = HEADER_LENGTH + _BODY.unpack_from(buf, pos + _BODY_AT)[0]
        if total > HEADER_LENGTH + framer.max_body_length:
            event = next(framer.events(), None)  # the framer's own checks say what is wrong with it
            if event is None:
                return None
            if not isinstance(event, Frame):
                raise ClientError(f"{self.label}: the server sent bytes that are not a packet", ExitCode.PROTOCOL)
            return decode(event.data, event.offset, self.options)
        if len(buf) - pos < total:
            return None
        base = framer.offset - pos
        framer.consume(pos + total)
        return decode(buf[pos:pos + total], base + pos, self.options)

    def _handle(self, msg: Message) -> Observed | None:
        """Act on one message; returns it with its context when it is for the output (stream data), else None."""
        opcode, ts, progress = msg.opcode, self.ts, self.progress
        if progress.first_ts is None:
            progress.first_ts = ts
        if msg.is_response:
            self.tracker.observe(msg, from_client=False, ts=ts)
            if opcode == STREAM_REQ:
                self._stream_response(msg)
            return None
        if opcode == NOOP:
            self.tracker.observe(msg, from_client=False, ts=ts)
            self._send(build.response(Opcode.DCP_NOOP, opaque=msg.opaque))
            return None
        self.unacked += len(msg.raw)
        if self.unacked >= self.half:
            self._ack()
        stream = self.streams.get(msg.opaque)
        if stream is None and msg.opaque in self._asked and opcode in STREAM_OPCODES:
            self._unanswered(msg.opaque, msg.opcode_name)
        note = self.tracker.observe(msg, from_client=False, ts=ts)
        seen = Observed(msg, {"ts": ts, "connection": self.connection, "direction": _DIRECTION}, note.fields,
                        note.diagnostics)
        if stream is None or opcode not in STREAM_OPCODES:
            return seen
        vbucket = stream.vbucket
        position = progress.state.vbuckets[vbucket]
        if opcode == MARKER:
            start, end = msg.field("snap_start_seqno"), msg.field("snap_end_seqno")  # extras, or a v2.x value
            position.snap_start_seqno = position.seqno if start is None else int(start)
            position.snap_end_seqno = position.seqno if end is None else int(end)
            purge = msg.field("purge_seqno")  # a v2.2 marker's (a disk snapshot's): what a resume sends back
            if purge is not None:
                position.purge_seqno = int(purge)
            return seen
        if opcode == STREAM_END:
            self._stream_end(stream, int((msg.extras or {}).get("stream_end_status", 0)))
            return seen
        seqno = msg.by_seqno
        if seqno is None and opcode in _COMPLETION_SEQNO:  # a commit or abort takes its own seqno
            completed = msg.field(_COMPLETION_SEQNO[opcode])
            seqno = int(completed) if completed is not None else None
        if seqno is not None:
            self._uncommitted = (position, seqno)  # see commit
        if opcode in CHANGE_OPCODES:
            progress.items += 1
            stats = progress.stats.get(vbucket)
            if stats is None:
                stats = progress.stats[vbucket] = new_stats(None, ts)
            stats["items"] += 1
            stats["last_ts"] = ts
            if seqno is not None:  # an item cut short has none: it is counted, its seqno is not made up
                if stats["first_seqno"] is None:
                    stats["first_seqno"] = seqno
                stats["last_seqno"] = seqno
            if progress.count is not None and progress.items >= progress.count:
                progress.done = True
        return seen

    def _stream_response(self, msg: Message) -> None:
        stream = self._asked.pop(msg.opaque, None)
        if stream is None:
            return
        status = msg.status
        vbucket = stream.vbucket
        position = self.progress.state.vbuckets[vbucket]
        bad = first_error(msg) if status in (Status.SUCCESS, Status.ROLLBACK) else None
        if bad is not None:  # its log or seqno would be read as what the server never said (empty, 0)
            raise ClientError(f"{self.label}: a malformed answer to the stream request for vbucket {vbucket} "
                              f"({bad.message})")
        if status == Status.SUCCESS:
            stream.open = True
            self.streams[msg.opaque] = stream
            self.progress.reroutes.pop(vbucket, None)  # it opened: the map pointed at its node (see Progress)
            log = failover_entries(msg)
            if log:
                position.failover_log = log
                position.vbucket_uuid = log[0].vbucket_uuid
            # said once the server accepts the start: a Rollback answer may still bring it below the end
            until, start = self.progress.ends.get(vbucket), stream.request.start_seqno
            if until is not None and start > until and vbucket not in self.progress.past_until:
                self.progress.past_until.add(vbucket)
                self._events.append(Notice(f"vbucket {vbucket}: starts at {start}, past --until {until}: "
                                           "nothing to stream"))
            return
        if status == Status.ROLLBACK:
            seqno = int(msg.field("rollback_seqno"))
            self._refused[vbucket] = stream
            self._events.append(RollbackAsked(vbucket, seqno))
        elif status == Status.NOT_MY_VBUCKET:
            self._events.append(Notice(f"vbucket {vbucket}: {self.label} answered NotMyVbucket; reading the "
                                       "cluster map again"))
            self._events.append(Reroute(vbucket))
        else:
            raise StatusError(f"stream request for vbucket {vbucket} on {self.label}", str(msg.status_name))

    def _unanswered(self, opaque: int, opcode: str) -> None:
        """A stream's message before the answer to its request: a server answers first, so what it sends
        cannot be told to be that stream's (counted, saved as a position the server never granted)."""
        raise ClientError(f"{self.label}: sent {opcode} for vbucket {self._asked[opaque].vbucket} before answering "
                          "its stream request")

    def rollback(self, vbucket: int, seqno: int, log: list[FailoverEntry], high: int | None, now: float, *,
                 until_now: bool = False) -> Notice:
        """Apply ``--on-rollback`` to the server's Rollback to ``seqno`` for ``vbucket``, explained by its
        failover log and high seqno as the server now has them (empty and None when it would not say):
        follow rolls the position back and asks again, report leaves the vbucket out, fail raises
        :class:`ClientError` (exit 9). ``until_now``: the vbucket's end is its high seqno at the start, which
        the new history may never reach. Returns the notice that tells the story."""
        stream = self._refused.pop(vbucket)
        progress = self.progress
        position = progress.state.vbuckets[vbucket]
        request = stream.request
        if high is not None and until_now:
            progress.end_at_most(vbucket, high)  # the history the start's high seqno belonged to is gone
        why = ""
        if log:
            decision = needs_rollback(request, VbucketState(tuple(log), high if high is not None else
                                                            max(request.start_seqno, request.snap_end, log[0].seqno)))
            # each a sentence of its own: the notice goes on with "Retrying ..." or "Not following it ..."
            why = f" [{decision.rule}] {decision.reason}." if decision.rollback_seqno == seqno else \
                " The server's purge or high seqno decided: the failover log alone does not explain it."
        story = (f"vbucket {vbucket}: the server asks to roll back from {request.start_seqno} "
                 f"(uuid {request.vbucket_uuid}, snapshot {request.snap_start}-{request.snap_end}) to {seqno}.{why}")
        if self.on_rollback == "fail":
            raise RollbackRefusedError(story, f"vbucket {vbucket}: rollback to {seqno} required (--on-rollback fail)")
        if self.on_rollback == "report":
            return Notice(story + " Not following it (--on-rollback report): the vbucket is left out.")
        stream.rollbacks += 1
        if stream.rollbacks > MAX_ROLLBACKS:
            raise ClientError(f"vbucket {vbucket}: still asked to roll back after {MAX_ROLLBACKS} rounds",
                              ExitCode.ROLLBACK)
        position.rolled_back(seqno)
        self.request(vbucket, now).rollbacks = stream.rollbacks
        return Notice(story + f" Retrying from {position.seqno} with uuid {position.vbucket_uuid}.")

    def _stream_end(self, stream: Stream, status: int) -> None:
        stream.ended = True
        vbucket = stream.vbucket
        reason = STREAM_END_STATUSES.name(status)
        if status == StreamEndStatus.LOST_PRIVILEGES:
            raise ClientError(f"vbucket {vbucket}: the server ended the stream: {reason} (the user's access to the "
                              "bucket or collection was revoked)", ExitCode.AUTH)
        ends, position = self.progress.ends, self.progress.state.vbuckets[vbucket]
        if status == StreamEndStatus.FILTER_EMPTY:
            self._events.append(Notice(f"vbucket {vbucket}: stream ended ({reason}: every collection it was "
                                       "filtered to was dropped)"))
        elif status in REOPEN_STATUSES and (ends.get(vbucket) is None or position.seqno < ends[vbucket]):
            self._events.append(Notice(f"vbucket {vbucket}: stream ended ({reason}); asking again from "
                                       f"{position.seqno}"))
            self._events.append(Reroute(vbucket))

    # --- the fast paths ------------------------------------------------------------------------------
    def _taken(self, message: Message) -> None:
        """The quiet path's usual road: nothing is written, so a handled message is taken at once."""
        self._handle(message)
        self.commit()

    def _scan(self) -> None:
        """The quiet path: items are counted from their headers, in place; anything else is decoded and
        handled as usual. Positions, acknowledgements and --count are exactly the usual path's."""
        progress = self.progress
        while self._pending and not progress.done:  # read ahead by a call: already decoded
            self._taken(self._pending.popleft())
        if self._shapes is None:
            self._shapes = _SeqnoShapes(self.options.dialect)
        shape = self._shapes.__getitem__
        framer = self.framer
        buf, pos = framer.window()
        n = len(buf)
        streams, half, ts = self.streams, self.half, self.ts
        request, changes, header = REQUEST, CHANGE_OPCODES, HEADER_LENGTH  # locals: read per item
        stop_at = -1 if progress.count is None else progress.count  # --count: the item that ends it
        written: dict[int, list[int]] = {}  # per vbucket, the items counted since the last flush
        items, unacked, vbucket, run = progress.items, self.unacked, -1, [0, 0, 0]
        while pos + header <= n and not progress.done:
            magic, opcode, keylen, extlen, _datatype, _vbucket, body, opaque = _SCAN.unpack_from(buf, pos)
            end = pos + header + body
            if end > n:
                if body > framer.max_body_length:  # never whole: the usual road says what is wrong with it
                    progress.items, self.unacked = items, unacked
                    progress.counted(written, ts)
                    framer.consume(pos)
                    message = self._next()
                    if message is None:
                        return
                    self._taken(message)
                    buf, pos = framer.window()
                    n, items, unacked = len(buf), progress.items, self.unacked
                    continue
                break
            # counted in place only when its by_seqno is where decoding reads it: an item of a declared shape
            # whose extras fit its body; anything else (a cut body) is decoded and handled the usual way
            stream = (streams.get(opaque) if magic == request and opcode in changes and keylen + extlen <= body
                      and shape(opcode << 8 | extlen) else None)
            if stream is None:
                progress.items, self.unacked, vbucket = items, unacked, -1
                progress.counted(written, ts)
                message = decode(buf[pos:end], 0, self.options)
                framer.consume(end)
                self._taken(message)
                buf, pos = framer.window()
                n, items, unacked = len(buf), progress.items, self.unacked
                continue
            seqno = _SEQNO.unpack_from(buf, pos + header)[0]
            if stream.vbucket != vbucket:
                vbucket = stream.vbucket
                run = written.get(vbucket) or written.setdefault(vbucket, [0, seqno, seqno])
            run[0] += 1
            run[2] = seqno
            items += 1
            unacked += end - pos
            if unacked >= half:
                self._send(build.request(Opcode.DCP_BUFFER_ACKNOWLEDGEMENT, bytes_to_ack=unacked))
                unacked = 0
            pos = end
            if items == stop_at:
                progress.done = True
        progress.items, self.unacked = items, unacked
        progress.counted(written, ts)
        framer.consume(pos)

    def _line_runs(self) -> Iterator[Event]:
        """The lines path: plain items (read by the plain reader of their shape, about which the tracker
        has nothing to say, whose value the record shows as text) are given back as the LineMaker's bytes,
        a run at a time, no context object made; anything else is decoded, handled and given back as usual.
        Positions, acknowledgements and --count are exactly the usual path's, and a test holds every line
        to the usual path's record. A run's positions count once it is written (:meth:`commit`)."""
        render, lead_of, plain = self._lines, self._lead, self.tracker.plain_item
        assert render is not None
        assert lead_of is not None
        read = self._readers.read
        progress, framer, options, streams = self.progress, self.framer, self.options, self.streams
        stop_at = -1 if progress.count is None else progress.count
        written = self._written  # per vbucket, the items in this run: [items, first seqno, last seqno]
        while not progress.done:
            while self._pending and not progress.done:  # read ahead by a call: already decoded, handled first
                out = self._handle(self._pending.popleft())
                yield from self._noted()
                if out is not None:
                    yield out
            buf, pos = framer.window()
            n, base = len(buf), framer.offset - pos
            lead = lead_of(self.ts)
            out_lines: list[bytes] = []
            append = out_lines.append
            items, unacked, run, save_at = progress.items, self.unacked, [0, 0, 0], progress.save_at
            last_opaque, stream, declined = -1, None, None
            while True:
                msg = read(buf, pos, n, base, options)
                if msg is None:
                    break
                length = msg.body_end
                line = render.line(msg, lead, None, plain)
                if line is None:
                    declined = msg  # read already: the usual way takes it as it is, never decoded again
                    break
                append(line)
                opaque, seqno = msg.header[7], msg.by_seqno
                assert seqno is not None  # the tracker takes no item without one
                unacked += length
                pos += length
                if opaque != last_opaque:  # items come in runs of one stream
                    last_opaque, stream = opaque, streams.get(opaque)
                    if stream is not None:
                        vbucket = stream.vbucket
                        run = written.get(vbucket) or written.setdefault(vbucket, [0, seqno, seqno])
                if stream is None:  # not one of ours (the usual path writes it and counts it nowhere)
                    if opaque in self._asked:
                        self._unanswered(opaque, str(msg.opcode_name))
                    continue
                run[0] += 1
                run[2] = seqno
                items += 1
                if items == stop_at:
                    progress.done = True
                    break
                if items >= save_at:  # written and saved before more: a kill -9 repeats save_items at most
                    break
            progress.items, self.unacked = items, unacked
            if declined is None:
                framer.consume(pos)
            else:
                framer.consume(pos + declined.body_end)
                self._pending.append(declined)
            if out_lines:
                yield b"".join(out_lines)
                # written (the caller committed): a Ctrl-C only asks the loop to stop, never cuts a write
                if self.unacked >= self.half:
                    self._ack()
            if progress.done or items >= save_at:
                return  # the caller saves, then asks again
            msg = self._next()  # the packet the walk stopped at (read already, or decoded), the usual way
            if msg is None:
                return  # nothing whole left: the caller reads the socket again
            out = self._handle(msg)
            yield from self._noted()
            if out is not None:
                yield out


class RollbackRefusedError(ClientError):
    """--on-rollback fail: the story of the rollback (a notice), then the error (exit 9)."""

    def __init__(self, story: str, message: str) -> None:
        super().__init__(message, ExitCode.ROLLBACK)
        self.story = story
