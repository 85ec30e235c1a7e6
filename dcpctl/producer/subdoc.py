"""Subdocument commands of ``dcpctl serve``: SUBDOC_MULTI_LOOKUP and SUBDOC_MULTI_MUTATION, as the SDKs send
``lookup_in`` and ``mutate_in`` (kv_engine docs/SubDocument.md).

Theory of operation. The document's body is parsed once into Python values, its xattrs into a dict of
key -> parsed value; a path (``a.b[2].c``, backticks quoting a name) walks either. Lookups answer each
path with its own status (the request's status is SubdocMultiPathFailure when one failed). Mutations are
applied in order to copies; the first failing path fails the whole command (its index and status) and
nothing is written; otherwise the new body and xattrs are written as one mutation, through the same
``Bucket.write`` as every other write, so streams see it. Not served: macro expansion, virtual xattrs other
than ``$document``, binary values. The single-path commands (SUBDOC_GET ... SUBDOC_COUNTER) are one spec
through the same engine, answered with the path's own status.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson

from dcpctl.producer.kv import RefusedError, cas_check, durability, target, unlocked, written
from dcpctl.producer.store import DELETION, Document
from dcpctl.protocol.constants import (
    DATATYPE_JSON,
    DATATYPE_XATTR,
    HelloFeature,
    Opcode,
    Status,
    SubdocDocFlag,
    SubdocPathFlag,
    SubdocWholeDoc,
)
from dcpctl.protocol.message import Message
from dcpctl.protocol.value import Xattr, build_xattrs, parse_xattrs

if TYPE_CHECKING:
    from dcpctl.producer.connection import ProducerConnection

MKDIR_P: Final = SubdocPathFlag.MKDIR_P
XATTR_PATH: Final = SubdocPathFlag.XATTR_PATH
EXPAND_MACROS: Final = SubdocPathFlag.EXPAND_MACROS
MKDOC: Final = SubdocDocFlag.MKDOC
ADD: Final = SubdocDocFlag.ADD
ACCESS_DELETED: Final = SubdocDocFlag.ACCESS_DELETED
# kv_engine's limits: paths per multi command, bytes of a path, levels of a document.
MAX_SPECS: Final = 16
MAX_PATH_LENGTH: Final = 1024
MAX_DEPTH: Final = 32
# A multi-path spec that names the whole document rather than a path.
WHOLE_GET: Final = SubdocWholeDoc.GET
WHOLE_SET: Final = SubdocWholeDoc.SET
WHOLE_DELETE: Final = SubdocWholeDoc.DELETE


class _PathError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def parse_path(path: str) -> list[str | int]:
    """``a.b[2].c`` as ["a", "b", 2, "c"]; a backtick-quoted name may hold dots and brackets."""
    if len(path.encode()) > MAX_PATH_LENGTH:
        raise _PathError(Status.SUBDOC_PATH_E2BIG)
    parts: list[str | int] = []
    i, n = 0, len(path)
    while i < n:
        if path[i] == "`":
            end = path.find("`", i + 1)
            while end != -1 and path[end + 1:end + 2] == "`":  # a doubled backtick is a literal one
                end = path.find("`", end + 2)
            if end == -1:
                raise _PathError(Status.SUBDOC_PATH_EINVAL)
            parts.append(path[i + 1:end].replace("``", "`"))
            i = end + 1
        elif path[i] == "[":
            end = path.find("]", i)
            try:
                parts.append(int(path[i + 1:end]))
            except ValueError:
                raise _PathError(Status.SUBDOC_PATH_EINVAL) from None
            i = end + 1
        else:
            j = i
            while j < n and path[j] not in ".[":
                j += 1
            if j == i:
                raise _PathError(Status.SUBDOC_PATH_EINVAL)
            parts.append(path[i:j])
            i = j
        if i < n and path[i] == ".":
            i += 1
            if i == n:
                raise _PathError(Status.SUBDOC_PATH_EINVAL)
    if len(parts) > MAX_DEPTH:
        raise _PathError(Status.SUBDOC_PATH_E2BIG)
    return parts


def _step(node: Any, part: str | int) -> Any:
    if isinstance(part, int):
        if not isinstance(node, list):
            raise _PathError(Status.SUBDOC_PATH_MISMATCH)
        if not -len(node) <= part < len(node):
            raise _PathError(Status.SUBDOC_PATH_ENOENT)
        return node[part]
    if not isinstance(node, dict):
        raise _PathError(Status.SUBDOC_PATH_MISMATCH)
    if part not in node:
        raise _PathError(Status.SUBDOC_PATH_ENOENT)
    return node[part]


def _get(root: Any, parts: list[str | int]) -> Any:
    node = root
    for part in parts:
        node = _step(node, part)
    return node


def _parent(root: Any, parts: list[str | int], mkdir: bool) -> Any:
    node = root
    for index, part in enumerate(parts[:-1]):
        try:
            node = _step(node, part)
        except _PathError as exc:
            if exc.status != Status.SUBDOC_PATH_ENOENT or not mkdir or isinstance(part, int):
                raise
            created: Any = [] if isinstance(parts[index + 1], int) else {}
            node[part] = created
            node = created
    return node


def _value(text: str, *, many: bool = False) -> Any:
    try:
        return orjson.loads(f"[{text}]" if many else text)
    except ValueError:
        raise _PathError(Status.SUBDOC_VALUE_CANTINSERT) from None


def _mutate(root: Any, opcode: int, parts: list[str | int], text: str, mkdir: bool) -> Any:
    """Apply one mutation to ``root`` in place; a counter's new value, else None."""
    if opcode in (Opcode.SUBDOC_ARRAY_PUSH_LAST, Opcode.SUBDOC_ARRAY_PUSH_FIRST, Opcode.SUBDOC_ARRAY_ADD_UNIQUE):
        try:
            array = _get(root, parts)
        except _PathError as exc:
            if exc.status != Status.SUBDOC_PATH_ENOENT or not mkdir or not parts:
                raise
            array = _parent(root, parts, mkdir)[parts[-1]] = []
        if not isinstance(array, list):
            raise _PathError(Status.SUBDOC_PATH_MISMATCH)
        values = _value(text, many=True)
        if opcode == Opcode.SUBDOC_ARRAY_ADD_UNIQUE:
            if len(values) != 1 or isinstance(values[0], (dict, list)):
                raise _PathError(Status.SUBDOC_VALUE_CANTINSERT)
            if values[0] in array:
                raise _PathError(Status.SUBDOC_PATH_EEXISTS)
        array[len(array) if opcode != Opcode.SUBDOC_ARRAY_PUSH_FIRST else 0:0] = values
        return None
    if not parts:
        raise _PathError(Status.SUBDOC_PATH_EINVAL)
    parent, last = _parent(root, parts, mkdir), parts[-1]
    if isinstance(last, int) != isinstance(parent, list):
        raise _PathError(Status.SUBDOC_PATH_MISMATCH)
    exists = (-len(parent) <= last < len(parent)) if isinstance(last, int) else last in parent
    if opcode == Opcode.SUBDOC_COUNTER:
        delta = _value(text)
        if not isinstance(delta, int) or isinstance(delta, bool) or delta == 0:
            raise _PathError(Status.SUBDOC_DELTA_EINVAL)
        current = parent[last] if exists else 0
        if not isinstance(current, int) or isinstance(current, bool):
            raise _PathError(Status.SUBDOC_PATH_MISMATCH)
        if not -(1 << 63) <= current + delta < (1 << 63):
            raise _PathError(Status.SUBDOC_NUM_ERANGE)
        parent[last] = current + delta
        return current + delta
    if opcode == Opcode.SUBDOC_ARRAY_INSERT:
        if not isinstance(last, int) or not 0 <= last <= len(parent):
            raise _PathError(Status.SUBDOC_PATH_EINVAL if not isinstance(last, int) else Status.SUBDOC_PATH_ENOENT)
        parent[last:last] = _value(text, many=True)
        return None
    if opcode == Opcode.SUBDOC_DICT_ADD and exists:
        raise _PathError(Status.SUBDOC_PATH_EEXISTS)
    if opcode in (Opcode.SUBDOC_REPLACE, Opcode.SUBDOC_DELETE) and not exists:
        raise _PathError(Status.SUBDOC_PATH_ENOENT)
    if opcode == Opcode.SUBDOC_DELETE:
        del parent[last]
    elif opcode in (Opcode.SUBDOC_DICT_ADD, Opcode.SUBDOC_DICT_UPSERT, Opcode.SUBDOC_REPLACE):
        if opcode != Opcode.SUBDOC_REPLACE and isinstance(last, int):
            raise _PathError(Status.SUBDOC_PATH_EINVAL)
        parent[last] = _value(text)
    else:
        raise _PathError(Status.SUBDOC_INVALID_COMBO)
    return None


