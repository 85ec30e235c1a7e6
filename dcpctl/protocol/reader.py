"""Every packet read by a function compiled per header shape from the registry's plan.

Theory of operation. :func:`~dcpctl.protocol.message.interpret` reads any packet by the declarations,
looking its header shape's plan up and walking it. For each header shape (the plan key: dialect, magic,
opcode, extras length, and what else of the header selects the registry row) a function is generated from
the same plan, as construct compiles a declaration: the header and the extras in one ``struct`` unpack,
only the checks that shape's plan has, its constants folded in. It returns the
:class:`~dcpctl.protocol.message.Message` ``interpret`` would return, or None when the header or the extras
have something to say (the caller then interprets the packet, and the diagnostics come from there). The key
and value checks are the message's own check pass, shared with ``interpret``; only a stream item's
document (most of any capture) is read inline, and anything but its plain form (snappy, xattrs, a long
collection id, JSON that does not parse) goes to that check pass. :func:`decode` reads every packet this way
first.

A *plain* reader is the same function generated for a stream item's shape with one difference: where the
general reader hands an item to the check pass, it returns None, so that what it returns is a plain item: a
document key that is text (after a one-byte collection id when collections are on), a raw or JSON value
that parses, nothing to say. The capture decoder and the consumer read runs of those in place through
:class:`ItemReaders` and write them by the line templates of ``render.lines``.

Tests hold both to ``interpret`` (the same message, and None only where it has something to say or the item
is not plain) on every golden vector and on generated packets of every variant.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Final

import orjson

from dcpctl.protocol import frameinfo
from dcpctl.protocol.codegen import compiled
from dcpctl.protocol.constants import (
    ALT_MAGICS,
    DATATYPE_JSON,
    DATATYPE_SNAPPY,
    DATATYPE_XATTR,
    RESPONSE_MAGICS,
    Magic,
    Opcode,
)
from dcpctl.protocol.grammar import HEADER_LENGTH
from dcpctl.protocol.message import (
    DELETION_DATATYPES,
    HEADER,
    MESSAGE_DEFAULTS,
    DecodeOptions,
    Message,
    PlanKey,
    ValueReading,
    item_plan,
    plan_of,
)
from dcpctl.protocol.registry import DIALECTS, Dialect, KeyKind, Presence, ValueKind

# (buffer, position, end of the bytes, the buffer's stream offset, the options) -> the packet's message or None
Reader = Callable[[bytes, int, int, int, DecodeOptions], Message | None]
READERS_KEPT: Final = 64  # plain shapes kept per connection: a stream has a handful; more means a hostile mix
# Readers the process compiles of each kind (a few dozen shapes make a session); a shape first seen after that
# is interpreted, so a capture of endless odd shapes costs no more than interpreting it.
SHAPES_COMPILED: Final = 1024
# decode() compiles a shape's reader when it sees the shape again (a reader costs about as much to compile
# as a hundred packets to interpret): a packet of a shape seen once is interpreted. The shapes seen once are
# forgotten by the thousands.
SEEN_ONCE_KEPT: Final = 4096
_SEEN_ONCE: set[tuple[bool, PlanKey]] = set()
# Readers by shape, with collections off or unknown [0] and on [1]; general and plain.
_READERS: Final[tuple[dict[PlanKey, Reader | None], ...]] = ({}, {})
_PLAIN_READERS: Final[tuple[dict[PlanKey, Reader | None], ...]] = ({}, {})
_UNSEEN: Final = object()  # a shape no reader was asked for yet (None is kept: a shape without a reader)
_REQUEST: Final = int(Magic.CLIENT_REQUEST)


def reader_of(key: PlanKey, collections: bool | None) -> Reader | None:
    """The reader compiled for a header shape (:func:`~dcpctl.protocol.message.shape_key`) and the
    collections option, None when every packet of that shape has something to say (no declared layout of
    its extras length, an errata row, an unknown opcode), and at the shape's first sight (see
    ``SEEN_ONCE_KEPT``)."""
    readers = _READERS[1 if collections else 0]
    reader = readers.get(key, _UNSEEN)
    if reader is _UNSEEN:
        seen = (bool(collections), key)
        if seen not in _SEEN_ONCE:
            if len(_SEEN_ONCE) >= SEEN_ONCE_KEPT:
                _SEEN_ONCE.clear()
            _SEEN_ONCE.add(seen)
            return None
        _SEEN_ONCE.discard(seen)
        reader = _kept(readers, key, plain=False, collections=bool(collections))
    return reader  # type: ignore[return-value]


def plain_reader(dialect: Dialect, collections: bool | None, opcode: int, extlen: int) -> Reader | None:
    """The plain reader of a stream item's shape (see the module docstring), None for any other shape."""
    key = (dialect.name, _REQUEST, opcode, extlen, 0, 0, -1, 0)  # (an item's: see message.item_plan)
    readers = _PLAIN_READERS[1 if collections else 0]
    reader = readers.get(key, _UNSEEN)
    if reader is _UNSEEN:
        reader = _kept(readers, key, plain=True, collections=bool(collections)) \
            if item_plan(dialect, opcode, extlen) is not None else None
    return reader  # type: ignore[return-value]


