"""Plain stream items read in place by a function compiled per item shape from the registry's plan.

Theory of operation. A plain item is a producer's mutation, deletion or expiration that :func:`decode` would
find clean: a request of its opcode, the declared extras layout (nmeta 0, a by_seqno, defined flag bits),
key and value present as the registry says, a key that is text (after a one-byte collection id when
collections are on), raw or JSON datatype and a JSON value that parses. Consumers of millions of items
(``decode``, ``capture``, ``stream``, ``redact``) read those without the interpreted decoder's general
path. Per item shape (opcode and extras length) a function is generated from decode's own plan
(:func:`~dcpctl.protocol.message.item_plan`), as construct compiles a declaration: the header and the extras
in one ``struct`` unpack, only the checks that shape's plan has, with its constants folded in, the key and
value read inline. It returns the :class:`~dcpctl.protocol.message.Message` :func:`decode` would return, its
check pass already run (nothing left to find), or None for anything else (the caller then decodes the
packet, and the diagnostics come from there).

:class:`ItemReaders` keeps a connection's readers by shape and reads an item through its shape's.

Tests hold the reader to the interpreted :func:`decode` (None exactly when decode has something to say, or
the item is not plain; otherwise the same record), on every golden vector and on generated items of every
item layout.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

import orjson

from dcpctl.protocol.codegen import compiled
from dcpctl.protocol.constants import Magic
from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.message import HEADER, MESSAGE_DEFAULTS, DecodeOptions, Message, ValueReading, item_plan
from dcpctl.protocol.registry import KeyKind

# (buffer, position, end of the bytes, the buffer's stream offset, the options) -> the item's message or None
ItemReader = Callable[[bytes, int, int, int, DecodeOptions], Message | None]
READERS_KEPT: Final = 64  # shapes compiled per connection: a stream has a handful; more means a hostile mix
ITEM_READERS_KEPT: Final = 1024  # item readers kept by the process (dialects x collections x the item shapes)
_ITEM_READERS: dict[tuple[str, bool, int, int], ItemReader | None] = {}
_ITEM_SETS: Final = frozenset({"plan", "_extras_values", "_reading", "_document"})  # what every plain item has
_UNSEEN: Final = object()  # a shape no reader was asked for yet (None is cached: not a plain item's shape)


class ItemReaders:
    """A connection's item readers, made when a shape is first seen (None for a shape that is not a plain
    item's). :meth:`read` is the plain item at ``buf[pos:n]`` through the reader of its shape; an item whose
    body is over ``max_body_length`` is left to the framer, which says what is wrong with it."""

    def __init__(self, max_body_length: int) -> None:
        self._readers: dict[tuple[int, int], ItemReader | None] = {}
        self._options: DecodeOptions | None = None  # what the readers at hand read with
        self._last: ItemReader | None = None  # items come in long runs of one shape
        self._limit = HEADER_LENGTH + max_body_length

    def read(self, buf: bytes, pos: int, n: int, base: int, options: DecodeOptions) -> Message | None:
        """The plain item at ``buf[pos:n]`` (``base``: the buffer's stream offset), None for anything else."""
        reader = self._last if options is self._options else None
        msg = reader(buf, pos, n, base, options) if reader is not None else None
        if msg is None:
            shaped = self._at(buf, pos, n, options)
            if shaped is None or shaped is reader:
                return None
            self._last = shaped
            msg = shaped(buf, pos, n, base, options)
            if msg is None:
                return None
        return msg if msg.body_end <= self._limit else None

    def _at(self, buf: bytes, pos: int, n: int, options: DecodeOptions) -> ItemReader | None:
        """The reader for the shape of the packet at ``buf[pos:n]``, None when that shape is not a plain
        item's (or too little is there to tell). Readers are forgotten when the options change (collections
        negotiated)."""
        if n - pos < HEADER_LENGTH:
            return None
        if options is not self._options:
            self._options, self._readers, self._last = options, {}, None
        shape = (buf[pos + 1], buf[pos + 4])
        reader = self._readers.get(shape, _UNSEEN)
        if reader is not _UNSEEN:
            return reader  # type: ignore[return-value]
        if len(self._readers) >= READERS_KEPT:
            self._readers.clear()
        found = self._readers[shape] = compile_item_reader(options, *shape)
        return found


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
    (plan, _, nmeta_at, zero_seqno_at, flag_checks, key_rule, value_rule, _, _, _, datatypes) = found
    extras = ", ".join(f"x{i}" for i in range(len(plan.names)))
    document_key = bool(options.collections) and plan.variant is not None and plan.variant.key is KeyKind.DOCUMENT
    allowed = tuple(sorted(set(datatypes) & {0, 1}))  # plain: raw or JSON (and what the opcode allows)
    key_at = HEADER_LENGTH + extlen
    lines = [
        "def read(buf, pos, n, base, options):",
        f"    if n - pos < {key_at}:",
        "        return None",
        f"    magic, opcode, keylen, extlen, datatype, vbucket, total, opaque, cas, {extras}, = unpack(buf, pos)",
        f"    end = pos + {HEADER_LENGTH} + total",
        f"    if magic != {Magic.CLIENT_REQUEST:#04x} or opcode != {opcode} or extlen != {extlen} or end > n "
        f"or datatype not in {allowed!r} or keylen > total - {extlen}:",
        "        return None",
    ]
    checks = [f"x{nmeta_at}"] if nmeta_at >= 0 else []
    if zero_seqno_at >= 0:
        checks.append(f"not x{zero_seqno_at}")
    checks += [f"x{at} & {~mask & 0xFFFFFFFFFFFFFFFF}" for at, mask in flag_checks]
    # presence rules as decode's: 0 optional, 1 required, 2 forbidden
    checks += {0: [], 1: ["not keylen"], 2: ["keylen"]}[key_rule]
    checks += {0: [], 1: [f"end == pos + {key_at} + keylen"], 2: [f"end > pos + {key_at} + keylen"]}[value_rule]
    if checks:
        lines += [f"    if {' or '.join(checks)}:", "        return None"]
    # the message as decode() makes it, then as its check pass leaves it (a DOCUMENT, nothing found)
    lines += [
        "    raw = buf[pos:end]",
        f"    vo = {key_at} + keylen",
        "    msg = new(Message)",
        # every slot a plain item leaves as the blank message has it (those set below excepted)
        *(f"    msg.{name} = d{at}" for at, name in enumerate(MESSAGE_DEFAULTS) if name not in _ITEM_SETS),
        "    if keylen:",
    ]
    if document_key:  # a one-byte LEB128 collection id, and a key after it
        lines += [f"        collection_id = raw[{key_at}]",
                  "        if collection_id >= 0x80 or keylen == 1:",
                  "            return None",
                  f"        key = raw[{key_at + 1}:vo]",
                  "        msg._collection_id = collection_id",
                  f"        msg._key_start = {key_at + 1}"]
    else:
        lines += [f"        key = raw[{key_at}:vo]"]
    lines += [
        "        try:",
        "            if not key.decode().isprintable():",
        "                return None",
        "        except UnicodeDecodeError:",
        "            return None",
        "    value = raw[vo:]",
        "    if datatype and value:",
        "        try:",
        "            loads(value)",
        "        except ValueError:",
        "            return None",
        "    msg.raw = raw",
        "    msg.offset = base + pos",
        "    msg.options = options",
        "    msg.header = (magic, opcode, keylen, extlen, datatype, vbucket, total, opaque, cas)",
        "    msg.key_length = keylen",
        f"    msg.body_end = {HEADER_LENGTH} + total",
        "    msg.plan = plan",
        f"    msg._extras_values = ({extras},)",
        f"    msg.key_offset = {key_at}",
        "    msg.value_offset = vo",
        "    msg._reading = DOCUMENT",
        "    msg._document = value",
        "    return msg",
    ]
    namespace = {"unpack": item_codec(plan), "loads": orjson.loads, "plan": plan, "new": object.__new__,
                 "Message": Message, "DOCUMENT": ValueReading.DOCUMENT,
                 **{f"d{at}": value for at, value in enumerate(MESSAGE_DEFAULTS.values())}}
    reader: ItemReader = compiled(lines, f"item reader {opcode:#04x}/{extlen}", namespace)
    return reader
