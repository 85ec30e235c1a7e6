"""Protocol vocabularies: magics, opcodes, statuses, flags and their kv_engine names.

Each vocabulary is declared once (reference sections 1, 3, 4, 5, 6, 7): as an ``IntEnum``/``IntFlag`` class
whose UPPER_SNAKE members carry the kv_engine name and meaning, or, for tables nothing names in code, as
``(code, kv_engine name, meaning)`` rows. The rows and the name lookups of the classes are derived from them.
"""

from __future__ import annotations

import re
from enum import IntEnum, IntFlag
from typing import Any, Final, Self, TypeVar

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


_M = TypeVar("_M", bound=int)


class _Code(IntEnum):
    """A protocol code declared with its kv_engine name and meaning: ``NAME = code, "kvName", "meaning"``.

    The class is the table: members are typed for mypy, and the name lookups (:class:`Vocabulary`) and
    :func:`rows` are derived from it.
    """

    _value_: int
    kv_name: str
    meaning: str

    def __new__(cls, code: int, kv_name: str = "", meaning: str = "") -> Self:
        return _declared(cls, code, kv_name, meaning)


class _Flag(IntFlag):
    """A flag bit declared as :class:`_Code` is; combinations are ordinary ``IntFlag`` values."""

    _value_: int
    kv_name: str
    meaning: str

    def __new__(cls, code: int, kv_name: str = "", meaning: str = "") -> Self:
        return _declared(cls, code, kv_name, meaning)


def _declared(cls: type[_M], code: int, kv_name: str, meaning: str) -> _M:
    """One member of a declared code or flag class, carrying its kv_engine name and meaning."""
    member = int.__new__(cls, code)
    described: Any = member  # the attributes the enum classes declare
    described._value_ = code
    described.kv_name = kv_name
    described.meaning = meaning
    return member


def rows(table: type[_Code] | type[_Flag]) -> list[Row]:
    """A declared table as ``(code, kv name, meaning)`` rows, in declaration order."""
    return [(int(member), member.kv_name, member.meaning) for member in table]


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
class Magic(_Code):
    CLIENT_REQUEST = 0x80, "ClientRequest", "request (on DCP also every message the producer pushes)"
    ALT_CLIENT_REQUEST = 0x08, "AltClientRequest", "request with flexible framing extras"
    CLIENT_RESPONSE = 0x81, "ClientResponse", "response"
    ALT_CLIENT_RESPONSE = 0x18, "AltClientResponse", "response with flexible framing extras"
    SERVER_REQUEST = 0x82, "ServerRequest", "server-initiated request (HELLO Duplex)"
    SERVER_RESPONSE = 0x83, "ServerResponse", "client's response to a server-initiated request"


MAGIC_ROWS: Final = rows(Magic)
MAGICS = Vocabulary(MAGIC_ROWS)
ALT_MAGICS: Final = frozenset({Magic.ALT_CLIENT_REQUEST, Magic.ALT_CLIENT_RESPONSE})
RESPONSE_MAGICS: Final = frozenset({Magic.CLIENT_RESPONSE, Magic.ALT_CLIENT_RESPONSE, Magic.SERVER_RESPONSE})
# Magics whose opcodes are the server's own table (HELLO Duplex), not the client opcodes.
SERVER_MAGICS: Final = frozenset({Magic.SERVER_REQUEST, Magic.SERVER_RESPONSE})
# The opcode space a magic addresses: the alternative encodings share their classic twin's table.
MAGIC_CLASS: Final[dict[int, int]] = {
    Magic.CLIENT_REQUEST: Magic.CLIENT_REQUEST, Magic.ALT_CLIENT_REQUEST: Magic.CLIENT_REQUEST,
    Magic.CLIENT_RESPONSE: Magic.CLIENT_RESPONSE, Magic.ALT_CLIENT_RESPONSE: Magic.CLIENT_RESPONSE,
    Magic.SERVER_REQUEST: Magic.SERVER_REQUEST, Magic.SERVER_RESPONSE: Magic.SERVER_RESPONSE,
}

