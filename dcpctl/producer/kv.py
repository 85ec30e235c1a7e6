"""The document commands of ``dcpctl serve``: what an SDK sends a data node, with kv_engine's semantics.

Theory of operation. Each handler takes the connection and a decoded request, finds the vbucket (active on
this node, else NotMyVbucket) and the (collection, key) of the request (the LEB128 prefix with HELLO
Collections), and reads or writes the bucket's documents (``store.Bucket``). Writes go through
``Bucket.write``: a new seqno, CAS and rev seqno, and the item every stream of the vbucket sends next. The
checks come in kv_engine's order: the vbucket, the collection, a locked document (Locked unless the request
carries the lock's CAS), the CAS (KeyEexists when it differs, KeyEnoent when there is no document), then
the command's own rule (ADD: KeyEexists; REPLACE: KeyEnoent; APPEND: NotStored...). Quiet commands say
nothing on success (GETQ: nothing on a miss either). Values are stored uncompressed; a snappy value is
inflated on the way in, and replies are never compressed (a client that asked for snappy accepts both).
Reads strip xattrs (only subdocument commands read them) and the JSON bit when HELLO JSON was not asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import orjson

from dcpctl.producer.store import (
    DEFAULT_DURABILITY_TIMEOUT,
    DELETION,
    Document,
    OutOfMemoryError,
    SyncWriteInProgressError,
    TakeoverBackedUpError,
    VBucket,
)
from dcpctl.protocol.constants import DATATYPE_JSON, DATATYPE_SNAPPY, DATATYPE_XATTR, HelloFeature, Opcode, Status
from dcpctl.protocol.frameinfo import DURABILITY, RESERVED_DURABILITY_TIMEOUTS
from dcpctl.protocol.message import Message
from dcpctl.protocol.value import leb128_decode, parse_xattrs, snappy_decompress

if TYPE_CHECKING:
    from dcpctl.producer.connection import ProducerConnection

# kv_engine's max_item_size default: a larger value is E2big (--max-item-size).
MAX_ITEM_SIZE: Final = 20 * 1024 * 1024
# GET_LOCKED: the lock time when none (or 0) is asked, and the longest one granted (kv_engine's
# getl_default_timeout and getl_max_timeout).
DEFAULT_LOCK_SECONDS: Final = 15
MAX_LOCK_SECONDS: Final = 30
# The CAS a read of a locked document shows: -1, so that the reader cannot write it.
LOCKED_CAS: Final = 0xFFFF_FFFF_FFFF_FFFF
U64: Final = 1 << 64
# INCREMENT/DECREMENT with this expiration fail on a missing counter instead of creating it.
NO_CREATE: Final = 0xFFFF_FFFF
QUIET: Final = frozenset({Opcode.GETQ, Opcode.GETKQ, Opcode.GATQ, Opcode.SETQ, Opcode.ADDQ, Opcode.REPLACEQ,
                          Opcode.DELETEQ, Opcode.INCREMENTQ, Opcode.DECREMENTQ, Opcode.APPENDQ, Opcode.PREPENDQ,
                          Opcode.GETQ_META})
# Durability levels a request may ask for (majority, majority and persist to active, persist to majority).
DURABILITY_LEVELS: Final = frozenset({1, 2, 3})
_STORE_EXTRAS: Final = 8
_ARITHMETIC_EXTRAS: Final = 20


class RefusedError(Exception):
    """A request answered with an error status (raised inside a handler, answered once, in ``handle``)."""

    def __init__(self, status: int, context: str = "") -> None:
        super().__init__(context)
        self.status = status
        self.context = context


def handle(conn: ProducerConnection, msg: Message, command: Callable[[ProducerConnection, Message], None]) -> None:
    """Run one document command; an error status goes back with XERROR's context when asked for."""
    if conn._needs_bucket(msg) is None:
        return
    try:
        command(conn, msg)
    except SyncWriteInProgressError:
        conn._error(msg, Status.SYNC_WRITE_IN_PROGRESS, "a synchronous write of this key is pending")
    except TakeoverBackedUpError:
        conn._error(msg, Status.ETMPFAIL, "the vbucket's takeover is lagging: writes wait until it catches up")
    except OutOfMemoryError as full:
        conn._error(msg, Status.ENOMEM, f"the bucket's memory quota is used up ({full}; --memory-quota)")
    except RefusedError as refused:
        if msg.opcode in (Opcode.GETQ, Opcode.GETKQ) and refused.status == Status.KEY_ENOENT:
            return  # a quiet get says nothing on a miss
        conn._error(msg, refused.status, refused.context)


