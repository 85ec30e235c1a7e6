"""``dcpctl serve --data FILE.jsonl``: documents to start with, one JSON object a line.

Each line is ``{"key": "...", "value": <any JSON>}`` with optional ``"collection"`` (a collection id, or its
``"scope.collection"`` name in the manifest), ``"flags"`` (u32) and ``"expiry"`` (u32, as a request's
expiration: seconds from now up to 30 days, else a unix time). Each document is written as a client would
write it, into the vbucket an SDK hashes its key to (CRC32), after the generated items. A bad line stops
the load with its line number; nothing is half-loaded in a way a client could see, since the server only
listens once the file is read.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any, Final

import orjson

from dcpctl.producer.store import Bucket, OutOfMemoryError
from dcpctl.protocol.constants import DATATYPE_JSON
from dcpctl.safetext import shown

U32_MAX: Final = (1 << 32) - 1
MAX_KEY_LENGTH: Final = 250  # kv_engine's longest key (bytes, without the collection prefix)
# Bytes a line may hold beyond --max-item-size: the key, the other fields and the JSON around them.
LINE_OVERHEAD: Final = 64 * 1024
_FIELDS: Final = frozenset({"key", "value", "collection", "flags", "expiry"})


class DataError(ValueError):
    """A line that is not a document: its number and why."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line = line


def vbucket_of(key: bytes, vbuckets: int) -> int:
    """The vbucket an SDK sends a key to: CRC32's bits 16-30, modulo the vbucket count (libcouchbase's)."""
    return ((zlib.crc32(key) >> 16) & 0x7FFF) % vbuckets


def load(lines: Iterable[bytes], bucket: Bucket, max_item_size: int) -> int:
    """Write each line's document into ``bucket``; the number loaded. Raises :class:`DataError`."""
    count = 0
    for number, line in enumerate(lines, start=1):
        if len(line) > max_item_size + LINE_OVERHEAD:
            raise DataError(number, f"longer than {max_item_size + LINE_OVERHEAD} bytes (--max-item-size "
                                    f"and {LINE_OVERHEAD} for the key and fields)")
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except ValueError as exc:
            raise DataError(number, f"not JSON ({str(exc).splitlines()[0]})") from None
        _document(number, record, bucket, max_item_size)
        count += 1
    return count


def _document(number: int, record: Any, bucket: Bucket, max_item_size: int) -> None:
    if not isinstance(record, dict):
        raise DataError(number, "not a JSON object")
    unknown = set(record) - _FIELDS
    if unknown:
        raise DataError(number, f"unknown field {shown(min(unknown)[:100])} (fields: key, value, collection, "
                                "flags, expiry)")
    key = record.get("key")
    if not isinstance(key, str) or not key:
        raise DataError(number, '"key" must be a non-empty string')
    raw_key = key.encode()
    if len(raw_key) > MAX_KEY_LENGTH:
        raise DataError(number, f'"key" is longer than {MAX_KEY_LENGTH} bytes')
    if "value" not in record:
        raise DataError(number, '"value" is missing')
    value = orjson.dumps(record["value"])
    if len(value) > max_item_size:
        raise DataError(number, f'"value" is above --max-item-size ({max_item_size} bytes)')
    flags, expiry = (_u32(number, record, name) for name in ("flags", "expiry"))
    collection = _collection(number, record.get("collection", 0), bucket)
    vb = bucket.vbuckets[vbucket_of(raw_key, len(bucket.vbuckets))]
    try:
        bucket.write(vb, collection, raw_key, value, DATATYPE_JSON, flags, bucket.expiry_of(expiry),
                     bucket.live(vb, collection, raw_key) or bucket.document(vb, collection, raw_key))
    except OutOfMemoryError as full:
        raise DataError(number, f"the documents are above --memory-quota ({full})") from None


def _u32(number: int, record: dict[str, Any], name: str) -> int:
    value = record.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= U32_MAX:
        raise DataError(number, f'"{name}" must be an integer from 0 to {U32_MAX}')
    return value


def _collection(number: int, value: Any, bucket: Bucket) -> int:
    manifest = bucket.manifest
    if isinstance(value, int) and not isinstance(value, bool):
        if value in manifest.collections:
            return value
        raise DataError(number, f'"collection" {value} is not in the manifest (--collections)')
    if isinstance(value, str):
        scope, _, name = value.partition(".")
        for cid, (sid, cname) in manifest.collections.items():
            if cname == name and manifest.scopes.get(sid) == scope:
                return cid
        raise DataError(number, f'"collection" {shown(value[:100])} is not scope.collection in the manifest')
    raise DataError(number, '"collection" must be a collection id or "scope.collection"')
