"""The emulated bucket: vbuckets with failover logs, seqnos and items, deterministic for a seed.

Theory of operation. Items are not stored: the item at (vbucket, seqno) is a pure function of the seed,
the vbucket, the seqno and the failover-log branch the seqno belongs to, so ``--items 10000000`` costs
no memory until streamed, and two runs with one seed send the same bytes. What changes over time is the
vbucket's state: its high seqno (``--mutation-rate`` appends items), its failover log (a failover adds
an entry at a seqno and the items above it belong to the new branch), its purge seqno, and whether it is
active here. Encoded items of the common stream shape are kept per vbucket in an append-only image with
an offset index (``image``), so a stream of a large backfill is a copy plus a 4-byte opaque patch per
item; every other shape is built item by item. Both go through the shapes the registry declares
(``protocol.build``).

Documents. Clients write too (``dcpctl serve`` is a small data node): a write takes the vbucket's next seqno,
a CAS from the vbucket's hybrid logical clock and the document's next rev seqno, and is kept as the item at
that seqno (``VBucket.written``), so every stream sees it as it sees generated items. The documents by key
(``VBucket.docs``) are indexed lazily: the first read or write of a vbucket scans its generated items once,
later ones only the seqnos added since (``--mutation-rate``), so the generated items are the initial content.
The scan keeps only the newest seqno of each generated key (``VBucket.generated``, from the hash alone: no
value is built); a generated document is made from its item when it is read.

System events. A vbucket is created with the epoch manifest (the default scope and collection, uid 0) and
``--collections`` is applied to it before anything is written, so its history opens with the system events
kv_engine queues for that change (:func:`manifest_events`, reference 3.16) at seqnos 1..k, and the generated
items follow at k+1..k+count: the item at a seqno stays the same function of the seqno, and only a bucket
with a manifest has k > 0. Events are items of the system-event namespace (``SYSTEM_EVENT_COLLECTION``, as
kv_engine keys them), so streams, snapshots, high seqnos and the encoded image treat them as any item of their
seqno, while no collection's documents and no key index holds them. A dropped collection's or scope's event is
a tombstone (kv_engine stores it deleted), though the default collection's drop is never purged. A later
manifest (:meth:`Bucket.apply_manifest`) is queued by each vbucket as written events at its next seqnos, and
begins an era (``VBucket.eras``): a generated item's hash picks its collection from the manifest of the era its
seqno is in, so the item at a seqno stays one function of it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from dcpctl.dcp.rollback import FailoverEntry, VbucketState
from dcpctl.protocol import build
from dcpctl.protocol.constants import DATATYPE_SNAPPY, DATATYPE_XATTR, Magic, Opcode, SystemEventId
from dcpctl.protocol.value import leb128_encode, parse_xattrs, snappy_compress

MUTATION: Final = Opcode.DCP_MUTATION
DELETION: Final = Opcode.DCP_DELETION
EXPIRATION: Final = Opcode.DCP_EXPIRATION
PREPARE: Final = Opcode.DCP_PREPARE  # a durable write: its prepare, then at the next seqno its commit
COMMIT: Final = Opcode.DCP_COMMIT
ABORT: Final = Opcode.DCP_ABORT  # a prepare no majority acknowledged before its durability timeout
SYSTEM_EVENT: Final = Opcode.DCP_SYSTEM_EVENT  # a change of the vbucket's collections manifest (reference 3.16)
_NOT_VISIBLE: Final = frozenset({PREPARE, ABORT})  # items a snapshot's max visible seqno skips
_SYNC_ONLY: Final = frozenset({PREPARE, ABORT})  # items only streams with enable_sync_writes see
# kv_engine's durability timeout for a synchronous write whose request names none (the
# ActiveDurabilityMonitor's defaultTimeout, 30 s); a request's frame info may give its own.
DEFAULT_DURABILITY_TIMEOUT: Final = 30.0
MAX_REPLICAS: Final = 3  # a Couchbase bucket has at most three replicas
# Bytes of client writes the bucket keeps (--memory-quota): every write stays as an item (nothing is
# deduplicated or evicted), so without a bound a client writing in a loop takes the machine's memory. A
# development bucket's RAM quota is of this order; above it a write is Enomem, as on a full server.
DEFAULT_MEMORY_QUOTA: Final = 256 * 1024 * 1024
# What a kept write costs beyond its key and value: its Item and Document objects and their index entries.
WRITE_OVERHEAD: Final = 600
DEFAULT_COLLECTION: Final = 0
DEFAULT_SCOPE: Final = 0
# The collection id kv_engine keys system events under (CollectionID::SystemEvent): never a user collection's
# (theirs start at 8), so an event is never taken for a document of the collection it is about.
SYSTEM_EVENT_COLLECTION: Final = 1
# A collection's maxTTL in ns_server's manifest JSON (collections.erl, 7.6 on): 0 defers to the bucket's, -1
# never expires, else seconds up to kv_engine's limit (a signed 32-bit number, Collections::Manifest).
MAX_TTL_OF_BUCKET: Final = 0
MAX_TTL_NEVER: Final = -1
MAX_TTL_LIMIT: Final = (1 << 31) - 1
MAX_EXPIRY: Final = (1 << 32) - 1  # an expiry is a u32 of unix seconds: a limit past it stops there
# A system event's value layouts (reference 3.16): 0 the legacy one, 1 BeginCollection with a maxTTL, 2 a
# FlatBuffers table of kv_engine's events.fbs.
EVENT_VERSION_0: Final = 0
EVENT_VERSION_MAX_TTL: Final = 1
EVENT_VERSION_FLATBUFFERS: Final = 2
# Deletions and expirations among generated items: one in DELETE_EVERY and one in EXPIRE_EVERY seqnos
# (by a hash, so they are spread), enough for a consumer to meet both without drowning the mutations.
DELETE_EVERY: Final = 23
EXPIRE_EVERY: Final = 101
# Distinct keys per vbucket: keys repeat, as real updates do, so "create or update" questions have answers.
KEYSPACE: Final = 1 << 20
KEY_FORMAT: Final = b"doc-%07d"  # a generated item's key from its number
_KEY_PREFIX: Final = b"doc-"
_KEY_LENGTH: Final = len(KEY_FORMAT % 0)
# The generated item at a seqno: multiplicative hashing (golden-ratio and murmur3 constants, not protocol
# codes) of the seed, vbucket, seqno and branch uuid; the key and the collection are bits of it.
_H_SEED: Final = 0x9E3779B1
_H_VBUCKET: Final = 0x85EBCA77
_H_SEQNO: Final = 0xC2B2AE3D
_H_MASK: Final = 0xFFFFFFFFFFFF
_KEY_SHIFT: Final = 7
_COLLECTION_SHIFT: Final = 3
# The generated-key index of a vbucket is an array of one seqno per possible key (8 bytes each) once its
# generated items are at least this fraction of the possible keys, where a dict would take more memory.
DENSE_INDEX_SHARE: Final = 8
MAX_FAILOVER_ENTRIES: Final = 25  # the server's max_failover_entries default (reference 3.6)
BASE_CAS: Final = 1_700_000_000_000_000_000
# kv_engine's HLC keeps the low 16 bits of a CAS for its logical counter: the physical part is masked so.
HLC_LOGICAL_BITS: Final = 0xFFFF
# An expiry above 30 days is an absolute unix time, at most that a relative one (memcached's rule).
RELATIVE_EXPIRY_LIMIT: Final = 30 * 24 * 3600


@dataclass(frozen=True)
class Item:
    opcode: int  # MUTATION, DELETION, EXPIRATION, SYSTEM_EVENT; a durable write's PREPARE, its COMMIT or ABORT
    vbucket: int
    seqno: int
    key: bytes
    value: bytes
    collection_id: int
    cas: int
    rev_seqno: int
    datatype: int
    flags: int = 0  # a written document's user flags and absolute expiry (generated items have none)
    expiry: int = 0
    deleted: bool = False  # a PREPARE or COMMIT of a deletion; a SYSTEM_EVENT of a drop
    durability_level: int = 0  # a PREPARE's
    prepared_seqno: int = 0  # a COMMIT's or ABORT's
    event: SystemEvent | None = None  # a SYSTEM_EVENT's


@dataclass(frozen=True)
class SystemEvent:
    """One change of a vbucket's collections manifest, as kv_engine queues it: the scope and, for a collection
    event, the collection it is about; the name it is keyed by (empty for a drop); the manifest uid its value
    carries; a created collection's maxTTL in seconds (None: it has none)."""

    event_id: SystemEventId
    scope_id: int
    collection_id: int | None
    name: bytes
    manifest_uid: int
    max_ttl: int | None = None

    @property
    def dropped(self) -> bool:
        """A drop, which kv_engine stores as a deleted item: a tombstone."""
        return self.event_id in (SystemEventId.END_COLLECTION, SystemEventId.DROP_SCOPE)


