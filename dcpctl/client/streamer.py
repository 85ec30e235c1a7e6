"""Streaming a bucket: one DCP connection per node, every vbucket from its active node, state kept.

Theory of operation. A seed connection authenticates and reads the cluster map (GET_CLUSTER_CONFIG;
a node without one serves every vbucket itself). Each node that owns wanted vbuckets gets a DCP
connection: SASL, HELLO, SELECT_BUCKET, the high seqnos and failover logs it needs for ``--from`` and
``--until``, DCP_OPEN, the controls. Stream requests for all of its vbuckets are pipelined. Then one loop
reads every connection: noops are answered at once; every stream message counts towards the
flow-control window and is acknowledged when half of it is used (what dcpdrain and gocbcore do);
markers, items and stream ends update the per-vbucket position; items are handed to the caller annotated
exactly as a captured message is (``ts``, ``connection``, ``direction`` and the tracker's fields).
A Rollback answer goes through the rollback engine (``--on-rollback``): follow (explain it, roll the
position back, ask again), fail, or report and leave the vbucket. NotMyVbucket refreshes the map and asks
the right node. A stream ending with StateChanged, Slow or Disconnected is asked again from its position
(unless it was to end now). The position (``--state``) is saved atomically every second, every
``save_items`` items and at the end, after the caller's output is flushed, so a stop and a resume deliver
every item exactly once; a kill -9 repeats at most the items written since the last save. When the output
fails, nothing more is saved: the last save counts only what was flushed before it.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from dcpctl.client import state as state_file
from dcpctl.client.connection import (
    DCP_FEATURES,
    DEFAULT_WINDOW,
    MAX_PORT,
    AddressError,
    ClientError,
    ClientTimeoutError,
    Connection,
    FloodError,
    StatusError,
    TlsOptions,
    join_host,
    queue_limit,
    server_address,
    split_host,
)
from dcpctl.client.state import State, VbucketPosition
from dcpctl.dcp.rollback import (
    END_FOREVER,
    FailoverEntry,
    StreamRequest,
    VbucketState,
    failover_entries,
    needs_rollback,
)
from dcpctl.dcp.sasl import MAX_SCRAM_ITERATIONS
from dcpctl.dcp.session import ConnectionTracker
from dcpctl.errortext import json_error
from dcpctl.exitcode import ExitCode
from dcpctl.protocol import build, grammar
from dcpctl.protocol.constants import (
    MAX_VBUCKETS,
    STREAM_END_STATUSES,
    DcpOpenFlag,
    Magic,
    Opcode,
    Status,
    StreamEndStatus,
)
from dcpctl.protocol.framer import HEADER_LENGTH
from dcpctl.protocol.message import DecodeOptions, Message, decode, item_plan
from dcpctl.protocol.registry import CHANGE_OPCODES, HEADER_LAYOUT, STREAM_OPCODES, Dialect, layout
from dcpctl.render.lines import LineReader, LineReaders

# Plain ints, compared per message (an enum class's attribute is slow to look up).
REQUEST: Final = int(Magic.CLIENT_REQUEST)
NOOP: Final = int(Opcode.DCP_NOOP)
MARKER: Final = int(Opcode.DCP_SNAPSHOT_MARKER)
STREAM_END: Final = int(Opcode.DCP_STREAM_END)
STREAM_REQ: Final = int(Opcode.DCP_STREAM_REQ)
SAVE_EVERY: Final = 1.0  # seconds between state saves while streaming
# Items between state saves at most (--save-items): what a kill -9 can make a resume deliver twice. Each save
# writes and fsyncs every vbucket's position (hundreds of kB for 1024): saving more often would cost a stream
# at full speed more than a few percent of its rate.
SAVE_EVERY_ITEMS: Final = 100_000
WAKE_EVERY: Final = 0.25  # seconds the loop waits for the network at most: how soon a Ctrl-C stop is seen
DEFAULT_BUFFER: Final = DEFAULT_WINDOW  # connection_buffer_size
DEFAULT_NOOP_INTERVAL: Final = 60  # seconds; dcpdrain uses 60 (reference 8.2)
MAX_ROLLBACKS: Final = 30  # per vbucket: a correct negotiation converges in fewer (one per failover entry)
# Stream ends (reference 3.7) after which the vbucket is asked again from where it got to; FilterEmpty (7)
# ends it for good (its collections are gone), LostPrivileges (8) stops dcpctl (exit 7)
REOPEN_STATUSES: Final = frozenset({StreamEndStatus.STATE_CHANGED, StreamEndStatus.DISCONNECTED,
                                    StreamEndStatus.SLOW, StreamEndStatus.BACKFILL_FAIL})
# A vbucket asked again (NotMyVbucket, a reopened stream) this many times in a row without an item is given
# up on: the cluster map keeps pointing at a node that does not have it. The waits double from the first.
MAX_REROUTES: Final = 10
REROUTE_WAIT: Final = 0.1  # seconds before the second try; 0.1 * 2**9 = 51 s before the tenth
_SCAN: Final = HEADER_LAYOUT.prefix("opaque")  # the header up to the opaque: what the quiet path reads
# by_seqno, read at the start of the extras: the quiet path takes only item shapes whose by_seqno is there
_SEQNO: Final = layout(grammar.mutation_extras).field("by_seqno")
_BODY: Final = HEADER_LAYOUT.field("total_body_length")
_BODY_AT: Final = HEADER_LAYOUT.offset("total_body_length")


@dataclass
class StreamOptions:
    bucket: str = "default"
    user: str = "Administrator"
    password: str = ""
    mechanism: str | None = None
    tls: TlsOptions | None = None
    timeout: float = 10.0
    vbuckets: frozenset[int] | None = None
    start: str = "beginning"  # beginning | now | resume | a seqno
    until: str = "forever"  # forever | now | a seqno
    collections: list[int] | None = None
    scope: int | None = None
    stream_id: int | None = None
    no_value: bool = False
    xattrs: bool = False
    controls: dict[str, str] = field(default_factory=dict)
    buffer_size: int = DEFAULT_BUFFER
    noop_interval: int = DEFAULT_NOOP_INTERVAL
    count: int | None = None
    on_rollback: str = "follow"  # follow | fail | report
    state_path: Path | None = None
    save_items: int = SAVE_EVERY_ITEMS  # --state is saved at least every this many items (and every second)
    name: str = ""
    quiet: bool = False  # nobody reads the messages (--summary alone): items are counted from their headers
    # JSON lines are wanted and go here (bytes): plain items are then written from a template in place
    lines: Callable[[bytes], object] | None = None
    max_scram_iterations: int = MAX_SCRAM_ITERATIONS  # a server asking for more is refused (sasl.py)


@dataclass
class _Stream:
    vbucket: int
    opaque: int
    request: StreamRequest
    sent: float  # monotonic time of the request: unanswered past --timeout is an error
    open: bool = False
    ended: bool = False
    rollbacks: int = 0


@dataclass
class _Node:
    conn: Connection
    tracker: ConnectionTracker
    vbuckets: list[int]
    unacked: int = 0
    last_heard: float = 0.0
    lines: LineReaders | None = None  # the JSON-lines path's compiled readers, made on first use
    shapes: _SeqnoShapes | None = None  # the quiet path's item shapes, made on first use


class _SeqnoShapes(dict[int, bool]):
    """``opcode << 8 | extras length`` -> whether decoding reads that item shape's by_seqno from the first 8
    bytes of its extras (a declared item layout, from the decoder's plan); filled as shapes are seen."""

    def __init__(self, dialect: Dialect) -> None:
        super().__init__()
        self.dialect = dialect

    def __missing__(self, shape: int) -> bool:
        plan = item_plan(self.dialect, shape >> 8, shape & 0xFF)
        found = self[shape] = plan is not None and plan[0].seqno_at == 0
        return found


class Streamer:
    """See the module docstring; iterate :meth:`messages`, then call :meth:`close` (also on Ctrl-C)."""

    def __init__(self, address: str, options: StreamOptions, *, notice: Callable[[str], None] = lambda _m: None,
                 tap: Callable[[Connection, bool, bytes], None] | None = None,
                 before_save: Callable[[], None] = lambda: None,
                 before_wait: Callable[[], None] = lambda: None) -> None:
        self.options = options
        self.notice = notice
        self.tap = tap
        self.before_save = before_save
        self.before_wait = before_wait
        default_port = 11207 if options.tls else 11210
        self.seed_host, self.seed_port = split_host(address, default_port)
        self.state = State(options.bucket)
        if options.state_path is not None:
            self.state = state_file.load(options.state_path, options.bucket)
        self.nodes: dict[tuple[str, int], _Node] = {}
        self.streams: dict[tuple[int, int], _Stream] = {}  # (id of node, opaque) -> stream
        self.owner: dict[int, tuple[str, int]] = {}
        self.ends: dict[int, int] = {}
        self.items = 0
        self.stats: dict[int, dict[str, Any]] = {}
        self.started = time.monotonic()
        self.first_ts: float | None = None  # when the first stream message was read (--summary's time 0)
        self._opaque = 0x1000
        self._last_save = time.monotonic()
        self._save_at = options.save_items  # the item count at which the state is next saved
        self._done = False
        self.interrupted = False  # stop() was called
        self.requested = False  # a stream request was sent: from then on a stop closes streams and saves state
        self._prepared: set[int] = set()
        self._reroutes: dict[int, int] = {}  # vbucket -> times asked again since its last item
        self._uncommitted: tuple[VbucketPosition, int] | None = None  # the item handed out, not yet taken
        if "connection_buffer_size" in options.controls:  # the window acks are sent for is the one negotiated
            try:
                options.buffer_size = int(options.controls["connection_buffer_size"])
            except ValueError:
                raise ClientError("--control connection_buffer_size: a number of bytes", ExitCode.USAGE) from None

    # --- topology --------------------------------------------------------------------------------
    def _connect(self, host: str, port: int) -> Connection:
        conn = Connection(host, port, tls=self.options.tls, timeout=self.options.timeout, tap=self._tapped,
                          max_scram_iterations=self.options.max_scram_iterations)
        try:
            conn.bootstrap(self.options.user, self.options.password, self.options.bucket, self.options.mechanism,
                           DCP_FEATURES)
        except BaseException:
            conn.close()
            raise
        return conn

    def _tapped(self, conn: Connection, from_client: bool, data: bytes) -> None:
        if self.tap is not None:
            self.tap(conn, from_client, data)
        node = self.nodes.get((conn.host, conn.port))
        if from_client and node is not None and node.conn is conn:
            node.tracker.observe(decode(data, 0, node.tracker.options()), from_client=True, ts=time.time())

    def _map(self, seed: Connection) -> int:
        """Read the vbucket map; returns the number of vbuckets."""
        count, self.owner = vbucket_map(seed, self.seed_host, self.seed_port, tls=self.options.tls is not None)
        return count

    # --- the stream -----------------------------------------------------------------------------
    def messages(self) -> Iterator[Message]:
        seed = self._connect(self.seed_host, self.seed_port)
        try:
            count = self._map(seed)
        finally:
            seed.close()
        wanted = sorted(self.options.vbuckets if self.options.vbuckets is not None else range(count))
        missing = [vb for vb in wanted if vb not in self.owner]
        if missing:
            raise ClientError(f"vbucket {missing[0]} is not in the cluster map ({count} vbuckets)", ExitCode.USAGE)
        by_node: dict[tuple[str, int], list[int]] = {}
        for vb in wanted:
            by_node.setdefault(self.owner[vb], []).append(vb)
        for address, vbuckets in by_node.items():
            self._open_node(address, vbuckets)
        yield from self._loop()

    def _open_node(self, address: tuple[str, int], vbuckets: list[int]) -> _Node:
        node = self.nodes.get(address)
        if node is None:
            conn = self._connect(*address)
            tracker = ConnectionTracker(DecodeOptions(), known_from_start=True)
            tracker.negotiated(collections=bool(conn.options.collections))  # HELLO came before tracking
            node = _Node(conn, tracker, [], last_heard=time.monotonic())
            self._prepare(node, vbuckets)
            self._dcp_open(node)
            self.nodes[address] = node
        else:
            self._prepare(node, vbuckets)
        for vb in vbuckets:
            if vb not in node.vbuckets:
                node.vbuckets.append(vb)
            self._request(node, vb)
        return node

    def _prepare(self, node: _Node, vbuckets: list[int]) -> None:
        """Positions and end seqnos for these vbuckets (what --from and --until need from the server); a
        vbucket asked again (it moved, its stream ended early) keeps the position it got to."""
        vbuckets = [vb for vb in vbuckets if vb not in self._prepared]
        if not vbuckets:
            return
        self._prepared.update(vbuckets)
        options = self.options
        conn = node.conn
        need_seqnos = options.start == "now" or options.until == "now"
        high: dict[int, int] = {}
        if need_seqnos:
            high = self._high_seqnos(conn)
        for vb in vbuckets:
            position = self.state.vbuckets.get(vb)
            if options.start == "resume" and position is not None:
                pass
            elif options.start in ("beginning", "resume"):
                position = VbucketPosition()
            else:
                log = self._failover_log(conn, vb)
                seqno = high.get(vb, 0) if options.start == "now" else int(options.start)
                position = VbucketPosition(log[0].vbucket_uuid if log else 0, seqno, seqno, seqno, log)
            self.state.vbuckets[vb] = position
            if options.until == "now":
                self.ends[vb] = high.get(vb, 0)
            elif options.until != "forever":
                self.ends[vb] = int(options.until)

    def _high_seqnos(self, conn: Connection) -> dict[int, int]:
        reply = conn.check(Opcode.GET_ALL_VB_SEQNOS)
        return {int(e.vbucket): int(e.seqno) for e in reply.field("vbucket_seqnos") or ()}

    def _failover_log(self, conn: Connection, vb: int) -> list[FailoverEntry]:
        return failover_entries(conn.check(Opcode.GET_FAILOVER_LOG, f"GET_FAILOVER_LOG vbucket {vb}", vbucket=vb))

    def _dcp_open(self, node: _Node) -> None:
        options = self.options
        flags = DcpOpenFlag.PRODUCER | DcpOpenFlag.INCLUDE_DELETE_TIMES
        if options.xattrs:
            flags |= DcpOpenFlag.INCLUDE_XATTRS
        if options.no_value:
            flags |= DcpOpenFlag.NO_VALUE
        name = options.name or f"dcpctl:{os.getpid()}:{len(self.nodes)}"
        node.conn.check(Opcode.DCP_OPEN, key=name.encode(), seqno=0, flags=flags)
        controls = {"enable_noop": "true", "set_noop_interval": str(options.noop_interval),
                    "connection_buffer_size": str(options.buffer_size),
                    "send_stream_end_on_client_close_stream": "true", "enable_expiry_opcode": "true"}
        if options.stream_id is not None:
            controls["enable_stream_id"] = "true"
        controls.update(options.controls)
        for key, value in controls.items():
            node.conn.check(Opcode.DCP_CONTROL, f"DCP_CONTROL {key}={value}", key=key.encode(), value=value.encode())
        # stream data may now come while a call waits (a rollback asks for the failover log): its window
        node.conn.queue_limit = queue_limit(options.buffer_size, node.conn.framer.max_body_length)

    def _request(self, node: _Node, vb: int) -> None:
        position = self.state.vbuckets[vb]
        # Asked even when already at the end: only the server can say whether that history is still its own
        # (a rollback); an end below the start would be Erange, so it is raised to the start.
        end = max(self.ends.get(vb, END_FOREVER), position.seqno)
        snap_start, snap_end = position.resume_snapshot()
        request = StreamRequest(position.seqno, position.vbucket_uuid, snap_start, snap_end, end)
        self._opaque += 1
        self.requested = True
        value = self._value()
        node.conn.send(Opcode.DCP_STREAM_REQ, opaque=self._opaque, vbucket=vb, value=value.encode() if value else b"",
                       flags=0, reserved=0, start_seqno=request.start_seqno, end_seqno=end,
                       vbucket_uuid=request.vbucket_uuid, snap_start_seqno=snap_start, snap_end_seqno=snap_end)
        self.streams[(id(node), self._opaque)] = _Stream(vb, self._opaque, request, time.monotonic())

    def _value(self) -> str | None:
        options = self.options
        value: dict[str, Any] = {}
        if options.stream_id is not None:
            value["sid"] = options.stream_id
        if options.collections:
            value["collections"] = [f"{c:x}" for c in options.collections]
        elif options.scope is not None:
            value["scope"] = f"{options.scope:x}"
        return json.dumps(value, separators=(",", ":")) if value else None

    def _active(self) -> bool:
        return any(not s.ended for s in self.streams.values())

    def _loop(self) -> Iterator[Message]:
        selector = selectors.DefaultSelector()
        registered: set[int] = set()
        dead_after = 2.5 * self.options.noop_interval
        quiet = self.options.quiet and self.tap is None
        lines = self.options.lines is not None and self.tap is None
        try:
            while self._active() and not self._done:
                for node in list(self.nodes.values()):
                    if id(node) not in registered:
                        selector.register(node.conn.sock, selectors.EVENT_READ, node)
                        registered.add(id(node))
                ready = [n for n in self.nodes.values()
                         if (n.conn.pending if quiet else n.conn.buffered()) or _tls_pending(n.conn)]
                if not ready:
                    self.before_wait()  # the output reaches its reader before dcpctl waits for the network
                    ready = [key.data for key, _ in selector.select(WAKE_EVERY)]
                now = time.monotonic()
                for node in ready:  # one turn each: what one read brought, so no connection starves the rest
                    if quiet or not node.conn.buffered():
                        node.conn.receive(0.0)
                    node.last_heard = now
                    if quiet:
                        self._scan(node)
                        continue
                    if lines:
                        yield from self._lines(node)
                        continue
                    while not self._done:
                        msg = node.conn.take()
                        if msg is None:
                            break
                        out = self._handle(node, msg)
                        if out is not None:
                            yield out
                            # the caller asked for the next message: this one is written, its position counts
                            self._commit(out)
                self._check_deadlines(now, dead_after)
                if now - self._last_save > SAVE_EVERY or self.items >= self._save_at:
                    self.save()
        finally:
            selector.close()

    def _check_deadlines(self, now: float, dead_after: float) -> None:
        """A node silent past the noop deadline is dead; a stream request unanswered past --timeout is an error
        (the server's noops keep the connection alive, so only the request's own deadline catches it)."""
        for node in self.nodes.values():
            if now - node.last_heard > dead_after:
                raise ClientError(f"{node.conn.label}: nothing received for {dead_after:g} s, noops included: "
                                  "the connection is dead", ExitCode.CONNECTION)
        timeout = self.options.timeout
        for stream in self.streams.values():
            if not stream.open and not stream.ended and now - stream.sent > timeout:
                raise ClientTimeoutError(f"no answer to the stream request for vbucket {stream.vbucket} within "
                                         f"{timeout:g} s (--timeout)")

    def _commit(self, _msg: Message) -> None:
        """The caller took the message (it asks for the next one after writing it): an item's seqno is now
        where its vbucket got to, which --state saves. Committed only now, a stop between receiving an item
        and writing it resumes from before it, so it is written exactly once."""
        pending = self._uncommitted
        if pending is not None:
            self._uncommitted = None
            position, seqno = pending
            position.seqno = seqno
        if self.items >= self._save_at:  # every item handed out so far is written: a save counts them all
            self.save()

    def _scan(self, node: _Node) -> None:
        """The quiet path: items are counted from their headers, in place; anything else is decoded and
        handled as usual. Positions, acknowledgements and --count are exactly the usual path's."""
        conn = node.conn
        while conn.pending and not self._done:  # read ahead by a call(): already decoded
            self._taken(node, conn.pending.popleft())
        if node.shapes is None:
            node.shapes = _SeqnoShapes(conn.options.dialect)
        shape = node.shapes.__getitem__
        buf, pos = conn.framer.window()
        n = len(buf)
        streams, key, half = self.streams, id(node), self.options.buffer_size // 2
        request, changes, header = REQUEST, CHANGE_OPCODES, HEADER_LENGTH  # locals: read per item
        stop_at = -1 if self.options.count is None else self.options.count  # --count: the item that ends it
        written: dict[int, list[int]] = {}  # per vbucket, the items counted since the last flush
        items, unacked, vbucket, run = self.items, node.unacked, -1, [0, 0, 0]
        while pos + header <= n and not self._done:
            magic, opcode, keylen, extlen, _datatype, _vbucket, body, opaque = _SCAN.unpack_from(buf, pos)
            end = pos + header + body
            if end > n:
                break
            # counted in place only when its by_seqno is where decoding reads it: an item of a declared shape
            # whose extras fit its body; anything else (a cut body) is decoded and handled the usual way
            stream = (streams.get((key, opaque)) if magic == request and opcode in changes and keylen + extlen <= body
                      and shape(opcode << 8 | extlen) else None)
            if stream is None:
                self.items, node.unacked, vbucket = items, unacked, -1
                self._counted(written, conn.read_ts)
                message = decode(buf[pos:end], 0, conn.options)
                conn.framer.consume(end)
                self._taken(node, message)
                # handling may have called the server (a rollback asks for the failover log): what that
                # read ahead was decoded into ``pending`` and comes before the rest of the buffer
                while conn.pending and not self._done:
                    self._taken(node, conn.pending.popleft())
                buf, pos = conn.framer.window()
                n, items, unacked = len(buf), self.items, node.unacked
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
                conn.send(Opcode.DCP_BUFFER_ACKNOWLEDGEMENT, bytes_to_ack=unacked)
                unacked = 0
            pos = end
            if items == stop_at:
                self._done = True
        self.items, node.unacked = items, unacked
        self._counted(written, conn.read_ts)
        conn.framer.consume(pos)

    def _taken(self, node: _Node, message: Message) -> None:
        """The quiet path's usual road: nothing is written, so a handled message is taken at once."""
        self._handle(node, message)
        self._commit(message)

    def _counted(self, written: dict[int, list[int]], ts: float) -> None:
        """Items taken in place (written, or counted by the quiet path), per vbucket [items, first seqno, last
        seqno], read at ``ts``: their vbuckets' positions and counts move on, and ``written`` is emptied."""
        positions, stats_of, reroutes = self.state.vbuckets, self.stats, self._reroutes
        for vbucket, (count, first, last) in written.items():
            positions[vbucket].seqno = last
            reroutes.pop(vbucket, None)
            stats = stats_of.get(vbucket)
            if stats is None:
                stats = stats_of[vbucket] = _new_stats(first, ts)
            elif stats["first_seqno"] is None:
                stats["first_seqno"] = first
            stats["items"] += count
            stats["last_seqno"] = last
            stats["last_ts"] = ts
        written.clear()

    def _lines(self, node: _Node) -> Iterator[Message]:
        """The JSON-lines path: plain items (about which the compiled line reader of their shape and the
        tracker have nothing to say, whose value the record shows as text) are written in place as lines
        (``itemreader``); anything else is decoded, handled and yielded for the output as usual. Positions,
        acknowledgements and --count are exactly the usual path's, and a test holds every line to the usual
        path's record. An item's position counts once its line is written."""
        conn, tracker, write = node.conn, node.tracker, self.options.lines
        assert write is not None
        streams, stop_at = self.streams, -1 if self.options.count is None else self.options.count
        half, key = self.options.buffer_size // 2, id(node)
        if node.lines is None:
            node.lines = LineReaders({"ts": None, "connection": conn.connection, "direction": "server>client"},
                                     ("ts",), conn.framer.max_body_length)
        readers, plain = node.lines, tracker.plain_item
        reader: LineReader | None = None
        # per vbucket, the items written in this window: [items, first seqno, last seqno]
        written: dict[int, list[int]] = {}
        while not self._done:
            while conn.pending and not self._done:  # read ahead by a call(): already decoded, handled first
                out = self._handle(node, conn.pending.popleft())
                if out is not None:
                    yield out
                    self._commit(out)
            buf, pos = conn.framer.window()
            n, base, options = len(buf), conn.framer.offset - pos, conn.options
            lead = (orjson.dumps(conn.read_ts),)
            out_lines: list[bytes] = []
            append = out_lines.append
            items, unacked, run, save_at = self.items, node.unacked, [0, 0, 0], self._save_at
            last_opaque, stream = -1, None
            while True:
                got = reader(buf, pos, n, lead, base, plain) if reader is not None else None
                if got is None:
                    shaped = readers.at(buf, pos, n, options)
                    if shaped is None or shaped is reader:
                        break
                    reader = shaped
                    got = reader(buf, pos, n, lead, base, plain)
                    if got is None:
                        break
                end, opaque, seqno, line = got
                append(line)
                unacked += end - pos
                pos = end
                if opaque != last_opaque:  # items come in runs of one stream
                    last_opaque, stream = opaque, streams.get((key, opaque))
                    if stream is not None:
                        vbucket = stream.vbucket
                        run = written.get(vbucket) or written.setdefault(vbucket, [0, seqno, seqno])
                if stream is None:  # not one of ours (the usual path writes it and counts it nowhere)
                    continue
                run[0] += 1
                run[2] = seqno
                items += 1
                if items == stop_at:
                    self._done = True
                    break
                if items >= save_at:  # written and saved before more: a kill -9 repeats save_items at most
                    break
            self.items, node.unacked = items, unacked
            if out_lines:
                write(b"".join(out_lines))
                # written: the positions count (a Ctrl-C only asks the loop to stop, never cuts a write)
                self._counted(written, conn.read_ts)
                if node.unacked >= half:
                    conn.send(Opcode.DCP_BUFFER_ACKNOWLEDGEMENT, bytes_to_ack=node.unacked)
                    node.unacked = 0
            conn.framer.consume(pos)
            if self._done:
                return
            if items >= save_at:
                self.save()
                continue
            msg = self._one(conn)  # the packet the walk stopped at, the usual way
            if msg is None:
                return  # nothing whole left: the caller reads the socket again
            out = self._handle(node, msg)
            if out is not None:
                yield out
                self._commit(out)

    @staticmethod
    def _one(conn: Connection) -> Message | None:
        """The next whole packet in the connection's buffer, decoded (None when there is none)."""
        buf, pos = conn.framer.window()
        if len(buf) - pos < HEADER_LENGTH:
            return None
        total = HEADER_LENGTH + _BODY.unpack_from(buf, pos + _BODY_AT)[0]
        if total > HEADER_LENGTH + conn.framer.max_body_length:
            return conn.take()  # the framer's own checks say what is wrong with it
        if len(buf) - pos < total:
            return None
        base = conn.framer.offset - pos
        conn.framer.consume(pos + total)
        return decode(buf[pos:pos + total], base + pos, conn.options)

    def _handle(self, node: _Node, msg: Message) -> Message | None:
        """Act on one message; returns it when it is for the output (stream data), else None."""
        opcode = msg.opcode
        if self.first_ts is None:
            self.first_ts = node.conn.read_ts
        if msg.is_response:
            node.tracker.observe(msg, from_client=False, ts=node.conn.read_ts)
            if opcode == STREAM_REQ:
                self._stream_response(node, msg)
            return None
        if opcode == NOOP:
            node.tracker.observe(msg, from_client=False, ts=node.conn.read_ts)
            node.conn.send_bytes(build.response(Opcode.DCP_NOOP, opaque=msg.opaque))
            return None
        node.unacked += len(msg.raw)
        if node.unacked >= self.options.buffer_size // 2:
            node.conn.send(Opcode.DCP_BUFFER_ACKNOWLEDGEMENT, bytes_to_ack=node.unacked)
            node.unacked = 0
        stream = self.streams.get((id(node), msg.opaque))
        ts = node.conn.read_ts  # when its bytes were read, as a capture's ts is when they were seen
        note = node.tracker.observe(msg, from_client=False, ts=ts)
        msg.annotate({"ts": ts, "connection": node.conn.connection, "direction": "server>client"}, note.fields,
                     note.diagnostics)
        if stream is None or opcode not in STREAM_OPCODES:
            return msg
        vbucket = stream.vbucket
        position = self.state.vbuckets[vbucket]
        if opcode == MARKER:
            start, end = msg.field("snap_start_seqno"), msg.field("snap_end_seqno")  # extras, or a v2.x value
            position.snap_start_seqno = position.seqno if start is None else int(start)
            position.snap_end_seqno = position.seqno if end is None else int(end)
            return msg
        if opcode == STREAM_END:
            self._stream_end(node, stream, int((msg.extras or {}).get("stream_end_status", 0)))
            return msg
        seqno = msg.by_seqno
        if seqno is not None:
            self._uncommitted = (position, seqno)  # see _commit
            self._reroutes.pop(vbucket, None)
        if opcode in CHANGE_OPCODES:
            self.items += 1
            stats = self.stats.get(vbucket)
            if stats is None:
                stats = self.stats[vbucket] = _new_stats(None, ts)
            stats["items"] += 1
            stats["last_ts"] = ts
            if seqno is not None:  # an item cut short has none: it is counted, its seqno is not made up
                if stats["first_seqno"] is None:
                    stats["first_seqno"] = seqno
                stats["last_seqno"] = seqno
            if self.options.count is not None and self.items >= self.options.count:
                self._done = True
        return msg

    def _stream_response(self, node: _Node, msg: Message) -> None:
        stream = self.streams.get((id(node), msg.opaque))
        if stream is None:
            return
        status = msg.status
        vb = stream.vbucket
        position = self.state.vbuckets[vb]
        if status == Status.SUCCESS:
            stream.open = True
            log = failover_entries(msg)
            if log:
                position.failover_log = log
                position.vbucket_uuid = log[0].vbucket_uuid
            return
        del self.streams[(id(node), msg.opaque)]
        if status == Status.ROLLBACK:
            self._rollback(node, stream, int(msg.field("rollback_seqno") or 0))
        elif status == Status.NOT_MY_VBUCKET:
            self.notice(f"vbucket {vb}: {node.conn.label} answered NotMyVbucket; reading the cluster map again")
            self._reroute(vb)
        else:
            raise StatusError(f"stream request for vbucket {vb} on {node.conn.label}", str(msg.status_name))

    def _rollback(self, node: _Node, stream: _Stream, seqno: int) -> None:
        vb = stream.vbucket
        position = self.state.vbuckets[vb]
        request = stream.request
        why = ""
        try:
            log = self._failover_log(node.conn, vb)
            high = self._high_seqnos(node.conn).get(vb)
        except FloodError:
            raise  # the connection is given up: nothing to explain the rollback with, or to retry on
        except ClientError:
            log, high = [], None
        if high is not None and vb in self.ends and self.options.until == "now":
            # --until now: the history the start's high seqno belonged to is gone; the vbucket's own now ends it
            self.ends[vb] = min(self.ends[vb], high)
        if log:
            decision = needs_rollback(request, VbucketState(tuple(log), high if high is not None else
                                                            max(request.start_seqno, request.snap_end, log[0].seqno)))
            # each a sentence of its own: the notice goes on with "Retrying ..." or "Not following it ..."
            why = f" [{decision.rule}] {decision.reason}." if decision.rollback_seqno == seqno else \
                " The server's purge or high seqno decided: the failover log alone does not explain it."
        story = (f"vbucket {vb}: the server asks to roll back from {request.start_seqno} "
                 f"(uuid {request.vbucket_uuid}, snapshot {request.snap_start}-{request.snap_end}) to {seqno}.{why}")
        policy = self.options.on_rollback
        if policy == "fail":
            self.notice(story)
            raise ClientError(f"vbucket {vb}: rollback to {seqno} required (--on-rollback fail)", ExitCode.ROLLBACK)
        if policy == "report":
            self.notice(story + " Not following it (--on-rollback report): the vbucket is left out.")
            return
        stream.rollbacks += 1
        if stream.rollbacks > MAX_ROLLBACKS:
            raise ClientError(f"vbucket {vb}: still asked to roll back after {MAX_ROLLBACKS} rounds",
                              ExitCode.ROLLBACK)
        position.rolled_back(seqno)
        self.notice(story + f" Retrying from {position.seqno} with uuid {position.vbucket_uuid}.")
        self._request(node, vb)
        new = self.streams.get((id(node), self._opaque))
        if new is not None:
            new.rollbacks = stream.rollbacks

    def _stream_end(self, node: _Node, stream: _Stream, status: int) -> None:
        stream.ended = True
        vb = stream.vbucket
        reason = STREAM_END_STATUSES.name(status)
        if status == StreamEndStatus.LOST_PRIVILEGES:
            raise ClientError(f"vbucket {vb}: the server ended the stream: {reason} (the user's access to the bucket "
                              "or collection was revoked)", ExitCode.AUTH)
        if status == StreamEndStatus.FILTER_EMPTY:
            self.notice(f"vbucket {vb}: stream ended ({reason}: every collection it was filtered to was dropped)")
        elif status in REOPEN_STATUSES and (self.ends.get(vb) is None
                                            or self.state.vbuckets[vb].seqno < self.ends[vb]):
            self.notice(f"vbucket {vb}: stream ended ({reason}); asking again from {self.state.vbuckets[vb].seqno}")
            self._reroute(vb)

    def _reroute(self, vb: int) -> None:
        """Ask a vbucket again, from the node the cluster map now says owns it; after a few tries without an
        item, waiting longer each time, give up (MAX_REROUTES)."""
        tries = self._reroutes[vb] = self._reroutes.get(vb, 0) + 1
        if tries > MAX_REROUTES:
            raise ClientError(f"vbucket {vb}: asked again {MAX_REROUTES} times without an item (NotMyVbucket or "
                              "ended streams): the cluster map keeps pointing at a node that does not serve it",
                              ExitCode.PROTOCOL)
        if tries > 1:
            self.before_wait()
            time.sleep(REROUTE_WAIT * 2 ** (tries - 2))
        any_node = next(iter(self.nodes.values()))
        seed = self._connect(any_node.conn.host, any_node.conn.port)
        try:
            self._map(seed)
        finally:
            seed.close()
        address = self.owner.get(vb)
        if address is None:
            raise ClientError(f"vbucket {vb} is not in the cluster map any more", ExitCode.PROTOCOL)
        self._open_node(address, [vb])

    # --- the end ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop at the next safe point (Ctrl-C): between messages, never inside a write."""
        self.interrupted = True
        self._done = True

    def save(self) -> None:
        """Flush the caller's output (``before_save``), then save the positions: what they count is written."""
        if self.options.state_path is not None:
            self.before_save()
            state_file.save(self.options.state_path, self.state)
        self._last_save = time.monotonic()
        self._save_at = self.items + self.options.save_items

    def close(self, *, save: bool = True) -> None:
        """Save the position (unless the output or the state file failed: then the last save stands, which
        counts only what was written before it), close the open streams (DCP_CLOSE_STREAM, best effort: the
        server may already be gone) and every connection (after Ctrl-C too)."""
        try:
            if save:
                self.save()
        finally:
            for (key, _), stream in self.streams.items():
                node = next((n for n in self.nodes.values() if id(n) == key), None)
                if node is not None and stream.open and not stream.ended:
                    with contextlib.suppress(ClientError):
                        node.conn.send(Opcode.DCP_CLOSE_STREAM, vbucket=stream.vbucket)
            for node in self.nodes.values():
                node.conn.close()

    def summary(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Per vbucket (in order) and in total: items, seqno range, items a second over the whole run, and
        when the first and last items were read, in seconds since the first stream message."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        zero = self.first_ts or 0.0

        def since(ts: float | None) -> float | None:
            return None if ts is None else max(ts - zero, 0.0)

        rows = [{"vbucket": vb, "items": stats["items"], "first_seqno": stats["first_seqno"],
                 "last_seqno": stats["last_seqno"], "rate": round(stats["items"] / elapsed, 1),
                 "first_offset": since(stats["first_ts"]), "last_offset": since(stats["last_ts"])}
                for vb, stats in sorted(self.stats.items())]
        total = sum(stats["items"] for stats in self.stats.values())
        firsts = [row["first_offset"] for row in rows if row["first_offset"] is not None]
        lasts = [row["last_offset"] for row in rows if row["last_offset"] is not None]
        return rows, {"vbucket": "total", "items": total, "rate": round(total / elapsed, 1),
                      "first_offset": min(firsts, default=None), "last_offset": max(lasts, default=None)}


def _new_stats(first_seqno: int | None, ts: float) -> dict[str, Any]:
    """A vbucket's --summary counts, from its first item (read at ``ts``)."""
    return {"items": 0, "first_seqno": first_seqno, "last_seqno": None, "first_ts": ts, "last_ts": ts}


class ConfigError(ClientError):
    """The server's cluster map is not one (exit 8: the server's fault, whatever the command line)."""


def _config_of(raw: bytes, host: str, label: str) -> dict[str, Any]:
    """GET_CLUSTER_CONFIG's value parsed and its types checked: a dict whose ``vBucketServerMap`` holds a
    ``serverList`` of strings and a ``vBucketMap`` of lists of integers, and whose ``nodesExt`` (if any) is a
    list. ``$HOST`` stands for the node that answered (as an address: an IPv6 one in brackets)."""
    def bad(why: str) -> ConfigError:
        return ConfigError(f"{label}: the server's cluster config (GET_CLUSTER_CONFIG) {why}")

    try:
        config = orjson.loads(raw.replace(b"$HOST", join_host(host, 0).rsplit(":", 1)[0].encode()))
    except orjson.JSONDecodeError as exc:
        raise ConfigError(json_error(f"{label}: the server's cluster config (GET_CLUSTER_CONFIG)", exc)) from None
    if not isinstance(config, dict):
        raise bad("is not a JSON object")
    server_map = config.get("vBucketServerMap", {})
    if not isinstance(server_map, dict):
        raise bad("has a vBucketServerMap that is not an object")
    servers, vbmap = server_map.get("serverList", []), server_map.get("vBucketMap", [])
    if not isinstance(servers, list) or not all(isinstance(s, str) for s in servers):
        raise bad("has a serverList that is not a list of HOST:PORT strings")
    if not isinstance(vbmap, list) or not all(
            isinstance(row, list) and all(type(i) is int for i in row) for row in vbmap):
        raise bad("has a vBucketMap that is not a list of lists of server indexes")
    if len(vbmap) > MAX_VBUCKETS:
        raise bad(f"maps {len(vbmap)} vbuckets (at most {MAX_VBUCKETS})")
    if not isinstance(config.get("nodesExt", []), list):
        raise bad("has a nodesExt that is not a list")
    try:
        for entry in servers:
            server_address(entry)
    except AddressError as exc:
        raise bad(f"lists a server {exc!s}") from None
    return config


def vbucket_map(seed: Connection, host: str, port: int, *, tls: bool) -> tuple[int, dict[int, tuple[str, int]]]:
    """(number of vbuckets, vbucket -> address of its active node) from GET_CLUSTER_CONFIG, or, from a node
    without one, every vbucket GET_ALL_VB_SEQNOS lists on that node. A map that is not one is a
    :class:`ConfigError`."""
    reply = seed.call(Opcode.GET_CLUSTER_CONFIG)
    if reply.status == Status.SUCCESS:
        config = _config_of(reply.value, host, seed.label)
        servers = kv_servers(config, host, port, tls=tls)
        vbmap = config.get("vBucketServerMap", {}).get("vBucketMap", [])
        owner = {vb: servers[row[0]] for vb, row in enumerate(vbmap) if row and 0 <= row[0] < len(servers)}
        if vbmap:
            return len(vbmap), owner
    entries = seed.check(Opcode.GET_ALL_VB_SEQNOS).field("vbucket_seqnos") or ()
    owner = {int(e.vbucket): (host, port) for e in entries}
    return max(owner, default=-1) + 1, owner


def kv_servers(config: dict[str, Any], host: str, port: int, *, tls: bool) -> list[tuple[str, int]]:
    """The data nodes of a cluster map's ``vBucketServerMap.serverList``, in its order (the vBucketMap's
    indexes), as (host, port) to connect to: with TLS, each node's ``kvSSL`` port from ``nodesExt``. A
    ``nodesExt`` entry is the node whose hostname (absent: the node that answered, ``host``) and ``kv`` port
    are the server's; its list also holds nodes without the data service, in an order of its own. A
    server no entry matches takes the ``kvSSL`` of the entry at its index (older configs list the nodes
    alike), else keeps its port. Entries of the wrong types are passed over (see :func:`_config_of`)."""
    servers = [server_address(s) for s in config.get("vBucketServerMap", {}).get("serverList", [])]
    if not tls:
        return servers
    nodes = [n for n in config.get("nodesExt", []) if isinstance(n, dict)]

    def services_of(node: dict[str, Any]) -> dict[str, Any]:
        services = node.get("services", {})
        return services if isinstance(services, dict) else {}

    tls_port: dict[tuple[str, int], int] = {}
    for node in nodes:
        services = services_of(node)
        name = node.get("hostname") or host
        if isinstance(name, str) and _is_port(services.get("kv")) and _is_port(services.get("kvSSL")):
            tls_port[(name.removeprefix("[").removesuffix("]"), services["kv"])] = services["kvSSL"]
    found = []
    for i, (server_host, server_port) in enumerate(servers):
        by_index = services_of(nodes[i]).get("kvSSL") if i < len(nodes) else None
        secure = tls_port.get((server_host, server_port)) or (by_index if _is_port(by_index) else None)
        found.append((server_host, secure or server_port))
    return found


def _is_port(value: object) -> bool:
    return type(value) is int and 0 < value <= MAX_PORT


def _tls_pending(conn: Connection) -> bool:
    pending = getattr(conn.sock, "pending", None)
    return bool(pending()) if callable(pending) else False