# --- locating the document -----------------------------------------------------------------------------
def target(conn: ProducerConnection, msg: Message) -> tuple[VBucket, int, bytes]:
    """The vbucket, collection id and key of a request."""
    vb = conn._vbucket(msg.vbucket_or_status)
    if vb is None:
        raise RefusedError(Status.NOT_MY_VBUCKET)
    key = msg.key
    collection = 0
    if conn.collections:
        prefix = leb128_decode(key)
        if prefix is None or prefix[1] == len(key):
            raise RefusedError(Status.EINVAL, "the key has no collection id and key")
        collection, used = prefix
        key = key[used:]
        manifest = conn.node.cluster.bucket.manifest
        if collection not in manifest.collections:
            raise RefusedError(Status.UNKNOWN_COLLECTION)  # conn._error adds the manifest uid for XERROR
    if not key:
        raise RefusedError(Status.EINVAL, "empty key")
    return vb, collection, key


def unlocked(conn: ProducerConnection, doc: Document | None, cas: int) -> None:
    """Locked, unless the request carries the lock's CAS (kv_engine 7: Locked rather than KeyEexists)."""
    if doc is not None and doc.locked_until > conn.node.cluster.bucket.now() and cas != doc.lock_cas:
        raise RefusedError(Status.LOCKED, "the document is locked")


def cas_check(doc: Document | None, cas: int) -> None:
    if cas and doc is None:
        raise RefusedError(Status.KEY_ENOENT, "a CAS for a document that does not exist")
    if cas and doc is not None and cas != doc.cas:
        raise RefusedError(Status.KEY_EEXISTS, "CAS mismatch")


def _shown_cas(conn: ProducerConnection, doc: Document) -> int:
    return LOCKED_CAS if doc.locked_until > conn.node.cluster.bucket.now() else doc.cas


def _read_value(conn: ProducerConnection, doc: Document) -> tuple[int, bytes]:
    """The datatype and value a read returns: the body (xattrs stripped), JSON only if HELLO JSON."""
    value, datatype = doc.value, doc.datatype
    if datatype & DATATYPE_XATTR:
        parsed = parse_xattrs(value)
        value = value[parsed[1]:] if not isinstance(parsed, str) else value
        datatype &= ~DATATYPE_XATTR
    if HelloFeature.JSON not in conn.features:
        datatype &= ~DATATYPE_JSON
    return datatype, value


def _incoming(conn: ProducerConnection, msg: Message) -> tuple[int, bytes]:
    """A written value as stored: inflated, xattrs checked, the JSON bit from the body as kv_engine sets it."""
    value, datatype = msg.value, msg.datatype
    if datatype & DATATYPE_SNAPPY:
        if HelloFeature.SNAPPY not in conn.features:
            raise RefusedError(Status.EINVAL, "snappy datatype without HELLO Snappy")
        inflated = snappy_decompress(value)
        if isinstance(inflated, str):
            raise RefusedError(Status.EINVAL, inflated)
        value = inflated
    if len(value) > conn.max_item_size:
        raise RefusedError(Status.E2BIG, f"the value is above {conn.max_item_size} bytes")
    body = value
    if datatype & DATATYPE_XATTR:
        if HelloFeature.XATTR not in conn.features:
            raise RefusedError(Status.EINVAL, "xattr datatype without HELLO Xattr")
        parsed = parse_xattrs(value)
        if isinstance(parsed, str):
            raise RefusedError(Status.XATTR_EINVAL, parsed)
        body = value[parsed[1]:]
    datatype = datatype & DATATYPE_XATTR
    if _is_json(body):
        datatype |= DATATYPE_JSON
    return datatype, value


