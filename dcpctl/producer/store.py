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
"""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass, field
from typing import Final

from dcpctl.dcp.rollback import FailoverEntry, VbucketState
from dcpctl.protocol import build
from dcpctl.protocol.constants import Magic, Opcode
from dcpctl.protocol.value import leb128_encode

MUTATION: Final = Opcode.DCP_MUTATION
DELETION: Final = Opcode.DCP_DELETION
EXPIRATION: Final = Opcode.DCP_EXPIRATION
DEFAULT_COLLECTION: Final = 0
# Deletions and expirations among generated items: one in DELETE_EVERY and one in EXPIRE_EVERY seqnos
# (by a hash, so they are spread), enough for a consumer to meet both without drowning the mutations.
DELETE_EVERY: Final = 23
EXPIRE_EVERY: Final = 101
# Distinct keys per vbucket: keys repeat, as real updates do, so "create or update" questions have answers.
KEYSPACE: Final = 1 << 20
MAX_FAILOVER_ENTRIES: Final = 25  # the server's max_failover_entries default (reference 3.6)
BASE_CAS: Final = 1_700_000_000_000_000_000


@dataclass(frozen=True)
class Item:
    opcode: int  # MUTATION, DELETION or EXPIRATION
    vbucket: int
    seqno: int
    key: bytes
    value: bytes
    collection_id: int
    cas: int
    rev_seqno: int
    datatype: int


@dataclass(frozen=True)
class Encoding:
    """The stream shape items are encoded for (what DCP_OPEN, DCP_CONTROL and HELLO negotiated)."""

    collections: bool = False
    delete_times: bool = False  # DCP_OPEN IncludeDeleteTimes: deletion v2 extras
    expiry_opcode: bool = False  # enable_expiry_opcode (needs delete times), else expiries are deletions
    no_value: bool = False


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


@dataclass
class Manifest:
    """Collections: id -> (scope id, name); the default collection 0 in the default scope 0."""

    uid: int = 0
    collections: dict[int, tuple[int, str]] = field(default_factory=lambda: {0: (0, "_default")})
    scopes: dict[int, str] = field(default_factory=lambda: {0: "_default"})


class Bucket:
    """All vbuckets of one bucket on one emulated cluster (see the module docstring)."""

    def __init__(self, name: str, vbuckets: int, items: int, value_size: int, seed: int,
                 manifest: Manifest | None = None) -> None:
        self.name = name
        self.seed = seed
        self.value_size = value_size
        self.manifest = manifest or Manifest()
        self.collection_ids = sorted(self.manifest.collections)
        rng = random.Random(seed)  # noqa: S311 - reproducible uuids for a seed, not secrets
        self.vbuckets: list[VBucket] = []
        for vb in range(vbuckets):
            count = items // vbuckets + (1 if vb < items % vbuckets else 0)
            uuid = rng.getrandbits(48) or 1
            self.vbuckets.append(VBucket(vb, [FailoverEntry(uuid, 0)], count))
        self._rng = rng

    # --- items ------------------------------------------------------------------------------------
    def item(self, vb: VBucket, seqno: int) -> Item:
        uuid = vb.branch_uuid(seqno)
        # multiplicative hashing (golden-ratio and murmur3 constants), not protocol codes
        h = (self.seed * 0x9E3779B1 + vb.vbucket * 0x85EBCA77 + seqno * 0xC2B2AE3D + uuid) & 0xFFFFFFFFFFFF
        keyno = (h >> 7) % KEYSPACE
        collection = self.collection_ids[(h >> 3) % len(self.collection_ids)]
        key = b"doc-%07d" % keyno
        opcode = DELETION if h % DELETE_EVERY == 0 else EXPIRATION if h % EXPIRE_EVERY == 0 else MUTATION
        if opcode != MUTATION:
            return Item(opcode, vb.vbucket, seqno, key, b"", collection, BASE_CAS + seqno * 1000, 1 + (h >> 20) % 9,
                        0)
        head = b'{"key":"%s","vbucket":%d,"seqno":%d,"pad":"' % (key, vb.vbucket, seqno)
        pad = max(0, self.value_size - len(head) - 2)
        value = head + b"x" * pad + b'"}'
        return Item(opcode, vb.vbucket, seqno, key, value, collection, BASE_CAS + seqno * 1000, 1 + (h >> 20) % 9, 1)

    def visible(self, item: Item, encoding: Encoding, filter_ids: frozenset[int] | None) -> bool:
        """Whether a stream sends this item: a stream without collections sees the default collection only."""
        if not encoding.collections:
            return item.collection_id == DEFAULT_COLLECTION
        return filter_ids is None or item.collection_id in filter_ids

    def encode_item(self, item: Item, encoding: Encoding, opaque: int, stream_id: int | None = None) -> bytes:
        """One stream message for an item, built from its declared shape (any stream shape)."""
        key = leb128_encode(item.collection_id) + item.key if encoding.collections else item.key
        opcode = item.opcode
        if opcode == EXPIRATION and not (encoding.expiry_opcode and encoding.delete_times):
            opcode = DELETION  # the server sends expiries as deletions unless both were negotiated
        datatype, value = 0, b""
        extras: tuple[int, ...]
        if opcode == MUTATION:
            shape, extras = _MUTATION, (item.seqno, item.rev_seqno, 0, 0, 0, 0, 0)
            if not encoding.no_value:
                datatype, value = item.datatype, item.value
        elif opcode == EXPIRATION:
            shape, extras = _EXPIRATION, (item.seqno, item.rev_seqno, item.cas // 1_000_000_000)
        elif encoding.delete_times:
            shape, extras = _DELETION_V2, (item.seqno, item.rev_seqno, item.cas // 1_000_000_000, 0)
        else:
            shape, extras = _DELETION_V1, (item.seqno, item.rev_seqno, 0)
        if stream_id:
            return shape.pack_framed(Magic.ALT_CLIENT_REQUEST, item.vbucket, opaque, item.cas, datatype, key, value,
                                     extras, build.stream_id_frame(stream_id))
        return shape.pack(Magic.CLIENT_REQUEST, item.vbucket, opaque, item.cas, datatype, key, value, extras)

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

    # --- changes over time ------------------------------------------------------------------------
    def mutate(self, vb: VBucket, count: int = 1) -> None:
        """New items (``--mutation-rate``): the high seqno moves on."""
        if vb.state == "active":
            vb.high_seqno += count

    def failover(self, vb: VBucket, seqno: int | None = None) -> FailoverEntry:
        """A replica promoted at ``seqno`` (default: the high seqno): a new failover entry; items above the
        seqno are gone and new ones belong to the new branch (reference 3.6: entries above it are dropped)."""
        at = vb.high_seqno if seqno is None else min(seqno, vb.high_seqno)
        entry = FailoverEntry(self._rng.getrandbits(48) or 1, at)
        vb.failover_log = [entry, *[e for e in vb.failover_log if e.seqno <= at]][:MAX_FAILOVER_ENTRIES]
        vb.high_seqno = at
        vb.purge_seqno = min(vb.purge_seqno, at)
        for image in vb.images.values():  # encoded items above the branch point are from the old history
            keep = max(0, at - image.first + 1)
            if keep < len(image.offsets):
                del image.data[image.offsets[keep]:]
                del image.offsets[keep:]
        return entry

    def purge(self, vb: VBucket, seqno: int) -> None:
        vb.purge_seqno = max(vb.purge_seqno, min(seqno, vb.high_seqno))


# The item shapes, planned once from their registry rows (extras in the order of each row's layout).
_MUTATION: Final = build.shape(Opcode.DCP_MUTATION, "by_seqno", "rev_seqno", "flags", "expiration", "lock_time",
                               "nmeta", "nru")
_DELETION_V1: Final = build.shape(Opcode.DCP_DELETION, "by_seqno", "rev_seqno", "nmeta")
_DELETION_V2: Final = build.shape(Opcode.DCP_DELETION, "by_seqno", "rev_seqno", "delete_time", "unused")
_EXPIRATION: Final = build.shape(Opcode.DCP_EXPIRATION, "by_seqno", "rev_seqno", "delete_time")
