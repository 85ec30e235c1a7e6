"""The network edge of ``dcpctl serve``: asyncio listeners, TLS, the clock, mutations and scenarios.

Theory of operation. One listener per emulated node (``--nodes``; consecutive ports), plus a TLS listener
per node when a certificate is given. Each accepted connection gets a sans-IO
:class:`ProducerConnection`; bytes received go in, and :meth:`_Client.pump` writes what it produces until
the transport's buffer is full (asyncio pauses the protocol) or nothing is left; a paused connection
resumes when the kernel has taken the bytes. While it is paused the socket is not read either: a client
that sends requests and never reads the answers then holds one send queue, one read and the transport's
buffer, and the kernel's window stops it (kv_engine stops reading such a client the same way). A
ticker (every ``TICK`` seconds) moves the clock: new items at ``--mutation-rate``, due scenario events,
noops and idle checks, then pumps every connection so streams waiting for new items get them.
Item-triggered events stop the streams exactly at their count.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from dcpctl.producer.connection import (
    MAX_SEND_QUEUE_SIZE,
    MAX_UNAUTHENTICATED_PACKET_SIZE,
    Cluster,
    Node,
    ProducerConnection,
)
from dcpctl.producer.kv import MAX_ITEM_SIZE
from dcpctl.producer.scenario import Event
from dcpctl.producer.store import Bucket

TICK: Final = 0.01  # seconds: the finest noop interval the server honours is 0.1 s (reference 8.2)
CHUNK: Final = 1 << 20  # bytes produced per step of a pump
# Kernel-bound data buffered per connection before asyncio pauses it: large enough that a fast consumer
# never waits for the next pump, small enough that a stalled one holds little.
WRITE_BUFFER_HIGH: Final = 4 << 20
STATE_CHANGED: Final = 2


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 11210
    nodes: int = 1
    tls_port: int | None = None
    tls: ssl.SSLContext | None = None
    mutation_rate: float = 0.0
    events: list[Event] = field(default_factory=list)
    max_send_queue_size: int = MAX_SEND_QUEUE_SIZE
    max_unauthenticated_packet_size: int = MAX_UNAUTHENTICATED_PACKET_SIZE
    max_item_size: int = MAX_ITEM_SIZE
    takeover_max_time: float = 60.0


class Emulator:
    """The cluster, its listeners and its clients (see the module docstring)."""

    def __init__(self, bucket: Bucket, users: dict[str, str], options: ServeOptions,
                 log: Callable[[str], None] = lambda _line: None) -> None:
        self.bucket = bucket
        self.options = options
        self.log = log
        vbuckets = len(bucket.vbuckets)
        self.cluster = Cluster(bucket, [], [vb % options.nodes for vb in range(vbuckets)], users,
                               takeover_max_time=options.takeover_max_time)
        self.clients: set[_Client] = set()
        self.servers: list[asyncio.Server] = []
        self.pending = list(options.events)
        self.items_sent = 0
        self.start = 0.0
        self.paused_until = 0.0
        self._rate_carry = 0.0
        self._rate_turn = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    async def start_listening(self) -> list[tuple[str, int]]:
        """Bind every node's port (0: any free port, then consecutive ones are not assumed)."""
        self._loop = asyncio.get_running_loop()
        self.start = self.loop.time()
        addresses = []
        tls_ports = []
        for index in range(self.options.nodes):
            port = self.options.port + index if self.options.port else 0
            server = await self.loop.create_server(self._factory(index), self.options.host, port)
            self.servers.append(server)
            addresses.append((self.options.host, server.sockets[0].getsockname()[1]))
            if self.options.tls is not None:
                tls_port = (self.options.tls_port or 11207) + index if self.options.tls_port != 0 else 0
                tls_server = await self.loop.create_server(self._factory(index), self.options.host, tls_port,
                                                           ssl=self.options.tls)
                self.servers.append(tls_server)
                tls_ports.append(tls_server.sockets[0].getsockname()[1])
        self.cluster.nodes = addresses
        self.cluster.tls_ports = tls_ports or None
        self.apply_due()
        return addresses

    def _factory(self, node: int) -> Callable[[], _Client]:
        return lambda: _Client(self, node)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            self.tick()

    def close(self) -> None:
        for server in self.servers:
            server.close()
        for client in list(self.clients):
            client.transport.close()

    # --- the clock ------------------------------------------------------------------------------
    def tick(self) -> None:
        now = self.loop.time()
        self._mutate(now)
        self.bucket.expire_due()
        self.bucket.abort_due()
        self.apply_due()
        for client in list(self.clients):
            client.conn.tick(now)
            client.pump()

    def _mutate(self, now: float) -> None:
        rate = self.options.mutation_rate
        if rate <= 0:
            return
        self._rate_carry += rate * TICK
        count = int(self._rate_carry)
        self._rate_carry -= count
        vbuckets = self.bucket.vbuckets
        for _ in range(count):
            vb = vbuckets[self._rate_turn % len(vbuckets)]
            self._rate_turn += 1
            self.bucket.mutate(vb)

    def streaming(self) -> bool:
        return self.loop.time() >= self.paused_until

    def item_budget(self) -> int | None:
        """Items that may go out before the next item-triggered event."""
        due = [e.after_items for e in self.pending if e.after_items is not None]
        return max(0, min(due) - self.items_sent) if due else None

    def apply_due(self) -> None:
        elapsed = self.loop.time() - self.start
        while self.pending and self.pending[0].due(self.items_sent, elapsed):
            self.apply(self.pending.pop(0))

    def apply(self, event: Event) -> None:
        bucket = self.bucket
        vb = bucket.vbuckets[event.vbucket] if event.vbucket is not None and event.vbucket < len(bucket.vbuckets) \
            else None
        self.log(f"scenario: {event.action}" + (f" vbucket {event.vbucket}" if event.vbucket is not None else ""))
        if event.action == "failover" and vb is not None:
            entry = bucket.failover(vb, event.seqno)
            self.cluster.revision += 1  # a failover is a new map: its replica is now the active copy
            self.log(f"scenario: vbucket {vb.vbucket} failed over at seqno {entry.seqno}, "
                     f"new uuid {entry.vbucket_uuid}")
            self._end_streams(vb.vbucket)
        elif event.action == "purge" and vb is not None and event.seqno is not None:
            bucket.purge(vb, event.seqno)
        elif event.action == "history_loss" and vb is not None:
            bucket.purge(vb, vb.high_seqno)
        elif event.action == "move" and vb is not None and event.node is not None:
            self.cluster.owner[vb.vbucket] = event.node % self.options.nodes
            self.cluster.revision += 1
            self._end_streams(vb.vbucket)
        elif event.action == "disconnect":
            for client in list(self.clients):
                client.conn.close("scenario: disconnect")
                client.transport.close()
        elif event.action == "delay":
            self.paused_until = self.loop.time() + event.seconds
        elif event.action == "hang":
            self.cluster.requests_hang_until = self.loop.time() + event.seconds
        elif event.action == "manifest" and event.manifest is not None:
            bucket.apply_manifest(event.manifest)
            self.cluster.revision += 1  # the bucket's config names the manifest's uid (collectionsManifestUid)
            self.log(f"scenario: manifest {event.manifest.uid:x} applied")
        elif event.action == "mutate":
            targets = [vb] if vb is not None else bucket.vbuckets
            for i in range(event.count):
                bucket.mutate(targets[i % len(targets)])

    def _end_streams(self, vbucket: int) -> None:
        for client in self.clients:
            client.conn.end_stream(vbucket, STATE_CHANGED)


