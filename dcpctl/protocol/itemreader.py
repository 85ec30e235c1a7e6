"""Plain stream items read in place by a function compiled per item shape from the registry's plan.

Theory of operation. A plain item is a producer's mutation, deletion or expiration that :func:`decode` would
find clean: a request of its opcode, the declared extras layout (nmeta 0, a by_seqno, defined flag bits),
key and value present as the registry says, a key that is text (after a one-byte collection id when
collections are on), raw or JSON datatype and a JSON value that parses. Consumers of millions of items
(``decode``, ``capture``, ``analyze``) read those in place, without building a :class:`Message`. Per item
shape (opcode and extras length, under one set of decode options) a function is generated from decode's own
plan (:func:`~dcpctl.protocol.message.item_plan`), as construct compiles a declaration: the header and the
extras in one ``struct`` unpack, only the checks that shape's plan has, with its constants folded in, the
key and value read inline. It returns a :data:`~dcpctl.protocol.message.PlainItem` (what :func:`decode` and
:func:`~dcpctl.protocol.message.item_key` together say of the item), or None for anything else (the
caller then decodes the packet).

:class:`ItemReaders` keeps a connection's readers by shape. :func:`reader_head` is the generated function's
head (the unpack and every stateless check up to the key's), which ``render.lines`` also compiles its line
readers from: the checks are the wire format's, the line is rendering.

Tests hold the reader to the interpreted :func:`decode` (None exactly when decode has something to say, or
the item is not plain), on every golden vector and on generated items of every item layout.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

import orjson

from dcpctl.protocol.constants import Magic
from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.message import HEADER, DecodeOptions, ItemPlan, PlainItem, item_plan
from dcpctl.protocol.registry import KeyKind

ItemReader = Callable[[bytes, int, int], PlainItem | None]
READERS_KEPT: Final = 64  # shapes compiled per connection: a stream has a handful; more means a hostile mix
ITEM_READERS_KEPT: Final = 1024  # item readers kept by the process (dialects x collections x the item shapes)
_ITEM_READERS: dict[tuple[str, bool, int, int], ItemReader | None] = {}
_UNSEEN: Final = object()  # a shape no reader was asked for yet (None is cached: not a plain item's shape)


class ShapeReaders:
    """A connection's compiled readers (of one kind: :meth:`_make`'s), made when a shape is first seen (None
    for a shape that is not a plain item's), forgotten when the decode options change (collections negotiated)."""

    def __init__(self) -> None:
        self._options: DecodeOptions | None = None
        self._readers: dict[tuple[int, int], Any] = {}

    def _make(self, options: DecodeOptions, opcode: int, extlen: int) -> Any:
        raise NotImplementedError

    def shaped(self, buf: bytes, pos: int, n: int, options: DecodeOptions) -> Any:
        if n - pos < HEADER_LENGTH:
            return None
        if options is not self._options:
            self._options, self._readers = options, {}
        shape = (buf[pos + 1], buf[pos + 4])
        reader = self._readers.get(shape, _UNSEEN)
        if reader is not _UNSEEN:
            return reader
        if len(self._readers) >= READERS_KEPT:
            self._readers.clear()
        reader = self._readers[shape] = self._make(options, *shape)
        return reader


class ItemReaders(ShapeReaders):
    """Item readers: ``at(...)(buf, pos, n)`` is the plain item at ``buf[pos:n]``, or None."""

    def _make(self, options: DecodeOptions, opcode: int, extlen: int) -> ItemReader | None:
        return compile_item_reader(options, opcode, extlen)

    def at(self, buf: bytes, pos: int, n: int, options: DecodeOptions) -> ItemReader | None:
        """The reader for the shape of the packet at ``buf[pos:n]``, None when that shape is not a plain
        item's (or too little is there to tell)."""
        reader: ItemReader | None = self.shaped(buf, pos, n, options)
        return reader


def reader_head(options: DecodeOptions, opcode: int, extlen: int, found: ItemPlan, signature: str,
            max_body: int | None) -> tuple[list[str], str, bool]:
    """The generated function's head, shared by both kinds: the unpack and every stateless check of the
    shape's plan as decode makes them, up to and including the key's (the value's checks differ by
    kind and follow). Returns (source lines, the extras' variable names, whether the key has a collection
    prefix)."""
    (plan, _, nmeta_at, zero_seqno_at, flag_checks, key_rule, value_rule, _, _, _, datatypes) = found
    extras = ", ".join(f"x{i}" for i in range(len(plan.names)))
    document_key = bool(options.collections) and plan.variant is not None and plan.variant.key is KeyKind.DOCUMENT
    allowed = tuple(sorted(set(datatypes) & {0, 1}))  # plain: raw or JSON (and what the opcode allows)
    limit = f" or total > {max_body}" if max_body is not None else ""
    lines = [
        f"def read({signature}):",
        f"    if n - pos < {HEADER_LENGTH + extlen}:",
        "        return None",
        f"    magic, opcode, keylen, extlen, datatype, vbucket, total, opaque, cas, {extras}, = unpack(buf, pos)",
        f"    end = pos + {HEADER_LENGTH} + total",
        f"    if magic != {Magic.CLIENT_REQUEST:#04x} or opcode != {opcode} or extlen != {extlen} or end > n{limit} "
        f"or datatype not in {allowed!r} or keylen > total - {extlen}:",
        "        return None",
        f"    ko = pos + {HEADER_LENGTH + extlen}",
        "    vo = ko + keylen",
    ]
    checks = [f"x{nmeta_at}"] if nmeta_at >= 0 else []
    if zero_seqno_at >= 0:
        checks.append(f"not x{zero_seqno_at}")
    checks += [f"x{at} & {~mask & 0xFFFFFFFFFFFFFFFF}" for at, mask in flag_checks]
    # presence rules as decode's: 0 optional, 1 required, 2 forbidden
    checks += {0: [], 1: ["not keylen"], 2: ["keylen"]}[key_rule]
    checks += {0: [], 1: ["end == vo"], 2: ["end > vo"]}[value_rule]
    if checks:
        lines += [f"    if {' or '.join(checks)}:", "        return None"]
    lines += ["    if keylen:"]
    if document_key:
        lines += ["        collection_id = buf[ko]", "        if collection_id >= 0x80 or keylen == 1:",
                  "            return None", "        ko += 1"]
    lines += ["        try:", "            key = buf[ko:vo].decode()", "        except UnicodeDecodeError:",
              "            return None", "        if not key.isprintable():", "            return None"]
    return lines, extras, document_key


def compiled(lines: list[str], name: str, namespace: dict[str, Any]) -> Any:
    exec(compile("\n".join(lines), f"<dcpctl {name}>", "exec"), namespace)  # noqa: S102
    return namespace["read"]


def item_codec(plan: Any) -> Any:
    """The header and the extras as one ``struct`` (what the generated function unpacks)."""
    extras_format = plan.unpack.__self__.format
    assert extras_format.startswith(">"), extras_format  # the wire is big-endian throughout
    return struct.Struct(HEADER.format + extras_format[1:]).unpack_from


def compile_item_reader(options: DecodeOptions, opcode: int, extlen: int) -> ItemReader | None:
    """The item reader of one shape (see the module docstring), or None when the shape is not a plain item's.
    Item readers are pure functions of the dialect, the collections option and the shape, so each is compiled
    once per process (a capture may hold many connections)."""
    key = (options.dialect.name, bool(options.collections), opcode, extlen)
    if key in _ITEM_READERS:
        return _ITEM_READERS[key]
    if len(_ITEM_READERS) >= ITEM_READERS_KEPT:
        _ITEM_READERS.clear()
    reader = _ITEM_READERS[key] = _compile_item_reader(options, opcode, extlen)
    return reader


def _compile_item_reader(options: DecodeOptions, opcode: int, extlen: int) -> ItemReader | None:
    found = item_plan(options.dialect, opcode, extlen)
    if found is None:
        return None
    plan, seqno_at, rev_seqno_at, names = found[0], found[7], found[8], found[9]
    lines, extras, document_key = reader_head(options, opcode, extlen, found, "buf, pos, n", None)
    # item_key's (collection_id, key): None where the item has no key, or its key no collection prefix
    lines += ["    if not keylen:", "        collection_id = key = None"] if document_key else \
        ["    collection_id = None", "    if not keylen:", "        key = None"]
    lines += [
        "    if datatype and end > vo:",
        "        try:",
        "            loads(buf[vo:end])",
        "        except ValueError:",
        "            return None",
        "    return (end, (magic, opcode, keylen, extlen, datatype, vbucket, total, opaque, cas), plan, "
        f"({extras},), magic_name, opcode_name, collection_id, key, x{seqno_at}, x{rev_seqno_at}, vo)",
    ]
    reader: ItemReader = compiled(lines, f"item reader {opcode:#04x}/{extlen}", {
        "unpack": item_codec(plan), "loads": orjson.loads, "plan": plan, "magic_name": names[0],
        "opcode_name": names[1]})
    return reader