def _split(doc: Document | None) -> tuple[dict[str, Any], bytes]:
    """The xattrs (key -> parsed value) and the body of a document."""
    if doc is None:
        return {}, b""
    if not doc.datatype & DATATYPE_XATTR:
        return {}, doc.value
    parsed = parse_xattrs(doc.value)
    if isinstance(parsed, str):
        return {}, doc.value
    pairs, offset = parsed
    xattrs = {}
    for pair in pairs:
        try:
            xattrs[pair.key] = orjson.loads(pair.value)
        except ValueError:
            xattrs[pair.key] = pair.value
    return xattrs, doc.value[offset:]


def _virtual(doc: Document) -> dict[str, Any]:
    """The ``$document`` virtual xattr (the fields SDKs read: CAS, expiry, flags, seqno...)."""
    return {"CAS": f"0x{doc.cas:016x}", "exptime": doc.expiry, "flags": doc.flags, "seqno": f"0x{doc.rev_seqno:016x}",
            "value_bytes": len(_split(doc)[1]), "deleted": doc.deleted, "datatype": ["json"]}


@dataclass(frozen=True)
class Spec:
    """One path operation: a multi-path command's spec, or the whole of a single-path command."""

    opcode: int
    flags: int
    path: str
    value: str = ""


def _specs(msg: Message, name: str) -> list[Any]:
    fields = msg.value_fields
    specs = list(fields[name]) if fields is not None and name in fields else None
    if not specs or len(specs) > MAX_SPECS:
        raise RefusedError(Status.EINVAL if not specs else Status.SUBDOC_INVALID_COMBO,
                            f"1 to {MAX_SPECS} path specs")
    return specs


