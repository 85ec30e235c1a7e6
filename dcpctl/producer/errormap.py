"""The error map ``dcpctl serve`` sends (GET_ERROR_MAP): kv_engine's own, per status.

Theory of operation. kv_engine ships one file, etc/couchbase/kv/error_maps/error_map_v2.json (couchbase/kv_engine
commit fd1b998b6ce02112807d00bd822daf335b0013ae, revision 9), and derives version 1 from it
(daemon/error_map_manager.cc ``v2to1``): the attributes version 1 did not know are dropped and the revision is
4 above version 2's. The attributes below are that file's, grouped by their list; the names and descriptions
come from the status registry (``protocol.constants``), which holds the same codes. SDKs read the attributes
to decide what to retry, when to fetch a new cluster map and what to hand the application.
"""

from __future__ import annotations

from typing import Any, Final

from dcpctl.protocol.constants import STATUS_ROWS, Status

# error_map_v2.json's "revision"; version 1's is V1_REVISION_BASE above it (error_map_manager.cc)
REVISION: Final = 9
V1_REVISION_BASE: Final = 4
# The newest version there is: a client asking for a later one gets this one, as from kv_engine.
LATEST_VERSION: Final = 2
# The attributes version 1 knows (error_map_manager.cc v2to1); others are dropped from a version 1 map.
V1_ATTRIBUTES: Final = frozenset({
    "item-deleted", "item-locked", "item-only", "invalid-input", "fetch-config", "conn-state-invalidated", "auth",
    "special-handling", "support", "temp", "internal", "retry-now", "retry-later", "subdoc", "dcp", "success"})