# --- 3 and 4: client opcodes --------------------------------------------------------------------------
class Opcode(_Code):
    GET = 0x00, "GET", "get a document"
    SET = 0x01, "SET", "store a document"
    ADD = 0x02, "ADD", "add a document"
    REPLACE = 0x03, "REPLACE", "replace a document"
    DELETE = 0x04, "DELETE", "delete a document"
    INCREMENT = 0x05, "INCREMENT", "add to a counter"
    DECREMENT = 0x06, "DECREMENT", "subtract from a counter"
    QUIT = 0x07, "QUIT", "close the connection"
    FLUSH = 0x08, "FLUSH", "retired: flush the bucket"
    GETQ = 0x09, "GETQ", "get a document, quiet on a miss"
    NOOP = 0x0a, "NOOP", "no operation"
    VERSION = 0x0b, "VERSION", "server version"
    GETK = 0x0c, "GETK", "get a document and its key"
    GETKQ = 0x0d, "GETKQ", "get a document and its key, quiet on a miss"
    APPEND = 0x0e, "APPEND", "append to a document"
    PREPEND = 0x0f, "PREPEND", "prepend to a document"
    STAT = 0x10, "STAT", "statistics group"
    SETQ = 0x11, "SETQ", "store a document, quiet"
    ADDQ = 0x12, "ADDQ", "add a document, quiet"
    REPLACEQ = 0x13, "REPLACEQ", "replace a document, quiet"
    DELETEQ = 0x14, "DELETEQ", "delete a document, quiet"
    INCREMENTQ = 0x15, "INCREMENTQ", "add to a counter, quiet"
    DECREMENTQ = 0x16, "DECREMENTQ", "subtract from a counter, quiet"
    QUITQ = 0x17, "QUITQ", "close the connection, quiet"
    FLUSHQ = 0x18, "FLUSHQ", "retired: flush the bucket, quiet"
    APPENDQ = 0x19, "APPENDQ", "append to a document, quiet"
    PREPENDQ = 0x1a, "PREPENDQ", "prepend to a document, quiet"
    VERBOSITY = 0x1b, "VERBOSITY", "set the log level"
    TOUCH = 0x1c, "TOUCH", "set a document's expiry"
    GAT = 0x1d, "GAT", "get a document and set its expiry"
    GATQ = 0x1e, "GATQ", "get a document and set its expiry, quiet"
    HELLO = 0x1f, "HELLO", "negotiate features"
    SASL_LIST_MECHS = 0x20, "SASL_LIST_MECHS", "list SASL mechanisms"
    SASL_AUTH = 0x21, "SASL_AUTH", "start SASL authentication"
    SASL_STEP = 0x22, "SASL_STEP", "continue SASL authentication"
    IOCTL_GET = 0x23, "IOCTL_GET", "read a server control"
    IOCTL_SET = 0x24, "IOCTL_SET", "set a server control"
    CONFIG_VALIDATE = 0x25, "CONFIG_VALIDATE", "validate a configuration"
    CONFIG_RELOAD = 0x26, "CONFIG_RELOAD", "reload the configuration"
    AUDIT_PUT = 0x27, "AUDIT_PUT", "write an audit event"
    AUDIT_CONFIG_RELOAD = 0x28, "AUDIT_CONFIG_RELOAD", "reload the audit configuration"
    SHUTDOWN = 0x29, "SHUTDOWN", "shut the server down"
    SET_BUCKET_THROTTLE_PROPERTIES = 0x2a, "SET_BUCKET_THROTTLE_PROPERTIES", "bucket throttle limits"
    SET_BUCKET_DATA_LIMIT_EXCEEDED = 0x2b, "SET_BUCKET_DATA_LIMIT_EXCEEDED", "toggle the bucket data limit"
    SET_NODE_THROTTLE_PROPERTIES = 0x2c, "SET_NODE_THROTTLE_PROPERTIES", "node throttle limits"
    SET_ACTIVE_ENCRYPTION_KEYS = 0x2d, "SET_ACTIVE_ENCRYPTION_KEYS", "active encryption keys"
    RGET = 0x30, "RGET", "retired: range get"
    RSET = 0x31, "RSET", "retired: range set"
    RSETQ = 0x32, "RSETQ", "retired: range set, quiet"
    RAPPEND = 0x33, "RAPPEND", "retired: range append"
    RAPPENDQ = 0x34, "RAPPENDQ", "retired: range append, quiet"
    RPREPEND = 0x35, "RPREPEND", "retired: range prepend"
    RPREPENDQ = 0x36, "RPREPENDQ", "retired: range prepend, quiet"
    RDELETE = 0x37, "RDELETE", "retired: range delete"
    RDELETEQ = 0x38, "RDELETEQ", "retired: range delete, quiet"
    RINCR = 0x39, "RINCR", "retired: range increment"
    RINCRQ = 0x3a, "RINCRQ", "retired: range increment, quiet"
    RDECR = 0x3b, "RDECR", "retired: range decrement"
    RDECRQ = 0x3c, "RDECRQ", "retired: range decrement, quiet"
    SET_VBUCKET = 0x3d, "SET_VBUCKET", "set a vbucket's state"
    GET_VBUCKET = 0x3e, "GET_VBUCKET", "a vbucket's state"
    DEL_VBUCKET = 0x3f, "DEL_VBUCKET", "delete a vbucket"
    TAP_CONNECT = 0x40, "TAP_CONNECT", "retired: TAP"
    TAP_MUTATION = 0x41, "TAP_MUTATION", "retired: TAP"
    TAP_DELETE = 0x42, "TAP_DELETE", "retired: TAP"
    TAP_FLUSH = 0x43, "TAP_FLUSH", "retired: TAP"
    TAP_OPAQUE = 0x44, "TAP_OPAQUE", "retired: TAP"
    TAP_VBUCKET_SET = 0x45, "TAP_VBUCKET_SET", "retired: TAP"
    TAP_CHECKPOINT_START = 0x46, "TAP_CHECKPOINT_START", "retired: TAP"
    TAP_CHECKPOINT_END = 0x47, "TAP_CHECKPOINT_END", "retired: TAP"
    GET_ALL_VB_SEQNOS = 0x48, "GET_ALL_VB_SEQNOS", "high seqno of every vbucket"
    GET_EX = 0x49, "GET_EX", "get a document with its xattrs"
    GET_EX_REPLICA = 0x4a, "GET_EX_REPLICA", "get a replica with its xattrs"
    DCP_OPEN = 0x50, "DCP_OPEN", "open a DCP connection"
    DCP_ADD_STREAM = 0x51, "DCP_ADD_STREAM", "tell a consumer to add a stream"
    DCP_CLOSE_STREAM = 0x52, "DCP_CLOSE_STREAM", "close a stream"
    DCP_STREAM_REQ = 0x53, "DCP_STREAM_REQ", "request a stream"
    DCP_GET_FAILOVER_LOG = 0x54, "DCP_GET_FAILOVER_LOG", "failover log of a vbucket"
    DCP_STREAM_END = 0x55, "DCP_STREAM_END", "a stream ended"
    DCP_SNAPSHOT_MARKER = 0x56, "DCP_SNAPSHOT_MARKER", "start of a snapshot"
    DCP_MUTATION = 0x57, "DCP_MUTATION", "a document was stored"
    DCP_DELETION = 0x58, "DCP_DELETION", "a document was deleted"
    DCP_EXPIRATION = 0x59, "DCP_EXPIRATION", "a document expired"
    DCP_FLUSH = 0x5a, "DCP_FLUSH", "obsolete: flush"
    DCP_SET_VBUCKET_STATE = 0x5b, "DCP_SET_VBUCKET_STATE", "vbucket state change (takeover)"
    DCP_NOOP = 0x5c, "DCP_NOOP", "producer keep-alive"
    DCP_BUFFER_ACKNOWLEDGEMENT = 0x5d, "DCP_BUFFER_ACKNOWLEDGEMENT", "flow-control acknowledgement"
    DCP_CONTROL = 0x5e, "DCP_CONTROL", "connection setting"
    DCP_SYSTEM_EVENT = 0x5f, "DCP_SYSTEM_EVENT", "collection or scope event"
    DCP_PREPARE = 0x60, "DCP_PREPARE", "durable write prepared"
    DCP_SEQNO_ACKNOWLEDGED = 0x61, "DCP_SEQNO_ACKNOWLEDGED", "consumer acknowledges a prepare"
    DCP_COMMIT = 0x62, "DCP_COMMIT", "durable write committed"
    DCP_ABORT = 0x63, "DCP_ABORT", "durable write aborted"
    DCP_SEQNO_ADVANCED = 0x64, "DCP_SEQNO_ADVANCED", "the stream advanced past unseen items"
    DCP_OSO_SNAPSHOT = 0x65, "DCP_OSO_SNAPSHOT", "out-of-sequence-order snapshot bracket"
    DCP_CACHE_TRANSFER = 0x66, "DCP_CACHE_TRANSFER", "hash-table contents"
    DCP_CACHE_TRANSFER_END = 0x67, "DCP_CACHE_TRANSFER_END", "end of the cache transfer"
    STOP_PERSISTENCE = 0x80, "STOP_PERSISTENCE", "stop persistence"
    START_PERSISTENCE = 0x81, "START_PERSISTENCE", "start persistence"
    SET_PARAM = 0x82, "SET_PARAM", "set an engine parameter"
    GET_REPLICA = 0x83, "GET_REPLICA", "get a document from a replica"
    CREATE_BUCKET = 0x85, "CREATE_BUCKET", "create a bucket"
    DELETE_BUCKET = 0x86, "DELETE_BUCKET", "delete a bucket"
    LIST_BUCKETS = 0x87, "LIST_BUCKETS", "list buckets"
    SELECT_BUCKET = 0x89, "SELECT_BUCKET", "select a bucket"
    PAUSE_BUCKET = 0x8a, "PAUSE_BUCKET", "pause a bucket"
    RESUME_BUCKET = 0x8b, "RESUME_BUCKET", "resume a bucket"
    OBSERVE_SEQNO = 0x91, "OBSERVE_SEQNO", "persistence and seqno state of a vbucket"
    OBSERVE = 0x92, "OBSERVE", "persistence and replication state of keys"
    EVICT_KEY = 0x93, "EVICT_KEY", "evict a document from memory"
    GET_LOCKED = 0x94, "GET_LOCKED", "get and lock a document"
    UNLOCK_KEY = 0x95, "UNLOCK_KEY", "unlock a document"
    GET_FAILOVER_LOG = 0x96, "GET_FAILOVER_LOG", "failover log (plain connection)"
    LAST_CLOSED_CHECKPOINT = 0x97, "LAST_CLOSED_CHECKPOINT", "retired: last closed checkpoint"
    DEREGISTER_TAP_CLIENT = 0x9e, "DEREGISTER_TAP_CLIENT", "retired: TAP"
    RESET_REPLICATION_CHAIN = 0x9f, "RESET_REPLICATION_CHAIN", "retired: reset replication"
    GET_META = 0xa0, "GET_META", "a document's metadata"
    GETQ_META = 0xa1, "GETQ_META", "a document's metadata, quiet"
    SET_WITH_META = 0xa2, "SET_WITH_META", "store with given metadata (XDCR)"
    SETQ_WITH_META = 0xa3, "SETQ_WITH_META", "store with metadata, quiet"
    ADD_WITH_META = 0xa4, "ADD_WITH_META", "add with given metadata (XDCR)"
    ADDQ_WITH_META = 0xa5, "ADDQ_WITH_META", "add with metadata, quiet"
    SNAPSHOT_VB_STATES = 0xa6, "SNAPSHOT_VB_STATES", "retired: snapshot vbucket states"
    VBUCKET_BATCH_COUNT = 0xa7, "VBUCKET_BATCH_COUNT", "retired: batch count"
    DEL_WITH_META = 0xa8, "DEL_WITH_META", "delete with given metadata (XDCR)"
    DELQ_WITH_META = 0xa9, "DELQ_WITH_META", "delete with metadata, quiet"
    CREATE_CHECKPOINT = 0xaa, "CREATE_CHECKPOINT", "retired: create a checkpoint"
    NOTIFY_VBUCKET_UPDATE = 0xac, "NOTIFY_VBUCKET_UPDATE", "retired: vbucket update"
    ENABLE_TRAFFIC = 0xad, "ENABLE_TRAFFIC", "enable data traffic"
    DISABLE_TRAFFIC = 0xae, "DISABLE_TRAFFIC", "disable data traffic"
    IFCONFIG = 0xaf, "IFCONFIG", "interface control"
    CHANGE_VB_FILTER = 0xb0, "CHANGE_VB_FILTER", "retired: change a vbucket filter"
    CHECKPOINT_PERSISTENCE = 0xb1, "CHECKPOINT_PERSISTENCE", "retired: wait for checkpoint persistence"
    RETURN_META = 0xb2, "RETURN_META", "store and return metadata"
    COMPACT_DB = 0xb3, "COMPACT_DB", "compact a vbucket"
    SET_CLUSTER_CONFIG = 0xb4, "SET_CLUSTER_CONFIG", "set the cluster configuration"
    GET_CLUSTER_CONFIG = 0xb5, "GET_CLUSTER_CONFIG", "bucket configuration and vbucket map"
    GET_RANDOM_KEY = 0xb6, "GET_RANDOM_KEY", "a random document"
    SEQNO_PERSISTENCE = 0xb7, "SEQNO_PERSISTENCE", "wait for a seqno to persist"
    GET_KEYS = 0xb8, "GET_KEYS", "list keys"
    COLLECTIONS_SET_MANIFEST = 0xb9, "COLLECTIONS_SET_MANIFEST", "set the collections manifest"
    COLLECTIONS_GET_MANIFEST = 0xba, "COLLECTIONS_GET_MANIFEST", "the collections manifest"
    COLLECTIONS_GET_ID = 0xbb, "COLLECTIONS_GET_ID", "a collection's id from its path"
    COLLECTIONS_GET_SCOPE_ID = 0xbc, "COLLECTIONS_GET_SCOPE_ID", "a scope's id from its path"
    SET_DRIFT_COUNTER_STATE = 0xc1, "SET_DRIFT_COUNTER_STATE", "retired: drift counter"
    GET_ADJUSTED_TIME = 0xc2, "GET_ADJUSTED_TIME", "retired: adjusted time"
    SUBDOC_GET = 0xc5, "SUBDOC_GET", "subdocument get"
    SUBDOC_EXISTS = 0xc6, "SUBDOC_EXISTS", "subdocument exists"
    SUBDOC_DICT_ADD = 0xc7, "SUBDOC_DICT_ADD", "subdocument dictionary add"
    SUBDOC_DICT_UPSERT = 0xc8, "SUBDOC_DICT_UPSERT", "subdocument dictionary upsert"
    SUBDOC_DELETE = 0xc9, "SUBDOC_DELETE", "subdocument delete"
    SUBDOC_REPLACE = 0xca, "SUBDOC_REPLACE", "subdocument replace"
    SUBDOC_ARRAY_PUSH_LAST = 0xcb, "SUBDOC_ARRAY_PUSH_LAST", "subdocument array push last"
    SUBDOC_ARRAY_PUSH_FIRST = 0xcc, "SUBDOC_ARRAY_PUSH_FIRST", "subdocument array push first"
    SUBDOC_ARRAY_INSERT = 0xcd, "SUBDOC_ARRAY_INSERT", "subdocument array insert"
    SUBDOC_ARRAY_ADD_UNIQUE = 0xce, "SUBDOC_ARRAY_ADD_UNIQUE", "subdocument array add unique"
    SUBDOC_COUNTER = 0xcf, "SUBDOC_COUNTER", "subdocument counter"
    SUBDOC_MULTI_LOOKUP = 0xd0, "SUBDOC_MULTI_LOOKUP", "subdocument multi-path lookup"
    SUBDOC_MULTI_MUTATION = 0xd1, "SUBDOC_MULTI_MUTATION", "subdocument multi-path mutation"
    SUBDOC_GET_COUNT = 0xd2, "SUBDOC_GET_COUNT", "subdocument element count"
    SUBDOC_REPLACE_BODY_WITH_XATTR = 0xd3, "SUBDOC_REPLACE_BODY_WITH_XATTR", "replace the body with an xattr"
    RANGE_SCAN_CREATE = 0xda, "RANGE_SCAN_CREATE", "create a range scan"
    RANGE_SCAN_CONTINUE = 0xdb, "RANGE_SCAN_CONTINUE", "continue a range scan"
    RANGE_SCAN_CANCEL = 0xdc, "RANGE_SCAN_CANCEL", "cancel a range scan"
    SCRUB = 0xf0, "SCRUB", "scrub the data"
    ISASL_REFRESH = 0xf1, "ISASL_REFRESH", "reload the password database"
    SSL_CERTS_REFRESH = 0xf2, "SSL_CERTS_REFRESH", "reload the TLS certificates"
    GET_CMD_TIMER = 0xf3, "GET_CMD_TIMER", "command timings"
    SET_CTRL_TOKEN = 0xf4, "SET_CTRL_TOKEN", "set the session token"
    GET_CTRL_TOKEN = 0xf5, "GET_CTRL_TOKEN", "the session token"
    UPDATE_USER_PERMISSIONS = 0xf6, "UPDATE_USER_PERMISSIONS", "update an external user's permissions"
    RBAC_REFRESH = 0xf7, "RBAC_REFRESH", "reload the RBAC database"
    AUTH_PROVIDER = 0xf8, "AUTH_PROVIDER", "offer to be an authentication provider"
    DROP_PRIVILEGES = 0xfb, "DROP_PRIVILEGES", "drop a privilege"
    ADJUST_TIMEOFDAY = 0xfc, "ADJUST_TIMEOFDAY", "test: adjust the clock"
    EWB_CTL = 0xfd, "EWB_CTL", "test: ewouldblock engine control"
    GET_ERROR_MAP = 0xfe, "GET_ERROR_MAP", "error map"

