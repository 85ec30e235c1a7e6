"""One client connection to the emulated data node, sans-IO: bytes in, bytes out, a clock passed in.

Theory of operation. :meth:`ProducerConnection.receive` frames the client's bytes and answers each
request the way kv_engine does (reference sections 2, 3, 4, 7, 8, 9): what is allowed before
authentication, the validators' checks of a packet before it runs (``request_error``: verify_header's, in its
order and words, on the shape its registry row declares), SASL, bucket selection, HELLO features, DCP_OPEN
and DCP_CONTROL with the server's value rules, and DCP_STREAM_REQ through the full order of checks with the
rollback engine deciding rollbacks.
Answers queue in order, and requests are executed only while the queued answers are below the send-queue
limit (a client that pipelines without reading waits, as on the server); before authentication a packet
above the unauthenticated limit closes the connection. :meth:`produce` returns queued answers first, then
stream data: for each open stream a snapshot marker and the items it covers, round robin across streams,
never past the flow-control window (one message may overshoot it, as on the server), then STREAM_END when
a stream reaches its end or a later manifest empties its filter; a TakeOver stream instead hands its vbucket
over (DCP_SET_VBUCKET_STATE pending, then active, each waiting for the consumer's answer).
:meth:`tick` sends noops on the server's schedule and closes an idle connection. ``closed`` says why
the connection must be dropped (a protocol violation without XERROR, a packet too long before
authentication, a scenario, idleness).

Invariants: the connection never raises on client input; every message is built from its
declared shape (``protocol.build``), from typed values; a stream's items go out in seqno order, each
inside the snapshot marker sent before it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import operator
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

import orjson

from dcpctl import __version__
from dcpctl.dcp import rollback
from dcpctl.dcp.rollback import Answer, StreamRequest
from dcpctl.dcp.sasl import MECHANISMS, PLAIN, SaslError, ScramServer, canonical, parse_plain
from dcpctl.producer import errormap, kv, subdoc
from dcpctl.producer.store import DEFAULT_COLLECTION, PREPARE, Bucket, Encoding, Item, SystemEvent, VBucket
from dcpctl.protocol import build
from dcpctl.protocol import grammar as g
from dcpctl.protocol import stream_request_value as srv
from dcpctl.protocol.constants import (
    REQUEST_FRAMES,
    STATUSES,
    VBUCKET_STATES,
    Datatype,
    DcpOpenFlag,
    HelloFeature,
    Magic,
    Opcode,
    ServerOpcode,
    SnapshotMarkerFlag,
    Status,
    StreamEndStatus,
    StreamRequestFlag,
    SystemEventId,
    kv_datatype_text,
    kv_flag_names,
)
from dcpctl.protocol.frameinfo import DURABILITY
from dcpctl.protocol.framer import DEFAULT_MAX_BODY_LENGTH, HEADER_LENGTH, Frame, Framer
from dcpctl.protocol.message import DecodeOptions, Message, decode
from dcpctl.protocol.registry import BEFORE_AUTH_OPCODES, DCP, HEADER_LAYOUT, Presence

# HELLO features this server enables when asked (reference 4.1); anything else is silently dropped.
FEATURES: Final = frozenset({
    HelloFeature.TCP_NO_DELAY, HelloFeature.MUTATION_SEQNO, HelloFeature.XATTR, HelloFeature.XERROR,
    HelloFeature.SELECT_BUCKET, HelloFeature.SNAPPY, HelloFeature.JSON, HelloFeature.ALT_REQUEST_SUPPORT,
    HelloFeature.COLLECTIONS, HelloFeature.SYNC_REPLICATION, HelloFeature.DUPLEX, HelloFeature.TRACING,
    HelloFeature.CLUSTERMAP_CHANGE_NOTIFICATION, HelloFeature.CLUSTERMAP_CHANGE_NOTIFICATION_BRIEF,
    # serve runs every command in order, which UnorderedExecution allows; SkipDeletes only says DCP_OPEN
    # takes its flag (hello_packet_executor.cc)
    HelloFeature.UNORDERED_EXECUTION, HelloFeature.DCP_SKIP_DELETES_IN_INITIAL_BACKFILL})
# HELLO features the server pushes cluster maps for; each needs Duplex (hello_packet_executor.cc), and a
# client asking for both gets the brief one (the revision without the map).
NOTIFICATIONS: Final = (HelloFeature.CLUSTERMAP_CHANGE_NOTIFICATION, HelloFeature.CLUSTERMAP_CHANGE_NOTIFICATION_BRIEF)
# The cluster map's epoch (revEpoch): serve's maps all belong to one, only their revision moves.
MAP_EPOCH: Final = 1
# Allowed before SASL succeeds; anything else is refused with Eaccess (or a disconnect without XERROR).
BEFORE_AUTH: Final = BEFORE_AUTH_OPCODES
# DCP commands other than DCP_OPEN (kv_engine names them all DCP_...): on a connection that is not DCP the
# validator answers Einval before anything else (reference 3.1, verify_common_dcp_restrictions); a DCP
# connection always has its bucket, so NoBucket never comes first.
NEEDS_DCP: Final = frozenset(opcode for opcode in Opcode
                             if opcode.name.startswith("DCP_") and opcode != Opcode.DCP_OPEN)
# DCP commands answered before any check: kv_engine's McbpValidator has no validator for DCP_SEQNO_ADVANCED
# and DCP_OSO_SNAPSHOT (a producer's own messages), so UnknownCommand though it knows them, and DCP_FLUSH's
# refuses it always (not_supported_validator).
UNVALIDATED: Final[dict[int, Status]] = {Opcode.DCP_SEQNO_ADVANCED: Status.UNKNOWN_COMMAND,
                                         Opcode.DCP_OSO_SNAPSHOT: Status.UNKNOWN_COMMAND,
                                         Opcode.DCP_FLUSH: Status.NOT_SUPPORTED}
# The commands whose kv_engine validators end in verify_common_dcp_restrictions (every other DCP command and
# GET_FAILOVER_LOG, which shares DCP_GET_FAILOVER_LOG's): after their header checks, whose datatype bits must
# be ones HELLO negotiated, NotSupported on a connection with HELLO UnorderedExecution (reference 3.1).
DCP_RESTRICTED: Final = (NEEDS_DCP | {Opcode.DCP_OPEN, Opcode.GET_FAILOVER_LOG}) - set(UNVALIDATED)
@dataclass(frozen=True)
class HeaderRule:
    """What kv_engine's validator of one command asks of its header (verify_header's arguments, beside the
    extras, key and value its registry row declares): the datatype bits it takes, whether its CAS must be 0
    (ExpectedCas::NotSet), and a key or value it asks for otherwise than the row declares them (the row is
    the wire's grammar, this the server's check)."""

    datatypes: int = 0
    cas_not_set: bool = False
    key: Presence | None = None
    value: Presence | None = None


# The commands serve checks as kv_engine's validators do before they run (daemon/mcbp_validators.cc; reference
# 3.1, 3.2, 3.4, 3.5, 3.6, 3.14, 3.15, 3.17, 4.1, 4.2, 4.6): each takes raw bytes only, but DCP_OPEN also JSON
# (its consumer_name value, 3.2). A malformed acknowledgement is thereby answered rather than ignored.
HEADER_RULES: Final[dict[int, HeaderRule]] = {
    Opcode.HELLO: HeaderRule(cas_not_set=True), Opcode.SASL_LIST_MECHS: HeaderRule(cas_not_set=True),
    Opcode.SASL_AUTH: HeaderRule(cas_not_set=True), Opcode.SASL_STEP: HeaderRule(cas_not_set=True),
    Opcode.NOOP: HeaderRule(cas_not_set=True), Opcode.VERSION: HeaderRule(cas_not_set=True),
    # any key (the name is the executor's to find), then any value: its own check says its length
    Opcode.SELECT_BUCKET: HeaderRule(key=Presence.OPTIONAL),
    Opcode.GET_ERROR_MAP: HeaderRule(cas_not_set=True, value=Presence.OPTIONAL),
    Opcode.GET_CLUSTER_CONFIG: HeaderRule(cas_not_set=True),
    Opcode.DCP_OPEN: HeaderRule(Datatype.JSON),
    Opcode.DCP_CONTROL: HeaderRule(), Opcode.DCP_STREAM_REQ: HeaderRule(), Opcode.DCP_CLOSE_STREAM: HeaderRule(),
    Opcode.DCP_GET_FAILOVER_LOG: HeaderRule(), Opcode.GET_FAILOVER_LOG: HeaderRule(),
    Opcode.DCP_BUFFER_ACKNOWLEDGEMENT: HeaderRule(), Opcode.DCP_SEQNO_ACKNOWLEDGED: HeaderRule(cas_not_set=True),
    Opcode.GET_ALL_VB_SEQNOS: HeaderRule(cas_not_set=True)}
# GET_ALL_VB_SEQNOS's requested vbucket state (kv_engine's RequestedVBState, reference 4.6): 0 Alive (active,
# replica and pending), 1 Active ... 4 Dead; anything outside is Einval.
VBUCKET_STATE_ALIVE: Final = 0
VBUCKET_STATE_ACTIVE: Final = 1
VBUCKET_STATE_DEAD: Final = 4
STREAM_REQUEST_EXTRAS: Final = g.stream_req_extras.sizeof()  # 48: a v0 request's 40 are Einval
# Every datatype bit a request may carry (reference 6.1); the rest of the byte is Einval.
ANY_DATATYPE: Final = int(functools.reduce(operator.or_, Datatype))  # an int: an IntFlag's ~ keeps its own bits
# The extras lengths each command's registry row allows; a stream request's 40-byte legacy layout decodes
# but the server takes 48 only. GET_ALL_VB_SEQNOS checks its own after the rest of the header.
EXTRAS_LENGTHS: Final[dict[int, frozenset[int]]] = {
    opcode: frozenset(v.extras_length for v in spec.variants) if opcode != Opcode.DCP_STREAM_REQ
    else frozenset({STREAM_REQUEST_EXTRAS})
    for opcode in HEADER_RULES if (spec := DCP.spec(Magic.CLIENT_REQUEST, opcode)) is not None}
LATE_EXTRAS: Final = frozenset({Opcode.GET_ALL_VB_SEQNOS})
# The decoder's key and value diagnostics as verify_header words them.
SHAPE_CONTEXTS: Final[dict[str, str]] = {
    "must_not_have_key": "Request must not include key", "must_have_key": "Request must include key",
    "must_not_have_value": "Request must not include value", "must_have_value": "Request must include value"}
# The longest key verify_header lets through (cb::limits::MaxKeyLength; MaxCollectionsKeyLen with
# Collections, its LEB128 prefix's byte more).
MAX_KEY_LENGTH: Final = 250
# The HELLO feature that lets a client send each datatype bit (reference 6.1; DCP_OPEN adds JSON, 3.2).
DATATYPE_FEATURES: Final = {Datatype.JSON: HelloFeature.JSON, Datatype.SNAPPY: HelloFeature.SNAPPY,
                            Datatype.XATTR: HelloFeature.XATTR}
# Request frame infos the server's parser knows, with the data lengths it takes (reference 2.2; kv_engine's
# frame-extras validator answers another length Einval). Any other id, the retired tracing prototype
# (OpenTracingContext) among them, is UnknownFrameInfo.
_SOME: Final = range(1, 1 << 16)  # a name: at least one byte
FRAME_INFO_LENGTHS: Final[dict[int, Container[int]]] = {
    REQUEST_FRAMES.code_of[name]: lengths for name, lengths in (
        ("Barrier", frozenset({0})), ("DurabilityRequirement", frozenset({1, 3})), ("DcpStreamId", frozenset({2})),
        ("Impersonate", _SOME), ("PreserveTtl", frozenset({0})), ("ImpersonateExtraPrivilege", _SOME),
        ("ImpersonateTokenAuthId", frozenset({2})))}
# A durability requirement on any other command is Einval (kv_engine: "does not support durability").
DURABLE_OPCODES: Final = kv.DURABLE | subdoc.DURABLE
_KNOWN_OPCODES: Final = frozenset(int(opcode) for opcode in Opcode)
# Statuses a client that did not ask for XERROR cannot be told: the server disconnects instead (reference 5's
# list; its "SyncWritePending" is SyncWriteInProgress).
DISCONNECT_WITHOUT_XERROR: Final = frozenset({
    Status.EACCESS, Status.NO_BUCKET, Status.DCP_STREAM_ID_INVALID, Status.AUTH_STALE,
    Status.DURABILITY_INVALID_LEVEL, Status.DURABILITY_IMPOSSIBLE, Status.SYNC_WRITE_AMBIGUOUS,
    Status.SYNC_WRITE_IN_PROGRESS, Status.RANGE_SCAN_CANCELLED, Status.RANGE_SCAN_MORE, Status.RANGE_SCAN_COMPLETE,
    Status.VB_UUID_NOT_EQUAL, Status.CANCELLED, Status.CHECKSUM_MISMATCH, Status.EXPIRY_OVERFLOW,
    Status.LOCK_EXPIRY_OVERFLOW})
# Statuses whose XERROR body names the manifest uid beside the error ({"manifest_uid":"1f","error":{...}},
# reference 3.4.4 and 5); a client without HELLO Collections is told Einval instead.
COLLECTION_STATUSES: Final = frozenset({Status.UNKNOWN_COLLECTION, Status.UNKNOWN_SCOPE})
# SELECT_BUCKET's name for no bucket: it deselects (reference 4.3).
NO_BUCKET_NAME: Final = "@no bucket@"
# DCP_OPEN flags the server accepts (reference 7.1): Invalid (was Notifier), Unused and PiTR are Einval.
OPEN_KNOWN_FLAGS: Final = (DcpOpenFlag.PRODUCER | DcpOpenFlag.INCLUDE_XATTRS | DcpOpenFlag.NO_VALUE
                           | DcpOpenFlag.INCLUDE_DELETE_TIMES | DcpOpenFlag.NO_VALUE_WITH_UNDERLYING_DATATYPE
                           | DcpOpenFlag.INCLUDE_DELETED_USER_XATTRS | DcpOpenFlag.SKIP_DELETES_IN_INITIAL_BACKFILL)
STREAM_KNOWN_FLAGS: Final = functools.reduce(operator.or_, StreamRequestFlag)
# Every other bit of the 32-bit flags fields, each Einval (reference 3.4.2, 7.1). Not ``~KNOWN``: an enum
# flag's ``~`` complements only within the enum's declared bits, which leaves 0x400 and up unchecked.
OPEN_UNKNOWN_FLAGS: Final = 0xFFFF_FFFF & ~int(OPEN_KNOWN_FLAGS)
STREAM_UNKNOWN_FLAGS: Final = 0xFFFF_FFFF & ~int(STREAM_KNOWN_FLAGS)
DEFAULT_ONLY: Final = frozenset({DEFAULT_COLLECTION})  # a legacy stream's collections
# The producer's default noop interval and idle timeout (reference 8.2: 20 s and dcp_idle_timeout 360 s).
DEFAULT_NOOP_INTERVAL: Final = 20.0
IDLE_TIMEOUT: Final = 360.0
MIN_NOOP_INTERVAL: Final = 0.1  # connection_manager_interval
# Bytes of stream data one stream may contribute to one produce() call before the next stream's turn.
FAIR_SHARE: Final = 256 * 1024
# Bytes of answers queued before the connection stops executing requests until they are taken
# (--max-send-queue-size): kv_engine's max_send_queue_size, 1 MiB, after which it runs no new command for the
# client until the socket drains, so a client that pipelines and never reads holds no more than that.
MAX_SEND_QUEUE_SIZE: Final = 1 << 20
# Largest packet (header and body) accepted before authentication (--max-unauthenticated-packet-size):
# kv_engine's MaxUnauthenticatedFrameSize, 16 KiB; a longer one disconnects, so a stranger cannot make the
# server buffer a 20 MiB body. SASL and HELLO messages are far smaller.
MAX_UNAUTHENTICATED_PACKET_SIZE: Final = 16 * 1024
# What srv.validate says of a stream-request value that the server does not refuse: keys it ignores, and a uid
# that is not a hex string (reference 12 item 11: the code does not check the uid's type).
IGNORED_VALUE_DIAGNOSTICS: Final = frozenset({"stream_request_json_unknown_key", "stream_request_bad_uid"})
_COLLECTION_END_STATUSES: Final = frozenset({StreamEndStatus.FILTER_EMPTY, StreamEndStatus.LOST_PRIVILEGES})
# The opaque of the server's first noop is one above this, and each next one one more (reference 3.13:
# ep-engine's noopCtx.opaque, pre-incremented).
NOOP_OPAQUE_BASE: Final = 10_000_000
# The server counts a DCP_PREPARE it sends as 2 bytes more than its wire size (reference 3.17, 8.1: response.h's
# prepareBaseMsgBytes = 57 for 24 + 31 bytes, MB-46634), so its window fills 2 bytes sooner per prepare.
PREPARE_FLOW_CONTROL_EXTRA: Final = 2
MARKER_DISK_CHECKPOINT: Final = SnapshotMarkerFlag.DISK | SnapshotMarkerFlag.CHECKPOINT
MARKER_MEMORY: Final = SnapshotMarkerFlag.MEMORY
MARKER_MEMORY_CHECKPOINT: Final = SnapshotMarkerFlag.MEMORY | SnapshotMarkerFlag.CHECKPOINT
# A takeover stream (reference 3.4.2, 3.12; kv_engine's ActiveStream TakeoverSend and TakeoverWait): after its
# backfill every marker asks for an answer, and once caught up with none outstanding the stream sends
# DCP_SET_VBUCKET_STATE pending, then (answered: the vbucket here turns dead) active, then (answered) ends Ok.
MARKER_TAKEOVER: Final = SnapshotMarkerFlag.MEMORY | SnapshotMarkerFlag.ACKNOWLEDGE
VBUCKET_PENDING: Final = VBUCKET_STATES.code_of["pending"]
VBUCKET_ACTIVE: Final = VBUCKET_STATES.code_of["active"]
TAKEOVER_END: Final = 2**64 - 1  # a takeover stream's end seqno, whatever the request says (dcpMaxSeqno)
MARKER_V2_0: Final = 0  # the v2.x marker's version byte for v2.0
MARKER_V2_2: Final = 2  # and for v2.2 (a disk snapshot's purge and high prepared seqnos, reference 3.8)
# Where a pushed item's opaque sits: a stream's cached items are patched with its stream's opaque there.
_OPAQUE_AT: Final = HEADER_LAYOUT.offset("opaque")
_OPAQUE: Final = HEADER_LAYOUT.field("opaque")
_OPAQUE_END: Final = _OPAQUE_AT + _OPAQUE.size
TAKEOVER_STATS: Final = "dcp-vbtakeover"  # STAT's group: the key is it, a space, and its arguments
ERROR_MAP_VERSION_SIZE: Final = 2  # GET_ERROR_MAP's value: the version, a u16
_ANY_ADDRESS: Final = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - a listen address is named, not bound


@dataclass
class Node:
    """Where this connection landed: which node of the emulated cluster, and the cluster it belongs to."""

    index: int
    cluster: Cluster


@dataclass
class Cluster:
    bucket: Bucket
    nodes: list[tuple[str, int]]  # (host, port) per node
    owner: list[int]  # vbucket -> node index of its active copy
    users: dict[str, str]
    revision: int = 1
    tls_ports: list[int] | None = None
    requests_hang_until: float = 0.0  # stream requests received before this (loop time) are never answered
    # Seconds a takeover may send before its vbucket refuses writes so that it catches up (--takeover-max-time:
    # kv_engine's dcp_takeover_max_time)
    takeover_max_time: float = 60.0
    writes: int = 0  # documents written by clients: the server pumps every stream when it moves
    # Each node's DCP connections by DCP_OPEN name: a second open of a name disconnects the first (reference
    # 3.2, kv_engine's DcpConnMap, one per bucket on a node)
    dcp_names: dict[tuple[int, str], ProducerConnection] = field(default_factory=dict)

    def config(self, host: str, *, bucket: bool = True) -> dict[str, Any]:
        """GET_CLUSTER_CONFIG's JSON for the bucket (reference 4.5), ``$HOST`` replaced by ``host``; without
        ``bucket``, the cluster's config a connection gets before SELECT_BUCKET (GCCCP): nodes, no map."""
        named = [(host if h in _ANY_ADDRESS else h, p) for h, p in self.nodes]
        servers = [_host_port(h, p) for h, p in named]
        nodes_ext = []
        for i, (h, p) in enumerate(named):
            services: dict[str, int] = {"kv": p}
            if self.tls_ports:
                services["kvSSL"] = self.tls_ports[i]
            nodes_ext.append({"hostname": h, "services": services, "thisNode": False})
        if not bucket:
            return {"rev": self.revision, "revEpoch": MAP_EPOCH, "nodesExt": nodes_ext,
                    "clusterCapabilitiesVer": [1, 0], "clusterCapabilities": {"n1ql": []}}
        # ns_server names the bucket again in its URIs (what a redaction with --hash-names must find too)
        name, uuid = self.bucket.name, self.bucket.uuid
        return {"rev": self.revision, "revEpoch": MAP_EPOCH, "name": name, "nodeLocator": "vbucket", "uuid": uuid,
                "uri": f"/pools/default/buckets/{quote(name)}?bucket_uuid={uuid}",
                "streamingUri": f"/pools/default/bucketsStreaming/{quote(name)}?bucket_uuid={uuid}",
                "bucketCapabilitiesVer": "", "bucketCapabilities": ["dcp", "xattr", "collections", "json", "snappy"],
                "collectionsManifestUid": f"{self.bucket.manifest.uid:x}",
                "ddocs": {"uri": f"/pools/default/buckets/{quote(name)}/ddocs"},
                "nodesExt": nodes_ext,
                "vBucketServerMap": {"hashAlgorithm": "CRC", "numReplicas": 0, "serverList": servers,
                                     "vBucketMap": [[owner] for owner in self.owner]}}