def _doc_flags(msg: Message) -> int:
    extras = msg.extras or {}
    return int(extras.get("doc_flags", 0))


def _single(msg: Message, *, lookup: bool) -> Spec:
    """A single-path command's spec: the extras give the path's length and flags, the body is the path then
    the value (read here from the raw body, as the registry's row keeps them one text)."""
    extras = msg.extras
    if extras is None or (lookup and msg.extras_length not in _LOOKUP_EXTRAS):
        raise RefusedError(Status.EINVAL, f"{msg.opcode_name}: extras of {msg.extras_length} bytes")
    length, flags = int(extras["path_length"]), int(extras["subdoc_flags"])
    body = msg.value
    if length > len(body):
        raise RefusedError(Status.EINVAL, "the path is longer than the body")
    # int(): an enum flag's ``~`` complements only up to its highest declared bit, missing those above it.
    if flags & ~int(XATTR_PATH if lookup else XATTR_PATH | MKDIR_P | EXPAND_MACROS):
        raise RefusedError(Status.EINVAL, "unknown subdocument flags")
    value = body[length:]
    if lookup and value:
        raise RefusedError(Status.EINVAL, "a lookup has no value")
    if msg.opcode == Opcode.SUBDOC_DELETE and value:
        raise RefusedError(Status.EINVAL, "SUBDOC_DELETE has no value")
    if not lookup and msg.opcode != Opcode.SUBDOC_DELETE and not value:
        raise RefusedError(Status.EINVAL, f"{msg.opcode_name} needs a value")
    try:
        return Spec(msg.opcode, flags, body[:length].decode(), value.decode())
    except UnicodeDecodeError:
        raise RefusedError(Status.EINVAL, "the path or value is not UTF-8") from None


def _lookup(spec: Any, doc: Document, xattrs: dict[str, Any], root: Any, body: bytes) -> str:
    """One lookup spec's value (empty for EXISTS); raises _PathError with the path's status."""
    if spec.flags & XATTR_PATH:
        found = _get({**xattrs, "$document": _virtual(doc)}, parse_path(spec.path))
    elif spec.opcode == WHOLE_GET:
        return body.decode(errors="replace")
    elif root is None and body:
        raise _PathError(Status.SUBDOC_DOC_NOT_JSON)
    else:
        found = _get(root, parse_path(spec.path))
    if spec.opcode == Opcode.SUBDOC_GET_COUNT:
        if not isinstance(found, (dict, list)):
            raise _PathError(Status.SUBDOC_PATH_MISMATCH)
        return str(len(found))
    return orjson.dumps(found).decode() if spec.opcode == Opcode.SUBDOC_GET else ""