OPCODE_ROWS: Final = rows(Opcode)
OPCODES = Vocabulary(OPCODE_ROWS)

# The server's own opcodes (magic 0x82 and its answers 0x83; kv_engine include/mcbp/protocol/opcode.h
# ServerOpcode): a table of their own, not client opcodes.
class ServerOpcode(_Code):
    CLUSTERMAP_CHANGE_NOTIFICATION = 0x01, "ClustermapChangeNotification", "the cluster map changed"
    AUTHENTICATE = 0x02, "Authenticate", "authenticate a user for the server"
    ACTIVE_EXTERNAL_USERS = 0x03, "ActiveExternalUsers", "list of active external users"
    GET_AUTHORIZATION = 0x04, "GetAuthorization", "authorization request"


SERVER_OPCODE_ROWS: Final = rows(ServerOpcode)
SERVER_OPCODES = Vocabulary(SERVER_OPCODE_ROWS)

# --- 5 status codes ---------------------------------------------------------------------------------
class Status(_Code):
    SUCCESS = 0x00, "Success", "success"
    KEY_ENOENT = 0x01, "KeyEnoent", "not found"
    KEY_EEXISTS = 0x02, "KeyEexists", "exists (stream already open for this vbucket and stream id)"
    E2BIG = 0x03, "E2big", "too big"
    EINVAL = 0x04, "Einval", "invalid arguments"
    NOT_STORED = 0x05, "NotStored", "not stored"
    DELTA_BADVAL = 0x06, "DeltaBadval", "bad delta"
    NOT_MY_VBUCKET = 0x07, "NotMyVbucket", "vbucket not on this node or wrong state"
    NO_BUCKET = 0x08, "NoBucket", "no bucket selected"
    LOCKED = 0x09, "Locked", "locked"
    DCP_STREAM_NOT_FOUND = 0x0a, "DcpStreamNotFound", "stream not found (v7 consumer reply)"
    OPAQUE_NO_MATCH = 0x0b, "OpaqueNoMatch", "opaque does not match (v7 consumer reply)"
    E_WOULD_THROTTLE = 0x0c, "EWouldThrottle", "would throttle"
    E_CONFIG_ONLY = 0x0d, "EConfigOnly", "config-only bucket"
    NOT_LOCKED = 0x0e, "NotLocked", "not locked"
    CAS_VALUE_INVALID = 0x0f, "CasValueInvalid", "invalid CAS"
    AUTH_STALE = 0x1f, "AuthStale", "authentication stale: re-authenticate"
    AUTH_ERROR = 0x20, "AuthError", "authentication failed"
    AUTH_CONTINUE = 0x21, "AuthContinue", "authentication continues"
    ERANGE = 0x22, "Erange", "seqno range invalid"
    ROLLBACK = 0x23, "Rollback", "roll back before streaming"
    EACCESS = 0x24, "Eaccess", "no access"
    NOT_INITIALIZED = 0x25, "NotInitialized", "not initialized"
    ENCRYPTION_KEY_NOT_AVAILABLE = 0x26, "EncryptionKeyNotAvailable", "encryption key not available"
    CHECKSUM_MISMATCH = 0x27, "ChecksumMismatch", "checksum mismatch"
    EXPIRY_OVERFLOW = 0x28, "ExpiryOverflow", "expiry overflow"
    LOCK_EXPIRY_OVERFLOW = 0x29, "LockExpiryOverflow", "lock expiry overflow"
    RATE_LIMITED_NETWORK_INGRESS = 0x30, "RateLimitedNetworkIngress", "rate limited"
    RATE_LIMITED_NETWORK_EGRESS = 0x31, "RateLimitedNetworkEgress", "rate limited"
    RATE_LIMITED_MAX_CONNECTIONS = 0x32, "RateLimitedMaxConnections", "rate limited"
    RATE_LIMITED_MAX_COMMANDS = 0x33, "RateLimitedMaxCommands", "rate limited"
    BUCKET_SIZE_LIMIT_EXCEEDED = 0x35, "BucketSizeLimitExceeded", "bucket limit"
    BUCKET_RESIDENT_RATIO_TOO_LOW = 0x36, "BucketResidentRatioTooLow", "bucket limit"
    BUCKET_DATA_SIZE_TOO_BIG = 0x37, "BucketDataSizeTooBig", "bucket limit"
    BUCKET_DISK_SPACE_TOO_LOW = 0x38, "BucketDiskSpaceTooLow", "bucket limit"
    BUCKET_PAUSED = 0x50, "BucketPaused", "bucket paused"
    CANCELLED = 0x51, "Cancelled", "cancelled"
    UNKNOWN_FRAME_INFO = 0x80, "UnknownFrameInfo", "unknown frame info"
    UNKNOWN_COMMAND = 0x81, "UnknownCommand", "unknown command"
    ENOMEM = 0x82, "Enomem", "out of memory"
    NOT_SUPPORTED = 0x83, "NotSupported", "not supported"
    EINTERNAL = 0x84, "Einternal", "internal error"
    EBUSY = 0x85, "Ebusy", "busy"
    ETMPFAIL = 0x86, "Etmpfail", "temporary failure"
    XATTR_EINVAL = 0x87, "XattrEinval", "invalid xattr"
    UNKNOWN_COLLECTION = 0x88, "UnknownCollection", "unknown collection"
    CANNOT_APPLY_COLLECTIONS_MANIFEST = 0x8a, "CannotApplyCollectionsManifest", "cannot apply manifest"
    UNKNOWN_SCOPE = 0x8c, "UnknownScope", "unknown scope"
    DCP_STREAM_ID_INVALID = 0x8d, "DcpStreamIdInvalid", "stream id missing, unexpected or zero"
    DURABILITY_INVALID_LEVEL = 0xa0, "DurabilityInvalidLevel", "durability level invalid"
    DURABILITY_IMPOSSIBLE = 0xa1, "DurabilityImpossible", "durability impossible"
    SYNC_WRITE_IN_PROGRESS = 0xa2, "SyncWriteInProgress", "sync write in progress"
    SYNC_WRITE_AMBIGUOUS = 0xa3, "SyncWriteAmbiguous", "sync write ambiguous"
    SYNC_WRITE_RE_COMMIT_IN_PROGRESS = 0xa4, "SyncWriteReCommitInProgress", "sync write re-commit in progress"
    RANGE_SCAN_CANCELLED = 0xa5, "RangeScanCancelled", "range scan cancelled"
    RANGE_SCAN_MORE = 0xa6, "RangeScanMore", "range scan: more"
    RANGE_SCAN_COMPLETE = 0xa7, "RangeScanComplete", "range scan complete"
    VB_UUID_NOT_EQUAL = 0xa8, "VbUuidNotEqual", "vbucket uuid differs"
    SUBDOC_PATH_ENOENT = 0xc0, "SubdocPathEnoent", "subdoc: path not found"
    SUBDOC_PATH_MISMATCH = 0xc1, "SubdocPathMismatch", "subdoc: path does not match the document"
    SUBDOC_PATH_EINVAL = 0xc2, "SubdocPathEinval", "subdoc: invalid path"
    SUBDOC_PATH_E2BIG = 0xc3, "SubdocPathE2big", "subdoc: path too long"
    SUBDOC_DOC_E2DEEP = 0xc4, "SubdocDocE2deep", "subdoc: document too deep"
    SUBDOC_VALUE_CANTINSERT = 0xc5, "SubdocValueCantinsert", "subdoc: value cannot be inserted"
    SUBDOC_DOC_NOT_JSON = 0xc6, "SubdocDocNotJson", "subdoc: document is not JSON"
    SUBDOC_NUM_ERANGE = 0xc7, "SubdocNumErange", "subdoc: number out of range"
    SUBDOC_DELTA_EINVAL = 0xc8, "SubdocDeltaEinval", "subdoc: invalid delta"
    SUBDOC_PATH_EEXISTS = 0xc9, "SubdocPathEexists", "subdoc: path exists"
    SUBDOC_VALUE_ETOODEEP = 0xca, "SubdocValueEtoodeep", "subdoc: value too deep"
    SUBDOC_INVALID_COMBO = 0xcb, "SubdocInvalidCombo", "subdoc: invalid combination of commands"
    SUBDOC_MULTI_PATH_FAILURE = 0xcc, "SubdocMultiPathFailure", "subdoc: some paths failed (see the results)"
    SUBDOC_SUCCESS_DELETED = 0xcd, "SubdocSuccessDeleted", "subdoc: success on a deleted document"
    SUBDOC_XATTR_INVALID_FLAG_COMBO = 0xce, "SubdocXattrInvalidFlagCombo", "subdoc: invalid xattr flag combination"
    SUBDOC_XATTR_INVALID_KEY_COMBO = 0xcf, "SubdocXattrInvalidKeyCombo", "subdoc: invalid xattr key combination"
    SUBDOC_XATTR_UNKNOWN_MACRO = 0xd0, "SubdocXattrUnknownMacro", "subdoc: unknown macro"
    SUBDOC_XATTR_UNKNOWN_VATTR = 0xd1, "SubdocXattrUnknownVattr", "subdoc: unknown virtual xattr"
    SUBDOC_XATTR_CANT_MODIFY_VATTR = 0xd2, "SubdocXattrCantModifyVattr", "subdoc: virtual xattrs are read-only"
    SUBDOC_MULTI_PATH_FAILURE_DELETED = (0xd3, "SubdocMultiPathFailureDeleted",
        "subdoc: some paths failed, on a deleted document")
    SUBDOC_INVALID_XATTR_ORDER = 0xd4, "SubdocInvalidXattrOrder", "subdoc: xattr paths must come first"
    SUBDOC_XATTR_UNKNOWN_VATTR_MACRO = 0xd5, "SubdocXattrUnknownVattrMacro", "subdoc: unknown virtual xattr macro"
    SUBDOC_CAN_ONLY_REVIVE_DELETED_DOCUMENTS = (0xd6, "SubdocCanOnlyReviveDeletedDocuments",
        "subdoc: only a deleted document can be revived")
    SUBDOC_DELETED_DOCUMENT_CANT_HAVE_VALUE = (0xd7, "SubdocDeletedDocumentCantHaveValue",
        "subdoc: a deleted document cannot have a value")
    SUBDOC_FIELD_NOT_BINARY_VALUE = 0xd8, "SubdocFieldNotBinaryValue", "subdoc: field is not a binary value"