@dataclass
class Document:
    """The newest version of a key in a vbucket, as reads see it (``deleted``: a tombstone)."""

    key: bytes
    collection_id: int
    value: bytes  # uncompressed; with the XATTR datatype bit, the xattr blob then the body
    datatype: int
    flags: int
    expiry: int  # absolute unix seconds, 0: never
    cas: int
    rev_seqno: int
    seqno: int
    deleted: bool = False
    locked_until: float = 0.0  # unix seconds; locked while now < locked_until
    lock_cas: int = 0


@dataclass(frozen=True)
class Encoding:
    """The stream shape items are encoded for (what DCP_OPEN, DCP_CONTROL and HELLO negotiated)."""

    collections: bool = False
    delete_times: bool = False  # DCP_OPEN IncludeDeleteTimes: deletion v2 extras
    expiry_opcode: bool = False  # enable_expiry_opcode (needs delete times), else expiries are deletions
    no_value: bool = False  # DCP_OPEN NoValue or NoValueWithUnderlyingDatatype: no body
    xattrs: bool = False  # DCP_OPEN IncludeXattrs: values keep their xattrs, else only the body goes
    underlying_datatype: bool = False  # DCP_OPEN NoValueWithUnderlyingDatatype: the stored datatype stays
    compressed: bool = False  # DCP_CONTROL force_value_compression: values go snappy-compressed
    sync_writes: bool = False  # enable_sync_writes: durable writes as PREPARE and COMMIT, else as what commits
    # DCP_CONTROL flatbuffers_system_events: kv_engine sends system events as version 2 (see event_version)
    flatbuffers_system_events: bool = False


@dataclass
class _Image:
    data: bytearray = field(default_factory=bytearray)
    offsets: array[int] = field(default_factory=lambda: array("Q"))  # offsets[i]: start of seqno first + i
    first: int = 1


@dataclass
class VBucket:
    vbucket: int
    failover_log: list[FailoverEntry]  # newest first
    high_seqno: int
    purge_seqno: int = 0
    state: str = "active"
    images: dict[Encoding, _Image] = field(default_factory=dict)
    written: dict[int, Item] = field(default_factory=dict)  # seqno -> an item a client wrote
    docs: dict[tuple[int, bytes], Document] = field(default_factory=dict)  # (collection, key) -> newest
    indexed: int = 0  # ``docs`` and ``generated`` cover seqnos 1..indexed
    # the newest generated seqno of each generated key (collection slot * KEYSPACE + key number; 0: none):
    # generated documents are made from their item when read, so the index holds no values
    generated: dict[int, int] | array[int] | None = None
    max_cas: int = 0
    # Each completed synchronous write, in seqno order: the seqno of its COMMIT (or ABORT) and of its PREPARE,
    # for the high completed seqno of a snapshot marker.
    completions: list[int] = field(default_factory=list)
    completed_prepares: list[int] = field(default_factory=list)
    # Synchronous writes waiting for acknowledgements no replica sends (--silent-replicas): (collection, key)
    # -> the prepare's seqno and the unix time it aborts at.
    pending: dict[tuple[int, bytes], Pending] = field(default_factory=dict)
    # The newest seqno of each collection among seqnos 1..collections_scanned (kv_engine keeps a collection's
    # high seqno in the vbucket's manifest; here it is found by one scan, then kept up as seqnos are added).
    collection_highs: dict[int, int] = field(default_factory=dict)
    collection_visible_highs: dict[int, int] = field(default_factory=dict)  # the same without prepares, aborts
    collections_scanned: int = 0
    # Manifests applied after the vbucket's first (serve's scenario "manifest"), oldest first: generated items
    # at and above an era's first seqno go to its collections; and the seqnos of the events they queued.
    eras: list[Era] = field(default_factory=list)
    event_seqnos: list[int] = field(default_factory=list)
    # A takeover stream has been sending for longer than the takeover's time limit: writes are Etmpfail until
    # it catches up (kv_engine's isTakeoverBackedUp, dcp_takeover_max_time)
    takeover_backed_up: bool = False
    # Bucket.document_counts's last answer, and the history it counted (high seqno, purge seqno, newest entry)
    counted: tuple[tuple[int, int, FailoverEntry], tuple[int, int]] | None = None

    def view(self, collection_high_seqno: int | None = None) -> VbucketState:
        """The rollback engine's view of this vbucket."""
        return VbucketState(tuple(self.failover_log), self.high_seqno, self.purge_seqno, self.state,
                            self.high_seqno, collection_high_seqno)

    def branch_uuid(self, seqno: int) -> int:
        """The uuid whose history holds ``seqno`` (the newest entry that began before it)."""
        for entry in self.failover_log:
            if entry.seqno < seqno:
                return entry.vbucket_uuid
        return self.failover_log[-1].vbucket_uuid


@dataclass(frozen=True)
class Era:
    """A manifest a vbucket reached at ``first`` (its first event's seqno) and its ``last`` event's seqno; its
    collections (``ids``, sorted: what a generated item's hash picks from) and their slots in the bucket's
    generated-key index."""

    first: int
    last: int
    manifest: Manifest
    ids: tuple[int, ...]
    slots: tuple[int, ...]


@dataclass
class Pending:
    seqno: int
    deadline: float


class OutOfMemoryError(Exception):
    """A write the memory quota has no room for (kv_engine: no_memory, Enomem to the client)."""


class TakeoverBackedUpError(Exception):
    """A write to a vbucket whose takeover lags (kv_engine's maybeAllowMutation: temporary_failure)."""