_GROUPS: Final[dict[tuple[str, ...], tuple[Status, ...]]] = {
    ("success",): (Status.SUCCESS, Status.RANGE_SCAN_CANCELLED, Status.RANGE_SCAN_MORE, Status.RANGE_SCAN_COMPLETE),
    ("item-only",): (
        Status.KEY_ENOENT, Status.KEY_EEXISTS, Status.NOT_LOCKED, Status.CAS_VALUE_INVALID,
        Status.SYNC_WRITE_AMBIGUOUS),
    ("item-only", "invalid-input"): (Status.E2BIG, Status.DELTA_BADVAL, Status.DURABILITY_IMPOSSIBLE),
    ("internal", "invalid-input"): (Status.EINVAL,),
    ("internal", "item-only"): (Status.NOT_STORED,),
    ("fetch-config", "invalid-input"): (Status.NOT_MY_VBUCKET,),
    ("conn-state-invalidated",): (
        Status.NO_BUCKET, Status.DCP_STREAM_NOT_FOUND, Status.OPAQUE_NO_MATCH, Status.NOT_INITIALIZED),
    ("item-locked", "item-only", "retry-now"): (Status.LOCKED,),
    ("temp", "retry-later", "rate-limit"): (
        Status.E_WOULD_THROTTLE, Status.RATE_LIMITED_NETWORK_INGRESS, Status.RATE_LIMITED_NETWORK_EGRESS,
        Status.RATE_LIMITED_MAX_COMMANDS),
    ("fetch-config", "retry-now"): (Status.E_CONFIG_ONLY,),
    ("conn-state-invalidated", "auth"): (Status.AUTH_STALE, Status.AUTH_ERROR),
    ("special-handling",): (Status.AUTH_CONTINUE, Status.ENCRYPTION_KEY_NOT_AVAILABLE, Status.CHECKSUM_MISMATCH),
    ("invalid-input",): (
        Status.ERANGE, Status.XATTR_EINVAL, Status.UNKNOWN_COLLECTION, Status.CANNOT_APPLY_COLLECTIONS_MANIFEST,
        Status.UNKNOWN_SCOPE, Status.DCP_STREAM_ID_INVALID, Status.DURABILITY_INVALID_LEVEL, Status.VB_UUID_NOT_EQUAL),
    ("dcp", "special-handling"): (Status.ROLLBACK,),
    ("support",): (
        Status.EACCESS, Status.BUCKET_PAUSED, Status.UNKNOWN_FRAME_INFO, Status.UNKNOWN_COMMAND, Status.NOT_SUPPORTED),
    ("item-only", "system-constraint", "no-retry"): (
        Status.EXPIRY_OVERFLOW, Status.LOCK_EXPIRY_OVERFLOW, Status.BUCKET_SIZE_LIMIT_EXCEEDED,
        Status.BUCKET_RESIDENT_RATIO_TOO_LOW, Status.BUCKET_DATA_SIZE_TOO_BIG, Status.BUCKET_DISK_SPACE_TOO_LOW),
    ("conn-state-invalidated", "rate-limit"): (Status.RATE_LIMITED_MAX_CONNECTIONS,),
    ("item-only", "retry-now"): (Status.CANCELLED,),
    ("temp", "retry-later"): (Status.ENOMEM,),
    ("internal", "conn-state-invalidated"): (Status.EINTERNAL,),
    ("temp", "retry-now"): (Status.EBUSY, Status.ETMPFAIL),
    ("item-only", "retry-later"): (Status.SYNC_WRITE_IN_PROGRESS, Status.SYNC_WRITE_RE_COMMIT_IN_PROGRESS),
    ("subdoc", "item-only"): (
        Status.SUBDOC_PATH_ENOENT, Status.SUBDOC_PATH_MISMATCH, Status.SUBDOC_DOC_NOT_JSON, Status.SUBDOC_NUM_ERANGE,
        Status.SUBDOC_DELTA_EINVAL, Status.SUBDOC_PATH_EEXISTS, Status.SUBDOC_CAN_ONLY_REVIVE_DELETED_DOCUMENTS,
        Status.SUBDOC_DELETED_DOCUMENT_CANT_HAVE_VALUE, Status.SUBDOC_FIELD_NOT_BINARY_VALUE),
    ("subdoc", "invalid-input"): (
        Status.SUBDOC_PATH_EINVAL, Status.SUBDOC_PATH_E2BIG, Status.SUBDOC_DOC_E2DEEP, Status.SUBDOC_VALUE_CANTINSERT,
        Status.SUBDOC_INVALID_COMBO, Status.SUBDOC_XATTR_INVALID_FLAG_COMBO, Status.SUBDOC_XATTR_INVALID_KEY_COMBO,
        Status.SUBDOC_XATTR_UNKNOWN_MACRO, Status.SUBDOC_XATTR_UNKNOWN_VATTR, Status.SUBDOC_XATTR_CANT_MODIFY_VATTR,
        Status.SUBDOC_INVALID_XATTR_ORDER, Status.SUBDOC_XATTR_UNKNOWN_VATTR_MACRO),
    ("subdoc", "invalid-input", "item-only"): (Status.SUBDOC_VALUE_ETOODEEP,),
    ("subdoc", "special-handling"): (Status.SUBDOC_MULTI_PATH_FAILURE,),
    ("item-deleted", "success", "subdoc"): (Status.SUBDOC_SUCCESS_DELETED,),
    ("item-deleted", "subdoc", "special-handling"): (Status.SUBDOC_MULTI_PATH_FAILURE_DELETED,),
}
ATTRIBUTES: Final[dict[int, tuple[str, ...]]] = {
    int(status): attrs for attrs, statuses in _GROUPS.items() for status in statuses}
UNLISTED: Final = ("internal",)  # a status the file does not list (none today): what an SDK makes of it


def error_map(version: int) -> dict[str, Any]:
    """The map of ``version`` (1, else the latest), as kv_engine sends it."""
    version = min(version, LATEST_VERSION)
    errors = {}
    for code, name, desc in STATUS_ROWS:
        attrs = ATTRIBUTES.get(code, UNLISTED)
        if version == 1:
            attrs = tuple(attr for attr in attrs if attr in V1_ATTRIBUTES)
        errors[f"{code:x}"] = {"name": name, "desc": desc, "attrs": list(attrs)}
    revision = REVISION + V1_REVISION_BASE if version == 1 else REVISION
    return {"version": version, "revision": revision, "errors": errors}