def _host_port(host: str, port: int) -> str:
    """A serverList entry: an IPv6 address in brackets, as ns_server joins them (nodesExt keeps it bare)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass
class _Stream:
    vbucket: int
    stream_id: int  # 0: none
    opaque: int
    # the request's snapshot start (after FromLatest, the high seqno): the first marker starts there, so that
    # a client resuming inside a snapshot is sent that snapshot's start again (kv_engine's snap_start_seqno_)
    snap_start_seqno: int
    next_seqno: int  # the next seqno to consider
    end_seqno: int
    encoding: Encoding
    filter_ids: frozenset[int] | None  # a filtered stream's collections (None: every collection)
    filter_scope: int | None = None  # a scope filter's scope: its scope's system events go out too
    snapshot_end: int = -1  # the last marker's end; items up to it may go out
    # Whether it begins with a disk backfill. serve keeps no checkpoints, so what the vbucket held when the
    # stream was asked for is read from disk, as kv_engine backfills what its checkpoints no longer hold; a
    # stream from the high seqno registers its cursor at the end and starts in memory (scheduleBackfill).
    backfill: bool = True
    # the seqnos its backfill reads end here (the high seqno at its first marker): a legacy stream's disk
    # snapshot may end before, on its last item
    backfill_end: int = 0
    markers: int = 0
    items: int = 0
    last_seqno: int = 0
    ending: int | None = None  # a STREAM_END status waiting to be sent
    advanced: int = 0  # the last snapshot end whose seqno was reported (its item or a DCP_SEQNO_ADVANCED)
    # enable_sync_writes with a consumer_name (kv_engine's SyncReplication): markers are v2.0, with the
    # max visible and high completed seqnos
    sync_replication: bool = False
    # DCP_OPEN SkipDeletesInInitialBackfill on a stream from seqno 0: its disk snapshot has no
    # tombstones (kv_engine's backfill without deletes; a stream from any other seqno gets them)
    skip_deletes: bool = False
    # the disk snapshot has no tombstone at or below this seqno, set as it begins: the vbucket's purge
    # seqno (a purge takes them off disk, reference 9.1), or the snapshot's end with skip_deletes
    no_tombstones_upto: int = 0
    takeover: bool = False
    takeover_state: int = VBUCKET_PENDING  # the DCP_SET_VBUCKET_STATE the takeover sends next
    takeover_wait: bool = False  # that message went out; its answer is awaited
    # Takeover markers sent minus marker answers received, counted as kv_engine counts them (waitForSnapshot,
    # a signed counter that any marker answer decrements): the vbucket state goes out only at zero.
    marker_acks: int = 0
    new_checkpoint: bool = False  # the next takeover marker begins a checkpoint (the phase just began)
    # when its current sending phase began (kv_engine's takeoverStart); None until the backfill is done, after
    # which every marker is the takeover's
    takeover_since: float | None = None
    # The disk snapshot leaves out what a later manifest's drops took off disk (Bucket.hidden_in_backfill):
    # each dropped collection's seqno of drop, and the creation events of dropped scopes
    hidden: dict[int, int] = field(default_factory=dict)
    superseded: frozenset[int] = frozenset()
    # The filter as kv_engine's Filter follows a later manifest's events: collections dropped in this snapshot
    # leave it at its end (none of theirs can follow the drop), then an empty one (or a dropped scope) ends it
    dropping: set[int] = field(default_factory=set)
    filter_gone: bool = False

    @property
    def in_backfill(self) -> bool:
        """Whether its last marker is its backfill's: the stream is in its disk snapshot."""
        return self.backfill and self.markers == 1

    @property
    def plain(self) -> bool:
        """Whether the store's encoded image serves this stream (the fast path)."""
        return self.filter_ids is None and not self.stream_id and not self.encoding.no_value and not (
            self.in_backfill and self.no_tombstones_upto) and not self.encoding.sync_writes  # prepares count more

    def imaged(self, vb: VBucket) -> bool:
        """Whether the image serves it now: not while its disk snapshot leaves dropped collections out, nor once
        a legacy stream's vbucket has later manifests (their events, which it is not sent, can end it)."""
        return self.plain and not (self.in_backfill and (self.hidden or self.superseded)) and not (
            vb.event_seqnos and not self.encoding.collections)

    def sees(self, bucket: Bucket, item: Item) -> bool:
        """Whether this stream sends the item: not what its disk snapshot leaves out (what a dropped collection
        had, its events too, and a dropped scope's creation; a tombstone: every one with skip_deletes, else
        those the purge took off disk)."""
        if not bucket.visible(item, self.encoding, self.filter_ids, self.filter_scope):
            return False
        return not (self.in_backfill and self.backfill_hides(bucket, item))

    def backfill_hides(self, bucket: Bucket, item: Item) -> bool:
        """Whether its disk snapshot leaves out an item its filter passes (see :meth:`sees`)."""
        event = item.event  # a collection's creation or modification is its collection's
        owner = event.collection_id if event is not None and not event.dropped else item.collection_id
        if item.seqno in self.superseded or item.seqno < self.hidden.get(owner if owner is not None else -1, 0):
            return True
        if item.seqno > self.no_tombstones_upto:
            return False
        return bucket.tombstone(item) if self.skip_deletes else bucket.purgeable(item)

    def follow(self, event: SystemEvent) -> None:
        """A system event the stream read, as kv_engine's Filter takes it (checkAndUpdateSystemEvent): a legacy
        stream's filter is the default collection, a collection filter loses a dropped collection, a scope filter
        gains its scope's new collections and is gone with its scope."""
        collection = event.collection_id
        if event.event_id == SystemEventId.END_COLLECTION and collection is not None:
            if (not self.encoding.collections and collection == DEFAULT_COLLECTION) or (
                    self.filter_ids is not None and collection in self.filter_ids):
                self.dropping.add(collection)
        elif self.filter_scope is None or event.scope_id != self.filter_scope:
            return
        elif event.event_id == SystemEventId.BEGIN_COLLECTION and collection is not None:
            self.filter_ids = (self.filter_ids or frozenset()) | {collection}
        elif event.event_id == SystemEventId.DROP_SCOPE:
            self.filter_gone = True

    def settle_filter(self) -> bool:
        """At a snapshot's end: the collections dropped in it leave the filter; whether it is now empty (a
        collection filter or a legacy stream without collections left, a scope filter without its scope)."""
        if self.dropping:
            if self.filter_ids is not None:
                self.filter_ids = self.filter_ids - self.dropping
            if self.filter_scope is None:
                self.filter_gone = self.filter_gone or not self.filter_ids
            self.dropping.clear()
        return self.filter_gone


