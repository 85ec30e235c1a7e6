"""Protocol vocabularies: magics, opcodes, statuses, flags and their kv_engine names.

Each vocabulary is one table of ``(code, kv_engine name, meaning)`` rows (reference sections 1, 3, 4, 5, 6,
7); the ``IntEnum`` with UPPER_SNAKE members and the name lookups are derived from it, so a code is written
down exactly once.
"""

from __future__ import annotations

import re
from enum import IntEnum, IntFlag
from typing import Final, TypeVar

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

Row = tuple[int, str, str]


def upper_snake(kv_name: str) -> str:
    """``NotMyVbucket`` -> ``NOT_MY_VBUCKET``; ``DCP_MUTATION`` stays as it is."""
    if kv_name.isupper():
        return kv_name.replace("-", "_").replace(".", "_")
    return _CAMEL.sub("_", kv_name).upper().replace("-", "_").replace(".", "_")


class Vocabulary:
    """Both directions of one table: code -> kv name, kv name -> code, code -> meaning."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self.name_of: dict[int, str] = {code: name for code, name, _ in rows}
        self.code_of: dict[str, int] = {name: code for code, name, _ in rows}
        self.meaning_of: dict[int, str] = {code: meaning for code, _, meaning in rows}

    def name(self, code: int, width: int = 2) -> str:
        """The kv_engine name, or ``0x..`` for a code the table does not know."""
        return self.name_of.get(code) or f"0x{code:0{width}x}"

    def code(self, name: str) -> int:
        """Inverse of :meth:`name`; accepts kv names, ``0x..`` and decimal strings."""
        if name in self.code_of:
            return self.code_of[name]
        try:
            return int(name, 0)
        except ValueError:
            raise KeyError(name) from None


E = TypeVar("E", bound=IntEnum)


def _enum(cls_name: str, rows: list[Row]) -> type[IntEnum]:
    return IntEnum(cls_name, [(upper_snake(name), code) for code, name, _ in rows])  # type: ignore[return-value]


def _flag(cls_name: str, rows: list[Row]) -> type[IntFlag]:
    return IntFlag(cls_name, [(upper_snake(name), code) for code, name, _ in rows])  # type: ignore[return-value]


def flag_names(vocabulary: Vocabulary, value: int) -> list[str]:
    """Names of the bits set in ``value``; unknown bits as ``0x..``."""
    names = []
    rest = value
    for code, name, _ in vocabulary.rows:
        if code and value & code == code:
            names.append(name)
            rest &= ~code
    if rest:
        names.append(f"0x{rest:x}")
    return names


# --- 1.1 magics -------------------------------------------------------------------------------------
MAGIC_ROWS: Final[list[Row]] = [
    (0x80, "ClientRequest", "request (on DCP also every message the producer pushes)"),
    (0x08, "AltClientRequest", "request with flexible framing extras"),
    (0x81, "ClientResponse", "response"),
    (0x18, "AltClientResponse", "response with flexible framing extras"),
    (0x82, "ServerRequest", "server-initiated request (HELLO Duplex)"),
    (0x83, "ServerResponse", "client's response to a server-initiated request"),
]
MAGICS = Vocabulary(MAGIC_ROWS)
Magic = _enum("Magic", MAGIC_ROWS)
ALT_MAGICS: Final = frozenset({0x08, 0x18})
RESPONSE_MAGICS: Final = frozenset({0x81, 0x18, 0x83})
# The opcode space a magic addresses: the alternative encodings share their classic twin's table.
MAGIC_CLASS: Final[dict[int, int]] = {0x80: 0x80, 0x08: 0x80, 0x81: 0x81, 0x18: 0x81, 0x82: 0x82, 0x83: 0x83}

# --- 3 and 4: client opcodes --------------------------------------------------------------------------
OPCODE_ROWS: Final[list[Row]] = [
    (0x00, "GET", "get a document"),
    (0x01, "SET", "store a document"),
    (0x02, "ADD", "add a document"),
    (0x03, "REPLACE", "replace a document"),
    (0x04, "DELETE", "delete a document"),
    (0x0a, "NOOP", "no operation"),
    (0x0b, "VERSION", "server version"),
    (0x10, "STAT", "statistics group"),
    (0x1f, "HELLO", "negotiate features"),
    (0x20, "SASL_LIST_MECHS", "list SASL mechanisms"),
    (0x21, "SASL_AUTH", "start SASL authentication"),
    (0x22, "SASL_STEP", "continue SASL authentication"),
    (0x3d, "SET_VBUCKET", "set a vbucket's state"),
    (0x48, "GET_ALL_VB_SEQNOS", "high seqno of every vbucket"),
    (0x50, "DCP_OPEN", "open a DCP connection"),
    (0x51, "DCP_ADD_STREAM", "tell a consumer to add a stream"),
    (0x52, "DCP_CLOSE_STREAM", "close a stream"),
    (0x53, "DCP_STREAM_REQ", "request a stream"),
    (0x54, "DCP_GET_FAILOVER_LOG", "failover log of a vbucket"),
    (0x55, "DCP_STREAM_END", "a stream ended"),
    (0x56, "DCP_SNAPSHOT_MARKER", "start of a snapshot"),
    (0x57, "DCP_MUTATION", "a document was stored"),
    (0x58, "DCP_DELETION", "a document was deleted"),
    (0x59, "DCP_EXPIRATION", "a document expired"),
    (0x5a, "DCP_FLUSH", "obsolete: flush"),
    (0x5b, "DCP_SET_VBUCKET_STATE", "vbucket state change (takeover)"),
    (0x5c, "DCP_NOOP", "producer keep-alive"),
    (0x5d, "DCP_BUFFER_ACKNOWLEDGEMENT", "flow-control acknowledgement"),
    (0x5e, "DCP_CONTROL", "connection setting"),
    (0x5f, "DCP_SYSTEM_EVENT", "collection or scope event"),
    (0x60, "DCP_PREPARE", "durable write prepared"),
    (0x61, "DCP_SEQNO_ACKNOWLEDGED", "consumer acknowledges a prepare"),
    (0x62, "DCP_COMMIT", "durable write committed"),
    (0x63, "DCP_ABORT", "durable write aborted"),
    (0x64, "DCP_SEQNO_ADVANCED", "the stream advanced past unseen items"),
    (0x65, "DCP_OSO_SNAPSHOT", "out-of-sequence-order snapshot bracket"),
    (0x66, "DCP_CACHE_TRANSFER", "hash-table contents"),
    (0x67, "DCP_CACHE_TRANSFER_END", "end of the cache transfer"),
    (0x89, "SELECT_BUCKET", "select a bucket"),
    (0x91, "OBSERVE_SEQNO", "persistence and seqno state of a vbucket"),
    (0x96, "GET_FAILOVER_LOG", "failover log (plain connection)"),
    (0xb5, "GET_CLUSTER_CONFIG", "bucket configuration and vbucket map"),
    (0xfe, "GET_ERROR_MAP", "error map"),
]
OPCODES = Vocabulary(OPCODE_ROWS)
Opcode = _enum("Opcode", OPCODE_ROWS)

SERVER_OPCODE_ROWS: Final[list[Row]] = [
    (0x01, "ClustermapChangeNotification", "the cluster map changed"),
    (0x02, "Authenticate", "authenticate a user for the server"),
    (0x03, "ActiveExternalUsers", "list of active external users"),
    (0x04, "GetAuthorization", "authorization request"),
]
SERVER_OPCODES = Vocabulary(SERVER_OPCODE_ROWS)

# --- 5 status codes ---------------------------------------------------------------------------------
STATUS_ROWS: Final[list[Row]] = [
    (0x00, "Success", "success"),
    (0x01, "KeyEnoent", "not found"),
    (0x02, "KeyEexists", "exists (stream already open for this vbucket and stream id)"),
    (0x03, "E2big", "too big"),
    (0x04, "Einval", "invalid arguments"),
    (0x05, "NotStored", "not stored"),
    (0x06, "DeltaBadval", "bad delta"),
    (0x07, "NotMyVbucket", "vbucket not on this node or wrong state"),
    (0x08, "NoBucket", "no bucket selected"),
    (0x09, "Locked", "locked"),
    (0x0a, "DcpStreamNotFound", "stream not found (v7 consumer reply)"),
    (0x0b, "OpaqueNoMatch", "opaque does not match (v7 consumer reply)"),
    (0x0c, "EWouldThrottle", "would throttle"),
    (0x0d, "EConfigOnly", "config-only bucket"),
    (0x0e, "NotLocked", "not locked"),
    (0x0f, "CasValueInvalid", "invalid CAS"),
    (0x1f, "AuthStale", "authentication stale: re-authenticate"),
    (0x20, "AuthError", "authentication failed"),
    (0x21, "AuthContinue", "authentication continues"),
    (0x22, "Erange", "seqno range invalid"),
    (0x23, "Rollback", "roll back before streaming"),
    (0x24, "Eaccess", "no access"),
    (0x25, "NotInitialized", "not initialized"),
    (0x26, "EncryptionKeyNotAvailable", "encryption key not available"),
    (0x27, "ChecksumMismatch", "checksum mismatch"),
    (0x28, "ExpiryOverflow", "expiry overflow"),
    (0x29, "LockExpiryOverflow", "lock expiry overflow"),
    (0x30, "RateLimitedNetworkIngress", "rate limited"),
    (0x31, "RateLimitedNetworkEgress", "rate limited"),
    (0x32, "RateLimitedMaxConnections", "rate limited"),
    (0x33, "RateLimitedMaxCommands", "rate limited"),
    (0x35, "BucketSizeLimitExceeded", "bucket limit"),
    (0x36, "BucketResidentRatioTooLow", "bucket limit"),
    (0x37, "BucketDataSizeTooBig", "bucket limit"),
    (0x38, "BucketDiskSpaceTooLow", "bucket limit"),
    (0x50, "BucketPaused", "bucket paused"),
    (0x51, "Cancelled", "cancelled"),
    (0x80, "UnknownFrameInfo", "unknown frame info"),
    (0x81, "UnknownCommand", "unknown command"),
    (0x82, "Enomem", "out of memory"),
    (0x83, "NotSupported", "not supported"),
    (0x84, "Einternal", "internal error"),
    (0x85, "Ebusy", "busy"),
    (0x86, "Etmpfail", "temporary failure"),
    (0x87, "XattrEinval", "invalid xattr"),
    (0x88, "UnknownCollection", "unknown collection"),
    (0x8a, "CannotApplyCollectionsManifest", "cannot apply manifest"),
    (0x8c, "UnknownScope", "unknown scope"),
    (0x8d, "DcpStreamIdInvalid", "stream id missing, unexpected or zero"),
    (0xa0, "DurabilityInvalidLevel", "durability level invalid"),
    (0xa1, "DurabilityImpossible", "durability impossible"),
    (0xa2, "SyncWriteInProgress", "sync write in progress"),
    (0xa3, "SyncWriteAmbiguous", "sync write ambiguous"),
    (0xa4, "SyncWriteReCommitInProgress", "sync write re-commit in progress"),
    (0xa5, "RangeScanCancelled", "range scan cancelled"),
    (0xa6, "RangeScanMore", "range scan: more"),
    (0xa7, "RangeScanComplete", "range scan complete"),
    (0xa8, "VbUuidNotEqual", "vbucket uuid differs"),
]
STATUSES = Vocabulary(STATUS_ROWS)
Status = _enum("Status", STATUS_ROWS)

# --- 6.1 datatype -------------------------------------------------------------------------------------
DATATYPE_ROWS: Final[list[Row]] = [
    (0x01, "JSON", "value is JSON"),
    (0x02, "SNAPPY", "value is Snappy-compressed"),
    (0x04, "XATTR", "value starts with an xattr blob"),
]
DATATYPES = Vocabulary(DATATYPE_ROWS)
Datatype = _flag("Datatype", DATATYPE_ROWS)
DATATYPE_JSON: Final = 0x01
DATATYPE_SNAPPY: Final = 0x02
DATATYPE_XATTR: Final = 0x04

# --- 4.1 HELLO features -------------------------------------------------------------------------------
HELLO_FEATURE_ROWS: Final[list[Row]] = [
    (0x01, "Invalid", "retired (was DATATYPE)"),
    (0x02, "TLS", "never implemented"),
    (0x03, "TcpNoDelay", "informational"),
    (0x04, "MutationSeqno", "mutation responses carry vbucket uuid and seqno"),
    (0x05, "TcpDelay", "unsupported"),
    (0x06, "Xattr", "xattrs and the XATTR datatype"),
    (0x07, "Xerror", "extended errors instead of disconnects"),
    (0x08, "SelectBucket", "informational"),
    (0x09, "Invalid2", "old collections prototype"),
    (0x0a, "Snappy", "client accepts snappy values"),
    (0x0b, "JSON", "JSON datatype bit"),
    (0x0c, "Duplex", "server may send 0x82 requests"),
    (0x0d, "ClustermapChangeNotification", "needs Duplex"),
    (0x0e, "UnorderedExecution", "must not be set on a DCP connection"),
    (0x0f, "Tracing", "server duration frame info"),
    (0x10, "AltRequestSupport", "informational"),
    (0x11, "SyncReplication", "informational"),
    (0x12, "Collections", "LEB128 keys, stream-request JSON, system events, seqno advanced"),
    (0x13, "SnappyEverywhere", "snappy in every response"),
    (0x14, "PreserveTtl", "informational"),
    (0x15, "VAttr", "needs Xattr"),
    (0x16, "Invalid3", "old PiTR"),
    (0x17, "SubdocCreateAsDeleted", ""),
    (0x18, "SubdocDocumentMacroSupport", "needs Xattr"),
    (0x19, "SubdocReplaceBodyWithXattr", ""),
    (0x1a, "ReportUnitUsage", "read/write unit frame infos"),
    (0x1b, "NonBlockingThrottlingMode", ""),
    (0x1c, "SubdocReplicaRead", ""),
    (0x1d, "GetClusterConfigWithKnownVersion", ""),
    (0x1e, "DedupeNotMyVbucketClustermap", ""),
    (0x1f, "ClustermapChangeNotificationBrief", "needs Duplex"),
    (0x20, "SubdocAllowsAccessOnMultipleXattrKeys", ""),
    (0x21, "SubdocBinaryXattr", ""),
    (0x22, "RangeScanIncludeXattr", "needs Xattr"),
    (0x23, "SubdocAllowReplicaReadOnDeletedDocs", ""),
    (0x24, "GetRandomKeyIncludeXattr", ""),
    (0x25, "MutateWithMeta", ""),
    (0x26, "DcpSkipDeletesInInitialBackfill", "server supports DCP_OPEN flag 0x200"),
]
HELLO_FEATURES = Vocabulary(HELLO_FEATURE_ROWS)
HelloFeature = _enum("HelloFeature", HELLO_FEATURE_ROWS)

# --- 7.1 DCP_OPEN flags -------------------------------------------------------------------------------
DCP_OPEN_FLAG_ROWS: Final[list[Row]] = [
    (0x001, "Producer", "open a producer (the server sends data)"),
    (0x002, "Invalid", "was Notifier; rejected since 7.0"),
    (0x004, "IncludeXattrs", "send xattrs"),
    (0x008, "NoValue", "strip values"),
    (0x010, "Unused", "rejected"),
    (0x020, "IncludeDeleteTimes", "deletions use v2 extras"),
    (0x040, "NoValueWithUnderlyingDatatype", "strip values, keep the stored datatype"),
    (0x080, "PiTR", "unsupported"),
    (0x100, "IncludeDeletedUserXattrs", "user xattrs in deletions"),
    (0x200, "SkipDeletesInInitialBackfill", "no tombstones in the initial backfill"),
]
DCP_OPEN_FLAGS = Vocabulary(DCP_OPEN_FLAG_ROWS)
DcpOpenFlag = _flag("DcpOpenFlag", DCP_OPEN_FLAG_ROWS)

# --- 3.4.2 stream-request / add-stream flags ----------------------------------------------------------
STREAM_FLAG_ROWS: Final[list[Row]] = [
    (0x001, "TakeOver", "vbucket takeover"),
    (0x002, "DiskOnly", "end at the persisted seqno"),
    (0x004, "ToLatest", "end at the current high seqno"),
    (0x008, "NoValue", "obsolete since 5.0, rejected"),
    (0x010, "ActiveVbOnly", "only from an active vbucket"),
    (0x020, "StrictVbUuid", "check the uuid even from seqno 0"),
    (0x040, "FromLatest", "start at the current high seqno"),
    (0x080, "IgnorePurgedTombstones", "skip the purge-seqno rollback rule"),
    (0x100, "CacheTransfer", "transfer hash-table contents first"),
]
STREAM_FLAGS = Vocabulary(STREAM_FLAG_ROWS)
StreamRequestFlag = _flag("StreamRequestFlag", STREAM_FLAG_ROWS)

# --- 3.8 snapshot marker flags ------------------------------------------------------------------------
SNAPSHOT_FLAG_ROWS: Final[list[Row]] = [
    (0x01, "Memory", "from in-memory checkpoints"),
    (0x02, "Disk", "from a disk backfill"),
    (0x04, "Checkpoint", "checkpoint boundary"),
    (0x08, "Acknowledge", "receiver must acknowledge"),
    (0x10, "History", "not deduplicated (change streams)"),
    (0x20, "MayContainDuplicates", "the same key may appear twice"),
]
SNAPSHOT_FLAGS = Vocabulary(SNAPSHOT_FLAG_ROWS)
SnapshotMarkerFlag = _flag("SnapshotMarkerFlag", SNAPSHOT_FLAG_ROWS)

# --- 3.7 stream end status ----------------------------------------------------------------------------
STREAM_END_ROWS: Final[list[Row]] = [
    (0, "Ok", "reached the end seqno"),
    (1, "Closed", "closed by the client"),
    (2, "StateChanged", "vbucket state changed"),
    (3, "Disconnected", "connection going away"),
    (4, "Slow", "client too slow: cursor dropped"),
    (5, "BackfillFail", "disk backfill failed"),
    (6, "Rollback", "defined but never sent (becomes StateChanged)"),
    (7, "FilterEmpty", "all filtered collections dropped"),
    (8, "LostPrivileges", "access revoked"),
]
STREAM_END_STATUSES = Vocabulary(STREAM_END_ROWS)
StreamEndStatus = _enum("StreamEndStatus", STREAM_END_ROWS)

# --- 3.16 system events -------------------------------------------------------------------------------
SYSTEM_EVENT_ROWS: Final[list[Row]] = [
    (0, "BeginCollection", "collection created (or flushed)"),
    (1, "EndCollection", "collection dropped"),
    (2, "Unused", "reserved"),
    (3, "CreateScope", "scope created"),
    (4, "DropScope", "scope dropped"),
    (5, "ModifyCollection", "collection modified"),
]
SYSTEM_EVENTS = Vocabulary(SYSTEM_EVENT_ROWS)
SystemEventId = _enum("SystemEventId", SYSTEM_EVENT_ROWS)

# --- 3.12 vbucket states ------------------------------------------------------------------------------
VBUCKET_STATE_ROWS: Final[list[Row]] = [
    (1, "active", "active"),
    (2, "replica", "replica"),
    (3, "pending", "pending"),
    (4, "dead", "dead"),
]
VBUCKET_STATES = Vocabulary(VBUCKET_STATE_ROWS)

DURABILITY_ROWS: Final[list[Row]] = [
    (1, "Majority", "majority"),
    (2, "MajorityAndPersistOnMaster", "majority and persisted on the active"),
    (3, "PersistToMajority", "persisted on a majority"),
]
DURABILITY_LEVELS = Vocabulary(DURABILITY_ROWS)

OSO_FLAG_ROWS: Final[list[Row]] = [(0x01, "Start", "OSO snapshot starts"), (0x02, "End", "OSO snapshot ends")]
OSO_FLAGS = Vocabulary(OSO_FLAG_ROWS)

# --- 2.2/2.3 frame ids --------------------------------------------------------------------------------
REQUEST_FRAME_ROWS: Final[list[Row]] = [
    (0, "Barrier", "no parallel execution"),
    (1, "DurabilityRequirement", "durability level and timeout"),
    (2, "DcpStreamId", "DCP stream id"),
    (3, "OpenTracingContext", "retired prototype"),
    (4, "Impersonate", "impersonate a user"),
    (5, "PreserveTtl", "keep the expiry"),
    (6, "ImpersonateExtraPrivilege", "extra privilege"),
    (7, "ImpersonateTokenAuthId", "token id"),
]
REQUEST_FRAMES = Vocabulary(REQUEST_FRAME_ROWS)
RESPONSE_FRAME_ROWS: Final[list[Row]] = [
    (0, "ServerRecvSendDuration", "server duration"),
    (1, "ReadUnits", "read units used"),
    (2, "WriteUnits", "write units used"),
    (3, "ThrottleDuration", "throttle duration"),
]
RESPONSE_FRAMES = Vocabulary(RESPONSE_FRAME_ROWS)

# UPR draft (seed 001): byte 5 is a type that refines the opcode.
UPR_OPCODE_ROWS: Final[list[Row]] = [
    (0x01, "UPR_REQUEST", "consumer request"),
    (0x02, "UPR_RESPONSE", "producer response"),
    (0x03, "UPR_STREAM_BEGIN", "stream begins"),
    (0x04, "UPR_STREAM_MESSAGE", "message in a stream"),
    (0x05, "UPR_STREAM_CLOSE", "stream ended"),
]
UPR_OPCODES = Vocabulary(UPR_OPCODE_ROWS)

DCP_OPCODE_RANGE: Final = range(0x50, 0x68)

# vbuckets in a Couchbase bucket: 1024 (64 on macOS, 128 for some Magma buckets), never more; the header's
# vbucket field is 16 bits, but no server maps more, so a --vbucket(s) range and a cluster map stop here.
MAX_VBUCKETS: Final = 1024