def _kept(readers: dict[PlanKey, Reader | None], key: PlanKey, *, plain: bool, collections: bool) -> Reader | None:
    if len(readers) >= SHAPES_COMPILED:
        return None
    reader = readers[key] = compile_reader(key, plain=plain, collections=collections)
    return reader


class ItemReaders:
    """A connection's plain readers, made when a shape is first seen (None for a shape that is not a plain
    item's). :meth:`read` is the plain item at ``buf[pos:n]`` through the reader of its shape; an item whose
    body is over ``max_body_length`` is left to the framer, which says what is wrong with it."""

    def __init__(self, max_body_length: int) -> None:
        self._readers: dict[tuple[int, int], Reader | None] = {}
        self._options: DecodeOptions | None = None  # what the readers at hand read with
        self._last: Reader | None = None  # items come in long runs of one shape
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

    def _at(self, buf: bytes, pos: int, n: int, options: DecodeOptions) -> Reader | None:
        """The reader for the shape of the packet at ``buf[pos:n]``, None when that shape is not a plain
        item's (or too little is there to tell). Readers are looked up again when the options change
        (collections negotiated)."""
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
        found = self._readers[shape] = plain_reader(options.dialect, options.collections, *shape)
        return found


def compile_reader(key: PlanKey, *, plain: bool = False, collections: bool = False) -> Reader | None:
    """The reader of one header shape, plain or not (see the module docstring), for packets read with
    collections on or not; None when that shape has no reader. Readers are pure functions of these: each is
    compiled once per process."""
    plan = plan_of(key)
    _, magic, opcode, extlen, word, type_byte, byte0, has_value = key
    variant, spec = plan.variant, plan.spec
    if variant is None or spec is None or variant.note is not None or plan.extras_size != extlen:
        return None  # interpret says what is wrong with the extras
    document = variant.value is ValueKind.DOCUMENT and spec.type_field == "datatype"  # a stream item's
    if plain and not document:
        return None
    alt, layout = magic in ALT_MAGICS, plan.unpack is not None
    extras = "".join(f"x{i}, " for i in range(len(plan.names))) if layout else ""
    # where the key starts, after the frame infos (their length is the packet's) and the extras; the lengths
    # in the header as unpacked (an alternative magic's key length word holds the frame infos' length too)
    ka, before_key, lengths = (f"(fe + {HEADER_LENGTH + extlen})", f"fe + {extlen}", "kl") if alt else \
        (str(HEADER_LENGTH + extlen), str(extlen), "keylen")
    has_value_expression = f"total > {before_key} + keylen"
    lines = [
        "def read(buf, pos, n, base, options):",
        f"    if n - pos < {HEADER_LENGTH if alt else HEADER_LENGTH + extlen}:",
        "        return None",
        f"    magic, opcode, {lengths}, extlen, datatype, word, total, opaque, cas, {'' if alt else extras}= "
        "unpack(buf, pos)",
        f"    end = pos + {HEADER_LENGTH} + total",
    ]
    shape = [f"magic != {magic}", f"opcode != {opcode}", f"extlen != {extlen}", "end > n"]
    if magic in RESPONSE_MAGICS:
        shape.append(f"word != {word}")
    if DIALECTS[key[0]].layout_authoritative:
        shape.append(f"datatype != {type_byte}")
    if alt:
        lines += [f"    if {' or '.join(shape)}:", "        return None", "    fe, keylen = kl >> 8, kl & 0xFF"]
        shape = []
    shape.append(f"{before_key} + keylen > total")  # the key runs past the body
    if byte0 >= 0:
        shape.append(f"buf[pos + {ka} - 1] != {byte0}")
    if DIALECTS[key[0]].layout_authoritative:
        shape.append(f"({has_value_expression}) != {bool(has_value)}")
    lines += [f"    if {' or '.join(shape)}:", "        return None"]
    if alt and layout:
        lines += [f"    {extras}= unpack_extras(buf, pos + {ka} - {extlen})"]
    checks = [f"x{plan.nmeta_index}"] if plan.nmeta_index >= 0 else []
    if plan.by_seqno_index >= 0:
        checks.append(f"not x{plan.by_seqno_index}")
    checks += [f"x{plan.names.index(name)} & {~mask & 0xFFFFFFFFFFFFFFFF}" for name, mask in plan.flag_checks]
    checks += {Presence.OPTIONAL: [], Presence.REQUIRED: ["not keylen"], Presence.FORBIDDEN: ["keylen"]}[
        plan.key_rule]
    checks += {Presence.OPTIONAL: [], Presence.REQUIRED: [f"not ({has_value_expression})"],
               Presence.FORBIDDEN: [has_value_expression]}[plan.value_rule]
    if plain:  # raw or JSON only (a deletion's JSON datatype is refused below)
        checks.append(f"datatype > {DATATYPE_JSON}")
    elif plan.check_datatype:
        checks.append(f"datatype > {DATATYPE_JSON | DATATYPE_SNAPPY | DATATYPE_XATTR}")
    if opcode == Opcode.DCP_DELETION and plan.by_seqno_index >= 0:
        checks.append(f"datatype not in {tuple(sorted(DELETION_DATATYPES))!r}")
    if checks:
        lines += [f"    if {' or '.join(checks)}:", "        return None"]
    lines += ["    raw = buf[pos:end]"]
    if alt:
        lines += ["    if fe:",
                  f"        infos, found = parse_frames(raw, {HEADER_LENGTH}, {HEADER_LENGTH} + fe, "
                  f"{magic in RESPONSE_MAGICS})",
                  "        if found:",
                  "            return None"]
    # the message as interpret() makes it; every slot the lines below do not set as the blank message has it
    kept = {"plan", *(("_extras_values",) if layout else ()), *(("framing_extras_length",) if alt else ()),
            *(("_reading", "_document") if plain else ())}
    lines += [
        "    msg = new(Message)",
        *(f"    msg.{name} = d{at}" for at, name in enumerate(MESSAGE_DEFAULTS) if name not in kept),
        "    msg.raw = raw",
        "    msg.offset = base + pos",
        "    msg.options = options",
        f"    msg.header = (magic, opcode, {lengths}, extlen, datatype, word, total, opaque, cas)",
        "    msg.key_length = keylen",
        f"    msg.body_end = {HEADER_LENGTH} + total",
        "    msg.plan = plan",
        *([f"    msg._extras_values = ({extras})"] if layout else []),
        f"    msg.key_offset = {ka}",
        f"    msg.value_offset = vo = {ka} + keylen",
    ]
    if alt:
        lines += ["    msg.framing_extras_length = fe", "    if fe:", "        msg.frame_infos = infos"]
    if not document:
        lines += ["    msg._check()", "    return msg"]
    else:
        lines += _document_lines(ka, plain=plain, collection_key=collections and variant.key is KeyKind.DOCUMENT)
    namespace = {"unpack": _codec(plan, combined=not alt), "unpack_extras": plan.unpack, "plan": plan,
                 "parse_frames": frameinfo.parse, "loads": orjson.loads, "new": object.__new__,
                 "Message": Message, "DOCUMENT": ValueReading.DOCUMENT,
                 **{f"d{at}": value for at, value in enumerate(MESSAGE_DEFAULTS.values())}}
    name = f"{'plain ' if plain else ''}reader {key[0]} {magic:#04x}/{opcode:#04x}/{extlen}" \
        f"{' collections' if collections else ''}"
    reader: Reader = compiled(lines, name, namespace)
    return reader