STATUS_ROWS: Final = rows(Status)
STATUSES = Vocabulary(STATUS_ROWS)

# --- 6.1 datatype -------------------------------------------------------------------------------------
class Datatype(_Flag):
    JSON = 0x01, "JSON", "value is JSON"
    SNAPPY = 0x02, "SNAPPY", "value is Snappy-compressed"
    XATTR = 0x04, "XATTR", "value starts with an xattr blob"


DATATYPE_ROWS: Final = rows(Datatype)
DATATYPES = Vocabulary(DATATYPE_ROWS)
DATATYPE_JSON: Final = int(Datatype.JSON)  # plain ints: the per-message path masks with them
DATATYPE_SNAPPY: Final = int(Datatype.SNAPPY)
DATATYPE_XATTR: Final = int(Datatype.XATTR)


def kv_datatype_text(datatype: int) -> str:
    """A datatype as kv_engine writes it in an error context (cb::mcbp::datatype::to_string): ``raw``, the
    bits set in its order (``snappy,json,xattr``), or ``invalid`` for a bit above them."""
    if datatype & ~int(Datatype.JSON | Datatype.SNAPPY | Datatype.XATTR):  # (an IntFlag's ~ keeps its own bits)
        return "invalid"
    names = [bit.kv_name.lower() for bit in (Datatype.SNAPPY, Datatype.JSON, Datatype.XATTR) if datatype & bit]
    return ",".join(names) or "raw"


