"""Streaming a bucket: one DCP connection per node, every vbucket from its active node, state kept.

Theory of operation. A seed connection authenticates and reads the cluster map (GET_CLUSTER_CONFIG;
a node without one serves every vbucket itself). Each node that owns wanted vbuckets gets a DCP
connection: SASL, HELLO, SELECT_BUCKET, the high seqnos and failover logs it needs for ``--from`` and
``--until``, DCP_OPEN, the controls; then a sans-IO :class:`~dcpctl.client.consumer.Consumer` takes the
connection's protocol over (flow control, noops, positions, ``--count``, the rollback policy, stream ends)
and the stream requests for all of its vbuckets are pipelined. This module keeps the sockets, TLS and the
topology, and one loop: it reads every connection, feeds each consumer what its socket gave, sends what
the consumer queued, and hands the caller the consumer's stream data (messages with their context as a
captured message has it, or runs of lines the caller's LineMaker rendered). The consumer's requests for I/O are met
here: a rollback is explained with the failover log and high seqno the server has now, and a vbucket
answered NotMyVbucket, whose stream ended early, or that a node's high seqnos do not list, is asked again
from the node the cluster map now names (with ``--until now``, its end lowered to that node's high seqno);
a retry that has to wait is due at a deadline the loop keeps, so the other vbuckets stream on and a stop is
seen meanwhile.
The position (``--state``) is saved atomically every second, every ``save_items`` items and at the
end, after the caller's output is flushed, so a stop and a resume deliver every item exactly once; a
kill -9 repeats at most the items written since the last save. When the output fails, nothing more is
saved: the last save counts only what was flushed before it.
"""

from __future__ import annotations

import contextlib
import math
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
from dcpctl.client.consumer import (
    Consumer,
    LineMaker,
    Notice,
    Progress,
    Reroute,
    RollbackAsked,
    RollbackRefusedError,
)
from dcpctl.client.state import State, VbucketPosition
from dcpctl.dcp.observed import Observed
from dcpctl.dcp.rollback import FailoverEntry, failover_entries
from dcpctl.dcp.sasl import MAX_SCRAM_ITERATIONS
from dcpctl.errortext import json_error
from dcpctl.exitcode import ExitCode
from dcpctl.protocol import stream_request_value
from dcpctl.protocol.constants import MAX_VBUCKETS, OPCODES, VBUCKET_STATES, DcpOpenFlag, Opcode, Status

SAVE_EVERY: Final = 1.0  # seconds between state saves while streaming
# Items between state saves at most (--save-items): what a kill -9 can make a resume deliver twice. Each save
# writes and fsyncs every vbucket's position (hundreds of kB for 1024): saving more often would cost a stream
# at full speed more than a few percent of its rate.
SAVE_EVERY_ITEMS: Final = 100_000
WAKE_EVERY: Final = 0.25  # seconds the loop waits for the network at most: how soon a Ctrl-C stop is seen
DEFAULT_BUFFER: Final = DEFAULT_WINDOW  # connection_buffer_size
DEFAULT_NOOP_INTERVAL: Final = 60  # seconds; dcpdrain uses 60 (reference 8.2)
# v2.2 markers give a disk snapshot's purge seqno, which a resume sends back in its stream request: without
# it, a start below the purge seqno rolls back to 0 even when the server has purged nothing since (8.0+).
MAX_MARKER_VERSION: Final = "2.2"
# The controls dcpctl asks for on a Collections connection unless --control names them; each has one value the
# server takes, so --control NAME=false is how a user keeps dcpctl from asking (legacy markers or events).
ASKED_UNLESS_FALSE: Final = frozenset({"max_marker_version", "flatbuffers_system_events"})
# A vbucket asked again (NotMyVbucket, not listed, a stream that ended) this many times in a row without its
# stream opening is given up on: the cluster map keeps pointing at a node that does not have it. A stream that
# opens starts the count again: a vbucket that moves often (rebalances, failovers) is no fault of the map's.
MAX_REROUTES: Final = 10
ACTIVE: Final = VBUCKET_STATES.code_of["active"]  # GET_ALL_VB_SEQNOS's state filter for active vbuckets
# Seconds before the second try, doubling: 25.6 s before the tenth, 51 s in all, time for a rebalance's map to
# reach every node. Only that vbucket waits (a deadline the loop keeps), never the others or a stop.
REROUTE_WAIT: Final = 0.1
# The longest a vbucket waits before it is asked again: a stream that opens and then ends again, time after
# time, with nothing delivered in between (a faulty or overloaded server) is followed for ever, but with the
# same doubling wait from its second time on, up to this, not at once each time: no spin on a server's fault.
MAX_REROUTE_WAIT: Final = REROUTE_WAIT * 2 ** (MAX_REROUTES - 2)


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
    noop_interval: float = DEFAULT_NOOP_INTERVAL  # seconds; --control set_noop_interval, if given, replaces it
    count: int | None = None
    on_rollback: str = "follow"  # follow | fail | report
    state_path: Path | None = None
    save_items: int = SAVE_EVERY_ITEMS  # --state is saved at least every this many items (and every second)
    name: str = ""
    quiet: bool = False  # nobody reads the messages (--summary alone): items are counted from their headers
    # the caller renders plain items itself, straight from their bytes: they are handed out as its lines
    line_maker: LineMaker | None = None
    max_scram_iterations: int = MAX_SCRAM_ITERATIONS  # a server asking for more is refused (sasl.py)
    # collections and a scope named rather than numbered: asked of the seed node (COLLECTIONS_GET_ID and
    # COLLECTIONS_GET_SCOPE_ID), their ids then join ``collections`` or become ``scope``
    collection_paths: tuple[str, ...] = ()
    scope_path: str | None = None