def _lookups(conn: ProducerConnection, msg: Message, specs: list[Any]) -> tuple[Document, list[tuple[Status, str]]]:
    """The document a lookup reads and each spec's status and value (the engine of both lookup commands)."""
    vb, collection, key = target(conn, msg)
    bucket = conn.node.cluster.bucket
    deleted_ok = bool(_doc_flags(msg) & ACCESS_DELETED)
    doc = bucket.document(vb, collection, key) if deleted_ok else bucket.live(vb, collection, key)
    if doc is None or (doc.deleted and not deleted_ok):
        raise RefusedError(Status.KEY_ENOENT)
    xattrs, body = _split(doc)
    try:
        root = orjson.loads(body) if body else None
        body_json = True
    except ValueError:
        root, body_json = None, False
    results: list[tuple[Status, str]] = []
    for spec in specs:
        try:
            value = _lookup(spec, doc, xattrs, root if body_json else None, body)
            status = Status.SUCCESS
        except _PathError as exc:
            status, value = Status(exc.status), ""
        results.append((status, value))
    return doc, results


def multi_lookup(conn: ProducerConnection, msg: Message) -> None:
    doc, results = _lookups(conn, msg, _specs(msg, "lookup_specs"))
    failed = any(status for status, _ in results)
    if doc.deleted:
        top = Status.SUBDOC_MULTI_PATH_FAILURE_DELETED if failed else Status.SUBDOC_SUCCESS_DELETED
    else:
        top = Status.SUBDOC_MULTI_PATH_FAILURE if failed else Status.SUCCESS
    conn._reply(msg, top, cas=doc.cas,
                lookup_results=[(status, len(value.encode()), value) for status, value in results])


def single_lookup(conn: ProducerConnection, msg: Message) -> None:
    """SUBDOC_GET, SUBDOC_EXISTS, SUBDOC_GET_COUNT: the path's own status is the command's."""
    doc, [(status, value)] = _lookups(conn, msg, [_single(msg, lookup=True)])
    if status:
        raise RefusedError(status)
    json = bool(value) and msg.opcode == Opcode.SUBDOC_GET and HelloFeature.JSON in conn.features
    conn._reply(msg, Status.SUBDOC_SUCCESS_DELETED if doc.deleted else Status.SUCCESS, cas=doc.cas,
                datatype=DATATYPE_JSON if json else 0, value=value.encode())


def _apply(spec: Any, root: Any, xattrs: dict[str, Any], delete: bool) -> tuple[Any, bool, Any]:
    """One mutation spec on the body (``root``, None when not JSON) or the xattrs: the new body, whether
    the document is to be deleted, and a counter's value; raises _PathError with the path's status."""
    if spec.flags & EXPAND_MACROS:
        raise _PathError(Status.SUBDOC_XATTR_UNKNOWN_MACRO)
    if spec.opcode == WHOLE_SET:
        return _value(spec.value), delete, None
    if spec.opcode == WHOLE_DELETE:
        return root, True, None
    parts = parse_path(spec.path)
    mkdir = bool(spec.flags & MKDIR_P)
    if spec.flags & XATTR_PATH:
        if not parts or not isinstance(parts[0], str):
            raise _PathError(Status.SUBDOC_PATH_EINVAL)
        if parts[0].startswith("$"):
            raise _PathError(Status.SUBDOC_XATTR_CANT_MODIFY_VATTR)
        return root, delete, _mutate(xattrs, spec.opcode, parts, spec.value, mkdir or len(parts) == 1)
    if root is None:
        raise _PathError(Status.SUBDOC_DOC_NOT_JSON)
    return root, delete, _mutate(root, spec.opcode, parts, spec.value, mkdir)


class _SpecFailedError(Exception):
    """A mutation spec failed: nothing is written."""

    def __init__(self, index: int, status: int) -> None:
        super().__init__(status)
        self.index = index
        self.status = status