# --- 4.1 HELLO features -------------------------------------------------------------------------------
class HelloFeature(_Code):
    INVALID = 0x01, "Invalid", "retired (was DATATYPE)"
    TLS = 0x02, "TLS", "never implemented"
    TCP_NO_DELAY = 0x03, "TcpNoDelay", "informational"
    MUTATION_SEQNO = 0x04, "MutationSeqno", "mutation responses carry vbucket uuid and seqno"
    TCP_DELAY = 0x05, "TcpDelay", "unsupported"
    XATTR = 0x06, "Xattr", "xattrs and the XATTR datatype"
    XERROR = 0x07, "Xerror", "extended errors instead of disconnects"
    SELECT_BUCKET = 0x08, "SelectBucket", "informational"
    INVALID2 = 0x09, "Invalid2", "old collections prototype"
    SNAPPY = 0x0a, "Snappy", "client accepts snappy values"
    JSON = 0x0b, "JSON", "JSON datatype bit"
    DUPLEX = 0x0c, "Duplex", "server may send 0x82 requests"
    CLUSTERMAP_CHANGE_NOTIFICATION = 0x0d, "ClustermapChangeNotification", "needs Duplex"
    UNORDERED_EXECUTION = 0x0e, "UnorderedExecution", "must not be set on a DCP connection"
    TRACING = 0x0f, "Tracing", "server duration frame info"
    ALT_REQUEST_SUPPORT = 0x10, "AltRequestSupport", "informational"
    SYNC_REPLICATION = 0x11, "SyncReplication", "informational"
    COLLECTIONS = 0x12, "Collections", "LEB128 keys, stream-request JSON, system events, seqno advanced"
    SNAPPY_EVERYWHERE = 0x13, "SnappyEverywhere", "snappy in every response"
    PRESERVE_TTL = 0x14, "PreserveTtl", "informational"
    V_ATTR = 0x15, "VAttr", "needs Xattr"
    INVALID3 = 0x16, "Invalid3", "old PiTR"
    SUBDOC_CREATE_AS_DELETED = 0x17, "SubdocCreateAsDeleted", ""
    SUBDOC_DOCUMENT_MACRO_SUPPORT = 0x18, "SubdocDocumentMacroSupport", "needs Xattr"
    SUBDOC_REPLACE_BODY_WITH_XATTR = 0x19, "SubdocReplaceBodyWithXattr", ""
    REPORT_UNIT_USAGE = 0x1a, "ReportUnitUsage", "read/write unit frame infos"
    NON_BLOCKING_THROTTLING_MODE = 0x1b, "NonBlockingThrottlingMode", ""
    SUBDOC_REPLICA_READ = 0x1c, "SubdocReplicaRead", ""
    GET_CLUSTER_CONFIG_WITH_KNOWN_VERSION = 0x1d, "GetClusterConfigWithKnownVersion", ""
    DEDUPE_NOT_MY_VBUCKET_CLUSTERMAP = 0x1e, "DedupeNotMyVbucketClustermap", ""
    CLUSTERMAP_CHANGE_NOTIFICATION_BRIEF = 0x1f, "ClustermapChangeNotificationBrief", "needs Duplex"
    SUBDOC_ALLOWS_ACCESS_ON_MULTIPLE_XATTR_KEYS = 0x20, "SubdocAllowsAccessOnMultipleXattrKeys", ""
    SUBDOC_BINARY_XATTR = 0x21, "SubdocBinaryXattr", ""
    RANGE_SCAN_INCLUDE_XATTR = 0x22, "RangeScanIncludeXattr", "needs Xattr"
    SUBDOC_ALLOW_REPLICA_READ_ON_DELETED_DOCS = 0x23, "SubdocAllowReplicaReadOnDeletedDocs", ""
    GET_RANDOM_KEY_INCLUDE_XATTR = 0x24, "GetRandomKeyIncludeXattr", ""
    MUTATE_WITH_META = 0x25, "MutateWithMeta", ""
    DCP_SKIP_DELETES_IN_INITIAL_BACKFILL = (0x26, "DcpSkipDeletesInInitialBackfill",
                                            "server supports DCP_OPEN flag 0x200")