def _is_json(body: bytes) -> bool:
    try:
        orjson.loads(body)
    except ValueError:
        return False
    return bool(body)


def written(conn: ProducerConnection, msg: Message, vb: VBucket, doc: Document, **fields: Any) -> None:
    """A mutation's success: its CAS, and the mutation token with HELLO MutationSeqno. A synchronous write
    left pending (silent replicas) is not answered now: the connection waits for its abort, as kv_engine
    holds the command until the write completes or its durability timeout passes."""
    conn.node.cluster.writes += 1
    bucket = conn.node.cluster.bucket
    pending = bucket.pending(vb, doc)
    if pending is not None:
        pending.deadline = bucket.now() + durability_timeout(msg)
        conn.wait_for_sync_write(vb.vbucket, doc.seqno, msg)
        return
    if msg.opcode in QUIET:
        return
    if HelloFeature.MUTATION_SEQNO in conn.features:
        fields.update(vbucket_uuid=vb.failover_log[0].vbucket_uuid, mutation_seqno=doc.seqno)
    conn._reply(msg, cas=doc.cas, **fields)


def durability(msg: Message) -> int:
    """The durability level a request's frame info asks for (0: none): a level kv_engine does not know is
    DurabilityInvalidLevel, a reserved timeout Einval."""
    for info in msg.frame_infos:
        if info.id != DURABILITY:
            continue
        if not info.data or info.data[0] not in DURABILITY_LEVELS:
            raise RefusedError(Status.DURABILITY_INVALID_LEVEL, "unknown durability level")
        if len(info.data) == 3 and int.from_bytes(info.data[1:], "big") in RESERVED_DURABILITY_TIMEOUTS:
            raise RefusedError(Status.EINVAL, "a reserved durability timeout")
        return info.data[0]
    return 0


def durability_timeout(msg: Message) -> float:
    """Seconds a synchronous write may wait for its majority: the frame info's timeout (milliseconds), else
    kv_engine's default."""
    for info in msg.frame_infos:
        if info.id == DURABILITY and len(info.data) == 3:
            return int.from_bytes(info.data[1:], "big") / 1000
    return DEFAULT_DURABILITY_TIMEOUT


def _extras(msg: Message, length: int) -> dict[str, Any]:
    if msg.extras_length != length or msg.extras is None:
        raise RefusedError(Status.EINVAL, f"{msg.opcode_name} needs {length} bytes of extras")
    return dict(msg.extras)


# --- reads ---------------------------------------------------------------------------------------------
def _get(conn: ProducerConnection, msg: Message) -> None:
    if msg.extras_length or msg.value:
        raise RefusedError(Status.EINVAL, f"{msg.opcode_name} has no extras and no value")
    vb, collection, key = target(conn, msg)
    doc = conn.node.cluster.bucket.live(vb, collection, key)
    if doc is None:
        if msg.opcode == Opcode.GETK:
            conn._reply(msg, Status.KEY_ENOENT, key=msg.key)
            return
        raise RefusedError(Status.KEY_ENOENT)
    _found(conn, msg, doc)


def _found(conn: ProducerConnection, msg: Message, doc: Document, cas: int | None = None) -> None:
    datatype, value = _read_value(conn, doc)
    key = msg.key if msg.opcode in (Opcode.GETK, Opcode.GETKQ) else b""
    conn._reply(msg, cas=_shown_cas(conn, doc) if cas is None else cas, datatype=datatype, key=key, value=value,
                flags=doc.flags)


def _get_replica(conn: ProducerConnection, msg: Message) -> None:
    target(conn, msg)
    raise RefusedError(Status.NOT_MY_VBUCKET, "no replicas: every vbucket is active here")