@dataclass
class ProducerConnection:
    node: Node
    peer_host: str = "127.0.0.1"
    now: float = 0.0
    framer: Framer = field(default_factory=Framer)
    closed: str | None = None
    stats: dict[str, int] = field(default_factory=lambda: {"items": 0, "bytes": 0})
    max_send_queue_size: int = MAX_SEND_QUEUE_SIZE
    max_unauthenticated_packet_size: int = MAX_UNAUTHENTICATED_PACKET_SIZE
    max_item_size: int = kv.MAX_ITEM_SIZE

    def __post_init__(self) -> None:
        self.out: list[bytes] = []
        self.queued = 0  # bytes in ``out``
        self.framer.max_body_length = max(0, self.max_unauthenticated_packet_size - HEADER_LENGTH)
        self.features: list[int] = []
        self.user: str | None = None
        self.sasl: ScramServer | None = None
        self.bucket: Bucket | None = None
        self.dcp_flags: int | None = None
        self.name = ""
        self.controls: dict[str, str] = {}
        self.buffer_size = 0
        self.outstanding = 0
        self.noop_enabled = False
        self.noop_interval = DEFAULT_NOOP_INTERVAL
        self.noop_outstanding = False
        self.last_noop = self.now
        self.noop_opaque = NOOP_OPAQUE_BASE
        self.last_received = self.now
        self.streams: dict[tuple[int, int], _Stream] = {}
        self.takeovers = 0  # TakeOver streams among them: answers to markers and vbucket states matter only then
        self._turn = 0
        self._item_limit: int | None = None
        # A synchronous write this connection waits for (vbucket, prepare seqno, request): no further
        # request runs until it completes, as a command blocked in kv_engine holds its connection.
        self.sync_write: tuple[int, int, Message] | None = None
        self.request_started = 0  # the bucket clock's nanoseconds when the request being answered was received
        self.sync_write_started = 0  # the same for the synchronous write waited for
        # The map revision this connection last saw change, and the newest one it was given (a push or
        # GET_CLUSTER_CONFIG, as kv_engine's pushed_clustermap): a change is pushed once, and not at all to
        # a connection that already fetched it.
        self.known_revision = self.node.cluster.revision
        self.pushed_revision = 0

    # --- negotiated state -------------------------------------------------------------------------
    @property
    def xerror(self) -> bool:
        return HelloFeature.XERROR in self.features

    @property
    def collections(self) -> bool:
        return HelloFeature.COLLECTIONS in self.features

    @property
    def datatypes(self) -> int:
        """The datatype bits this client may send: those its HELLO features (and DCP_OPEN) enabled."""
        return functools.reduce(operator.or_, (bit for bit, feature in DATATYPE_FEATURES.items()
                                               if feature in self.features), 0)

    @property
    def stream_ids(self) -> bool:
        return self.controls.get("enable_stream_id") == "true"

    def encoding(self) -> Encoding:
        flags = self.dcp_flags or 0
        return Encoding(collections=self.collections, delete_times=bool(flags & DcpOpenFlag.INCLUDE_DELETE_TIMES),
                        xattrs=bool(flags & DcpOpenFlag.INCLUDE_XATTRS),
                        sync_writes=self.controls.get("enable_sync_writes") == "true",
                        expiry_opcode=self.controls.get("enable_expiry_opcode") == "true",
                        no_value=bool(flags & (DcpOpenFlag.NO_VALUE | DcpOpenFlag.NO_VALUE_WITH_UNDERLYING_DATATYPE)),
                        underlying_datatype=bool(flags & DcpOpenFlag.NO_VALUE_WITH_UNDERLYING_DATATYPE),
                        compressed=self.controls.get("force_value_compression") == "true",
                        flatbuffers_system_events=self.controls.get("flatbuffers_system_events") == "true")

    # --- input ------------------------------------------------------------------------------------
    def receive(self, data: bytes, now: float) -> None:
        """Take the client's bytes and execute the whole requests among them while the send queue has room
        (``max_send_queue_size``); the rest wait in the framer, and each :meth:`produce` executes more. A
        caller that cannot hand the answers on (the peer does not read) stops reading until it can: then
        what one connection holds is bounded by the queue, the framer's one read and the transport."""
        self.now = now
        self.last_received = now
        self.framer.feed(data)
        self._execute()

    def _execute(self) -> None:
        """Requests in the framer, one at a time, until it holds no whole packet or the send queue is full."""
        self._settle()
        while self.closed is None and self.queued < self.max_send_queue_size and self.sync_write is None:
            # one event per generator: the framer's body limit changes when authentication succeeds
            event = next(self.framer.events(), None)
            if event is None:
                return
            if not isinstance(event, Frame):
                if event.reason == "body_too_long" and self.user is None:
                    self.close(f"a packet longer than {self.max_unauthenticated_packet_size} bytes before "
                               "authentication: the server disconnects (MaxUnauthenticatedFrameSize)")
                elif event.reason == "body_too_long":
                    self.close(f"a packet longer than {HEADER_LENGTH + self.framer.max_body_length} bytes: the "
                               "server disconnects (max_packet_size)")
                else:
                    self.close("the client sent bytes that are not a packet")
                return
            msg = decode(event.data, event.offset, DecodeOptions(collections=self.collections, show_secrets=True))
            self.request_started = self.node.cluster.bucket.clock()
            self._handle(msg)

    def wait_for_sync_write(self, vbucket: int, seqno: int, msg: Message) -> None:
        self.sync_write = (vbucket, seqno, msg)
        self.sync_write_started = self.request_started  # its answer's server duration counts from its receipt

    def _settle(self) -> None:
        """The answer to the synchronous write waited for, once it is no longer pending: aborted when its
        durability timeout passed (or lost to a failover), so SyncWriteAmbiguous, as kv_engine answers it."""
        if self.sync_write is None:
            return
        vbucket, seqno, msg = self.sync_write
        vb = self.node.cluster.bucket.vbuckets[vbucket]
        if any(pending.seqno == seqno for pending in vb.pending.values()):
            return
        self.sync_write = None
        self.request_started = self.sync_write_started
        self._error(msg, Status.SYNC_WRITE_AMBIGUOUS, "the durability timeout passed before a majority acknowledged")

    def _queue(self, data: bytes) -> None:
        self.out.append(data)
        self.queued += len(data)

    def _authenticated(self, user: str) -> None:
        self.user = user
        self.framer.max_body_length = max(DEFAULT_MAX_BODY_LENGTH, self.framer.max_body_length)

    def close(self, reason: str) -> None:
        if self.closed is None:
            self.closed = reason

    def release(self) -> None:
        """The connection is gone: its DCP_OPEN name is free again."""
        names = self.node.cluster.dcp_names
        if names.get((self.node.index, self.name)) is self:
            del names[(self.node.index, self.name)]

    def _reply(self, msg: Message, status: int = Status.SUCCESS, *, datatype: int = 0, key: bytes = b"",
               value: bytes = b"", **fields: Any) -> None:
        # HELLO Tracing: every response says how long the server took, from the request's receipt (reference
        # 1.4, 2.3: magic AltClientResponse, frame id 0); the bucket's clock, which the tests can set
        infos = (build.server_duration_frame((self.node.cluster.bucket.clock() - self.request_started) // 1000),) \
            if HelloFeature.TRACING in self.features else ()
        self._queue(build.response(msg.opcode, status=status, opaque=msg.opaque, datatype=datatype, key=key,
                                   value=value, frame_infos=infos, **fields))

    def _error(self, msg: Message, status: int, context: str = "") -> None:
        """An error status, as kv_engine's remapErrorCode and error JSON give it (reference 5): without XERROR
        no error has a body, the statuses an old client cannot understand disconnect, and an unknown collection
        or scope is Einval unless the client has Collections; with XERROR the body has the context and, for
        those two, the manifest uid."""
        if not self.xerror:
            if status in COLLECTION_STATUSES and not self.collections:
                self._reply(msg, Status.EINVAL)
            elif status in DISCONNECT_WITHOUT_XERROR:
                self.close(f"{msg.opcode_name}: {Status(status).kv_name} without XERROR: the server disconnects")
            else:
                self._reply(msg, status)
            return
        body: dict[str, Any] = {}
        if status in COLLECTION_STATUSES:
            body["manifest_uid"] = f"{self.node.cluster.bucket.manifest.uid:x}"
        if context:
            body["error"] = {"context": context}
        if body:
            self._reply(msg, status, datatype=Datatype.JSON, value=_json(body))
        else:
            self._reply(msg, status)

    def _handle(self, msg: Message) -> None:
        if msg.magic == Magic.SERVER_REQUEST:  # its opcodes are the server's table (reference 4.9), never run
            self.close(f"magic {Magic.SERVER_REQUEST.kv_name} from a client: the server disconnects (kv_engine: "
                       "'Received a server command')")
            return
        if msg.is_response:
            if msg.opcode == Opcode.DCP_NOOP:  # the client's answer to our noop
                self.noop_outstanding = False
            elif msg.opcode in (Opcode.DCP_SNAPSHOT_MARKER, Opcode.DCP_SET_VBUCKET_STATE):
                self._takeover_answer(msg)
            return
        opcode = msg.opcode
        if self.user is None and opcode not in BEFORE_AUTH:
            self._error(msg, Status.EACCESS, "authenticate first")
            return
        unvalidated = UNVALIDATED.get(opcode)
        if unvalidated is not None:
            self._reply(msg, unvalidated)
            return
        refused = request_error(msg, self.datatypes, self.collections) or command_error(msg) \
            if opcode in _KNOWN_OPCODES else None
        if refused is not None:
            self._error(msg, *refused)
            return
        if opcode in DCP_RESTRICTED and HelloFeature.UNORDERED_EXECUTION in self.features:
            self._error(msg, Status.NOT_SUPPORTED, "DCP on connections with unordered execution is not supported")
            return
        if opcode in NEEDS_DCP and not self._is_dcp(msg):
            return
        handler = _HANDLERS.get(opcode)
        document = _DOCUMENT_COMMANDS.get(opcode)
        if document is not None:
            kv.handle(self, msg, document)
            return
        if handler is None:
            self._unhandled(msg)
            return
        handler(self, msg)

    def _is_dcp(self, msg: Message) -> bool:
        """Whether this is a DCP connection; if not, the Einval a DCP command gets (reference 3.1)."""
        if self.dcp_flags is None:
            self._error(msg, Status.EINVAL, "The command can only be sent on a DCP connection")
        return self.dcp_flags is not None

    def _unhandled(self, msg: Message) -> None:
        """A command no handler serves: answered as kv_engine answers it, never a silent close."""
        opcode = msg.opcode
        if opcode not in _KNOWN_OPCODES:
            self._reply(msg, Status.UNKNOWN_COMMAND)
        elif opcode in (Opcode.NOOP, Opcode.VERSION):
            self._reply(msg, value=f"dcpctl serve {__version__}".encode() if opcode == Opcode.VERSION else b"")
        elif opcode == Opcode.DCP_ADD_STREAM:  # reference 3.3: sent to a producer, it disconnects
            self.close("DCP_ADD_STREAM sent to a producer: the server disconnects (it is for consumers)")
        elif opcode in NEEDS_DCP:
            self._error(msg, Status.NOT_SUPPORTED, f"{msg.opcode_name} is sent by a producer; dcpctl serve is one")
        elif self._needs_bucket(msg) is not None:
            self._error(msg, Status.NOT_SUPPORTED, f"dcpctl serve emulates a DCP producer, not {msg.opcode_name}")

    # --- bootstrap commands -----------------------------------------------------------------------
    def _hello(self, msg: Message) -> None:
        asked = msg.hello_features
        for feature in NOTIFICATIONS:
            if feature in asked and HelloFeature.DUPLEX not in asked:
                self._error(msg, Status.EINVAL, f"{HelloFeature(feature).kv_name} needs Duplex")
                return
        wanted = [f for f in asked if f in FEATURES]
        if self.dcp_flags is not None:  # not for a DCP connection: left out of the answer, as kv_engine does
            wanted = [f for f in wanted if f != HelloFeature.UNORDERED_EXECUTION]
        if HelloFeature.CLUSTERMAP_CHANGE_NOTIFICATION_BRIEF in wanted:
            wanted = [f for f in wanted if f != HelloFeature.CLUSTERMAP_CHANGE_NOTIFICATION]
        self.features = list(dict.fromkeys(wanted))
        self._reply(msg, features=self.features)

    def _list_mechs(self, msg: Message) -> None:
        self._reply(msg, value=" ".join([*MECHANISMS, PLAIN]).encode())

    def _sasl_auth(self, msg: Message) -> None:
        if self.dcp_flags is not None:
            self._reply(msg, Status.NOT_SUPPORTED)  # SASL is disabled once DCP_OPEN succeeded (reference 3.2)
            return
        mechanism = canonical(msg.key.decode(errors="replace"))
        users = self.node.cluster.users
        if mechanism == PLAIN:
            try:
                user, password = parse_plain(msg.value)
            except SaslError:
                self._reply(msg, Status.AUTH_ERROR)
                return
            if users.get(user) == password:
                self._authenticated(user)
                self._reply(msg)
            else:
                self._reply(msg, Status.AUTH_ERROR)
            return
        if mechanism not in MECHANISMS:
            self._reply(msg, Status.AUTH_ERROR)
            return
        self.sasl = ScramServer(mechanism, users, salt_seed=self.node.cluster.bucket.name.encode())
        try:
            challenge = self.sasl.first(msg.value)
        except SaslError:
            self.sasl = None
            self._reply(msg, Status.AUTH_ERROR)
            return
        self._reply(msg, Status.AUTH_CONTINUE, value=challenge)

    def _sasl_step(self, msg: Message) -> None:
        sasl, self.sasl = self.sasl, None
        if sasl is None or canonical(msg.key.decode(errors="replace")) != sasl.mechanism:
            self._reply(msg, Status.AUTH_ERROR)
            return
        try:
            signature = sasl.final(msg.value)
        except SaslError:
            self._reply(msg, Status.AUTH_ERROR)
            return
        self._authenticated(sasl.user)
        self._reply(msg, value=signature)

    def _select_bucket(self, msg: Message) -> None:
        name = msg.key.decode(errors="replace")
        if self.dcp_flags is not None:
            self._reply(msg, Status.NOT_SUPPORTED)
        elif name == NO_BUCKET_NAME:
            self.bucket = None
            self._reply(msg)
        elif name != self.node.cluster.bucket.name:
            self._reply(msg, Status.KEY_ENOENT)
        else:
            self.bucket = self.node.cluster.bucket
            self.pushed_revision = 0  # a new bucket: nothing of its map pushed yet
            self._reply(msg)

    def _error_map(self, msg: Message) -> None:
        """kv_engine's error map (producer/errormap.py), of the version the value asks for (command_error
        checked it is 2 bytes, on vbucket 0); version 0 is KeyEnoent, as the executor answers it."""
        version = msg.field("error_map_version")
        if version is None:  # (not 2 bytes: command_error answered it)
            self._error(msg, Status.EINVAL, f"Request value must be of length {ERROR_MAP_VERSION_SIZE}")
        elif version == 0:
            self._reply(msg, Status.KEY_ENOENT)
        else:
            self._reply(msg, datatype=Datatype.JSON, value=_json(errormap.error_map(int(version))))

    def _needs_bucket(self, msg: Message) -> Bucket | None:
        if self.bucket is None:
            self._error(msg, Status.NO_BUCKET, "select a bucket first")
        return self.bucket

    def _cluster_config(self, msg: Message) -> None:
        if self.bucket is not None:
            self.pushed_revision = self.node.cluster.revision
        self._reply(msg, datatype=Datatype.JSON, value=_json(self._config()))

    def _config(self) -> dict[str, Any]:
        """The map this connection is given: its bucket's, or the cluster's before SELECT_BUCKET."""
        config = self.node.cluster.config(self.peer_host, bucket=self.bucket is not None)
        config["nodesExt"][self.node.index]["thisNode"] = True
        return config

    def _push_clustermap(self) -> None:
        """When the bucket's map changed, a ClustermapChangeNotification to a connection that asked for one
        and does not have this revision yet (kv_engine's push_cluster_config): the epoch and revision, the
        bucket's name, and unless brief the map."""
        cluster = self.node.cluster
        if cluster.revision == self.known_revision:
            return
        self.known_revision = cluster.revision
        mode = next((f for f in NOTIFICATIONS if f in self.features), None)
        if mode is None or self.bucket is None or cluster.revision <= self.pushed_revision:
            return
        self.pushed_revision = cluster.revision
        key = self.bucket.name.encode()
        if mode == HelloFeature.CLUSTERMAP_CHANGE_NOTIFICATION_BRIEF:
            self._queue(build.server_request(ServerOpcode.CLUSTERMAP_CHANGE_NOTIFICATION, key=key, epoch=MAP_EPOCH,
                                             revision=cluster.revision))
            return
        datatype = Datatype.JSON if HelloFeature.JSON in self.features else 0
        self._queue(build.server_request(ServerOpcode.CLUSTERMAP_CHANGE_NOTIFICATION, key=key, datatype=datatype,
                                         value=_json(self._config()), epoch=MAP_EPOCH, revision=cluster.revision))

    def _here(self, number: int) -> VBucket | None:
        """A vbucket this node has, in any state (active, or dead once taken over)."""
        cluster = self.node.cluster
        if 0 <= number < len(cluster.bucket.vbuckets) and cluster.owner[number] == self.node.index:
            return cluster.bucket.vbuckets[number]
        return None

    def _vbucket(self, number: int) -> VBucket | None:
        """A vbucket whose active copy is on this node."""
        vb = self._here(number)
        return vb if vb is not None and vb.state == "active" else None

    def _all_vb_seqnos(self, msg: Message) -> None:
        """Each active vbucket's seqno (reference 4.6, kv_engine's getAllVBucketSequenceNumbers): with a
        collection id that collection's high seqno; a client without Collections gets the default
        collection's; without Collections or SyncReplication the max visible seqno (no pending prepare)."""
        extras = msg.extras or {}
        state = extras.get("vbucket_state_filter", VBUCKET_STATE_ALIVE)
        if not VBUCKET_STATE_ALIVE <= state <= VBUCKET_STATE_DEAD:
            self._error(msg, Status.EINVAL, "Request vbucket state invalid")
            return
        bucket = self._needs_bucket(msg)
        if bucket is None:
            return
        collection = extras.get("collection_id")
        if collection is not None and not self.collections:
            self._reply(msg, Status.EINVAL)
            return
        if collection is not None and collection not in bucket.manifest.collections:
            self._error(msg, Status.UNKNOWN_COLLECTION)
            return
        if collection is None and not self.collections:
            collection = DEFAULT_COLLECTION  # a legacy client sees the default collection only
        visible = not (self.collections or HelloFeature.SYNC_REPLICATION in self.features)
        # a vbucket here is active, or dead once taken over (no replica or pending copies)
        wanted = "dead" if state == VBUCKET_STATE_DEAD else "active" if state in (
            VBUCKET_STATE_ALIVE, VBUCKET_STATE_ACTIVE) else None
        # no collection: a collections client, whose seqno is the vbucket's high seqno (visible or not)
        entries = [(vb.vbucket, vb.high_seqno if collection is None else bucket.collection_high_seqno(
                    vb, frozenset({collection}), visible=visible)) for vb in bucket.vbuckets
                   if vb.state == wanted and self._here(vb.vbucket) is vb]
        self._reply(msg, vbucket_seqnos=entries)

    def _active_vbucket(self, msg: Message) -> VBucket | None:
        """The request's vbucket if a bucket is selected and its copy here is active; otherwise the
        request is answered (NoBucket, NotMyVbucket) and None returned."""
        if self._needs_bucket(msg) is None:
            return None
        vb = self._vbucket(msg.vbucket_or_status)
        if vb is None:
            self._reply(msg, Status.NOT_MY_VBUCKET)
        return vb

    def _failover_log(self, msg: Message) -> None:
        # any vbucket the node has, a dead one too (a copy taken over still has its log: kv_engine's
        # getFailoverLog asks only that the vbucket exists)
        if self._needs_bucket(msg) is None:
            return
        vb = self._here(msg.vbucket_or_status)
        if vb is None:
            self._reply(msg, Status.NOT_MY_VBUCKET)
            return
        self._reply(msg, failover_log=[(e.vbucket_uuid, e.seqno) for e in vb.failover_log])

    def _observe_seqno(self, msg: Message) -> None:
        vb = self._active_vbucket(msg)
        if vb is None:
            return
        if len(msg.value) != 8:
            self._reply(msg, Status.EINVAL)
            return
        uuid = int.from_bytes(msg.value, "big")
        log = vb.failover_log
        if uuid == log[0].vbucket_uuid:
            self._reply(msg, observed_vbucket=vb.vbucket, vbucket_uuid=uuid,
                        last_persisted_seqno=vb.high_seqno, current_seqno=vb.high_seqno)
            return
        for i, entry in enumerate(log):
            if entry.vbucket_uuid == uuid:
                self._reply(msg, observed_vbucket=vb.vbucket, vbucket_uuid=log[0].vbucket_uuid,
                            last_persisted_seqno=vb.high_seqno, current_seqno=vb.high_seqno,
                            old_vbucket_uuid=uuid, last_received_seqno=log[i - 1].seqno)
                return
        self._reply(msg, Status.KEY_ENOENT)

    def _stat(self, msg: Message) -> None:
        bucket = self._needs_bucket(msg)
        if bucket is None:
            return
        key = msg.key.decode(errors="replace")
        if key.startswith(TAKEOVER_STATS) and len(key) > len(TAKEOVER_STATS) + 1:  # kv_engine's test
            self._takeover_stats(msg, bucket, key[len(TAKEOVER_STATS) + 1:].split())
            return
        group, _, arg = key.partition(" ")
        vbs = [vb for vb in bucket.vbuckets if self._vbucket(vb.vbucket) is not None
               and (not arg or str(vb.vbucket) == arg.strip())]
        stats: list[tuple[str, str]] = []
        if group == "failovers":
            for vb in vbs:
                stats.append((f"vb_{vb.vbucket}:num_entries", str(len(vb.failover_log))))
                for i, entry in enumerate(vb.failover_log):
                    stats += [(f"vb_{vb.vbucket}:{i}:id", str(entry.vbucket_uuid)),
                              (f"vb_{vb.vbucket}:{i}:seq", str(entry.seqno))]
                stats.append((f"vb_{vb.vbucket}:num_erroneous_entries_erased", "0"))
        elif group == "vbucket-seqno":
            for vb in vbs:
                p = f"vb_{vb.vbucket}:"
                stats += [(p + "high_seqno", str(vb.high_seqno)), (p + "abs_high_seqno", str(vb.high_seqno)),
                          (p + "last_persisted_seqno", str(vb.high_seqno)),
                          (p + "uuid", str(vb.failover_log[0].vbucket_uuid)),
                          (p + "purge_seqno", str(vb.purge_seqno)),
                          (p + "max_visible_seqno", str(bucket.marker_seqnos(vb, vb.high_seqno)[0]))]
        elif group == "dcp":
            name = self.name or "-"
            stats += [("ep_dcp_count", "1" if self.dcp_flags is not None else "0"),
                      (f"eq_dcpq:{name}:type", "producer"),
                      (f"eq_dcpq:{name}:unacked_bytes", str(self.outstanding)),
                      (f"eq_dcpq:{name}:max_buffer_bytes", str(self.buffer_size)),
                      (f"eq_dcpq:{name}:num_streams", str(len(self.streams))),
                      (f"eq_dcpq:{name}:items_sent", str(self.stats["items"])),
                      (f"eq_dcpq:{name}:noop_enabled", str(self.noop_enabled).lower())]
        else:
            self._reply(msg, Status.KEY_ENOENT)
            return
        for key, value in stats:
            self._reply(msg, key=key.encode(), value=value.encode())
        self._reply(msg)  # the empty terminator

    def _takeover_stats(self, msg: Message, bucket: Bucket, words: list[str]) -> None:
        """STAT dcp-vbtakeover <vbucket> [name] (what ns_server polls in a rebalance; kv_engine's
        doDcpVbTakeoverStats): the vbucket's counts, and how far the named connection's stream of it is."""
        number = _stat_vbucket(words[0] if words else "")
        vb = self._here(number)
        if vb is None:
            self._reply(msg, Status.NOT_MY_VBUCKET)
            return
        alive, deleted = bucket.document_counts(vb)
        producer = self.node.cluster.dcp_names.get((self.node.index, words[1])) if len(words) > 1 else None
        if producer is None:
            # no such connection: what the vbucket would take to send whole (its open checkpoint: the items
            # written since serve started, as the generated ones are its disk's)
            stats: list[tuple[str, str | int]] = [
                ("status", "connection_does_not_exist"), ("on_disk_deletes", deleted), ("vb_items", alive),
                ("chk_items", len(vb.written) if alive else 0), ("estimate", alive + deleted)]
        else:
            stats = producer.stream_takeover_stats(vb, alive, deleted)
        for name, value in stats:
            self._reply(msg, key=name.encode(), value=str(value).encode())
        self._reply(msg)

    def stream_takeover_stats(self, vb: VBucket, alive: int, deleted: int) -> list[tuple[str, str | int]]:
        """This connection's part of STAT dcp-vbtakeover (kv_engine's DcpProducer and ActiveStream
        addTakeoverStats): nothing with stream ids; a stream ended or never asked for sends nothing more; else
        its phase and the items it has still to send, from the backfill's remaining seqnos and the
        "checkpoint" after it, which stops at the stream's end seqno."""
        if self.stream_ids:
            return []  # kv_engine reports traditional streams only
        stream = self.streams.get((vb.vbucket, 0))
        if stream is None or stream.ending == -1:
            return [("status", "stream_does_not_exist"), ("estimate", 0), ("backfillRemaining", 0)]
        name = ("name", f"eq_dcpq:{self.name}")
        if stream.ending is not None:
            return [name, ("status", "stream_is_dead"), ("estimate", 0), ("backfillRemaining", 0)]
        last = min(vb.high_seqno, stream.end_seqno)
        remaining: int | None = None
        if stream.backfill and stream.markers == 0 and stream.next_seqno <= last:
            status, cursor = "calculating-item-count", last + 1  # the backfill not begun: its size unknown yet
        elif stream.in_backfill and stream.next_seqno <= stream.backfill_end:
            status, cursor = "backfilling", stream.backfill_end + 1
            remaining = stream.backfill_end - stream.next_seqno + 1
        else:
            status, cursor = "in-memory", stream.next_seqno
        checkpoint = max(0, last - cursor + 1) if alive else 0  # what follows the cursor, up to the end seqno
        stats: list[tuple[str, str | int]] = [name, ("status", status)]
        if remaining is not None:
            stats.append(("backfillRemaining", remaining))
        return [*stats, ("estimate", (remaining or 0) + checkpoint), ("chk_items", checkpoint), ("vb_items", alive),
                ("on_disk_deletes", deleted)]

    # --- DCP ----------------------------------------------------------------------------------------
    def _dcp_open(self, msg: Message) -> None:
        if self._needs_bucket(msg) is None:
            return
        flags = (msg.extras or {}).get("flags", 0)  # valid: command_error passed them
        name = msg.key.decode(errors="replace")
        if self.dcp_flags is not None:
            self._error(msg, Status.EINVAL, "The connection is already opened as a DCP connection")
            return
        if not flags & DcpOpenFlag.PRODUCER:
            self._reply(msg, Status.NOT_SUPPORTED)  # dcpctl serve emulates producers only
            return
        self.dcp_flags = flags
        self.name = name
        older = self.node.cluster.dcp_names.get((self.node.index, name))
        if older is not None and older is not self:
            older.close(f"DCP_OPEN of the name {name!r} on another connection: the server disconnects the older one")
        self.node.cluster.dcp_names[(self.node.index, name)] = self
        if HelloFeature.JSON not in self.features:
            self.features.append(HelloFeature.JSON)  # DCP_OPEN turns on JSON (reference 3.2)
        self._reply(msg)

    def _dcp_control(self, msg: Message) -> None:
        key = msg.key.decode(errors="replace")
        value = msg.value.decode(errors="replace")
        status = _control_status(self, key, value)
        if status == Status.SUCCESS:
            self.controls[key] = value
            if key == "connection_buffer_size":
                self.buffer_size = _u32(value) or 0
            elif key == "enable_noop":
                self.noop_enabled = value == "true"
                self.last_noop = self.now
            elif key == "set_noop_interval":
                self.noop_interval = float(value)
        self._reply(msg, status)

    def _stream_request(self, msg: Message) -> None:
        bucket = self._needs_bucket(msg)
        if bucket is None:
            return
        if self.now < self.node.cluster.requests_hang_until:
            return  # a scenario's hang: the request is never answered (noops go on), as a stuck backfill
        extras = msg.extras
        if extras is None:  # (the header's check had them 48 bytes, which always decode)
            self._error(msg, Status.EINVAL, f"Request must include extras of length {STREAM_REQUEST_EXTRAS}")
            return
        flags = extras.get("flags", 0)
        if flags & StreamRequestFlag.CACHE_TRANSFER:
            self._reply(msg, Status.EINVAL)  # valid with TakeOver or ActiveVbOnly, but serve has no cache to send
            return
        filter_answer, filter_ids, filter_scope, stream_id, purge = self._filter(msg)
        req = StreamRequest(extras["start_seqno"], extras["vbucket_uuid"], extras["snap_start_seqno"],
                            extras["snap_end_seqno"], extras["end_seqno"], flags, purge)
        number = msg.vbucket_or_status
        vb = self._vbucket(number)  # a dead vbucket here is as absent as one on another node
        # a filtered stream's view has its collections' high seqno: ToLatest ends there, and the purge rule may
        # exempt it (reference 3.4.2, 9.1 step 2); pass-through and legacy streams have none
        collection_high = bucket.collection_high_seqno(vb, filter_ids) if vb is not None and filter_ids is not None \
            else None
        answer = rollback.check_stream_request(
            req, vb.view(collection_high) if vb is not None else None,
            stream_exists=(number, stream_id) in self.streams,
            noop_enabled=self.noop_enabled,
            xattrs_or_collections=bool(self.collections or (self.dcp_flags or 0) & DcpOpenFlag.INCLUDE_XATTRS),
            filter_answer=filter_answer)
        if answer.status == "Rollback":
            self._reply(msg, Status.ROLLBACK, rollback_seqno=answer.rollback_seqno)
            return
        if answer.status != "Success" or vb is None:
            # the rollback rules name statuses as kv_engine does; _error adds an unknown collection's manifest uid
            self._error(msg, STATUSES.code(answer.status), answer.reason)
            return
        start = answer.start_seqno if answer.start_seqno is not None else req.start_seqno
        end = answer.end_seqno if answer.end_seqno is not None else req.end_seqno
        takeover = bool(flags & StreamRequestFlag.TAKE_OVER)
        if takeover:
            end = TAKEOVER_END
        self._reply(msg, failover_log=[(e.vbucket_uuid, e.seqno) for e in vb.failover_log])
        snap_start = start if flags & StreamRequestFlag.FROM_LATEST else req.snap_start
        stream = _Stream(number, stream_id, msg.opaque, snap_start, start + 1, end, self.encoding(), filter_ids,
                         filter_scope,
                         sync_replication=self.encoding().sync_writes and "consumer_name" in self.controls,
                         # kv_engine's isSkipDeletesInInitialBackfillEnabled: collection-enabled streams only
                         skip_deletes=start == 0 and self.collections and bool(
                             (self.dcp_flags or 0) & DcpOpenFlag.SKIP_DELETES_IN_INITIAL_BACKFILL),
                         takeover=takeover, new_checkpoint=takeover, backfill=start < vb.high_seqno)
        if start >= end:
            stream.ending = StreamEndStatus.OK
        self.streams[(number, stream_id)] = stream
        self.takeovers += takeover

    def _filter(self, msg: Message) -> tuple[Answer | None, frozenset[int] | None, int | None, int, int | None]:
        """The value's verdict (reference 3.4.4 and 9.3 step 6): answer, collection filter, scope filter, sid,
        purge."""
        bucket = self.node.cluster.bucket
        frame_sid = msg.stream_id
        if not msg.value:
            if self.stream_ids:
                return _refused("DcpStreamIdInvalid", "sid_missing", "stream ids are enabled: a sid is required")
            if frame_sid is not None:
                return _refused("DcpStreamIdInvalid", "sid_unexpected", "a sid without enable_stream_id")
            if not self.collections and DEFAULT_COLLECTION not in bucket.manifest.collections:
                # a legacy stream is the default collection's: once dropped there is nothing to stream (3.4.4)
                return _refused("UnknownCollection", "unknown_collection", "the default collection was dropped")
            return None, None, None, 0, None
        _, diags = srv.validate(msg.value)
        if any(d.name not in IGNORED_VALUE_DIAGNOSTICS for d in diags):
            if any(d.name == "stream_request_sid_invalid" for d in diags):
                return _refused("DcpStreamIdInvalid", "sid_invalid", diags[0].message)
            return _refused("Einval", "bad_value", diags[0].message)
        value = msg.stream_request_value
        if value is None:  # not a stream request's JSON value: validate() said so already, this is the type's
            return _refused("Einval", "bad_value", "the value is not a JSON object")
        sid = value.sid or 0
        if sid and not self.stream_ids:
            return _refused("DcpStreamIdInvalid", "sid_unexpected", "a sid without enable_stream_id")
        if not sid and self.stream_ids:
            return _refused("DcpStreamIdInvalid", "sid_missing", "stream ids are enabled: a sid is required")
        ids: frozenset[int] | None = None
        scope: int | None = None
        if value.collections is not None:
            ids = frozenset(value.collections)
            unknown = ids - set(bucket.manifest.collections)
            if unknown:
                return _refused("UnknownCollection", "unknown_collection", f"collection {min(unknown):x}", sid)
        elif value.scope is not None:
            scope = value.scope
            if scope not in bucket.manifest.scopes:
                return _refused("UnknownScope", "unknown_scope", f"scope {scope:x}", sid)
            ids = frozenset(c for c, (s, _) in bucket.manifest.collections.items() if s == scope)
        if ids is not None and self.controls.get("enable_sync_writes") == "true":
            return _refused("NotSupported", "filtered_sync_writes", "a collection or scope filter cannot be "
                            "combined with enable_sync_writes", sid)
        return None, ids, scope, sid, value.purge_seqno

    def _close_stream(self, msg: Message) -> None:
        sid = msg.stream_id or 0
        if bool(sid) != self.stream_ids:
            self._error(msg, Status.DCP_STREAM_ID_INVALID, "sid and enable_stream_id disagree")
            return
        stream = self.streams.get((msg.vbucket_or_status, sid))
        if stream is None or stream.ending is not None:
            self._reply(msg, Status.KEY_ENOENT)
            return
        self._reply(msg)
        if self.controls.get("send_stream_end_on_client_close_stream") == "true":
            stream.ending = StreamEndStatus.CLOSED
        else:
            self._forget((stream.vbucket, sid))

    def _forget(self, key: tuple[int, int]) -> None:
        stream = self.streams.pop(key)
        if stream.takeover:  # its end ends its vbucket's backed-up state (kv_engine's endStream)
            self.takeovers -= 1
            self.node.cluster.bucket.vbuckets[stream.vbucket].takeover_backed_up = False

    def _takeover_answer(self, msg: Message) -> None:
        """A consumer's answer to a marker or a vbucket state, found by its opaque and whatever its status (as
        kv_engine's DcpProducer::handleResponse does): a takeover moves on once its answers are in."""
        if not self.takeovers:  # a flood of answers costs nothing on other connections
            return
        stream = next((s for s in self.streams.values() if s.opaque == msg.opaque), None)
        if stream is None:
            return
        if msg.opcode == Opcode.DCP_SNAPSHOT_MARKER:
            stream.marker_acks -= 1
        elif not stream.takeover_wait:
            return  # kv_engine logs "Unexpected ack for set vbucket op" and carries on
        elif stream.takeover_state == VBUCKET_PENDING:
            # the consumer's copy is pending: this one turns dead (no write, stream request or KV command is
            # taken for it any more) and the stream sends what came in meanwhile, then the active state
            vb = self.node.cluster.bucket.vbuckets[stream.vbucket]
            vb.state, vb.takeover_backed_up = "dead", False  # a state change ends the backed-up state too
            stream.takeover_state = VBUCKET_ACTIVE
            stream.takeover_wait = False
            stream.new_checkpoint = True
            stream.takeover_since = self.now  # a new sending phase begins
        else:
            stream.ending = StreamEndStatus.OK

    def _buffer_ack(self, msg: Message) -> None:
        extras = msg.extras or {}  # answered only on error (reference 3.14): request_error checked its shape
        self.outstanding = max(0, self.outstanding - int(extras.get("bytes_to_ack", 0)))

    def _seqno_acknowledged(self, msg: Message) -> None:
        """A consumer's acknowledgement of a prepare (reference 3.1, 3.17: client to producer, answered only on
        error), which needs enable_sync_writes and a consumer_name; then, as kv_engine's
        DcpProducer::seqno_acknowledged: a vbucket not on this node is NotMyVbucket, one this connection streams
        nothing of disconnects (a logic error there), and one it streams is taken silently, whatever the
        opaque. It counts towards no write: serve's replicas are its own (see --silent-replicas)."""
        number = msg.vbucket_or_status
        if self.controls.get("enable_sync_writes") != "true" or not self.controls.get("consumer_name"):
            self._error(msg, Status.EINVAL, "DCP_SEQNO_ACKNOWLEDGED needs enable_sync_writes and a consumer_name")
        elif self._here(number) is None:
            self._error(msg, Status.NOT_MY_VBUCKET)
        elif not any(vbucket == number for vbucket, _ in self.streams):
            self.close(f"DCP_SEQNO_ACKNOWLEDGED for vbucket {number}, which this connection streams nothing of: "
                       "the server disconnects")

    def _noop_request(self, msg: Message) -> None:
        # reference 3.13: a DCP_NOOP request to a producer disconnects the client (NEEDS_DCP answered the rest)
        self.close("DCP_NOOP request from the client on a DCP connection: the producer disconnects "
                   "(only the server sends noops; the client answers them)")

    # --- output ---------------------------------------------------------------------------------------
    def end_stream(self, vbucket: int, status: int) -> None:
        """End every stream of a vbucket (a scenario: the vbucket moved, failed over, history was lost)."""
        for stream in self.streams.values():
            if stream.vbucket == vbucket and stream.ending is None:
                stream.ending = status

    def tick(self, now: float) -> None:
        self.now = now
        self._push_clustermap()
        if self.noop_enabled and self.dcp_flags is not None:
            if not self.noop_outstanding and now - self.last_noop >= self.noop_interval:
                self.noop_opaque += 1
                self._queue(build.request(Opcode.DCP_NOOP, opaque=self.noop_opaque))
                self.noop_outstanding = True
                self.last_noop = now
            if now - self.last_received > IDLE_TIMEOUT:
                self.close(f"nothing received for {IDLE_TIMEOUT:.0f} s with noops enabled (dcp_idle_timeout)")

    def produce(self, max_bytes: int, max_items: int | None = None) -> bytes:
        """Queued answers, then stream data up to ``max_bytes``, the flow-control window and ``max_items``
        items (0: answers only; a scenario's item trigger stops the stream exactly there). Requests left in
        the framer by a full send queue are executed first, up to the queue's size again."""
        self._execute()
        parts = self.out
        self.out = []
        size = self.queued
        self.queued = 0
        streams = list(self.streams.values())
        if not streams or max_items == 0:
            return b"".join(parts)
        self._item_limit = max_items
        start = self._turn % len(streams)
        self._turn += 1
        for stream in streams[start:] + streams[:start]:
            if size >= max_bytes or self._item_limit == 0:
                break
            size += self._stream_data(stream, parts, min(FAIR_SHARE, max_bytes - size))
        for key in [k for k, s in self.streams.items() if s.ending == -1]:
            self._forget(key)
        return b"".join(parts)

    def _spend(self, items: int) -> None:
        if self._item_limit is not None:
            self._item_limit -= items

    def _window(self) -> int | None:
        """Bytes the flow-control window still allows, or None without flow control."""
        if self.buffer_size <= 0:
            return None
        return self.buffer_size - self.outstanding

    def _count(self, nbytes: int) -> None:
        if self.buffer_size > 0:
            self.outstanding += nbytes

    def _stream_data(self, stream: _Stream, parts: list[bytes], budget: int) -> int:
        bucket = self.node.cluster.bucket
        vb = bucket.vbuckets[stream.vbucket]
        sent = 0
        while sent < budget:
            window = self._window()
            if (window is not None and window <= 0) or self._item_limit == 0:
                return sent
            if stream.ending is not None:
                if stream.ending >= 0:
                    status = stream.ending
                    if status in _COLLECTION_END_STATUSES and not self.collections:
                        status = StreamEndStatus.OK  # FilterEmpty and LostPrivileges read as Ok to legacy clients (3.7)
                    data = self._message(stream, Opcode.DCP_STREAM_END, stream_end_status=status)
                    parts.append(data)
                    self._count(len(data))
                    sent += len(data)
                    stream.ending = -1
                return sent
            if stream.snapshot_end > stream.advanced and stream.next_seqno > stream.snapshot_end:
                sent += self._seqno_advanced(stream, vb, parts)
                continue
            last = min(vb.high_seqno, stream.end_seqno)
            if stream.next_seqno > stream.end_seqno:
                stream.ending = StreamEndStatus.OK
                continue
            if stream.next_seqno > stream.snapshot_end and stream.settle_filter():
                stream.ending = StreamEndStatus.FILTER_EMPTY  # its filter's collections (or scope) all dropped
                continue
            if stream.next_seqno > last:  # caught up: wait for new items
                return sent + (self._takeover_state(stream, parts) if stream.takeover else 0)
            if stream.next_seqno > stream.snapshot_end:
                begin, advance_only = stream.next_seqno, False
                if stream.backfill and not stream.markers:  # what the backfill's scan, to last, leaves out
                    stream.backfill_end = last
                    stream.no_tombstones_upto = last if stream.skip_deletes else vb.purge_seqno
                    stream.hidden, stream.superseded = bucket.hidden_in_backfill(vb, last)
                    if not stream.encoding.collections:
                        if stream.encoding.sync_writes and bucket.manifest_of(vb).uid:
                            # kv_engine's markLegacyDiskSnapshot: no sync writes on a legacy backfill of a
                            # vbucket with collections
                            stream.ending = StreamEndStatus.BACKFILL_FAIL
                            continue
                        seen = self._legacy_end(stream, vb, last)
                        if seen < stream.next_seqno:  # nothing for it: no snapshot, and the backfill is cancelled
                            self._pass_over(stream, vb, last)
                            stream.backfill = False
                            continue
                        last = seen
                else:
                    span = self._memory_span(stream, vb, last)
                    if span is None:  # nothing for it: no snapshot
                        self._pass_over(stream, vb, last)
                        continue
                    begin, last, advance_only = span
                # a snapshot of nothing the stream is sent, only to be advanced over, is kv_engine's
                # sendSnapshotAndSeqnoAdvanced: a v1 marker that is never a takeover's to answer
                flags = self._marker_flags(stream, answered=not advance_only)
                marker: dict[str, int] = {}
                disk = bool(flags & SnapshotMarkerFlag.DISK)
                prepared = bucket.high_prepared_seqno(vb, last) if disk and stream.sync_replication else 0
                if disk and self.controls.get("max_marker_version") == "2.2" and (vb.purge_seqno or prepared):
                    # v2.2: a disk snapshot with a purge seqno or a high prepared seqno to send (3.8); the
                    # client's next stream request may name the purge seqno it learnt (9.1)
                    visible, completed = bucket.marker_seqnos(vb, last)
                    marker = {"marker_version": MARKER_V2_2, "max_visible_seqno": visible,
                              "high_completed_seqno": completed, "purge_seqno": vb.purge_seqno,
                              "high_prepared_seqno": prepared}
                elif stream.sync_replication and not advance_only:  # the high completed seqno: disk snapshots only
                    visible, completed = bucket.marker_seqnos(vb, last)
                    marker = {"marker_version": MARKER_V2_0, "max_visible_seqno": visible,
                              "high_completed_seqno": completed if disk else 0}
                # the first marker starts at the requested snapshot's start, though its first item is the next
                # seqno (ActiveStream::snapshot and markDiskSnapshot take the lower of the two)
                first = stream.snap_start_seqno if stream.markers == 0 else begin
                data = self._message(stream, Opcode.DCP_SNAPSHOT_MARKER, snap_start_seqno=first,
                                     snap_end_seqno=last, snapshot_flags=flags, **marker)
                parts.append(data)
                self._count(len(data))
                sent += len(data)
                stream.snapshot_end = last
                stream.markers += 1
                continue
            upto = stream.snapshot_end
            if stream.imaged(vb):
                sent += self._image_items(stream, vb, upto, parts, budget - sent)
            else:
                sent += self._each_item(stream, vb, upto, parts, budget - sent)
        return sent

    def _legacy_end(self, stream: _Stream, vb: VBucket, last: int) -> int:
        """Where a legacy stream's disk snapshot ends: the newest seqno up to ``last`` that it is sent (its
        default collection's, not a prepare or abort without sync writes, nor what its backfill leaves out),
        or below its next seqno when there is none. Such a stream can be sent no DCP_SEQNO_ADVANCED, so
        kv_engine ends its backfill at the default collection's max visible seqno (markLegacyDiskSnapshot)."""
        bucket = self.node.cluster.bucket
        encoding = stream.encoding
        seqno = last if encoding.sync_writes else min(last, bucket.collection_high_seqno(
            vb, DEFAULT_ONLY, visible=True))
        while seqno >= stream.next_seqno:
            item = bucket.item(vb, seqno)
            if bucket.visible(item, encoding, None) and not stream.backfill_hides(bucket, item):
                break
            seqno -= 1
        return seqno

    def _memory_span(self, stream: _Stream, vb: VBucket, last: int) -> tuple[int, int, bool] | None:
        """The range of a memory snapshot of the seqnos from the stream's next to ``last``, as kv_engine's
        processItemsInner and ActiveStream::snapshot make it of what its checkpoints hold: from the first item
        the stream is sent to the last, or on to a later one of its collections it is not sent (a prepare or
        abort without sync writes, a ModifyCollection without FlatBuffers) where a DCP_SEQNO_ADVANCED can
        say so (highNonVisibleSeqno; :meth:`_seqno_advanced` sends it); and whether it holds nothing but that
        (MB-48368's snapshot, to be advanced over). Nothing to send is no snapshot (None). kv_engine pins a
        checkpoint's first marker to the checkpoint's start where that is above the last marker's end; serve
        keeps no checkpoints, so such a marker starts at its first item too.
        (kv_engine's other case, a first snapshot filtered away whose client is inside a snapshot that ends
        past it, MB-47009, needs a client ahead of the high seqno: the rollback rules answer it first.)"""
        bucket = self.node.cluster.bucket
        encoding = stream.encoding
        advances = encoding.collections and not (encoding.sync_writes and encoding.flatbuffers_system_events)
        unfiltered = dataclasses.replace(encoding, sync_writes=True, flatbuffers_system_events=True)
        # a copy of the stream to ask, markers + 1 as no backfill hides what is in memory
        probe = dataclasses.replace(stream, dropping=set(stream.dropping), markers=stream.markers + 1)

        def sent(seqno: int) -> bool:
            return probe.sees(bucket, bucket.item(vb, seqno))

        def advanced(item: Item) -> bool:  # (one the stream is not sent)
            return advances and bucket.visible(item, unfiltered, probe.filter_ids, probe.filter_scope)

        first = seen = hidden = 0
        if stream.filter_scope is not None and next(self._event_seqnos(vb, stream.next_seqno, last), 0):
            # an event may widen its filter (its scope's new collection): read in order, following the
            # events as kv_engine's filter does while it reads the checkpoint
            for seqno in range(stream.next_seqno, last + 1):
                item = bucket.item(vb, seqno)
                if probe.sees(bucket, item):
                    first, seen = first or seqno, seqno
                elif advanced(item):
                    hidden = seqno
                if item.event is not None:
                    probe.follow(item.event)
        else:  # what it is sent stays the same over the range: look in from both ends
            first = next((seqno for seqno in range(stream.next_seqno, last + 1) if sent(seqno)), 0)
            seen = next(seqno for seqno in range(last, first - 1, -1) if sent(seqno)) if first else 0
            hidden = next((seqno for seqno in range(last, max(seen, stream.next_seqno - 1), -1)  # none sent
                           if advanced(bucket.item(vb, seqno))), 0)
        if seen:
            return first, max(seen, hidden), False
        return (hidden, hidden, True) if hidden else None

    def _pass_over(self, stream: _Stream, vb: VBucket, last: int) -> None:
        """Moves a stream past seqnos it is sent nothing of, reading their system events all the same, as
        kv_engine's filter does (the default collection's drop ends a legacy stream)."""
        bucket = self.node.cluster.bucket
        for seqno in self._event_seqnos(vb, stream.next_seqno, last):
            event = bucket.item(vb, seqno).event
            if event is not None:
                stream.follow(event)
        stream.next_seqno = last + 1

    def _event_seqnos(self, vb: VBucket, first: int, last: int) -> Iterator[int]:
        """The seqnos from ``first`` to ``last`` that may hold a system event: the bucket's first ones (its
        manifest's), and the later manifests' of this vbucket."""
        yield from range(first, min(last, len(self.node.cluster.bucket.events)) + 1)
        yield from (seqno for seqno in vb.event_seqnos if first <= seqno <= last)

    def _marker_flags(self, stream: _Stream, *, answered: bool = True) -> int:
        """The first snapshot is the backfill's, if the stream has one, the rest from memory, the first of them
        beginning a checkpoint (kv_engine's move to InMemory sets nextSnapshotIsCheckpoint); on a takeover
        stream each one after the backfill must be answered, and the first of each takeover phase begins a
        checkpoint. Not ``answered``: a marker only to be advanced over, which no takeover waits for."""
        if stream.backfill and stream.markers == 0:
            return MARKER_DISK_CHECKPOINT
        if not stream.takeover:
            return MARKER_MEMORY_CHECKPOINT if stream.markers == int(stream.backfill) else MARKER_MEMORY
        self._takeover_sending(stream)
        stream.marker_acks += answered
        checkpoint = stream.new_checkpoint
        stream.new_checkpoint = False
        return (MARKER_TAKEOVER if answered else MARKER_MEMORY) | (SnapshotMarkerFlag.CHECKPOINT if checkpoint else 0)

    def _takeover_sending(self, stream: _Stream) -> None:
        """A takeover stream in its sending phase (kv_engine's TakeoverSend): once it has been sending longer than
        the limit, its vbucket refuses writes (Etmpfail) so that it catches up (takeoverSendPhase)."""
        if stream.takeover_since is None:
            stream.takeover_since = self.now
        elif self.now - stream.takeover_since > self.node.cluster.takeover_max_time:
            self.node.cluster.bucket.vbuckets[stream.vbucket].takeover_backed_up = True

    def _takeover_state(self, stream: _Stream, parts: list[bytes]) -> int:
        """A caught-up takeover stream's DCP_SET_VBUCKET_STATE, once every marker it sent was answered and
        none is awaited; the bytes sent (it counts against the window as its 25 bytes)."""
        if stream.takeover_wait:  # (TakeoverWait: no longer sending, so never backed up)
            return 0
        self._takeover_sending(stream)
        if stream.marker_acks:
            return 0
        data = self._message(stream, Opcode.DCP_SET_VBUCKET_STATE, vbucket_state=stream.takeover_state)
        parts.append(data)
        self._count(len(data))
        stream.takeover_wait = True
        return len(data)

    def _seqno_advanced(self, stream: _Stream, vb: VBucket, parts: list[bytes]) -> int:
        """A snapshot's items are all processed: if the stream does not see the item at its end (another
        collection, a prepare or abort without sync writes), a DCP_SEQNO_ADVANCED to the end, so the client
        knows the snapshot is complete (reference 3.8, 3.18; only with HELLO Collections); the bytes sent."""
        end = stream.snapshot_end
        stream.advanced = end
        bucket = self.node.cluster.bucket
        if not self.collections or stream.sees(bucket, bucket.item(vb, end)):
            return 0
        data = self._message(stream, Opcode.DCP_SEQNO_ADVANCED, by_seqno=end)
        parts.append(data)
        self._count(len(data))
        return len(data)

    def _message(self, stream: _Stream, opcode: Opcode, **fields: Any) -> bytes:
        return build.request(opcode, vbucket=stream.vbucket, opaque=stream.opaque,
                             stream_id=stream.stream_id or None, **fields)

    def _image_items(self, stream: _Stream, vb: VBucket, upto: int, parts: list[bytes], budget: int) -> int:
        bucket = self.node.cluster.bucket
        image = bucket.image(vb, stream.encoding, upto)
        offsets, data = image.offsets, image.data
        first = stream.next_seqno - image.first
        last = upto - image.first  # inclusive index
        window = self._window()
        limit = budget if window is None else min(budget, window)
        begin = offsets[first]
        stop_index = first
        end = begin
        items = 0
        max_items = self._item_limit
        while stop_index <= last and end - begin < limit and items != max_items:
            stop_index += 1
            nxt = offsets[stop_index] if stop_index < len(offsets) else len(data)
            if nxt > end:
                items += 1
            end = nxt
        chunk = bytearray(data[begin:end])
        opaque = _OPAQUE.pack(stream.opaque)
        if opaque != b"\0\0\0\0":
            previous = -1
            for i in range(first, stop_index):
                at = offsets[i]
                if at != previous and at < end:
                    chunk[at - begin + _OPAQUE_AT:at - begin + _OPAQUE_END] = opaque
                previous = at
        parts.append(bytes(chunk))
        self._count(len(chunk))
        stream.next_seqno = image.first + stop_index
        stream.items += items
        stream.last_seqno = stream.next_seqno - 1
        self._spend(items)
        self.stats["items"] += items
        self.stats["bytes"] += len(chunk)
        return len(chunk)

    def _each_item(self, stream: _Stream, vb: VBucket, upto: int, parts: list[bytes], budget: int) -> int:
        bucket = self.node.cluster.bucket
        sent = 0
        while stream.next_seqno <= upto and sent < budget and self._item_limit != 0:
            window = self._window()
            if window is not None and window <= 0:
                break
            item = bucket.item(vb, stream.next_seqno)
            stream.next_seqno += 1
            seen = stream.sees(bucket, item)
            if item.event is not None:
                stream.follow(item.event)
            if not seen:
                continue
            data = bucket.encode_item(item, stream.encoding, stream.opaque, stream.stream_id or None)
            parts.append(data)
            self._count(len(data) + (PREPARE_FLOW_CONTROL_EXTRA if item.opcode == PREPARE else 0))
            sent += len(data)
            stream.items += 1
            stream.last_seqno = item.seqno
            self._spend(1)
            self.stats["items"] += 1
            self.stats["bytes"] += len(data)
        return sent


def _refused(status: str, rule: str, reason: str, sid: int = 0) -> tuple[Answer, None, None, int, None]:
    """A stream request's value the server refuses: the answer, no filter, the sid it named."""
    return Answer(status, rule, reason), None, None, sid, None


def _json(value: Any) -> bytes:
    """A JSON body as the server sends one (ASCII, as ``json.dumps`` writes it)."""
    return json.dumps(value).encode()


def _flags_json(table: type[DcpOpenFlag] | type[StreamRequestFlag], value: int) -> str:
    """A flag set as kv_engine prints it in an error context (format_as, flag2string: its to_json dumped):
    ``"None"``, one name as a JSON string, several as an array."""
    names = kv_flag_names(table, value)
    shown: str | list[str] = "None" if not names else names[0] if len(names) == 1 else names
    return json.dumps(shown, separators=(",", ":"))



def request_error(msg: Message, datatypes: int, collections: bool) -> tuple[Status, str] | None:
    """What kv_engine's validator answers a request before the command runs, None when it passes. A command
    of HEADER_RULES gets verify_header's checks, in its order and words: the datatype byte, the extras, the key,
    the value, the CAS, the datatype bits the command takes, those the connection enabled, the frame infos;
    the other DCP commands the datatype's and the frame infos'. ``datatypes``: the bits HELLO enabled."""
    opcode = msg.opcode
    rule = HEADER_RULES.get(opcode)
    if rule is None and opcode not in DCP_RESTRICTED:
        return _frame_info_error(msg)
    if msg.datatype & ~ANY_DATATYPE:
        return Status.EINVAL, "Request datatype invalid"
    if rule is not None:
        shape = _shape_error(msg, collections)
        if shape is not None:
            return Status.EINVAL, shape
        if rule.cas_not_set and msg.cas:
            return Status.EINVAL, "Request CAS must not be set"
        if msg.datatype & ~int(rule.datatypes):
            return Status.EINVAL, "Request datatype invalid"
    if msg.datatype & ~int(datatypes):
        return Status.EINVAL, f"Datatype ({kv_datatype_text(msg.datatype & ~int(datatypes))}) not enabled for " \
            "the connection"
    return _frame_info_error(msg)


def _shape_error(msg: Message, collections: bool) -> str | None:
    """verify_header's extras, key and value checks of a HEADER_RULES command: the extras its row allows
    (LATE_EXTRAS check theirs after the header), the key and value its row or its rule asks for, and no key
    longer than the server's limit. A stream request's value is a filter, which needs HELLO Collections."""
    lengths = EXTRAS_LENGTHS[msg.opcode]
    if msg.extras_length not in lengths and msg.opcode not in LATE_EXTRAS:
        length = max(lengths)  # a command with extras or none (GET_CLUSTER_CONFIG) asks for the extras' length
        return f"Request must include extras of length {length}" if length else "Request must not include extras"
    found = {diagnostic.name for diagnostic in msg.diagnostics}
    rule = HEADER_RULES[msg.opcode]
    for part, presence, present in (("key", rule.key, bool(msg.key)), ("value", rule.value, bool(msg.value))):
        if presence is not None:  # the server's own expectation in place of the row's
            found -= {f"must_not_have_{part}", f"must_have_{part}"}
            if presence is not Presence.OPTIONAL and present != (presence is Presence.REQUIRED):
                found.add(f"must_have_{part}" if presence is Presence.REQUIRED else f"must_not_have_{part}")
    for name in ("must_not_have_key", "must_have_key"):
        if name in found:
            return SHAPE_CONTEXTS[name]
    longest = MAX_KEY_LENGTH + collections
    if len(msg.key) > longest:
        return f"Key length exceeds {longest}"
    for name in ("must_not_have_value", "must_have_value"):
        if name in found:
            return SHAPE_CONTEXTS[name]
    if msg.opcode == Opcode.DCP_STREAM_REQ and msg.value and not collections:
        return SHAPE_CONTEXTS["must_not_have_value"]
    return None


def command_error(msg: Message) -> tuple[Status, str] | None:
    """The checks of a DCP_OPEN's or a stream request's own fields that kv_engine's validators make after the
    header's and before the common DCP restrictions (UnorderedExecution's NotSupported), with their contexts;
    None when they pass."""
    if msg.opcode == Opcode.DCP_OPEN:
        return _open_error(msg)
    if msg.opcode == Opcode.HELLO and len(msg.value) % 2:
        return Status.EINVAL, "Request value must be of even length"
    if msg.opcode == Opcode.GET_ALL_VB_SEQNOS and msg.extras_length not in EXTRAS_LENGTHS[msg.opcode]:
        allowed = " or ".join(str(length) for length in sorted(EXTRAS_LENGTHS[msg.opcode]))
        return Status.EINVAL, f"Request extras must be of length {allowed}"
    if msg.opcode == Opcode.GET_ERROR_MAP:
        if msg.vbucket_or_status != 0:
            return Status.EINVAL, "Request vbucket id must be 0"
        if len(msg.value) != ERROR_MAP_VERSION_SIZE:
            return Status.EINVAL, f"Request value must be of length {ERROR_MAP_VERSION_SIZE}"
    if msg.opcode == Opcode.GET_CLUSTER_CONFIG and msg.extras:
        # the known version's epoch and revision, signed: revision 1 or more, epoch 1 or more or -1 (whichever
        # fails, the server says the revision's words)
        epoch, revision = (_signed64(msg.extras.get(name, 0)) for name in ("epoch", "revision"))
        if revision < 1 or (epoch < 1 and epoch != -1):
            return Status.EINVAL, "Revision number must not be less than 1"
    if msg.opcode != Opcode.DCP_STREAM_REQ or msg.extras is None:
        return None
    flags = msg.extras.get("flags", 0)
    if flags & StreamRequestFlag.NO_VALUE:
        return Status.EINVAL, "DCP_ADD_STREAM_FLAG_NO_VALUE{8} flag is no longer used"
    if flags & STREAM_UNKNOWN_FLAGS:
        return Status.EINVAL, f"Request contains invalid flags: {_flags_json(StreamRequestFlag, flags)}"
    invalid = flags & ~int(StreamRequestFlag.CACHE_TRANSFER | StreamRequestFlag.TAKE_OVER
                           | StreamRequestFlag.ACTIVE_VB_ONLY)
    if flags & StreamRequestFlag.CACHE_TRANSFER and invalid:
        return Status.EINVAL, "CacheTransfer flag can only be combined with TakeOver or ActiveVbOnly flags. " \
            f"Invalid combination: {_flags_json(StreamRequestFlag, invalid)}"
    return None


def _open_error(msg: Message) -> tuple[Status, str] | None:
    """kv_engine's dcp_open_validator after the header: the flags, then the value (empty and raw, or a JSON
    object whose only property is a consumer's consumer_name)."""
    flags = (msg.extras or {}).get("flags", 0)
    if flags & OPEN_UNKNOWN_FLAGS:
        unknown = _flags_json(DcpOpenFlag, flags & OPEN_UNKNOWN_FLAGS)
        return Status.EINVAL, f"Request contains invalid flags: {unknown}"
    if flags & DcpOpenFlag.SKIP_DELETES_IN_INITIAL_BACKFILL and not flags & DcpOpenFlag.PRODUCER:
        return Status.EINVAL, "SkipDeletesInInitialBackfill may only be requested on a producer stream"
    if flags & DcpOpenFlag.NO_VALUE and flags & DcpOpenFlag.NO_VALUE_WITH_UNDERLYING_DATATYPE:
        return Status.EINVAL, "Request contains invalid flags combination (NO_VALUE && " \
            "NO_VALUE_WITH_UNDERLYING_DATATYPE)"
    if flags & DcpOpenFlag.INCLUDE_DELETED_USER_XATTRS and not flags & DcpOpenFlag.INCLUDE_XATTRS:
        return Status.EINVAL, "Request contains invalid flags combination - IncludeDeletedUserXattrs but not " \
            f"IncludeXattrs: {_flags_json(DcpOpenFlag, flags)}"
    if not msg.value:
        return (Status.EINVAL, "datatype should be set to RAW") if msg.datatype else None
    if msg.datatype != Datatype.JSON:
        return Status.EINVAL, "datatype should be set to JSON for non-empty value"
    try:
        value = orjson.loads(msg.value)  # bounded nesting: a hostile depth is invalid, not a RecursionError
    except orjson.JSONDecodeError:
        return Status.EINVAL, "value is not valid JSON"
    if not isinstance(value, dict):
        return Status.EINVAL, "value must be JSON of type object"
    for key, item in sorted(value.items()):  # nlohmann's objects are maps: the server reads keys sorted
        if key != "consumer_name":
            return Status.EINVAL, f"Unsupported JSON property {key}"
        if flags & DcpOpenFlag.PRODUCER:
            return Status.EINVAL, "consumer_name only valid for Consumer connections"
        if not isinstance(item, str):
            return Status.EINVAL, "consumer_name must be a string"
    return None


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _frame_info_error(msg: Message) -> tuple[Status, str] | None:
    """The first frame info the server's parser refuses (reference 2.1, 2.2), in the order they come; an
    element that runs past the framing extras is the last one decode read."""
    for info in msg.frame_infos:
        if info.id not in FRAME_INFO_LENGTHS:
            return Status.UNKNOWN_FRAME_INFO, f"frame info id {info.id} is unknown"
        if len(info.data) not in FRAME_INFO_LENGTHS[info.id]:
            return Status.EINVAL, f"frame info {REQUEST_FRAMES.name(info.id)} of {len(info.data)} bytes"
        if info.id == DURABILITY and msg.opcode not in DURABLE_OPCODES:
            return Status.EINVAL, f"{msg.opcode_name} does not support durability requirements"
    if any(found.name == "bad_frame_info" for found in msg.diagnostics):
        return Status.EINVAL, "Invalid encoding in FrameExtras"
    return None


_BOOL: Final = ("true", "false")
U32_MAX: Final = (1 << 32) - 1
U16_MAX: Final = (1 << 16) - 1


def _control_status(conn: ProducerConnection, key: str, value: str) -> Status:
    """DCP_CONTROL's answer for a key and value (reference 7.2); unknown keys are Einval."""
    flags = conn.dcp_flags or 0
    checks: dict[str, Any] = {
        "connection_buffer_size": lambda: _u32(value) is not None,
        "enable_noop": lambda: True,
        "set_noop_interval": lambda: _float(value) is not None and _float(value) >= MIN_NOOP_INTERVAL,  # type: ignore[operator]
        "set_priority": lambda: value in ("high", "medium", "low"),
        "force_value_compression": lambda: value in _BOOL and HelloFeature.SNAPPY in conn.features,
        "supports_cursor_dropping": lambda: value in _BOOL,
        "supports_cursor_dropping_vulcan": lambda: value in _BOOL,
        "supports_hifi_MFU": lambda: value == "true",
        "send_stream_end_on_client_close_stream": lambda: value == "true",
        "enable_expiry_opcode": lambda: value == "true",
        "enable_stream_id": lambda: value == "true",
        "enable_sync_writes": lambda: value == "true",
        "consumer_name": lambda: bool(value),
        "enable_out_of_order_snapshots": lambda: value in ("true", "true_with_seqno_advanced"),
        "include_deleted_user_xattrs": lambda: value == "true" and bool(
            flags & DcpOpenFlag.INCLUDE_DELETED_USER_XATTRS),
        "v7_dcp_status_codes": lambda: value == "true",
        "flatbuffers_system_events": lambda: value == "true",
        "backfill_order": lambda: value in ("round-robin", "sequential"),
    }
    if key in {"stream_buffer_size", "change_streams", "cache_transfer"}:
        # never implemented / needs magma's history / serve is a node with dcp_cache_transfer_enabled off (its
        # stream requests' CacheTransfer, which would send DCP_CACHE_TRANSFER items, 3.20, are Einval)
        return Status.NOT_SUPPORTED
    if key == "max_marker_version":
        return (Status.SUCCESS if conn.collections else Status.NOT_SUPPORTED) if value == "2.2" else Status.EINVAL
    if key == "enable_stream_id" and conn.controls.get("enable_sync_writes") == "true":
        return Status.NOT_SUPPORTED
    if key == "enable_sync_writes" and conn.stream_ids:
        return Status.NOT_SUPPORTED
    check = checks.get(key)
    if check is None or not check():
        return Status.EINVAL
    return Status.SUCCESS


def _float(value: str) -> float | None:
    """A finite number, as the server's safe_strtof reads one (an overflow is not a number)."""
    try:
        number = float(value) if value.isascii() else math.nan
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _u32(value: str) -> int | None:
    """ASCII decimal digits that fit a u32, as the server's safe_strtoul reads them (no ``²``, no 5,000
    digits: int() would refuse both with an exception)."""
    if not (value.isascii() and value.isdigit()) or len(value) > len(str(U32_MAX)):
        return None
    number = int(value)
    return number if number <= U32_MAX else None


def _stat_vbucket(word: str) -> int:
    """A stat's vbucket number as kv_engine's safe_strtous reads it: decimal digits (a plus sign before them
    allowed) that fit a u16; anything else reads as vbucket 0."""
    digits = word.removeprefix("+")
    if not (digits.isascii() and digits.isdigit()) or len(digits.lstrip("0")) > len(str(U16_MAX)):
        return 0
    number = int(digits.lstrip("0") or "0")
    return number if number <= U16_MAX else 0


_HANDLERS: Final[dict[int, Callable[[ProducerConnection, Message], None]]] = {
    Opcode.HELLO: ProducerConnection._hello, Opcode.SASL_LIST_MECHS: ProducerConnection._list_mechs,
    Opcode.SASL_AUTH: ProducerConnection._sasl_auth, Opcode.SASL_STEP: ProducerConnection._sasl_step,
    Opcode.SELECT_BUCKET: ProducerConnection._select_bucket, Opcode.GET_ERROR_MAP: ProducerConnection._error_map,
    Opcode.GET_CLUSTER_CONFIG: ProducerConnection._cluster_config,
    Opcode.GET_ALL_VB_SEQNOS: ProducerConnection._all_vb_seqnos,
    Opcode.GET_FAILOVER_LOG: ProducerConnection._failover_log,
    Opcode.DCP_GET_FAILOVER_LOG: ProducerConnection._failover_log,
    Opcode.OBSERVE_SEQNO: ProducerConnection._observe_seqno, Opcode.STAT: ProducerConnection._stat,
    Opcode.DCP_OPEN: ProducerConnection._dcp_open, Opcode.DCP_CONTROL: ProducerConnection._dcp_control,
    Opcode.DCP_STREAM_REQ: ProducerConnection._stream_request,
    Opcode.DCP_CLOSE_STREAM: ProducerConnection._close_stream,
    Opcode.DCP_BUFFER_ACKNOWLEDGEMENT: ProducerConnection._buffer_ack,
    Opcode.DCP_SEQNO_ACKNOWLEDGED: ProducerConnection._seqno_acknowledged,
    Opcode.DCP_NOOP: ProducerConnection._noop_request,
}
# The document commands (producer/kv.py and producer/subdoc.py): answered through kv.handle's error mapping.
_DOCUMENT_COMMANDS: Final[dict[int, Callable[[ProducerConnection, Message], None]]] = {
    **kv.COMMANDS, **subdoc.COMMANDS}