HELLO_FEATURE_ROWS: Final = rows(HelloFeature)
HELLO_FEATURES = Vocabulary(HELLO_FEATURE_ROWS)

# --- 7.1 DCP_OPEN flags -------------------------------------------------------------------------------
class DcpOpenFlag(_Flag):
    PRODUCER = 0x001, "Producer", "open a producer (the server sends data)"
    INVALID = 0x002, "Invalid", "was Notifier; rejected since 7.0"
    INCLUDE_XATTRS = 0x004, "IncludeXattrs", "send xattrs"
    NO_VALUE = 0x008, "NoValue", "strip values"
    UNUSED = 0x010, "Unused", "rejected"
    INCLUDE_DELETE_TIMES = 0x020, "IncludeDeleteTimes", "deletions use v2 extras"
    NO_VALUE_WITH_UNDERLYING_DATATYPE = 0x040, "NoValueWithUnderlyingDatatype", "strip values, keep the stored datatype"
    PI_TR = 0x080, "PiTR", "unsupported"
    INCLUDE_DELETED_USER_XATTRS = 0x100, "IncludeDeletedUserXattrs", "user xattrs in deletions"
    SKIP_DELETES_IN_INITIAL_BACKFILL = 0x200, "SkipDeletesInInitialBackfill", "no tombstones in the initial backfill"