def _document_lines(ka: str, *, plain: bool, collection_key: bool) -> list[str]:
    """A stream item's key and document read inline, as the check pass reads their plain form; anything else
    goes to the check pass (a plain reader returns None instead). ``collection_key``: the key starts with a
    collection id."""
    fall = ["return None"] if plain else ["msg._check()", "return msg"]
    lines = [] if plain else [f"    if datatype & {DATATYPE_SNAPPY | DATATYPE_XATTR}:",
                              *(f"        {line}" for line in fall)]  # (a plain reader refused those)
    key = []  # under "if keylen:"
    if collection_key:  # a one-byte LEB128 collection id, and a key after it
        key += [f"    cid = raw[{ka}]",
                f"    if cid >= 0x80{' or keylen == 1' if plain else ''}:",
                *(f"        {line}" for line in fall)]
    if plain:
        key += ["    try:",
                f"        if not raw[{ka}{' + 1' if collection_key else ''}:vo].decode().isprintable():",
                "            return None",
                "    except UnicodeDecodeError:",
                "        return None"]
    if key:
        lines += ["    if keylen:", *(f"    {line}" for line in key)]
    lines += ["    value = raw[vo:]",
              f"    if datatype & {DATATYPE_JSON} and value:",
              "        try:",
              "            loads(value)",
              "        except ValueError:",
              *(f"            {line}" for line in fall)]
    if collection_key:
        lines += ["    if keylen:", "        msg._collection_id = cid", f"        msg._key_start = {ka} + 1"]
    return [*lines, "    msg._reading = DOCUMENT", "    msg._document = value", "    return msg"]


def _codec(plan: Any, *, combined: bool) -> Any:
    """The header, and the extras after it when ``combined``, as one ``struct`` (what the reader unpacks)."""
    if not combined or plan.unpack is None:
        return HEADER.unpack_from
    extras_format = plan.unpack.__self__.format
    assert extras_format.startswith(">"), extras_format  # the wire is big-endian throughout
    return struct.Struct(HEADER.format + extras_format[1:]).unpack_from