def _mutations(conn: ProducerConnection, msg: Message, specs: list[Any]) -> tuple[Any, Document, list[tuple[int, int]]]:
    """Apply the specs to the document and write it as one mutation (the engine of both mutation commands):
    its vbucket, the new document and each counter's (index, value); raises _SpecFailedError on the first failed
    spec, before anything is written."""
    vb, collection, key = target(conn, msg)
    bucket = conn.node.cluster.bucket
    flags = _doc_flags(msg)
    doc = bucket.live(vb, collection, key)
    if doc is not None and flags & ADD:
        raise RefusedError(Status.KEY_EEXISTS, "the document exists")
    if doc is None and not flags & (MKDOC | ADD):
        raise RefusedError(Status.KEY_ENOENT)
    unlocked(conn, doc, msg.cas)
    cas_check(doc, msg.cas)
    xattrs, body = _split(doc)
    try:
        root: Any = orjson.loads(body) if body else {}
    except ValueError:
        root = None
    counters: list[tuple[int, int]] = []
    delete = False
    for index, spec in enumerate(specs):
        try:
            root, delete, result = _apply(spec, root, xattrs, delete)
        except _PathError as exc:
            raise _SpecFailedError(index, exc.status) from None
        if result is not None:
            counters.append((index, result))
    expiry = bucket.expiry_of(int((msg.extras or {}).get("expiration", 0)))
    level = durability(msg)
    old = doc or bucket.document(vb, collection, key)
    if delete:
        new = bucket.write(vb, collection, key, b"", 0, 0, 0, old, opcode=DELETION, durability_level=level)
    else:
        value = orjson.dumps(root)
        datatype = DATATYPE_JSON
        if xattrs:
            value = build_xattrs([Xattr(k, orjson.dumps(v).decode()) for k, v in xattrs.items()]) + value
            datatype |= DATATYPE_XATTR
        new = bucket.write(vb, collection, key, value, datatype, doc.flags if doc else 0, expiry, old,
                           durability_level=level)
    return vb, new, counters


def multi_mutation(conn: ProducerConnection, msg: Message) -> None:
    specs = _specs(msg, "mutation_specs")
    try:
        vb, new, counters = _mutations(conn, msg, specs)
    except _SpecFailedError as failed:
        conn._reply(msg, Status.SUBDOC_MULTI_PATH_FAILURE, failed_index=failed.index, failed_status=failed.status)
        return
    written(conn, msg, vb, new, mutation_results=[(index, Status.SUCCESS, len(str(n)), str(n))
                                                  for index, n in counters])


def single_mutation(conn: ProducerConnection, msg: Message) -> None:
    """SUBDOC_DICT_ADD ... SUBDOC_COUNTER: the path's own status is the command's; a counter answers its
    new value."""
    try:
        vb, new, counters = _mutations(conn, msg, [_single(msg, lookup=False)])
    except _SpecFailedError as failed:
        raise RefusedError(failed.status) from None
    written(conn, msg, vb, new, value=str(counters[0][1]).encode() if counters else b"")


# Extras a single-path lookup may carry: path length and flags, then optionally the document flags.
_LOOKUP_EXTRAS: Final = frozenset({3, 4})
SINGLE_LOOKUPS: Final = (Opcode.SUBDOC_GET, Opcode.SUBDOC_EXISTS, Opcode.SUBDOC_GET_COUNT)
SINGLE_MUTATIONS: Final = (Opcode.SUBDOC_DICT_ADD, Opcode.SUBDOC_DICT_UPSERT, Opcode.SUBDOC_DELETE,
                           Opcode.SUBDOC_REPLACE, Opcode.SUBDOC_ARRAY_PUSH_LAST, Opcode.SUBDOC_ARRAY_PUSH_FIRST,
                           Opcode.SUBDOC_ARRAY_INSERT, Opcode.SUBDOC_ARRAY_ADD_UNIQUE, Opcode.SUBDOC_COUNTER)
DURABLE: Final = frozenset((*SINGLE_MUTATIONS, Opcode.SUBDOC_MULTI_MUTATION))  # they take a durability requirement
COMMANDS: Final[dict[int, Callable[[ProducerConnection, Message], None]]] = {
    Opcode.SUBDOC_MULTI_LOOKUP: multi_lookup, Opcode.SUBDOC_MULTI_MUTATION: multi_mutation,
    **dict.fromkeys(SINGLE_LOOKUPS, single_lookup), **dict.fromkeys(SINGLE_MUTATIONS, single_mutation)}