DCP_OPEN_FLAG_ROWS: Final = rows(DcpOpenFlag)
DCP_OPEN_FLAGS = Vocabulary(DCP_OPEN_FLAG_ROWS)

# --- 3.4.2 stream-request / add-stream flags ----------------------------------------------------------
class StreamRequestFlag(_Flag):
    TAKE_OVER = 0x001, "TakeOver", "vbucket takeover"
    DISK_ONLY = 0x002, "DiskOnly", "end at the persisted seqno"
    TO_LATEST = 0x004, "ToLatest", "end at the current high seqno"
    NO_VALUE = 0x008, "NoValue", "obsolete since 5.0, rejected"
    ACTIVE_VB_ONLY = 0x010, "ActiveVbOnly", "only from an active vbucket"
    STRICT_VB_UUID = 0x020, "StrictVbUuid", "check the uuid even from seqno 0"
    FROM_LATEST = 0x040, "FromLatest", "start at the current high seqno"
    IGNORE_PURGED_TOMBSTONES = 0x080, "IgnorePurgedTombstones", "skip the purge-seqno rollback rule"
    CACHE_TRANSFER = 0x100, "CacheTransfer", "transfer hash-table contents first"


STREAM_FLAG_ROWS: Final = rows(StreamRequestFlag)
STREAM_FLAGS = Vocabulary(STREAM_FLAG_ROWS)