def _touch(conn: ProducerConnection, msg: Message) -> None:
    """GAT, GATQ, TOUCH: a new expiry is a new revision (a new seqno and CAS)."""
    extras = _extras(msg, 4)
    vb, collection, key = target(conn, msg)
    bucket = conn.node.cluster.bucket
    doc = bucket.live(vb, collection, key)
    if doc is None:
        raise RefusedError(Status.KEY_ENOENT)
    unlocked(conn, doc, 0)
    new = bucket.write(vb, collection, key, doc.value, doc.datatype, doc.flags,
                       bucket.expiry_of(extras["expiration"]), doc)
    conn.node.cluster.writes += 1
    if msg.opcode == Opcode.TOUCH:
        conn._reply(msg, cas=new.cas)
    else:
        _found(conn, msg, new)


def _get_locked(conn: ProducerConnection, msg: Message) -> None:
    seconds = _extras(msg, 4)["expiration"] if msg.extras_length else 0
    vb, collection, key = target(conn, msg)
    bucket = conn.node.cluster.bucket
    doc = bucket.live(vb, collection, key)
    if doc is None:
        raise RefusedError(Status.KEY_ENOENT)
    if doc.locked_until > bucket.now():
        raise RefusedError(Status.LOCKED, "the document is locked")
    if seconds == 0 or seconds > MAX_LOCK_SECONDS:
        seconds = DEFAULT_LOCK_SECONDS
    doc.cas = doc.lock_cas = bucket.next_cas(vb)
    doc.locked_until = bucket.now() + seconds
    _found(conn, msg, doc, cas=doc.cas)


def _unlock(conn: ProducerConnection, msg: Message) -> None:
    vb, collection, key = target(conn, msg)
    bucket = conn.node.cluster.bucket
    doc = bucket.live(vb, collection, key)
    if doc is None:
        raise RefusedError(Status.KEY_ENOENT)
    if doc.locked_until <= bucket.now():
        raise RefusedError(Status.NOT_LOCKED, "the document is not locked")
    if msg.cas != doc.lock_cas:
        raise RefusedError(Status.LOCKED, "not the lock's CAS")
    doc.locked_until = 0.0
    conn._reply(msg)


def _get_meta(conn: ProducerConnection, msg: Message) -> None:
    version = _extras(msg, 1)["meta_version"] if msg.extras_length else 1
    vb, collection, key = target(conn, msg)
    doc = conn.node.cluster.bucket.document(vb, collection, key)
    if doc is None:
        raise RefusedError(Status.KEY_ENOENT)
    fields: dict[str, Any] = {"deleted": int(doc.deleted), "flags": doc.flags, "expiration": doc.expiry,
                              "seqno": doc.rev_seqno}
    if version == 2:
        fields["meta_datatype"] = doc.datatype
    conn._reply(msg, cas=doc.cas, **fields)


# --- writes --------------------------------------------------------------------------------------------
def _store(conn: ProducerConnection, msg: Message) -> None:
    """SET, ADD, REPLACE and their quiet twins."""
    extras = _extras(msg, _STORE_EXTRAS)
    vb, collection, key = target(conn, msg)
    bucket = conn.node.cluster.bucket
    datatype, value = _incoming(conn, msg)
    doc = bucket.live(vb, collection, key)
    unlocked(conn, doc, msg.cas)
    opcode = msg.opcode
    if opcode in (Opcode.ADD, Opcode.ADDQ):
        if doc is not None:
            raise RefusedError(Status.KEY_EEXISTS, "the document exists")
    else:
        if doc is None and opcode in (Opcode.REPLACE, Opcode.REPLACEQ):
            raise RefusedError(Status.KEY_ENOENT)
        cas_check(doc, msg.cas)
    old = doc or bucket.document(vb, collection, key)
    new = bucket.write(vb, collection, key, value, datatype, extras["flags"], bucket.expiry_of(extras["expiration"]),
                       old, durability_level=durability(msg))
    written(conn, msg, vb, new)


