"""Validation of the DCP_STREAM_REQ JSON value (reference 3.4.4; seed 004).

Pure: takes the value bytes, returns the parsed object and diagnostics. It follows the server where the
document and the server differ: ``{}`` and objects with none of the known keys are rejected (the document
says unknown keys are never an error), ``sid`` is a u16 from 1 to 65535 (the document says 1 to 65536).
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

import orjson

from dcpctl.protocol.diagnostic import Diagnostic, diagnostic
from dcpctl.safetext import QUOTED_CHARS, brief, shown

KNOWN_KEYS: Final = ("uid", "sid", "collections", "scope", "purge_seqno", "cts")
MAX_STREAM_ID: Final = 0xFFFF
_HEX = re.compile(r"[0-9a-fA-F]{1,8}")
_DECIMAL = re.compile(r"[0-9]{1,20}")
# Unknown keys named one diagnostic each, up to this many; the rest are counted in one more. The server
# knows six keys, so a value with more unknown ones is hostile or broken, and a few names say which.
MAX_UNKNOWN_KEY_DIAGNOSTICS: Final = 8
MAX_PURGE_SEQNO: Final = (1 << 64) - 1  # a seqno is a u64


class StreamRequestValue(NamedTuple):
    """The value's fields as the server reads them: each None when absent or not of the form :func:`validate`
    accepts (hex strings become numbers)."""

    sid: int | None
    uid: int | None
    collections: tuple[int, ...] | None
    scope: int | None
    purge_seqno: int | None


def encode(sid: int | None = None, collections: tuple[int, ...] = (), scope: int | None = None) -> bytes:
    """The value a client sends: the stream id, and the collections or the scope it asks for (hex strings, as
    the server reads them); empty when it asks for none of these (:func:`with_purge_seqno` adds the purge
    seqno a vbucket's stream last had)."""
    value: dict[str, Any] = {}
    if sid is not None:
        value["sid"] = sid
    if collections:
        value["collections"] = [f"{c:x}" for c in collections]
    elif scope is not None:
        value["scope"] = f"{scope:x}"
    return orjson.dumps(value) if value else b""


def with_purge_seqno(value: bytes, purge_seqno: int) -> bytes:
    """A value :func:`encode` made, with ``purge_seqno`` set in it (decimal digits in a string, as the
    server reads it)."""
    obj = orjson.loads(value) if value else {}
    obj["purge_seqno"] = str(purge_seqno)
    return orjson.dumps(obj)


def _sid(obj: dict[str, Any]) -> int | None:
    sid = obj.get("sid")
    return sid if isinstance(sid, int) and not isinstance(sid, bool) and 1 <= sid <= MAX_STREAM_ID else None


def _quoted(value: Any) -> str:
    """A bad JSON value quoted: a string as every bad value is (``brief``), anything else as the document
    wrote it (true, not Python's True), escaped and cut as ``brief`` cuts."""
    if isinstance(value, str):
        return brief(value)
    text = shown(orjson.dumps(value).decode())
    return text if len(text) <= QUOTED_CHARS else f"{text[:QUOTED_CHARS]}… ({len(text)} chars)"


def _hex(obj: dict[str, Any], key: str) -> int | None:
    found = obj.get(key)
    return int(found, 16) if isinstance(found, str) and _HEX.fullmatch(found) else None


def _collections(obj: dict[str, Any]) -> tuple[int, ...] | None:
    ids = obj.get("collections")
    if not isinstance(ids, list) or not all(isinstance(c, str) and _HEX.fullmatch(c) for c in ids):
        return None
    return tuple(int(c, 16) for c in ids)


def _purge_seqno(obj: dict[str, Any]) -> int | None:
    found = obj.get("purge_seqno")
    if not (isinstance(found, str) and _DECIMAL.fullmatch(found)):
        return None
    number = int(found)
    return number if number <= MAX_PURGE_SEQNO else None


def parse(value: bytes) -> StreamRequestValue | None:
    """The value's fields (see :class:`StreamRequestValue`); None when it is not a JSON object."""
    try:
        obj = orjson.loads(value)  # bounded nesting; refuses 1e999 and lone surrogates
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    return StreamRequestValue(_sid(obj), _hex(obj, "uid"), _collections(obj), _hex(obj, "scope"), _purge_seqno(obj))


def validate(value: bytes, offset: int = 0) -> tuple[Any, list[Diagnostic]]:
    """Parse and check a stream-request value; ``offset`` places diagnostics in the packet."""
    n = len(value)

    def d(name: str, message: str) -> Diagnostic:
        return diagnostic(name, message, offset, n)

    try:
        obj = orjson.loads(value)  # bounded nesting; refuses 1e999 and lone surrogates
    except ValueError as exc:
        return None, [d("stream_request_json_invalid", f"stream-request value is not valid JSON: {exc}")]
    if not isinstance(obj, dict):
        return obj, [d("stream_request_json_invalid", "stream-request value is not a JSON object")]
    diags: list[Diagnostic] = []
    if not any(key in obj for key in KNOWN_KEYS):
        diags.append(d("stream_request_json_no_known_key",
                       "no sid, uid, scope, collections, purge_seqno or cts key: the server answers Einval "
                       "(the value document says unknown keys are not an error)"))
    unknown = [key for key in obj if key not in KNOWN_KEYS]
    diags.extend(d("stream_request_json_unknown_key", f"key {brief(key)} is ignored by the server")
                 for key in unknown[:MAX_UNKNOWN_KEY_DIAGNOSTICS])
    if len(unknown) > MAX_UNKNOWN_KEY_DIAGNOSTICS:
        diags.append(d("stream_request_json_unknown_key", f"and {len(unknown) - MAX_UNKNOWN_KEY_DIAGNOSTICS} "
                       "more keys the server ignores"))
    if "uid" in obj and _hex(obj, "uid") is None:
        diags.append(d("stream_request_bad_uid", f"uid {_quoted(obj['uid'])} is not a hex string of at most 8 "
                       "digits without 0x"))
    if "sid" in obj and _sid(obj) is None:
        diags.append(d("stream_request_sid_invalid",
                       f"sid {_quoted(obj['sid'])} is not an integer from 1 to {MAX_STREAM_ID} (the value document "
                       "says 1 to 65536, but the stream id is a u16 and 0 is DcpStreamIdInvalid)"))
    if "collections" in obj and "scope" in obj:
        diags.append(d("stream_request_collections_and_scope",
                       "collections and scope together: the server answers Einval"))
    if "collections" in obj and _collections(obj) is None:
        diags.append(d("stream_request_bad_collection_id",
                       "collections must be an array of hex strings of at most 8 digits (32-bit ids) without 0x"))
    if "scope" in obj and _hex(obj, "scope") is None:
        diags.append(d("stream_request_bad_scope_id", "scope must be a hex string of at most 8 digits without 0x"))
    if "purge_seqno" in obj and not (isinstance(obj["purge_seqno"], str) and _DECIMAL.fullmatch(obj["purge_seqno"])):
        diags.append(d("stream_request_bad_purge_seqno",
                       "purge_seqno must be a string of decimal digits"))
    return obj, diags