class SyncWriteInProgressError(Exception):
    """A write to a key whose synchronous write is still pending (kv_engine: SyncWriteInProgress)."""


@dataclass
class Manifest:
    """Collections: id -> (scope id, name); the default collection 0 in the default scope 0. ``max_ttls``:
    the collections that have a maxTTL, in seconds as memcached keeps it (0: its documents never expire), which
    each write to them keeps its expiry within (:meth:`Bucket.limited_expiry`); the default collection's comes
    to a vbucket by a ModifyCollection event (see :func:`manifest_changes`)."""

    uid: int = 0
    collections: dict[int, tuple[int, str]] = field(default_factory=lambda: {0: (0, "_default")})
    scopes: dict[int, str] = field(default_factory=lambda: {0: "_default"})
    max_ttls: dict[int, int] = field(default_factory=dict)

    def change_refusal(self, new: Manifest, dropped: set[int] | None = None) -> str | None:
        """Why ``new`` cannot follow this manifest, None if it can: kv_engine refuses a uid that does not go
        up, and ns_server never renames a collection or scope nor moves a collection nor gives a dropped one's
        id again (``dropped``: every collection id dropped so far)."""
        refused = new.refusal()
        if refused is not None:
            return refused
        if new.uid <= self.uid:
            return f"uid {new.uid:x} does not go up from {self.uid:x}"
        for collection, entry in new.collections.items():
            if collection in self.collections and entry != self.collections[collection]:
                return f"collection {collection:x} renamed or moved to another scope"
            if collection in (dropped or set()) and collection not in self.collections:
                return f"collection {collection:x} was dropped: its id is never given again"
        for scope, name in new.scopes.items():
            if scope in self.scopes and name != self.scopes[scope]:
                return f"scope {scope:x} renamed"
        return None

    def refusal(self) -> str | None:
        """Why kv_engine refuses this manifest (Collections::Manifest's checks of the defaults), None if it
        takes it."""
        if DEFAULT_SCOPE not in self.scopes:
            return "the default scope was not defined"
        if self.collections.get(DEFAULT_COLLECTION, (DEFAULT_SCOPE, ""))[0] != DEFAULT_SCOPE:
            return "the default collection is not in the default scope"
        return None


def memcached_max_ttl(value: object) -> int | None:
    """The maxTTL memcached is given for a collection whose ``maxTTL`` in ns_server's manifest JSON is
    ``value`` (collections.erl's map_props_for_memcached, 7.6 on): none for 0 (the bucket's maxTTL applies), 0
    for -1 (its documents never expire), else the seconds. Raises ValueError for anything else."""
    if isinstance(value, bool) or not isinstance(value, int) or not MAX_TTL_NEVER <= value <= MAX_TTL_LIMIT:
        raise ValueError(f"maxTTL {str(value)[:40]} is not {MAX_TTL_NEVER}, {MAX_TTL_OF_BUCKET} or seconds up to "
                         f"{MAX_TTL_LIMIT}")
    if value == MAX_TTL_OF_BUCKET:
        return None
    return 0 if value == MAX_TTL_NEVER else value


def manifest_events(manifest: Manifest) -> tuple[SystemEvent, ...]:
    """The system events a vbucket of the epoch manifest (the default scope and collection, uid 0) queues when
    ``manifest`` is applied (see :func:`manifest_changes`)."""
    return manifest_changes(Manifest(), manifest)


def manifest_changes(old: Manifest, new: Manifest) -> tuple[SystemEvent, ...]:
    """The system events a vbucket at manifest ``old`` queues when ``new`` is applied, in kv_engine's order
    (Manifest::completeUpdate): collections dropped, scopes created, collections created, collections modified
    (a kept one's maxTTL changed: ModifyCollection, which only FlatBuffers streams are sent), scopes dropped.
    Every event but the last carries the uid the vbucket had before: only the last one says the vbucket has
    reached the new uid. kv_engine walks the manifest's scopes in its hash map's order, which nothing fixes;
    here they go in the manifest's order, and a scope's collections in the order it lists them, as kv_engine's
    do."""
    changes: list[tuple[SystemEventId, int, int | None, str, int | None]] = []
    changes += [(SystemEventId.END_COLLECTION, scope, collection, "", None)
                for collection, (scope, _) in old.collections.items() if collection not in new.collections]
    changes += [(SystemEventId.CREATE_SCOPE, scope, None, name, None) for scope, name in new.scopes.items()
                if scope not in old.scopes]
    changes += [(SystemEventId.BEGIN_COLLECTION, scope, collection, name, new.max_ttls.get(collection))
                for scope in new.scopes
                for collection, (in_scope, name) in new.collections.items()
                if in_scope == scope and collection not in old.collections]
    changes += [(SystemEventId.MODIFY_COLLECTION, scope, collection, name, new.max_ttls.get(collection))
                for collection, (scope, name) in new.collections.items()
                if collection in old.collections and new.max_ttls.get(collection) != old.max_ttls.get(collection)]
    changes += [(SystemEventId.DROP_SCOPE, scope, None, "", None) for scope in old.scopes if scope not in new.scopes]
    last = len(changes) - 1
    return tuple(SystemEvent(event_id, scope, collection, name.encode(), new.uid if i == last else old.uid, ttl)
                 for i, (event_id, scope, collection, name, ttl) in enumerate(changes))


def event_version(event: SystemEvent, encoding: Encoding) -> int:
    """The value layout a stream is sent ``event`` in; the one place that chooses it (reference 3.16). kv_engine
    sends version 2 (a FlatBuffers table) to a connection that enabled flatbuffers_system_events
    (``encoding.flatbuffers_system_events``), else version 0, or 1 for a BeginCollection with a maxTTL."""
    if encoding.flatbuffers_system_events:
        return EVENT_VERSION_FLATBUFFERS
    if event.event_id == SystemEventId.BEGIN_COLLECTION and event.max_ttl is not None:
        return EVENT_VERSION_MAX_TTL
    return EVENT_VERSION_0