class _Client(asyncio.Protocol):
    def __init__(self, emulator: Emulator, node: int) -> None:
        self.emulator = emulator
        self.node = node
        self.paused = False
        self.transport: asyncio.Transport
        self.conn: ProducerConnection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        sockname = transport.get_extra_info("sockname")
        host = sockname[0] if sockname else "127.0.0.1"
        options = self.emulator.options
        self.conn = ProducerConnection(Node(self.node, self.emulator.cluster), host, self.emulator.loop.time(),
                                       max_send_queue_size=options.max_send_queue_size,
                                       max_unauthenticated_packet_size=options.max_unauthenticated_packet_size,
                                       max_item_size=options.max_item_size)
        self.emulator.clients.add(self)
        peer = transport.get_extra_info("peername")
        self.emulator.log(f"connection from {peer[0]}:{peer[1]} to node {self.node}" if peer else "connection")

    def connection_lost(self, exc: Exception | None) -> None:
        self.emulator.clients.discard(self)
        self.conn.release()
        self.emulator.log(f"connection closed{': ' + self.conn.closed if self.conn.closed else ''}")

    def data_received(self, data: bytes) -> None:
        cluster = self.emulator.cluster
        writes = cluster.writes
        self.conn.receive(data, self.emulator.loop.time())
        self.pump()
        if cluster.writes != writes:  # a client wrote: every stream of the vbucket sends it at once
            for client in list(self.emulator.clients):
                if client is not self:
                    client.pump()

    def pause_writing(self) -> None:
        self.paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        self.pump()
        if not self.paused and not self.transport.is_closing():
            self.transport.resume_reading()

    def pump(self) -> None:
        emulator = self.emulator
        while not self.paused and not self.transport.is_closing():
            before = self.conn.stats["items"]
            data = self.conn.produce(CHUNK, emulator.item_budget() if emulator.streaming() else 0)
            if data:
                self.transport.write(data)
            sent = self.conn.stats["items"] - before
            if sent:
                emulator.items_sent += sent
                emulator.apply_due()  # item-triggered events apply at their exact count
            if self.conn.closed:
                with contextlib.suppress(Exception):
                    self.transport.close()
                return
            if not data:
                return