@dataclass
class _Node:
    conn: Connection
    consumer: Consumer
    last_heard: float = 0.0


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
        state = State(options.bucket)
        if options.state_path is not None:
            state = state_file.load(options.state_path, options.bucket)
        self.progress = Progress(state, options.count, options.save_items)
        self.nodes: dict[tuple[str, int], _Node] = {}
        self.owner: dict[int, tuple[str, int]] = {}
        self.started = time.monotonic()
        self._last_save = time.monotonic()
        self.interrupted = False  # stop() was called
        self.requested = False  # a stream request was sent: from then on a stop closes streams and saves state
        self._prepared: set[int] = set()
        self._retry_at: dict[int, float] = {}  # vbucket -> when it is asked again (monotonic clock)
        self._tidied = False  # a save removed the stale temporary files of the state file
        self._value = _stream_value(options)
        # a tap sees every message: the fast paths, which decode none, are for when nobody else looks
        self._quiet = options.quiet and tap is None
        self._lines = options.line_maker if tap is None else None
        if "connection_buffer_size" in options.controls:  # the window acks are sent for is the one negotiated
            try:
                options.buffer_size = int(options.controls["connection_buffer_size"])
            except ValueError:
                raise ClientError("--control connection_buffer_size: a number of bytes", ExitCode.USAGE) from None
        if "set_noop_interval" in options.controls:  # the dead-connection check waits for the noops asked for
            interval = noop_interval_of(options.controls["set_noop_interval"])
            if interval is None:
                raise ClientError("--control set_noop_interval: a number of seconds above 0", ExitCode.USAGE)
            options.noop_interval = interval

    @property
    def state(self) -> State:
        return self.progress.state

    # --- topology --------------------------------------------------------------------------------
    def _connect(self, host: str, port: int) -> Connection:
        conn = Connection(host, port, tls=self.options.tls, timeout=self.options.timeout, tap=self.tap,
                          max_scram_iterations=self.options.max_scram_iterations)
        try:
            conn.bootstrap(self.options.user, self.options.password, self.options.bucket, self.options.mechanism,
                           DCP_FEATURES)
        except BaseException:
            conn.close()
            raise
        return conn

    def _map(self, seed: Connection) -> int:
        """Read the vbucket map; returns the number of vbuckets."""
        count, self.owner = vbucket_map(seed, self.seed_host, self.seed_port, tls=self.options.tls is not None)
        return count

    def _resolve(self, seed: Connection) -> None:
        """The ids of the collections and the scope named (the manifest is the cluster's: one node's answer
        holds for all), then the stream requests' value made again with them."""
        options = self.options
        if not options.collection_paths and options.scope_path is None:
            return
        if not seed.options.collections:
            raise ClientError(f"{seed.label} did not grant HELLO Collections: collections and scopes cannot be "
                              "named", ExitCode.PROTOCOL)
        ids = [*(options.collections or []), *(
            self._named_id(seed, Opcode.COLLECTIONS_GET_ID, "--collections", path, "collection_id")
            for path in options.collection_paths)]
        if ids:
            options.collections = ids
        if options.scope_path is not None:
            options.scope = self._named_id(seed, Opcode.COLLECTIONS_GET_SCOPE_ID, "--scope", options.scope_path,
                                           "scope_id")
        self._value = _stream_value(options)

    @staticmethod
    def _named_id(seed: Connection, opcode: int, option: str, path: str, field: str) -> int:
        """The id the server gives a collection's or scope's path; a name it does not know is the command
        line's error (as a vbucket the map does not have), any other answer the protocol's."""
        reply = seed.call(opcode, value=path.encode())
        found = reply.field(field)
        if reply.status == Status.SUCCESS and found is not None:
            return int(found)
        if reply.status in (Status.UNKNOWN_COLLECTION, Status.UNKNOWN_SCOPE):
            what = "collection" if reply.status == Status.UNKNOWN_COLLECTION else "scope"
            raise ClientError(f"{option} {path}: no such {what} on {seed.label}", ExitCode.USAGE)
        raise StatusError(f"{option} {path} ({OPCODES.name(opcode)})", str(reply.status_name))

    # --- the stream -----------------------------------------------------------------------------
    def messages(self) -> Iterator[Observed | bytes]:
        """Stream data, with its context as a captured message has it; runs of plain items as the LineMaker's lines
        when there is one (bytes). The caller asks for the next once it has written the last."""
        seed = self._connect(self.seed_host, self.seed_port)
        try:
            count = self._map(seed)
            self._resolve(seed)
        finally:
            seed.close()
        wanted = sorted(self.options.vbuckets if self.options.vbuckets is not None else range(count))
        wanted, unserved = served(wanted, count, self.owner)
        if unserved:
            self.notice(f"{unserved}: left out")
        by_node: dict[tuple[str, int], list[int]] = {}
        for vb in wanted:
            by_node.setdefault(self.owner[vb], []).append(vb)
        for address, vbuckets in by_node.items():
            self._open_node(address, vbuckets)
        yield from self._loop()

    def _open_node(self, address: tuple[str, int], vbuckets: list[int]) -> None:
        """Ask the node at ``address`` for these vbuckets' streams (connecting first if need be); a vbucket it
        does not list has no high seqno there for --from/--until now: it is not the node's, so the map is read
        again for it (bounded as every vbucket asked again is, MAX_REROUTES), never streamed to a made-up end."""
        node = self.nodes.get(address)
        if node is None:
            conn = self._connect(*address)
            try:
                unlisted = self._prepare(conn, vbuckets)
                purge_seqnos = False
                if len(unlisted) < len(vbuckets):
                    purge_seqnos = self._dcp_open(conn)
            except BaseException:
                conn.close()
                raise
            if len(unlisted) < len(vbuckets):
                consumer = Consumer(self.progress, options=conn.options, label=conn.label,
                                    connection=conn.connection, framer=conn.framer,
                                    buffer_size=self.options.buffer_size, on_rollback=self.options.on_rollback,
                                    value=self._value, purge_seqnos=purge_seqnos, quiet=self._quiet,
                                    lines=self._lines)
                node = self.nodes[address] = _Node(conn, consumer, last_heard=time.monotonic())
            else:  # nothing to stream from it: no DCP connection that would only wait for noops
                conn.close()
            label = conn.label
        else:
            unlisted = self._prepare(node.conn, vbuckets)
            label = node.conn.label
        if node is not None:
            node.consumer.read_ahead(node.conn.pending, node.conn.read_ts)
            for vb in vbuckets:
                if vb not in unlisted:
                    node.consumer.request(vb, time.time())
            self.requested = True
            self._send(node)
        for vb in unlisted:
            self.notice(f"vbucket {vb}: {label} does not list it in GET_ALL_VB_SEQNOS (no high seqno for --from or "
                        "--until now: not its vbucket); reading the cluster map again")
            self._reroute(vb)

    def _prepare(self, conn: Connection, vbuckets: list[int]) -> list[int]:
        """Positions and end seqnos for these vbuckets (what --from and --until need from the server); returns
        those the node does not list when their high seqnos are needed (not its own: nothing is set for them).
        A vbucket asked again (it moved, its stream ended early) keeps the position it got to and, with
        --until now, the end read at start, lowered to its high seqno here: a failover may have cut its history
        below that end, which would then never come."""
        options, progress = self.options, self.progress
        fresh = [vb for vb in vbuckets if vb not in self._prepared]
        until_now = options.until == "now"
        high: dict[int, int] = {}
        if until_now or (fresh and options.start == "now"):
            high = self._high_seqnos(conn)
            unlisted = [vb for vb in vbuckets if vb not in high]
        else:
            unlisted = []
        for vb in vbuckets:
            if vb in unlisted:
                continue
            if vb not in self._prepared:
                self._prepared.add(vb)
                self._position(conn, vb, high)
            elif until_now and (cut := progress.end_at_most(vb, high[vb])) is not None:
                self.notice(f"vbucket {vb}: its high seqno on {conn.label} is {high[vb]}, below the {cut} read at "
                            f"start (a failover cut its history): --until now ends it at {high[vb]}")
        return unlisted

    def _position(self, conn: Connection, vb: int, high: dict[int, int]) -> None:
        """A vbucket's first position and end: ``high`` holds its high seqno when --from or --until is now."""
        options, progress = self.options, self.progress
        position = progress.state.vbuckets.get(vb)
        if options.start == "resume" and position is not None:
            pass
        elif options.start in ("beginning", "resume"):
            position = VbucketPosition()
        else:
            log = self._failover_log(conn, vb)
            seqno = high[vb] if options.start == "now" else int(options.start)
            position = VbucketPosition(log[0].vbucket_uuid if log else 0, seqno, seqno, seqno, log)
        progress.state.vbuckets[vb] = position
        if options.until == "now":
            progress.ends[vb] = high[vb]
        elif options.until != "forever":
            progress.ends[vb] = int(options.until)

    def _high_seqnos(self, conn: Connection) -> dict[int, int]:
        """The node's active vbuckets' high seqnos: unfiltered, a node lists its replicas too (reference 4.6),
        and a vbucket that moved away would get its replica's lower seqno, not be asked of its new node."""
        reply = conn.check(Opcode.GET_ALL_VB_SEQNOS, vbucket_state_filter=ACTIVE)
        return {int(e.vbucket): int(e.seqno) for e in reply.field("vbucket_seqnos") or ()}

    def _failover_log(self, conn: Connection, vb: int) -> list[FailoverEntry]:
        return failover_entries(conn.check(Opcode.GET_FAILOVER_LOG, f"GET_FAILOVER_LOG vbucket {vb}", vbucket=vb))

    def _dcp_open(self, conn: Connection) -> bool:
        """DCP_OPEN and the controls; returns whether the server sends v2.2 markers (max_marker_version),
        and so reads a stream request's purge_seqno."""
        options = self.options
        flags = DcpOpenFlag.PRODUCER | DcpOpenFlag.INCLUDE_DELETE_TIMES
        if options.xattrs:
            flags |= DcpOpenFlag.INCLUDE_XATTRS
        if options.no_value:
            flags |= DcpOpenFlag.NO_VALUE
        name = options.name or f"dcpctl:{os.getpid()}:{len(self.nodes)}"
        conn.check(Opcode.DCP_OPEN, key=name.encode(), seqno=0, flags=flags)
        controls = {"enable_noop": "true", "set_noop_interval": str(options.noop_interval),
                    "connection_buffer_size": str(options.buffer_size),
                    "send_stream_end_on_client_close_stream": "true", "enable_expiry_opcode": "true"}
        if options.stream_id is not None:
            controls["enable_stream_id"] = "true"
        controls.update(options.controls)
        for key, value in controls.items():
            if key in ASKED_UNLESS_FALSE and value == "false":
                continue  # kept from asking: the server has no false for it (Einval), off is its default
            conn.check(Opcode.DCP_CONTROL, f"DCP_CONTROL {key}={value}", key=key.encode(), value=value.encode())
        markers = controls.get("max_marker_version")
        if markers is None and conn.options.collections:
            # asked unless --control says otherwise: a server that does not know it (v2.2 markers are 8.0's)
            # refuses it, and streams as before without purge_seqno
            markers = MAX_MARKER_VERSION
            reply = conn.call(Opcode.DCP_CONTROL, f"DCP_CONTROL max_marker_version={markers}",
                              key=b"max_marker_version", value=markers.encode())
            if reply.status != Status.SUCCESS:
                markers = None
        if "flatbuffers_system_events" not in controls and conn.options.collections:
            # as kv_engine's DCP guide advises consumers: collection events as FlatBuffers tables, and with them
            # ModifyCollection (a collection's new maxTTL), which no other stream is sent; a server before 7.2
            # refuses the control and sends the versions 0 and 1 instead
            conn.call(Opcode.DCP_CONTROL, "DCP_CONTROL flatbuffers_system_events=true",
                      key=b"flatbuffers_system_events", value=b"true")
        # stream data may now come while a call waits (a rollback asks for the failover log): its window
        conn.queue_limit = queue_limit(options.buffer_size, conn.framer.max_body_length)
        return markers == MAX_MARKER_VERSION

    def _active(self) -> bool:
        return bool(self._retry_at) or any(node.consumer.active for node in self.nodes.values())

    @staticmethod
    def _send(node: _Node) -> None:
        data = node.consumer.data_to_send()
        if data:
            node.conn.send_bytes(data)

    def _loop(self) -> Iterator[Observed | bytes]:
        selector = selectors.DefaultSelector()
        registered: set[int] = set()
        dead_after = 2.5 * self.options.noop_interval
        progress = self.progress
        quiet = self._quiet
        try:
            while self._active() and not progress.done:
                for node in list(self.nodes.values()):
                    if id(node) not in registered:
                        selector.register(node.conn.sock, selectors.EVENT_READ, node)
                        registered.add(id(node))
                ready = [n for n in self.nodes.values() if n.consumer.buffered() or _tls_pending(n.conn)]
                if not ready:
                    self.before_wait()  # the output reaches its reader before dcpctl waits for the network
                    ready = [key.data for key, _ in selector.select(self._wait())]
                now = time.monotonic()
                for node in ready:  # one turn each: what one read brought, so no connection starves the rest
                    if quiet or not node.consumer.buffered():
                        data = node.conn.read(0.0)
                        if data:
                            node.consumer.feed(data, node.conn.read_ts)
                    node.last_heard = now
                    yield from self._turn(node)
                self._check_deadlines(now, dead_after)
                if now - self._last_save > SAVE_EVERY or progress.items >= progress.save_at:
                    self.save()
                if not progress.done:
                    self._retry_due()
        finally:
            selector.close()

    def _turn(self, node: _Node) -> Iterator[Observed | bytes]:
        """What the node's consumer makes of the bytes it was fed: its stream data to the caller (committed
        once the caller asks for more: written), its notes and requests for I/O met here."""
        consumer, progress = node.consumer, self.progress
        for event in consumer.events():
            self._send(node)  # acks and noop answers go before anything waits
            if isinstance(event, (Observed, bytes)):
                yield event
                # the caller asked for the next message: this one is written, its position counts
                consumer.commit()
                if progress.items >= progress.save_at:  # every item handed out so far is written: all counted
                    self.save()
            elif isinstance(event, Notice):
                self.notice(event.text)
            elif isinstance(event, RollbackAsked):
                self._rollback(node, event)
            elif isinstance(event, Reroute):
                self._reroute(event.vbucket)
        self._send(node)

    def _rollback(self, node: _Node, asked: RollbackAsked) -> None:
        """Explain the rollback with what the server has now, then let the consumer apply the policy."""
        vb, conn = asked.vbucket, node.conn
        try:
            log = self._failover_log(conn, vb)
            high = self._high_seqnos(conn).get(vb)
        except FloodError:
            raise  # the connection is given up: nothing to explain the rollback with, or to retry on
        except ClientError:
            log, high = [], None
        node.consumer.read_ahead(conn.pending, conn.read_ts)
        try:
            told = node.consumer.rollback(vb, asked.seqno, log, high, time.time(),
                                          until_now=self.options.until == "now")
        except RollbackRefusedError as exc:
            self.notice(exc.story)
            raise
        self.notice(told.text)
        self._send(node)

    def _check_deadlines(self, now: float, dead_after: float) -> None:
        """A node silent past the noop deadline is dead; a stream request unanswered past --timeout is an error
        (the server's noops keep the connection alive, so only the request's own deadline catches it)."""
        for node in self.nodes.values():
            if now - node.last_heard > dead_after:
                raise ClientError(f"{node.conn.label}: nothing received for {dead_after:g} s, noops included: "
                                  "the connection is dead", ExitCode.CONNECTION)
        timeout = self.options.timeout
        for node in self.nodes.values():
            stream = node.consumer.overdue(time.time(), timeout)
            if stream is not None:
                raise ClientTimeoutError(f"{node.conn.label}: no answer to the stream request for vbucket "
                                         f"{stream.vbucket} within {timeout:g} s (--timeout)")

    def _reroute(self, vb: int) -> None:
        """Have a vbucket asked again, from the node the cluster map will then say owns it: at once the first
        time, then waiting longer each try its stream does not open; after MAX_REROUTES of them, give up. A
        stream that opened and ended again with nothing delivered since the last time it was asked again waits
        as long as the times it did so in a row say (at most MAX_REROUTE_WAIT), and is never given up on. The
        wait is a deadline :meth:`_loop` keeps (:meth:`_retry_due`), never a sleep: it holds up nothing else."""
        progress = self.progress
        tries = progress.reroutes[vb] = progress.reroutes.get(vb, 0) + 1
        if tries > MAX_REROUTES:
            raise ClientError(f"vbucket {vb}: asked again {MAX_REROUTES} times without its stream opening "
                              "(NotMyVbucket or not listed): the cluster map keeps pointing at a node that does not "
                              "serve it",
                              ExitCode.PROTOCOL)
        position = progress.state.vbuckets.get(vb)  # none yet: not listed by the node asked at the start
        stalled = 0
        if position is not None:
            before, stalled = progress.stalls.get(vb, (None, 0))
            stalled = stalled + 1 if before == position.seqno else 0
            progress.stalls[vb] = (position.seqno, stalled)
        wait = max(_doubled(tries - 1), _doubled(stalled))
        self._retry_at[vb] = time.monotonic() + wait

    def _wait(self) -> float:
        """How long the loop may wait for the network: WAKE_EVERY, or less when a vbucket's retry is due sooner."""
        if not self._retry_at:
            return WAKE_EVERY
        return min(WAKE_EVERY, max(0.0, min(self._retry_at.values()) - time.monotonic()))

    def _retry_due(self) -> None:
        """Ask again the vbuckets whose retry is due (see :meth:`_reroute`)."""
        now = time.monotonic()
        for vb in sorted(vb for vb, at in self._retry_at.items() if at <= now):
            del self._retry_at[vb]
            self._ask_again(vb)

    def _ask_again(self, vb: int) -> None:
        """Read the cluster map again and ask the node it names for the vbucket."""
        # any node serves the map; before the first DCP connection (its vbuckets all unlisted), the seed does
        any_node = next(iter(self.nodes.values()), None)
        seed = self._connect(*((any_node.conn.host, any_node.conn.port) if any_node else (self.seed_host,
                                                                                          self.seed_port)))
        try:
            self._map(seed)
        finally:
            seed.close()
        address = self.owner.get(vb)
        if address is None:
            raise ClientError(f"vbucket {vb} is not in the cluster map any more, or has no active node in it",
                              ExitCode.PROTOCOL)
        self._open_node(address, [vb])

    # --- the end ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop at the next safe point (Ctrl-C): between messages, never inside a write."""
        self.interrupted = True
        self.progress.done = True

    def save(self) -> None:
        """Flush the caller's output (``before_save``), then save the positions: what they count is written.
        Nothing is saved before a stream was asked for: a run that fails first (a wrong bucket, a refused
        login) has nothing to save, and a state file it made would hold the wrong bucket for the next run."""
        progress = self.progress
        if self.options.state_path is not None and self.requested:
            self.before_save()
            # the run's first save removes the temporary files killed runs left (state.py)
            state_file.save(self.options.state_path, progress.state, tidy=not self._tidied)
            self._tidied = True
        self._last_save = time.monotonic()
        progress.save_at = progress.items + self.options.save_items

    def close(self, *, save: bool = True) -> None:
        """Save the position (unless the output or the state file failed: then the last save stands, which
        counts only what was written before it), close the open streams (DCP_CLOSE_STREAM, best effort: the
        server may already be gone) and every connection (after Ctrl-C too)."""
        try:
            if save:
                self.save()
        finally:
            for node in self.nodes.values():
                node.consumer.close_streams()
                with contextlib.suppress(ClientError):
                    self._send(node)
            for node in self.nodes.values():
                node.conn.close()

    def summary(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Per vbucket (in order) and in total: items, seqno range, items a second over the whole run, and
        when the first and last items were read, in seconds since the first stream message."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        zero = self.progress.first_ts or 0.0
        stats_of = self.progress.stats

        def since(ts: float | None) -> float | None:
            return None if ts is None else max(ts - zero, 0.0)

        rows = [{"vbucket": vb, "items": stats["items"], "first_seqno": stats["first_seqno"],
                 "last_seqno": stats["last_seqno"], "rate": round(stats["items"] / elapsed, 1),
                 "first_offset": since(stats["first_ts"]), "last_offset": since(stats["last_ts"])}
                for vb, stats in sorted(stats_of.items())]
        total = sum(stats["items"] for stats in stats_of.values())
        firsts = [row["first_offset"] for row in rows if row["first_offset"] is not None]
        lasts = [row["last_offset"] for row in rows if row["last_offset"] is not None]
        return rows, {"vbucket": "total", "items": total, "rate": round(total / elapsed, 1),
                      "first_offset": min(firsts, default=None), "last_offset": max(lasts, default=None)}


def noop_interval_of(value: str) -> float | None:
    """``set_noop_interval``'s value as seconds (kv_engine reads a float), or None unless finite and above 0:
    the dead-connection check must have an interval to wait 2.5 times."""
    try:
        seconds = float(value) if value.isascii() and "_" not in value else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def _stream_value(options: StreamOptions) -> bytes:
    """The stream requests' JSON value: the stream id and the collections or scope asked for (none: empty)."""
    return stream_request_value.encode(options.stream_id, tuple(options.collections or ()), options.scope)


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


def served(wanted: list[int], count: int, owner: dict[int, tuple[str, int]]) -> tuple[list[int], str]:
    """The vbuckets asked for that have an active node in the map, and what to say of those that have none (""
    when all have one): a map's entry of -1 (or an index past its servers), as a failover with no replica to
    promote leaves it, until the node is back or a rebalance. A vbucket past the map is the command line's
    mistake; none served at all is a connection failure."""
    past = [vb for vb in wanted if vb >= count]
    if past:
        raise ClientError(f"vbucket {past[0]} is not in the cluster map ({count} vbuckets)", ExitCode.USAGE)
    have = [vb for vb in wanted if vb in owner]
    missing = [vb for vb in wanted if vb not in owner]
    if not missing:
        return have, ""
    said = (f"vbucket {missing[0]} has" if len(missing) == 1 else
            f"vbuckets {', '.join(map(str, missing[:10]))}{' ...' if len(missing) > 10 else ''} ({len(missing)}) have")
    said += " no active node in the cluster map (a failover with no replica to promote, until its node is back)"
    if not have:
        raise ClientError(said, ExitCode.CONNECTION)
    return have, said


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
    entries = seed.check(Opcode.GET_ALL_VB_SEQNOS, vbucket_state_filter=ACTIVE).field("vbucket_seqnos") or ()
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


def _doubled(times: int) -> float:
    """The wait before asking a vbucket again after ``times`` tries that came to nothing: none for the first,
    then REROUTE_WAIT doubling, at most MAX_REROUTE_WAIT."""
    return min(REROUTE_WAIT * 2 ** (times - 1), MAX_REROUTE_WAIT) if times > 0 else 0.0