def _delete(conn: ProducerConnection, msg: Message) -> None:
    if msg.extras_length or msg.value:
        raise RefusedError(Status.EINVAL, "DELETE has no extras and no value")
    vb, collection, key = target(conn, msg)
    bucket = conn.node.cluster.bucket
    doc = bucket.live(vb, collection, key)
    if doc is None:
        raise RefusedError(Status.KEY_ENOENT)
    unlocked(conn, doc, msg.cas)
    cas_check(doc, msg.cas)
    new = bucket.write(vb, collection, key, b"", 0, 0, 0, doc, opcode=DELETION, durability_level=durability(msg))
    written(conn, msg, vb, new)


def _arithmetic(conn: ProducerConnection, msg: Message) -> None:
    extras = _extras(msg, _ARITHMETIC_EXTRAS)
    vb, collection, key = target(conn, msg)
    bucket = conn.node.cluster.bucket
    doc = bucket.live(vb, collection, key)
    unlocked(conn, doc, msg.cas)
    cas_check(doc, msg.cas)
    if doc is None:
        if extras["expiration"] == NO_CREATE:
            raise RefusedError(Status.KEY_ENOENT)
        counter = extras["initial"]
        old = bucket.document(vb, collection, key)
        expiry = bucket.expiry_of(extras["expiration"])
        flags = 0
    else:
        _, body = _read_value(conn, doc)
        if not (body.isdigit() and len(body) <= len(str(U64 - 1)) and int(body) < U64):
            raise RefusedError(Status.DELTA_BADVAL, "the document is not a decimal u64")
        delta = extras["delta"]
        incr = msg.opcode in (Opcode.INCREMENT, Opcode.INCREMENTQ)
        counter = (int(body) + delta) % U64 if incr else max(0, int(body) - delta)
        old, expiry, flags = doc, doc.expiry, doc.flags
    new = bucket.write(vb, collection, key, str(counter).encode(), DATATYPE_JSON, flags, expiry, old,
                       durability_level=durability(msg))
    written(conn, msg, vb, new, counter=counter)


def _concat(conn: ProducerConnection, msg: Message) -> None:
    """APPEND, PREPEND: the body grows, xattrs and flags stay."""
    if msg.extras_length:
        raise RefusedError(Status.EINVAL, f"{msg.opcode_name} has no extras")
    vb, collection, key = target(conn, msg)
    bucket = conn.node.cluster.bucket
    _, value = _incoming(conn, msg)
    doc = bucket.live(vb, collection, key)
    if doc is None:
        raise RefusedError(Status.NOT_STORED, "no document to add to")
    unlocked(conn, doc, msg.cas)
    cas_check(doc, msg.cas)
    xattrs = b""
    body = doc.value
    if doc.datatype & DATATYPE_XATTR:
        parsed = parse_xattrs(body)
        if not isinstance(parsed, str):
            xattrs, body = body[:parsed[1]], body[parsed[1]:]
    body = body + value if msg.opcode in (Opcode.APPEND, Opcode.APPENDQ) else value + body
    if len(xattrs) + len(body) > conn.max_item_size:
        raise RefusedError(Status.E2BIG, f"the value would be above {conn.max_item_size} bytes")
    datatype = (doc.datatype & DATATYPE_XATTR) | (DATATYPE_JSON if _is_json(body) else 0)
    new = bucket.write(vb, collection, key, xattrs + body, datatype, doc.flags, doc.expiry, doc,
                       durability_level=durability(msg))
    written(conn, msg, vb, new)


# --- collections ---------------------------------------------------------------------------------------
def _path(msg: Message) -> list[str]:
    text = (msg.value or msg.key).decode(errors="replace").strip()
    return [part or "_default" for part in text.split(".")] if text else ["_default"]


def _scope_id(conn: ProducerConnection, name: str) -> int:
    manifest = conn.node.cluster.bucket.manifest
    for scope_id, scope in manifest.scopes.items():
        if scope == name:
            return scope_id
    raise RefusedError(Status.UNKNOWN_SCOPE)