# The names kv_engine's to_json gives these flags (protocol/mcbp/json_utilities.cc), which its error contexts
# print (format_as, flag2string): TakeOver is "Takeover" there, and the retired Invalid and Unused bits are
# left unnamed, like any undeclared bit.
KV_JSON_FLAG_NAMES: Final[dict[type[_Flag], dict[int, str]]] = {
    DcpOpenFlag: {int(f): f.kv_name for f in DcpOpenFlag if f not in (DcpOpenFlag.INVALID, DcpOpenFlag.UNUSED)},
    StreamRequestFlag: {int(f): f.kv_name for f in StreamRequestFlag} | {int(StreamRequestFlag.TAKE_OVER): "Takeover"},
}


def kv_flag_names(table: type[_Flag], value: int) -> list[str]:
    """The bits of a DCP_OPEN or stream-request flag set as kv_engine's to_json names them, lowest first; a
    bit it does not name as ``unknown:0x..``."""
    names = KV_JSON_FLAG_NAMES[table]
    return [names.get(1 << bit, f"unknown:{1 << bit:#x}") for bit in range(32) if value >> bit & 1]


# --- 3.8 snapshot marker flags ------------------------------------------------------------------------
class SnapshotMarkerFlag(_Flag):
    MEMORY = 0x01, "Memory", "from in-memory checkpoints"
    DISK = 0x02, "Disk", "from a disk backfill"
    CHECKPOINT = 0x04, "Checkpoint", "checkpoint boundary"
    ACKNOWLEDGE = 0x08, "Acknowledge", "receiver must acknowledge"
    HISTORY = 0x10, "History", "not deduplicated (change streams)"
    MAY_CONTAIN_DUPLICATES = 0x20, "MayContainDuplicates", "the same key may appear twice"


SNAPSHOT_FLAG_ROWS: Final = rows(SnapshotMarkerFlag)
SNAPSHOT_FLAGS = Vocabulary(SNAPSHOT_FLAG_ROWS)

# --- 3.7 stream end status ----------------------------------------------------------------------------
class StreamEndStatus(_Code):
    OK = 0, "Ok", "reached the end seqno"
    CLOSED = 1, "Closed", "closed by the client"
    STATE_CHANGED = 2, "StateChanged", "vbucket state changed"
    DISCONNECTED = 3, "Disconnected", "connection going away"
    SLOW = 4, "Slow", "client too slow: cursor dropped"
    BACKFILL_FAIL = 5, "BackfillFail", "disk backfill failed"
    ROLLBACK = 6, "Rollback", "defined but never sent (becomes StateChanged)"
    FILTER_EMPTY = 7, "FilterEmpty", "all filtered collections dropped"
    LOST_PRIVILEGES = 8, "LostPrivileges", "access revoked"


STREAM_END_ROWS: Final = rows(StreamEndStatus)
STREAM_END_STATUSES = Vocabulary(STREAM_END_ROWS)

# --- 3.16 system events -------------------------------------------------------------------------------
class SystemEventId(_Code):
    BEGIN_COLLECTION = 0, "BeginCollection", "collection created (or flushed)"
    END_COLLECTION = 1, "EndCollection", "collection dropped"
    UNUSED = 2, "Unused", "reserved"
    CREATE_SCOPE = 3, "CreateScope", "scope created"
    DROP_SCOPE = 4, "DropScope", "scope dropped"
    MODIFY_COLLECTION = 5, "ModifyCollection", "collection modified"


SYSTEM_EVENT_ROWS: Final = rows(SystemEventId)
SYSTEM_EVENTS = Vocabulary(SYSTEM_EVENT_ROWS)

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

class OsoFlag(_Flag):  # 3.19: between start and end a backfill's items come in key order, not seqno order
    START = 0x01, "Start", "OSO snapshot starts"
    END = 0x02, "End", "OSO snapshot ends"


OSO_FLAG_ROWS: Final = rows(OsoFlag)
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

# vbuckets in a Couchbase bucket: 1024 (64 on macOS, 128 for some Magma buckets), never more; the header's
# vbucket field is 16 bits, but no server maps more, so a --vbucket(s) range and a cluster map stop here.
MAX_VBUCKETS: Final = 1024


# --- subdocument flags (kv_engine protocol_binary.h; declared for dcpctl serve's subdocument commands) -----
class SubdocPathFlag(_Flag):
    MKDIR_P = 0x01, "MkdirP", "create the missing parents of the path"
    XATTR_PATH = 0x04, "XattrPath", "the path is in the extended attributes"
    EXPAND_MACROS = 0x10, "ExpandMacros", "expand ${Mutation.CAS} and the like in the value"


class SubdocDocFlag(_Flag):
    MKDOC = 0x01, "Mkdoc", "create the document if it does not exist"
    ADD = 0x02, "Add", "fail if the document exists"
    ACCESS_DELETED = 0x04, "AccessDeleted", "the command may read or write a deleted document"


class SubdocWholeDoc(_Code):
    GET = 0x00, "Get", "a lookup spec of the whole body"
    SET = 0x01, "Set", "a mutation spec that replaces the whole body"
    DELETE = 0x04, "Delete", "a mutation spec that deletes the document"