class Bucket:
    """All vbuckets of one bucket on one emulated cluster (see the module docstring)."""

    def __init__(self, name: str, vbuckets: int, items: int, value_size: int, seed: int,
                 manifest: Manifest | None = None, clock: Callable[[], int] = time.time_ns,
                 silent_replicas: int = 0, memory_quota: int = DEFAULT_MEMORY_QUOTA) -> None:
        self.clock = clock  # unix nanoseconds: the physical part of CAS, and expiry
        # replicas each vbucket's topology names that never acknowledge: with any, a durable write cannot
        # reach its majority (of the active and the replicas) and aborts when its timeout passes
        self.silent_replicas = silent_replicas
        self.waiting: set[int] = set()  # vbuckets that may have pending synchronous writes
        self.memory_quota = memory_quota
        self.memory_used = 0  # bytes of the writes kept (their key, value and WRITE_OVERHEAD each)
        # (expiry, vbucket, seqno, collection, key) of each write with an expiry: the expiry pager's queue
        self.expiries: list[tuple[int, int, int, int, bytes]] = []
        self.name = name
        self.seed = seed
        self.value_size = value_size
        self.manifest = manifest or Manifest()
        self.collection_ids = sorted(self.manifest.collections)
        self.events = manifest_events(self.manifest)  # seqnos 1..len(events) of every vbucket
        # every collection the bucket ever had, in the order it came: its part of the generated-key index
        self._slots = {collection: slot for slot, collection in enumerate(self.collection_ids)}
        self._first = Era(1, len(self.events), self.manifest, tuple(self.collection_ids),
                          tuple(range(len(self.collection_ids))))
        rng = random.Random(seed)  # noqa: S311 - reproducible uuids for a seed, not secrets
        self.vbuckets: list[VBucket] = []
        for vb in range(vbuckets):
            count = items // vbuckets + (1 if vb < items % vbuckets else 0)
            uuid = rng.getrandbits(48) or 1
            self.vbuckets.append(VBucket(vb, [FailoverEntry(uuid, 0)], len(self.events) + count))
        self._rng = rng
        # the bucket's uuid, as ns_server gives each bucket (32 hex digits; its own draw keeps the vbuckets')
        self.uuid = f"{random.Random(f'{name} {seed}').getrandbits(128):032x}"  # noqa: S311 - not a secret

    # --- items ------------------------------------------------------------------------------------
    def item(self, vb: VBucket, seqno: int) -> Item:
        if seqno <= len(self.events):
            event = self.events[seqno - 1]
            return Item(SYSTEM_EVENT, vb.vbucket, seqno, event.name, b"", SYSTEM_EVENT_COLLECTION, 0, 0, 0,
                        deleted=event.dropped, event=event)
        written = vb.written.get(seqno)
        if written is not None:
            return written
        uuid = vb.branch_uuid(seqno)
        h = (self.seed * _H_SEED + vb.vbucket * _H_VBUCKET + seqno * _H_SEQNO + uuid) & _H_MASK
        keyno = (h >> _KEY_SHIFT) % KEYSPACE
        ids = self.collection_ids if not vb.eras or seqno < vb.eras[0].first else self.era(vb, seqno).ids
        collection = ids[(h >> _COLLECTION_SHIFT) % len(ids)]
        key = KEY_FORMAT % keyno
        opcode = DELETION if h % DELETE_EVERY == 0 else EXPIRATION if h % EXPIRE_EVERY == 0 else MUTATION
        if opcode != MUTATION:
            return Item(opcode, vb.vbucket, seqno, key, b"", collection, BASE_CAS + seqno * 1000, 1 + (h >> 20) % 9,
                        0)
        head = b'{"key":"%s","vbucket":%d,"seqno":%d,"pad":"' % (key, vb.vbucket, seqno)
        pad = max(0, self.value_size - len(head) - 2)
        value = head + b"x" * pad + b'"}'
        return Item(opcode, vb.vbucket, seqno, key, value, collection, BASE_CAS + seqno * 1000, 1 + (h >> 20) % 9, 1)

    def _hash(self, vb: VBucket, seqno: int) -> int:
        """What a generated item is made from: its seqno in its vbucket's branch. item() and _index, which run per
        item, have it inline (a call costs item() 2.5%); the takeover counts' test holds the three together."""
        return (self.seed * _H_SEED + vb.vbucket * _H_VBUCKET + seqno * _H_SEQNO + vb.branch_uuid(seqno)) & _H_MASK

    def document_counts(self, vb: VBucket) -> tuple[int, int]:
        """A vbucket's alive documents and its tombstones on disk, as the takeover stats give them (kv_engine's
        getNumItems and couchstore's deleted count): each key's newest version counts once, a generated one or a
        written one; a tombstone at or below the purge seqno is off disk; a collection's or scope's drop is a
        tombstone too (kv_engine keeps the event as a deleted item), the default collection's never purged. Kept
        until the vbucket's history moves (a write, a purge, a failover): counting reads every key."""
        state = (vb.high_seqno, vb.purge_seqno, vb.failover_log[0])
        if vb.counted is not None and vb.counted[0] == state:
            return vb.counted[1]
        self._index(vb)
        alive = deleted = 0
        newest: set[int] = set()  # generated keys whose newest version is in ``docs``
        for (collection, key), doc in vb.docs.items():
            generated = self._generated_seqno(vb, collection, key)
            if doc.seqno < generated:
                continue  # counted below, from the index
            if generated:
                newest.add(self._slots[collection] * KEYSPACE + int(key[len(_KEY_PREFIX):]))
            if not doc.deleted:
                alive += 1
            elif doc.seqno > vb.purge_seqno:
                deleted += 1
        index = vb.generated or {}
        keys = index.items() if isinstance(index, dict) else (
            (at, index[at]) for at in itertools.compress(range(len(index)), index))  # the keys written to
        for at, seqno in keys:
            if at in newest:
                continue
            h = self._hash(vb, seqno)
            if h % DELETE_EVERY and h % EXPIRE_EVERY:  # item()'s test: a mutation, not a deletion or expiration
                alive += 1
            elif seqno > vb.purge_seqno:
                deleted += 1
        for seqno in vb.event_seqnos:
            event = vb.written[seqno].event
            if event is not None and event.dropped and (
                    seqno > vb.purge_seqno or event.collection_id == DEFAULT_COLLECTION):
                deleted += 1
        vb.counted = (state, (alive, deleted))
        return alive, deleted

    def visible(self, item: Item, encoding: Encoding, filter_ids: frozenset[int] | None,
                scope: int | None = None) -> bool:
        """Whether a stream sends this item: a stream without collections sees the default collection only;
        ``filter_ids`` are a filtered stream's collections, ``scope`` a scope filter's scope."""
        if item.opcode in _SYNC_ONLY and not encoding.sync_writes:
            return False  # a stream without sync writes sees the commit only, as the mutation it makes
        if not encoding.collections:
            return item.collection_id == DEFAULT_COLLECTION  # never a system event (kv_engine's legacy filter)
        if item.event is not None and item.event.event_id == SystemEventId.MODIFY_COLLECTION and not (
                encoding.flatbuffers_system_events):
            return False  # kv_engine's shouldProcessItem: a ModifyCollection only to those who opted in
        if filter_ids is None:
            return True
        if item.event is not None:
            return _event_passes(item.event, filter_ids, scope)
        return item.collection_id in filter_ids

    def encode_item(self, item: Item, encoding: Encoding, opaque: int, stream_id: int | None = None) -> bytes:
        """One stream message for an item, built from its declared shape (any stream shape)."""
        if item.event is not None:
            return _event_message(item, item.event, encoding, opaque, stream_id)
        key = leb128_encode(item.collection_id) + item.key if encoding.collections else item.key
        opcode = item.opcode
        if opcode == COMMIT and encoding.sync_writes:
            return self._pack(_COMMIT, item, key, 0, b"", (item.prepared_seqno, item.seqno), stream_id, opaque)
        if opcode == ABORT:
            return self._pack(_ABORT, item, key, 0, b"", (item.prepared_seqno, item.seqno), stream_id, opaque)
        if opcode == PREPARE:
            value, datatype = self._payload(item, encoding)
            prepare = (item.seqno, item.rev_seqno, item.flags, item.expiry, 0, 0, int(item.deleted),
                       item.durability_level)
            return self._pack(_PREPARE, item, key, datatype, value, prepare, stream_id, opaque)
        if opcode == COMMIT:
            opcode = DELETION if item.deleted else MUTATION
        if opcode == EXPIRATION and not (encoding.expiry_opcode and encoding.delete_times):
            opcode = DELETION  # the server sends expiries as deletions unless both were negotiated
        datatype, value = 0, b""
        extras: tuple[int, ...]
        if opcode == MUTATION:
            shape, extras = _MUTATION, (item.seqno, item.rev_seqno, item.flags, item.expiry, 0, 0, 0)
            value, datatype = self._payload(item, encoding)
        elif opcode == EXPIRATION:
            shape, extras = _EXPIRATION, (item.seqno, item.rev_seqno, item.cas // 1_000_000_000)
        elif encoding.delete_times:
            shape, extras = _DELETION_V2, (item.seqno, item.rev_seqno, item.cas // 1_000_000_000, 0)
        else:
            shape, extras = _DELETION_V1, (item.seqno, item.rev_seqno, 0)
        return self._pack(shape, item, key, datatype, value, extras, stream_id, opaque)

    @staticmethod
    def _pack(shape: build.Shape, item: Item, key: bytes, datatype: int, value: bytes, extras: tuple[int, ...],
              stream_id: int | None, opaque: int) -> bytes:
        if stream_id:
            return shape.pack_framed(Magic.ALT_CLIENT_REQUEST, item.vbucket, opaque, item.cas, datatype, key, value,
                                     extras, build.stream_id_frame(stream_id))
        return shape.pack(Magic.CLIENT_REQUEST, item.vbucket, opaque, item.cas, datatype, key, value, extras)

    @staticmethod
    def _payload(item: Item, encoding: Encoding) -> tuple[bytes, int]:
        """The value a stream sends and its datatype, which describes what is sent (reference 6.1): the xattrs
        stay only with IncludeXattrs; NoValue strips the body (with IncludeXattrs the xattr section is the
        value, datatype XATTR); NoValueWithUnderlyingDatatype keeps the stored document's datatype."""
        value = item.value
        body = 0
        if item.datatype & DATATYPE_XATTR:
            parsed = parse_xattrs(value)
            body = parsed[1] if not isinstance(parsed, str) else 0
        if encoding.no_value:
            value = value[:body] if encoding.xattrs else b""
            datatype = item.datatype if encoding.underlying_datatype else DATATYPE_XATTR if value else 0
        elif not encoding.xattrs:
            value = value[body:]
            datatype = item.datatype & ~DATATYPE_XATTR if value else 0
        else:
            datatype = item.datatype if value else 0
        if encoding.compressed and value:  # the whole value, xattrs and body (reference 6.1)
            return snappy_compress(value), datatype | DATATYPE_SNAPPY
        return value, datatype

    @staticmethod
    def tombstone(item: Item) -> bool:
        """Whether the item is kept deleted on disk: deletions, expirations, aborts, commits and prepares of a
        deletion, and the system events of drops (what kv_engine's backfill without deletes leaves out)."""
        return item.opcode in (DELETION, EXPIRATION, ABORT) or (
            item.opcode in (COMMIT, PREPARE, SYSTEM_EVENT) and item.deleted)

    @classmethod
    def purgeable(cls, item: Item) -> bool:
        """Whether a purge takes the item off disk: any tombstone but the default collection's drop, which
        kv_engine never purges (its creation is implied, so without the drop a client would think it exists;
        EPVBucket::addSystemEventItem gives it the latest delete time)."""
        event = item.event
        return cls.tombstone(item) and not (event is not None and event.collection_id == DEFAULT_COLLECTION)

    def image(self, vb: VBucket, encoding: Encoding, upto: int) -> _Image:
        """The encoded items 1..upto of a vbucket for an unfiltered stream without stream ids (opaque 0)."""
        image = vb.images.get(encoding)
        if image is None:
            image = vb.images[encoding] = _Image()
        next_seqno = image.first + len(image.offsets)
        data, offsets = image.data, image.offsets
        for seqno in range(next_seqno, upto + 1):
            offsets.append(len(data))
            item = self.item(vb, seqno)
            if self.visible(item, encoding, None):
                data += self.encode_item(item, encoding, 0)
        return image

    def collection_high_seqno(self, vb: VBucket, collections: frozenset[int], *, visible: bool = False) -> int:
        """The newest seqno of any of ``collections`` in a vbucket (0 when none has an item), as kv_engine's
        collection high seqno: what ToLatest ends a filtered stream at and the purge rule's max_coll_high;
        ``visible``: the newest that is not a prepare or abort (a collection's max visible seqno). A collection's
        system event counts, as kv_engine sets the high seqno at its BeginCollection; but the default
        collection's max visible seqno, what a legacy client is given, counts items only."""
        first, last = vb.collections_scanned + 1, vb.high_seqno
        if first <= last:
            highs, visibles, written = vb.collection_highs, vb.collection_visible_highs, vb.written
            for seqno in range(first, min(last, len(self.events)) + 1):
                event = self.events[seqno - 1]
                if event.collection_id is not None:
                    highs[event.collection_id] = seqno
                    if event.collection_id != DEFAULT_COLLECTION:
                        visibles[event.collection_id] = seqno
            base = self.seed * _H_SEED + vb.vbucket * _H_VBUCKET
            for start, end, uuid, era in self._runs(vb, max(first, len(self.events) + 1), last):
                branch = base + uuid
                slots = era.ids
                for seqno in range(start, end + 1):
                    item = written.get(seqno)
                    if item is not None and item.event is not None:  # a later manifest's event counts as above
                        if item.event.collection_id is not None:
                            highs[item.event.collection_id] = seqno
                            if item.event.collection_id != DEFAULT_COLLECTION:
                                visibles[item.event.collection_id] = seqno
                        continue
                    # a generated item's collection from its hash alone, as Bucket.item draws it
                    collection = item.collection_id if item is not None else slots[
                        (((branch + seqno * _H_SEQNO) & _H_MASK) >> _COLLECTION_SHIFT) % len(slots)]
                    highs[collection] = seqno
                    if item is None or item.opcode not in _NOT_VISIBLE:
                        visibles[collection] = seqno
            vb.collections_scanned = last
        found = vb.collection_visible_highs if visible else vb.collection_highs
        return max((found.get(collection, 0) for collection in collections), default=0)

    def era(self, vb: VBucket, seqno: int) -> Era:
        """The manifest a vbucket had reached at ``seqno``."""
        at = bisect.bisect_right(vb.eras, seqno, key=lambda era: era.first)
        return vb.eras[at - 1] if at else self._first

    def _runs(self, vb: VBucket, first: int, last: int) -> Iterator[tuple[int, int, int, Era]]:
        """Seqnos first..last in runs of one branch and one manifest each: (start, end, uuid, era)."""
        for start, end, uuid in _branches(vb.failover_log, first, last):
            at = start
            while at <= end:
                later = bisect.bisect_right(vb.eras, at, key=lambda era: era.first)  # the first era above
                stop = min(end, vb.eras[later].first - 1) if later < len(vb.eras) else end
                yield at, stop, uuid, vb.eras[later - 1] if later else self._first
                at = stop + 1

    def hidden_in_backfill(self, vb: VBucket, upto: int) -> tuple[dict[int, int], frozenset[int]]:
        """What a disk snapshot up to ``upto`` leaves out of a later manifest's changes: each collection dropped
        by then, with the seqno of its drop (kv_engine's backfill skips what a dropped collection had below it,
        its creation and modification events too: ScanContext::isLogicallyDeleted), and the creation events
        of scopes dropped by then (a scope's drop shares its creation's key, which it replaced on disk)."""
        later = [seqno for seqno in vb.event_seqnos if seqno <= upto]
        if not later:
            return {}, frozenset()
        created: dict[int, int] = {}
        dropped: dict[int, int] = {}
        superseded: set[int] = set()
        for seqno in [*range(1, len(self.events) + 1), *later]:
            event = self.item(vb, seqno).event
            if event is None:  # (event_seqnos holds events only)
                continue
            if event.event_id == SystemEventId.CREATE_SCOPE:
                created[event.scope_id] = seqno
            elif event.event_id == SystemEventId.DROP_SCOPE and event.scope_id in created:
                superseded.add(created.pop(event.scope_id))
            elif event.event_id == SystemEventId.END_COLLECTION and event.collection_id is not None and (
                    seqno > len(self.events)):
                dropped[event.collection_id] = seqno
        return dropped, frozenset(superseded)

    def manifest_of(self, vb: VBucket) -> Manifest:
        return vb.eras[-1].manifest if vb.eras else self._first.manifest

    def apply_manifest(self, new: Manifest) -> None:
        """A new manifest (ns_server's push, serve's scenario "manifest"): every active vbucket queues the
        events of the change at its next seqnos (:func:`manifest_changes`), and generated items after them
        go to its collections; document commands see it at once."""
        for collection in sorted(new.collections):
            if collection not in self._slots:
                self._slots[collection] = len(self._slots)
                for vb in self.vbuckets:
                    if isinstance(vb.generated, array):
                        vb.generated.extend(array("Q", [0]) * KEYSPACE)
        self.manifest = new
        for vb in self.vbuckets:
            if vb.state == "active":
                self._bring_up_to_date(vb)

    def _bring_up_to_date(self, vb: VBucket) -> None:
        """The events that take a vbucket from its manifest to the bucket's, at its next seqnos (a change of
        the uid alone takes none: kv_engine's completeUpdate only updates it)."""
        current = self.manifest_of(vb)
        if current == self.manifest:
            return
        events = manifest_changes(current, self.manifest)
        first = vb.high_seqno + 1
        for seqno, event in enumerate(events, first):
            vb.written[seqno] = Item(SYSTEM_EVENT, vb.vbucket, seqno, event.name, b"", SYSTEM_EVENT_COLLECTION, 0, 0,
                                     0, deleted=event.dropped, event=event)
            self.memory_used += event_cost(event)  # kept as a write is (a failover above it gives it back)
            vb.event_seqnos.append(seqno)
        vb.high_seqno = max(vb.high_seqno, first + len(events) - 1)
        ids = tuple(sorted(self.manifest.collections))
        vb.eras.append(Era(first, vb.high_seqno, self.manifest, ids, tuple(self._slots[c] for c in ids)))

    # --- changes over time ------------------------------------------------------------------------
    def mutate(self, vb: VBucket, count: int = 1) -> None:
        """New items (``--mutation-rate``, clients' writes in effect): the high seqno moves on, unless the
        vbucket's takeover lags (writes are then refused)."""
        if vb.state == "active" and not vb.takeover_backed_up:
            vb.high_seqno += count

    def failover(self, vb: VBucket, seqno: int | None = None) -> FailoverEntry:
        """A replica promoted at ``seqno`` (default: the high seqno): a new failover entry; items above the
        seqno are gone and new ones belong to the new branch (reference 3.6: entries above it are dropped). A
        replica promoted before it had the whole manifest's events is brought up to the manifest as it becomes
        active (kv_engine's setVBucketState, Collections::Manager::maybeUpdate): the events it lacked, which are
        the same events at the same seqnos, on the new branch."""
        at = vb.high_seqno if seqno is None else min(seqno, vb.high_seqno)
        # a manifest change's events replicate as one snapshot: a replica has all of them or none
        at = next((era.first - 1 for era in vb.eras if era.first <= at < era.last), at)
        entry = FailoverEntry(self._rng.getrandbits(48) or 1, at)
        vb.failover_log = [entry, *[e for e in vb.failover_log if e.seqno <= at]][:MAX_FAILOVER_ENTRIES]
        vb.high_seqno = max(at, len(self.events))
        vb.purge_seqno = min(vb.purge_seqno, at)
        for gone in [s for s in vb.written if s > at]:
            self.memory_used -= _cost(vb.written.pop(gone))
        for name in [name for name, pending in vb.pending.items() if pending.seqno > at]:
            del vb.pending[name]  # its prepare is gone with the history: its client is answered ambiguous
        kept = bisect.bisect_right(vb.completions, at)
        del vb.completions[kept:], vb.completed_prepares[kept:]
        if vb.collections_scanned > at:  # so are the collections' high seqnos above it: scan again
            vb.collection_highs.clear()
            vb.collection_visible_highs.clear()
            vb.collections_scanned = 0
        if vb.indexed > at:  # documents written above the branch point are gone: index again
            vb.docs.clear()
            vb.generated = None
            vb.indexed = 0
        for image in vb.images.values():  # encoded items above the branch point are from the old history
            keep = max(0, vb.high_seqno - image.first + 1)  # (the events are the same on every branch)
            if keep < len(image.offsets):
                del image.data[image.offsets[keep]:]
                del image.offsets[keep:]
        # later manifests' events above it are gone too: the new active queues what it lacks of the bucket's
        # manifest (Collections::Manager::maybeUpdate), once, at its next seqnos
        vb.eras = [era for era in vb.eras if era.last <= at]
        vb.event_seqnos = [s for s in vb.event_seqnos if s <= at]
        self._bring_up_to_date(vb)
        return entry

    def marker_seqnos(self, vb: VBucket, upto: int) -> tuple[int, int]:
        """A snapshot ending at ``upto``: its max visible seqno (the newest item that is not a pending or
        aborted prepare) and its high completed seqno (the newest prepare committed or aborted by then)."""
        visible = upto
        while visible > 0 and self.item(vb, visible).opcode in _NOT_VISIBLE:
            visible -= 1
        index = bisect.bisect_right(vb.completions, upto)
        return visible, vb.completed_prepares[index - 1] if index else 0

    @staticmethod
    def high_prepared_seqno(vb: VBucket, upto: int) -> int:
        """The newest prepare at or below ``upto`` (a v2.2 disk marker's high prepared seqno); prepares are
        clients' durable writes, so only written items hold them."""
        return max((seqno for seqno, item in vb.written.items() if seqno <= upto and item.opcode == PREPARE),
                   default=0)

    def purge(self, vb: VBucket, seqno: int) -> None:
        vb.purge_seqno = max(vb.purge_seqno, min(seqno, vb.high_seqno))

    # --- documents ----------------------------------------------------------------------------------
    def now(self) -> float:
        return self.clock() / 1e9

    def document(self, vb: VBucket, collection: int, key: bytes) -> Document | None:
        """The newest version of a key (a tombstone included), None if it never existed: a written one, or
        a generated one made from its item when it is newer."""
        self._index(vb)
        doc = vb.docs.get((collection, key))
        seqno = self._generated_seqno(vb, collection, key)
        if seqno and (doc is None or doc.seqno < seqno):
            item = self.item(vb, seqno)
            doc = vb.docs[(collection, key)] = Document(
                key, collection, item.value, item.datatype, item.flags, item.expiry, item.cas, item.rev_seqno, seqno,
                deleted=item.opcode != MUTATION)
        return doc

    def _generated_seqno(self, vb: VBucket, collection: int, key: bytes) -> int:
        index = vb.generated
        slot = self._slots.get(collection)
        if index is None or slot is None or len(key) != _KEY_LENGTH or not key.startswith(_KEY_PREFIX) or not (
                key[len(_KEY_PREFIX):].isdigit()):
            return 0
        keyno = int(key[len(_KEY_PREFIX):])
        if keyno >= KEYSPACE:
            return 0
        return index[slot * KEYSPACE + keyno] if isinstance(index, array) else index.get(slot * KEYSPACE + keyno, 0)

    def live(self, vb: VBucket, collection: int, key: bytes) -> Document | None:
        """The document a read sees: not deleted and not expired (an expired one expires now, as a read
        on the server makes it, and its expiration goes to DCP)."""
        doc = self.document(vb, collection, key)
        if doc is None or doc.deleted:
            return None
        if doc.expiry and doc.expiry <= self.now():
            self.write(vb, collection, key, b"", 0, 0, 0, doc, opcode=EXPIRATION)
            return None
        return doc

    def _index(self, vb: VBucket) -> None:
        """Index seqnos indexed+1..high_seqno: a written item as its document, a generated one only as the
        newest seqno of its key (its key and collection from the hash alone, no value built)."""
        first, last = vb.indexed + 1, vb.high_seqno
        if first > last:
            return
        written = vb.written
        index = vb.generated
        if index is None:
            slots = len(self._slots)
            dense = last * DENSE_INDEX_SHARE >= slots * KEYSPACE
            index = vb.generated = array("Q", [0]) * (slots * KEYSPACE) if dense else {}
        base = self.seed * _H_SEED + vb.vbucket * _H_VBUCKET
        # system events are no documents: the index starts above the first ones, and skips later ones
        for start, end, uuid, era in self._runs(vb, max(first, len(self.events) + 1), last):
            branch = base + uuid
            era_slots, count = era.slots, len(era.slots)
            for seqno in range(start, end + 1):
                if seqno in written:  # after a failover the written documents are indexed again
                    item = written[seqno]
                    if item.event is None and item.opcode not in _SYNC_ONLY:
                        # a commit is the document; an aborted prepare never was
                        vb.docs[(item.collection_id, item.key)] = Document(
                            item.key, item.collection_id, item.value, item.datatype, item.flags, item.expiry,
                            item.cas, item.rev_seqno, seqno,
                            deleted=item.deleted if item.opcode == COMMIT else item.opcode != MUTATION)
                    vb.max_cas = max(vb.max_cas, item.cas)
                    continue
                h = (branch + seqno * _H_SEQNO) & _H_MASK
                index[era_slots[(h >> _COLLECTION_SHIFT) % count] * KEYSPACE + (h >> _KEY_SHIFT) % KEYSPACE] = seqno
        vb.max_cas = max(vb.max_cas, BASE_CAS + last * 1000)  # a generated item's CAS grows with its seqno
        vb.indexed = last

    def next_cas(self, vb: VBucket) -> int:
        """kv_engine's hybrid logical clock: the physical time with its low bits masked, or one above the
        vbucket's last CAS if the clock has not moved past it."""
        self._index(vb)
        vb.max_cas = max(self.clock() & ~HLC_LOGICAL_BITS, vb.max_cas + 1)
        return vb.max_cas

    def expiry_of(self, ttl: int) -> int:
        """An absolute expiry from a request's expiration field (memcached's 30-day rule); 0 never expires."""
        if ttl == 0:
            return 0
        if ttl > RELATIVE_EXPIRY_LIMIT:
            return ttl
        return int(self.now()) + ttl

    def write(self, vb: VBucket, collection: int, key: bytes, value: bytes, datatype: int, flags: int, expiry: int,
              old: Document | None, *, opcode: int = MUTATION, durability_level: int = 0) -> Document:
        """A client's mutation, deletion or expiration: the vbucket's next seqno, a new CAS, the key's next
        rev seqno; the item goes to every stream of the vbucket as any other. With a durability level, a
        synchronous write: a PREPARE, and the COMMIT at the next seqno at once (no replica to wait for),
        which is the document's seqno; with silent replicas only the PREPARE, pending until
        :meth:`abort_due` aborts it (the document stays as it was). A write to a key with a pending one
        raises SyncWriteInProgressError, a mutation the memory quota has no room for OutOfMemoryError
        (deletions and expirations are kept: on a server they free memory)."""
        if opcode != EXPIRATION and vb.takeover_backed_up:  # (an expiry is the server's own, not a client's)
            raise TakeoverBackedUpError(vb.vbucket)
        self._index(vb)
        if opcode != EXPIRATION and (collection, key) in vb.pending:
            raise SyncWriteInProgressError(key)
        if opcode == MUTATION and self.memory_used + (len(key) + len(value) + WRITE_OVERHEAD) * (
                2 if durability_level else 1) > self.memory_quota:
            raise OutOfMemoryError(f"{self.memory_used} of {self.memory_quota} bytes used")
        first = seqno = vb.high_seqno + 1
        cas = self.next_cas(vb)
        rev = old.rev_seqno + 1 if old is not None else 1
        deleted = opcode != MUTATION
        flags, expiry = (0, 0) if deleted else (flags, self.limited_expiry(collection, expiry))
        if durability_level:
            vb.written[seqno] = Item(PREPARE, vb.vbucket, seqno, key, value, collection, cas, rev, datatype, flags,
                                     expiry, deleted, durability_level)
            if self.silent_replicas:
                vb.pending[(collection, key)] = Pending(seqno, self.now() + DEFAULT_DURABILITY_TIMEOUT)
                self.waiting.add(vb.vbucket)
                vb.high_seqno = vb.indexed = seqno
                self.memory_used += _cost(vb.written[seqno])
                return Document(key, collection, value, datatype, flags, expiry, cas, rev, seqno, deleted)
            seqno += 1
            vb.written[seqno] = Item(COMMIT, vb.vbucket, seqno, key, value, collection, cas, rev, datatype, flags,
                                     expiry, deleted, prepared_seqno=seqno - 1)
            vb.completions.append(seqno)
            vb.completed_prepares.append(seqno - 1)
        else:
            vb.written[seqno] = Item(opcode, vb.vbucket, seqno, key, value, collection, cas, rev, datatype, flags,
                                     expiry)
        vb.high_seqno = seqno
        vb.indexed = seqno
        self.memory_used += sum(_cost(vb.written[s]) for s in range(first, seqno + 1))
        doc = Document(key, collection, value, datatype, flags, expiry, cas, rev, seqno, deleted)
        vb.docs[(collection, key)] = doc
        if expiry and not deleted:
            heapq.heappush(self.expiries, (expiry, vb.vbucket, seqno, collection, key))
        return doc

    def limited_expiry(self, collection: int, expiry: int) -> int:
        """A stored document's expiry under its collection's maxTTL (kv_engine's processExpiryTime, then
        memcached's mc_time_limit_expiry_time): none or one past now + maxTTL becomes now + maxTTL; a maxTTL
        of 0, or none (serve's bucket has no maxTTL), leaves it as it is."""
        limit = self.manifest.max_ttls.get(collection, 0)
        if not limit:
            return expiry
        upperbound = min(int(self.now()) + limit, MAX_EXPIRY)
        return upperbound if expiry == 0 or expiry > upperbound else expiry

    def pending(self, vb: VBucket, doc: Document) -> Pending | None:
        """The pending synchronous write ``doc`` is the prepare of, if it is one."""
        pending = vb.pending.get((doc.collection_id, doc.key))
        return pending if pending is not None and pending.seqno == doc.seqno else None

    def abort_due(self) -> int:
        """Every pending synchronous write whose durability timeout has passed is aborted: an ABORT at the
        vbucket's next seqno (as kv_engine's durability timeout task does); the number aborted."""
        now = self.now()
        aborted = 0
        for number in list(self.waiting):
            vb = self.vbuckets[number]
            if not vb.pending:
                self.waiting.discard(number)
            for name, pending in [(n, p) for n, p in vb.pending.items() if p.deadline <= now]:
                del vb.pending[name]
                prepare = vb.written[pending.seqno]
                seqno = vb.high_seqno + 1
                vb.written[seqno] = Item(ABORT, vb.vbucket, seqno, prepare.key, b"", prepare.collection_id, 0,
                                         prepare.rev_seqno, 0, deleted=prepare.deleted, prepared_seqno=pending.seqno)
                vb.completions.append(seqno)
                vb.completed_prepares.append(pending.seqno)
                self.memory_used += _cost(vb.written[seqno])
                vb.high_seqno = vb.indexed = seqno
                aborted += 1
        return aborted

    def expire_due(self) -> int:
        """The expiry pager: every written document whose expiry has passed expires now (an EXPIRATION item),
        unless it was written again since; the number expired."""
        now = self.now()
        expired = 0
        while self.expiries and self.expiries[0][0] <= now:
            expiry, vbucket, seqno, collection, key = heapq.heappop(self.expiries)
            vb = self.vbuckets[vbucket]
            doc = vb.docs.get((collection, key))
            if doc is not None and (doc.seqno, doc.expiry, doc.deleted, vb.state) == (seqno, expiry, False, "active"):
                self.write(vb, collection, key, b"", 0, 0, 0, doc, opcode=EXPIRATION)
                expired += 1
        return expired


def _event_passes(event: SystemEvent, collections: frozenset[int], scope: int | None) -> bool:
    """Whether a filtered stream is sent a system event (kv_engine's Filter::checkAndUpdateSystemEvent): a
    scope filter its scope's events and its collections'; a collection filter its collections' events, never a
    scope's."""
    if scope is not None:
        return event.scope_id == scope
    return event.collection_id is not None and event.collection_id in collections


def _event_message(item: Item, event: SystemEvent, encoding: Encoding, opaque: int, stream_id: int | None) -> bytes:
    """A DCP_SYSTEM_EVENT (reference 3.16): the event's seqno, id and version in the extras, the name as a plain
    key (no collection prefix), the value by the version's declared layout; CAS 0 and datatype raw, as
    kv_engine's Connection::system_event builds it."""
    version = event_version(event, encoding)
    fields: dict[str, Any] = {"manifest_uid": event.manifest_uid, "scope_id": event.scope_id}
    if event.collection_id is not None:
        fields["collection_id"] = event.collection_id
    if version == EVENT_VERSION_MAX_TTL and event.max_ttl is not None:
        fields["max_ttl"] = event.max_ttl
    if version == EVENT_VERSION_FLATBUFFERS:
        fields |= _table_fields(event)
    return build.request(SYSTEM_EVENT, vbucket=item.vbucket, opaque=opaque, key=event.name, stream_id=stream_id,
                         by_seqno=item.seqno, event_id=event.event_id, event_version=version, **fields)


def _table_fields(event: SystemEvent) -> dict[str, Any]:
    """A version-2 event's table fields beyond the ids and the uid (events.fbs): what serve's collections and
    scopes are, none of them a system collection or scope, none flushed, metered or keeping history."""
    if event.event_id in (SystemEventId.BEGIN_COLLECTION, SystemEventId.MODIFY_COLLECTION):  # both a Collection
        return {"ttl_valid": event.max_ttl is not None, "max_ttl": event.max_ttl or 0, "name": event.name.decode(),
                "history": False, "default_collection_mvs": 0, "metered": False, "flush_uid": 0}
    if event.event_id == SystemEventId.END_COLLECTION:
        return {"system_collection": False}
    if event.event_id == SystemEventId.CREATE_SCOPE:
        return {"name": event.name.decode()}
    return {"system_scope": False}  # DropScope


def _cost(item: Item) -> int:
    return len(item.key) + len(item.value) + WRITE_OVERHEAD


def event_cost(event: SystemEvent) -> int:
    """What a later manifest's event costs a vbucket that keeps it: its item's cost (the name is its key)."""
    return len(event.name) + WRITE_OVERHEAD


def _branches(log: list[FailoverEntry], first: int, last: int) -> list[tuple[int, int, int]]:
    """Seqnos first..last in runs of one branch each: (start, end, uuid), as ``VBucket.branch_uuid`` says."""
    runs = []
    end = last
    for entry in log:  # newest first: an entry holds the seqnos above its own
        start = max(first, entry.seqno + 1)
        if start <= end:
            runs.append((start, end, entry.vbucket_uuid))
            end = start - 1
    if end >= first:  # below the oldest entry: its uuid, as branch_uuid gives
        runs.append((first, end, log[-1].vbucket_uuid))
    return runs[::-1]


# The item shapes, planned once from their registry rows (extras in the order of each row's layout).
_MUTATION: Final = build.shape(Opcode.DCP_MUTATION, "by_seqno", "rev_seqno", "flags", "expiration", "lock_time",
                               "nmeta", "nru")
_DELETION_V1: Final = build.shape(Opcode.DCP_DELETION, "by_seqno", "rev_seqno", "nmeta")
_DELETION_V2: Final = build.shape(Opcode.DCP_DELETION, "by_seqno", "rev_seqno", "delete_time", "unused")
_EXPIRATION: Final = build.shape(Opcode.DCP_EXPIRATION, "by_seqno", "rev_seqno", "delete_time")
_PREPARE: Final = build.shape(Opcode.DCP_PREPARE, "by_seqno", "rev_seqno", "flags", "expiration", "lock_time", "nru",
                              "deleted", "durability_level")
_COMMIT: Final = build.shape(Opcode.DCP_COMMIT, "prepared_seqno", "commit_seqno")
_ABORT: Final = build.shape(Opcode.DCP_ABORT, "prepared_seqno", "abort_seqno")