def _get_collection_id(conn: ProducerConnection, msg: Message) -> None:
    parts = _path(msg)
    if len(parts) != 2:
        raise RefusedError(Status.EINVAL, "the path is scope.collection")
    manifest = conn.node.cluster.bucket.manifest
    scope_id = _scope_id(conn, parts[0])
    for collection_id, (scope, name) in manifest.collections.items():
        if scope == scope_id and name == parts[1]:
            conn._reply(msg, manifest_uid=manifest.uid, collection_id=collection_id)
            return
    raise RefusedError(Status.UNKNOWN_COLLECTION)


def _get_scope_id(conn: ProducerConnection, msg: Message) -> None:
    parts = _path(msg)
    if len(parts) > 2:
        raise RefusedError(Status.EINVAL, "the path is scope or scope.collection")
    manifest = conn.node.cluster.bucket.manifest
    conn._reply(msg, manifest_uid=manifest.uid, scope_id=_scope_id(conn, parts[0]))


def manifest_json(conn: ProducerConnection) -> dict[str, Any]:
    """The manifest as COLLECTIONS_GET_MANIFEST returns it (uids in hex, as ns_server writes them; a maxTTL
    only where the collection has one, in memcached's seconds, as kv_engine's Manifest::toJson)."""
    manifest = conn.node.cluster.bucket.manifest
    return {"uid": f"{manifest.uid:x}", "scopes": [
        {"name": name, "uid": f"{scope_id:x}",
         "collections": [{"name": cname, "uid": f"{cid:x}",
                          **({"maxTTL": manifest.max_ttls[cid]} if cid in manifest.max_ttls else {})}
                         for cid, (sid, cname) in sorted(manifest.collections.items()) if sid == scope_id]}
        for scope_id, name in sorted(manifest.scopes.items())]}


def _get_manifest(conn: ProducerConnection, msg: Message) -> None:
    conn._reply(msg, datatype=DATATYPE_JSON, value=orjson.dumps(manifest_json(conn)))


_GETS: Final = (Opcode.GET, Opcode.GETQ, Opcode.GETK, Opcode.GETKQ)
_STORES: Final = (Opcode.SET, Opcode.SETQ, Opcode.ADD, Opcode.ADDQ, Opcode.REPLACE, Opcode.REPLACEQ)
_COUNTERS: Final = (Opcode.INCREMENT, Opcode.INCREMENTQ, Opcode.DECREMENT, Opcode.DECREMENTQ)
_CONCATS: Final = (Opcode.APPEND, Opcode.APPENDQ, Opcode.PREPEND, Opcode.PREPENDQ)
# the commands that take a durability requirement: kv_engine's opcode table gives it to the writes, TOUCH and
# GAT, but to no quiet command
DURABLE: Final = frozenset((Opcode.SET, Opcode.ADD, Opcode.REPLACE, Opcode.DELETE, Opcode.INCREMENT,
                            Opcode.DECREMENT, Opcode.APPEND, Opcode.PREPEND, Opcode.TOUCH, Opcode.GAT))
COMMANDS: Final[dict[int, Callable[[ProducerConnection, Message], None]]] = {
    **dict.fromkeys(_GETS, _get), Opcode.GET_REPLICA: _get_replica,
    **dict.fromkeys((Opcode.GAT, Opcode.GATQ, Opcode.TOUCH), _touch),
    Opcode.GET_LOCKED: _get_locked, Opcode.UNLOCK_KEY: _unlock,
    **dict.fromkeys((Opcode.GET_META, Opcode.GETQ_META), _get_meta),
    **dict.fromkeys(_STORES, _store), **dict.fromkeys((Opcode.DELETE, Opcode.DELETEQ), _delete),
    **dict.fromkeys(_COUNTERS, _arithmetic), **dict.fromkeys(_CONCATS, _concat),
    Opcode.COLLECTIONS_GET_ID: _get_collection_id, Opcode.COLLECTIONS_GET_SCOPE_ID: _get_scope_id,
    Opcode.COLLECTIONS_GET_MANIFEST: _get_manifest,
}
